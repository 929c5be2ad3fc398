"""Which runs of a sweep share one topology and one set of services (``reuse = true``).

Owns the rule (docs/services.md, "reuse = true"): consecutive runs form a reuse
group when every service of theirs asks ``reuse = true`` and their environment is
equal: the same hosts, the same links structure (hosts of each link, MTU, the
engine preflight chose for it, hence relayed or not, overlay and its MTU) and the
same service declarations (kind, host, settings).  What may differ inside a group
is everything the runner re-applies per run: each link's impairments, the
workload, the seed, capture.  Pure: it reads runs and preflight's engine choice
and creates nothing; executing a group is ``run.group``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..runspec import Run


def reusable(run: Run) -> bool:
    """True when the run has services and every one of them asks ``reuse = true``."""
    return bool(run.services) and all(s.reuse for s in run.services)


def environment_key(run: Run, engines: Mapping[int, str]) -> tuple[Any, ...] | None:
    """What must be equal for two runs to share a topology and services; None when ``run`` is not reusable.

    ``engines`` is preflight's choice for this run (link index -> engine name).
    """
    if not reusable(run):
        return None
    links = tuple(
        (lk.index, tuple(lk.hosts), lk.mtu, engines.get(lk.index, lk.engine), lk.overlay, lk.overlay_mtu)
        for lk in sorted(run.links, key=lambda lk: lk.index)
    )
    services = tuple(
        (s.kind, s.host, json.dumps(s.options, sort_keys=True, default=str)) for s in run.services
    )
    return (tuple(run.host_names()), links, services)


def why_not_shared(a: Run, b: Run, engines: Mapping[str, Mapping[int, str]]) -> str | None:
    """None when ``b`` can share ``a``'s environment; else what differs (for logs and tests)."""
    ka = environment_key(a, engines.get(a.run_id, {}))
    kb = environment_key(b, engines.get(b.run_id, {}))
    if ka is None or kb is None:
        which = a if ka is None else b
        return f"run {which.index} has a service with reuse = false (or no service)"
    for part, x, y in zip(("hosts", "links", "services"), ka, kb):
        if x != y:
            return f"their {part} differ: {x} / {y}"
    return None


def reuse_groups(runs: Sequence[Run], engines: Mapping[str, Mapping[int, str]]) -> list[tuple[bool, list[Run]]]:
    """Split ``runs`` (in order) into ``(shared, runs)`` groups.

    ``shared`` groups are maximal stretches of consecutive reusable runs with equal
    environment keys (one run alone is a group too: it starts its services the same way);
    every other run is a group of its own with ``shared`` False (a fresh topology and
    fresh services, as before).  ``engines``: run id -> link index -> engine (preflight).
    """
    groups: list[tuple[bool, list[Run]]] = []
    last_key: tuple[Any, ...] | None = None
    for run in runs:
        key = environment_key(run, engines.get(run.run_id, {}))
        if key is not None and groups and groups[-1][0] and key == last_key:
            groups[-1][1].append(run)
        else:
            groups.append((key is not None, [run]))
        last_key = key
    return groups
