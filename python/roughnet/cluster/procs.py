"""The host-side mechanics of a cluster: daemons, mount namespaces, cgroups, sysctls, waiting.

Owns starting the cluster's long-lived processes so that they outlive `cluster up`
(their own session, output to a log file, recorded in the ledger with pid, start time,
role and node), each node's mount namespace (a holder process made with
``ip netns exec <node-ns> unshare --mount --propagation private``, bind mounts over the
host paths the components hard-code, and ``nsenter`` into it for containerd, the kubelet
and ctr), the cgroup root of each kubelet in every cgroup hierarchy, the host-wide sysctls
the kubelet writes, and polling helpers. Argument lists only; nothing here decides the
order of things (``up`` and ``down`` do).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..topo.ledger import process_alive, process_start_time
from .configs import DAEMON_PATH
from .state import ClusterError

log = logging.getLogger(__name__)

#: The host-wide sysctls the kubelet sets at start (pkg/kubelet/cm setupKernelTunables, v1.32):
#: recorded in the ledger with their values before the first kubelet starts, restored at down.
KUBELET_SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
                   "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
PROC_SYS = Path("/proc/sys")
CGROUP_FS_TYPES = ("cgroup", "cgroup2")

T = TypeVar("T")


def daemon_env(extra: dict[str, str] | None = None, bin_dir: Path | None = None) -> dict[str, str]:
    path = DAEMON_PATH if bin_dir is None else f"{bin_dir}:{DAEMON_PATH}"
    env = {"PATH": path, "HOME": "/root", "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def spawn(ledger, argv: Sequence[str], log_path: Path, *, role: str, node: str | None = None,
          ns: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``argv`` detached (own session, stdin /dev/null, output appended to ``log_path``), ledgered.

    The pid is recorded right after the fork (it is not known before); a process that
    outlives a crash in between still runs in one of the cluster's namespaces, which
    `down` and `roughnet clean` search for strays.
    """
    argv = [str(a) for a in argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=env or daemon_env())
        except OSError as e:
            raise ClusterError(f"starting {role}{f' on {node}' if node else ''} failed: {argv[0]}: {e}") from e
    ledger.add("process", pid=proc.pid, start_time=process_start_time(proc.pid), ns=ns, argv0=_argv0(argv),
               role=role, node=node, log=str(log_path))
    log.info("started %s%s: pid %d (%s)", role, f" on {node}" if node else "", proc.pid, " ".join(argv[:8]))
    return proc


def _argv0(argv: Sequence[str]) -> str:
    # Skip the namespace wrappers: the interesting name is the program they exec.
    skip = {"ip", "netns", "exec", "nsenter", "unshare", "--"}
    for a in argv:
        if a.startswith("-") or a in skip or a.startswith("rn-") or a.isdigit():
            continue
        return os.path.basename(a)
    return os.path.basename(argv[0])


def run(argv: Sequence[str], what: str, timeout: float = 120, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(a) for a in argv]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL, env=env)
    except FileNotFoundError as e:
        raise ClusterError(f"{what}: {argv[0]} is not installed") from e
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{what}: `{' '.join(argv)}` did not finish within {timeout:.0f} s") from e
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()[-600:].replace("\n", "; ")
        raise ClusterError(f"{what} failed: `{' '.join(argv)}` exited {proc.returncode}: {msg or '(no message)'}")
    return proc


def wait_for(check: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.5,
             alive: Callable[[], str | None] | None = None) -> T:
    """Call ``check`` until it returns something truthy; ClusterError after ``timeout_s``.

    ``alive`` (optional) returns a reason when something the wait depends on died, which
    ends the wait at once with that reason.
    """
    deadline = time.monotonic() + timeout_s
    last_err = ""
    while True:
        try:
            got = check()
        except ClusterError as e:
            got, last_err = None, str(e)
        if got:
            return got
        if alive is not None:
            dead = alive()
            if dead:
                raise ClusterError(f"{what}: {dead}")
        if time.monotonic() >= deadline:
            raise ClusterError(f"{what}: not done within {timeout_s:.0f} s{f' ({last_err})' if last_err else ''}")
        time.sleep(interval_s)


def log_tail(path: str | Path | None, lines: int = 8) -> str:
    if not path:
        return ""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(ln[-300:] for ln in tail)


# ---- a node's mount namespace -------------------------------------------------------------------


def holder_argv(ns: str) -> list[str]:
    """The process holding a node's mount namespace: private propagation, inside the node's netns.

    ``nsenter --net`` enters the node's network namespace and ``unshare --mount
    --propagation private`` makes a mount namespace whose mounts never reach the host.
    containerd and the kubelet both enter it (they must share one: a kubelet in another
    mount namespace gives pods empty token directories). Not ``ip netns exec``: it remounts
    /sys for the namespace, and the cgroup hierarchies under /sys/fs/cgroup go with the old
    /sys (the kubelet then fails with "failed to find cgroup mounts").
    """
    return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--propagation", "private", "--",
            "sleep", "infinity"]


def in_holder(holder_pid: int, argv: Sequence[str]) -> list[str]:
    """``argv`` in the holder's mount and network namespaces (nsenter execs it: same pid)."""
    return ["nsenter", "-t", str(holder_pid), "-m", "-n", "--", *[str(a) for a in argv]]


def bind_mount(holder_pid: int, source: Path, target: str) -> None:
    run(["nsenter", "-t", str(holder_pid), "-m", "--", "mount", "--no-mtab", "--bind", str(source), target],
        f"bind-mounting {source} over {target} in the mount namespace of pid {holder_pid}")


def holder_mounts(holder_pid: int) -> list[str]:
    """Mount points in the holder's mount namespace (from /proc/<pid>/mountinfo)."""
    try:
        text = Path(f"/proc/{holder_pid}/mountinfo").read_text()
    except OSError:
        return []
    return [line.split()[4] for line in text.splitlines() if len(line.split()) > 4]


def host_mounts() -> list[str]:
    """Mount points of this process's mount namespace (the host's, for roughnet's CLI)."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    return [line.split()[4].replace("\\040", " ") for line in text.splitlines() if len(line.split()) > 4]


# ---- sysctls ------------------------------------------------------------------------------------


def sysctl_path(key: str) -> Path:
    if not all(part and part.replace("_", "").isalnum() for part in key.split(".")):
        raise ClusterError(f"sysctl key {key!r} is not a plain dotted name")
    return PROC_SYS / key.replace(".", "/")


def read_sysctl(key: str) -> str:
    try:
        return sysctl_path(key).read_text().strip()
    except OSError as e:
        raise ClusterError(f"cannot read sysctl {key}: {e}") from e


def write_sysctl(key: str, value: str) -> None:
    try:
        sysctl_path(key).write_text(f"{value}\n")
    except OSError as e:
        raise ClusterError(f"cannot restore sysctl {key} to {value}: {e}") from e


# ---- cgroups ------------------------------------------------------------------------------------


def cgroup_mounts() -> list[tuple[str, str]]:
    """(mount point, fs type) of every cgroup v1 hierarchy and the v2 (unified) one, from /proc/self/mounts."""
    out = []
    try:
        text = Path("/proc/self/mounts").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in CGROUP_FS_TYPES:
            out.append((parts[1], parts[2]))
    return out


def _cgroup_dir(mount: str, root: str) -> Path:
    rel = root.strip("/")
    if not rel or ".." in rel.split("/") or not rel.startswith("rn-"):
        raise ClusterError(f"cgroup root {root!r} is not one of roughnet's (/rn-...)")
    return Path(mount) / rel


def make_cgroup(root: str) -> list[Path]:
    """Create ``root`` in every cgroup v1 hierarchy (the kubelet refuses a cgroupRoot that is missing).

    cpuset needs its cpus and mems before anything can join: copied from the hierarchy's root.
    """
    made = []
    for mount, fstype in cgroup_mounts():
        if fstype != "cgroup":
            continue
        d = _cgroup_dir(mount, root)
        d.mkdir(exist_ok=True)
        made.append(d)
        for f in ("cpuset.cpus", "cpuset.mems"):
            src = Path(mount) / f
            if src.exists() and not (d / f).read_text().strip():
                (d / f).write_text(src.read_text())
    return made


def cgroup_dirs(root: str) -> list[Path]:
    """Every directory at or below ``root`` in every hierarchy, deepest first."""
    out: list[Path] = []
    for mount, _ in cgroup_mounts():
        d = _cgroup_dir(mount, root)
        if not d.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(d, topdown=False):
            out.append(Path(dirpath))
    out.sort(key=lambda p: len(p.parts), reverse=True)
    return out


def cgroup_pids(root: str) -> set[int]:
    pids: set[int] = set()
    for d in cgroup_dirs(root):
        try:
            pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            continue
    return pids


def kill_cgroup(root: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process in ``root``'s cgroups (the pods' containers) until none is left."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        pids = cgroup_pids(root)
        if not pids:
            return killed
        if time.monotonic() > deadline:
            raise ClusterError(f"processes {sorted(pids)} stay in cgroup {root} after SIGKILL")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def remove_cgroup(root: str, timeout_s: float = 10.0) -> list[Path]:
    """rmdir ``root`` and everything below it in every hierarchy (deepest first; retried while busy)."""
    removed: list[Path] = []
    deadline = time.monotonic() + timeout_s
    while True:
        busy = []
        for d in cgroup_dirs(root):
            try:
                d.rmdir()
                removed.append(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                busy.append(f"{d}: {e.strerror}")
        if not busy:
            return removed
        if time.monotonic() > deadline:
            raise ClusterError(f"cannot remove cgroup directories: {'; '.join(busy[:4])}")
        time.sleep(0.2)


# ---- processes ----------------------------------------------------------------------------------


def stop(procs: Iterable[tuple[int, int | None]], grace_s: float) -> list[int]:
    """SIGTERM the live ones (same start time), SIGKILL after ``grace_s``; wait until gone. Returns those signalled."""
    live = [(p, s) for p, s in procs if process_alive(p, s)]
    for pid, _ in live:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    waiting = live
    while waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap(p for p, _ in waiting)
        waiting = [(p, s) for p, s in waiting if process_alive(p, s)]
    for pid, st in waiting:
        if process_alive(pid, st):
            _kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap(p for p, _ in waiting)
        waiting = [(p, s) for p, s in waiting if process_alive(p, s)]
    return [p for p, _ in live]


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pids: Iterable[int]) -> None:
    """Reap those of ``pids`` that are our own exited children (daemons this process started)."""
    for pid in list(pids):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def describe_dead(entries: Iterable[dict[str, Any]]) -> str | None:
    """A reason naming the first recorded process that is gone, with its log's tail; None if all run."""
    for e in entries:
        if e.get("kind") != "process":
            continue
        if not process_alive(int(e["pid"]), e.get("start_time")):
            where = f" on {e['node']}" if e.get("node") else ""
            return f"{e.get('role', e.get('argv0'))}{where} (pid {e['pid']}) exited: {log_tail(e.get('log'))}"
    return None
