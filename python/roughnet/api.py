"""roughnet's results from Python: a results folder as pandas DataFrames, for notebooks (docs/python-api.md).

    import roughnet.api as rn

    res = rn.open("roughnet-results")          # a folder `roughnet run --results` wrote
    res.sweeps()                               # one row per stored sweep
    runs = res.runs("v2v-loss")                # one row per run: parameters (units parsed), metrics, verdict
    res.points("v2v-loss", "lat_p99_us")       # per parameter point: the estimate over repeats and its interval
    res.latency("v2v-loss")                    # latency percentiles per point, repeats' histograms merged
    res.series("broker-outage")                # timeline runs: per flow and interval
    res.plot("lat_p99_us", x="loss", lines="protocol", sweep="v2v-loss")

A sweep is named by its id, a unique prefix of it or its scenario's name (the latest sweep of that name);
left out, the latest sweep. The folder is opened read-only (a running sweep may write meanwhile) and its
format version checked. Parameters are columns of their own: a parameter whose every value is a quantity of
one kind ("10 KB", "5 ms", "25%", "10 Mbit/s") holds numbers in base units (bytes, ns, a fraction, bit/s;
``DataFrame.attrs["units"]`` names them) and the values as written are in ``<name>_label``; any other
parameter keeps its values. Metric columns have the store's names and units (docs/results-format.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ResultsError
from .report import fmt, points
from .results import schema
from .results.store import NeedsUpgrade, Store

if TYPE_CHECKING:  # pandas is imported when a DataFrame is asked for
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["Results", "open", "PERCENTILES"]

#: The percentiles ``latency`` reports (in percent).
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99, 100.0)
#: The unit of a parsed parameter, by the kind report.fmt.axis_value gives it.
PARAM_UNITS = {"fraction": "fraction", "size": "bytes", "rate": "bit/s", "duration": "ns", "msg_rate": "msg/s",
               "packets": "packets", "number": ""}
#: Run columns a user wants first, in this order (the metrics follow).
RUN_FIRST = ("sweep_id", "run_id", "run_index", "repeat", "seed", "status", "validity", "failure_reason",
             "protocol", "pattern", "backend", "engine", "started_at", "duration_s")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - pandas is a dependency; a broken install says so
        raise ResultsError("roughnet.api needs pandas: pip install pandas (make setup installs it)") from None
    return pandas


def open(folder: str | Path) -> Results:  # noqa: A001 - the API's entry point, as in ``rn.open(...)``
    """The results folder ``folder`` (read-only). ResultsError when it holds no roughnet database."""
    return Results(folder)


class Results:
    """A results folder, read-only: sweeps, runs, distributions and timelines as DataFrames."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        try:
            self.store = Store(self.folder, create=False, read_only=True)
        except NeedsUpgrade:  # an older format: upgraded once (with a backup), as any roughnet command does
            Store(self.folder, create=False).close()
            self.store = Store(self.folder, create=False, read_only=True)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<roughnet results {self.folder}: {len(self.store.sweeps())} sweep(s)>"

    # ------------------------------------------------------------------ sweeps and runs

    def sweep_id(self, sweep: str | None = None) -> str:
        """The sweep id ``sweep`` names (id, unique prefix or scenario name), or the latest sweep's."""
        if sweep is not None:
            return self.store.resolve_sweep(sweep)
        rows = self.store.sweeps()
        if not rows:
            raise ResultsError(f"{self.folder} holds no sweeps yet")
        return rows[-1]["sweep_id"]

    def sweeps(self) -> pd.DataFrame:
        """One row per stored sweep, oldest first: sweep_id, scenario, axes (the swept names), planned and
        stored run counts, created_at and updated_at (UTC timestamps)."""
        pd = _pandas()
        rows = self.store.sweeps()
        df = pd.DataFrame([{
            "sweep_id": r["sweep_id"], "scenario": r["scenario"], "description": r["description"],
            "axes": list(r["axes"]), "run_count": r["run_count"], "runs_stored": r["runs_stored"],
            "runs_ok": r["runs_ok"], "runs_failed": r["runs_failed"], "source": r["source"],
            "created_at": r["created_at"], "updated_at": r["updated_at"],
        } for r in rows], columns=["sweep_id", "scenario", "description", "axes", "run_count", "runs_stored", "runs_ok",
                                   "runs_failed", "source", "created_at", "updated_at"])  # fmt: skip
        for col in ("created_at", "updated_at"):
            df[col] = pd.to_datetime(df[col], utc=True)
        return df

    def runs(self, sweep: str | None = None) -> pd.DataFrame:
        """One row per run of a sweep, in plan order: the run's identity and verdict (RUN_FIRST), one column
        per swept parameter (module docs: units parsed), then every metric column. ``validity_reasons`` is a
        list per run."""
        pd = _pandas()
        sweep_id = self.sweep_id(sweep)
        names = self.store.param_names(sweep_id)
        con = self.store.con
        df = con.execute("SELECT * FROM runs WHERE sweep_id = ? ORDER BY run_index, repeat, run_id",
                         [sweep_id]).df()
        params = [json.loads(p) if p else {} for p in df["params"]] if len(df) else []
        cols: dict[str, Any] = {name: [p.get(name) for p in params] for name in names}
        df["validity_reasons"] = [json.loads(v) if isinstance(v, str) else (v or []) for v in df["validity_reasons"]]
        first = [c for c in RUN_FIRST if c in df.columns and c not in cols]  # a swept "protocol": the parameter's
        metrics = [m for m in schema.METRIC_NAMES if m in df.columns]
        rest = [c for c in df.columns if c not in first and c not in metrics and c not in cols and c != "params"]
        out = pd.concat([df[first], pd.DataFrame(cols, index=df.index), df[metrics], df[rest]], axis=1)
        units = _parse_columns(out, names)
        units.update({m.name: m.unit for m in schema.METRICS if m.name in out.columns})
        out.attrs["units"] = units
        out.attrs["params"] = names
        out.attrs["sweep_id"] = sweep_id
        return out

    def points(self, sweep: str | None = None, metric: str = "lat_p99_us", confidence: float = 0.95
               ) -> pd.DataFrame:
        """Per parameter point (first appearance order), ``metric`` over the point's usable runs (ok and not
        invalid) as the report estimates it: ``value`` (the mean over repeats, or the pooled proportion for
        loss_ratio), ``lo``/``hi`` its interval at ``confidence`` (None with one run), ``n`` runs, ``min``,
        ``max``, ``method``, and the runs left out with why (``excluded``)."""
        pd = _pandas()
        if metric not in schema.METRIC_BY_NAME:
            raise ResultsError(f"unknown metric {metric!r}; expected one of {', '.join(schema.METRIC_NAMES)}")
        sweep_id = self.sweep_id(sweep)
        names = self.store.param_names(sweep_id)
        rows = []
        for p in points.group(self.store.runs(sweep_id)):
            est = points.estimate(p.runs, metric, confidence, (sweep_id, points.point_key(p.params)))
            row = {n: p.params.get(n) for n in names}
            row.update({"metric": metric, "n": est.n if est else 0, "value": est.value if est else None,
                        "lo": est.lo if est else None, "hi": est.hi if est else None,
                        "min": est.vmin if est else None, "max": est.vmax if est else None,
                        "method": est.method if est else None, "excluded": list(p.excluded)})  # fmt: skip
            rows.append(row)
        df = pd.DataFrame(rows)
        units = _parse_columns(df, names)
        units["value"] = schema.METRIC_BY_NAME[metric].unit
        df.attrs.update({"units": units, "params": names, "sweep_id": sweep_id, "confidence": confidence})
        return df

    def latency(self, sweep: str | None = None, kind: str | None = None,
                percentiles: tuple[float, ...] = PERCENTILES) -> pd.DataFrame:
        """Per parameter point, the percentiles of ``kind``'s distribution in microseconds (schema.HISTOGRAM_KINDS:
        ``latency_intended``, one-way from each message's scheduled send time, the lat_* metrics; ``latency_actual``
        from its actual send; ``rtt_intended``, ``rtt_actual`` for ping; by default the one-way kind if the sweep
        has it, else the round trip), from every usable run's histograms merged (every receiver of every repeat:
        HdrHistogram adds exactly), with the count of values."""
        from hdrh.histogram import HdrHistogram

        pd = _pandas()
        if kind is not None and kind not in schema.HISTOGRAM_KINDS:
            raise ResultsError(f"unknown histogram kind {kind!r}; expected one of {', '.join(schema.HISTOGRAM_KINDS)}")
        sweep_id = self.sweep_id(sweep)
        names = self.store.param_names(sweep_id)
        stored = self.store.histograms(sweep_id)
        if kind is None:
            present = {h["kind"] for h in stored}
            kind = "rtt_intended" if "latency_intended" not in present and "rtt_intended" in present \
                else "latency_intended"
        by_run: dict[str, list[str]] = {}
        for h in stored:
            if h["kind"] == kind:
                by_run.setdefault(h["run_id"], []).append(h["hdr"])
        rows = []
        for p in points.group(self.store.runs(sweep_id)):
            merged = None
            for r in p.runs:
                for hdr in by_run.get(r["run_id"], []):
                    h = HdrHistogram.decode(hdr)
                    if merged is None:
                        merged = h
                    else:
                        merged.add(h)
            row = {n: p.params.get(n) for n in names}
            count = merged.get_total_count() if merged is not None else 0
            row.update({"runs": len(p.runs), "count": count})
            for q in percentiles:
                row[f"p{_pname(q)}_us"] = merged.get_value_at_percentile(q) / 1e3 if count else None
            rows.append(row)
        df = pd.DataFrame(rows)
        units = _parse_columns(df, names)
        units.update({f"p{_pname(q)}_us": "us" for q in percentiles})
        df.attrs.update({"units": units, "params": names, "sweep_id": sweep_id, "kind": kind})
        return df

    # ------------------------------------------------------------------ timelines, fleets, processes

    def series(self, sweep: str | None = None, run: str | None = None) -> pd.DataFrame:
        """Timeline runs: one row per flow and interval (``t_s`` from t0), as the record's ``series``."""
        return self._table("series", sweep, run)

    def flows(self, sweep: str | None = None, run: str | None = None) -> pd.DataFrame:
        """Timeline runs: one row per flow (workload, sender, receiver) with its own metrics."""
        return self._table("flows", sweep, run)

    def distance(self, sweep: str | None = None, run: str | None = None) -> pd.DataFrame:
        """Fleets: delivery and latency per flow, send interval and distance bin."""
        return self._table("distance", sweep, run)

    def processes(self, sweep: str | None = None, run: str | None = None) -> pd.DataFrame:
        """The runs' own programs ([[process]]): one row per process."""
        return self._table("processes", sweep, run)

    def events(self, sweep: str | None = None, run: str | None = None) -> pd.DataFrame:
        """Timeline events (faults and their ends) with when they took effect."""
        return self._table("events", sweep, run)

    def _table(self, table: str, sweep: str | None, run: str | None) -> pd.DataFrame:
        pd = _pandas()
        sweep_id = self.sweep_id(sweep)
        rows = getattr(self.store, table)(sweep_id, run)
        flat = []
        for row in rows:
            row = dict(row)
            metrics = row.pop("metrics", None)
            if isinstance(metrics, dict):
                row.update(metrics)
            flat.append(row)
        df = pd.DataFrame(flat)
        df.attrs.update({"sweep_id": sweep_id, "table": table})
        return df

    def sql(self, query: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Any read-only SQL over the store's tables (docs/results-format.md) as a DataFrame."""
        _pandas()
        return self.store.con.execute(query, params or []).df()

    # ------------------------------------------------------------------ plots

    def plot(self, metric: str, x: str, lines: str | None = None, sweep: str | None = None,
             confidence: float = 0.95, ax: Any = None) -> Figure:
        """``metric`` against the swept parameter ``x``, one line per value of ``lines`` (another swept
        parameter) if given, each point the estimate over its repeats with its interval as error bars (the
        report's figures); a log y axis for latencies. Returns the matplotlib Figure."""
        import matplotlib.pyplot as plt

        df = self.points(sweep, metric, confidence)
        names = df.attrs["params"]
        for key, what in ((x, "x"), (lines, "lines")):
            if key is not None and key not in names:
                raise ResultsError(f"{what}={key!r} is not a swept parameter of {df.attrs['sweep_id']}; "
                                   f"expected one of {', '.join(names) or 'none (the sweep has one point)'}")
        if ax is None:
            fig, ax = plt.subplots(figsize=(7, 4.5))
        else:
            fig = ax.figure
        groups = [(None, df)] if lines is None else list(df.groupby(lines, sort=False))
        numeric = df.attrs["units"].get(x) is not None and f"{x}_label" in df.columns
        for key, g in groups:
            g = g.sort_values(x) if numeric else g
            xs = list(g[x]) if numeric else [str(v) for v in g[x]]
            vals = [v if v is not None and not (isinstance(v, float) and math.isnan(v)) else math.nan
                    for v in g["value"]]
            lo = [v - l if l is not None and not math.isnan(l) else 0.0 for v, l in zip(vals, g["lo"], strict=True)]
            hi = [h - v if h is not None and not math.isnan(h) else 0.0 for v, h in zip(vals, g["hi"], strict=True)]
            label = None if lines is None else f"{lines}={g[f'{lines}_label'].iloc[0] if f'{lines}_label' in g else key}"
            ax.errorbar(xs, vals, yerr=[lo, hi], marker="o", capsize=3, label=label)
        unit = schema.METRIC_BY_NAME[metric].unit
        ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
        ax.set_xlabel(f"{x} ({df.attrs['units'][x]})" if numeric and df.attrs["units"].get(x) else x)
        if metric.startswith("lat_") or metric.startswith("rtt_"):
            ax.set_yscale("log")
        if lines is not None:
            ax.legend()
        ax.set_title(f"{df.attrs['sweep_id']}: {metric}")
        ax.grid(True, alpha=0.3)
        return fig


def _parsed(values: list[Any]) -> tuple[str, list[float | None]] | None:
    """(kind, numbers) when every non-null value is a quantity of one kind (report.fmt.axis_value), else None."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    parsed = [fmt.axis_value(v) for v in present]
    if any(p is None for p in parsed) or len({p[0] for p in parsed}) != 1:  # type: ignore[index]
        return None
    kind = parsed[0][0]  # type: ignore[index]
    out: list[float | None] = []
    for v in values:
        p = fmt.axis_value(v) if v is not None else None
        out.append(p[1] if p is not None else None)
    return kind, out


def _parse_columns(df: Any, names: list[str]) -> dict[str, str]:
    """Replace each parameter column of ``df`` whose values are quantities of one kind by numbers (the values
    as written go to ``<name>_label``); the units of those replaced."""
    units: dict[str, str] = {}
    for name in names:
        if name not in df.columns:
            continue
        raw = list(df[name])
        parsed = _parsed(raw)
        if parsed is not None:
            kind, numbers = parsed
            df.insert(list(df.columns).index(name) + 1, f"{name}_label",
                      [fmt.label(v) if v is not None else None for v in raw])
            df[name] = numbers
            units[name] = PARAM_UNITS.get(kind, "")
    return units


def _pname(q: float) -> str:
    """50.0 -> "50", 99.9 -> "99_9": a percentile in a column name."""
    return f"{q:g}".replace(".", "_")
