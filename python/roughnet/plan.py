"""Sweep expansion: a validated scenario becomes a ``runspec.Sweep`` of fully resolved runs.

This module owns the order of runs (cartesian product of the [sweep] axes in
file order, last key fastest, less the combinations [[sweep.exclude]] lists,
the whole product repeated ``repeat`` times so that repetitions interleave),
the per-run validation (every parameter point is substituted and checked
again; errors name the sweep entry and the run; with a swept protocol each run
keeps only its own protocol's knob table, and a knob table no run uses is an
error; so is a [[service]] no run uses), ``Run.params`` (one label per axis: the value, or a table entry's name
or "k=v, k=v"), and the stable identifiers:

- ``run_id``: first 12 hex of sha256 over the canonical JSON (sorted keys) of the
  resolved run without ``index``, ``run_id`` and ``sweep_id`` (and without
  ``services`` when the run has none): the same content gives the same id,
  whatever the order or the invocation;
- ``sweep_id``: ``<name>-<first 8 hex of sha256 of the validated scenario>``
  (keys added to the format later are left out of the hash while unset).

Fields added to ``Run`` or to the format later are left out of these hashes while
empty, so that the ids of existing scenarios do not change (results stores and
``--resume`` find them by id).

Pure: reads the file (and the distance trace files its links name, relative to it), creates nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from . import hostplan, runspec, units
from .errors import SpecError
from .spec import Scenario, load_scenario
from .spec.kinds import describe, has_placeholder
from .spec.load import check_data, listed_path
from .spec.model import KNOB_TABLES
from .spec.placeholders import substitute
from .spec.problems import NOTHING, Problem, ScenarioError, without_file_values
from .spec.resolve import resolve
from .spec.schedule import file_axes
from .spec.sweep import EXCLUDE, axes_of, excludes_of, excluded, label
from .spec.positions import read_path_files
from .spec.processes import check_files, resolve_process
from .spec.capacity import check_files as capacity_files
from .spec.timeline import read_trace_files

__all__ = ["plan_sweep", "sweep_from_scenario", "run_id_of", "sweep_id_of", "canonical_json"]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


#: Run fields added after run ids were first stored: hashed only when not empty.
_RUN_FIELDS_ADDED = ("services", "workloads", "events", "processes")
#: Workload fields added after run ids were first stored: hashed only when not their default.
_WORKLOAD_FIELDS_ADDED = {"sync": None, "name": "w1", "also_from": [], "start_ns": 0, "background": False,
                          "reply_timeout_ns": None}
#: Scenario keys added after sweep ids were first stored: hashed only when set.
_WORKLOAD_KEYS_ADDED = ("zenoh", "zmq", "dds", "mqtt", "kafka", "nats", "sync", "name", "start", "background",
                        "ros2", "reply_timeout")
_SCENARIO_KEYS_ADDED = ("service", "workloads", "event", "mobility", "process")
#: Protocol knobs added after sweep ids were first stored: hashed only when set.
_KNOB_KEYS_ADDED = ("congestion", "reconnect", "jetstream", "broadcast", "request_reply")
#: Knobs added to one protocol's table whose name another protocol had first (tcp's nodelay): hashed when set.
_KNOB_KEYS_ADDED_TO = {"mqtt": ("nodelay",)}
#: [[link]] keys (and keys of its direction tables) added after sweep ids were first stored: hashed only when set.
_LINK_KEYS_ADDED = ("jitter_distribution", "jitter_correlation", "reorder_by_jitter", "reorder", "reorder_gap",
                    "loss_model", "duplicate", "corrupt", "overhead", "profile", "half_duplex", "schedule",
                    "distance_trace", "distance", "overlay", "overlay_mtu", "medium", "wire_threads",
                    "capacity_trace")  # fmt: skip


def run_id_of(run: runspec.Run) -> str:
    """12 hex chars identifying the resolved content of ``run`` (not its position or sweep)."""
    content = dataclasses.asdict(run)
    for key in ("index", "run_id", "sweep_id"):
        content.pop(key, None)
    for key in _RUN_FIELDS_ADDED:
        if not content.get(key):
            content.pop(key, None)
    if content.get("series_interval_ns") == 1_000_000_000:  # added with run timelines: hashed when not default
        content.pop("series_interval_ns")
    if content.get("timeout_ns") is None:  # added with [[process]]: set only for runs without a workload
        content.pop("timeout_ns", None)
    if content.get("agents") == "auto":  # added with host agents (issue 27): hashed when set
        content.pop("agents")
    for key, default in _WORKLOAD_FIELDS_ADDED.items():  # sync: the sync pattern; the others: run timelines
        if content["workload"] is None:
            break
        value = content["workload"].get(key)
        if key in content["workload"] and (value == default or (isinstance(value, tuple) and list(value) == default)):
            content["workload"].pop(key)
    for event in content.get("events", ()):  # process: added with [[process]]
        if event.get("process") is None:
            event.pop("process", None)
    for proc in content.get("processes", ()):  # where the scenario file is does not change what runs
        proc.pop("base", None)
        if proc.get("image_ref") is None:  # added with images the cluster pulls
            proc.pop("image_ref", None)
    for host in content.get("hosts", ()):  # node: added with the kubernetes backend
        if host.get("node") is None:
            host.pop("node", None)
    for link in content.get("links", ()):
        _drop_added_defaults(link, runspec.Link, _LINK_FIELDS_V1)
        for side in ("forward", "reverse"):
            _drop_added_defaults(link[side], runspec.Direction, _DIRECTION_FIELDS_V1)
    return _sha256(content)[:12]


#: Fields of Link and Direction that run ids were first computed with.  Fields added
#: later take part in the id only when they differ from their default, so adding a
#: field (a new impairment) does not change the ids of runs that do not use it.
_LINK_FIELDS_V1 = frozenset({"index", "hosts", "mtu", "engine", "forward", "reverse", "capture"})
_DIRECTION_FIELDS_V1 = frozenset({"rate_bps", "delay_ns", "jitter_ns", "loss", "queue_packets", "queue_bytes"})


def _drop_added_defaults(content: dict, cls, v1_fields: frozenset[str]) -> None:
    defaults = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    for key in list(content):
        if key in v1_fields or key not in defaults:
            continue
        default = defaults[key]
        value = content[key]
        if value == default or (isinstance(default, tuple) and list(value) == list(default)):
            content.pop(key)


def sweep_id_of(scenario: Scenario) -> str:
    content = scenario.model_dump(mode="json", by_alias=True)
    for key in _SCENARIO_KEYS_ADDED:
        if not content.get(key):
            content.pop(key, None)
    if content["scenario"].get("series_interval") is None:  # added with run timelines
        content["scenario"].pop("series_interval", None)
    if content["scenario"].get("agents") == "auto":  # added with host agents (issue 27)
        content["scenario"].pop("agents", None)
    for w in [w for w in (content["workload"], *(content.get("workloads") or ())) if w is not None]:
        for key in _WORKLOAD_KEYS_ADDED:
            if w.get(key) is None:
                w.pop(key, None)
        for table in (w.get(p) for p in KNOB_TABLES):
            for key in _KNOB_KEYS_ADDED:
                if isinstance(table, dict) and table.get(key) is None:
                    table.pop(key, None)
        for protocol, keys in _KNOB_KEYS_ADDED_TO.items():
            table = w.get(protocol)
            for key in keys:
                if isinstance(table, dict) and table.get(key) is None:
                    table.pop(key, None)
    for host in content.get("host", []):
        for key in ("node", "position", "path", "path_trace", "vehicle"):  # added with kubernetes, per-pair links
            if isinstance(host, dict) and host.get(key) is None:
                host.pop(key, None)
    for link in content.get("link", []):
        for table in (link, link.get("forward"), link.get("reverse")):
            for key in _LINK_KEYS_ADDED:
                if isinstance(table, dict) and table.get(key) is None:
                    table.pop(key, None)
    return f"{scenario.scenario.name}-{_sha256(content)[:8]}"


def plan_sweep(path: str | Path) -> runspec.Sweep:
    """Load, expand, resolve and validate every run of a scenario file."""
    return sweep_from_scenario(load_scenario(path), str(path))


def _run_label(index: int, total: int, params: dict[str, Any]) -> str:
    values = ", ".join(f"{k}={describe(v)}" for k, v in params.items())
    return f"run {index + 1} of {total}" + (f": {values}" if values else "")


def _with_origins(problems: list[Problem], origins: dict[str, str], data: dict[str, Any]) -> list[Problem]:
    out = []
    for p in problems:
        # The value's own origin, or those of its entries (a list holding placeholders).
        found = [origin for path, origin in origins.items() if path == p.path or path.startswith((p.path + "[", p.path + "."))]
        if found and p.path:
            got = p.got if p.got is not NOTHING else _lookup(data, p.path)
            p = dataclasses.replace(p, origin=", ".join(found), got=got)
        out.append(p)
    return out


def _lookup(data: Any, path: str) -> Any:
    for part in path.replace("[", ".[").split("."):
        if part.startswith("["):
            data = data[int(part[1:-1])]
        elif part:
            data = data[part]
    return data


def _points(scenario: Scenario, source: str) -> tuple[dict[str, list[Any]], list[dict[str, tuple[Any, int]]]]:
    """The axes (labels) and every parameter point not excluded: axis -> (value as written, index)."""
    axes = axes_of(scenario.sweep)
    labels = {k: [label(v) for v in values] for k, values in axes.items()}
    excludes = excludes_of(scenario.sweep)
    points = []
    for combo in itertools.product(*(list(enumerate(values)) for values in axes.values())):
        point = {k: (value, i) for k, (i, value) in zip(axes, combo)}
        if not excluded({k: labels[k][i] for k, (_, i) in point.items()}, excludes):
            points.append(point)
    if not points:
        raise ScenarioError(source, [Problem(f"sweep.{EXCLUDE}", "every parameter point is excluded",
                                             "exclude entries that leave at least one combination")])  # fmt: skip
    return labels, points


def _own_knobs_only(data: dict[str, Any]) -> dict[str, Any]:
    """Drop the knob tables of the protocols other than this run's (used when the protocol is swept)."""
    w = data.get("workload")
    if not isinstance(w, dict):  # (also: no [workload], a scenario of [[process]] entries only)
        return data
    proto = w.get("protocol")
    return {**data, "workload": {k: v for k, v in w.items() if k not in KNOB_TABLES or k == proto}}


def _check_knob_tables(scenario: Scenario, protocols: set[str], source: str) -> None:
    """With a swept protocol, a knob table is wrong only when no run uses its protocol."""
    used = ", ".join(f'"{p}"' for p in runspec.PROTOCOLS if p in protocols)
    problems = [
        Problem(f"workload.{proto}", f"[workload.{proto}] knobs given but no run uses protocol \"{proto}\" "
                f"(the sweep uses {used})", "knob tables only for the protocols of the runs ("
                + ", ".join(f"[workload.{p}]" for p in runspec.PROTOCOLS if p in protocols) + ")",
                getattr(scenario.workload, proto).model_dump(exclude_none=True))
        for proto in KNOB_TABLES
        if scenario.workload is not None and getattr(scenario.workload, proto, None) is not None
        and proto not in protocols
    ]  # fmt: skip
    if problems:
        raise ScenarioError(source, problems)


def _protocol_label(workload: runspec.Workload) -> str:
    if workload.protocol == "zenoh":
        return f"zenoh ({workload.options.get('mode', 'peer')} mode)"
    return workload.protocol


def _check_services_used(scenario: Scenario, runs: list[runspec.Run], source: str) -> None:
    """Every declared [[service]] is used by some run (``Run.services``)."""
    used = {svc.kind for run in runs for svc in run.services}
    labels = list(dict.fromkeys(_protocol_label(run.workload) for run in runs if run.workload is not None))
    problems = [
        Problem(f"service[{i}]", f"service {svc.kind} on host {svc.host} is used by no run: the sweep's protocols "
                f"are {', '.join(labels)}", "services only for the runs' protocols ("
                + ", ".join(f"{p}: {k}" for p, k in runspec.PROTOCOL_SERVICE.items() if p != "zenoh")
                + ', zenoh with mode = "client": zenoh-router)', svc.kind)
        for i, svc in enumerate(scenario.service)
        if svc.kind not in used
    ]  # fmt: skip
    if problems:
        raise ScenarioError(source, problems)


def _check_host_agents(runs: list[runspec.Run], total: int, source: str, listed: bool) -> None:
    """In host mode the workloads of one host agree on their shared session's, participant's or client's knobs
    (hostplan.conflicts); the first run that disagrees is refused, naming the keys as the file wrote them."""
    for run in runs:
        problems = hostplan.conflicts(run)
        if listed:
            problems = [listed_path(p) for p in problems]
        if problems:
            raise ScenarioError(source, problems, _run_label(run.index, total, run.params))


def _absolute_traces(link: runspec.Link, paths: dict[str, str]) -> runspec.Link:
    """``link`` with its directions' capacity traces as the absolute paths ``paths`` maps them to."""
    fix = {side: dataclasses.replace(d, capacity_trace=paths.get(d.capacity_trace, d.capacity_trace))
           for side in ("forward", "reverse") if (d := getattr(link, side)).capacity_trace is not None}
    return dataclasses.replace(link, **fix) if fix else link


def sweep_from_scenario(scenario: Scenario, source: str) -> runspec.Sweep:
    """Expand a loaded scenario (``spec.load_scenario``) into its runs; ``source`` names the file in errors."""
    raw = scenario.model_dump(by_alias=True, exclude_unset=True)
    _, problems = check_data(raw)  # the file-level rules, in case the model was built by hand
    if problems:
        raise ScenarioError(source, problems)
    axes, points = _points(scenario, source)
    protocol_swept = scenario.workload is not None and has_placeholder(scenario.workload.protocol)
    repeat = scenario.scenario.repeat
    total = len(points) * repeat
    sweep_id = sweep_id_of(scenario)
    base = Path(source).parent  # distance trace files are relative to the scenario file

    resolved = []
    for p, point in enumerate(points):
        params = {k: axes[k][i] for k, (_, i) in point.items()}
        data, origins = substitute(raw, point)
        if protocol_swept:
            data = _own_knobs_only(data)
        model, problems = check_data(data, expanded=True)
        traces: dict[int, Any] = {}
        paths: dict[str, Any] = {}
        if model is not None and not problems:
            traces, problems = read_trace_files(model, base)
            paths, path_problems = read_path_files(model, base)
            capacity, capacity_problems = capacity_files(model, base)
            problems = problems + path_problems + capacity_problems + check_files(model.process or [], base)
        if problems or model is None:
            raise ScenarioError(source, without_file_values(_with_origins(problems, origins, data),
                                                            file_axes(scenario)), _run_label(p, total, params))
        hosts, links, *rest = resolve(model, traces, paths)
        links = tuple(_absolute_traces(lk, capacity) for lk in links)
        resolved.append((params, (hosts, links, *rest, tuple(resolve_process(t, base) for t in model.process or []))))
    if protocol_swept:
        _check_knob_tables(scenario, {w.protocol for _, r in resolved for w in (r[2], *r[4]) if w is not None}, source)

    runs: list[runspec.Run] = []
    seen: dict[str, int] = {}
    for rep in range(repeat):
        for params, (hosts, links, workload, services, workloads, events, processes) in resolved:
            run = runspec.Run(
                scenario=scenario.scenario.name,
                sweep_id=sweep_id,
                run_id="",
                index=len(runs),
                params=dict(params),
                seed=scenario.scenario.seed + rep,
                repeat=rep,
                hosts=hosts,
                links=links,
                workload=workload,
                engine=scenario.scenario.engine,
                agents=scenario.scenario.agents,
                services=services,
                workloads=workloads,
                events=events,
                processes=processes,
                timeout_ns=units.parse_duration_ns(scenario.scenario.timeout) if workload is None else None,
                series_interval_ns=(units.parse_duration_ns(scenario.scenario.series_interval)
                                    if scenario.scenario.series_interval is not None else 1_000_000_000),
            )
            run = dataclasses.replace(run, run_id=run_id_of(run))
            if run.run_id in seen:  # only if two sweep values resolve identically and are written the same
                raise SpecError(f"{source}: sweep: runs {seen[run.run_id] + 1} and {run.index + 1} are identical; "
                                f"expected distinct parameter points (got run id {run.run_id} twice)")  # fmt: skip
            seen[run.run_id] = run.index
            runs.append(run)
    _check_services_used(scenario, runs, source)
    _check_host_agents(runs, total, source, getattr(scenario, "_listed_workloads", False))

    report = scenario.report.model_dump(exclude_none=True) if scenario.report is not None else {}
    return runspec.Sweep(
        scenario=scenario.scenario.name,
        sweep_id=sweep_id,
        source=source,
        axes=axes,
        runs=tuple(runs),
        report=report,
        description=scenario.scenario.description,
        files=file_axes(scenario),
    )
