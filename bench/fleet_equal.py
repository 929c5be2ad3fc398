#!/usr/bin/env python3
"""Same results before and after a change to what runs after the traffic (issue 27): replays a stored run.

A run's traffic cannot be repeated exactly (real latencies), so this takes one run stored by the code *before*
the change (its folder: record.json, the agents' trace files, distance-<workload>.parquet; and its results.duckdb)
and redoes with the code *now* importable (PYTHONPATH) what follows the traffic:

- ``analysis``: the time series and recovery rows (``run.timeline.analyse``) and the distance rows and
  per-message parquet file (``mobility.distance.record_distances``) from the run's own trace files, compared
  with the record.json's lists (exactly: the same floats, the same order) and with the stored parquet file;
- ``report``: the report made again from the old code's database (``report.build_report``) into a temporary
  folder, its PNGs compared pixel by pixel with those the old code wrote (``<results>/reports/<sweep>/``) and its
  index.html with the embedded images and the time it was made left out;
- ``store``: the record.json stored again (``Store.record_run``) into a fresh database, every table's rows of
  that run compared with those the old code stored (the runs row without its ``stored_at``).

    PYTHONPATH=python .venv/bin/python bench/fleet_equal.py RESULTS_DIR SCENARIO.toml [--what analysis,store,report]

With PYTHONPATH at a checkout of the old code it times the old code the same way (and finds it equal to
itself).

Exit 0 when everything is equal, 1 with the differences listed.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _same(a: Any, b: Any, rel: float = 1e-12) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or abs(a - b) <= rel * max(abs(a), abs(b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b) and type(a) is type(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, rel) for x, y in zip(a, b))
    return a == b


def compare_lists(name: str, old: list, new: list, problems: list[str]) -> None:
    if len(old) != len(new):
        problems.append(f"{name}: {len(old)} rows before, {len(new)} now")
    bad = [i for i, (a, b) in enumerate(zip(old, new)) if not _same(a, b)]
    if bad:
        i = bad[0]
        a, b = old[i], new[i]
        if isinstance(a, dict) and isinstance(b, dict):
            cells = [(k, a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if not _same(a.get(k), b.get(k))]
        else:
            cells = [(n, x, y) for n, (x, y) in enumerate(zip(a, b)) if not _same(x, y)]
        what = "; ".join(f"{k}: {str(x)[:80]} before, {str(y)[:80]} now" for k, x, y in cells[:5])
        problems.append(f"{name}: {len(bad)} rows differ, first #{i}: {what}")
    print(f"{name}: {len(new)} rows, {len(bad)} differ", flush=True)


def replay_timeline(run_dir: Path, record: dict[str, Any], run, traces_dir: Path):
    """The ``run.timeline.Timeline`` the runner had, as far as the analysis reads it (flows, their receivers in
    the record's order, trace paths, t0 and end)."""
    workloads = {w.name: w for w in run.all_workloads}
    order: dict[tuple[str, str], list[str]] = {}
    for r in record["flows"]:
        order.setdefault((r["workload"], r["sender"]), []).append(r["receiver"])
    flows = []
    for (wname, sender), receivers in order.items():
        w = workloads[wname]
        tx = {"trace_path": str(traces_dir / f"trace-{wname}-{sender}.tx")}
        rx = [SimpleNamespace(spec=SimpleNamespace(
            host=h, config={"trace_path": str(traces_dir / f"trace-{wname}-{sender}-{h}.rx")})) for h in receivers]
        flows.append(SimpleNamespace(name=wname, sender=sender, workload=w, traced=w.pattern == "stream",
                                     specs=[SimpleNamespace(config=tx)], receivers=rx))
    series = record.get("series") or []
    last = max(series, key=lambda r: r["t_s"]) if series else None
    end_ns = record["t0_ns"] + (round((last["t_s"] + last["interval_s"]) * 1e9) if last else 0)
    return SimpleNamespace(t0_ns=record["t0_ns"], end_ns=end_ns, flows=flows, events=record.get("events") or [])


def check_analysis(run_dir: Path, record: dict[str, Any], run, problems: list[str]) -> None:
    import pyarrow.parquet as pq

    from roughnet.mobility.distance import record_distances
    from roughnet.run.timeline import analyse

    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp)
        for f in run_dir.glob("trace-*"):  # the parquet file is written beside the traces: a folder of links
            (traces / f.name).symlink_to(f)
        tl = replay_timeline(run_dir, record, run, traces)
        t = time.monotonic()
        import inspect

        # (the code before 2011da1 neither takes nor fills ``prepared``: then each reads the traces itself)
        shares = "prepared" in inspect.signature(analyse).parameters
        prepared: dict = {}
        series, recovery = analyse(run, tl, run.series_interval_ns, *([prepared] if shares else []))
        print(f"analyse: {time.monotonic() - t:.2f} s", flush=True)
        compare_lists("series", record.get("series") or [], series, problems)
        compare_lists("recovery", record.get("recovery") or [], recovery, problems)
        new: dict[str, Any] = {"link_counters": json.loads(json.dumps(record.get("link_counters") or {}))}
        for c in new["link_counters"].values():
            if isinstance(c, dict):
                c.pop("t0_after_ready_s", None)
        counters = {int(k): v for k, v in (record.get("link_counters") or {}).items()}
        t = time.monotonic()
        record_distances(new, run, tl, counters, *([prepared] if shares else []))
        print(f"record_distances: {time.monotonic() - t:.2f} s", flush=True)
        compare_lists("distance", record.get("distance") or [], new.get("distance") or [], problems)
        if not _same(record.get("link_counters"), new["link_counters"]):
            problems.append("link_counters (t0_after_ready_s) differ")
        for p in sorted(run_dir.glob("distance-*.parquet")):
            old_t, new_t = pq.read_table(p), pq.read_table(traces / p.name)
            same = old_t.schema == new_t.schema and old_t.equals(new_t)
            print(f"{p.name}: {new_t.num_rows} rows, {'equal' if same else 'DIFFERENT'}", flush=True)
            if not same:
                problems.append(f"{p.name} differs: {old_t.schema} / {new_t.schema}")


def _rows(con, table: str, sweep_id: str, run_id: str, drop: set[str]) -> tuple[list[str], list[tuple]]:
    cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in drop]
    sel = ", ".join(f'"{c}"' for c in cols)
    rows = con.execute(f"SELECT {sel} FROM {table} WHERE sweep_id = ? AND run_id = ?", [sweep_id, run_id]).fetchall()
    return cols, sorted(rows, key=lambda r: tuple((x is None, str(x)) for x in r))


def check_store(results: Path, record: dict[str, Any], problems: list[str]) -> None:
    import duckdb

    from roughnet.results import Store

    sweep_id, run_id = record["sweep_id"], record["run_id"]
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        src = results / "runs" / sweep_id / run_id / "record.json"
        dst = fresh / "runs" / sweep_id / run_id
        dst.mkdir(parents=True)
        shutil.copy(src, dst / "record.json")
        with Store(fresh) as store:
            t = time.monotonic()
            store.import_records(dst / "record.json")
            print(f"import_records: {time.monotonic() - t:.2f} s", flush=True)
        old = duckdb.connect(str(results / "results.duckdb"), read_only=True)
        new = duckdb.connect(str(fresh / "results.duckdb"), read_only=True)
        tables = [r[0] for r in old.execute("SELECT table_name FROM information_schema.tables").fetchall()
                  if r[0] not in ("meta", "sweeps")]  # fmt: skip
        for table in sorted(tables):
            cols = {r[0] for r in old.execute(f"DESCRIBE {table}").fetchall()}
            if "run_id" not in cols:
                continue
            oc, orows = _rows(old, table, sweep_id, run_id, {"recorded_at"})
            nc, nrows = _rows(new, table, sweep_id, run_id, {"recorded_at"})
            if oc != nc:
                problems.append(f"table {table}: columns {oc} before, {nc} now")
                continue
            compare_lists(f"table {table}", orows, nrows, problems)
        old.close()
        new.close()


def _pixels(path: Path):
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGBA"), dtype=np.int16)


def check_report(results: Path, record: dict[str, Any], problems: list[str]) -> None:
    import re

    from roughnet.report import build_report
    from roughnet.results import Store

    sweep_id = record["sweep_id"]
    old_dir = results / "reports" / sweep_id
    with tempfile.TemporaryDirectory() as tmp, Store(results, read_only=True) as store:
        t = time.monotonic()
        page = build_report(store, sweep_id, out_dir=Path(tmp))
        print(f"build_report: {time.monotonic() - t:.2f} s", flush=True)
        olds = sorted(p.name for p in old_dir.glob("*.png"))
        news = sorted(p.name for p in Path(tmp).glob("*.png"))
        if olds != news:
            problems.append(f"report PNGs {olds} before, {news} now")
        for name in sorted(set(olds) & set(news)):
            a, b = _pixels(old_dir / name), _pixels(Path(tmp) / name)
            if a.shape != b.shape:
                problems.append(f"{name}: {a.shape} before, {b.shape} now")
                continue
            diff = np.abs(a - b).max(axis=-1) if a.size else a
            n = int((diff > 0).sum())
            big = int((diff > 64).sum())
            print(f"{name}: {a.shape[1]}x{a.shape[0]}, {n} pixels differ ({big} by more than 64 of 255)", flush=True)
            if big > a.shape[0] * a.shape[1] // 1000:  # antialiasing of the same lines drawn another way
                problems.append(f"{name}: {big} pixels differ by more than 64")

        def text(p: Path) -> str:
            s = p.read_text()
            s = re.sub(r'src="data:image/png;base64,[^"]*"', 'src=""', s)
            s = re.sub(r'"href":"[^"]*?/runs/', '"href":"runs/', s)  # relative to the report's folder
            return re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?( UTC)?", "TIME", s)

        same = text(old_dir / "index.html") == text(page)
        print(f"index.html (images and times left out): {'equal' if same else 'DIFFERENT'}", flush=True)
        if not same:
            problems.append("index.html differs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results folder of one run stored by the old code (bench/fleet_scale.py --results)")
    ap.add_argument("scenario", help="its scenario file")
    ap.add_argument("--what", default="analysis,store,report")
    args = ap.parse_args()
    from roughnet.plan import plan_sweep

    results = Path(args.results)
    recs = sorted((results / "runs").glob("*/*/record.json"))
    if len(recs) != 1:
        print(f"expected one record.json under {results}/runs, found {len(recs)}")
        return 2
    run_dir = recs[0].parent
    record = json.loads(recs[0].read_text())
    run = next(r for r in plan_sweep(Path(args.scenario)).runs if r.run_id == record["run_id"])
    problems: list[str] = []
    what = args.what.split(",")
    if "analysis" in what:
        check_analysis(run_dir, record, run, problems)
    if "report" in what:
        check_report(results, record, problems)
    if "store" in what:
        check_store(results, record, problems)
    for p in problems:
        print("DIFFERENT:", p)
    print("equal" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
