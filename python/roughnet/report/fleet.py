"""The report's *Vehicle fleet* section: what the plots of V2V papers show, from the ``distance`` table.

Runs whose hosts have positions on a link whose loss follows distance store, per flow, send interval and
10 m distance bin, the messages sent and delivered and their latency (``mobility.distance``, results table
``distance``). This module owns turning those rows into

- **delivery ratio against distance** (bins of ``BIN_M``), one line per run (labelled by protocol);
- **latency against distance**: per bin the median and the 99th percentile of the messages' one-way latency
  (nearest rank, from the run's per-message ``distance-<workload>.parquet`` when the run folder has it, else
  the delivered-weighted mean of the stored rows' means);
- **delivery over time per pair**: a heat map per run (pairs by mean distance, at most ``MAX_PAIRS`` of them:
  those whose delivery changed the most when there are more); with more pairs than that, also **delivery over
  time by distance**: a heat map of every pair's messages by ``BIN_M`` distance bin and interval;
- **the fleet map** at chosen moments (a quarter, half and nine tenths of the run): every host where the
  wire had it (``Run.links[i].positions``, placed with the link's ``t0_after_ready_s``), and a line for
  every pair that delivered something in that interval, coloured by its delivery ratio;

and a small table per run (pairs, messages, delivery within 100 m, the farthest delivered message). PNG
bytes and HTML; the store is read by the caller (``report.build_report``).
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BIN_M", "MAX_PAIRS", "PNG_NAMES", "by_distance", "remove_stale_pngs", "section"]

#: Width of the report's distance bins (m); the table's are 10 m.
BIN_M = 50.0
#: Most pairs in a run's delivery-over-time heat map.
MAX_PAIRS = 60
#: Moments of the fleet map, as fractions of the run's length.
MAP_MOMENTS = (0.25, 0.5, 0.9)
PNG_NAMES = ("fleet_pdr_distance", "fleet_latency_distance", "fleet_map")

Rows = Sequence[Mapping[str, Any]]


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _label(run: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> str:
    proto = str(run.get("protocol") or "?")
    same = [r for r in runs if r.get("protocol") == run.get("protocol")]
    return proto if len(same) == 1 else f"{proto} #{run.get('index')}"


def by_distance(rows: Rows, bin_m: float = BIN_M) -> list[dict[str, Any]]:
    """Per ``bin_m`` bin (lower edge ``d_m``): sent, delivered, ratio, mean latency (µs; delivered-weighted)."""
    acc: dict[float, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        b = float(np.floor(float(r["d_bin_m"]) / bin_m) * bin_m)
        a = acc[b]
        a[0] += int(r["sent"] or 0)
        a[1] += int(r["delivered"] or 0)
        if r.get("lat_mean_us") is not None:
            a[2] += float(r["lat_mean_us"]) * int(r["delivered"] or 0)
    out = []
    for b in sorted(acc):
        sent, got, lat = acc[b]
        out.append({"d_m": b, "sent": int(sent), "delivered": int(got), "ratio": got / sent if sent else None,
                    "lat_mean_us": lat / got if got else None})
    return out


def _latency_bins(run_dir: Path | None, rows: Rows, bin_m: float) -> tuple[list[float], list[float], list[float]]:
    """(bin lower edges, p50 µs, p99 µs) from the per-message parquet files; else the rows' means twice."""
    files = sorted(run_dir.glob("distance-*.parquet")) if run_dir is not None and run_dir.is_dir() else []
    if files:
        import pyarrow.parquet as pq

        d, lat = [], []
        for f in files:
            t = pq.read_table(f, columns=["distance_m", "latency_us"])
            d.append(t.column("distance_m").to_numpy(zero_copy_only=False))
            lat.append(t.column("latency_us").to_numpy(zero_copy_only=False))
        dd, ll = np.concatenate(d), np.concatenate(lat).astype(float)
        ok = ~np.isnan(ll)
        dd, ll = dd[ok], ll[ok]
        bins = np.floor(dd / bin_m) * bin_m
        xs, p50, p99 = [], [], []
        for b in np.unique(bins):
            v = np.sort(ll[bins == b])
            xs.append(float(b))
            p50.append(float(v[max(0, (v.size * 500 + 999) // 1000 - 1)]))
            p99.append(float(v[max(0, (v.size * 990 + 999) // 1000 - 1)]))
        return xs, p50, p99
    agg = [a for a in by_distance(rows, bin_m) if a["lat_mean_us"] is not None]
    means = [a["lat_mean_us"] for a in agg]
    return [a["d_m"] for a in agg], means, means


def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def pdr_png(per_run: list[tuple[str, Rows]], bin_m: float = BIN_M) -> bytes:
    fig = _figure(7.0, 3.6)
    ax = fig.add_subplot()
    for label, rows in per_run:
        agg = [a for a in by_distance(rows, bin_m) if a["ratio"] is not None]
        ax.plot([a["d_m"] + bin_m / 2 for a in agg], [100 * a["ratio"] for a in agg], marker="o", ms=3, label=label)
    ax.set_xlabel(f"sender-receiver distance at send time (m, {bin_m:g} m bins)")
    ax.set_ylabel("delivered (%)")
    ax.set_ylim(-3, 103)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def latency_png(per_run: list[tuple[str, Rows, Path | None]], bin_m: float = BIN_M) -> bytes:
    fig = _figure(7.0, 3.6)
    ax = fig.add_subplot()
    for i, (label, rows, run_dir) in enumerate(per_run):
        xs, p50, p99 = _latency_bins(run_dir, rows, bin_m)
        if not xs:
            continue
        centre = [x + bin_m / 2 for x in xs]
        line, = ax.plot(centre, [v / 1000 for v in p50], marker="o", ms=3, label=f"{label} p50")
        ax.plot(centre, [v / 1000 for v in p99], ls="--", color=line.get_color(), label=f"{label} p99")
    ax.set_xlabel(f"sender-receiver distance at send time (m, {bin_m:g} m bins)")
    ax.set_ylabel("one-way latency (ms)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    return _png(fig)


def _pairs(rows: Rows) -> dict[tuple[str, str], dict[float, list[float]]]:
    """(sender, receiver) -> t_s -> [sent, delivered, distance sum weighted by sent]."""
    out: dict[tuple[str, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0.0]))
    for r in rows:
        c = out[(r["sender"], r["receiver"])][float(r["t_s"])]
        c[0] += int(r["sent"] or 0)
        c[1] += int(r["delivered"] or 0)
        c[2] += float(r["distance_m"]) * int(r["sent"] or 0)
    return out


def pairs_png(label: str, rows: Rows, max_pairs: int = MAX_PAIRS, pairs=None) -> tuple[bytes, int, int]:
    """Heat map of delivery per pair and interval; (png, pairs shown, pairs in all). ``pairs``: ``_pairs(rows)``
    when the caller has it."""
    pairs = _pairs(rows) if pairs is None else pairs
    times = sorted({t for p in pairs.values() for t in p})
    keys = list(pairs)
    ratio = np.full((len(keys), len(times)), np.nan)
    mean_d = []
    for i, k in enumerate(keys):
        sent = sum(c[0] for c in pairs[k].values())
        mean_d.append(sum(c[2] for c in pairs[k].values()) / sent if sent else 0.0)
        for j, t in enumerate(times):
            c = pairs[k].get(t)
            if c and c[0]:
                ratio[i, j] = c[1] / c[0]
    chosen = list(range(len(keys)))
    if len(keys) > max_pairs:  # the pairs whose delivery changed most, then by distance
        spread = [float(np.nanmax(r) - np.nanmin(r)) if np.isfinite(r).any() else 0.0 for r in ratio]
        chosen = sorted(sorted(chosen, key=lambda i: (-spread[i], mean_d[i]))[:max_pairs])
    chosen.sort(key=lambda i: mean_d[i])
    fig = _figure(7.5, 1.2 + 0.14 * len(chosen))
    ax = fig.add_subplot()
    im = ax.imshow(ratio[chosen] * 100, aspect="auto", interpolation="nearest", cmap="RdYlGn", vmin=0, vmax=100,
                   extent=(times[0], times[-1] + (times[1] - times[0] if len(times) > 1 else 1), len(chosen), 0))
    ax.set_yticks([i + 0.5 for i in range(len(chosen))])
    ax.set_yticklabels([f"{keys[i][0]}→{keys[i][1]} ({mean_d[i]:.0f} m)" for i in chosen], fontsize=6)
    ax.set_xlabel("send time (s after t0)")
    ax.set_title(f"{label}: delivered per interval and pair (mean distance)", fontsize=9)
    fig.colorbar(im, ax=ax, label="delivered (%)", shrink=0.8)
    return _png(fig), len(chosen), len(keys)


def distance_time(rows: Rows, bin_m: float = BIN_M) -> tuple[list[float], list[float], np.ndarray]:
    """Delivery ratio per ``bin_m`` distance bin (rows, lower edges ascending) and send interval (columns, the
    rows' ``t_s`` ascending) over every pair of the run: delivered / sent of all messages sent in that interval
    at that distance (NaN where none was). The view that stays readable at any number of pairs."""
    acc: dict[tuple[float, float], list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        b = float(np.floor(float(r["d_bin_m"]) / bin_m) * bin_m)
        a = acc[(b, float(r["t_s"]))]
        a[0] += int(r["sent"] or 0)
        a[1] += int(r["delivered"] or 0)
    bins = sorted({b for b, _ in acc})
    times = sorted({t for _, t in acc})
    ratio = np.full((len(bins), len(times)), np.nan)
    bi, ti = {b: i for i, b in enumerate(bins)}, {t: j for j, t in enumerate(times)}
    for (b, t), (sent, delivered) in acc.items():
        if sent:
            ratio[bi[b], ti[t]] = delivered / sent
    return bins, times, ratio


def distance_time_png(label: str, rows: Rows, bin_m: float = BIN_M) -> bytes:
    """Heat map of delivery per distance bin and interval, every pair of the run (``distance_time``)."""
    bins, times, ratio = distance_time(rows, bin_m)
    fig = _figure(7.5, 1.6 + 0.22 * len(bins))
    ax = fig.add_subplot()
    step = times[1] - times[0] if len(times) > 1 else 1.0
    im = ax.imshow(ratio * 100, aspect="auto", interpolation="nearest", cmap="RdYlGn", vmin=0, vmax=100,
                   extent=(times[0], times[-1] + step, bins[-1] + bin_m, bins[0]))
    ax.set_xlabel("send time (s after t0)")
    ax.set_ylabel("sender-receiver distance (m)")
    ax.set_title(f"{label}: delivered per interval and {bin_m:.0f} m distance bin, every pair", fontsize=9)
    fig.colorbar(im, ax=ax, label="delivered (%)", shrink=0.8)
    return _png(fig)


def _positions(run: Mapping[str, Any], t_s: float) -> dict[str, tuple[float, float]]:
    """Every placed host's (x, y) at t_s after t0, from the run's links' positions."""
    from roughnet.mobility.distance import position_at

    out: dict[str, tuple[float, float]] = {}
    spec = run.get("run") or {}
    counters = run.get("link_counters") or {}
    for link in spec.get("links") or []:
        positions = link.get("positions") or []
        offset = (counters.get(str(link.get("index"))) or {}).get("t0_after_ready_s")
        if not positions or offset is None:
            continue
        for host, pts in zip(link.get("hosts") or [], positions, strict=False):
            if host not in out and pts:
                x, y = position_at(pts, np.array([(t_s + float(offset)) * 1e9]))[0]
                out[host] = (float(x), float(y))
    return out


def map_png(label: str, run: Mapping[str, Any], rows: Rows, moments: Sequence[float] = MAP_MOMENTS,
            pairs=None) -> bytes | None:
    pairs = _pairs(rows) if pairs is None else pairs
    times = sorted({t for p in pairs.values() for t in p})
    if not times:
        return None
    chosen = [times[min(len(times) - 1, int(f * len(times)))] for f in moments]
    fixed = {h for link in (run.get("run") or {}).get("links") or [] for h, pts in
             zip(link.get("hosts") or [], link.get("positions") or [], strict=False) if len(pts) == 1}  # fmt: skip
    import matplotlib
    from matplotlib.collections import LineCollection

    cmap = matplotlib.colormaps["RdYlGn"]
    fig = _figure(4.6 * len(chosen), 4.2)
    axs = fig.subplots(1, len(chosen), squeeze=False)[0]
    for ax, t in zip(axs, chosen, strict=True):
        pos = _positions(run, t + 0.5)
        if not pos:
            ax.set_visible(False)
            continue
        segments, ratios = [], []
        for (s, r), by_t in pairs.items():
            c = by_t.get(t)
            if not c or not c[0] or not c[1] or s not in pos or r not in pos:
                continue
            segments.append((pos[s], pos[r]))
            ratios.append(c[1] / c[0])
        if segments:  # one collection, not a Line2D per pair (10,000 pairs at 100 cars: 30 s of matplotlib)
            ax.add_collection(LineCollection(segments, colors=cmap(np.asarray(ratios)), linewidths=0.8, alpha=0.7,
                                             zorder=1), autolim=True)
        hosts = list(pos.items())
        i = 0
        while i < len(hosts):  # one scatter per run of hosts of one kind, in their order (not one per host)
            kind = hosts[i][0] in fixed
            j = i
            while j < len(hosts) and (hosts[j][0] in fixed) == kind:
                j += 1
            ax.scatter([x for _, (x, _) in hosts[i:j]], [y for _, (_, y) in hosts[i:j]], marker="^" if kind else "o",
                       s=40 if kind else 18, color="#333" if kind else "#1f77b4", zorder=2)
            i = j
        for h, (x, y) in hosts:
            ax.annotate(h, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.set_title(f"{label}, t = {t:g} s", fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.grid(alpha=0.3)
    sm = matplotlib.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, 100))
    fig.colorbar(sm, ax=list(axs), label="delivered in that second (%)", shrink=0.8)
    return _png(fig)


def _summary(rows: Rows) -> dict[str, Any]:
    sent = sum(int(r["sent"] or 0) for r in rows)
    got = sum(int(r["delivered"] or 0) for r in rows)
    near = [r for r in rows if float(r["distance_m"]) < 100]
    near_sent = sum(int(r["sent"] or 0) for r in near)
    far = [float(r["distance_m"]) for r in rows if int(r["delivered"] or 0) > 0]
    return {"pairs": len({(r["sender"], r["receiver"]) for r in rows}), "sent": sent, "delivered": got,
            "ratio": got / sent if sent else None,
            "near": sum(int(r["delivered"] or 0) for r in near) / near_sent if near_sent else None,
            "farthest": max(far) if far else None}  # fmt: skip


def section(runs: Sequence[Mapping[str, Any]], distance: Rows, out_dir: Path, img: Callable[[bytes, str], str],
            run_dir: Callable[[Mapping[str, Any]], Path | None] = lambda r: None) -> str:
    """The HTML section ("" when no run has distance rows); writes the PNGs into ``out_dir``."""
    by_run: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in distance:
        by_run[r["run_id"]].append(r)
    shown = [r for r in runs if by_run.get(r["run_id"])]
    if not shown:
        return ""
    parts = ["<h2>Vehicle fleet: delivery by distance</h2>",
             "<p>Every message a sender sent, with the distance between its sender and its receiver at its send "
             "time (from the positions the wire drew each frame's loss from). Latency is one-way, of the messages "
             "that arrived.</p>"]  # fmt: skip

    def figure(name: str, png: bytes, caption: str) -> None:
        (out_dir / f"{name}.png").write_bytes(png)
        parts.append(f"<figure>{img(png, caption)}<figcaption>{_e(caption)}</figcaption></figure>")

    labelled = [(_label(r, shown), r) for r in shown]
    figure("fleet_pdr_distance", pdr_png([(lab, by_run[r["run_id"]]) for lab, r in labelled]),
           "Delivery ratio against the sender-receiver distance at send time, one line per run")
    figure("fleet_latency_distance",
           latency_png([(lab, by_run[r["run_id"]], run_dir(r)) for lab, r in labelled]),
           "One-way latency against distance: median (solid) and 99th percentile (dashed) per bin")
    head = ["run", "pairs", "messages sent", "delivered", "within 100 m", "farthest delivered"]
    trs = []
    for lab, r in labelled:
        s = _summary(by_run[r["run_id"]])
        cells = [lab, s["pairs"], s["sent"], f"{100 * s['ratio']:.1f} %" if s["ratio"] is not None else "-",
                 f"{100 * s['near']:.1f} %" if s["near"] is not None else "-",
                 f"{s['farthest']:.0f} m" if s["farthest"] is not None else "-"]  # fmt: skip
        trs.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    parts.append("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>" + "".join(trs) + "</table>")
    for n, (lab, r) in enumerate(labelled):
        pairs = _pairs(by_run[r["run_id"]])  # (once for the heat map and the map)
        png, shown_pairs, all_pairs = pairs_png(lab, by_run[r["run_id"]], pairs=pairs)
        subset = ("" if shown_pairs == all_pairs
                  else f" ({shown_pairs} of {all_pairs} pairs: those whose delivery changed most)")
        figure(f"fleet_pairs_{n}", png, f"{lab}: delivery over time per pair{subset}, sorted by mean distance")
        if shown_pairs < all_pairs:  # every pair, by distance bin: what the per-pair map cannot show at this size
            figure(f"fleet_bins_{n}", distance_time_png(lab, by_run[r["run_id"]]),
                   f"{lab}: delivery over time by distance, all {all_pairs} pairs ({BIN_M:.0f} m bins)")
        m = map_png(lab, r, by_run[r["run_id"]], pairs=pairs)
        if m is not None:
            figure(f"fleet_map_{n}", m, f"{lab}: the fleet at three moments; a line per pair that delivered "
                   "something in that second, coloured by its delivery ratio (triangles: fixed hosts)")
    return "\n".join(parts)


def remove_stale_pngs(out_dir: Path) -> None:
    for p in out_dir.glob("fleet_*.png"):
        p.unlink(missing_ok=True)
