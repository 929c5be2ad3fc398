"""Points of a sweep: the runs with equal parameters, aggregated with intervals and flags.

Owns turning the stored runs of a sweep into one ``PointStats`` per parameter point:
which runs count (status ok and not judged invalid; the others are listed with why),
per metric the estimate over the runs with its interval and spread
(``roughnet.analysis.stats``: bootstrap over runs for latency, throughput and the other
per-run numbers; binomial on messages for loss; binomial on runs for ``full_sync``),
and the flags of a point: ``bistable`` (the runs split into two groups) and
``disagree`` (the runs differ more than their own intervals allow, by a heterogeneity
test at ``DISAGREE_ALPHA``, and materially: ``MATERIAL_RATIO``, ``MATERIAL_POINTS``).
A run's own interval comes from its stored histogram for latency percentiles
(order statistics) and from its message counts for loss.

Also the text of those numbers for tables (``interval_text``), the rows of the
points table, the ``points.json`` document and the intervals drawn on the metric
plots (``attach_intervals``).  Computed on the fly from stored runs: nothing here
changes the results format.  No I/O but what callers hand in.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from roughnet.analysis import stats
from roughnet.report import fmt, shaping
from roughnet.results.schema import METRIC_BY_NAME

log = logging.getLogger(__name__)

#: Confidence of the intervals a report shows.
DEFAULT_CONFIDENCE = 0.95
#: Runs differing by less than this factor are never flagged as disagreeing (their own intervals
#: ignore the correlation between consecutive messages, so they are too narrow: see docs/statistics.md).
MATERIAL_RATIO = 1.5
#: ... and fractions (loss) by less than this many units (0.2 percentage points).
MATERIAL_POINTS = 0.002
#: A point's runs disagree when a heterogeneity test of their values against their own intervals
#: has a p-value below this (kept low: a report tests many points and metrics).
DISAGREE_ALPHA = 0.01

#: Latency columns whose per-run interval comes from the run's histogram: column -> (quantile, kinds).
_QUANTILE_COLUMNS: dict[str, tuple[float, tuple[str, ...]]] = {
    **{f"lat_{name}_us": (q, ("latency_intended", "rtt_intended"))
       for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999),
                       ("p999999", 0.999999))},
    "lat_actual_p50_us": (0.5, ("latency_actual", "rtt_actual")),
    "lat_actual_p99_us": (0.99, ("latency_actual", "rtt_actual")),
}  # fmt: skip


@dataclass(frozen=True)
class Flag:
    kind: str  # "bistable" or "disagree"
    column: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "metric": self.column, "reason": self.reason}


@dataclass
class PointStats:
    """One parameter point: its runs and, per metric column, the estimate over them."""

    params: dict[str, Any]
    runs: list[dict[str, Any]]  # the runs that count, in plan order
    excluded: list[tuple[str, str]]  # (run id, why) of the runs that do not
    metrics: dict[str, stats.Estimate] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)

    @property
    def repeats(self) -> int:
        return len(self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "runs": [r.get("run_id") for r in self.runs],
            "repeats": [r.get("repeat") or 0 for r in self.runs],
            "excluded": [{"run_id": rid, "why": why} for rid, why in self.excluded],
            "metrics": {c: e.to_dict() for c, e in self.metrics.items()},
            "flags": [f.to_dict() for f in self.flags],
        }


# ------------------------------------------------------------------ grouping


def point_key(params: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The identity of a point inside one sweep: its params as written, order-free."""
    return tuple(sorted((str(k), fmt.label(v)) for k, v in (params or {}).items()))


def usable(run: dict[str, Any]) -> str | None:
    """None when a run counts in its point's statistics, else why not."""
    if run.get("status") != "ok":
        return f"failed: {run.get('failure_reason') or 'no reason recorded'}"
    if run.get("validity") == "invalid":
        return "invalid: " + ("; ".join(run.get("validity_reasons") or []) or "no reason recorded")
    return None


def group(runs: list[dict[str, Any]]) -> list[PointStats]:
    """Runs grouped by params (first appearance order), usable runs and excluded ones apart."""
    points: dict[tuple[tuple[str, str], ...], PointStats] = {}
    for r in runs:
        key = point_key(r.get("params"))
        p = points.setdefault(key, PointStats(params=dict(r.get("params") or {}), runs=[], excluded=[]))
        why = usable(r)
        if why is None:
            p.runs.append(r)
        else:
            p.excluded.append((str(r.get("run_id")), why))
    return list(points.values())


def columns_for(runs: list[dict[str, Any]], report: dict[str, Any] | None = None) -> list[str]:
    """Metric columns a report aggregates: the key columns of its table, then the plotted ones."""
    patterns = list(dict.fromkeys(r.get("pattern") for r in runs if r.get("pattern")))
    cols = [c for c, _ in shaping.key_columns(patterns)]
    for c in shaping.metrics_for(patterns, report):
        if c not in cols:
            cols.append(c)
    return cols


# ------------------------------------------------------------------ estimates


def _value(run: dict[str, Any], column: str) -> float | None:
    v = (run.get("metrics") or {}).get(column)
    if v is None or isinstance(v, str):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def loss_counts(run: dict[str, Any]) -> tuple[float, float] | None:
    """(messages lost, messages lost + received) of a run, or None without both counts."""
    m = run.get("metrics") or {}
    lost, received = m.get("lost"), m.get("received")
    if lost is None or received is None or lost < 0 or received < 0 or lost + received <= 0:
        return None
    return float(lost), float(lost + received)


def estimate(runs: list[dict[str, Any]], column: str, confidence: float, seed_key: Any) -> stats.Estimate | None:
    """The estimate of ``column`` over ``runs`` (those with a value), or None when none has one."""
    if column == "loss_ratio":
        counts = [loss_counts(r) for r in runs if _value(r, column) is not None]
        if counts and all(c is not None for c in counts):
            return stats.proportion_interval(counts, confidence)  # type: ignore[arg-type]
    meta = METRIC_BY_NAME.get(column)
    if meta is not None and meta.sql_type == "BOOLEAN":  # a yes/no per run: the runs are the trials
        flags = [_value(r, column) for r in runs]
        flags = [f for f in flags if f is not None]
        if not flags:
            return None
        return stats.proportion_interval([(1.0 if f else 0.0, 1.0) for f in flags], confidence, clustered=False)
    values = [v for v in (_value(r, column) for r in runs) if v is not None]
    if not values:
        return None
    return stats.mean_interval(values, confidence, stats.rng_for(seed_key, column))


# ------------------------------------------------------------------ a run's own interval


class _Histograms:
    """Decoded histograms by run, decoded once."""

    def __init__(self, histograms: list[dict[str, Any]]) -> None:
        self._raw: dict[str, list[dict[str, Any]]] = {}
        for h in histograms:
            self._raw.setdefault(h["run_id"], []).append(h)
        self._decoded: dict[tuple[str, str, str], Any] = {}

    def of(self, run_id: str, kinds: tuple[str, ...]) -> list[Any]:
        out = []
        for h in self._raw.get(run_id, []):
            if h["kind"] not in kinds:
                continue
            key = (run_id, h["kind"], h.get("host") or "")
            if key not in self._decoded:
                try:
                    self._decoded[key] = shaping._decode(h["hdr"])
                except Exception as e:  # noqa: BLE001 - a corrupt blob costs only the check
                    log.warning("histogram of run %s (%s) unreadable: %s", run_id, h["kind"], e)
                    self._decoded[key] = None
            if self._decoded[key] is not None:
                out.append(self._decoded[key])
        return out


def _own_interval(run: dict[str, Any], column: str, hists: _Histograms, confidence: float
                  ) -> tuple[float, float] | None:
    """The run's own interval of ``column``: from its histogram (a latency quantile) or counts (loss)."""
    if column == "loss_ratio":
        counts = loss_counts(run)
        return None if counts is None else stats.wilson(counts[0], counts[1], confidence)
    spec = _QUANTILE_COLUMNS.get(column)
    value = _value(run, column)
    if spec is None or value is None:
        return None
    q, kinds = spec
    best = None
    for h in hists.of(str(run.get("run_id")), kinds):  # the receiver whose quantile the run reports
        total = h.get_total_count()
        if total <= 0:
            continue
        at = h.get_value_at_percentile(100.0 * q) / 1000.0
        if best is None or abs(at - value) < abs(best[1] - value):
            best = (h, at, total)
    if best is None:
        return None
    h, _, total = best
    lo_rank, hi_rank = stats.quantile_ranks(total, q, confidence)
    lo = h.get_value_at_percentile(100.0 * lo_rank / total) / 1000.0
    hi = h.get_value_at_percentile(100.0 * hi_rank / total) / 1000.0
    return min(lo, value), max(hi, value)


# ------------------------------------------------------------------ flags


def _material(values: list[float], column: str) -> bool:
    lo, hi = min(values), max(values)
    if METRIC_BY_NAME.get(column) is not None and METRIC_BY_NAME[column].unit == "fraction":
        return hi - lo >= MATERIAL_POINTS
    if lo > 0:
        return hi / lo >= MATERIAL_RATIO
    return hi - lo > 0


def title_of(column: str, patterns: list[str]) -> str:
    headers = dict(shaping.key_columns(patterns))
    return headers.get(column) or (fmt.metric_title(column, patterns) if column in METRIC_BY_NAME else column)


def _range_text(column: str, values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return fmt.value(column, lo) if lo == hi else f"{fmt.value(column, lo)} to {fmt.value(column, hi)}"


def _repeats(runs: list[dict[str, Any]], idx: tuple[int, ...]) -> str:
    reps = sorted(int(runs[i].get("repeat") or 0) for i in idx)
    return ("repeat " if len(reps) == 1 else "repeats ") + ", ".join(str(r) for r in reps)


def flags_for(runs: list[dict[str, Any]], column: str, hists: _Histograms, confidence: float,
              patterns: list[str]) -> list[Flag]:
    """The bistable or disagree flag of one metric of one point (at most one: bistable says more)."""
    with_value = [r for r in runs if _value(r, column) is not None]
    if len(with_value) < 2 or METRIC_BY_NAME.get(column, None) is None:
        return []
    if METRIC_BY_NAME[column].sql_type == "BOOLEAN":
        return []
    values = [_value(r, column) for r in with_value]
    title = title_of(column, patterns)
    unit = METRIC_BY_NAME[column].unit
    split = stats.bistable(values, min_gap=MATERIAL_POINTS if unit == "fraction" else 0.0)  # type: ignore[arg-type]
    if split is not None:
        apart = (f"{min(split.high) / max(split.low):.3g}× apart" if split.log_scale
                 else f"{fmt.value(column, min(split.high) - max(split.low))} apart")
        reason = (f"{title} is bistable: {len(split.low)} runs at {_range_text(column, list(split.low))} "
                  f"({_repeats(with_value, split.low_index)}) and {len(split.high)} at "
                  f"{_range_text(column, list(split.high))} ({_repeats(with_value, split.high_index)}), {apart}; "
                  "the mean describes neither group")
        return [Flag("bistable", column, reason)]
    own = [_own_interval(r, column, hists, confidence) for r in with_value]
    if any(o is None for o in own) or not _material(values, column):  # type: ignore[arg-type]
        return []
    if column == "loss_ratio":
        test = stats.count_heterogeneity([loss_counts(r) for r in with_value])  # type: ignore[misc]
    elif min(values) > 0:  # latency quantiles: on a log scale, errors from each run's own interval
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        errors = [(math.log(max(hi, lo * 1.0005)) - math.log(lo)) / (2.0 * z) if lo > 0 else 0.0
                  for lo, hi in own]  # type: ignore[misc]
        test = stats.heterogeneity([math.log(v) for v in values], errors)  # type: ignore[arg-type]
    else:
        test = None
    if test is None or test.p >= DISAGREE_ALPHA:
        return []
    conf = f"{100 * confidence:g} %"

    def one(i: int) -> str:
        lo, hi = own[i]  # type: ignore[misc]
        return (f"repeat {int(with_value[i].get('repeat') or 0)} {fmt.value(column, values[i])} "
                f"[{fmt.value(column, lo)}, {fmt.value(column, hi)}]")

    low = min(range(len(values)), key=lambda i: values[i])  # type: ignore[arg-type, return-value]
    high = max(range(len(values)), key=lambda i: values[i])  # type: ignore[arg-type, return-value]
    p_text = f"p = {test.p:.2g}" if test.p >= 1e-4 else "p < 0.0001"
    name = "χ²" if column == "loss_ratio" else "Q"
    dof = f"{test.df} degree{'s' if test.df != 1 else ''} of freedom"
    reason = (f"{title}: repeats disagree beyond their own {conf} intervals ({name} = {test.statistic:.3g} on {dof}, "
              f"{p_text}): lowest {one(low)}, highest {one(high)}; one run does not represent this configuration")
    return [Flag("disagree", column, reason)]


# ------------------------------------------------------------------ the whole sweep


def aggregate(runs: list[dict[str, Any]], histograms: list[dict[str, Any]], columns: list[str],
              confidence: float = DEFAULT_CONFIDENCE) -> list[PointStats]:
    """Every point of a sweep with the estimates of ``columns`` and its flags."""
    hists = _Histograms(histograms)
    patterns = list(dict.fromkeys(r.get("pattern") for r in runs if r.get("pattern")))
    points = group(runs)
    for p in points:
        key = point_key(p.params)
        for column in columns:
            est = estimate(p.runs, column, confidence, key)
            if est is None:
                continue
            p.metrics[column] = est
            p.flags.extend(flags_for(p.runs, column, hists, confidence, patterns))
    return points


def has_repeats(points: list[PointStats]) -> bool:
    return any(p.repeats > 1 for p in points)


def to_json(sweep_id: str, points: list[PointStats], confidence: float) -> dict[str, Any]:
    """The ``points.json`` document (docs/statistics.md)."""
    return {
        "sweep_id": sweep_id,
        "confidence": confidence,
        "unit": "run",
        "methods": {
            "bootstrap": "mean over runs, expanded percentile bootstrap over runs",
            "wilson": "pooled proportion, Wilson score interval on the messages divided by the design effect "
                      "(loss_ratio), or on the runs (yes/no metrics)",
            "single": "one run: no interval",
        },
        "points": [p.to_dict() for p in points],
    }  # fmt: skip


# ------------------------------------------------------------------ text


def _scale(column: str, v: float) -> fmt.Scale:
    meta = METRIC_BY_NAME.get(column)
    if meta is not None and meta.sql_type == "BOOLEAN":
        return fmt.Scale("%", 100.0)
    s = fmt.scale_for(column, [v])
    if s.unit == "µs" and abs(v) >= 1000:
        s = fmt.Scale("ms", 1e-3)
    return s


def interval_text(column: str, est: stats.Estimate | None) -> str:
    """"12.3 ms [10.1, 15.2]" (bounds in the value's unit), or the value alone without an interval."""
    if est is None:
        return "-"
    s = _scale(column, est.value)
    unit = f" {s.unit}" if s.unit else ""
    text = fmt.number(est.value * s.factor) + unit
    if est.lo is None or est.hi is None:
        return text
    return f"{text} [{fmt.number(est.lo * s.factor)}, {fmt.number(est.hi * s.factor)}]"


def spread_text(column: str, est: stats.Estimate | None) -> str:
    """"runs 9.80 to 16.0 ms, sd 12 %" (relative sd; for fractions in points)."""
    if est is None or est.n < 2:
        return ""
    s = _scale(column, max(abs(est.vmin), abs(est.vmax)))
    unit = f" {s.unit}" if s.unit else ""
    if est.vmin == est.vmax:
        return f"runs all {fmt.number(est.vmin * s.factor)}{unit}"
    text = f"runs {fmt.number(est.vmin * s.factor)} to {fmt.number(est.vmax * s.factor)}{unit}"
    if est.sd is not None:
        if s.unit == "%":
            text += f", sd {fmt.number(est.sd * s.factor)} points"
        elif est.cv is not None:
            text += f", sd {fmt.number(100 * est.cv)} %"
    return text


def point_table(points: list[PointStats], param_keys: list[str], patterns: list[str],
                columns: list[str] | None = None) -> tuple[list[str], list[dict[str, str]]]:
    """Headers and rows of the points table: params, runs, each key metric with its interval, flags."""
    keys = [(c, h) for c, h in shaping.key_columns(patterns)]
    if columns is not None:
        keys = [(c, h) for c, h in keys if c in columns]
    used = {"runs", "flags", *param_keys}
    named = []
    for c, h in keys:
        while h in used:
            h += " (measured)"
        used.add(h)
        named.append((c, h))
    headers = [*param_keys, "runs", *[h for _, h in named], "flags"]
    rows = []
    for p in points:
        total = p.repeats + len(p.excluded)
        row = {k: fmt.label(p.params.get(k, "")) for k in param_keys}
        row["runs"] = str(p.repeats) if not p.excluded else f"{p.repeats} of {total}"
        for c, h in named:
            row[h] = interval_text(c, p.metrics.get(c))
        kinds: dict[str, list[str]] = {}
        for f in p.flags:
            kinds.setdefault(f.kind, []).append(title_of(f.column, patterns))
        row["flags"] = "; ".join(f"{k}: {', '.join(titles)}" for k, titles in kinds.items())
        rows.append(row)
    return headers, rows


# ------------------------------------------------------------------ plots


def attach_intervals(plot: shaping.MetricPlot, points: list[PointStats]) -> None:
    """Put each (line, x)'s interval and flag on the plot's lines, where the point has more than one run."""
    by_run = {}
    for p in points:
        for r in p.runs:
            by_run[r.get("run_id")] = p
    for panel in plot.panels:
        for line in panel.lines:
            for pt in line.points:
                p = by_run.get(pt.run_id)
                if p is None or pt.x in line.intervals:
                    continue
                est = p.metrics.get(plot.column)
                if est is not None and est.n > 1 and est.lo is not None and est.hi is not None:
                    line.intervals[pt.x] = (est.value, est.lo, est.hi)
                if any(f.column == plot.column for f in p.flags):
                    line.flagged.add(pt.x)


# ------------------------------------------------------------------ HTML


def section(points: list[PointStats], param_keys: list[str], patterns: list[str],
            confidence: float = DEFAULT_CONFIDENCE) -> str:
    """The report's "Points" section (only with repeats): the points table with intervals and the
    runs' spread under each, then every flagged point with its reasons."""
    if not has_repeats(points):
        return ""
    import html as _html

    def e(text: Any) -> str:
        return _html.escape("" if text is None else str(text), quote=True)

    headers, rows = point_table(points, param_keys, patterns)
    columns = {h: c for c, h in shaping.key_columns(patterns)}
    conf = f"{100 * confidence:g} %"
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for p, row in zip(points, rows, strict=True):
        cells = []
        for h in headers:
            column = columns.get(h.removesuffix(" (measured)")) if h not in param_keys else None
            if column is not None:
                spread = spread_text(column, p.metrics.get(column))
                extra = f'<br><span class="spread">{e(spread)}</span>' if spread else ""
                cells.append(f'<td class="num">{e(row[h])}{extra}</td>')
            elif h == "flags":
                cells.append(f'<td class="reasons">{e(row[h])}</td>')
            else:
                cells.append(f"<td>{e(row[h])}</td>")
        cls = ' class="suspect"' if p.flags else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    counts = sorted({p.repeats for p in points})
    per = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    out = [
        f"<h2>Points: {len(points)}, {per} runs each</h2>",
        f"<p>Each cell: the estimate over the point's runs and its {conf} interval "
        "(latency, throughput and other per-run numbers: the mean over runs, bootstrap over runs; "
        "message loss: messages lost over messages sent by all runs, binomial, widened when runs differ "
        "more than binomial noise). Below it the runs' own range and spread. Failed and invalid runs "
        "are left out (the runs column says so). Methods: docs/statistics.md.</p>",
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>",
    ]
    flagged = [p for p in points if p.flags]
    if flagged:
        items = []
        for p in flagged:
            params = ", ".join(f"{k}={fmt.label(v)}" for k, v in p.params.items()) or "the only point"
            reasons = "".join(f"<li>{e(f.reason)}</li>" for f in p.flags)
            items.append(f"<li>{e(params)}<ul>{reasons}</ul></li>")
        out.append(f"<h2>Flagged points ({len(flagged)})</h2><p>Their repeats disagree: the interval "
                   "of the mean understates how different one run of this configuration can be. "
                   f"More repeats, or a look at each run, before trusting the number.</p><ul>{''.join(items)}</ul>")
    return "".join(out)
