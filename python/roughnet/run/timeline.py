"""Runs with a timeline (docs/timelines.md): several workloads and senders at once, events, traces.

A run whose ``Run.has_timeline`` is true comes here from ``runner.measure`` instead of the single
workload path.  This module owns

- the *flows*: one per workload and sender, each with its own agents (receivers on every host of the
  workload's ``to``, one sender), its own port (``AGENT_PORT`` + flow index) and topic, and trace files
  for the stream pattern (``trace-<workload>-<sender>.tx``, ``trace-<workload>-<sender>-<receiver>.rx``);
- the order of a timeline run: every receiver ready, then **t0** (CLOCK_MONOTONIC), the senders of each
  workload at t0 + its ``start``, the events at t0 + their ``at`` on a thread of their own
  (``EventRunner``), the same budgets as a single workload (the scenario's timeout from t0, a grace);
- the events themselves: a link's down/up/set through its wire's control socket (the same
  ScheduledChange a [[link.schedule]] entry becomes), a host isolated by an nftables table that drops
  everything but loopback in its namespace (any link engine), a service killed, stopped, started,
  paused, resumed or restarted (``services.start_again``), an agent killed; each recorded with the
  time it was begun and the time it had taken effect;
- safety: whatever the run's end, paused services are resumed and isolated hosts rejoined before the
  services are stopped and the topology torn down;
- the record: per workload and per flow metrics (``collect``), and when the analysis package
  ``roughnet.timeline`` is present, the time series and recovery rows from the traces.
"""

from __future__ import annotations

import dataclasses
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
from ..runspec import Event, Run, Workload
from . import collect, hostagent
from .agents import AGENT_PORT, DRAIN_GRACE_S, READY_TIMEOUT_S, AgentProcess, AgentSpec, wait_watching, agent_specs, \
    prepare_specs, start_agent, topic_of

log = logging.getLogger(__name__)

#: nftables table that cuts an isolated host off (its own namespace only).
ISOLATE_TABLE = "roughnet_isolate"
ISOLATE_RULES = f"""table inet {ISOLATE_TABLE} {{
  chain input {{ type filter hook input priority -300; policy drop; iif "lo" accept; }}
  chain output {{ type filter hook output priority -300; policy drop; oif "lo" accept; }}
  chain forward {{ type filter hook forward priority -300; policy drop; }}
}}
"""
#: Default length of one interval of the time series.
SERIES_INTERVAL_NS = 1_000_000_000
#: Longest a stop (SIGTERM) of a service by an event waits before SIGKILL.
EVENT_STOP_GRACE_S = 10.0


@dataclass
class Flow:
    """One sender of one workload, with its receivers."""

    index: int
    workload: Workload  # the workload as seen by this flow: sender = this sender, no others
    name: str  # the workload's name
    sender: str
    specs: list[AgentSpec]
    receivers: list[AgentProcess] = field(default_factory=list)
    sender_agent: AgentProcess | None = None

    @property
    def traced(self) -> bool:
        return self.workload.pattern == "stream"


def ready_allowance_s(run: Run) -> float:
    """How long a receiver of a timeline run may take to be ready (``wait_ready``)."""
    return min(READY_TIMEOUT_S, max(10.0, run.workload.timeout_ns / 1e9))


def plan_flows(run: Run, address_of, broker_of, extra, artifacts: Path) -> list[Flow]:
    """Every flow of the run with its agents' configurations (receivers first, the sender last).

    The run's budget counts from t0 (``run_timeline`` stops whatever is left at t0 + timeout + a grace), but a
    receiver's own ``timeout_ms`` counts from its start, before every other receiver was ready. In host mode (the
    fleets: hundreds of receivers getting ready at once) a stream receiver's timeout also covers that wait
    (``ready_allowance_s``): at 100 zenoh cars getting every receiver ready took about a minute, and receivers with
    the bare 60 s timed out before their senders began. The run's own budget still ends them (``signal``)."""
    flows: list[Flow] = []
    ready_ms = int(ready_allowance_s(run) * 1000)
    host_mode = hostagent.agents_mode(run) == "host"  # DDS: one participant per host agent (prepare_specs)
    for w in run.all_workloads:
        for sender in w.senders:
            index = len(flows)
            fw = dataclasses.replace(w, sender=sender, also_from=(),  # a sender in `to`: to the others (spec.groups)
                                     receivers=tuple(r for r in w.receivers if r != sender))
            view = dataclasses.replace(run, workload=fw)
            specs = agent_specs(view, address_of, broker_of, extra)
            prepare_specs(view, specs, artifacts, flow=index, host=host_mode)
            topic = topic_of(run) if index == 0 else f"{topic_of(run)}/{w.name}/{sender}"
            port = AGENT_PORT + index
            for sp in specs:
                cfg = sp.config
                sp.tag = f"{w.name}-{sender}"
                if cfg.get("listen"):
                    cfg["listen"] = hostagent.with_port(cfg["listen"], port)
                if cfg.get("peers"):
                    cfg["peers"] = [hostagent.with_port(p, port) for p in cfg["peers"]]
                cfg["topic"] = topic
                if host_mode and sp.role == "receiver" and w.pattern == "stream":  # started before t0 (above)
                    cfg["timeout_ms"] = cfg["timeout_ms"] + ready_ms
                if w.pattern == "stream":
                    name = (f"trace-{w.name}-{sender}.tx" if sp.role == "sender"
                            else f"trace-{w.name}-{sender}-{sp.host}.rx")
                    cfg["trace_path"] = str(artifacts / name)
                else:  # no trace: the series comes from the agents' interval lines, one per series interval
                    cfg["report_interval_ms"] = max(10, run.series_interval_ns // 1_000_000)
            flows.append(Flow(index, fw, w.name, sender, specs))
    return flows


@dataclass
class Timeline:
    """What a timeline run leaves for its record."""

    t0_ns: int
    end_ns: int
    flows: list[Flow]
    events: list[dict[str, Any]]
    killed_agents: set[int]  # pids of agents an event killed
    down: set[str] = field(default_factory=set)  # service kinds events left down at the end
    agent_processes: int = 0  # host mode: one per host with flows; else one per flow and role


def _sleep_until(t_ns: int, stop: threading.Event | None = None, watch=None) -> None:
    while True:
        left = (t_ns - time.monotonic_ns()) / 1e9
        if left <= 0:
            return
        if stop is not None and stop.is_set():
            return
        time.sleep(min(left, 0.05 if stop is not None else 0.5))
        if watch is not None:
            reason = watch()
            if reason:
                raise ServiceError(reason)


class EventRunner:
    """Carries out a run's events at their times on a thread; records what happened and when."""

    def __init__(self, run: Run, topology, link_engines: dict[int, Any], handles: list, flows: list[Flow]):
        self.run = run
        self.topology = topology
        self.link_engines = link_engines
        self.handles = {h.kind: h for h in handles}
        self.flows = flows
        self.records: list[dict[str, Any]] = []
        self.down: set[str] = set()  # service kinds an event took down (killed, stopped, paused)
        self.paused: set[str] = set()
        self.isolated: set[str] = set()
        self.killed_agents: set[int] = set()
        self.processes: Any = None  # apps.supervisor.Supervisor of the run's [[process]] entries, if any
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.t0_ns = 0

    def start(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        if self.run.events:
            self._thread = threading.Thread(target=self._loop, name="events", daemon=True)
            self._thread.start()

    def is_down(self, handle) -> bool:
        with self._lock:
            return handle.kind in self.down

    def _rel(self, t_ns: int) -> float:
        return round((t_ns - self.t0_ns) / 1e9, 6)

    def _loop(self) -> None:
        for e in self.run.events:
            _sleep_until(self.t0_ns + e.at_ns, self._stop)
            if self._stop.is_set():
                return
            rec: dict[str, Any] = {"index": e.index, "at_s": e.at_ns / 1e9, "kind": e.kind, "target": e.target,
                                   "action": e.action, "detail": None, "started_s": None, "took_effect_s": None,
                                   "ends": e.ends, "error": None}
            began = time.monotonic_ns()
            rec["started_s"] = self._rel(began)
            try:
                rec["detail"] = self._do(e)
            except Exception as ex:  # noqa: BLE001 - recorded with the event; the run goes on
                log.warning("event %d (%s %s) failed: %s", e.index, e.action, e.target, ex)
                rec["error"] = f"{type(ex).__name__}: {ex}"
            rec["took_effect_s"] = self._rel(time.monotonic_ns())
            with self._lock:
                self.records.append(rec)

    def _do(self, e: Event) -> str | None:
        if e.kind == "link":
            return self._link(e)
        if e.kind == "host":
            return self._host(e)
        if e.kind == "service":
            return self._service(e)
        if e.kind == "process":
            if self.processes is None:
                raise RuntimeError(f"no process {e.process} in this run")
            return self.processes.event(e.action, e.process or "")
        return self._agent(e)

    def _link(self, e: Event) -> str:
        link = next(lk for lk in self.run.links if lk.index == e.link)
        eng = self.link_engines.get(e.link)
        wp = eng.process(link) if eng is not None and hasattr(eng, "process") else None
        if wp is None:
            raise RuntimeError(f"link {e.link} has no roughnet-wire to control")
        change = e.change or {}
        if "a_to_b" in change or "b_to_a" in change:
            config = {k: v for k, v in wp.config.items() if k != "schedule"}
            config.update({k: change[k] for k in ("a_to_b", "b_to_a") if k in change})
            wp.request({"cmd": "set", "config": config})
        if "up" in change:
            cmd: dict[str, Any] = {"cmd": "up" if change["up"] else "down"}
            sides = [k for k in ("a_to_b", "b_to_a") if k in change]
            wp.request(cmd)
            return f"wire {cmd['cmd']}" + (f" ({', '.join(sides)})" if sides else "")
        return "wire set " + ", ".join(k for k in ("a_to_b", "b_to_a") if k in change)

    def _host(self, e: Event) -> str:
        assert e.host is not None
        if e.action == "isolate":
            res = self.topology.run(e.host, ["nft", "-f", "-"], input=ISOLATE_RULES, text=True, capture_output=True)
            if res.returncode != 0:
                raise RuntimeError(f"nft: {res.stderr.strip()}")
            self.isolated.add(e.host)
            return "nftables: everything but loopback dropped"
        self._rejoin(e.host)
        return "nftables table removed"

    def _rejoin(self, host: str) -> None:
        res = self.topology.run(host, ["nft", "delete", "table", "inet", ISOLATE_TABLE], text=True,
                                capture_output=True)  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"nft: {res.stderr.strip()}")
        self.isolated.discard(host)

    def _service(self, e: Event) -> str:
        from .. import services

        h = self.handles.get(e.service or "")
        if h is None:
            raise RuntimeError(f"no {e.service} service in this run")
        a = e.action
        if a in ("kill", "stop", "restart"):
            with self._lock:
                self.down.add(h.kind)
            pid = h.pid
            if h.kind in self.paused:
                os.kill(pid, signal.SIGCONT)
                self.paused.discard(h.kind)
            h.proc.send_signal(signal.SIGKILL if a == "kill" else signal.SIGTERM)
            try:
                h.proc.wait(timeout=EVENT_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                h.proc.kill()
                h.proc.wait(timeout=5)
            detail = f"pid {pid} {'killed' if a == 'kill' else 'stopped'} (exit {h.proc.returncode})"
            if a != "restart":
                return detail
            probe = services.start_again(h)
            with self._lock:
                self.down.discard(h.kind)
            return f"{detail}; pid {h.pid} ready: {probe}"
        if a == "start":
            probe = services.start_again(h)
            with self._lock:
                self.down.discard(h.kind)
            return f"pid {h.pid} ready: {probe}"
        if a == "pause":
            with self._lock:
                self.down.add(h.kind)
                self.paused.add(h.kind)
            os.kill(h.pid, signal.SIGSTOP)
            return f"pid {h.pid} SIGSTOP"
        os.kill(h.pid, signal.SIGCONT)  # resume
        with self._lock:
            self.paused.discard(h.kind)
            self.down.discard(h.kind)
        return f"pid {h.pid} SIGCONT"

    def _agent(self, e: Event) -> str:
        for f in self.flows:
            if f.name != e.workload:
                continue
            for a in [*f.receivers, f.sender_agent]:
                if a is not None and a.spec.host == e.host and a.proc.poll() is None:
                    self.killed_agents.add(a.proc.pid)
                    a.proc.kill()
                    if isinstance(a, hostagent.FlowAgent):  # [scenario] agents = "host": one process per host
                        return f"the host agent of {a.spec.host} (every flow in it) pid {a.proc.pid} killed"
                    return f"{a.name} pid {a.proc.pid} killed"
        raise RuntimeError(f"no running agent of workload {e.workload} on host {e.host}")

    def finish(self, timeout_s: float) -> None:
        """Let the event in progress end (within ``timeout_s``); cancel the ones not begun."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.1, timeout_s))
            if self._thread.is_alive():
                log.warning("an event was still in progress %.0f s after the run's end", timeout_s)

    def restore(self) -> None:
        """Resume paused services and rejoin isolated hosts (whatever happened); never raises."""
        for kind in list(self.paused):
            h = self.handles.get(kind)
            try:
                if h is not None:
                    os.kill(h.pid, signal.SIGCONT)
            except OSError:
                pass
            self.paused.discard(kind)
        for host in list(self.isolated):
            try:
                self._rejoin(host)
            except Exception as ex:  # noqa: BLE001 - the namespace goes with the teardown anyway
                log.warning("rejoining host %s: %s", host, ex)

    def cancelled(self) -> list[dict[str, Any]]:
        """Events never begun (the run ended first), as records with an error."""
        done = {r["index"] for r in self.records}
        return [{"index": e.index, "at_s": e.at_ns / 1e9, "kind": e.kind, "target": e.target, "action": e.action,
                 "detail": None, "started_s": None, "took_effect_s": None, "ends": e.ends,
                 "error": "not carried out: the run had ended"} for e in self.run.events if e.index not in done]


def run_timeline(run: Run, agent_path: Path, topology, link_engines: dict[int, Any], handles: list,
                 artifacts: Path, broker_of, extra, agents: list, watch_services, processes=None) -> Timeline:
    """Receivers of every flow, t0, senders at their workloads' starts, events; everyone's results.

    ``watch_services(ignore)`` returns why the run must stop (a service died that no event took down).
    ``agents`` receives every agent as it starts.
    """
    flows = plan_flows(run, topology.address, broker_of, extra, artifacts)
    events = EventRunner(run, topology, link_engines, handles, flows)
    events.processes = processes  # apps.supervisor.Supervisor: the user's processes, for their events

    def watch():
        return watch_services(events.is_down) if watch_services else None

    timeout_s = run.workload.timeout_ns / 1e9
    host_mode = hostagent.agents_mode(run) == "host"
    host_agents: list[hostagent.HostAgent] = []
    try:
        if host_mode:  # one process per host: receivers now, senders inside it at t0 + their start
            host_agents.extend(hostagent.start_host_agents(topology, agent_path, flows, artifacts, run))
            agents.extend(a for f in flows for a in [*f.receivers, f.sender_agent])
        else:
            for f in flows:
                for spec in f.specs[:-1]:
                    a = start_agent(topology, agent_path, spec, artifacts)
                    f.receivers.append(a)
                    agents.append(a)
        for f in flows:
            for a in f.receivers:
                a.wait_ready(ready_allowance_s(run))
        t0 = time.monotonic_ns()
        if host_mode:
            hostagent.send_t0(host_agents, t0)
        if processes is not None:
            processes.start(t0)
        events.start(t0)
        deadline = t0 + int((timeout_s + DRAIN_GRACE_S) * 1e9)
        for f in sorted(flows, key=lambda f: (f.workload.start_ns, f.index)) if not host_mode else ():
            _sleep_until(t0 + f.workload.start_ns, watch=watch)
            f.sender_agent = start_agent(topology, agent_path, f.specs[-1], artifacts)
            agents.append(f.sender_agent)
        for f in flows:
            if not _wait(f.sender_agent, deadline, watch):
                f.sender_agent.stop()
        for f in flows:  # as run_agents: receivers get the rest of the budget, a failed sender's only the grace
            sender_gone = f.sender_agent.result is None
            for a in f.receivers:
                end = min(deadline, time.monotonic_ns() + int(DRAIN_GRACE_S * 1e9)) if sender_gone else deadline
                if not _wait(a, end, watch):
                    a.stop()
        if processes is not None:  # the user's processes the run waits for (events go on meanwhile)
            processes.wait(t0 + run.workload.timeout_ns, watch=watch)
        end_ns = time.monotonic_ns()
        events.finish(max(1.0, (deadline - end_ns) / 1e9))
        records = sorted(events.records + events.cancelled(), key=lambda r: r["index"])
        return Timeline(t0, end_ns, flows, records, set(events.killed_agents), set(events.down),
                        agent_processes=len(host_agents) if host_mode else len(agents))
    finally:
        events.finish(1.0)
        events.restore()
        hostagent.stop_all(host_agents)
        for a in agents:
            a.stop()


def _wait(agent: AgentProcess, deadline_ns: int, watch) -> bool:
    """``agents.wait_watching`` up to a CLOCK_MONOTONIC deadline; True when the agent ended."""
    return agent.done.is_set() or wait_watching(agent, (deadline_ns - time.monotonic_ns()) / 1e9, watch)


# ----------------------------------------------------------------------------- the record


def promise_of(w: Workload, run: Run) -> dict[str, Any] | None:
    """What the protocol promises across a broker restart with these settings, or None (docs/timelines.md)."""
    o = w.options
    svc = {s.kind: s for s in run.services}
    if w.protocol == "mqtt":
        qos = int(o.get("qos", 0))
        persistent = o.get("clean_session") is False
        stored = bool(svc.get("mosquitto") and svc["mosquitto"].options.get("persistence"))
        if qos >= 1 and persistent and stored:
            return {"name": f"MQTT QoS {qos}, persistent session, broker persistence on", "no_loss": True,
                    "no_duplicates": qos == 2}
        if qos == 2:
            return {"name": "MQTT QoS 2 (exactly once)", "no_loss": False, "no_duplicates": True}
        return None
    if w.protocol == "kafka" and str(o.get("acks", "all")) == "all":
        return {"name": "Kafka acks=all", "no_loss": True, "no_duplicates": bool(o.get("idempotence"))}
    if w.protocol == "nats" and o.get("jetstream"):
        return {"name": "NATS JetStream", "no_loss": True, "no_duplicates": False}
    return None


def _result_or_none(a: AgentProcess | None) -> dict[str, Any] | None:
    return a.result if a is not None else None


def fill_record(record: dict[str, Any], run: Run, tl: Timeline, tcp_deltas, link_counters, cpu_stats) -> None:
    """The record of a timeline run: per workload and flow, the headline of the first foreground workload."""
    missing, broken = [], []
    for f in tl.flows:
        for a in [*f.receivers, f.sender_agent]:
            if a is not None and a.result is None and a.proc.pid not in tl.killed_agents:
                missing.append(a)
            elif a is not None and a.result is not None and a.result.get("error"):
                broken.append(a)  # a partial result: it counted until its connection failed (issue 26)
    reported = any(a is not None and a.result is not None for f in tl.flows for a in [*f.receivers, f.sender_agent])
    if missing and not reported:
        record["failure_reason"] = "; ".join(a.describe_failure() for a in missing)
        record["stderr_tail"] = "\n".join(f"--- {a.name}\n{a.stderr_tail(800)}" for a in missing)[-4000:]
        record["events"] = tl.events
        return
    killed = tl.killed_agents
    workloads, flow_rows = [], []
    foreground: list[tuple[str, str, list[str]]] = []
    for w in run.all_workloads:
        wflows = [f for f in tl.flows if f.name == w.name]
        per_rx, rx_results = [], []
        for f in wflows:
            for a in f.receivers:
                res = a.result
                m = collect.receiver_metrics(w.pattern, res) if res else {}
                gone = "killed" if a.proc.pid in tl.killed_agents else "no result"
                flow_rows.append({"workload": w.name, "sender": f.sender, "receiver": a.spec.host,
                                  "metrics": {**m, "end_reason": (res or {}).get("end_reason", gone)}})
                if res:
                    per_rx.append(m)
                    rx_results.append((a.spec.host, res))
        senders = [f.sender_agent.result for f in wflows if _result_or_none(f.sender_agent)]
        merged = dict(senders[0]) if senders else {}
        if len(senders) > 1:
            merged["sent"] = sum(int(s.get("sent") or 0) for s in senders)
        metrics = collect.aggregate(w.pattern, per_rx, merged)
        validity, reasons = collect.verdict(w.pattern, rx_results if w.pattern in ("stream", "bulk") else [],
                                            merged, cpu_stats, link_counters, w.protocol, tcp_deltas,
                                            distance_loss=any(link.positions for link in run.links))
        gone = [a.name for f in wflows for a in [*f.receivers, f.sender_agent]
                if a is not None and a.proc.pid in killed]  # fmt: skip
        if gone:
            reasons = [*reasons, "killed by an event: " + ", ".join(gone)]
        workloads.append({"name": w.name, "protocol": w.protocol, "pattern": w.pattern, "senders": list(w.senders),
                          "receivers": list(w.receivers), "start_s": w.start_ns / 1e9, "background": w.background,
                          "metrics": metrics, "validity": validity, "validity_reasons": reasons})
        if not w.background:
            foreground.append((w.name, validity, reasons))
    head = next((x for x in workloads if not x["background"]), workloads[0])
    metrics = dict(head["metrics"])
    metrics.update(collect.link_drop_metrics(link_counters))
    metrics.update(collect.tcp_metrics(tcp_deltas))
    metrics.update(collect.udp_metrics(tcp_deltas))
    metrics["cpu_agents_s"] = round(hostagent.process_cpu_s([a for f in tl.flows for a in [*f.receivers,
                                                                                          f.sender_agent]]), 4)
    metrics["agent_processes"] = tl.agent_processes
    metrics["cpu_machine_util"] = cpu_stats.get("mean")
    record["metrics"] = metrics
    record["receivers"] = [{"host": r["receiver"], "metrics": r["metrics"]} for r in flow_rows
                           if r["workload"] == head["name"]]  # fmt: skip
    for f in tl.flows:
        if f.name == head["name"]:
            for a in f.receivers:
                if a.result:
                    record["histograms"].extend(collect.histograms(a.spec.host, a.result))
    record["link_counters"] = {str(k): v for k, v in link_counters.items()}
    record["tcp_counters"] = tcp_deltas
    order = {"valid": 0, "suspect": 1, "invalid": 2}
    several = len(foreground) > 1
    worst = max((v for _, v, _ in foreground), key=order.__getitem__, default="valid")
    record["validity"] = worst
    record["validity_reasons"] = [f"{n}: {r}" if several else r for n, _, rs in foreground for r in rs]
    record["workloads"] = workloads
    record["flows"] = flow_rows
    record["events"] = tl.events
    record["t0_ns"] = tl.t0_ns
    prepared: dict[tuple[str, str, str], Any] = {}  # each flow's traces read and sorted once, for both
    try:
        record["series"], record["recovery"] = analyse(run, tl, run.series_interval_ns, prepared)
    except Exception as e:  # noqa: BLE001 - a bug of ours must not lose the run's results
        log.exception("time series of run %s", run.run_id)
        record["series"], record["recovery"] = [], []
        record["validity_reasons"].append(f"no time series: internal error {type(e).__name__}: {e}")
        if record["validity"] == "valid":
            record["validity"] = "suspect"
    try:  # hosts with positions: every message's sender-receiver distance (docs/results-format.md, distance)
        from ..mobility.distance import record_distances
        record_distances(record, run, tl, link_counters, prepared)
    except Exception as e:  # noqa: BLE001 - as above
        log.exception("distances of run %s", run.run_id)
        record["validity_reasons"].append(f"no distances: internal error {type(e).__name__}: {e}")
    if missing or broken:  # every figure above is kept; the run is failed, incomplete, and says why
        why = [a.describe_partial() for a in [*broken, *missing]]
        record["partial"] = True
        record["failure_reason"] = "incomplete: " + "; ".join(why)
        record["stderr_tail"] = "\n".join(f"--- {a.name}\n{a.stderr_tail(800)}" for a in [*broken, *missing])[-4000:]
        record["validity"] = "invalid"
        record["validity_reasons"] = [*record["validity_reasons"], *(f"incomplete: {r}" for r in why)]
        return
    record["status"] = "ok"


def analyse(run: Run, tl: Timeline, interval_ns: int = SERIES_INTERVAL_NS,
            prepared: dict[tuple[str, str, str], Any] | None = None) -> tuple[list[dict], list[dict]]:
    """Time series and recovery rows from the flows' traces (``roughnet.timeline``). ``prepared`` receives each
    traced flow's ``series.prepare`` by (workload, sender, receiver), for the distances to reuse."""
    from ..timeline import recovery as rec_mod
    from ..timeline import series as series_mod
    from ..timeline import traces

    series: list[dict] = []
    recovery: list[dict] = []
    faults = rec_mod.fault_windows(tl.events, (tl.end_ns - tl.t0_ns) / 1e9) if tl.events else []
    # Traced flows' series are made all at once (series.flows_series) and put in their place after: ``chunks``
    # holds rows ready (untraced flows) or the range of the batch's flows that goes there.
    chunks: list[list[dict] | range] = []
    batch: list[Any] = []
    payloads: list[int] = []
    keys: list[dict[str, str]] = []
    for f in tl.flows:
        if not f.traced:
            for a in f.receivers:
                chunks.append(interval_rows(f, a, tl, interval_ns))
            continue
        if "trace_path" not in f.specs[-1].config:
            continue
        tx_path = Path(f.specs[-1].config["trace_path"])
        tx = traces.read_tx(tx_path)
        promise = promise_of(f.workload, run)
        first = len(batch)
        for a in f.receivers:
            rx = traces.read_rx(Path(a.spec.config["trace_path"]))
            flow = series_mod.prepare(tx, rx)
            if prepared is not None:
                prepared[(f.name, f.sender, a.spec.host)] = flow
            key = {"workload": f.name, "sender": f.sender, "receiver": a.spec.host}
            batch.append(flow)
            payloads.append(f.workload.payload_bytes)
            keys.append(key)
            for n, fault in enumerate(faults):
                start_ns = tl.t0_ns + int(fault["start_s"] * 1e9)
                end_ns = tl.t0_ns + int(fault["end_s"] * 1e9)
                later = [g["start_s"] for g in faults[n + 1:] if g["start_s"] >= fault["end_s"]]
                horizon = tl.t0_ns + int(min(later) * 1e9) if later else None  # judged before the next fault
                row = rec_mod.recovery(flow, None, tl.t0_ns, start_ns, end_ns, promise=promise,
                                       interval_ns=interval_ns, horizon_ns=horizon)
                recovery.append({"event": fault["event"], **key, **row})
        chunks.append(range(first, len(batch)))
    rows_of = series_mod.flows_series(batch, tl.t0_ns, tl.end_ns, interval_ns, payloads, prefix=keys)
    for chunk in chunks:
        if isinstance(chunk, range):
            for k in chunk:
                series.extend(rows_of[k])
        else:
            series.extend(chunk)
    return series, recovery


def interval_rows(f: Flow, a: AgentProcess, tl: Timeline, interval_ns: int) -> list[dict[str, Any]]:
    """Series rows of an untraced flow (bulk) from its receiver's interval lines: bytes and throughput per
    interval, placed on the nearest interval of the run's grid (the agent counts from its own start, a few
    milliseconds after ``started_ns``); message counts, loss and latency are not known there (None)."""
    rows: dict[float, dict[str, Any]] = {}
    step = int(a.spec.config.get("report_interval_ms") or 1000) * 1_000_000
    for line in a.intervals:
        t_ms = line.get("t_ms")
        if not isinstance(t_ms, (int, float)):
            continue
        start = a.started_ns + int(t_ms * 1_000_000) - step
        k = round((start - tl.t0_ns) / interval_ns)
        if k < 0 or tl.t0_ns + k * interval_ns >= tl.end_ns:
            continue
        t_s = round(k * interval_ns / 1e9, 6)
        row = rows.setdefault(t_s, {"workload": f.name, "sender": f.sender, "receiver": a.spec.host, "t_s": t_s,
                                    "interval_s": interval_ns / 1e9, "sent": None, "delivered": None, "bytes": 0,
                                    "throughput_bps": 0.0, "lost": None, "duplicates": None, "reordered": None,
                                    "lat_p50_us": None, "lat_p90_us": None, "lat_p99_us": None,
                                    "lat_max_us": None})  # fmt: skip
        row["bytes"] += int(line.get("bytes") or 0)
        row["throughput_bps"] = round(row["bytes"] * 8 / (interval_ns / 1e9), 3)
    return [rows[t] for t in sorted(rows)]
