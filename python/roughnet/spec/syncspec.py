"""The ``sync`` pattern's part of the scenario format: ``[workload.sync]`` and its rules.

Owns the SyncTable (bundles per side, overlap, bundle payload, window), the checks
that only concern sync (the table only with pattern "sync", a reliable transport,
one receiver), and its conversion into ``runspec.Workload.sync``.  For sync,
``[workload] payload`` is the size of each bundle's manifest (SEEDS S3: about
200 bytes) and ``duration`` the fixed reconciliation window (unset: until both
sides hold everything, or the scenario timeout).  The agent configuration built
from it is ``run.agents``'.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .. import units
from . import kinds
from .problems import Problem
from .table import Table, field

__all__ = ["SyncTable", "check_sync", "sync_settings", "BUNDLE_OVERHEAD_BYTES"]

#: Bytes in front of a bundle's manifest in the agent's bundle message (header 32, kind and id 8).
BUNDLE_OVERHEAD_BYTES = 40
#: Most bundles one side may start with (the agent's SYNC_MAX_BUNDLES).
MAX_BUNDLES = 1 << 24
#: Most bundles in flight (the agent's SYNC_MAX_WINDOW).
MAX_WINDOW = 65_535


class SyncTable(Table):
    """``[workload.sync]``: two stores of bundles reconcile (pattern "sync")."""

    key_noun: ClassVar[str] = "key"
    key_owner: ClassVar[str] = "[workload.sync]"

    bundles: kinds.integer(1, MAX_BUNDLES, f"an integer from 1 to {MAX_BUNDLES}").type() = field(
        "Bundles each side starts with (`from` and `to` alike).")
    overlap: kinds.percent().type() = field(
        "Fraction of each side's bundles the other side also holds at the start: " + kinds.PERCENT + ". Unset: 0%.",
        None)
    bundle_payload: kinds.size().type() = field(
        "Payload after each bundle's manifest (`payload` is the manifest): " + kinds.SIZE + ". Unset: 0 B.", None)
    window: kinds.integer(1, MAX_WINDOW, f"an integer from 1 to {MAX_WINDOW}").type() = field(
        "Bundles in flight (sent and not yet acknowledged) at most, per side. Unset: 1 (one at a time).", None)


#: Protocol settings that make a transport unreliable: sync sends each bundle once.
def _unreliable(w: Any) -> str | None:
    if w.protocol == "udp":
        return "udp does not retransmit"
    z = getattr(w, "zenoh", None)
    if w.protocol == "zenoh" and z is not None:
        if getattr(z, "reliability", None) == "best_effort":
            return "zenoh with reliability = \"best_effort\""
        if getattr(z, "transport", None) == "udp":
            return "zenoh over its udp transport"
    m = getattr(w, "mqtt", None)
    if w.protocol == "mqtt" and m is not None and getattr(m, "qos", None) == 0:
        return "mqtt qos 0 (at most once)"
    return None


def check_sync(w: Any, concrete, problems: list[Problem]) -> None:
    """Rules of [workload.sync]; ``concrete(*values)`` says whether placeholders are resolved."""
    if not concrete(w.pattern):
        return
    if w.pattern != "sync":
        if w.sync is not None:
            problems.append(Problem("workload.sync", f"not used by pattern \"{w.pattern}\"",
                                    "no [workload.sync] table (it is for pattern \"sync\")",
                                    w.sync.model_dump(exclude_none=True)))  # fmt: skip
        return
    if w.sync is None:
        return  # the pattern rules report the missing table
    if concrete(w.protocol):
        why = _unreliable(w)
        if why is not None:
            problems.append(Problem("workload.protocol", f"sync needs a reliable transport, not {why}",
                                    "tcp, mqtt (qos 1 or 2), zenoh (reliable, over tcp), or another reliable "
                                    "protocol", w.protocol))  # fmt: skip
    s = w.sync
    if s.overlap is not None and concrete(s.overlap):
        f = units.parse_fraction(s.overlap)
        if not 0.0 <= f <= 1.0:
            problems.append(Problem("workload.sync.overlap", "out of range", "0% to 100%", s.overlap))


def sync_settings(w: Any) -> dict[str, Any] | None:
    """``runspec.Workload.sync`` from a resolved [workload] (no placeholders left)."""
    if w.pattern != "sync" or w.sync is None:
        return None
    s = w.sync
    return {
        "bundles": s.bundles,
        "overlap": units.parse_fraction(s.overlap) if s.overlap is not None else 0.0,
        "bundle_payload_bytes": units.parse_size_bytes(s.bundle_payload) if s.bundle_payload is not None else 0,
        "window": s.window if s.window is not None else 1,
    }
