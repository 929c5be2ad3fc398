"""The user processes of one run: their schedule from t0, readiness, stop times, events, the end, the record.

``Supervisor`` owns the order of a run's processes (docs/applications.md): each starts at t0 + its
``start`` (or that long after the process or service it comes ``after`` is ready), must be ready within
its timeout, gets its stop signal at t0 + ``stop`` (then SIGKILL after ``grace``), and at the run's end
every process still running is stopped the same way.  The run waits for the processes that have a stop
time (until it) and for those expected to exit (until they do), within the scenario's timeout.  While they
run, their TCP sockets are sampled from the kernel (``apps.sockdiag``, one sampler per host namespace)
and their own numbers scraped when they offer a Prometheus endpoint; at the end their JSON lines or sample
files are read (``apps.appmetrics``) and each process is judged against its expected final state.
Events (kill, stop, start, pause, resume, restart) come from the timeline's event thread (``event``).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from ..runspec import Run
from .etc import write_etc
from .launch import AppProcess

log = logging.getLogger(__name__)

#: Time between two turns of the supervisor's loop.
TICK_S = 0.02


class Supervisor:
    """The processes of one run, on a thread of their own from ``start(t0)`` to ``finish()``."""

    def __init__(self, run: Run, topology, artifacts: Path, services: list, ledger):
        self.run = run
        self.topology = topology
        self.artifacts = artifacts
        self.ledger = ledger
        self.token = run.run_id[:8]
        self.services = {h.kind: h for h in services}
        # Not on this machine (the kubernetes backend's pods): the environment says how they start and come back.
        self.runtime = topology.process_runtime() if hasattr(topology, "process_runtime") else None
        self.sockets_note = getattr(self.runtime, "sockets_note", None)  # why there are no socket figures
        self.procs = [AppProcess(p, topology, run, artifacts, self.token, runtime=self.runtime)
                      for p in run.processes]
        self.by_name = {p.name: p for p in self.procs}
        self.t0_ns = 0
        self.end_ns: int | None = None
        self.failure: str | None = None  # the first start or readiness failure
        self.samplers: dict[str, Any] = {}
        self.scrapers: dict[str, Any] = {}
        self.interval_s = run.series_interval_ns / 1e9
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ending = False
        self._finished = False
        self._held: set[str] = set()  # processes an event stopped or killed: not started by the schedule again

    # ---- setup ------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Working folders and /etc files of every process (before t0: nothing of the user's runs yet)."""
        for host in sorted({p.spec.host for p in self.procs}):
            if self.runtime is not None:
                self.runtime.write_etc(self.run, host)
            else:
                write_etc(self.topology, self.run, host, self.ledger)
        for p in self.procs:
            p.prepare(self.ledger)
        if self.runtime is not None:
            return
        from . import sockdiag

        for host in sorted({p.spec.host for p in self.procs}):
            s = sockdiag.SocketSampler(self.topology.ns(host), self.interval_s)
            s.start()
            self.samplers[host] = s

    def start(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self._thread = threading.Thread(target=self._loop, name="processes", daemon=True)
        self._thread.start()

    # ---- the schedule -----------------------------------------------------------------------------------

    def _base_ns(self, p: AppProcess) -> int | None:
        """When ``p``'s ``start`` counts from: t0, or when its ``after`` became ready (None: not yet)."""
        after = p.spec.after
        if after is None:
            return self.t0_ns
        if after in self.by_name:
            dep = self.by_name[after]
            return max(self.t0_ns, dep.ready_ns) if dep.ready_ns is not None else None
        return self.t0_ns  # a service: ready before t0

    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick(time.monotonic_ns())
            except Exception as e:  # noqa: BLE001 - recorded: the run fails with it
                log.exception("process supervisor")
                with self._lock:
                    self.failure = self.failure or f"internal error in the process supervisor: {e}"
                return

    def tick(self, now: int) -> None:
        with self._lock:
            for p in self.procs:
                if p.proc is None and p.failure is None and not self._ending and p.name not in self._held:
                    base = self._base_ns(p)
                    if base is not None and now >= base + p.spec.start_ns:
                        self._launch(p)
                    continue
                code = p.poll()
                if p.proc is not None and p.ready_ns is None and p.failure is None:
                    if p.check_ready(now):
                        log.info("process %s ready after %.3f s", p.name, (now - p.started_ns) / 1e9)
                    elif code is not None:
                        self._fail(p, f"process {p.name!r} ended ({_said(p)}) before it was ready")
                    elif now - (p.started_ns or now) > p.spec.ready_timeout_ns:
                        self._fail(p, f"process {p.name!r} was not ready within {p.spec.ready_timeout_ns / 1e9:g} s "
                                      f"({_ready_text(p)})")
                if p.spec.stop_ns is not None and now >= self.t0_ns + p.spec.stop_ns and p.stop_sent is None \
                        and p.running():
                    log.info("process %s: stop time, %s", p.name, p.spec.stop_signal)
                    p.begin_stop()
                if p.overdue(now):
                    p.kill()

    def _launch(self, p: AppProcess) -> None:
        try:
            p.start(self.ledger)
        except Exception as e:  # noqa: BLE001 - the run fails with the reason
            self._fail(p, f"process {p.name!r} could not be started: {e}")
            return
        sampler = self.samplers.get(p.spec.host)
        if sampler is not None and p.pid is not None:
            sampler.watch(p.name, p.pid)
        m = p.spec.metrics or {}
        if "prometheus" in m and p.name not in self.scrapers:
            from . import appmetrics
            from ..services.netns import connect_in_ns

            ns = p.ns
            host, _, _ = appmetrics.check_url(m["prometheus"])

            def connect(h: str, port: int, timeout: float, ns=ns):
                return connect_in_ns(ns, h or "127.0.0.1", port, timeout)
            s = appmetrics.PrometheusScraper(m["prometheus"], self.interval_s, connect)
            s.start()
            self.scrapers[p.name] = s

    def _fail(self, p: AppProcess, why: str) -> None:
        log.warning("%s", why)
        p.failure = why
        self.failure = self.failure or why
        if p.running():
            p.begin_stop()

    # ---- waiting for the end ----------------------------------------------------------------------------

    def waited_for(self, p: AppProcess) -> bool:
        """The run waits for this process: it has a stop time, or is expected to exit by itself (the default)."""
        return p.spec.stop_ns is not None or not p.spec.expect or "exit" in p.spec.expect

    def done(self, now: int) -> bool:
        """Every process the run waits for has reached its end (stop time passed and stopped, or exited)."""
        with self._lock:
            if self.failure:
                return True
            for p in self.procs:
                if not self.waited_for(p) or p.name in self._held:
                    continue
                if p.proc is None and p.failure is None:
                    return False  # not started yet
                if p.running():
                    return False
            return True

    def wait(self, deadline_ns: int, watch=None) -> bool:
        """Until ``done`` or the deadline (False then); ``watch()`` may raise to stop waiting."""
        while True:
            now = time.monotonic_ns()
            if self.done(now):
                return True
            if now >= deadline_ns:
                return False
            if watch is not None:
                watch()
            time.sleep(TICK_S)

    def finish(self) -> None:
        """Stop every process still running (its stop signal, grace, SIGKILL), the thread and the samplers."""
        if self._finished:
            return
        self._finished = True
        with self._lock:
            self._ending = True
            self.end_ns = time.monotonic_ns()
            for p in self.procs:
                p.begin_stop()
        deadline = time.monotonic_ns() + max((p.spec.grace_ns for p in self.procs), default=0)
        while any(p.running() for p in self.procs) and time.monotonic_ns() < deadline:
            time.sleep(TICK_S)
        for p in self.procs:
            if p.running():
                p.kill()
            p.poll()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        # the samplers' last samples and destroy broadcasts (up to 0.25 s each) at once, not one host after another
        stoppers = [threading.Thread(target=s.stop, name="stop-sampler") for s in
                    [*self.samplers.values(), *self.scrapers.values()]]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        if self.runtime is not None:  # their working folders come back (sample files, logs) before the record
            for p in self.procs:
                if p.proc is not None:
                    try:
                        self.runtime.fetch(p)
                    except Exception as e:  # noqa: BLE001 - the record goes on without the folder
                        log.warning("process %s: its working folder could not be brought back: %s", p.name, e)
        for p in self.procs:
            if p.container is not None:
                from . import images

                images.remove(p.container)

    def abort(self) -> None:
        """Stop everything at once (errors, Ctrl-C); never raises."""
        try:
            self.finish()
        except Exception as e:  # noqa: BLE001 - the teardown ends what is left
            log.error("stopping the processes: %s", e)

    # ---- events -----------------------------------------------------------------------------------------

    def event(self, action: str, name: str) -> str:
        """An [[event]] on process ``name``; a description of what was done (RuntimeError when impossible)."""
        p = self.by_name.get(name)
        if p is None:
            raise RuntimeError(f"no process {name} in this run")
        with self._lock:
            if action in ("kill", "stop", "restart"):
                if not p.running():
                    raise RuntimeError(f"process {name} is not running")
                pid = p.pid
                self._held.add(name)
            if action == "kill":
                p.send("SIGKILL")
                p.proc.wait(timeout=5)
                p.poll()
                p.stop_sent = p.stop_sent or "SIGKILL"
                return f"pid {pid} killed"
            if action == "pause":
                if not p.send("SIGSTOP"):
                    raise RuntimeError(f"process {name} is not running")
                return f"pid {p.pid} SIGSTOP"
            if action == "resume":
                if not p.send("SIGCONT"):
                    raise RuntimeError(f"process {name} is not running")
                return f"pid {p.pid} SIGCONT"
        if action in ("stop", "restart"):
            p.stop()
            detail = f"pid {pid} stopped by {p.spec.stop_signal} ({_said(p)})"
            if action == "stop":
                return detail
        with self._lock:
            if p.running():
                raise RuntimeError(f"process {name} is still running; expected it stopped or killed first")
            if p.proc is not None:
                p.end_for_restart()
            p.restarts += 1 if p.proc is not None else 0
            self._launch(p)
            self._held.discard(name)
            started = f"pid {p.pid} started"
        return f"{detail}; {started}" if action == "restart" else started

    # ---- the record -------------------------------------------------------------------------------------

    def records(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """(one row per process, series rows, histograms) for the run's record."""
        from . import results

        return results.collect(self)

    def verdict(self) -> str | None:
        """None when every process reached its expected final state; else the reasons, one per process."""
        reasons = [f"process {p.name!r}: {why}" if not why.startswith("process ") else why
                   for p in self.procs if (why := p.judge())]
        return "; ".join(reasons) if reasons else None


def _said(p: AppProcess) -> str:
    from .launch import _say

    return _say(p.final_state(), p.killed)


def _ready_text(p: AppProcess) -> str:
    r = p.spec.ready
    if "tcp" in r:
        return f"TCP port {r['tcp']} on host {p.spec.host} never accepted a connection"
    if "log" in r:
        return f"no line of its output matched {r['log']!r}"
    return "its delay never passed"
