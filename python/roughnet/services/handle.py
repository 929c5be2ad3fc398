"""A running service: its process, log, address, and CPU/memory usage.

Owns ``ServiceHandle`` (what ``start_services`` returns and the runner keeps
for the run), reading a process's CPU time and RSS from /proc, the sampler
thread that records them during the run, and stopping one service (SIGTERM,
grace, SIGKILL, verified gone).  Starting and probing are
``services.lifecycle``'s.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..topo.ledger import process_start_time

log = logging.getLogger(__name__)

#: Seconds between two CPU/RSS samples of a service process.
SAMPLE_INTERVAL_S = 0.5
#: Seconds a service gets between SIGTERM and SIGKILL (Kafka shuts down in a few seconds).
STOP_GRACE_S = {"kafka": 15.0}
DEFAULT_STOP_GRACE_S = 5.0
#: Seconds to wait for the kernel to reap a process after SIGKILL.
KILL_WAIT_S = 5.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def read_proc_usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds user+system, RSS bytes) of ``pid`` from /proc; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return parse_proc_usage(stat, status)


def parse_proc_usage(stat: str, status: str) -> tuple[float, int] | None:
    """CPU seconds (fields 14+15 of stat) and VmRSS (status, kB) of one process; None for a zombie."""
    rest = stat[stat.rfind(")") + 2 :].split()
    if len(rest) < 13 or rest[0] in ("Z", "X"):
        return None
    cpu_s = (int(rest[11]) + int(rest[12])) / _CLK_TCK  # fields 14, 15 (utime, stime)
    rss = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            rss = int(parts[1]) * (1024 if parts[2].lower() == "kb" else 1)
            break
    return cpu_s, rss


class UsageSampler:
    """Samples one pid's CPU time and RSS every SAMPLE_INTERVAL_S in a daemon thread."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_INTERVAL_S,
                 read: Callable[[int], tuple[float, int] | None] = read_proc_usage):
        self.pid = pid
        self.read = read  # pid -> (CPU s, RSS bytes) or None; another one for a process in a pod
        self.interval_s = interval_s
        self.cpu_s = 0.0
        self.rss_max_bytes = 0
        self.samples = 0
        # A window (one run of a service that serves several, services.reuse): CPU at its start, peak RSS in it.
        self.rss_last_bytes = 0
        self._window_cpu0 = 0.0
        self._window_rss_max = 0
        self._window_samples = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"usage-{pid}", daemon=True)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def sample(self) -> bool:
        got = self.read(self.pid)
        if got is None:
            return False
        with self._lock:
            self.cpu_s = max(self.cpu_s, got[0])
            self.rss_max_bytes = max(self.rss_max_bytes, got[1])
            self.rss_last_bytes = got[1]
            self.samples += 1
            self._window_rss_max = max(self._window_rss_max, got[1])
            self._window_samples += 1
        return True

    def begin_window(self) -> None:
        """Start a new window now: ``window()`` then counts CPU from here and the peak RSS from here."""
        self.sample()
        with self._lock:
            self._window_cpu0 = self.cpu_s
            self._window_rss_max = self.rss_last_bytes
            self._window_samples = 1 if self.samples else 0

    def window(self) -> dict[str, Any]:
        """CPU seconds used, peak RSS and samples since ``begin_window`` (since the start without one)."""
        self.sample()
        with self._lock:
            return {"cpu_s": round(self.cpu_s - self._window_cpu0, 3), "rss_max_bytes": self._window_rss_max,
                    "samples": self._window_samples}

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.sample():
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self.interval_s + 1)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"cpu_s": round(self.cpu_s, 3), "rss_max_bytes": self.rss_max_bytes, "samples": self.samples}


@dataclass
class ServiceHandle:
    """One service started for a run (see docs/services.md)."""

    kind: str
    host: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    topology: Any  # topo.Topology; used for addresses as seen from other hosts
    ready_s: float = 0.0  # seconds from start to a successful probe
    setup_s: float = 0.0  # seconds spent before the start (config, storage format, certificates)
    probe: str = ""  # what the readiness probe saw
    agent_options: dict[str, Any] = field(default_factory=dict)  # given to every agent (e.g. tls_ca)
    topic: str | None = None  # the run's topic, when the service created it (kafka)
    sampler: UsageSampler | None = None
    stopped: bool = False
    exit_code: int | None = None
    ports: dict[str, int] = field(default_factory=dict)  # address -> port where it differs from ``port`` (kafka)
    # reprobe(run, deadline) -> description: the readiness probe again, for another run of a service that
    # serves several (services.reuse; Kafka creates that run's topic); None: probe once only
    reprobe: Callable[[Any, float], str] | None = None
    started_by: str | None = None  # run id of the run this service was started for
    argv: list[str] = field(default_factory=list)  # how it was started: a restart (run timelines) starts it so again
    probe_once: Callable[[float], str] | None = None  # its readiness probe, one attempt (deadline -> description)
    cpu_before_s: float = 0.0  # CPU seconds of its earlier processes (restarted by events)
    restarts: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def address(self, seen_from: str) -> str:
        """``IP:PORT`` of this service as seen from host ``seen_from``."""
        ip = self.topology.address(self.host, seen_from)
        return f"{ip}:{self.ports.get(ip, self.port)}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the service's log (stdout and stderr), or a note if it is empty."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                data = f.read()
        except OSError as e:
            return f"(log {self.log_path} unreadable: {e})"
        tail = deque(data.decode("utf-8", "replace").splitlines(), maxlen=lines)
        return "\n".join(tail) if tail else f"(log {self.log_path} is empty)"

    def usage(self) -> dict[str, Any]:
        """CPU seconds, peak RSS and sample count so far, plus the start timings."""
        out = self.sampler.snapshot() if self.sampler else {"cpu_s": 0.0, "rss_max_bytes": 0, "samples": 0}
        if self.cpu_before_s:
            out["cpu_s"] = round(out["cpu_s"] + self.cpu_before_s, 3)
        out["ready_s"] = round(self.ready_s, 3)
        out["setup_s"] = round(self.setup_s, 3)
        return out

    def describe(self) -> str:
        return f"{self.kind} on host {self.host} (pid {self.pid})"

    def stop(self) -> dict[str, Any]:
        """SIGTERM, wait the kind's grace, SIGKILL; verify the pid is gone.  Never raises for a dead one."""
        if self.stopped:
            return self._final()
        if self.sampler is not None:
            self.sampler.sample()
            self.sampler.stop()
        grace = STOP_GRACE_S.get(self.kind, DEFAULT_STOP_GRACE_S)
        if self.proc.poll() is None:
            _signal(self.proc, signal.SIGTERM)
            try:
                _wait_unless_hurried(self.proc, grace)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s of SIGTERM (or haste was asked for); SIGKILL",
                            self.describe(), grace)
                _signal(self.proc, signal.SIGKILL)
                try:
                    self.proc.wait(timeout=KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    log.error("%s did not exit after SIGKILL", self.describe())
        self.exit_code = self.proc.poll()
        if self.exit_code is not None and process_start_time(self.pid) is None:
            self.stopped = True
        else:
            log.error("%s is still there after stopping it", self.describe())
        return self._final()

    def _final(self) -> dict[str, Any]:
        out = self.usage()
        out["exit_code"] = self.exit_code
        out["stopped"] = self.stopped
        return out


def _wait_unless_hurried(proc: subprocess.Popen, timeout_s: float) -> None:
    """``proc.wait(timeout_s)``, cut short (TimeoutExpired) as soon as a second Ctrl-C or SIGTERM asks for haste
    (``topo.system.hurry``)."""
    from ..topo.system import hurrying

    deadline = time.monotonic() + timeout_s
    while True:
        if hurrying():
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            proc.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
