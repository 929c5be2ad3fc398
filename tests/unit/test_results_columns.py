"""The store's timeline tables by column (results.rows.timeline_table_columns) hold the very cells the row by row
conversion (timeline_rows) makes, fast path or not, and fail alike on a bad cell."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roughnet.errors import ResultsError
from roughnet.results import schema
from roughnet.results.rows import timeline_rows, timeline_table_columns


def _record(rng) -> dict:
    series, distance = [], []
    for i in range(300):
        series.append({"workload": "cam", "sender": f"c{i % 7}", "receiver": f"c{i % 5}", "t_s": float(i % 13),
                       "interval_s": 1.0, "sent": int(rng.integers(0, 20)), "delivered": 3, "bytes": 900,
                       "throughput_bps": float(rng.random()), "lost": 0, "duplicates": 0, "reordered": 0,
                       "lat_p50_us": None if i % 4 == 0 else float(rng.random() * 1e3), "lat_p90_us": 1.5,
                       "lat_p99_us": 2.5, "lat_max_us": 3.5})  # fmt: skip
        distance.append({"workload": "cam", "sender": "a", "receiver": "b", "t_s": 0.0, "interval_s": 1.0,
                         "d_bin_m": 10.0 * i, "distance_m": 10.0 * i + 1.25, "sent": 10, "delivered": i % 10,
                         "lat_mean_us": None, "lat_p50_us": 1.0, "lat_p90_us": 2.0, "lat_p99_us": 3.0,
                         "lat_max_us": 4.0})  # fmt: skip
    odd = [dict(r) for r in series[:40]]
    odd[3]["t_s"] = 2  # an int in a DOUBLE column
    odd[5]["lat_max_us"] = math.nan
    odd[6]["throughput_bps"] = math.inf
    odd[7]["sent"] = 4.0  # a whole float in a BIGINT column
    odd[8]["sent"] = np.int64(5)
    odd[9]["note"] = "kept in extra"
    odd[10]["receiver"] = ""  # nullable VARCHAR: kept
    odd[11]["sender"] = None
    events = [{"index": 0, "at_s": 1, "kind": "link", "target": "0", "action": "down", "detail": None,
               "started_s": 1.0, "took_effect_s": 1.01, "ends": None, "error": None}]  # fmt: skip
    return {"series": series + odd, "distance": distance, "events": events, "recovery": [],
            "workloads": [{"name": "cam", "metrics": {"sent": 5}}],
            "flows": [{"workload": "cam", "sender": "a", "receiver": "b", "metrics": {"received": 3, "x": 1}}]}


@pytest.mark.parametrize("table", schema.TIMELINE_TABLES)
def test_columns_are_the_rows_transposed(table: str) -> None:
    rec = _record(np.random.default_rng(3))
    rows = timeline_rows(rec, table, "s1", "r1", "run s1/r1")
    cols = timeline_table_columns(rec, table, "s1", "r1", "run s1/r1")
    assert len(cols) == len(schema.timeline_columns(table))
    transposed = [list(c) for c in zip(*rows)] if rows else [[] for _ in cols]
    for a, b in zip(cols, transposed, strict=True):
        assert [type(x) for x in a] == [type(x) for x in b] and a == b


def test_a_bad_cell_fails_as_row_by_row() -> None:
    rec = _record(np.random.default_rng(3))
    rec["series"][12]["workload"] = None
    with pytest.raises(ResultsError, match=r"series\[12\]\.workload is missing"):
        timeline_table_columns(rec, "series", "s1", "r1", "run s1/r1")
    rec = _record(np.random.default_rng(3))
    rec["distance"][2]["sent"] = "many"
    with pytest.raises(ResultsError, match=r"distance\[2\]\.sent is 'many'"):
        timeline_table_columns(rec, "distance", "s1", "r1", "run s1/r1")
