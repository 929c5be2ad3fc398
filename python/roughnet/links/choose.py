"""Which engine applies each link: ``auto`` resolved, explicit choices checked.

Owns the table of what each engine can do and needs, and the preflight
messages when nothing can do what a link asks.  Pure: it reads
``Capabilities`` and links, creates nothing.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Iterable

from ..errors import PreflightError
from ..runspec import Link, Run
from .caps import Capabilities

#: ``auto`` takes the first of these that can do everything a link needs.
AUTO_ORDER = ("netem", "kernel", "wire")
#: What each engine can apply (Direction.needs() vocabulary).
ENGINE_FEATURES: dict[str, frozenset[str]] = {
    "netem": frozenset({"rate", "delay", "jitter", "loss", "queue"}),
    "kernel": frozenset({"rate", "loss", "queue"}),
    # The userspace emulator does everything netem does and more (docs/wire-models.md).
    "wire": frozenset({"rate", "delay", "jitter", "loss", "queue", "jitter_shape", "reorder", "loss_model", "duplicate",
                       "corrupt", "overhead", "profile", "half_duplex", "schedule", "distance_trace",
                       "positions", "csma", "wire_threads", "capacity_trace"}),
}
HOW_TO_GET = {
    "netem": "the kernel has no sch_netem (modprobe sch_netem, or a kernel built with CONFIG_NET_SCH_NETEM)",
    "tbf": "the kernel has no sch_tbf (modprobe sch_tbf, or CONFIG_NET_SCH_TBF)",
    "nft": "nftables netdev ingress is unavailable (apt-get install nftables; kernel CONFIG_NF_TABLES_NETDEV)",
    "wire": "roughnet-wire is not built (run `make build`, or set $ROUGHNET_WIRE)",
}


def _missing_caps(engine: str, needs: frozenset[str], caps: Capabilities) -> list[str]:
    """Machine capabilities ``engine`` lacks for ``needs`` (empty: it can do them)."""
    if engine == "netem":
        return [] if caps.netem else ["netem"]
    if engine == "kernel":
        out = []
        if needs & {"rate", "queue"} and not caps.tbf:
            out.append("tbf")
        if "loss" in needs and not caps.nft:
            out.append("nft")
        return out
    if engine == "wire":
        return [] if caps.wire else ["wire"]
    raise PreflightError(f"unknown link engine {engine!r}; expected one of auto, {', '.join(AUTO_ORDER)}")


def _describe(link: Link) -> str:
    sep = " <-> " if not link.shared else ", "
    return f"link {link.index} ({sep.join(link.hosts)})"


def _why_not(engine: str, needs: frozenset[str], caps: Capabilities) -> str:
    unsupported = sorted(needs - ENGINE_FEATURES[engine])
    if unsupported:
        can = ", ".join(sorted(ENGINE_FEATURES[engine]))
        return f"{engine} cannot do {', '.join(unsupported)} (it does {can})"
    missing = _missing_caps(engine, needs, caps)
    note = caps.notes.get("wire") if engine == "wire" else None
    reasons = [note if note and m == "wire" else HOW_TO_GET[m] for m in missing]
    return f"{engine}: {'; '.join(reasons)}"


def can_do(engine: str, link: Link, caps: Capabilities) -> bool:
    needs = link.needs()
    return needs <= ENGINE_FEATURES[engine] and not _missing_caps(engine, needs, caps)


def choose_engine(link: Link, caps: Capabilities) -> str:
    needs = link.needs()
    wanted = link.engine
    if wanted == "auto":
        for engine in AUTO_ORDER:
            if can_do(engine, link, caps):
                return engine
        what = ", ".join(sorted(needs))
        reasons = "; ".join(_why_not(e, needs, caps) for e in AUTO_ORDER)
        raise PreflightError(
            f"{_describe(link)} needs {what}, which no engine available here provides ({reasons}); "
            f"{_advice(needs)}"
        )
    if wanted not in ENGINE_FEATURES:
        raise PreflightError(f"{_describe(link)}: unknown engine {wanted!r}; expected auto, {', '.join(AUTO_ORDER)}")
    if not can_do(wanted, link, caps):
        raise PreflightError(
            f"{_describe(link)} asks for engine \"{wanted}\" and needs {', '.join(sorted(needs))}, but "
            f"{_why_not(wanted, needs, caps)}; {_advice(needs, exclude=wanted)}"
        )
    return wanted


def _advice(needs: frozenset[str], exclude: str | None = None) -> str:
    if needs & {"delay", "jitter"}:
        opts = ['use engine = "netem" on a kernel with sch_netem', 'use engine = "wire" once roughnet-wire is built']
    else:
        opts = ['use engine = "kernel" (tbf + nftables)', 'engine = "wire" once roughnet-wire is built']
    return " or ".join(o for o in opts if exclude is None or f'"{exclude}"' not in o) or "no engine can"


def choose_engines(run_or_links: Run | Iterable[Link], caps: Capabilities) -> dict[int, str]:
    """Link index -> engine for every link; raises PreflightError naming the link and what is missing."""
    links = run_or_links.links if isinstance(run_or_links, Run) else tuple(run_or_links)
    if isinstance(run_or_links, Run) and run_or_links.events:  # a link with events changes at run time: a schedule
        changes: dict[int, list] = {}
        for e in run_or_links.events:
            if e.link is not None and e.change is not None:
                changes.setdefault(e.link, []).append(e.change)
        links = tuple(dataclasses.replace(lk, schedule=tuple(changes[lk.index])) if lk.index in changes else lk
                      for lk in links)  # fmt: skip
    return {link.index: choose_engine(link, caps) for link in links}
