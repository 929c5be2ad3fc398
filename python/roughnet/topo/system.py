"""Running `ip`, `tc`, `nft`, `ethtool`, `sysctl` and ending our own processes.

Owns the subprocess calls of ``topo`` and ``links`` (argument lists only, never
a shell; a failure becomes a RoughnetError naming the command and its stderr),
namespace existence checks and deletion, and ending recorded processes by pid
after checking their start time.  It knows nothing about runs or ledgers.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import RoughnetError, TopologyError
from .ledgerfile import process_alive

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
#: Seconds between SIGTERM and SIGKILL when stopping processes.
TERM_GRACE_S = 2.0
COMMAND_TIMEOUT_S = 30.0
#: Commands run at once by ``run_all`` (ip, tc, nft and setns threads for many namespaces): the processes
#: are short and mostly wait on the kernel, so a few at a time keep two cores busy.
PARALLEL_COMMANDS = 4


_hurry = threading.Event()


def hurry() -> None:
    """From now on, processes are killed at once (SIGTERM then SIGKILL without a grace): a second Ctrl-C or
    SIGTERM asked for a quick teardown (the CLI's signal handler)."""
    _hurry.set()


def hurrying() -> bool:
    return _hurry.is_set()


def run_cmd(
    argv: Sequence[str],
    what: str,
    *,
    input: str | None = None,
    check: bool = True,
    timeout: float = COMMAND_TIMEOUT_S,
    error: type[RoughnetError] = TopologyError,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no shell), capture its output; on failure raise ``error`` naming ``what``."""
    argv = [str(a) for a in argv]
    log.debug("exec %s", argv)
    try:
        proc = _run_to_end(argv, input, timeout)
    except FileNotFoundError as e:
        raise error(f"{what}: {argv[0]} is not installed (expected it on PATH; Debian: apt-get install iproute2 "
                    f"nftables ethtool procps)") from e
    except subprocess.TimeoutExpired as e:
        raise error(f"{what}: `{' '.join(argv)}` did not finish within {timeout:.0f} s") from e
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().replace("\n", "; ")
        raise error(f"{what} failed: `{' '.join(argv)}` exited {proc.returncode}: {msg or '(no message)'}")
    return proc


#: The signals the CLI turns into Interrupted (cli._install_signal_handlers).
_INTERRUPTS = {signal.SIGINT, signal.SIGTERM}


def _run_to_end(argv: list[str], input: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    """subprocess.run, except that an interrupt cannot leave the command running on its own: Ctrl-C and SIGTERM
    are held while it starts (an exception raised inside Popen() after the fork, while it reads the exec result,
    leaves a child nobody waits for: an `ip netns add` that then makes a namespace after the teardown looked;
    found by bench/self_chaos.py), then delivered once it is ours to kill and wait for.

    Held twice: this thread's signal mask, and, on the main thread (where Python runs signal handlers), handlers
    that only note the signal. The mask alone is not enough in a process with other threads (roughnet's samplers
    and event thread, pytest-xdist's): the kernel hands a process-directed signal to a thread that does not block
    it, and Python then runs the handler on the main thread at once, mask or not."""
    pending: list[int] = []
    saved: dict[int, object] = {}
    proc: subprocess.Popen | None = None
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # this thread's mask as it is (nothing changed)
    try:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
            _hold_handlers(pending, saved)
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            # Unblocked while the noting handlers still stand (a held signal is noted), then the handlers
            # restored, whatever raised: a handler that ran between two of these steps must leave neither
            # the mask nor a noting handler behind (seen in a CI simulation under load).
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            _restore_handlers(saved)
    except BaseException:
        if proc is not None:  # an interrupt after the command started: it goes with us
            with proc:
                proc.kill()
                proc.wait()
        raise
    with proc:
        try:
            for signum in dict.fromkeys(pending):  # a signal the held handlers noted, delivered again now
                signal.raise_signal(signum)
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        except BaseException:  # an interrupt: the command goes with us
            proc.kill()
            proc.wait()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _hold_handlers(pending: list[int], saved: dict[int, object]) -> None:
    """On the main thread: SIGINT's and SIGTERM's handlers replaced by one that notes the signal in ``pending``;
    the handlers replaced go into ``saved`` before any is (on another thread, where Python neither runs nor may
    set handlers, nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return
    saved.update({s: signal.getsignal(s) for s in _INTERRUPTS})
    for s in _INTERRUPTS:
        signal.signal(s, lambda signum, frame: pending.append(signum))


def _restore_handlers(saved: dict[int, object], start: int = 0) -> None:
    """Every handler in ``saved`` put back, even if a handler put back first runs and raises meanwhile."""
    items = list(saved.items())
    if start >= len(items):
        return
    try:
        signal.signal(items[start][0], items[start][1])  # type: ignore[arg-type]
    finally:
        _restore_handlers(saved, start + 1)


def ns_exec(ns: str, argv: Sequence[str]) -> list[str]:
    """The argument list running ``argv`` inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *argv]


def ns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def list_namespaces(prefix: str = "") -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))
    except FileNotFoundError:
        return []


def netns_pids(ns: str) -> list[int]:
    """Pids of processes whose network namespace is ``ns`` (empty if it is gone)."""
    return pids_in_namespaces([ns]).get(ns, [])


def pids_in_namespaces(names: Iterable[str]) -> dict[str, list[int]]:
    """Pids of the processes in each of the namespaces ``names`` (as `ip netns pids` finds them: a process
    whose /proc/<pid>/ns/net is that namespace), from one pass over /proc; gone namespaces map to []."""
    out: dict[str, list[int]] = {}
    by_inode: dict[tuple[int, int], str] = {}
    for name in names:
        out[name] = []
        try:
            st = (NETNS_DIR / name).stat()
        except OSError:
            continue
        by_inode[(st.st_dev, st.st_ino)] = name
    if not by_inode:
        return out
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        name = by_inode.get((st.st_dev, st.st_ino))
        if name is not None:
            out[name].append(int(entry.name))
    return out


def delete_ns(name: str) -> bool:
    """Delete namespace ``name`` (its interfaces go with it); False if it was already gone."""
    if not ns_exists(name):
        return False
    proc = run_cmd(["ip", "netns", "delete", name], f"deleting namespace {name}", check=False)
    if proc.returncode != 0 and ns_exists(name):
        raise TopologyError(f"deleting namespace {name} failed: {proc.stderr.strip()}")
    return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop_processes(
    procs: Iterable[tuple[int, int | None]],
    grace_s: float = TERM_GRACE_S,
    children: dict[int, subprocess.Popen] | None = None,
) -> list[int]:
    """End processes given as (pid, start time): SIGTERM, then SIGKILL after ``grace_s``.

    Only a pid whose start time still matches is signalled (a reused pid is
    someone else's).  ``children``, our own Popen objects by pid, are reaped.
    Returns the pids that were signalled.
    """
    children = children or {}
    if _hurry.is_set():
        grace_s = 0.0
    live = [(pid, st) for pid, st in procs if process_alive(pid, st)]
    for pid, _ in live:
        log.debug("SIGTERM %d", pid)
        _signal(pid, signal.SIGTERM)

    def still(pid: int, st: int | None) -> bool:
        child = children.get(pid)
        if child is not None:
            return child.poll() is None
        return process_alive(pid, st)

    deadline = time.monotonic() + grace_s
    waiting = list(live)
    while waiting and time.monotonic() < deadline and not _hurry.is_set():
        time.sleep(0.02)
        waiting = [(p, s) for p, s in waiting if still(p, s)]
    for pid, st in waiting:
        if process_alive(pid, st):
            log.debug("SIGKILL %d", pid)
            _signal(pid, signal.SIGKILL)
    for pid, _ in waiting:
        child = children.get(pid)
        if child is not None:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("process %d did not exit after SIGKILL", pid)
    return [pid for pid, _ in live]


#: How long ``end_processes`` waits, after SIGKILL, for each process to be gone from /proc: dead and collected
#: by its parent (for an orphan, pid 1, which may collect late: a few seconds on some VMs' init).
GONE_WAIT_S = 10.0


def proc_state(pid: int) -> tuple[str, int] | None:
    """(state, start time) of ``pid`` from /proc/<pid>/stat, zombies included; None when no such pid exists."""
    try:
        raw = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    if len(rest) < 20:
        return None
    return rest[0], int(rest[19])


def _parent(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{int(pid)}/stat").read_text()
        return int(raw[raw.rfind(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def end_processes(
    procs: Iterable[tuple[int, int | None]],
    grace_s: float = TERM_GRACE_S,
    gone_wait_s: float = GONE_WAIT_S,
) -> tuple[dict[int, str], dict[int, str]]:
    """End processes given as (pid, start time) and return only once they are gone (bounded).

    Only a pid whose start time still matches is signalled (a reused pid is someone else's): SIGTERM, then
    SIGKILL to those still running after ``grace_s``; then wait, at most ``gone_wait_s``, until each is gone
    from /proc (exited and collected by its parent).  Returns ``(ended, left)``: pid -> how it ended
    ("SIGTERM", "SIGKILL after 2.0 s") for every process signalled, and pid -> why it is still there for those
    that are not gone at the end ("still running after SIGKILL", "exited, not yet collected by its parent
    pid N").  A process that was already dead (a zombie) is waited for too, but not signalled.
    """
    mine = {(pid, st) for pid, st in procs if st is not None}
    if _hurry.is_set():
        grace_s = 0.0

    def exists(pid: int, st: int) -> bool:  # in /proc with the same start time, zombie or not
        cur = proc_state(pid)
        return cur is not None and cur[1] == st

    def running(pid: int, st: int) -> bool:
        cur = proc_state(pid)
        return cur is not None and cur[1] == st and cur[0] not in ("Z", "X")

    live = sorted((p, s) for p, s in mine if running(p, s))
    ended: dict[int, str] = {}
    for pid, _ in live:
        log.debug("SIGTERM %d", pid)
        _signal(pid, signal.SIGTERM)
        ended[pid] = "SIGTERM"
    t_term = time.monotonic()
    deadline = t_term + grace_s
    waiting = list(live)
    while waiting and time.monotonic() < deadline and not _hurry.is_set():
        time.sleep(0.02)
        waiting = [(p, s) for p, s in waiting if running(p, s)]
    for pid, st in waiting:
        if running(pid, st):
            log.debug("SIGKILL %d", pid)
            _signal(pid, signal.SIGKILL)
            ended[pid] = f"SIGKILL after {time.monotonic() - t_term:.1f} s"
    deadline = time.monotonic() + gone_wait_s
    remaining = [(p, s) for p, s in mine if exists(p, s)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = [(p, s) for p, s in remaining if exists(p, s)]
    left: dict[int, str] = {}
    for pid, st in remaining:
        if running(pid, st):
            left[pid] = f"still running {gone_wait_s:g} s after SIGKILL"
        else:
            left[pid] = f"exited, not yet collected by its parent pid {_parent(pid)}"
    return ended, left


def run_all(jobs: Iterable[Callable[[], object]]) -> list[object]:
    """Run ``jobs`` a few at a time (PARALLEL_COMMANDS) and return their results in order; all finish, then
    the first error (in job order) is raised."""
    jobs = list(jobs)
    if len(jobs) <= 1:
        return [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=PARALLEL_COMMANDS, thread_name_prefix="rn-cmd") as pool:
        futures = [pool.submit(job) for job in jobs]
        errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e
    return [f.result() for f in futures]
