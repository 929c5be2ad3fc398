"""Starting roughnet-agent processes inside host namespaces and reading what they say.

This module owns the translation of a ``runspec.Workload`` into agent
configurations (docs/agent-protocol.md) and the life of each agent process:
start, wait for its ``ready`` line, wait for its ``result`` line, stop it.
It does not build namespaces (``topo``) or judge results (``run.collect``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AgentError, ServiceError
from ..ros2 import launch as ros2_launch
from ..runspec import Run, Workload
from ..services.tls import zenoh_quic_options
from .slowlink import zenoh_timing

log = logging.getLogger(__name__)

AGENT_PORT = 5201
#: How long a receiver may take to print its ready line: subscribing through a broker over
#: a lossy or slow link (a Kafka consumer group joining at 25 % drop, a handshake over an HF
#: modem) takes far longer than on a clean one. Bounded by the run's own timeout.
READY_TIMEOUT_S = 60.0
#: Receivers get this long after the sender finished before they are told to stop.
DRAIN_GRACE_S = 3.0


@dataclass
class AgentSpec:
    """One agent to start: where, in which role, with which configuration."""

    host: str
    role: str
    config: dict[str, Any]
    tag: str = ""  # tells apart agents of one host and role (several workloads or senders: run.timeline)


def _common_config(w: Workload, run: Run) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "v": 1,
        "protocol": w.protocol,
        "pattern": w.pattern,
        "payload_bytes": w.payload_bytes,
        "messages": w.messages,
        "duration_ms": None if w.duration_ns is None else max(1, w.duration_ns // 1_000_000),
        "rate_msgs_per_s": w.rate_msgs_per_s,
        "interval_ns": w.interval_ns,
        "step_bytes": w.step_bytes,
        "warmup": w.warmup,
        "timeout_ms": max(1, w.timeout_ns // 1_000_000),
        "report_interval_ms": 1000,
        "seed": run.seed,
        "options": dict(w.options),
    }
    if w.reply_timeout_ns is not None:  # ping, ramp (the spec allows it nowhere else); unset: the agent's 1 s
        cfg["reply_timeout_ms"] = w.reply_timeout_ns // 1_000_000
    return cfg


def topic_of(run: Run) -> str:
    """The per-run topic / key expression every driver uses (Kafka maps "/" itself)."""
    return f"roughnet/{run.run_id}"


#: How long a receiver keeps listening after the end marker when messages are missing.
#: Over UDP a missing message is lost for good; over a reliable protocol through a broker
#: on a lossy link, the end marker can overtake messages still in their acknowledgement
#: handshakes (seen with MQTT QoS 2 at 10 % drop), which arrive seconds later.
LINGER_LOSSY_MS = 1000
LINGER_RELIABLE_MS = 5000


def linger_ms(protocol: str) -> int:
    return LINGER_LOSSY_MS if protocol == "udp" else LINGER_RELIABLE_MS


def agent_specs(run: Run, address_of, broker_of=None, extra_options=None) -> list[AgentSpec]:
    """The agents of a run, receivers first.

    ``address_of(host, seen_from)`` gives the address ``seen_from`` uses to
    reach ``host`` (``Topology.address``); ``broker_of(host)``, when the run
    has a service, the service's ``IP:PORT`` as seen from ``host``.
    ``extra_options`` are added to every agent's options (e.g. a TLS CA path).
    """
    w = run.workload
    if w.pattern == "sync":
        return sync_specs(run, address_of, broker_of, extra_options)
    if w.pattern in ("stream", "bulk"):
        rx_role, tx_role = "receiver", "sender"
    else:  # ping, ramp
        rx_role, tx_role = "ponger", "pinger"
    specs: list[AgentSpec] = []
    peers = []
    for host in w.receivers:
        addr = address_of(host, w.sender)
        cfg = _common_config(w, run) | {"role": rx_role, "listen": f"{addr}:{AGENT_PORT}"}
        if rx_role == "receiver":
            cfg["linger_ms"] = linger_ms(w.protocol)
        specs.append(AgentSpec(host, rx_role, cfg))
        peers.append(f"{addr}:{AGENT_PORT}")
    cfg = _common_config(w, run) | {"role": tx_role, "peers": peers}
    specs.append(AgentSpec(w.sender, tx_role, cfg))
    for spec in specs:
        spec.config["topic"] = topic_of(run)
        if broker_of is not None:
            spec.config["broker"] = broker_of(spec.host)
        if extra_options:
            spec.config["options"] = spec.config["options"] | extra_options
    return specs


#: Bytes in front of a bundle's manifest in the agent's bundle message (docs/agent-protocol.md, "sync").
SYNC_BUNDLE_OVERHEAD = 40


def sync_specs(run: Run, address_of, broker_of=None, extra_options=None) -> list[AgentSpec]:
    """The two syncers of a sync run: ``to`` first (the runner waits for its ready), ``from`` last.

    ``from`` holds bundles ``0 .. N``, ``to`` holds ``N - shared .. 2N - shared`` (``shared`` =
    round(overlap * N)).  Each publishes on ``<topic>/<host>`` and subscribes to its peer's topic
    (brokered protocols); point to point, each listens on its address towards the peer and
    connects to the peer's.
    """
    w = run.workload
    s = w.sync or {}
    n = int(s["bundles"])
    shared = round(n * float(s.get("overlap", 0.0)))
    peer_of = {w.sender: w.receivers[0], w.receivers[0]: w.sender}
    first = {w.sender: 0, w.receivers[0]: n - shared}
    specs = []
    for host in (w.receivers[0], w.sender):
        peer = peer_of[host]
        cfg = _common_config(w, run) | {
            "role": "syncer",
            "messages": None,
            "payload_bytes": SYNC_BUNDLE_OVERHEAD + w.payload_bytes + int(s.get("bundle_payload_bytes", 0)),
            "manifest_bytes": w.payload_bytes,
            "bundle_payload_bytes": int(s.get("bundle_payload_bytes", 0)),
            "bundles": n,
            "bundle_first": first[host],
            "window": int(s.get("window", 1)),
            "topic": f"{topic_of(run)}/{host}",
            "peer_topic": f"{topic_of(run)}/{peer}",
        }
        if broker_of is not None:
            cfg["broker"] = broker_of(host)
        else:
            cfg["listen"] = f"{address_of(host, peer)}:{AGENT_PORT}"
            cfg["peers"] = [f"{address_of(peer, host)}:{AGENT_PORT}"]
        if extra_options:
            cfg["options"] = cfg["options"] | extra_options
        specs.append(AgentSpec(host, "syncer", cfg))
    return specs


@dataclass
class AgentProcess:
    """A running agent: its process, and the lines it printed (also saved to a file)."""

    spec: AgentSpec
    proc: subprocess.Popen
    out_path: Path
    err_path: Path
    ready: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    intervals: list[dict[str, Any]] = field(default_factory=list)
    started_ns: int = 0  # CLOCK_MONOTONIC just before the process was started (its interval lines count from about then)
    bad_lines: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"{self.spec.role}@{self.spec.host}" + (f" ({self.spec.tag})" if self.spec.tag else "")

    def start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read, name=f"agent-{self.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for obj in json_lines(self.proc.stdout, self.out_path, self.bad_lines):
            self.take(obj)
        self.done.set()
        self.ready.set()  # wake anyone waiting for readiness: the process is gone

    def take(self, obj: dict[str, Any]) -> None:
        """One JSON line of this agent's."""
        kind = obj.get("type")
        if kind == "ready":
            self.ready.set()
        elif kind == "interval":
            self.intervals.append(obj)
        elif kind == "result":
            self.result = obj
        elif kind == "error":
            self.error = obj

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def describe_failure(self) -> str:
        if self.error:
            return f"{self.name}: {self.error.get('kind', 'error')}: {self.error.get('message', '')}"
        return f"{self.name} exited with code {self.proc.poll()} without a result ({last_words(self)})"

    def describe_partial(self) -> str:
        """Why it stopped early and what it had counted: "receiver@b: io: recv ...: connection reset by peer
        (after 812 of 1000 messages)"; without a result, as ``describe_failure``."""
        res = self.result
        if res is None:
            return self.describe_failure()
        err = res.get("error") or self.error or {}
        counted = ""
        if res.get("received") is not None:
            counted = (f" (after {res['received']}" + (f" of {res['expected']}" if res.get("expected") else "")
                       + (" replies" if res.get("role") == "pinger" else " messages") + ")")
        elif res.get("sent") is not None:
            counted = f" (after {res['sent']} sent)"
        return f"{self.name}: {err.get('kind', 'error')}: {err.get('message', 'ended early')}{counted}"

    def wait_ready(self, timeout_s: float) -> None:
        if not self.ready.wait(timeout_s):
            raise AgentError(f"{self.name} did not report ready within {timeout_s:.0f} s")
        if self.done.is_set() and self.result is None:
            raise AgentError(self.describe_failure())

    def wait_done(self, timeout_s: float) -> bool:
        ok = self.done.wait(timeout_s)
        if ok:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return ok

    def stop(self, grace_s: float = 3.0) -> None:
        """Ask the agent to finish (SIGTERM makes it print its result), then make sure it is gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if not self.wait_done(grace_s):
                self.proc.kill()
                self.wait_done(2.0)
        if self._reader is not None:
            self._reader.join(timeout=2.0)


#: Most bytes ``json_lines`` takes from an agent's output at once.
READ_CHUNK = 1 << 16


def json_lines(stream, out_path: Path, bad_lines: list[str]):
    """The JSON objects an agent process prints, as they come; every line is also copied to ``out_path`` and an
    unreadable one kept in ``bad_lines``. Closes ``stream`` at its end.

    From a pipe, whatever the agent has written so far is read at once (``os.read``, up to ``READ_CHUNK``) and
    copied to ``out_path`` with one write, then taken apart into lines: a hundred host agents print ten
    thousand interval lines a second, and a write and flush per line, each giving up Python's lock, starved the
    runner's own thread (4.6 s to send t0 to 101 agents at 100 cars). The file is as current as before (every
    byte read is in it before its lines are handled). A stream without a file descriptor is read line by line."""
    assert stream is not None
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        yield from _json_lines_text(stream, out_path, bad_lines)
        return
    with out_path.open("wb") as out:
        pending = b""
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            out.write(chunk)
            out.flush()
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                obj = _json_line(line, bad_lines)
                if obj is not _SKIP:
                    yield obj
        if pending:
            obj = _json_line(pending, bad_lines)
            if obj is not _SKIP:
                yield obj
    stream.close()


_SKIP = object()


def _json_line(line: bytes, bad_lines: list[str]) -> Any:
    line = line.strip()
    if not line:
        return _SKIP
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        bad_lines.append(line.decode("utf-8", errors="replace")[:200])
        return _SKIP


def _json_lines_text(stream, out_path: Path, bad_lines: list[str]):
    with out_path.open("w") as out:
        for line in stream:
            out.write(line)
            out.flush()
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                bad_lines.append(line[:200])
    stream.close()


def last_words(agent) -> str:
    """What an agent process said last: its first unreadable output line, else its last line on stderr."""
    if agent.bad_lines:
        return f"unreadable output {agent.bad_lines[0]!r}"
    tail = agent.stderr_tail(400).strip().splitlines()
    return tail[-1] if tail else "no output"


def start_agent(topo, agent_path: Path, spec: AgentSpec, artifacts: Path) -> AgentProcess:
    """Start one agent inside its host's namespace (recorded in the ledger by ``topo.popen``)."""
    base = f"agent-{spec.host}-{spec.role}" + (f"-{spec.tag}" if spec.tag else "")
    cfg_path = artifacts / f"{base}.config.json"
    cfg_path.write_text(json.dumps(spec.config, indent=1))
    err_path = artifacts / f"{base}.stderr"
    argv: list[str] = [str(agent_path), "run", "--config", str(cfg_path)]
    extra: dict[str, Any] = {}
    if spec.config.get("protocol") == ros2_launch.PROTOCOL:  # real ROS 2 nodes: the rclpy endpoint, not the agent
        argv, extra = ros2_launch.argv(cfg_path), {"env": ros2_launch.environment(artifacts)}
    err = err_path.open("w")
    started_ns = time.monotonic_ns()
    try:
        proc = topo.popen(
            spec.host,
            argv,
            **extra,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
    finally:
        err.close()
    agent = AgentProcess(spec, proc, artifacts / f"{base}.jsonl", err_path, started_ns=started_ns)
    agent.start_reader()
    log.debug("started %s pid %d", agent.name, proc.pid)
    return agent


#: How often a running run is checked on (services alive) while the sender works.
WATCH_PERIOD_S = 0.5


def wait_watching(agent: AgentProcess, budget_s: float, watch) -> bool:
    """Wait for ``agent`` to finish; every WATCH_PERIOD_S ask ``watch()`` whether the run must stop."""
    deadline = time.monotonic() + budget_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if agent.wait_done(min(left, WATCH_PERIOD_S)):
            return True
        if watch is not None:
            reason = watch()
            if reason:
                raise ServiceError(reason)


#: DDS: the fixed participant index of flow k's agents is DDS_PARTICIPANT_INDEX_BASE + k (above the indexes
#: Cyclone and Fast DDS pick for themselves from 0 up, so a ROS 2 node beside an agent takes none of them).
DDS_PARTICIPANT_INDEX_BASE = 100


def prepare_specs(run: Run, specs: list[AgentSpec], artifacts: Path, flow: int = 0, host: bool = False) -> None:
    """What depends on the run's links and folder: zenoh's timeouts on slow links (run.slowlink), TLS files
    for QUIC (services.tls), DDS's participant index (flow ``flow`` of the run; every agent of a flow is on
    its own host, so they share it: a sender announces itself to one discovery port per receiver). With
    ``host`` (one agent process per host, run.hostagent) every flow's index is DDS_PARTICIPANT_INDEX_BASE:
    a host agent has one participant for all its DDS flows, at the same index in every host. In ROS 2
    mode the index stays automatic: a ROS 2 node with ROS_STATIC_PEERS looks for participants at the first
    few indexes only (docs/protocols.md, "Pointing your own ROS 2 install at a run")."""
    w = run.workload
    if w.protocol == "dds" and not w.options.get("ros2"):  # ROS 2 mode: automatic, so ROS nodes of yours find it
        hosts = [s.host for s in specs]
        if len(set(hosts)) == len(hosts):
            index = DDS_PARTICIPANT_INDEX_BASE + (0 if host else flow)
            for s in specs:
                s.config["options"] = s.config["options"] | {"participant_index": index}
    if w.protocol == "zenoh":
        for s in specs:
            s.config["options"] = s.config["options"] | zenoh_timing(run, s.config["options"])
        if w.options.get("transport") == "quic":
            zenoh_quic_options([s.config for s in specs], artifacts)


def run_agents(topo, agent_path: Path, run: Run, artifacts: Path, specs: list[AgentSpec],
               watch=None, into: list | None = None) -> list[AgentProcess]:
    """Start receivers, wait until each is ready, start the sender, wait for everyone's result.

    Returns every agent (with ``result`` or ``error`` filled in).  Raises
    AgentError when a receiver never becomes ready or the sender fails, and
    ServiceError as soon as ``watch()`` returns a reason (a broker died).
    """
    w = run.workload
    prepare_specs(run, specs, artifacts)
    # ``into``: the caller's list, filled as they start, so that what they measured is there when this raises
    agents: list[AgentProcess] = into if into is not None else []
    try:
        for spec in specs[:-1]:
            agents.append(start_agent(topo, agent_path, spec, artifacts))
        for a in agents:
            a.wait_ready(min(READY_TIMEOUT_S, max(10.0, w.timeout_ns / 1e9)))
        sender = start_agent(topo, agent_path, specs[-1], artifacts)
        agents.append(sender)
        budget = w.timeout_ns / 1e9 + DRAIN_GRACE_S
        t0 = time.monotonic()
        if not wait_watching(sender, budget, watch):
            sender.stop()
        # Receivers end by themselves once they have everything, or after the end marker
        # and their linger, or at their own timeout.  Through a broker over a lossy link the
        # last messages can arrive seconds after the sender is done, so they get the rest of
        # the run's budget; past it they are asked to report what they have.  A sender that
        # ended without a result failed the run (runner._fill_record), so its receivers get
        # only the grace: waiting out the timeout for them cost up to 10 min per such run.
        if sender.result is None:
            budget = min(budget, time.monotonic() - t0 + DRAIN_GRACE_S)
        for a in agents[:-1]:
            left = max(0.5, budget - (time.monotonic() - t0))
            if not wait_watching(a, left, watch):
                a.stop()
        return agents
    finally:
        for a in agents:
            a.stop()
