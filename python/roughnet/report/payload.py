"""The report's payload section (SEEDS S0 experiment 2): delay and actual drop rate against payload size.

Owns, for a sweep whose report x axis is ``payload`` (two or more sizes) and
one-way latency (stream runs): the table and plot of average delay and of the actual
drop rate against payload size, one line per group (the other swept keys,
e.g. the protocol), and the computed "best payload range" statement per group.

"Actual drop rate" has three meanings (DESIGN.md) and all three are shown:
frames the link dropped / frames that reached its loss decision (link
counters), TCP retransmitted / TCP data segments (packet captures; without
them the kernel's retransmitted / sent segments), and messages lost /
expected (at the receivers).

Best range criterion (S0's "at 10 % drop, payloads of a few KB do best" is about
the delay a message waits): the best payload is the one of lowest mean one-way
delay; only runs that delivered every message and are not invalid count (mean
over repeats). The best range is the contiguous payloads around it whose mean
delay is within ``TOLERANCE`` of the lowest. The statement also names the
payload of lowest delay per KB (µs/KB: what moving a given amount of data in
messages of that size costs), which for most links favours the largest sizes.
"""

from __future__ import annotations

import html
import io
import math
from dataclasses import dataclass, field
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from roughnet.report import fmt

AXIS = "payload"
#: A payload is in the best range when its mean delay is at most (1 + TOLERANCE) x the lowest mean delay.
TOLERANCE = 0.25
CRITERION = (
    "best = lowest mean one-way delay, over runs that delivered every message and are not invalid; the best range "
    f"is the contiguous payloads whose mean delay is within {TOLERANCE:.0%} of the lowest"
)


@dataclass
class PayloadPoint:
    payload: Any  # as written ("16 KB")
    size_bytes: float
    runs: int = 0
    delay_mean_us: float | None = None
    delay_p99_us: float | None = None
    link_drop_rate: float | None = None
    retrans_rate: float | None = None
    retrans_source: str = ""  # "pcap" or "kernel"
    message_loss: float | None = None
    segments_per_message: float | None = None
    eligible: bool = False  # counts for the best range (every message delivered, not invalid)

    @property
    def cost_us_per_kb(self) -> float | None:
        if self.delay_mean_us is None or not self.size_bytes:
            return None
        return self.delay_mean_us / (self.size_bytes / 1000.0)


@dataclass
class Group:
    label: str  # "protocol=mqtt" ("" when payload is the only axis)
    points: list[PayloadPoint] = field(default_factory=list)


@dataclass
class Best:
    label: str
    best: PayloadPoint | None  # lowest mean delay among eligible points
    range: list[PayloadPoint]
    cheapest: PayloadPoint | None  # lowest delay per KB among eligible points
    excluded: list[PayloadPoint]

    def sentence(self) -> str:
        who = self.label or "all runs"
        if self.best is None:
            return f"{who}: no payload delivered every message in a valid run, so no payload range can be called best."
        lo, hi = fmt.label(self.range[0].payload), fmt.label(self.range[-1].payload)
        rng = lo if lo == hi else f"{lo} to {hi}"
        text = (f"{who}: payloads of {rng} did best (lowest mean delay: {fmt.label(self.best.payload)}, "
                f"{fmt.value('lat_mean_us', self.best.delay_mean_us)})")
        if self.cheapest is not None:
            text += (f"; the lowest delay per KB was at {fmt.label(self.cheapest.payload)} "
                     f"({fmt.number(self.cheapest.cost_us_per_kb or 0.0)} µs/KB)")
        if self.excluded:
            text += "; not counted (messages lost or invalid): " + ", ".join(fmt.label(p.payload) for p in self.excluded)
        return text + "."


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def link_drop_rate(run: dict[str, Any]) -> float | None:
    """Frames dropped by the link engines / frames that reached their loss decision, over every link."""
    dropped = seen = 0
    for per_link in (run.get("link_counters") or {}).values():
        for direction in ("forward", "reverse"):
            d = (per_link or {}).get(direction) or {}
            dropped += int(d.get("drops_loss", 0) or 0) + int(d.get("drops_queue", 0) or 0)
            seen += int(d.get("seen_at_loss_hook", d.get("rx_packets", 0)) or 0)
    return dropped / seen if seen else None


def _retrans_rate(m: dict[str, Any]) -> tuple[float | None, str]:
    if m.get("pcap_tcp_retrans_ratio") is not None:
        return float(m["pcap_tcp_retrans_ratio"]), "pcap"
    out, retr = m.get("tcp_out_segs"), m.get("tcp_retrans_segs")
    if out:  # Linux OutSegs leaves retransmissions out
        return float(retr or 0) / (float(out) + float(retr or 0)), "kernel"
    return None, ""


def applies(axes: dict[str, list[Any]], runs: list[dict[str, Any]], x_axis: str | None = AXIS) -> bool:
    """Whether the report's x axis is a payload axis of 2+ sizes and the runs measured one-way latency."""
    if x_axis != AXIS:
        return False
    values = axes.get(AXIS) or []
    order, nums = fmt.order_values(values)
    return len(order) >= 2 and nums is not None and any(r.get("pattern") == "stream" for r in runs)


def groups(axes: dict[str, list[Any]], runs: list[dict[str, Any]]) -> list[Group]:
    """One group per combination of the other varying axes, points in payload order."""
    order, nums = fmt.order_values(axes.get(AXIS) or [])
    assert nums is not None
    # the protocol always names a group (even when only one was swept), then the other varying keys
    others = ["protocol", *(k for k, v in axes.items() if k not in (AXIS, "protocol") and len(v) > 1)]
    by_group: dict[tuple[Any, ...], dict[Any, list[dict[str, Any]]]] = {}
    for r in runs:
        params = r.get("params") or {}
        if r.get("status") != "ok" or params.get(AXIS) not in nums or r.get("pattern") != "stream":
            continue
        key = (params.get("protocol", r.get("protocol")), *(params.get(k) for k in others[1:]))
        by_group.setdefault(key, {}).setdefault(params[AXIS], []).append(r)
    out = []
    protocol_order = list(axes.get("protocol") or [])
    for key in sorted(by_group, key=lambda k: ((protocol_order.index(k[0]) if k[0] in protocol_order else 99),
                                                [str(x) for x in k])):
        label = ", ".join(f"{k}={fmt.label(v)}" for k, v in zip(others, key, strict=True) if v is not None)
        g = Group(label)
        for payload in order:
            rs = by_group[key].get(payload)
            if not rs:
                continue
            ms = [r.get("metrics") or {} for r in rs]
            rr = [_retrans_rate(m) for m in ms]
            p = PayloadPoint(payload, nums[payload], runs=len(rs))
            p.delay_mean_us = _mean([m.get("lat_mean_us") for m in ms])
            p.delay_p99_us = _mean([m.get("lat_p99_us") for m in ms])
            p.link_drop_rate = _mean([link_drop_rate(r) for r in rs])
            p.retrans_rate = _mean([x for x, _ in rr])
            p.retrans_source = next((s for _, s in rr if s), "")
            p.message_loss = _mean([m.get("loss_ratio") for m in ms])
            p.segments_per_message = _mean([m.get("pcap_segments_per_message") for m in ms])
            p.eligible = p.delay_mean_us is not None and all(
                (m.get("lost") or 0) == 0 and r.get("validity") != "invalid" for m, r in zip(ms, rs, strict=True))
            g.points.append(p)
        out.append(g)
    return out


def best_range(group: Group, tolerance: float = TOLERANCE) -> Best:
    """The group's best payload range under the module's criterion."""
    eligible = [p for p in group.points if p.eligible and p.delay_mean_us is not None]
    excluded = [p for p in group.points if not p.eligible]
    if not eligible:
        return Best(group.label, None, [], None, excluded)
    best = min(eligible, key=lambda p: p.delay_mean_us or 0.0)
    limit = (best.delay_mean_us or 0.0) * (1 + tolerance)
    i = eligible.index(best)
    lo = hi = i
    while lo > 0 and (eligible[lo - 1].delay_mean_us or math.inf) <= limit:
        lo -= 1
    while hi + 1 < len(eligible) and (eligible[hi + 1].delay_mean_us or math.inf) <= limit:
        hi += 1
    cheapest = min(eligible, key=lambda p: p.cost_us_per_kb or math.inf)
    return Best(group.label, best, eligible[lo:hi + 1], cheapest, excluded)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{fmt.number(v * 100)} %"


def plot_png(gs: list[Group]) -> bytes:
    """Two panels against payload size (log x): mean delay, and the three drop rates."""
    fig = Figure(figsize=(11, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax_d, ax_r = fig.subplots(1, 2)
    colours = [f"C{i % 10}" for i in range(len(gs))]
    for g, c in zip(gs, colours, strict=True):
        name = g.label or "runs"
        xs = [p.size_bytes / 1000 for p in g.points]
        ys = [p.delay_mean_us / 1000 if p.delay_mean_us is not None else math.nan for p in g.points]
        ax_d.plot(xs, ys, marker="o", color=c, label=name)
        # Points that do not count (messages lost or an invalid run): hollow, as in the other plots.
        out = [(x, y) for x, y, p in zip(xs, ys, g.points, strict=True) if not p.eligible and not math.isnan(y)]
        if out:
            ax_d.plot(*zip(*out), linestyle="none", marker="o", markersize=8, markerfacecolor="white", color=c)
        for attr, style, what in (("link_drop_rate", "-", "link frames"), ("retrans_rate", "--", "TCP retrans."),
                                  ("message_loss", ":", "messages")):
            vals = [getattr(p, attr) for p in g.points]
            if all(v is None for v in vals):
                continue
            ax_r.plot(xs, [v * 100 if v is not None else math.nan for v in vals], linestyle=style, marker=".",
                      color=c, label=f"{name}: {what}")
    for ax in (ax_d, ax_r):
        ax.set_xscale("log")
        ax.set_xlabel("payload (KB)")
        ax.grid(True, alpha=0.3)
    delays = [p.delay_mean_us for g in gs for p in g.points if p.delay_mean_us]
    if delays and max(delays) > 100 * min(delays):  # two decades or more: a linear axis hides the small ones
        ax_d.set_yscale("log")
    ax_d.set_ylabel("mean one-way delay (ms)")
    ax_d.set_title("average delay (hollow: not counted, messages lost or run invalid)"
                   if any(not p.eligible for g in gs for p in g.points) else "average delay")
    ax_r.set_ylabel("actual drop rate (%)")
    ax_r.set_title("actual drop rate")
    ax_d.legend(fontsize=8)
    ax_r.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def section(axes: dict[str, list[Any]], runs: list[dict[str, Any]], x_axis: str | None = AXIS
            ) -> tuple[str, bytes | None]:
    """(HTML section, PNG of the plot) for the payload analysis; ("", None) when it does not apply.

    It applies when ``x_axis`` (the report's x role: ``[report] x`` or the first varying key) is
    the payload axis."""
    if not applies(axes, runs, x_axis):
        return "", None
    gs = [g for g in groups(axes, runs) if g.points]
    if not gs:
        return "", None
    e = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    bests = [best_range(g) for g in gs]
    statements = "".join(f"<li>{e(b.sentence())}</li>" for b in bests)
    heads = ["group", "payload", "runs", "mean delay", "p99 delay", "delay per KB", "link frame drops",
             "TCP retransmissions", "message loss", "segments / message", "counted"]
    rows = []
    for g in gs:
        for p in g.points:
            cost = p.cost_us_per_kb
            cells = [g.label or "-", fmt.label(p.payload), str(p.runs), fmt.value("lat_mean_us", p.delay_mean_us),
                     fmt.value("lat_p99_us", p.delay_p99_us), "-" if cost is None else f"{fmt.number(cost)} µs/KB",
                     _pct(p.link_drop_rate),
                     _pct(p.retrans_rate) + (f" ({p.retrans_source})" if p.retrans_source else ""),
                     _pct(p.message_loss),
                     "-" if p.segments_per_message is None else fmt.number(p.segments_per_message),
                     "yes" if p.eligible else "no"]
            rows.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    table = (f"<table><thead><tr>{''.join(f'<th>{e(h)}</th>' for h in heads)}</tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>")
    text = (f"<h2>Best payload range</h2><p>Criterion: {e(CRITERION)}.</p><ul>{statements}</ul>"
            f"<h2>Delay and actual drop rate against payload size</h2>{table}")
    return text, plot_png(gs)
