"""One roughnet-agent process per host carrying every flow of that host (issue 27; docs/agent-protocol.md,
"Host mode").

A timeline run in host mode (``Run.agents`` resolved by ``agents_mode``) starts ``roughnet-agent host`` once
in each host with flows: the receivers (and pongers) of every flow start at once, the senders (and pingers)
wait for the t0 line the runner writes to the process's stdin and start at t0 + their workload's ``start``,
inside the process. Every line the process prints carries its flow's id; ``HostAgent`` reads them and hands
each to a ``FlowAgent``, which has the interface of one ``agents.AgentProcess`` (ready, done, result, error,
intervals, stop), so ``run.timeline`` and ``run.collect`` see flows as before. What stays per process: the pid
(an event that kills "the agent" of a workload on a host ends the host's process, every flow in it) and the
CPU (each flow's result reports the process's, so ``process_cpu_s`` counts each process once).
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..hostplan import HOST_PROTOCOLS, agents_mode
from ..runspec import Run
from .agents import AGENT_PORT, AgentProcess, AgentSpec, json_lines, last_words

log = logging.getLogger(__name__)

# Which runs get host agents and what a host's flows must agree on: roughnet.hostplan (plan time, below the runner).
__all__ = ["HOST_PROTOCOLS", "agents_mode"]


@dataclass(eq=False)
class FlowAgent(AgentProcess):
    """One flow's role inside a host agent: an ``AgentProcess`` whose process is the host's."""

    flow_id: int = 0
    host_agent: HostAgent | None = None
    at_t0: bool = False  # a sender or pinger: starts at t0 + its workload's start

    def start_reader(self) -> None:  # the host agent reads for everyone
        pass

    def take(self, obj: dict[str, Any]) -> None:
        """One of this flow's lines: its result or error also ends it (the process goes on for the others)."""
        super().take(obj)
        kind = obj.get("type")
        if kind == "result" and not obj.get("error"):  # a partial result is followed by its error line
            self.done.set()
        elif kind == "error":
            self.done.set()
            self.ready.set()  # a receiver that failed will not be ready: wait_ready reports its error

    def wait_done(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s)

    def stop(self, grace_s: float = 3.0) -> None:
        """Ask this flow alone to finish (it prints its result); the process goes on for the others."""
        if self.done.is_set() or self.host_agent is None:
            return
        self.host_agent.command({"stop": self.flow_id})
        if not self.done.wait(grace_s):
            log.warning("%s did not end within %.0f s of its stop command", self.name, grace_s)

    def describe_failure(self) -> str:
        if self.error:
            return f"{self.name}: {self.error.get('kind', 'error')}: {self.error.get('message', '')}"
        assert self.host_agent is not None
        return f"{self.name}: {self.host_agent.describe_end()}"

    def stderr_tail(self, limit: int = 2000) -> str:
        return self.host_agent.stderr_tail(limit) if self.host_agent is not None else ""


@dataclass(eq=False)
class HostAgent:
    """``roughnet-agent host`` in one host: its process, its flows, the lines they print."""

    host: str
    proc: Any  # subprocess.Popen (or the backend's Popen-like process)
    out_path: Path
    err_path: Path
    flows: dict[int, FlowAgent] = field(default_factory=dict)
    host_error: dict[str, Any] | None = None  # an error line without a flow (the host object itself)
    bad_lines: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"host agent@{self.host}"

    def start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read, name=f"agent-{self.host}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for obj in json_lines(self.proc.stdout, self.out_path, self.bad_lines):
            f = self.flows.get(obj.get("flow")) if isinstance(obj.get("flow"), int) else None
            if f is not None:
                f.take(obj)
            elif obj.get("type") == "error":
                self.host_error = obj
        for f in self.flows.values():  # the process is gone: nobody waits for any of its flows any more
            f.bad_lines = self.bad_lines
            f.done.set()
            f.ready.set()
        self.done.set()

    def command(self, obj: dict[str, Any]) -> bool:
        """Write one command line to the process's stdin; False when it is gone."""
        with self._lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps(obj) + "\n")
                self.proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):  # ValueError: stdin already closed
                return False

    def describe_end(self) -> str:
        if self.host_error:
            return f"{self.host_error.get('kind', 'error')}: {self.host_error.get('message', '')}"
        rc = self.proc.poll()
        last = last_words(self)
        if rc is None:
            return f"the host agent (pid {self.proc.pid}) is running but this flow reported nothing ({last})"
        return f"the host agent exited with code {rc} without this flow's result ({last})"

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def terminate(self) -> None:
        """SIGTERM without waiting (``stop`` waits)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM (every flow prints its result), then make sure the process is gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if not self.done.wait(grace_s):
                self.proc.kill()
                self.done.wait(2.0)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with self._lock:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass
        if self._reader is not None:
            self._reader.join(timeout=2.0)


#: UDP stream workload ``i`` of a host-mode run: its receivers on each host share one socket on this port + i.
SHARED_UDP_PORT_BASE = AGENT_PORT + 1000


#: A shared UDP socket's receive buffer when the workload sets none: this much per sender of the workload (about
#: 40 datagrams of 300 B at their kernel size), at least the kernel's usual default. A hundred cars on two cores
#: stall a host's receiving thread for a few hundred ms at times; a real car has its own CPU.
SHARED_RCVBUF_PER_SENDER = 32 * 1024
SHARED_RCVBUF_MIN = 212_992


def share_udp_sockets(run: Run, flows, address_of) -> int:
    """Host mode, UDP streams: every receiver of one workload on one host listens on the workload's port
    (``SHARED_UDP_PORT_BASE`` + its index) with ``source`` = its sender's address, so the host agent opens one
    socket for them all and tells the flows apart by the datagram's source address (docs/agent-protocol.md,
    "Shared UDP receivers"). Only where the source address is known: sender and receiver on one link (the
    datagram leaves from the sender's address on it); a flow with a receiver further away keeps its own port.
    Returns the flows changed."""
    index = {w.name: i for i, w in enumerate(run.all_workloads)}
    senders = {w.name: len(w.senders) for w in run.all_workloads}
    neighbours = {(a, b) for link in run.links for a in link.hosts for b in link.hosts if a != b}
    changed = 0
    for f in flows:
        w = f.workload
        if w.protocol != "udp" or w.pattern != "stream":
            continue
        if not all((f.sender, sp.host) in neighbours for sp in f.specs[:-1]):
            continue
        port = SHARED_UDP_PORT_BASE + index[f.name]
        for sp in f.specs:
            cfg = sp.config
            if cfg.get("listen"):
                cfg["listen"] = with_port(cfg["listen"], port)
                cfg["source"] = address_of(f.sender, sp.host)
                if "recv_buffer" not in w.options:  # one socket for every sender: room for each one's share
                    cfg["options"] = {**cfg["options"], "recv_buffer": max(SHARED_RCVBUF_MIN,
                                                                           SHARED_RCVBUF_PER_SENDER * senders[f.name])}
            if cfg.get("peers"):
                cfg["peers"] = [with_port(p, port) for p in cfg["peers"]]
        changed += 1
    return changed


#: Host mode, zenoh in peer mode: the port every host's one zenoh session listens on (share_zenoh_sessions).
ZENOH_HOST_PORT = AGENT_PORT + 2000


def share_zenoh_sessions(flows, address_of) -> int:
    """Host mode, zenoh in peer mode without multicast scouting: every receiver and ponger listens on its host's
    address at ``ZENOH_HOST_PORT`` (the host agent's one session, drivers::zenoh::host_plan), told its sender's
    (pinger's) address as ``source``; senders and pingers connect to their peers at that port. The agent opens
    one link per pair of hosts from these. The liveliness keys stay one per flow (the topic is the flow's).
    Returns the flows changed."""
    changed = 0
    for f in flows:
        w = f.workload
        opts = w.options
        if (w.protocol != "zenoh" or w.pattern == "sync" or opts.get("mode", "peer") != "peer"
                or opts.get("multicast_scouting")):
            continue
        for sp in f.specs:
            cfg = sp.config
            if cfg.get("listen"):
                cfg["listen"] = with_port(cfg["listen"], ZENOH_HOST_PORT)
                cfg["source"] = address_of(f.sender, sp.host)
            if cfg.get("peers"):
                cfg["peers"] = [with_port(p, ZENOH_HOST_PORT) for p in cfg["peers"]]
        changed += 1
    return changed


def with_port(addr: str, port: int) -> str:
    """``IP:PORT`` with another port."""
    host, _, _ = addr.rpartition(":")
    return f"{host}:{port}"


#: Host agents started at once (``start_host_agents``): a start is mostly waiting (`ip netns exec`'s fork and
#: exec, the ledger's fsync), so a few threads overlap them; the agents' own start-up shares the cores anyway.
START_THREADS = 8


def start_host_agents(topo, agent_path: Path, flows, artifacts: Path, run: Run | None = None) -> list[HostAgent]:
    """One ``roughnet-agent host`` per host with flows; each flow's agents become ``FlowAgent``s in
    ``f.receivers`` and ``f.sender_agent`` (the senders wait for ``send_t0``).

    Every host's configuration is written first, then the processes and their readers are started
    ``START_THREADS`` at a time, then each flow is given its agents in host order (so every flow's receivers are
    in the order a start one host after the other gives them). Whatever fails, every host agent started is
    stopped before the error goes on."""
    if run is not None and getattr(topo, "shares_udp_sockets", False):
        share_udp_sockets(run, flows, topo.address)
    share_zenoh_sessions(flows, topo.address)
    per_host: dict[str, list[tuple[Any, AgentSpec, bool]]] = {}
    for f in flows:
        for i, spec in enumerate(f.specs):
            per_host.setdefault(spec.host, []).append((f, spec, i == len(f.specs) - 1))
    phases = phase_ns(flows)
    configs = [_write_config(host, entries, artifacts, phases) for host, entries in per_host.items()]
    # (a backend whose popen is not safe from several threads at once, e.g. kubectl's, starts one at a time)
    workers = START_THREADS if getattr(topo, "concurrent_popen", False) else 1
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent-start")
    futures = []
    try:
        futures = [pool.submit(_start_one, topo, agent_path, host, entries, cfg, artifacts) for (host, entries), cfg
                   in zip(per_host.items(), configs, strict=True)]  # fmt: skip
        for fut in futures:
            fut.result()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # nothing starts after this: then stop what did
        started = [fut.result() for fut in futures if fut.done() and not fut.cancelled() and fut.exception() is None]
        for ha in started:  # every one told first, then each waited for: their graces run side by side (a
            ha.terminate()  # hundred agents still starting each took up to the whole grace, one after another)
        for ha in started:
            ha.stop(grace_s=1.0)
        raise
    pool.shutdown(wait=True)
    agents = [fut.result() for fut in futures]
    for (host, entries), ha in zip(per_host.items(), agents, strict=True):  # the flows' agents in host order
        for f, _spec, is_sender in entries:
            fa = ha.flows[f.index]
            if is_sender:
                f.sender_agent = fa
            else:
                f.receivers.append(fa)
    return agents


def phase_ns(flows) -> dict[int, int]:
    """Flow index -> its sender's offset from its workload's start: the senders of a stream workload with a rate
    spread evenly over one message period (the i-th of n senders i/n of a period late). Cars, robots and
    drones send unsynchronised; started at the same nanosecond (which host agents, taking t0 from one line,
    would otherwise do) every sender's message would leave at once, a contention no real fleet has. One process
    per flow staggers them by accident (about 15 ms per process start)."""
    out: dict[int, int] = {}
    by_workload: dict[str, list] = {}
    for f in flows:
        by_workload.setdefault(f.name, []).append(f)
    for fs in by_workload.values():
        w = fs[0].workload
        rate = w.rate_msgs_per_s if w.pattern == "stream" else None
        for i, f in enumerate(fs):
            out[f.index] = int(i * 1e9 / rate / len(fs)) if rate else 0
    return out


def _write_config(host: str, entries, artifacts: Path, phases: dict[int, int]) -> Path:
    objs = []
    for f, spec, is_sender in entries:
        start = f.workload.start_ns + phases.get(f.index, 0) if is_sender else None
        objs.append({"flow": f.index, "start_ns": start, "config": spec.config})
    cfg_path = artifacts / f"agent-{host}-host.config.json"
    # one flow a line: json's C encoder (indent takes the pure-Python one: 10.8 s for a 100-car run's 100 hosts)
    cfg_path.write_text('{"v":1,"flows":[\n' + ",\n".join(json.dumps(o, separators=(",", ":")) for o in objs) + "\n]}\n")
    return cfg_path


def _start_one(topo, agent_path: Path, host: str, entries, cfg_path: Path, artifacts: Path) -> HostAgent:
    """Start one host's agent (recorded in the ledger by ``topo.popen``), its flows' ``FlowAgent``s (not yet in
    the flows: ``start_host_agents`` puts them there in host order) and its reader. On a machine the starting
    agents saturate, a thread's start waits some 50 ms for the scheduler: one per host, so in the pool's threads."""
    err_path = artifacts / f"agent-{host}-host.stderr"
    err = err_path.open("w")
    started_ns = time.monotonic_ns()
    try:
        proc = topo.popen(host, [str(agent_path), "host", "--config", str(cfg_path)], stdout=subprocess.PIPE,
                          stderr=err, stdin=subprocess.PIPE, text=True, bufsize=1)
    finally:
        err.close()
    out_path = artifacts / f"agent-{host}-host.jsonl"
    ha = HostAgent(host, proc, out_path, err_path)
    for f, spec, is_sender in entries:
        ha.flows[f.index] = FlowAgent(spec, proc, out_path, err_path, started_ns=started_ns, flow_id=f.index,
                                      host_agent=ha, at_t0=is_sender)
    ha.start_reader()
    log.debug("started the host agent of %s (%d flows): pid %d", host, len(entries), proc.pid)
    return ha


def stop_all(agents: list[HostAgent], grace_s: float = 3.0) -> None:
    """SIGTERM to every host agent at once, then wait for each (a hundred hosts end together, not in turn)."""
    for a in agents:
        if a.proc.poll() is None:
            try:
                a.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
    end = time.monotonic() + grace_s
    for a in agents:
        a.done.wait(max(0.0, end - time.monotonic()))
    for a in agents:
        a.stop(grace_s=0.5)


def send_t0(agents: list[HostAgent], t0_ns: int) -> None:
    """Tell every host agent the run's t0: its senders start at t0 + their workload's start."""
    for a in agents:
        if not a.command({"t0_ns": t0_ns}):
            log.warning("%s was gone before t0", a.name)


def process_cpu_s(agents) -> float:
    """CPU seconds of the agents' processes, each counted once: a flow's result reports its process's CPU at
    the time it ended, so a host agent's is the largest of its flows'."""
    per_pid: dict[int, float] = {}
    for a in agents:
        if a is None:
            continue
        c = (a.result or {}).get("cpu") or {}
        s = float(c.get("user_s", 0) or 0) + float(c.get("sys_s", 0) or 0)
        pid = a.proc.pid
        per_pid[pid] = max(per_pid.get(pid, 0.0), s) if isinstance(a, FlowAgent) else per_pid.get(pid, 0.0) + s
    return sum(per_pid.values())
