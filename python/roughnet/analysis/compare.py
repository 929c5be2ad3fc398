"""Comparing two sets of runs point by point: B against A, per metric, with an interval and a verdict.

Owns what ``roughnet compare A B`` decides, and nothing of the terminal: choosing
the runs of each side (a stored sweep, optionally narrowed by ``KEY=VALUE``),
matching points across the sides by their parameters (values compared as parsed
quantities, so "1%" and "1 %" match; keys named in ``ignore`` left out, which lets two
protocols or two sweeps with different axes be compared), the direction of "better"
of each metric (``BETTER``), the change of B against A with its interval
(``roughnet.analysis.stats``: ratio of the means over runs with a bootstrap interval; a
difference in percentage points for proportions, Newcombe's interval), the verdict
at the stated confidence, whether a worsening goes beyond the user's threshold (a
regression, exit code 1 of the CLI), and the JSON document.  The sides may come from
two results folders written by different versions of roughnet and of the protocols:
only the stored parameters and metrics are read (their versions are reported).
The plot is ``report.compare_plot``; the command is ``cli.compare``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roughnet import __version__
from roughnet.analysis import stats
from roughnet.errors import ResultsError, RoughnetError, UnknownResults
from roughnet.report import fmt, points, shaping
from roughnet.results.schema import METRIC_BY_NAME

#: Direction of "better" per metric column; columns not named here get no verdict of better or
#: worse (only "higher" / "lower"), and never count as a regression.
BETTER: dict[str, str] = {
    **{m: "lower" for m in METRIC_BY_NAME if m.startswith("lat_")},
    **dict.fromkeys(("loss_ratio", "lost", "duplicates", "reordered", "link_drops", "link_drops_loss",
                     "link_drops_queue", "tcp_retrans_segs", "cpu_agents_s", "cpu_machine_util",
                     "sched_behind_max_us", "sched_late_fraction", "sched_own_late_fraction",
                     "sched_own_behind_max_us", "sched_held_fraction", "sched_held_s", "overhead_ratio",
                     "time_to_full_sync_s", "udp_rcvbuf_errors"), "lower"),
    **dict.fromkeys(("throughput_bps", "goodput_bps", "goodput_fraction", "bundles_from_to", "bundles_to_from",
                     "full_sync", "received", "bytes"), "higher"),
}  # fmt: skip

WORSE, BETTER_V, SAME, TOO_FEW = "worse", "better", "no detectable difference", "too few runs"
HIGHER, LOWER = "higher", "lower"
VERDICTS = (WORSE, BETTER_V, SAME, HIGHER, LOWER, TOO_FEW)


class CompareInputError(RoughnetError):
    """Bad input to a comparison (unknown sweep or metric, a selection that leaves nothing, no common point)."""

    exit_code = 2


# ------------------------------------------------------------------ sides and matching


@dataclass
class Side:
    """One side of a comparison: the runs of a stored sweep, optionally narrowed by params."""

    name: str  # "A" or "B"
    results: str  # the results folder
    sweep_id: str
    where: dict[str, str]
    runs: list[dict[str, Any]]

    def versions(self) -> dict[str, list[str]]:
        """Distinct ``versions`` values of the side's runs (roughnet, agent, kernel, ...)."""
        seen: dict[str, list[str]] = {}
        for r in self.runs:
            for k, v in (r.get("versions") or {}).items():
                vals = seen.setdefault(str(k), [])
                if str(v) not in vals:
                    vals.append(str(v))
        return seen

    def to_dict(self) -> dict[str, Any]:
        return {"results": self.results, "sweep_id": self.sweep_id, "where": self.where, "runs": len(self.runs),
                "versions": self.versions(), "protocols": sorted({str(r.get("protocol")) for r in self.runs})}


def _canon(value: Any) -> tuple[str, Any]:
    """A parameter value as a comparable token: its parsed quantity when it is one, else its label."""
    parsed = fmt.axis_value(value)
    if parsed is not None:
        return parsed[0], round(parsed[1], 9)
    return "text", fmt.label(value).strip()


def match_key(params: dict[str, Any] | None, ignore: tuple[str, ...] = ()) -> tuple[tuple[str, Any], ...]:
    """The identity of a point across sweeps: its params (parsed) without the ignored keys."""
    return tuple(sorted((str(k), _canon(v)) for k, v in (params or {}).items() if k not in ignore))


def parse_where(items: list[str], what: str) -> dict[str, str]:
    """``["protocol=mqtt", "loss=1%"]`` -> dict; a malformed item is a CompareInputError naming it."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CompareInputError(f"{what} {item!r}: expected KEY=VALUE (a swept key and one of its values)")
        out[key.strip()] = value.strip()
    return out


def select(side_name: str, sweep_id: str, runs: list[dict[str, Any]], where: dict[str, str]) -> list[dict[str, Any]]:
    """The runs whose params have every ``where`` value (compared as parsed quantities)."""
    if not where:
        return runs
    keys = {k for r in runs for k in (r.get("params") or {})}
    for k in where:
        if k not in keys:
            raise CompareInputError(f"side {side_name} (sweep {sweep_id}): no run has the parameter {k!r}; "
                                    f"expected one of {', '.join(sorted(keys)) or 'none (the sweep has no axes)'}")
    chosen = [r for r in runs if all(k in (r.get("params") or {}) and _canon(r["params"][k]) == _canon(v)
                                     for k, v in where.items())]
    if not chosen:
        wanted = ", ".join(f"{k}={v}" for k, v in where.items())
        values = {k: sorted({fmt.label((r.get("params") or {}).get(k)) for r in runs}) for k in where}
        raise CompareInputError(f"side {side_name} (sweep {sweep_id}): no run has {wanted}; the values stored are "
                                + "; ".join(f"{k}: {', '.join(v)}" for k, v in values.items()))
    return chosen


def metric_columns(names: list[str], a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]]) -> list[str]:
    """Columns of the ``--metric`` names (report names such as ``latency_p99`` or column names), or by
    default the key columns of the patterns both sides ran."""
    if names:
        out = []
        for name in names:
            col = fmt.metric_column(name)
            if col is None:
                known = sorted(set(fmt.REPORT_METRIC_COLUMNS) | set(METRIC_BY_NAME))
                raise CompareInputError(f"--metric {name!r} is not a metric; expected one of {', '.join(known)}")
            if col not in out:
                out.append(col)
        return out
    pa = list(dict.fromkeys(r.get("pattern") for r in a_runs if r.get("pattern")))
    pb = {r.get("pattern") for r in b_runs}
    common = [p for p in pa if p in pb] or pa
    return [c for c, _ in shaping.key_columns(common)]


# ------------------------------------------------------------------ one metric of one point


@dataclass
class MetricComparison:
    column: str
    better: str | None  # "lower", "higher" or None (no direction)
    kind: str  # "ratio" (B/A), "difference" (B - A, the metric's unit), "points" (B - A of a proportion)
    a: stats.Estimate | None
    b: stats.Estimate | None
    change: stats.Interval | None  # None: too few runs, or no value on a side
    verdict: str
    regression: bool = False
    beyond: str = ""  # the threshold the regression went past, as text ("beyond 10 %"; "" for a threshold of 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.column, "better": self.better, "kind": self.kind,
            "a": None if self.a is None else self.a.to_dict(), "b": None if self.b is None else self.b.to_dict(),
            "value": None if self.change is None else self.change.value,
            "lo": None if self.change is None else self.change.lo,
            "hi": None if self.change is None else self.change.hi,
            "method": None if self.change is None else self.change.method,
            "verdict": self.verdict, "regression": self.regression, "beyond": self.beyond,
        }  # fmt: skip


def _values(runs: list[dict[str, Any]], column: str) -> list[float]:
    out = []
    for r in runs:
        v = (r.get("metrics") or {}).get(column)
        if v is None or isinstance(v, str):
            continue
        v = float(v)
        if math.isfinite(v):
            out.append(v)
    return out


def _counts(runs: list[dict[str, Any]], column: str) -> tuple[list[tuple[float, float]], bool] | None:
    """(successes, trials) per run for proportions: loss (messages) or a yes/no metric (runs); and clustered."""
    if column == "loss_ratio":
        with_value = [r for r in runs if (r.get("metrics") or {}).get(column) is not None]
        counts = [points.loss_counts(r) for r in with_value]
        if with_value and all(c is not None for c in counts):
            return counts, True  # type: ignore[return-value]
        return None
    meta = METRIC_BY_NAME.get(column)
    if meta is not None and meta.sql_type == "BOOLEAN":
        vals = _values(runs, column)
        return ([(1.0 if v else 0.0, 1.0) for v in vals], False) if vals else None
    return None


def _verdict(better: str | None, lo: float, hi: float, neutral: float) -> str:
    """Worse / better / no detectable difference from where the interval lies against ``neutral``."""
    if lo > neutral:
        return HIGHER if better is None else (WORSE if better == "lower" else BETTER_V)
    if hi < neutral:
        return LOWER if better is None else (BETTER_V if better == "lower" else WORSE)
    return SAME


def compare_metric(a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]], column: str, confidence: float,
                   fail_pct: float, fail_pp: float, seed_key: Any) -> MetricComparison:
    """B against A for one metric of one point, with the verdict and whether it is a regression.

    Regression: the verdict is "worse" and the whole interval lies beyond the threshold
    (we are ``confidence`` sure B is worse by more than it): for ratios ``fail_pct``
    percent of A, for proportions ``fail_pp`` percentage points, for differences
    ``fail_pct`` percent of A's mean (any worsening when A's mean is 0)."""
    better = BETTER.get(column)
    ea = points.estimate(a_runs, column, confidence, (seed_key, "A"))
    eb = points.estimate(b_runs, column, confidence, (seed_key, "B"))
    ca, cb = _counts(a_runs, column), _counts(b_runs, column)
    if ea is None or eb is None:
        return MetricComparison(column, better, "ratio", ea, eb, None, TOO_FEW)
    if ca is not None and cb is not None:
        change = stats.proportion_difference(ca[0], cb[0], confidence, clustered=ca[1] and cb[1])
        verdict = _verdict(better, change.lo, change.hi, 0.0)
        limit = fail_pp / 100.0
        regression = verdict == WORSE and (change.lo > limit if better == "lower" else change.hi < -limit)
        beyond = f"beyond {fail_pp:g} percentage points" if regression and fail_pp else ""
        return MetricComparison(column, better, "points", ea, eb, change, verdict, regression, beyond)
    va, vb = _values(a_runs, column), _values(b_runs, column)
    rng = stats.rng_for("compare", seed_key, column)
    if len(va) < 2 or len(vb) < 2:
        return MetricComparison(column, better, "ratio", ea, eb, None, TOO_FEW)
    if min(va) > 0 and min(vb) >= 0:
        change = stats.ratio_interval(va, vb, confidence, rng)
        verdict = _verdict(better, change.lo, change.hi, 1.0)
        f = fail_pct / 100.0
        regression = verdict == WORSE and (change.lo > 1.0 + f if better == "lower" else change.hi < 1.0 - f)
        beyond = f"beyond {fail_pct:g} %" if regression and fail_pct else ""
        return MetricComparison(column, better, "ratio", ea, eb, change, verdict, regression, beyond)
    change = stats.difference_interval(va, vb, confidence, rng)
    verdict = _verdict(better, change.lo, change.hi, 0.0)
    limit = abs(ea.value) * fail_pct / 100.0
    regression = verdict == WORSE and (change.lo > limit if better == "lower" else change.hi < -limit)
    beyond = f"beyond {fail_pct:g} % of A" if regression and fail_pct else ""
    return MetricComparison(column, better, "difference", ea, eb, change, verdict, regression, beyond)


# ------------------------------------------------------------------ the whole comparison


@dataclass
class PointComparison:
    params: dict[str, Any]  # A's params without the ignored keys (as written in A)
    a_params: dict[str, Any]
    b_params: dict[str, Any]
    a_runs: int
    b_runs: int
    metrics: list[MetricComparison] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "a_params": self.a_params, "b_params": self.b_params,
                "a_runs": self.a_runs, "b_runs": self.b_runs,
                "metrics": {m.column: m.to_dict() for m in self.metrics}}  # fmt: skip


@dataclass
class Comparison:
    a: Side
    b: Side
    columns: list[str]
    confidence: float
    fail_pct: float
    fail_pp: float
    ignore: tuple[str, ...]
    points: list[PointComparison]
    only_a: list[dict[str, Any]]
    only_b: list[dict[str, Any]]

    def regressions(self) -> list[tuple[PointComparison, MetricComparison]]:
        return [(p, m) for p in self.points for m in p.metrics if m.regression]

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for p in self.points:
            for m in p.metrics:
                out[m.verdict] += 1
        return {k: v for k, v in out.items() if v} | {"regressions": len(self.regressions())}

    @property
    def exit_code(self) -> int:
        """0: no regression beyond the thresholds; 1: at least one."""
        return 1 if self.regressions() else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "roughnet": __version__,
            "confidence": self.confidence,
            "thresholds": {"ratio_percent": self.fail_pct, "proportion_points": self.fail_pp},
            "a": self.a.to_dict(), "b": self.b.to_dict(),
            "ignore": list(self.ignore),
            "metrics": [{"metric": c, "better": BETTER.get(c)} for c in self.columns],
            "points": [p.to_dict() for p in self.points],
            "only_in_a": self.only_a, "only_in_b": self.only_b,
            "summary": self.counts(),
            "exit_code": self.exit_code,
        }  # fmt: skip


def compare(a: Side, b: Side, columns: list[str], confidence: float = 0.95, fail_pct: float = 0.0,
            fail_pp: float = 0.0, ignore: tuple[str, ...] = ()) -> Comparison:
    """Every point both sides have (matched by params without ``ignore``), each metric of ``columns``."""
    if not 0.5 <= confidence < 1.0:
        raise CompareInputError(f"--confidence {confidence}: expected a number from 0.5 to below 1, e.g. 0.95")
    if fail_pct < 0 or fail_pp < 0:
        raise CompareInputError(f"thresholds {fail_pct:g} % / {fail_pp:g} points: expected 0 or more")
    groups: dict[str, dict[tuple[Any, ...], list[dict[str, Any]]]] = {"A": {}, "B": {}}
    first: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {"A": {}, "B": {}}
    for side in (a, b):
        for r in side.runs:
            if points.usable(r) is not None:
                continue
            key = match_key(r.get("params"), ignore)
            groups[side.name].setdefault(key, []).append(r)
            first[side.name].setdefault(key, dict(r.get("params") or {}))
    for side in (a, b):
        if not groups[side.name]:
            raise CompareInputError(f"side {side.name} (sweep {side.sweep_id}): no run that is ok and not invalid "
                                    f"among its {len(side.runs)} stored run(s); nothing to compare")
    common = [k for k in groups["A"] if k in groups["B"]]
    if not common:
        ka = sorted({k for p in first["A"].values() for k in p if k not in ignore})
        kb = sorted({k for p in first["B"].values() for k in p if k not in ignore})
        raise CompareInputError(
            f"no point of A (sweep {a.sweep_id}) has the parameters of a point of B (sweep {b.sweep_id}); "
            f"A's keys: {', '.join(ka) or 'none'}, B's: {', '.join(kb) or 'none'}; expected common values, "
            "or --ignore KEY for keys that differ on purpose, --where-a/--where-b to pick runs")
    out = []
    for key in common:
        pa, pb = first["A"][key], first["B"][key]
        pc = PointComparison({k: v for k, v in pa.items() if k not in ignore}, pa, pb,
                             len(groups["A"][key]), len(groups["B"][key]))
        for column in columns:
            pc.metrics.append(compare_metric(groups["A"][key], groups["B"][key], column, confidence, fail_pct,
                                             fail_pp, key))
        out.append(pc)
    only_a = [first["A"][k] for k in groups["A"] if k not in groups["B"]]
    only_b = [first["B"][k] for k in groups["B"] if k not in groups["A"]]
    return Comparison(a, b, columns, confidence, fail_pct, fail_pp, ignore, out, only_a, only_b)


# ------------------------------------------------------------------ text


def change_text(m: MetricComparison) -> str:
    """"+31 % [+18, +45]" (ratio), "+1.20 pp [+0.40, +2.00]" (proportion), "+12.3 ms [+4.1, +20.0]" (difference)."""
    c = m.change
    if c is None:
        if m.a is not None and m.b is not None and m.a.value > 0:
            return f"{_signed(100 * (m.b.value / m.a.value - 1))} % (no interval)"
        return "-"
    if m.kind == "ratio":
        return f"{_signed(100 * (c.value - 1))} % [{_signed(100 * (c.lo - 1))}, {_signed(100 * (c.hi - 1))}]"
    if m.kind == "points":
        return f"{_signed(100 * c.value)} pp [{_signed(100 * c.lo)}, {_signed(100 * c.hi)}]"
    s = fmt.scale_for(m.column, [c.value, c.lo, c.hi])
    unit = f" {s.unit}" if s.unit else ""
    return f"{_signed(c.value * s.factor)}{unit} [{_signed(c.lo * s.factor)}, {_signed(c.hi * s.factor)}]"


def _signed(v: float) -> str:
    text = fmt.number(abs(v))
    return ("+" if v > 0 else "-" if v < 0 else "") + text


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={fmt.label(v)}" for k, v in params.items()) or "(no parameters)"


def metric_title(column: str, runs: list[dict[str, Any]]) -> str:
    patterns = list(dict.fromkeys(r.get("pattern") for r in runs if r.get("pattern")))
    return points.title_of(column, patterns)


# ---- one side read from a results folder, and a metric's title: for the CLI and sidebyside ----

def open_results(root: Path):
    """A read-only store of ``root``; an older format is upgraded once first (a backup is kept)."""
    from roughnet.results import Store
    from roughnet.results.store import READER_WAIT_S, NeedsUpgrade

    if not (root / "results.duckdb").exists():
        raise UnknownResults(f"no results database at {root / 'results.duckdb'}; expected a folder written by "
                           "`roughnet run` (--results / --results-b or $ROUGHNET_RESULTS)")
    try:
        return Store(root, create=False, read_only=True, lock_wait_s=READER_WAIT_S)
    except NeedsUpgrade:
        Store(root, create=False, lock_wait_s=READER_WAIT_S).close()
        return Store(root, create=False, read_only=True, lock_wait_s=READER_WAIT_S)


def read_side(store, name: str, ref: str, where: list[str]):
    try:
        sweep_id = store.resolve_sweep(ref)
    except ResultsError as e:
        raise ResultsError(f"side {name}: {e}") from None
    sel = parse_where(where, f"--where-{name.lower()}")
    runs = select(name, sweep_id, store.runs(sweep_id), sel)
    return Side(name, str(store.root), sweep_id, sel, runs)


def column_title(result, column: str) -> str:
    return metric_title(column, result.a.runs + result.b.runs)
