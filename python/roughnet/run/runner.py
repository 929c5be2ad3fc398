"""The runner: preflight a sweep, then for each run build, measure, record, tear down.

Owns the order of things in a run (topology, link engines, counters before,
receivers, ready handshake, sender, counters after, teardown) and the sweep
loop (resume, a failed run is recorded and the sweep goes on, Ctrl-C and
SIGTERM tear the current run down and stop).  Runs that share their
services (``reuse = true``) are grouped by ``run.reuse`` and run in one
environment by ``run.group``, which uses ``measure`` from here.  It delegates: namespaces to
``topo``, impairments to ``links``, agents to ``run.agents``, judging to
``run.collect``, storage to ``results``.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__, capture, links, topo
from ..binaries import agent_version, lacking_drivers_message, require_binary
from ..errors import PreflightError, RoughnetError, RunBusyError, ServiceError
from ..runspec import Run, Sweep
from ..ros2 import launch as ros2_launch
from . import collect
from .agents import agent_specs, run_agents
from .counters import CpuSampler, counter_delta, tcp_counters

log = logging.getLogger(__name__)


class Interrupted(BaseException):
    """Raised (from a signal handler) to stop a sweep; teardown still runs."""


@dataclass
class Preflight:
    """What preflight found: the agent to use, each run's engine per link, and the backend that runs them."""

    agent_path: Path | None  # None: the backend plays the agents itself (ns3)
    agent: dict[str, Any]
    caps: Any
    engines: dict[str, dict[int, str]]  # run_id -> link index -> engine
    backend: Any = None  # backends.Backend; None: the namespace backend

    def __post_init__(self) -> None:
        if self.backend is None:
            from ..backends.namespace import NamespaceBackend

            self.backend = NamespaceBackend()


def preflight(sweep: Sweep, backend: Any = None) -> Preflight:
    """Check that ``backend`` (default: namespaces of this machine) can run every run of the sweep; create
    nothing that outlives it.

    Raises PreflightError naming what is missing and how to get it.
    """
    if backend is None:
        from ..backends.namespace import NamespaceBackend

        backend = NamespaceBackend()
    played = getattr(backend, "plays_agents", None)
    if played is not None:  # the backend plays the agents itself (ns3: its simulation); its check() refuses
        agent_path, agent = None, played()  # no program to start: Preflight.agent_path stays None
    else:
        try:
            agent_path = require_binary("roughnet-agent")
        except RoughnetError as e:
            raise PreflightError(str(e)) from e
        agent = agent_version(str(agent_path))
    protocols = set(agent.get("protocols", []))
    patterns = set(agent.get("patterns", []))
    if agent_path is not None:  # every driver the sweep needs, named with the make target that adds it
        needed: dict[str, list[int]] = {}
        for run in sweep.runs:
            for w in run.all_workloads:
                if w.protocol != ros2_launch.PROTOCOL and run.index not in needed.setdefault(w.protocol, []):
                    needed[w.protocol].append(run.index)
        lacking = lacking_drivers_message(str(agent_path), agent, needed)
        if lacking:
            raise PreflightError(lacking)
    caps = backend.probe()  # after the agent's checks: a refusal there creates nothing (not even a probe)
    engines: dict[str, dict[int, str]] = {}
    if any(r.processes for r in sweep.runs) and getattr(backend, "processes", None) is None:  # the user's programs
        raise PreflightError(_no_processes(backend.name))
    for run in sweep.runs:
        w = run.workload
        if w is None:  # a run of [[process]] entries only
            engines[run.run_id] = backend.engines(run, caps)
            continue
        if w.protocol == ros2_launch.PROTOCOL:  # endpoints are rclpy nodes (roughnet.ros2), not roughnet-agent
            if backend.name != "namespace":
                raise PreflightError(f"run {run.index}: protocol \"ros2\" runs on the namespace backend only so far "
                                     f"(its endpoints are not in the {backend.name} backend's image)")
            ros2_launch.preflight()
            engines[run.run_id] = backend.engines(run, caps)
            continue
        if w.protocol not in protocols:
            raise PreflightError(
                f"run {run.index} ({run.params}): this roughnet-agent does not speak protocol {w.protocol!r}; "
                f"it speaks {', '.join(sorted(protocols))}"
            )
        if w.pattern not in patterns:
            raise PreflightError(f"run {run.index}: this roughnet-agent has no pattern {w.pattern!r}")
        engines[run.run_id] = backend.engines(run, caps)
    backend.check(sweep, caps)
    if any(r.processes for r in sweep.runs) and backend.processes == "here":  # docs/applications.md
        from .. import apps

        apps.preflight(sweep)
    if backend.name == "namespace":  # services and captures on this machine: the tools must be here
        if any(r.services for r in sweep.runs):
            from .. import services

            services.preflight(sweep)
        capture.preflight(sweep)  # --- packet capture: tcpdump present when a link asks for capture
    return Preflight(agent_path, agent, caps, engines, backend)


def _no_processes(backend: str) -> str:
    if backend == "ns3":
        return ("[[process]]: the ns3 backend simulates its hosts and cannot run a real program; run the "
                "scenario on the namespace backend (the default)")
    return (f"[[process]]: the {backend} backend does not run user processes (the namespace and kubernetes "
            f"backends do; docs/applications.md)")


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _versions(pf: Preflight) -> dict[str, str]:
    return {"roughnet": __version__, "agent": str(pf.agent.get("agent", "?")), "kernel": os.uname().release}


def base_record(run: Run, engines: dict[int, str], pf: Preflight) -> dict[str, Any]:
    return {
        "sweep_id": run.sweep_id,
        "run_id": run.run_id,
        "index": run.index,
        "scenario": run.scenario,
        "params": dict(run.params),
        "repeat": run.repeat,
        "seed": run.seed,
        "status": "failed",
        "failure_reason": None,
        "stderr_tail": None,
        "started_at": _now_iso(),
        "duration_s": None,
        "engine": ",".join(sorted(set(engines.values()))) or "none",
        "versions": _versions(pf),
        "backend": pf.backend.name,
        "backend_info": pf.backend.describe(),
        "pattern": run.workload.pattern if run.workload is not None else None,
        "protocol": run.workload.protocol if run.workload is not None else None,
        "run": run.to_dict(),
        "metrics": {},
        "validity": "invalid",
        "validity_reasons": [],
        "receivers": [],
        "histograms": [],
        "points": None,
        "link_counters": {},
        "tcp_counters": {},
    }


def execute_run(run: Run, pf: Preflight, artifacts: Path) -> dict[str, Any]:
    """Run one run from topology to teardown and return its record (never raises RoughnetError)."""
    engines = pf.engines[run.run_id]
    record = base_record(run, engines, pf)
    t0 = time.monotonic()
    ledger = topology = None
    agents: list = []
    handles: list = []
    timing: dict[str, float] = {}
    try:  # everything the run makes is made in here, so that the finally below removes it whatever fails
        (artifacts / "run.json").write_text(json.dumps(run.to_dict(), indent=1, default=str))
        ledger = topo.Ledger(run.run_id[:8], run.run_id)  # RunBusyError: the same run, live elsewhere
        topology = pf.backend.environment(run, ledger, engines, artifacts.parent)
        topology.build()
        link_engines = apply_links(topology, run, engines)
        tcp_before = {h: tcp_counters(topology, h) for h in run.host_names()}
        if run.services:
            from .. import services

            handles = services.start_services(run, topology, artifacts)
        timing["harness_setup_s"] = round(time.monotonic() - t0, 3)
        t_measure = time.monotonic()
        measure(run, pf, topology, link_engines, handles, artifacts, record, tcp_before, agents)
        t_measured = time.monotonic()
        timing["harness_measure_s"] = round(t_measured - t_measure, 3)
    except (Interrupted, KeyboardInterrupt, RunBusyError):  # RunBusyError: nothing was made, nothing stored
        raise
    except RoughnetError as e:
        record_failure(record, e, agents)
    except Exception as e:  # a bug of ours: record it with its traceback, keep the sweep going
        record_failure(record, e, agents)
    finally:
        try:
            if handles:
                _stop_services(handles, record)
        finally:  # an interrupt while the services stop must not skip the teardown
            try:
                if topology is not None and hasattr(topology, "describe"):  # where the run happened (pods, nodes)
                    record["backend_info"] = topology.describe()
            finally:
                _teardown_run(topology, ledger)
        record["duration_s"] = round(time.monotonic() - t0, 3)
        if "harness_measure_s" in timing and isinstance(record.get("metrics"), dict):
            # what the run cost around its measurement (docs/results-format.md): building the topology,
            # links, services; and stopping services, describing the environment, teardown
            timing["harness_teardown_s"] = round(time.monotonic() - t_measured, 3)
            record["metrics"].update(timing)
    return record


def record_failure(record: dict[str, Any], e: Exception, agents) -> None:
    """Put a failed run's reason into its record (with the traceback for a bug of ours); the figures of a run
    that measured until a service died are kept (``partial``: its reason says so)."""
    record["status"] = "failed"
    if isinstance(e, RoughnetError):
        if record.get("partial"):  # the agents' own reasons (if any) after the service's
            before = record.get("failure_reason") or ""
            record["failure_reason"] = f"incomplete: {e}" + (f"; {before.removeprefix('incomplete: ')}"
                                                            if before else "")
        else:
            record["failure_reason"] = str(e)
        record["stderr_tail"] = _stderr_tails(agents)
        return
    log.exception("run %s failed unexpectedly", record.get("run_id"))
    record["failure_reason"] = f"internal error: {type(e).__name__}: {e}"
    record["stderr_tail"] = traceback.format_exc()[-2000:]


def apply_links(topology, run: Run, engines: dict[int, str]) -> dict[int, Any]:
    """Apply every link's impairments with its engine; link index -> the engine object."""
    link_engines = {}
    for link in run.links:
        eng = links.engine_for(engines[link.index])
        eng.apply(topology, link)
        link_engines[link.index] = eng
    return link_engines


def link_by_index(run: Run, index: int):
    return next(lk for lk in run.links if lk.index == index)


def measure(run: Run, pf: Preflight, topology, link_engines: dict[int, Any], handles: list, artifacts: Path,
            record: dict[str, Any], tcp_before: dict[str, dict[str, int]], agents: list,
            link_before: dict[int, dict[str, Any]] | None = None) -> None:
    """Agents, counters and the record's results, in an environment that is up (topology, links, services).

    ``agents`` receives the agent processes as they start (for stderr tails on failure).
    ``link_before`` (link index -> engine counters taken just before): record the link counters
    as the difference (an environment shared with earlier runs: run.group).  Raises RoughnetError
    (ServiceError when a service died) for the caller to record.
    """
    broker_of = extra = watch = None
    from .. import services

    if handles:

        broker_of = handles[0].address
        extra = getattr(handles[0], "agent_options", None) or None

        def watch():
            return services.check_alive(handles)
    captures = capture.start(run, topology, artifacts)  # --- packet capture (capture = true): tcpdump up
    procs = None
    if run.processes:  # the user's own programs: prepared now, started from t0 (apps.supervisor)
        from ..apps.supervisor import Supervisor

        procs = Supervisor(run, topology, artifacts, handles, topology.ledger)
    try:
        cpu = CpuSampler()
        cpu.start()
        timeline = None
        died_mid_run: ServiceError | None = None
        try:
            if procs is not None:
                procs.prepare()  # working folders, /etc/netns files, socket samplers (stopped by abort below)
            if run.workload is None:  # a run of [[process]] entries only: t0 now, events, the processes' end
                timeline = _processes_only(run, topology, link_engines, handles, procs, watch)
            elif run.has_timeline:  # several workloads or senders, delayed starts, events: run.timeline
                from . import timeline as tl

                def watch_services(down):
                    return services.check_alive([h for h in handles if not down(h)]) if handles else None
                timeline = tl.run_timeline(run, pf.agent_path, topology, link_engines, handles, artifacts,
                                           broker_of, extra, agents, watch_services, processes=procs)
            else:
                specs = agent_specs(run, topology.address, broker_of, extra)
                if procs is not None:
                    procs.start(time.monotonic_ns())
                if hasattr(topology, "run_agents"):  # agents played by the environment (the ns3 backend's simulation)
                    agents.extend(topology.run_agents(run, artifacts, specs))
                else:
                    run_agents(topology, pf.agent_path, run, artifacts, specs, watch=watch, into=agents)
            if procs is not None:  # the processes the run waits for: their stop times, their exits
                procs.wait(procs.t0_ns + run.run_timeout_ns, watch=watch)
                procs.finish()
        except ServiceError as e:  # a service died while the agents ran: they were stopped and reported; keep it
            if timeline is not None or run.workload is None or not any(a.result for a in agents):
                raise
            died_mid_run = e
        finally:
            if procs is not None:
                procs.abort()
            cpu_stats = cpu.stop()
        if getattr(topology, "simulated", False):  # a busy machine cannot distort simulated time: not judged
            cpu_stats = {**cpu_stats, "saturated_fraction": None}
        if handles:  # (a service an event took down and left down is not a failure)
            died = services.check_alive([h for h in handles if timeline is None or h.kind not in timeline.down])
            if died or died_mid_run is not None:
                why = died or str(died_mid_run)
                if timeline is None and run.workload is not None and any(a.result for a in agents):
                    # what the agents measured until then is kept with the failure (issue 26)
                    _keep_figures_of_a_dead_service(record, run, agents, topology, tcp_before, link_engines,
                                                    link_before, cpu_stats, why)
                if procs is not None:  # what the user's processes did is kept with the failure
                    _fill_processes(record, procs)
                raise ServiceError(why)
        tcp_deltas = {h: counter_delta(tcp_before[h], tcp_counters(topology, h)) for h in run.host_names()}
        link_counters = {i: eng.counters(topology, link_by_index(run, i)) for i, eng in link_engines.items()}
        if link_before is not None:
            link_counters = {i: link_counter_delta(link_before.get(i) or {}, c) for i, c in link_counters.items()}
        if run.workload is None:
            _fill_processes_only_record(record, timeline, tcp_deltas, link_counters, cpu_stats)
        elif timeline is not None:
            from . import timeline as tl

            tl.fill_record(record, run, timeline, tcp_deltas, link_counters, cpu_stats)
        else:
            _fill_record(record, run, agents, tcp_deltas, link_counters, cpu_stats)
        if procs is not None:
            _fill_processes(record, procs)
        if captures:  # --- packet capture: stop tcpdump, pcap_* metrics from its files
            capture.stop(captures)
            sender_result = agents[-1].result if agents else None
            record["metrics"].update(capture.metrics(captures, run.workload.sender if run.workload else None,
                                                     capture.messages_sent(sender_result)))
            if procs is not None and record.get("processes"):
                from ..apps.results import name_conversations

                name_conversations(record["processes"], artifacts / capture.ANALYSIS_FILE)
    finally:
        capture.stop(captures)


def _keep_figures_of_a_dead_service(record, run: Run, agents, topology, tcp_before, link_engines, link_before,
                                    cpu_stats, why: str) -> None:
    """A service died during the run: the record keeps every figure the agents reported (they were stopped and
    printed their results), with the run failed and incomplete for that reason."""
    tcp_deltas = {h: counter_delta(tcp_before[h], tcp_counters(topology, h)) for h in run.host_names()}
    link_counters = {i: eng.counters(topology, link_by_index(run, i)) for i, eng in link_engines.items()}
    if link_before is not None:
        link_counters = {i: link_counter_delta(link_before.get(i) or {}, c) for i, c in link_counters.items()}
    _fill_record(record, run, agents, tcp_deltas, link_counters, cpu_stats)
    record["status"] = "failed"
    record["partial"] = True
    record["validity"] = "invalid"
    record["validity_reasons"] = [f"incomplete: {why}", *(record.get("validity_reasons") or [])]
    if not record.get("series"):
        record["series"] = _interval_series(run.workload, agents)


def _processes_only(run: Run, topology, link_engines: dict[int, Any], handles: list, procs, watch):
    """A run of [[process]] entries only: t0 now, the events on their thread (run.timeline.EventRunner, without
    flows), until every process the run waits for has ended (or the timeout); t0, the end, the events' records
    and the services they left down (``down``, as a timeline has it)."""
    from types import SimpleNamespace

    from .timeline import EventRunner

    events = EventRunner(run, topology, link_engines, handles, [])
    events.processes = procs

    def watch_services():
        return watch() if watch is not None and not run.events else None
    try:
        t0 = time.monotonic_ns()
        procs.start(t0)
        events.start(t0)
        procs.wait(t0 + run.run_timeout_ns, watch=watch_services)
        end_ns = time.monotonic_ns()
        events.finish(1.0)
        return SimpleNamespace(t0_ns=t0, end_ns=end_ns, down=set(events.down),
                               events=sorted(events.records + events.cancelled(), key=lambda r: r["index"]))
    finally:
        events.finish(1.0)
        events.restore()


def _fill_processes_only_record(record: dict[str, Any], tl, tcp_deltas, link_counters, cpu_stats) -> None:
    """The record of a run without a workload: the machine's and the links' figures; the processes' own rows are
    ``_fill_processes``'; the verdict judges the machine (CPU) as for agents."""
    metrics: dict[str, Any] = {}
    metrics.update(collect.link_drop_metrics(link_counters))
    metrics.update(collect.tcp_metrics(tcp_deltas))
    metrics["cpu_machine_util"] = cpu_stats.get("mean")
    record["metrics"] = metrics
    record["link_counters"] = {str(k): v for k, v in link_counters.items()}
    record["tcp_counters"] = tcp_deltas
    record["validity"], record["validity_reasons"] = collect.machine_verdict(cpu_stats, link_counters)
    if tl.events:
        record["events"] = tl.events
    record["t0_ns"] = tl.t0_ns
    record["status"] = "ok"


def _fill_processes(record: dict[str, Any], procs) -> None:
    """The user processes' rows, series and histograms in the record; a process whose final state is not the
    expected one (or that never became ready) fails the run, which keeps every figure measured."""
    rows, series, hists = procs.records()
    record["processes"] = rows
    record["process_series"] = series
    record["histograms"].extend(hists)
    for p in procs.procs:
        p.collect_workdir()
    why = procs.verdict()
    if why:
        record["status"] = "failed"
        record["failure_reason"] = why if not record.get("failure_reason") else f"{record['failure_reason']}; {why}"
        tails = [f"--- process {p.name} (stderr)\n{p.stderr_tail()}" for p in procs.procs
                 if p.judge() and p.stderr_tail().strip()]
        if tails:
            record["stderr_tail"] = "\n".join([record.get("stderr_tail") or "", *tails]).strip()[-4000:]


#: Link counter keys that count since the engine applied the link (prefixes); the others are levels or settings.
_CUMULATIVE_PREFIXES = ("drops", "tx_", "rx_", "seen_", "overlimits", "duplicated", "corrupted", "reordered",
                        "sched_error_count", "send_errors")


def link_counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after`` with every cumulative counter (per direction) made the difference from ``before``.

    Levels (queue high marks, scheduling-error percentiles) and settings stay as ``after`` has them.
    A counter that went down (the engine started again between the two readings) is kept as is.
    """
    out: dict[str, Any] = {}
    for key, value in after.items():
        prev = before.get(key)
        if isinstance(value, dict):
            out[key] = link_counter_delta(prev if isinstance(prev, dict) else {}, value)
        elif (isinstance(value, int) and not isinstance(value, bool) and isinstance(prev, int)
              and not isinstance(prev, bool) and key.startswith(_CUMULATIVE_PREFIXES) and value >= prev):
            out[key] = value - prev
        else:
            out[key] = value
    return out


def _stop_services(handles, record) -> None:
    """Stop the run's services and keep their CPU and memory use with the run's metrics."""
    from .. import services

    try:
        usage = services.stop_services(handles)
    except (Interrupted, KeyboardInterrupt):
        services.stop_services(handles)
        raise
    for name, u in (usage or {}).items():
        key = name.replace("-", "_")
        record["metrics"][f"service_{key}_cpu_s"] = u.get("cpu_s")
        record["metrics"][f"service_{key}_rss_max_bytes"] = u.get("rss_max_bytes")
    for h in handles:
        record["metrics"][f"service_{h.kind}@{h.host}_pid".replace("-", "_")] = h.pid
    record["metrics"]["service_reused"] = False
    record["service_reused"] = False
    record["service_started_by"] = record["run_id"]


def teardown_shielded(topology) -> None:
    """Tear down even if an interrupt arrives in the middle of it.

    The CLI raises ``Interrupted`` at the first Ctrl-C or SIGTERM only (a second one asks for haste instead:
    ``topo.system.hurry``, processes killed without a grace); teardown is idempotent, so an interrupted teardown is
    simply finished before the interrupt goes on (and once more if a KeyboardInterrupt, which a caller without the
    CLI's handler gets at every Ctrl-C, cuts that short too).
    """
    try:
        topology.teardown()
    except (Interrupted, KeyboardInterrupt):
        try:
            topology.teardown()
        except (Interrupted, KeyboardInterrupt):
            topology.teardown()
        raise


def _teardown_run(topology, ledger) -> None:
    """Tear down what ``execute_run`` made, however far it got: the environment, or only the ledger when the
    environment was never made (its objects, if any, as `roughnet clean` removes them)."""
    if topology is not None:
        teardown_shielded(topology)
    elif ledger is not None:
        try:
            topo.clean_ledger(ledger.path)
        except (Interrupted, KeyboardInterrupt):
            topo.clean_ledger(ledger.path)
            raise
        except RoughnetError as e:
            log.error("run %s: %s", ledger.run_id, e)


def _stderr_tails(agents) -> str | None:
    files = {a.err_path: a for a in agents}  # host mode: the flows of one host share its process's stderr
    tails = [f"--- {getattr(a, 'host_agent', None) and a.host_agent.name or a.name}\n{a.stderr_tail(1000)}"
             for a in files.values() if a.stderr_tail(1000).strip()]
    return "\n".join(tails)[-4000:] if tails else None


def _fill_record(record, run: Run, agents, tcp_deltas, link_counters, cpu_stats) -> None:
    w = run.workload
    sender = agents[-1] if agents else None
    receivers = agents[:-1]
    missing = [a for a in agents if a.result is None]
    broken = [a for a in agents if a.result is not None and a.result.get("error")]
    if missing and not any(a.result for a in agents) or w.pattern == "sync" and (missing or broken):
        record["failure_reason"] = "; ".join(a.describe_failure() for a in missing or broken)
        record["stderr_tail"] = _stderr_tails(missing or broken)
        return
    if w.pattern == "sync":  # two syncers, both measure: collect.sync_metrics
        _fill_sync_record(record, run, agents, tcp_deltas, link_counters, cpu_stats)
        return
    _fill_figures(record, w, agents, tcp_deltas, link_counters, cpu_stats)
    if missing or broken:  # some agents measured before one failed: keep their figures (issue 26)
        _mark_partial(record, w, agents, missing, broken)
        return
    if w.pattern == "ramp":
        record["points"] = sender.result.get("points")
    record["validity"], record["validity_reasons"] = collect.verdict(
        w.pattern, [(a.spec.host, a.result) for a in receivers if w.pattern in ("stream", "bulk")],
        sender.result, cpu_stats, link_counters, w.protocol, tcp_deltas,
    )
    record["status"] = "ok"


def _fill_figures(record, w, agents, tcp_deltas, link_counters, cpu_stats) -> None:
    """Metrics, receivers, histograms and counters from the agents that reported (all of them, unless the run
    is partial). The pinger measures round trips (the ponger only echoes); otherwise the receivers measure."""
    sender = agents[-1]
    if w.pattern in ("ping", "ramp"):
        measured = [(sender.spec.host, sender.result)] if sender.result is not None else []
    else:
        measured = [(a.spec.host, a.result) for a in agents[:-1] if a.result is not None]
    per_rx = []
    for host, res in measured:
        per_rx.append({"host": host, "metrics": collect.receiver_metrics(w.pattern, res)})
        record["histograms"].extend(collect.histograms(host, res))
    metrics = collect.aggregate(w.pattern, [r["metrics"] for r in per_rx], sender.result)
    metrics.update(collect.link_drop_metrics(link_counters))
    metrics.update(collect.tcp_metrics(tcp_deltas))
    metrics.update(collect.udp_metrics(tcp_deltas))
    cpu = [a.result.get("cpu") or {} for a in agents if a.result is not None]
    metrics["cpu_agents_s"] = round(sum(float(c.get("user_s", 0) or 0) + float(c.get("sys_s", 0) or 0)
                                        for c in cpu), 4)
    metrics["cpu_machine_util"] = cpu_stats.get("mean")
    record["metrics"] = metrics
    record["receivers"] = per_rx
    record["link_counters"] = {str(k): v for k, v in link_counters.items()}
    record["tcp_counters"] = tcp_deltas


def _mark_partial(record, w, agents, missing, broken) -> None:
    """A run some of whose agents failed mid-run, its figures filled in (_fill_figures): the per-interval lines of
    every agent as ``series`` rows, status failed with each agent's reason, and the verdict invalid
    ("incomplete: ..."). The report lists it with its reason; points and comparisons leave it out."""
    why = [a.describe_partial() for a in [*broken, *missing]]
    record["partial"] = True
    record["failure_reason"] = "incomplete: " + "; ".join(why)
    record["stderr_tail"] = _stderr_tails([*broken, *missing])
    record["validity"], record["validity_reasons"] = "invalid", [f"incomplete: {r}" for r in why]
    record["series"] = _interval_series(w, agents)


def _interval_series(w, agents) -> list[dict[str, Any]]:
    """Series rows from the agents' interval lines (messages and bytes per interval, sender's and receivers'),
    on one clock: seconds since the first agent started. What the .jsonl artifacts hold, kept in the store for
    a run that ended early."""
    started = [a.started_ns for a in agents if a.started_ns]
    if not started:
        return []
    t0 = min(started)
    rows = []
    for a in agents:
        step_ms = int(a.spec.config.get("report_interval_ms") or 1000)
        for line in a.intervals:
            t_ms = line.get("t_ms")
            if not isinstance(t_ms, (int, float)):
                continue
            t_s = round((a.started_ns - t0) / 1e9 + (t_ms - step_ms) / 1000, 3)
            sending = a.spec.role in ("sender", "pinger")
            rows.append({"workload": w.name, "sender": w.sender, "receiver": None if sending else a.spec.host,
                         "t_s": t_s, "interval_s": step_ms / 1000,
                         "sent": line.get("messages") if sending else None,
                         "delivered": None if sending else line.get("messages"),
                         "bytes": line.get("bytes"), "throughput_bps": line.get("rate_bps"),
                         "lost": None, "duplicates": None, "reordered": None, "lat_p50_us": None,
                         "lat_p90_us": None, "lat_p99_us": None, "lat_max_us": None})
    return sorted(rows, key=lambda r: (r["t_s"], r["receiver"] or ""))


def _fill_sync_record(record, run: Run, agents, tcp_deltas, link_counters, cpu_stats) -> None:
    """The record of a sync run (every agent has a result): per-side and run-level sync metrics."""
    sides = [(a.spec.host, a.result) for a in agents]
    record["receivers"] = [{"host": h, "metrics": collect.sync_side_metrics(r)} for h, r in sides]
    for host, res in sides:
        record["histograms"].extend(collect.histograms(host, {"latency_actual": res.get("bundle_latency")}))
    metrics = collect.sync_metrics(run, sides)
    metrics.update(collect.link_drop_metrics(link_counters))
    metrics.update(collect.tcp_metrics(tcp_deltas))
    metrics["cpu_agents_s"] = round(sum(float((r.get("cpu") or {}).get(k, 0) or 0)
                                        for _, r in sides for k in ("user_s", "sys_s")), 4)  # fmt: skip
    metrics["cpu_machine_util"] = cpu_stats.get("mean")
    record["metrics"] = metrics
    record["link_counters"] = {str(k): v for k, v in link_counters.items()}
    record["tcp_counters"] = tcp_deltas
    record["validity"], record["validity_reasons"] = collect.sync_verdict(run, sides, cpu_stats, link_counters)
    record["status"] = "ok"


def store_record(store, record: dict[str, Any]) -> None:
    """Store a finished run's record.  Ctrl-C or SIGTERM meanwhile (the CLI raises ``Interrupted`` once) does not
    lose it: the store is asked again, and then the interrupt goes on.  (The store writes the record to the
    run's folder before its commit, so a commit that fails still leaves it there for `roughnet import`.)"""
    try:
        store.record_run(record)
    except (Interrupted, KeyboardInterrupt):
        store.record_run(record)
        raise
    except Exception as e:  # noqa: BLE001 - only DuckDB's words for an interrupt are caught, the rest re-raised
        if not query_interrupted(e):
            raise
        store.record_run(record)
        raise Interrupted("SIGTERM" if "SIGTERM" in str(e) else "SIGINT") from e


def query_interrupted(e: BaseException) -> bool:
    """DuckDB's answer to a signal during a query: the CLI's handler raised Interrupted inside DuckDB's signal check,
    which DuckDB reports as RuntimeError("Query interrupted") instead (found by bench/self_chaos.py), or inside a
    Python callback DuckDB ran (reading a registered Arrow table), which it reports as a duckdb.Error naming
    "Interrupted: SIGTERM" (found by test_self_chaos in CI)."""
    import duckdb  # (imported by the store already: nothing is loaded here)

    from ..results.store import signal_inside

    return isinstance(e, (RuntimeError, duckdb.Error)) and signal_inside(e)


@contextmanager
def duckdb_interrupts() -> Iterator[None]:
    """Inside: DuckDB's words for Ctrl-C or SIGTERM (``query_interrupted``) raised as the ``Interrupted`` they stand
    for, so that a signal landing inside a query of the store (creating its tables, beginning a sweep, reading what
    is stored) is handled as an interrupt, not as a failure (test_self_chaos found both)."""
    import duckdb

    try:
        yield
    except (RuntimeError, duckdb.Error) as e:
        if not query_interrupted(e):
            raise
        raise Interrupted("SIGTERM" if "SIGTERM" in str(e) else "SIGINT") from e
