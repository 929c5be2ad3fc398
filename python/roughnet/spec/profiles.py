"""The link profile table (``profiles.toml`` beside this module): names, numbers, sources, meter figures.

One table for everything that names a profile: roughnet-wire compiles it in
(crates/wire-core/src/profiles.rs), the scenario format takes its names
(``spec.wire.PROFILES``, the JSON Schema's enum), ``roughnet profiles`` prints it
and ``roughnet profiles check`` measures its ``meter`` figures.  This module owns
reading it, the rule that every number has a source (``unsourced``), docs/profiles.md (``render_markdown``;
``python -m roughnet.spec.docs`` writes it), the one-line
summary of a profile and the profile's ``LinkConfig`` with ``both`` expanded (the same
expansion as the Rust side; a unit test compares them with ``roughnet-wire
--print-profile``).  No I/O beyond reading the table and writing the doc.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("profiles.toml")

#: Figures `roughnet profiles check` can measure, with their unit.
METER_FIGURES = {
    "rtt_p50_ms": "ms", "rtt_p90_ms": "ms", "rtt_p99_ms": "ms", "loss": "fraction", "loss_oneway": "fraction",
    "down_mbps": "Mbit/s", "up_mbps": "Mbit/s",
}


@dataclass(frozen=True)
class Source:
    keys: tuple[str, ...]
    figure: str
    cites: str
    derived: str
    checked: str


@dataclass(frozen=True)
class Meter:
    figure: str
    cited: float
    tolerance: float
    why: str
    #: What the meter's own probes add to the cited figure (ping's frames serialised on a slow link).
    plus: float = 0.0

    @property
    def unit(self) -> str:
        return METER_FIGURES[self.figure]


@dataclass(frozen=True)
class Profile:
    name: str
    network: str
    link: dict[str, Any]
    sources: tuple[Source, ...]
    meter: tuple[Meter, ...] = ()
    needs: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def link_config(self) -> dict[str, Any]:
        """The LinkConfig JSON as the table writes it, ``both`` copied to ``a_to_b`` and ``b_to_a``."""
        return expand(self.link)

    def numbers(self) -> list[tuple[str, Any]]:
        """Every number of ``link`` with its dotted path (``both.rate_bps``, ``both.loss.tx_power_dbm``)."""
        return [(k, v) for k, v in _leaves(self.link, "") if not isinstance(v, str)]

    def parameters(self) -> list[tuple[str, Any]]:
        """Every value of ``link`` (numbers, then words such as ``jitter_dist``) with its dotted path."""
        return self.numbers() + [(k, v) for k, v in _leaves(self.link, "") if isinstance(v, str)]

    def source_of(self, path: str) -> Source | None:
        for s in self.sources:
            if any(path == k or path.startswith(k + ".") for k in s.keys):
                return s
        return None

    def summary(self) -> str:
        """One line of key figures: rate down/up, one-way delay, jitter, loss, half duplex."""
        cfg = self.link_config()
        a, b = cfg.get("a_to_b", {}), cfg.get("b_to_a", {})
        parts = []
        ra, rb = a.get("rate_bps"), b.get("rate_bps")
        if ra or rb:
            parts.append(_rate(rb) if ra == rb else f"down {_rate(rb)} / up {_rate(ra)}")
        da, db = a.get("delay_ns", 0), b.get("delay_ns", 0)
        if da or db:
            parts.append(f"{_dur(da)} one way" if da == db else f"{_dur(da)} up / {_dur(db)} down")
        ja = a.get("jitter_ns") or b.get("jitter_ns")
        if ja:
            parts.append(f"jitter {_dur(ja)} ({a.get('jitter_dist') or b.get('jitter_dist') or 'uniform'})")
        loss = a.get("loss") or b.get("loss")
        if loss and loss.get("model") not in (None, "none"):
            parts.append(f"loss {loss['model']}")
        if cfg.get("half_duplex") is not None:
            parts.append("half duplex")
        return ", ".join(parts) or "no impairment"


def expand(link: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in link.items() if k != "both"}
    if "both" in link:
        out["a_to_b"] = dict(link["both"])
        out["b_to_a"] = dict(link["both"])
    return out


def _leaves(node: Any, prefix: str):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}[{i}]")
    elif isinstance(node, (int, float, str)) and not isinstance(node, bool):
        yield prefix, node


def _rate(bps: Any) -> str:
    if not bps:
        return "unlimited"
    for div, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= div:
            return f"{bps / div:.3g} {unit}"
    return f"{bps} bit/s"


def _dur(ns: int) -> str:
    if not ns:
        return "0"
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if ns >= div:
            return f"{ns / div:.3g} {unit}"
    return f"{ns} ns"


def parse(text: str) -> list[Profile]:
    doc = tomllib.loads(text)
    out = []
    for e in doc.get("profile", []):
        known = {"name", "network", "link", "source", "meter", "needs"}
        out.append(Profile(
            name=e["name"], network=e.get("network", ""), link=e.get("link", {}),
            sources=tuple(Source(tuple(s["keys"]), s["figure"], s["cites"], s["derived"], str(s["checked"]))
                          for s in e.get("source", [])),
            meter=tuple(Meter(m["figure"], float(m["cited"]), float(m["tolerance"]), m["why"], float(m.get("plus", 0)))
                        for m in e.get("meter", [])),
            needs=e.get("needs", ""), extra={k: v for k, v in e.items() if k not in known}))
    return out


@functools.cache
def table() -> tuple[Profile, ...]:
    return tuple(parse(TABLE_PATH.read_text()))


def names() -> tuple[str, ...]:
    return tuple(p.name for p in table())


def get(name: str) -> Profile | None:
    return next((p for p in table() if p.name == name), None)


def unsourced(p: Profile) -> list[str]:
    """Paths of ``p``'s numbers that no source covers (must be empty), and meter figures not known."""
    bad = [path for path, _ in p.numbers() if p.source_of(path) is None]
    bad += [f"meter {m.figure}" for m in p.meter if m.figure not in METER_FIGURES]
    return bad


# ----------------------------------------------------------------------------- docs/profiles.md

DOCS_PATH = Path(__file__).resolve().parents[3] / "docs" / "profiles.md"


def _value(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}" if isinstance(v, float) else str(v)


def render_markdown() -> str:
    """docs/profiles.md: every profile, every parameter with its source, the figures a meter checks."""
    out = [
        "# Link profiles: every number and its source",
        "",
        "<!-- Generated by `python -m roughnet.spec.docs` from python/roughnet/spec/profiles.toml; do not edit by "
        "hand. -->",
        "",
        "A link takes a profile with `profile = \"NAME\"` (docs/scenario-format.md); keys written on the link go over",
        "the profile's. Side A of a link is the client end (station, handset, terminal): `a_to_b` is the uplink.",
        "`roughnet profiles` lists them, `roughnet profiles show NAME` prints one as below, and",
        "`roughnet profiles check NAME` (root) measures the figures each cites with ping and iperf3 over the",
        "emulated link (docs/wire-models.md, \"Where the profiles come from\", has the last measured table).",
        "Units: ns, bytes, bit/s; fractions 0..1 (docs/wire-models.md).",
        "",
        "| profile | network | key figures |",
        "|---|---|---|",
    ]
    for p in table():
        out.append(f"| [`{p.name}`](#{p.name}) | {p.network} | {p.summary()} |")
    out.append("")
    for p in table():
        out += [f"## {p.name}", "", p.network + ".", "", "| parameter | value | source |", "|---|---|---|"]
        for k, v in p.parameters():
            s = p.source_of(k)
            out.append(f"| `{k}` | {_value(v)} | {p.sources.index(s) + 1 if s else '-'} |")
        out.append("")
        for i, s in enumerate(p.sources, 1):
            out += [f"{i}. {s.figure}.", f"   Source: {s.cites}.", f"   Derived: {s.derived}.",
                    f"   Checked: {s.checked}."]
        out.append("")
        if p.needs:
            out += [f"You supply: {p.needs}.", ""]
        if p.meter:
            out += ["| checked by the meter | cited | + probe | tolerance | why |", "|---|---|---|---|---|"]
            for m in p.meter:
                out.append(f"| {m.figure} ({m.unit}) | {m.cited:g} | {m.plus:g} | ± {m.tolerance:g} | {m.why} |")
            out.append("")
    return "\n".join(out)

