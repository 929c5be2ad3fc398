"""One user process of a run: its working folder, its user and environment, starting it, readiness, signals,
stopping it and judging its final state (docs/applications.md).

A command runs as ``ip netns exec <ns> setpriv --reuid U --regid G --clear-groups -- ARGV`` (no setpriv for
root), so the pid roughnet keeps is the program's own.  ``ip netns exec`` bind-mounts the files of
``/etc/netns/<ns>/`` over ``/etc`` for the program: roughnet writes a ``hosts`` there that names every host
of the scenario (as seen from this one) and a ``resolv.conf`` that fails fast (no DNS inside the
namespaces).  An image runs under runc (``apps.oci``) with the same files bind-mounted.  stdout and
stderr go to files of the run's artifacts, opened by roughnet: the program never blocks on a pipe.
The working folder is ``/var/lib/roughnet/work/<token>/<name>`` (owned by the process's user, mode 0700),
copied into the artifacts when the process ends, and removed with the run.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PreflightError, RoughnetError
from ..runspec import Process
from ..services.handle import UsageSampler
from ..topo.ledger import process_start_time

log = logging.getLogger(__name__)

WORK_ROOT = Path("/var/lib/roughnet/work")
#: PATH of a user process (after the folder of the Python roughnet runs in).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Largest working folder copied into the artifacts when the process ends.
COPY_LIMIT_BYTES = 512 * 2**20


class ProcessFailed(RoughnetError):
    """A user process did not become ready, or could not be started."""


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    name: str


def resolve_user(spec: str | None) -> User:
    """The user a process runs as: ``spec`` (a name, "uid" or "uid:gid"); unset: SUDO_UID's user, else nobody."""
    if spec is None:
        sudo = os.environ.get("SUDO_UID")
        if sudo and sudo.isdigit() and int(sudo) != 0:
            spec = sudo
        else:
            spec = "nobody"
    if re.fullmatch(r"\d+(:\d+)?", spec):
        uid_s, _, gid_s = spec.partition(":")
        uid = int(uid_s)
        try:
            pw = pwd.getpwuid(uid)
            name, gid = pw.pw_name, pw.pw_gid
        except KeyError:
            name, gid = uid_s, uid
        return User(uid, int(gid_s) if gid_s else gid, name)
    try:
        pw = pwd.getpwnam(spec)
    except KeyError:
        raise PreflightError(f"process user {spec!r}: no such user on this machine; expected a user name from "
                             f"/etc/passwd or a numeric uid[:gid]") from None
    return User(pw.pw_uid, pw.pw_gid, pw.pw_name)


def search_path() -> str:
    """PATH of a user process: the folder of roughnet's Python first (its packages: paho-mqtt, pyzmq, ...)."""
    return f"{Path(sys.executable).parent}:{SYSTEM_PATH}"


def find_program(p: Process) -> str | None:
    """The program a command process runs, or None when it cannot be found (preflight's check)."""
    prog = p.command[0]
    if "/" in prog:
        if prog.startswith("/"):
            return prog if os.access(prog, os.X_OK) else None
        # relative to the working folder: one of its files (copied there) or a path below it
        for f in p.files:
            if Path(f).name == Path(prog).name and os.path.normpath(prog) == Path(f).name:
                return p.path(f)
        return None
    return shutil.which(prog, path=search_path())


def can_execute(user: User, path: str) -> bool:
    """Whether ``user`` may run ``path``: search permission on every folder up to it (symlinks followed) and
    execute permission on the file, by the owner, group and other bits (as the kernel checks them)."""
    import stat

    def allowed(st: os.stat_result, bit_owner: int, bit_group: int, bit_other: int) -> bool:
        if user.uid == 0:
            return True
        if st.st_uid == user.uid:
            return bool(st.st_mode & bit_owner)
        if st.st_gid == user.gid:
            return bool(st.st_mode & bit_group)
        return bool(st.st_mode & bit_other)

    real = os.path.realpath(path)
    parts = Path(real).parents
    for folder in reversed(list(parts)):
        if not allowed(os.stat(folder), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            return False
    st = os.stat(real)
    return allowed(st, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def preflight(processes: list[Process]) -> None:
    """What this machine must have for the processes: their users and programs (images: apps.images)."""
    for p in processes:
        user = resolve_user(p.user)
        if p.image_ref is not None:
            raise PreflightError(f"process {p.name!r}: image_ref {p.image_ref!r} is an image a cluster pulls; this "
                                 f"backend runs image archives on this machine: `image = FILE` (`skopeo copy "
                                 f"docker://REF oci-archive:FILE` makes one), or run it with --backend kubernetes")
        if p.command:
            prog = find_program(p)
            if prog is None:
                raise PreflightError(f"process {p.name!r}: command {p.command[0]!r} not found on this machine "
                                     f"(looked in PATH={search_path()}, or among its files for a relative path); "
                                     f"expected an installed program, an absolute path, or a file in `files`")
            if not can_execute(user, prog):
                raise PreflightError(
                    f"process {p.name!r}: user {user.name} cannot run {prog} (resolved to "
                    f"{os.path.realpath(prog)}: a folder on the way or the file is not open to that user); "
                    f"expected a program that user may run, or `user` set to one who may (user = \"root\" "
                    f"runs it as root)")



_CLK_TCK = os.sysconf("SC_CLK_TCK")


def read_tree_usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, RSS bytes) of ``pid`` and its descendants (a shell's children, runc's container): each
    live process's own and reaped children's CPU (utime, stime, cutime, cstime), and the sum of their RSS;
    None when ``pid`` is gone.  A child reaped between two samples moves into its parent's cutime, so the
    total only grows (UsageSampler keeps the largest)."""
    from .sockdiag import process_tree

    tree = process_tree(pid)
    if not tree:
        return None
    cpu, rss, alive = 0.0, 0, False
    for p in tree:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) < 15 or rest[0] in ("Z", "X"):
            continue
        alive = True
        cpu += sum(int(x) for x in rest[11:15]) / _CLK_TCK  # fields 14-17: utime, stime, cutime, cstime
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
                break
    return (cpu, rss) if alive else None


def _signum(name: str) -> int:
    return int(getattr(signal, name))


def describe_status(code: int | None) -> dict[str, Any]:
    """A Popen return code as a final state: {"exit": n} or {"signal": "SIGINT"}; {"running": True} for None."""
    if code is None:
        return {"running": True}
    if code < 0:
        return {"signal": signal.Signals(-code).name}
    return {"exit": code}


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class AppProcess:
    """One user process of a run and what happened to it (times are monotonic ns)."""

    spec: Process
    topology: Any
    run: Any
    artifacts: Path
    token: str
    user: User = field(init=False)
    workdir: Path = field(init=False)
    stdout_path: Path = field(init=False)
    stderr_path: Path = field(init=False)
    proc: subprocess.Popen | None = None
    started_ns: int | None = None
    ready_ns: int | None = None
    ended_ns: int | None = None
    stop_sent: str | None = None  # the signal roughnet sent to end it (stop time, the run's end, an event)
    stop_sent_ns: int | None = None
    killed: bool = False  # SIGKILL after the grace period
    paused: bool = False
    restarts: int = 0
    exits: list[dict[str, Any]] = field(default_factory=list)  # earlier processes (restarts, events)
    sampler: UsageSampler | None = None
    cpu_before_s: float = 0.0
    rss_max_bytes: int = 0
    container: Any = None  # apps.images.Container for an image
    runtime: Any = None  # where it runs when not on this machine: the environment's process_runtime()
    failure: str | None = None  # why it failed to start or become ready
    _log_pos: dict[str, int] = field(default_factory=dict)
    _log_buf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.user = resolve_user(self.spec.user)
        self.workdir = WORK_ROOT / self.token / self.spec.name
        self.stdout_path = self.artifacts / f"process-{self.spec.name}.stdout"
        self.stderr_path = self.artifacts / f"process-{self.spec.name}.stderr"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def ns(self) -> str:
        return self.topology.ns(self.spec.host)

    def prepare(self, ledger) -> None:
        """The working folder with the process's files, owned by its user."""
        ledger.add("path", path=str(WORK_ROOT / self.token))
        (WORK_ROOT / self.token).mkdir(parents=True, exist_ok=True, mode=0o711)
        os.chmod(WORK_ROOT / self.token, 0o711)
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(mode=0o700)
        for f in self.spec.files:
            dest = self.workdir / Path(f).name
            shutil.copy2(self.spec.path(f), dest)
        for root, dirs, files in os.walk(self.workdir):
            for n in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                os.chown(n, self.user.uid, self.user.gid)
        self.stdout_path.write_bytes(b"")
        self.stderr_path.write_bytes(b"")
        if self.runtime is not None:  # the folder goes where the process runs (a pod: its copy there)
            self.runtime.stage(self)

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": search_path(),
            "HOME": str(self.workdir) if not self.spec.in_container else "/root" if self.user.uid == 0 else "/tmp",
            "USER": self.user.name,
            "LOGNAME": self.user.name,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "ROUGHNET_HOST": self.spec.host,
            "ROUGHNET_PROCESS": self.spec.name,
            "ROUGHNET_RUN_ID": self.run.run_id,
        }
        env.update(self.spec.env)
        return env

    def argv(self) -> list[str]:
        """The command's argv, as the user wrote it, run as its user inside the host's namespace."""
        prog = self.spec.command[0]
        argv = [prog if "/" not in prog or prog.startswith("/") else str(self.workdir / prog),
                *self.spec.command[1:]]
        if self.user.uid != 0:
            argv = ["setpriv", f"--reuid={self.user.uid}", f"--regid={self.user.gid}", "--clear-groups", "--", *argv]
        return ["ip", "netns", "exec", self.ns, *argv]

    def start(self, ledger) -> None:
        """Start it (again, after an event ended it); its output is appended to the same files."""
        self._log_pos.clear()
        self._log_buf.clear()
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            if self.runtime is not None:
                self.proc = self.runtime.start(self, ledger, out, err)
            elif self.spec.image:
                from . import images

                self.container = images.start(self, ledger, out, err)
                self.proc = self.container.proc
            else:
                self.proc = subprocess.Popen(self.argv(), cwd=self.workdir, env=self.environment(),
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                             start_new_session=True)
                ledger.add("process", pid=self.proc.pid, start_time=process_start_time(self.proc.pid), ns=self.ns,
                           argv0=self.spec.command[0], process=self.spec.name)
        self.started_ns = time.monotonic_ns()
        self.ready_ns = None
        self.ended_ns = None
        self.stop_sent = None
        self.stop_sent_ns = None
        self.killed = False
        self.paused = False
        self.sampler = UsageSampler(self.proc.pid, read=read_tree_usage if self.runtime is None
                                    else self.runtime.usage_reader(self.proc))
        self.sampler.start()
        log.info("process %s started on host %s: pid %d", self.name, self.spec.host, self.proc.pid)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def poll(self) -> int | None:
        """Its return code when it has ended (and the end time recorded), else None."""
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is not None and self.ended_ns is None:
            self.ended_ns = time.monotonic_ns()
            self._sample_stop()
        return code

    def _sample_stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            snap = self.sampler.snapshot()
            self.rss_max_bytes = max(self.rss_max_bytes, snap["rss_max_bytes"])

    def cpu_s(self) -> float:
        return round(self.cpu_before_s + (self.sampler.snapshot()["cpu_s"] if self.sampler else 0.0), 3)

    # ---- readiness --------------------------------------------------------------------------------------

    def log_lines(self) -> list[str]:
        """New complete lines of its stdout and stderr since the last call."""
        out: list[str] = []
        for path in (self.stdout_path, self.stderr_path):
            key = path.name
            try:
                with open(path, "rb") as f:
                    f.seek(self._log_pos.get(key, 0))
                    data = f.read(1 << 20)
            except OSError:
                continue
            self._log_pos[key] = self._log_pos.get(key, 0) + len(data)
            text = self._log_buf.get(key, "") + data.decode("utf-8", "replace")
            *lines, rest = text.split("\n")
            self._log_buf[key] = rest[-65536:]
            out.extend(lines)
        return out

    def check_ready(self, now_ns: int) -> bool:
        """One readiness check (no waiting); sets ready_ns."""
        if self.ready_ns is not None:
            return True
        if self.started_ns is None:
            return False
        r = self.spec.ready
        ok = False
        if not r:
            ok = True
        elif "delay_ns" in r:
            ok = now_ns - self.started_ns >= r["delay_ns"]
        elif "log" in r:
            pattern = re.compile(r["log"])
            ok = any(pattern.search(line) for line in self.log_lines())
        elif "tcp" in r:
            ok = self._tcp_accepts(int(r["tcp"]))
        if ok:
            self.ready_ns = now_ns
        return ok

    def _tcp_accepts(self, port: int) -> bool:
        from ..services.lifecycle import host_addresses
        from ..services.netns import connect_in_ns

        for addr in ["127.0.0.1", *host_addresses(self.topology, self.spec.host)]:
            try:
                connect_in_ns(self.ns, addr, port, 0.2).close()
                return True
            except OSError:
                continue
        return False

    # ---- signals and stopping ---------------------------------------------------------------------------

    def send(self, sig: str) -> bool:
        """Send ``sig`` (a name) to it; False when it is not running."""
        if not self.running():
            return False
        try:
            assert self.proc is not None
            self.proc.send_signal(_signum(sig))
        except ProcessLookupError:
            return False
        if sig == "SIGSTOP":
            self.paused = True
        elif sig == "SIGCONT":
            self.paused = False
        return True

    def begin_stop(self, sig: str | None = None) -> None:
        """Send the stop signal (``sig``, default its ``stop_signal``) once; ``finish_stop`` waits and kills."""
        if self.stop_sent is not None or not self.running():
            return
        sig = sig or self.spec.stop_signal
        if self.paused:  # a stopped process cannot act on a signal until it runs again
            self.send("SIGCONT")
        self.stop_sent = sig
        self.stop_sent_ns = time.monotonic_ns()
        self.send(sig)

    def overdue(self, now_ns: int) -> bool:
        """Its grace period after the stop signal has run out while it still runs."""
        return (self.stop_sent_ns is not None and self.running()
                and now_ns - self.stop_sent_ns >= self.spec.grace_ns)

    def kill(self) -> None:
        if self.running():
            log.warning("process %s did not end within %.1f s of %s: SIGKILL", self.name, self.spec.grace_ns / 1e9,
                        self.stop_sent)
            self.killed = True
            self.send("SIGKILL")
            try:
                assert self.proc is not None
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("process %s (pid %s) did not exit after SIGKILL", self.name, self.pid)
        self.poll()

    def stop(self, sig: str | None = None) -> None:
        """Stop it now: its stop signal, the grace period, SIGKILL (blocking)."""
        self.begin_stop(sig)
        deadline = time.monotonic_ns() + self.spec.grace_ns
        while self.running() and time.monotonic_ns() < deadline:
            time.sleep(0.02)
        self.kill()

    def end_for_restart(self) -> None:
        """Keep what the current process did before an event starts it again."""
        self.poll()
        if self.proc is not None:
            self.exits.append({**self.final_state(), "stop_sent": self.stop_sent})
            self.cpu_before_s = self.cpu_s()
        if self.container is not None:
            from . import images

            images.remove(self.container)
            self.container = None

    # ---- the end ----------------------------------------------------------------------------------------

    def final_state(self) -> dict[str, Any]:
        code = self.proc.returncode if self.proc is not None else None
        if self.runtime is not None:  # a runtime that sees deaths by signal only as exit codes (kubectl exec)
            said = self.runtime.final_state(code)
            if said is not None:
                return said
        return describe_status(code)

    def judge(self) -> str | None:
        """None when its final state is the expected one; else why not."""
        if self.failure:
            return self.failure
        if self.proc is None:
            return "never started"
        final = self.final_state()
        exp = self.spec.expect
        stop_sig = self.stop_sent
        got = _say(final, self.killed)
        if exp is None and self.spec.stop_ns is not None:  # stopped at its stop time: exit 0, the signal, 128 + it
            if stop_sig is None:
                return None if final == {"exit": 0} else f"expected exit 0, got {got}"
            clean = ({"exit": 0}, {"signal": stop_sig}, {"exit": 128 + _signum(stop_sig)})
            if final in clean and not self.killed:
                return None
            return f"expected it to end by its stop signal {stop_sig} (exit 0 or the signal), got {got}"
        exp = exp or {"exit": 0}
        if "exit" in exp:
            if stop_sig is not None and final.get("exit") != exp["exit"]:
                hint = "" if self.spec.expect else ("; a process that runs until it is stopped (a server) needs "
                                                    "expect = { running = true } or a `stop` time")
                return (f"expected exit {exp['exit']}, but it was still running when stopped by {stop_sig} "
                        f"({got}){hint}")
            return None if final == {"exit": exp["exit"]} else f"expected exit {exp['exit']}, got {got}"
        if "signal" in exp:
            return None if final == {"signal": exp["signal"]} else f"expected death by {exp['signal']}, got {got}"
        if exp.get("running"):
            if stop_sig is None:
                return f"expected it still running when stopped, but it ended by itself ({got})"
            clean = ({"exit": 0}, {"signal": stop_sig}, {"exit": 128 + _signum(stop_sig)})
            if final in clean and not self.killed:
                return None
            return f"expected it running and then ended by {stop_sig}, got {got}"
        return None

    def stderr_tail(self, lines: int = 15) -> str:
        return "\n".join(deque(_tail(self.stderr_path, 8000).splitlines(), maxlen=lines))

    def collect_workdir(self) -> Path | None:
        """Copy its working folder into the artifacts (``process-<name>/``); None when there is none."""
        if not self.workdir.exists():
            return None
        dest = self.artifacts / f"process-{self.name}"
        if dest.exists():
            shutil.rmtree(dest)
        total = 0
        for root, _, files in os.walk(self.workdir):
            for f in files:
                src = Path(root) / f
                if not src.is_file() or src.is_symlink():
                    continue
                total += src.stat().st_size
                if total > COPY_LIMIT_BYTES:
                    log.warning("process %s: working folder over %d MiB; the rest is not kept", self.name,
                                COPY_LIMIT_BYTES >> 20)
                    return dest
                target = dest / src.relative_to(self.workdir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
        return dest


def _say(final: dict[str, Any], killed: bool) -> str:
    if "exit" in final:
        return f"exit {final['exit']}"
    if "signal" in final:
        return f"death by {final['signal']}" + (" (SIGKILL after the grace period)" if killed else "")
    return "still running"
