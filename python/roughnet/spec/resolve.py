"""From a checked scenario with no placeholders left to ``runspec`` types in base units.

This module owns the conversion only: every value has already passed the model
(``spec.model``) and the cross-key checks (``spec.checks``), so nothing here
raises for bad input.  Direction fields come from the link's values overridden
by its ``forward`` / ``reverse`` table (one function, ``direction``, so that new
impairments are added in one place); protocol knobs become ``Workload.options``
with the names of docs/agent-protocol.md (``spec.knobs.options``), and the run's
services are the [[service]] entries its protocol uses (``spec.services``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import runspec, units
from . import knobs, services
from .checks import merged_direction
from .kinds import parse_queue
from .model import DIRECTION_KEYS, DirectionTable, LinkTable, Scenario


def _queue(value: str) -> dict[str, Any]:
    packets, size = parse_queue(value)
    return {"queue_packets": packets, "queue_bytes": size}


#: Scenario key -> Direction fields.  A key missing here would be silently ignored, so
#: the assertion below ties this table to the model's direction keys.
DIRECTION_FIELDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "rate": lambda v: {"rate_bps": units.parse_rate_bps(v)},
    "delay": lambda v: {"delay_ns": units.parse_duration_ns(v)},
    "jitter": lambda v: {"jitter_ns": units.parse_duration_ns(v)},
    "loss": lambda v: {"loss": units.parse_fraction(v)},
    "queue": _queue,
}
assert set(DIRECTION_FIELDS) == set(DIRECTION_KEYS), "spec.resolve.DIRECTION_FIELDS is out of date"


def direction(link: DirectionTable, override: DirectionTable | None) -> runspec.Direction:
    """One direction of a link: the link's impairments, overridden key by key by ``override``."""
    fields: dict[str, Any] = {}
    for key, value in merged_direction(link, override).items():
        if value is not None:
            fields.update(DIRECTION_FIELDS[key](value))
    return runspec.Direction(**fields)


def link(index: int, table: LinkTable, default_engine: str) -> runspec.Link:
    return runspec.Link(
        index=index,
        hosts=tuple(table.between),
        mtu=table.mtu,
        engine=table.engine or default_engine,
        forward=direction(table, table.forward),
        reverse=direction(table, table.reverse),
        capture=table.capture,
    )


def workload(s: Scenario) -> runspec.Workload:
    w = s.workload
    return runspec.Workload(
        pattern=w.pattern,
        protocol=w.protocol,
        sender=w.from_,
        receivers=(w.to,) if isinstance(w.to, str) else tuple(w.to),
        payload_bytes=units.parse_size_bytes(w.payload),
        messages=w.messages,
        duration_ns=units.parse_duration_ns(w.duration) if w.duration is not None else None,
        rate_msgs_per_s=units.parse_msg_rate(w.rate) if w.rate is not None else None,
        interval_ns=units.parse_duration_ns(w.interval) if w.interval is not None else None,
        step_bytes=units.parse_size_bytes(w.step) if w.step is not None else None,
        warmup=w.warmup,
        timeout_ns=units.parse_duration_ns(s.scenario.timeout),
        options=knobs.options(getattr(w, w.protocol, None)),
    )


def run_services(s: Scenario) -> tuple[runspec.Service, ...]:
    """The services this run's protocol uses (none, or the one of ``services.needed_kind``)."""
    w = s.workload
    kind = services.needed_kind(w.protocol, w.zenoh.mode if w.zenoh is not None else None)
    return tuple(services.resolve(t) for t in s.service if t.kind == kind)


Resolved = tuple[tuple[runspec.Host, ...], tuple[runspec.Link, ...], runspec.Workload, tuple[runspec.Service, ...]]


def resolve(s: Scenario) -> Resolved:
    """Hosts, links, workload and services of one run (``s`` has no placeholders left)."""
    hosts = tuple(runspec.Host(name=h.name) for h in s.host)
    links = tuple(link(i, t, s.scenario.engine) for i, t in enumerate(s.link))
    return hosts, links, workload(s), run_services(s)
