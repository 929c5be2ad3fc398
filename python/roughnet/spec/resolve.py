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

from typing import Any

from .. import runspec, units
from . import knobs, services
from .directions import DIRECTION_FIELDS, direction
from .model import LinkTable, Scenario
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
        schedule=schedule(table),
        distance_trace=distance_trace(table, trace),
        overlay=table.overlay or "none",
        overlay_mtu=table.overlay_mtu,
    )


def workload(s: Scenario) -> runspec.Workload:
    w = s.workload
    return runspec.Workload(
        pattern=w.pattern,
        protocol=w.protocol,
        sender=w.from_,
        receivers=tuple(receivers(w.to)),
        payload_bytes=units.parse_size_bytes(w.payload),
        messages=w.messages,
        duration_ns=units.parse_duration_ns(w.duration) if w.duration is not None else None,
        rate_msgs_per_s=units.parse_msg_rate(w.rate) if w.rate is not None else None,
        interval_ns=units.parse_duration_ns(w.interval) if w.interval is not None else None,
        step_bytes=units.parse_size_bytes(w.step) if w.step is not None else None,
        warmup=w.warmup,
        timeout_ns=units.parse_duration_ns(s.scenario.timeout),
        options=knobs.options(getattr(w, w.protocol, None)),
        sync=sync_settings(w),
    )


def run_services(s: Scenario) -> tuple[runspec.Service, ...]:
    """The services this run's protocol uses (none, or the one of ``services.needed_kind``)."""
    w = s.workload
    kind = services.needed_kind(w.protocol, w.zenoh.mode if w.zenoh is not None else None)
    return tuple(services.resolve(t) for t in s.service if t.kind == kind)


Resolved = tuple[tuple[runspec.Host, ...], tuple[runspec.Link, ...], runspec.Workload, tuple[runspec.Service, ...]]


def resolve(s: Scenario, traces: dict[int, tuple[dict[str, Any], ...]] | None = None) -> Resolved:
    """Hosts, links, workload and services of one run (``s`` has no placeholders left).

    ``traces``: the distance trace files of its links, read by ``timeline.read_trace_files``
    (a link with ``distance_trace`` and no entry here gets no points).
    """
    hosts = tuple(runspec.Host(name=h.name, node=h.node) for h in s.host)
    links = tuple(link(i, t, s.scenario.engine, (traces or {}).get(i)) for i, t in enumerate(s.link))
    return hosts, links, workload(s), run_services(s)
