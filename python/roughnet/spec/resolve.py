"""From a checked scenario with no placeholders left to ``runspec`` types in base units.

This module owns the conversion only: every value has already passed the model
(``spec.model``) and the cross-key checks (``spec.checks``), so nothing here
raises for bad input.  Direction fields come from the link's values overridden
by its ``forward`` / ``reverse`` table (``spec.directions``, so that new
impairments are added in one place); half duplex, schedules and distance traces
become wire-core's JSON shapes (``spec.timeline``); protocol knobs become ``Workload.options``
with the names of docs/agent-protocol.md (``spec.knobs.options``), and the run's
services are the [[service]] entries its protocol uses (``spec.services``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import runspec, units
from . import knobs, services
from .directions import DIRECTION_FIELDS, direction
from .checks import UNDO, event_kind, senders_of, workload_name, workload_tables
from .model import DIRECTION_KEYS, EventTable, LinkTable, Scenario, ScheduleTable, WorkloadTable
from .positions import link_positions
from .syncspec import sync_settings
from .receivers import receivers
from .timeline import distance_trace, half_duplex, schedule

__all__ = ["DIRECTION_FIELDS", "Resolved", "direction", "link", "resolve", "run_services", "workload"]


def link(index: int, table: LinkTable, default_engine: str,
         trace: tuple[dict[str, Any], ...] | None = None) -> runspec.Link:  # fmt: skip
    """One link; ``trace``: the points of its distance trace file (``timeline.read_trace_files``)."""
    return runspec.Link(
        index=index,
        hosts=tuple(table.between),
        mtu=table.mtu,
        engine=table.engine or default_engine,
        forward=direction(table, table.forward),
        reverse=direction(table, table.reverse),
        capture=table.capture,
        profile=table.profile,
        half_duplex=half_duplex(table),
        medium=table.medium or "plain",
        wire_threads=table.wire_threads or 1,
        schedule=schedule(table),
        distance_trace=distance_trace(table, trace),
        overlay=table.overlay or "none",
        overlay_mtu=table.overlay_mtu,
    )


def workload(s: Scenario, table: WorkloadTable | None = None, index: int = 0) -> runspec.Workload:
    """The workload ``table`` (default: ``s.workload``), the ``index``-th of the file."""
    w = table if table is not None else s.workload
    senders = senders_of(w.from_)
    return runspec.Workload(
        name=workload_name(index, w),
        also_from=tuple(senders[1:]),
        start_ns=units.parse_duration_ns(w.start) if w.start is not None else 0,
        background=bool(w.background),
        pattern=w.pattern,
        protocol=w.protocol,
        sender=senders[0],
        receivers=tuple(receivers(w.to)),
        payload_bytes=units.parse_size_bytes(w.payload),
        messages=w.messages,
        duration_ns=units.parse_duration_ns(w.duration) if w.duration is not None else None,
        rate_msgs_per_s=units.parse_msg_rate(w.rate) if w.rate is not None else None,
        interval_ns=units.parse_duration_ns(w.interval) if w.interval is not None else None,
        reply_timeout_ns=units.parse_duration_ns(w.reply_timeout) if w.reply_timeout is not None else None,
        step_bytes=units.parse_size_bytes(w.step) if w.step is not None else None,
        warmup=w.warmup,
        timeout_ns=units.parse_duration_ns(s.scenario.timeout),
        options=knobs.options(getattr(w, w.protocol, None)),
        sync=sync_settings(w),
    )


def run_services(s: Scenario) -> tuple[runspec.Service, ...]:
    """The services this run's workloads use (none, or those of ``services.needed_kind``), in file order."""
    kinds = {services.needed_kind(w.protocol, w.zenoh.mode if w.zenoh is not None else None)
             for _, w in workload_tables(s)}
    if s.process:  # the user's programs may use any declared service (a managed broker for their own client)
        kinds |= {t.kind for t in s.service}
    return tuple(services.resolve(t) for t in s.service if t.kind in kinds)


def events(s: Scenario) -> tuple[runspec.Event, ...]:
    """The run's timeline: every [[event]] (one with ``for`` and its undo), sorted by time (file order on ties)."""
    entries: list[tuple[int, int, int, EventTable, str, int | None]] = []  # (at, file order, sub, table, action, of)
    for i, e in enumerate(s.event or []):
        at = units.parse_duration_ns(e.at)
        entries.append((at, i, 0, e, e.action, None))
        if e.for_ is not None:
            entries.append((at + units.parse_duration_ns(e.for_), i, 1, e, UNDO[e.action], i))
    entries.sort(key=lambda x: (x[0], x[1], x[2]))
    position = {(i, sub): n for n, (_, i, sub, _, _, _) in enumerate(entries)}
    out = []
    last_fault: dict[str, int] = {}  # target -> index of its latest interrupting event
    for n, (at, i, sub, e, action, of) in enumerate(entries):
        kind = event_kind(e)
        target = {"link": f"link {e.link}", "host": f"host {e.host}", "service": str(e.service),
                  "agent": f"agent {e.workload}@{e.host}", "process": f"process {e.process}"}[kind]  # fmt: skip
        ends = position[(of, 0)] if of is not None else None
        if ends is None and action in UNDO.values():  # an explicit up/rejoin/start/resume ends the last fault
            ends = last_fault.pop(target, None)
        if action in UNDO or action == "set":
            last_fault[target] = n
        change = None
        if kind == "link":
            change = _link_change(s.link[e.link], e, action)
        out.append(runspec.Event(index=n, at_ns=at, kind=kind, action=action, target=target, link=e.link,
                                 host=e.host, service=e.service, workload=e.workload, change=change,
                                 ends=ends, process=e.process))  # fmt: skip
    return tuple(out)


def _link_change(table: LinkTable, e: EventTable, action: str) -> dict[str, Any]:
    """A link event as wire-core's ScheduledChange, computed as a [[link.schedule]] entry would be: the same keys,
    the same rules (``spec.timeline.schedule``). ``set`` patches the link's own values (events of one link do not
    add up: each ``set`` gives every key it changes)."""
    entry: dict[str, Any] = {"at": e.at, "direction": e.direction}
    if action == "down":
        entry["down"] = True
    elif action == "up":
        entry["up"] = True
    else:
        dumped = e.model_dump(exclude_none=True, by_alias=True)
        entry.update({k: dumped[k] for k in DIRECTION_KEYS if k in dumped})
    one = table.model_copy(update={"schedule": [ScheduleTable.model_validate(entry)]})
    return schedule(one)[0]


Resolved = tuple[tuple[runspec.Host, ...], tuple[runspec.Link, ...], runspec.Workload, tuple[runspec.Service, ...],
                 tuple[runspec.Workload, ...], tuple[runspec.Event, ...]]


def resolve(s: Scenario, traces: dict[int, tuple[dict[str, Any], ...]] | None = None,
            paths: dict[str, tuple[dict[str, Any], ...]] | None = None) -> Resolved:
    """Hosts, links, workload and services of one run (``s`` has no placeholders left).

    ``traces``: the distance trace files of its links, read by ``timeline.read_trace_files``
    (a link with ``distance_trace`` and no entry here gets no points); ``paths``: the hosts' ``path_trace``
    files, by host name (``positions.read_path_files``).
    """
    hosts = tuple(runspec.Host(name=h.name, node=h.node) for h in s.host)
    links = tuple(dataclasses.replace(link(i, t, s.scenario.engine, (traces or {}).get(i)),
                                      positions=link_positions(s, t, paths)) for i, t in enumerate(s.link))
    tables = workload_tables(s)
    extra = tuple(workload(s, w, i) for i, (_, w) in enumerate(tables) if i > 0)
    main = workload(s) if s.workload is not None else None
    return hosts, links, main, run_services(s), extra, events(s)
