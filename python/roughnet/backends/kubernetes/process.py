"""Processes and sockets inside a pod, seen from this machine as if they were local.

Owns three stand-ins that let the runner, the agents module and the services
module work unchanged on a pod:

- ``PodProcess``: a ``subprocess.Popen`` look-alike for a command started with
  ``kubectl exec`` (stdout, poll, wait, returncode, send_signal, kill).  The
  remote command first writes its pid to a file in the pod and then execs the
  real program, so that a signal reaches the program itself (another exec
  runs ``kill``); ending kubectl alone would leave the program running in the
  pod.  Its exit code comes back as kubectl's.
- ``PodConnector``: what ``ns(host)`` returns for a pod; ``connect(ip, port,
  timeout)`` gives a socket whose other end is ``nc ip port`` run inside the
  pod, so the readiness probes (``services.probes``) speak their real protocol
  from the pod's own network, on any cluster.
- ``PodProcess.read_usage``: a process's CPU time and RSS read from
  ``/proc/<pid>`` inside the pod (the same parser as for local services), for
  ``services.handle.UsageSampler``.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from typing import Any

from ...services.handle import parse_proc_usage
from .kubectl import Kubectl

log = logging.getLogger(__name__)

#: Where a remote command's pid file goes inside the pod.
PID_DIR = "/tmp/roughnet-pids"
#: How long a signal waits for the remote pid file to appear (the command is just starting).
PID_WAIT_S = 5.0


class PodProcess:
    """A command running in a pod through ``kubectl exec`` (Popen's interface, as the runner uses it)."""

    def __init__(self, kubectl: Kubectl, pod: str, argv: list[str], name: str, *, container: str = "host",
                 pidfile: str | None = None, **popen_kw: Any):
        """``argv`` runs behind a shell that writes the pid file first; with ``pidfile`` given, ``argv`` writes
        it itself (rn-exec, in a container of another image: backends.kubernetes.apps) and runs in ``container``.
        The pid file is read, and signals sent, from the pod's ``host`` container (a pod with another container
        shares its PID namespace and the pid file's folder)."""
        self.kubectl = kubectl
        self.pod = pod
        if pidfile is None:
            self.pidfile = f"{PID_DIR}/{name}.pid"
            remote = ["/bin/sh", "-c", 'mkdir -p "${0%/*}" && echo $$ > "$0" && exec "$@"', self.pidfile, *argv]
        else:
            self.pidfile, remote = pidfile, list(argv)
        stdin = popen_kw.pop("stdin", subprocess.DEVNULL)
        self._proc = subprocess.Popen(kubectl.exec_argv(pod, remote, stdin=stdin not in (None, subprocess.DEVNULL),
                                                        container=container),
                                      stdin=stdin, **popen_kw)
        self.stdin = self._proc.stdin
        self.stdout = self._proc.stdout
        self.stderr = self._proc.stderr
        self.args = argv

    @property
    def pid(self) -> int:
        """The local kubectl's pid (the remote pid is in ``remote_pid``)."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def remote_pid(self, wait_s: float = PID_WAIT_S) -> int | None:
        """The program's pid inside the pod, or None if it never wrote one (it did not start)."""
        deadline = time.monotonic() + wait_s
        while True:
            res = self.kubectl.exec(self.pod, ["cat", self.pidfile], timeout=30, text=True)
            if res.returncode == 0 and res.stdout.strip().isdigit():
                return int(res.stdout.strip())
            if self._proc.poll() is not None or time.monotonic() > deadline:
                return None
            time.sleep(0.2)

    def send_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the program in the pod (if it still runs)."""
        if self._proc.poll() is not None:
            return
        pid = self.remote_pid()
        if pid is None:
            self._proc.send_signal(sig)
            return
        name = signal.Signals(sig).name.removeprefix("SIG")
        res = self.kubectl.exec(self.pod, ["kill", "-s", name, str(pid)], timeout=30, text=True)
        if res.returncode != 0 and self._proc.poll() is None:
            log.debug("kill -s %s %d in pod %s: %s", name, pid, self.pod, (res.stderr or "").strip())

    def read_usage(self, pid: int) -> tuple[float, int] | None:
        """(CPU seconds, RSS bytes) of ``pid`` in the pod, read from its /proc; None when it is gone."""
        res = self.kubectl.exec(self.pod, ["cat", f"/proc/{pid}/stat", f"/proc/{pid}/status"], timeout=30, text=True)
        if res.returncode != 0:
            return None
        stat, _, status = res.stdout.partition("\n")
        return parse_proc_usage(stat, status)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the program in the pod, then the local kubectl if it is still there."""
        self.send_signal(signal.SIGKILL)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()


class PodConnector:
    """A host's pod as a place to open TCP connections from (``services.netns.connect_in_ns``)."""

    def __init__(self, kubectl: Kubectl, pod: str):
        self.kubectl = kubectl
        self.pod = pod
        self._procs: list[subprocess.Popen] = []
        self.wrap = None  # argv -> argv that runs it where the pod's programs live (behind a pod's wire)

    def __str__(self) -> str:
        return f"pod {self.pod}"

    def connect(self, host: str, port: int, timeout_s: float) -> socket.socket:
        """A socket bridged to ``nc host port`` running in the pod (EOF on it: the connection failed or ended)."""
        self._reap()
        ours, theirs = socket.socketpair()
        try:
            nc = ["nc", "-w", str(max(1, int(timeout_s))), host, str(port)]
            argv = self.kubectl.exec_argv(self.pod, self.wrap(nc) if self.wrap else nc, stdin=True)
            proc = subprocess.Popen(argv, stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._procs.append(proc)
        ours.settimeout(timeout_s)
        return ours

    def _reap(self) -> None:
        self._procs = [p for p in self._procs if p.poll() is None]

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self._procs = []
