#!/usr/bin/env python3
"""How long roughnet.api takes to hand a sweep of many runs to pandas (issue 29: 10,000 runs in under a second).

Builds a results folder with one sweep of N runs: one real run record stored the normal way (the stream fixture
of tests/unit/fixtures/results/records.py), then copied N - 1 times inside DuckDB with its run id, index and
parameters changed (two swept quantities, "loss" and "payload", and a protocol). Then times, best of five:

    api        roughnet.api.open(folder).runs(sweep)      parameters parsed, columns ordered, units
    duckdb     SELECT * FROM runs WHERE sweep_id = ? .df()  the same rows as DuckDB hands them to pandas

and prints both and their ratio (the API's own work on top of reading the table).

    .venv/bin/python bench/api_load.py --runs 10000
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import roughnet.api as rn  # noqa: E402
from roughnet.results import Store  # noqa: E402


def build(folder: Path, n: int) -> str:
    spec = importlib.util.spec_from_file_location("records", REPO / "tests/unit/fixtures/results/records.py")
    records = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(records)
    sweep, recs = records.load()[0]
    with Store(folder) as store:
        store.begin_sweep(sweep)
        store.record_run(copy.deepcopy(recs[0]))
        con = store.con
        con.execute("BEGIN TRANSACTION")
        con.execute(
            """INSERT INTO runs SELECT runs.* REPLACE (
                   printf('%012x', i) AS run_id, i AS run_index,
                   '{"loss": "' || (i % 10) || '%", "payload": "' || (64 * (1 + i % 16)) || ' B", '
                   || '"protocol": "' || (CASE WHEN i % 2 = 0 THEN 'tcp' ELSE 'udp' END) || '"}' AS params)
               FROM runs, range(1, ?) t(i) WHERE runs.sweep_id = ?""",
            [n, sweep.sweep_id])
        con.execute("COMMIT")
        got = con.execute("SELECT count(*) FROM runs WHERE sweep_id = ?", [sweep.sweep_id]).fetchone()[0]
    assert got == n, got
    return sweep.sweep_id


def best(fn, times: int = 5) -> float:
    out = []
    for _ in range(times):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="api-load-")) / "res"
    try:
        sweep_id = build(folder, args.runs)
        with rn.open(folder) as res:
            df = res.runs(sweep_id)
            assert len(df) == args.runs and df["loss"].dtype == "float64", df.dtypes
            api = best(lambda: res.runs(sweep_id))
            raw = best(lambda: res.store.con.execute("SELECT * FROM runs WHERE sweep_id = ?", [sweep_id]).df())
        print(f"runs: {args.runs}, columns: {len(df.columns)}")
        print(f"api    roughnet.api runs()      {api * 1e3:8.1f} ms")
        print(f"duckdb SELECT * .df()           {raw * 1e3:8.1f} ms")
        print(f"ratio api/duckdb {api / raw:.2f}; target: api under 1 s ({'met' if api < 1.0 else 'NOT met'})")
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
