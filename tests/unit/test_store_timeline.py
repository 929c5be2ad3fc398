"""The timeline tables of the results store (format 5): round trip, re-recording, migration, export."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import duckdb
import pyarrow.csv
import pyarrow.parquet
import pytest
from synthtimeline import Sweep, record

from roughnet.errors import ResultsError
from roughnet.results import FORMAT_VERSION, Store, migrate, schema

SWEEP = "outage-0a1b2c3d"

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records", Path(__file__).parent / "fixtures" / "results" / "records.py"
)
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


def _stored(root: Path, *records: dict) -> Store:
    store = Store(root)
    store.begin_sweep(Sweep(SWEEP, len(records)))
    for rec in records:
        store.record_run(copy.deepcopy(rec))
    return store


def _plain(d: dict) -> dict:
    return json.loads(json.dumps(d))


def _columns(con, table: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position", [table]).fetchall()


def test_version_5_has_the_timeline_tables():
    assert FORMAT_VERSION == 7 and schema.TIMELINE_SINCE == 5 and schema.DISTANCE_SINCE == 6 and schema.PROCESSES_SINCE == 7
    assert sorted(migrate.MIGRATIONS) == list(range(FORMAT_VERSION))
    con = duckdb.connect()
    migrate.create(con)
    for table in schema.TIMELINE_TABLES:
        names = [c for c, _ in _columns(con, table)]
        assert names[:2] == ["sweep_id", "run_id"], table
        assert names == [n for n, _ in schema.timeline_columns(table)]
    assert {"sent", "lat_p99_us", "udp_rcvbuf_errors"} <= {c for c, _ in _columns(con, "workloads")}
    con4 = duckdb.connect()
    migrate.create(con4, 4)
    assert not set(schema.TIMELINE_TABLES) & {r[0] for r in con4.execute(
        "SELECT table_name FROM information_schema.tables").fetchall()}
    con5 = duckdb.connect()
    migrate.create(con5, 5)
    assert set(schema.TIMELINE_TABLES) & {r[0] for r in con5.execute(
        "SELECT table_name FROM information_schema.tables").fetchall()} == set(schema.TIMELINE_TABLES) - {
        "distance", "processes", "process_series"}
    con6 = duckdb.connect()
    migrate.create(con6, 6)
    assert set(schema.TIMELINE_TABLES) & {r[0] for r in con6.execute(
        "SELECT table_name FROM information_schema.tables").fetchall()} == set(schema.TIMELINE_TABLES) - {
        "processes", "process_series"}


def test_round_trip_of_every_timeline_table(tmp_path):
    rec = record(SWEEP, "aaaaaaaaaaaa")
    with _stored(tmp_path, rec) as store:
        wl = store.workloads(SWEEP)
        assert [w["name"] for w in wl] == ["control", "bulk"]
        for want, have in zip(rec["workloads"], wl, strict=True):
            assert have["run_id"] == "aaaaaaaaaaaa" and have["sweep_id"] == SWEEP
            for key in ("name", "protocol", "pattern", "senders", "receivers", "start_s", "background",
                        "validity", "validity_reasons"):
                assert have[key] == want[key], key
            for name, value in want["metrics"].items():
                assert have["metrics"][name] == pytest.approx(value), name
            assert set(have["metrics"]) >= set(schema.METRIC_NAMES)
        flows = store.flows(SWEEP, "aaaaaaaaaaaa")
        assert [(f["workload"], f["sender"], f["receiver"]) for f in flows] == [
            ("control", "pub1", "sub"), ("control", "pub2", "sub"), ("bulk", "pub1", "sub")]
        assert flows[0]["metrics"]["end_reason"] == "end_marker"
        assert flows[2]["metrics"]["mystery"] == 7  # not a column: kept in metrics_extra
        assert flows[0]["metrics"]["lat_p90_us"] == pytest.approx(1020.0)

        def strip(rows):
            return [{k: v for k, v in r.items() if k not in ("sweep_id", "run_id")} for r in rows]

        assert strip(store.series(SWEEP)) == _plain(rec["series"])
        assert strip(store.events(SWEEP)) == _plain(rec["events"])
        assert strip(store.recovery(SWEEP)) == _plain(rec["recovery"])
        # the runs row is as before (t0_ns, the lists: not columns of runs)
        (run,) = store.runs(SWEEP)
        assert run["metrics"]["sent"] == rec["metrics"]["sent"]
        tl = store.timelines(SWEEP)
        assert list(tl) == ["aaaaaaaaaaaa"]
        assert {k: len(v) for k, v in tl["aaaaaaaaaaaa"].items()} == {
            "workloads": 2, "flows": 3, "series": 60, "events": 3, "recovery": 2}
    saved = json.loads((tmp_path / "runs" / SWEEP / "aaaaaaaaaaaa" / "record.json").read_text())
    assert len(saved["series"]) == 60


def test_unknown_keys_are_kept_and_types_checked(tmp_path):
    rec = record(SWEEP, "aaaaaaaaaaaa")
    rec["events"][0]["signal"] = 9
    rec["events"][2]["target"] = 0  # a link's position: stored as text
    rec["events"][1]["detail"] = {"wire": "up"}
    with _stored(tmp_path, rec) as store:
        evs = store.events(SWEEP)
        assert evs[0]["signal"] == 9
        assert evs[2]["target"] == "0"
        assert json.loads(evs[1]["detail"]) == {"wire": "up"}
        bad = copy.deepcopy(rec)
        bad["series"][3]["sent"] = "many"
        with pytest.raises(ResultsError, match=r"series\[3\]\.sent is 'many'"):
            store.record_run(bad)
        bad = copy.deepcopy(rec)
        bad["workloads"][1]["validity"] = "fine"
        with pytest.raises(ResultsError, match=r"workloads\[1\]\.validity"):
            store.record_run(bad)
        bad = copy.deepcopy(rec)
        bad["flows"][0]["workload"] = None
        with pytest.raises(ResultsError, match=r"flows\[0\]\.workload is missing"):
            store.record_run(bad)
        bad = copy.deepcopy(rec)
        bad["recovery"] = {"not": "a list"}
        with pytest.raises(ResultsError, match="recovery is dict; expected a list"):
            store.record_run(bad)
        # the failed writes left the stored run as it was
        assert len(store.series(SWEEP)) == 60 and store.events(SWEEP)[0]["signal"] == 9


def test_recording_again_replaces_the_rows_of_that_run_only(tmp_path):
    a, b = record(SWEEP, "aaaaaaaaaaaa", 0), record(SWEEP, "bbbbbbbbbbbb", 1, broken=True)
    with _stored(tmp_path, a, b) as store:
        assert len(store.series(SWEEP)) == 120
        again = record(SWEEP, "aaaaaaaaaaaa", 0, single=True)
        store.record_run(again)
        assert [w["name"] for w in store.workloads(SWEEP, "aaaaaaaaaaaa")] == ["control"]
        assert len(store.series(SWEEP, "aaaaaaaaaaaa")) == 20
        assert len(store.flows(SWEEP, "aaaaaaaaaaaa")) == 1
        assert len(store.recovery(SWEEP, "aaaaaaaaaaaa")) == 1
        assert len(store.series(SWEEP, "bbbbbbbbbbbb")) == 60  # the other run untouched
        assert [r["verdict"] for r in store.recovery(SWEEP, "bbbbbbbbbbbb")] == ["broken", "broken"]
        # a record without the keys (a classic run, or a failed one) leaves no timeline rows behind
        plain = {k: v for k, v in again.items() if k not in schema.TIMELINE_TABLES}
        store.record_run(plain)
        assert store.timelines(SWEEP, "aaaaaaaaaaaa") == {}
        assert list(store.timelines(SWEEP)) == ["bbbbbbbbbbbb"]
        for table in schema.TIMELINE_TABLES:
            n = store.con.execute(f"SELECT count(*) FROM {table} WHERE run_id = 'aaaaaaaaaaaa'").fetchone()[0]
            assert n == 0, table


def test_classic_records_write_nothing_new(tmp_path):
    (sweep, records), *_ = records_fixture.load()
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        for rec in records:
            store.record_run(copy.deepcopy(rec))
        assert store.timelines(sweep.sweep_id) == {}
        for table in schema.TIMELINE_TABLES:
            assert store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


def _write_v4(root: Path, monkeypatch) -> tuple:
    (sweep, records), *_ = records_fixture.load()
    with monkeypatch.context() as m:
        m.setattr(schema, "FORMAT_VERSION", 4)
        with Store(root) as store:
            assert store.format_version() == 4
            store.begin_sweep(sweep)
            for rec in records:
                store.record_run(copy.deepcopy(rec))
    return sweep, records


def test_upgrade_from_v4_creates_the_empty_tables(tmp_path, monkeypatch):
    root = tmp_path / "res"
    sweep, records = _write_v4(root, monkeypatch)
    con = duckdb.connect(str(root / "results.duckdb"), read_only=True)
    assert migrate.read_version(con, "v4") == 4
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert not set(schema.TIMELINE_TABLES) & tables
    con.close()
    with pytest.raises(ResultsError, match="needs an upgrade"):
        Store(root, read_only=True)
    with Store(root) as store:
        assert store.format_version() == FORMAT_VERSION == 7
        fresh = duckdb.connect()
        migrate.create(fresh)
        for table in ("runs", "receivers", *schema.TIMELINE_TABLES):
            assert _columns(store.con, table) == _columns(fresh, table), table
        fresh.close()
        assert [r["run_id"] for r in store.runs(sweep.sweep_id)] == [r["run_id"] for r in records]
        assert store.timelines(sweep.sweep_id) == {}
        # the upgraded file takes timeline records
        store.begin_sweep(Sweep(SWEEP, 1))
        store.record_run(record(SWEEP, "aaaaaaaaaaaa"))
        assert len(store.events(SWEEP)) == 3
    backup = root / "results.duckdb.v4.bak"
    con = duckdb.connect(str(backup), read_only=True)
    assert migrate.read_version(con, "backup") == 4
    con.close()


def test_upgrade_from_v0_reaches_the_current_format_with_timeline_tables(tmp_path):
    con = duckdb.connect(str(tmp_path / "results.duckdb"))
    for stmt in migrate.V0_STATEMENTS:
        con.execute(stmt)
    con.close()
    with Store(tmp_path) as store:
        assert store.format_version() == 7
        assert store.workloads("nothing-00000000") == []
        assert store.distance("nothing-00000000") == []


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_of_a_timeline_table(tmp_path, fmt):
    a, b = record(SWEEP, "aaaaaaaaaaaa", 0), record(SWEEP, "bbbbbbbbbbbb", 1, broken=True)
    with _stored(tmp_path / "res", a, b) as store:
        out = store.export(SWEEP, fmt, tmp_path, table="recovery")
        assert out.name == f"{SWEEP}-recovery.{fmt}"
        ev = store.export(SWEEP, fmt, tmp_path / "ev", table="events")
        with pytest.raises(ResultsError, match="export table is 'bogus'"):
            store.export(SWEEP, fmt, tmp_path, table="bogus")
        runs = store.export(SWEEP, fmt, tmp_path)
        assert runs.name == f"{SWEEP}.{fmt}"
    read = pyarrow.csv.read_csv if fmt == "csv" else pyarrow.parquet.read_table
    t = read(out)
    assert t.column_names == [n for n, _ in schema.timeline_columns("recovery")]
    assert t.column("run_id").to_pylist() == ["aaaaaaaaaaaa"] * 2 + ["bbbbbbbbbbbb"] * 2
    assert t.column("verdict").to_pylist() == ["kept", "kept", "broken", "broken"]
    e = read(ev)
    assert e.column("index").to_pylist() == [0, 1, 2, 0, 1, 2]


def test_export_cli_table_option(tmp_path):
    from typer.testing import CliRunner

    from roughnet.cli import app

    _stored(tmp_path / "res", record(SWEEP, "aaaaaaaaaaaa")).close()
    out = CliRunner().invoke(app, ["export", SWEEP, "--results", str(tmp_path / "res"), "--table", "series",
                                   "--out", str(tmp_path / "s.csv")])
    assert out.exit_code == 0, out.output
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 61
    bad = CliRunner().invoke(app, ["export", SWEEP, "--results", str(tmp_path / "res"), "--table", "nope"])
    assert bad.exit_code == 2


def test_rows_made_by_the_timeline_analysis_are_stored_as_they_are(tmp_path):
    # series and recovery rows as roughnet.timeline makes them from traces (numpy-derived values), 10 ms
    # intervals: a long series goes in through Arrow in one piece
    import numpy as np

    from roughnet.timeline import recovery as rec_mod
    from roughnet.timeline import series as series_mod
    from roughnet.timeline.traces import Rx, Tx

    t0 = 1_000_000_000
    seq = np.arange(3000)
    sent = t0 + seq * 1_000_000  # 1000 msg/s for 3 s
    keep = (sent < t0 + 1_000_000_000) | (sent >= t0 + 1_500_000_000)  # 0.5 s outage
    tx = Tx.from_arrays(seq, sent)
    rx = Rx.from_arrays(seq[keep], sent[keep], sent[keep] + 300_000)
    flow = series_mod.prepare(tx, rx)
    key = {"workload": "control", "sender": "a", "receiver": "b"}
    series = [{**key, **r} for r in series_mod.flow_series(flow, None, t0, t0 + 3_000_000_000, 10_000_000, 100)]
    rec_row = rec_mod.recovery(flow, None, t0, t0 + 1_000_000_000, t0 + 1_500_000_000,
                               promise={"name": "TCP", "no_loss": True, "no_duplicates": True},
                               interval_ns=100_000_000)
    rec = record(SWEEP, "aaaaaaaaaaaa", single=True)
    rec["series"], rec["recovery"] = series, [{"event": 0, **key, **rec_row}]
    with _stored(tmp_path, rec) as store:
        have = store.series(SWEEP)
        assert len(have) == 300
        assert [{k: v for k, v in r.items() if k not in ("sweep_id", "run_id")} for r in have] == _plain(series)
        (r,) = store.recovery(SWEEP)
        assert r["verdict"] == "broken" and r["lost"] == 500 and r["evidence"] == rec_row["evidence"]
        assert r["outage_s"] == pytest.approx(rec_row["outage_s"])
