"""The results store: round trip, resume set, versions, crash safety, export."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow.csv
import pyarrow.parquet
import pytest

from roughnet.errors import ResultsError
from roughnet.results import FORMAT_VERSION, Store, migrate, schema
from roughnet.results.store import signal_inside

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records", Path(__file__).parent / "fixtures" / "results" / "records.py"
)
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


@pytest.fixture(scope="module")
def fixture_sweeps():
    return records_fixture.load()


@pytest.fixture
def stream(fixture_sweeps):
    sweep, records = fixture_sweeps[0]
    return sweep, copy.deepcopy(records)


def _filled(root: Path, fixture_sweeps) -> Store:
    store = Store(root)
    for sweep, records in fixture_sweeps:
        store.begin_sweep(sweep)
        for rec in records:
            store.record_run(copy.deepcopy(rec))
    return store


def test_round_trip_runs_receivers_histograms(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path / "res") as store:
        store.begin_sweep(sweep)
        for rec in records:
            store.record_run(rec)
        got = store.runs(sweep.sweep_id)
        assert [r["run_id"] for r in got] == [r["run_id"] for r in records]
        for want, have in zip(records, got, strict=True):
            for key in ("index", "scenario", "params", "repeat", "seed", "status",
                        "failure_reason", "stderr_tail", "duration_s", "engine", "versions",
                        "pattern", "protocol", "validity", "validity_reasons", "points",
                        "link_counters", "tcp_counters", "run"):
                assert have[key] == json.loads(json.dumps(want[key])), key
            for name, value in want["metrics"].items():
                assert have["metrics"][name] == pytest.approx(value), name
            assert set(have["metrics"]) >= set(schema.METRIC_NAMES)
            assert have["started_at"].startswith(want["started_at"][:19])
            assert len(have["receivers"]) == len(want["receivers"])
            for wr, hr in zip(want["receivers"], have["receivers"], strict=True):
                assert hr["host"] == wr["host"]
                for name, value in wr["metrics"].items():
                    assert hr["metrics"][name] == pytest.approx(value)
            hists = store.histograms(sweep.sweep_id, want["run_id"])
            assert sorted((h["kind"], h["hdr"], h["count"]) for h in hists) == sorted(
                (h["kind"], h["hdr"], h["count"]) for h in want["histograms"]
            )
        # the stored HDR strings decode to what was recorded
        from hdrh.histogram import HdrHistogram

        (first,) = [h for h in store.histograms(sweep.sweep_id, records[0]["run_id"])
                    if h["kind"] == "latency_intended"]
        h = HdrHistogram.decode(first["hdr"])
        assert h.get_total_count() == first["count"]
        assert h.get_value_at_percentile(50) / 1000 == pytest.approx(
            records[0]["metrics"]["lat_p50_us"]
        )
        # the record copy beside the artifacts
        copy_path = store.run_dir(sweep.sweep_id, records[0]["run_id"]) / "record.json"
        assert json.loads(copy_path.read_text())["run_id"] == records[0]["run_id"]


def test_sweeps_row(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(records[0])
        store.record_run(records[10])  # the failed one
        (row,) = store.sweeps()
        assert row["sweep_id"] == sweep.sweep_id
        assert row["scenario"] == "stream3"
        assert list(row["axes"]) == ["loss", "payload", "protocol"]  # file order kept
        assert row["run_count"] == 12
        assert (row["runs_stored"], row["runs_ok"], row["runs_failed"]) == (2, 1, 1)
        assert row["machine"]["cpus"] >= 1
        assert row["description"].startswith("Stream")


def test_begin_sweep_again_keeps_created_at_and_reads_scenario_text(tmp_path, stream):
    sweep, _ = stream
    scenario = tmp_path / "s.toml"
    scenario.write_text("[scenario]\nname = 'stream3'\n")
    import dataclasses

    sweep = dataclasses.replace(sweep, source=str(scenario))
    with Store(tmp_path / "res") as store:
        store.begin_sweep(sweep)
        first = store.sweeps()[0]
        store.begin_sweep(sweep)
        (again,) = store.sweeps()
        assert again["created_at"] == first["created_at"]
        assert "scenario_text" not in again
        assert store.sweep(sweep.sweep_id)["scenario_text"] == scenario.read_text()


def test_record_run_replaces_same_run(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(records[0])
        changed = copy.deepcopy(records[0])
        changed["metrics"]["lat_p50_us"] = 999.0
        changed["receivers"].append({"host": "c", "metrics": {"received": 3}})
        store.record_run(changed)
        (run,) = store.runs(sweep.sweep_id)
        assert run["metrics"]["lat_p50_us"] == 999.0
        assert [r["host"] for r in run["receivers"]] == ["b", "c"]
        assert len(store.histograms(sweep.sweep_id)) == 2


def test_completed_run_ids_for_resume(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        assert store.completed_run_ids(sweep.sweep_id) == set()
        for rec in records[:4] + [records[10]]:
            store.record_run(rec)
        want = {r["run_id"] for r in records[:4]} | {records[10]["run_id"]}
        assert store.completed_run_ids(sweep.sweep_id) == want
        assert store.completed_run_ids("other-00000000") == set()
    # persists across reopen
    with Store(tmp_path, create=False) as store:
        assert store.completed_run_ids(sweep.sweep_id) == want


def test_unknown_metric_kept_as_extra(tmp_path, stream):
    sweep, records = stream
    rec = records[0]
    rec["metrics"]["goodput_bps"] = 123.5
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(rec)
        assert store.runs(sweep.sweep_id)[0]["metrics"]["goodput_bps"] == 123.5


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda r: r.update(status="done"), "status"),
        (lambda r: r.update(validity="maybe"), "validity"),
        (lambda r: r.update(run_id="../x"), "run_id"),
        (lambda r: r["metrics"].update(lat_p50_us="fast"), "lat_p50_us"),
        (lambda r: r["metrics"].update(sent=1.5), "sent"),
        (lambda r: r["histograms"][0].update(kind="latency"), "kind"),
        (lambda r: r.update(started_at="yesterday"), "started_at"),
    ],
)
def test_bad_records_rejected_with_named_key(tmp_path, stream, mutate, needle):
    sweep, records = stream
    rec = records[0]
    mutate(rec)
    with Store(tmp_path) as store:
        with pytest.raises(ResultsError, match=needle):
            store.record_run(rec)
        assert store.runs(sweep.sweep_id) == []


class PassThrough:
    """A store connection that hands every call to ``real``; a test overrides ``execute`` to fail at one step."""

    def __init__(self, real, exc):
        self.real, self.exc = real, exc

    def execute(self, sql, *a):
        return self.real.execute(sql, *a)

    def executemany(self, sql, *a):
        return self.real.executemany(sql, *a)

    def register(self, *a):
        return self.real.register(*a)

    def unregister(self, *a):
        return self.real.unregister(*a)


def test_failure_midway_leaves_no_partial_rows(tmp_path, stream, monkeypatch):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(records[1])
        before = store.runs(sweep.sweep_id)
        real = store.con

        class Exploding(PassThrough):
            """Passes statements through until the histograms insert, then raises."""

            def execute(self, sql, *a):
                if sql.startswith("INSERT INTO histograms"):  # (from an Arrow table: store._arrow_insert)
                    # the runs and receivers rows are in by now (same transaction)
                    n = real.execute(
                        "SELECT count(*) FROM runs WHERE run_id = ?", [records[0]["run_id"]]
                    ).fetchall()[0][0]
                    assert n == 1
                    raise self.exc
                return real.execute(sql, *a)

        for exc in (RuntimeError("disk on fire"), KeyboardInterrupt()):
            monkeypatch.setattr(store, "_con", Exploding(real, exc))
            with pytest.raises(type(exc)):
                store.record_run(copy.deepcopy(records[0]))
            monkeypatch.setattr(store, "_con", real)
            assert store.runs(sweep.sweep_id) == before
            assert store.histograms(sweep.sweep_id, records[0]["run_id"]) == []
            assert real.execute("SELECT count(*) FROM receivers WHERE run_id = ?",
                                [records[0]["run_id"]]).fetchone()[0] == 0
        # and the store still works afterwards
        store.record_run(records[0])
        assert len(store.runs(sweep.sweep_id)) == 2


def test_an_interrupt_inside_an_arrow_insert_reaches_the_caller_as_itself(tmp_path, stream, monkeypatch):
    """The CLI's signal handler raises inside DuckDB while it reads a registered Arrow table; the insert fails,
    the transaction is aborted, and DuckDB then refuses ``unregister`` as well ("Current transaction is
    aborted"). That second error must not replace the interrupt: the runner tells an interrupt from a store
    fault by the exception (signal_inside), and took a SIGTERM for a failed store (found by test_self_chaos)."""
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        real = store.con

        class Aborting(PassThrough):
            def execute(self, sql, *a):
                if sql.startswith("INSERT INTO receivers"):
                    with pytest.raises(duckdb.CatalogException):  # a failed statement aborts the transaction
                        real.execute("SELECT * FROM no_such_table")
                    raise self.exc
                return real.execute(sql, *a)

        for exc in (KeyboardInterrupt(), duckdb.InvalidInputException("x failed: Interrupted: SIGTERM")):
            monkeypatch.setattr(store, "_con", Aborting(real, exc))
            with pytest.raises(type(exc)) as got:
                store.record_run(copy.deepcopy(records[0]))
            assert got.value is exc or signal_inside(got.value), got.value
            monkeypatch.setattr(store, "_con", real)
            assert store.runs(sweep.sweep_id) == []
        store.record_run(copy.deepcopy(records[0]))  # and the store still works
        assert len(store.runs(sweep.sweep_id)) == 1


def test_killed_writer_keeps_committed_runs(tmp_path, stream):
    """A process killed (SIGKILL) mid-sweep leaves exactly the committed runs."""
    sweep, records = stream
    root = tmp_path / "res"
    with Store(root) as store:
        store.begin_sweep(sweep)
    src = Path(__file__).resolve().parents[2] / "python"
    rec_file = tmp_path / "recs.json"
    rec_file.write_text(json.dumps(records[:3]))
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        sys.path.insert(0, {str(src)!r})
        from roughnet.results import Store
        recs = json.load(open({str(rec_file)!r}))
        s = Store({str(root)!r})
        s.record_run(recs[0]); s.record_run(recs[1])
        s.con.execute("BEGIN TRANSACTION")
        s.con.execute("DELETE FROM runs")
        s.con.execute("INSERT INTO histograms VALUES ('x','y','b','rtt_actual',1,'HIST')")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    with Store(root, create=False) as store:
        got = store.runs(sweep.sweep_id)
        assert [r["run_id"] for r in got] == [r["run_id"] for r in records[:2]]
        assert all(h["run_id"] != "y" for h in store.histograms(sweep.sweep_id))
        assert store.con.execute("SELECT count(*) FROM histograms WHERE sweep_id='x'").fetchone()[0] == 0


def test_format_version_written_and_newer_refused(tmp_path):
    with Store(tmp_path) as store:
        assert store.format_version() == FORMAT_VERSION == 7
    con = duckdb.connect(str(tmp_path / "results.duckdb"))
    con.execute("UPDATE meta SET value = '8' WHERE key = 'format_version'")
    con.close()
    with pytest.raises(ResultsError, match=r"format version 8.*newer.*up to 7"):
        Store(tmp_path)


def test_not_a_results_database(tmp_path):
    con = duckdb.connect(str(tmp_path / "results.duckdb"))
    con.execute("CREATE TABLE other (x INTEGER)")
    con.close()
    with pytest.raises(ResultsError, match="not a roughnet results database"):
        Store(tmp_path)


def test_missing_database_without_create(tmp_path):
    with pytest.raises(ResultsError, match="no results database"):
        Store(tmp_path / "nothing", create=False)
    assert not (tmp_path / "nothing").exists()


def _make_v0(path: Path) -> None:
    con = duckdb.connect(str(path))
    for stmt in migrate.V0_STATEMENTS:
        con.execute(stmt)
    con.execute(
        "INSERT INTO sweeps VALUES ('old-00000001', 'old', 'old.toml', '{\"loss\": [\"0%\", \"5%\"]}', "
        "TIMESTAMP '2026-11-01 09:00:00')"
    )
    for i, loss in enumerate(["0%", "5%"]):
        metrics = {"sent": 100, "received": 100 - 5 * i, "lost": 5 * i,
                   "loss_ratio": 0.05 * i, "lat_p50_us": 61.5 + i, "mystery": 1}
        con.execute(
            "INSERT INTO runs VALUES ('old-00000001', ?, ?, 'old', ?, 'ok', NULL, "
            "TIMESTAMP '2026-11-01 09:00:00', 1.5, 'kernel', ?)",
            [f"{i:012x}", i, json.dumps({"loss": loss}), json.dumps(metrics)],
        )
    con.close()


def test_upgrade_from_v0(tmp_path):
    _make_v0(tmp_path / "results.duckdb")
    with pytest.raises(ResultsError, match="needs an upgrade"):
        Store(tmp_path, read_only=True)
    with Store(tmp_path) as store:
        assert store.format_version() == FORMAT_VERSION
        runs = store.runs("old-00000001")
        assert [r["params"] for r in runs] == [{"loss": "0%"}, {"loss": "5%"}]
        assert runs[1]["metrics"]["lost"] == 5
        assert runs[1]["metrics"]["lat_p50_us"] == 62.5
        assert runs[0]["metrics"]["throughput_bps"] is None
        assert store.completed_run_ids("old-00000001") == {f"{i:012x}" for i in range(2)}
        (sweep,) = store.sweeps()
        assert sweep["run_count"] == 2 and sweep["axes"] == {"loss": ["0%", "5%"]}
        # the upgraded file takes new records
        assert store.export("old-00000001", "csv", tmp_path / "old.csv").exists()
    backup = tmp_path / "results.duckdb.v0.bak"
    assert backup.exists()
    con = duckdb.connect(str(backup), read_only=True)
    assert migrate.read_version(con, "backup") == 0
    con.close()


def test_failed_upgrade_changes_nothing(tmp_path, monkeypatch):
    _make_v0(tmp_path / "results.duckdb")

    def broken(con):
        con.execute("ALTER TABLE runs RENAME TO runs_v0")
        raise RuntimeError("migration bug")

    monkeypatch.setitem(migrate.MIGRATIONS, 0, broken)
    with pytest.raises(RuntimeError, match="migration bug"):
        Store(tmp_path)
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    assert migrate.read_version(con, "x") == 0
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    con.close()


def test_resolve_sweep(tmp_path, fixture_sweeps):
    with _filled(tmp_path, fixture_sweeps) as store:
        assert store.resolve_sweep("stream3-1a2b3c4d") == "stream3-1a2b3c4d"
        assert store.resolve_sweep("stream3") == "stream3-1a2b3c4d"  # scenario name
        assert store.resolve_sweep("ping") == "pingiv-5e6f7a8b"  # unique prefix
        with pytest.raises(ResultsError, match=r"no sweep matches 'zzz'.*stream3-1a2b3c4d"):
            store.resolve_sweep("zzz")
        # two sweeps of one scenario: the name means the latest one
        import dataclasses

        sweep = fixture_sweeps[0][0]
        store.begin_sweep(dataclasses.replace(sweep, sweep_id="stream3-ffffffff"))
        assert store.resolve_sweep("stream3") == "stream3-ffffffff"
        with pytest.raises(ResultsError, match="several sweeps start with 'stream3-'"):
            store.resolve_sweep("stream3-")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_readable(tmp_path, fixture_sweeps, fmt):
    with _filled(tmp_path / "res", fixture_sweeps) as store:
        out = store.export("stream3-1a2b3c4d", fmt, tmp_path)
    assert out == tmp_path / f"stream3-1a2b3c4d.{fmt}"
    table = (pyarrow.csv.read_csv(out) if fmt == "csv" else pyarrow.parquet.read_table(out))
    rows = table.to_pylist()
    assert len(rows) == 12
    cols = table.column_names
    assert cols[4:7] == ["param_loss", "param_payload", "param_protocol"]
    assert set(schema.METRIC_NAMES) <= set(cols)
    assert [r["param_loss"] for r in rows[:4]] == ["0%"] * 4
    assert rows[10]["status"] == "failed" and rows[10]["lat_p50_us"] is None
    assert "address in use" in rows[10]["failure_reason"]
    assert rows[5]["validity"] == "suspect" and "behind schedule" in rows[5]["validity_reasons"]
    _, records = fixture_sweeps[0]
    assert rows[3]["lat_p99_us"] == pytest.approx(records[3]["metrics"]["lat_p99_us"])
    assert rows[3]["sent"] == 2000


def test_export_bad_format_and_unknown_sweep(tmp_path, fixture_sweeps):
    with _filled(tmp_path, fixture_sweeps) as store:
        with pytest.raises(ResultsError, match="expected 'csv' or 'parquet'"):
            store.export("stream3-1a2b3c4d", "xlsx", tmp_path / "x")
        with pytest.raises(ResultsError, match="no sweep 'nope'"):
            store.export("nope", "csv", tmp_path / "x.csv")


def test_second_writer_gets_clear_error(tmp_path):
    """DuckDB allows one writing process; a second one gets a ResultsError, not a trace."""
    src = Path(__file__).resolve().parents[2] / "python"
    Store(tmp_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import sys, time; sys.path.insert(0, {str(src)!r}); from roughnet.results import Store; "
         f"s = Store({str(tmp_path)!r}); print('open', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"open"
        with pytest.raises(ResultsError, match="in use by another process"):
            Store(tmp_path)
    finally:
        holder.stdin.close()
        holder.stdout.close()
        holder.wait(timeout=60)


def test_run_dir_created_and_checked(tmp_path):
    with Store(tmp_path) as store:
        d = store.run_dir("s-1", "0123456789ab")
        assert d == tmp_path / "runs" / "s-1" / "0123456789ab" and d.is_dir()
        with pytest.raises(ResultsError, match="run id"):
            store.run_dir("s-1", "../../etc")


def test_garbage_file_is_refused_clearly(tmp_path):
    (tmp_path / "results.duckdb").write_text("not a database\n")
    with pytest.raises(ResultsError, match="cannot open results database.*not a valid DuckDB"):
        Store(tmp_path)


def test_read_only_readers_share_the_file(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(records[0])
    with Store(tmp_path, read_only=True) as a, Store(tmp_path, read_only=True) as b:
        assert a.completed_run_ids(sweep.sweep_id) == b.completed_run_ids(sweep.sweep_id) == {records[0]["run_id"]}


def test_captured_runner_records_round_trip(tmp_path):
    """Two records captured from a real `roughnet run scenarios/quickstart.toml` (runner +
    Rust agent): they store, read back, and the agent's HDR histograms decode with hdrh
    to the percentiles the runner derived from the agent's own summary."""
    from hdrh.histogram import HdrHistogram

    captured = json.loads(
        (Path(__file__).parent / "fixtures" / "results" / "captured" / "quickstart-2runs.json").read_text()
    )
    with Store(tmp_path) as store:
        for rec in captured:
            store.record_run(copy.deepcopy(rec))
        sweep_id = captured[0]["sweep_id"]
        got = {r["run_id"]: r for r in store.runs(sweep_id)}
        assert set(got) == {r["run_id"] for r in captured}
        for rec in captured:
            have = got[rec["run_id"]]
            assert have["params"] == rec["params"] and have["run"] == rec["run"]
            for name, value in rec["metrics"].items():
                assert have["metrics"][name] == pytest.approx(value), name
            (hist,) = [h for h in store.histograms(sweep_id, rec["run_id"]) if h["kind"] == "latency_intended"]
            h = HdrHistogram.decode(hist["hdr"])
            assert h.get_total_count() == hist["count"] == rec["metrics"]["received"]
            for pct, name in ((50, "lat_p50_us"), (90, "lat_p90_us"), (99, "lat_p99_us")):
                # implementations round the rank differently (Rust: up; hdrh: nearest), so
                # the agent's value lies between hdrh's at the neighbouring ranks
                lo = h.get_value_at_percentile(pct - 0.1) / 1000
                hi = h.get_value_at_percentile(pct + 0.1) / 1000
                assert lo <= rec["metrics"][name] <= hi, (name, lo, rec["metrics"][name], hi)


# ------------------------------------------------------------------ format 1 -> 2 (sync metric columns)

SYNC_CAPTURED = Path(__file__).parent / "fixtures" / "results" / "captured" / "hf-sync-2runs.json"
SYNC_COLUMNS = ("bundles_from_to", "bundles_to_from", "goodput_bps", "channel_capacity_bps",
                "goodput_fraction", "overhead_ratio", "time_to_full_sync_s", "full_sync")


def _sync_sweep(records: list[dict]):
    class _Sweep:  # what begin_sweep reads of a runspec.Sweep
        sweep_id = records[0]["sweep_id"]
        scenario = "hf-sync"
        source = "scenarios/hf-sync.toml"
        description = ""
        axes = {"protocol": ["tcp"], "window": [1, 4]}
        report = {"x": "window", "lines": "protocol"}
        runs = tuple(records)

    return _Sweep


def _write_old(root: Path, version: int, sweep, records: list[dict], monkeypatch) -> None:
    """A file of format ``version`` written by the Store itself with that version's layout (the old
    code path: only the metric list and the version number differ from the current one)."""
    old = schema.metrics_of(version)
    with monkeypatch.context() as m:
        m.setattr(schema, "FORMAT_VERSION", version)
        m.setattr(schema, "METRICS", old)
        m.setattr(schema, "METRIC_NAMES", tuple(x.name for x in old))
        m.setattr(schema, "METRIC_BY_NAME", {x.name: x for x in old})
        with Store(root) as store:
            assert store.format_version() == version
            store.begin_sweep(sweep)
            for rec in records:
                store.record_run(copy.deepcopy(rec))


def _write_v1(root: Path, records: list[dict], monkeypatch) -> None:
    _write_old(root, 1, _sync_sweep(records), records, monkeypatch)


def _columns(con, table: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position", [table]).fetchall()


def _assert_columns_of_a_new_file(con) -> None:
    """An upgraded file's runs and receivers have a new file's columns, in the same order."""
    fresh = duckdb.connect()
    migrate.create(fresh)
    for table in ("runs", "receivers"):
        assert _columns(con, table) == _columns(fresh, table)
    fresh.close()


def test_v1_layout_has_no_sync_columns_and_v2_adds_them_last():
    v1 = [m.name for m in schema.metrics_of(1)]
    assert not set(SYNC_COLUMNS) & set(v1)
    assert [m.name for m in schema.metrics_of(2)] == v1 + list(SYNC_COLUMNS)
    assert schema.METRIC_BY_NAME["full_sync"].sql_type == "BOOLEAN"
    with pytest.raises(ResultsError, match="expected 1..7"):
        schema.create_statements(0)


def test_upgrade_from_v1_moves_sync_metrics_into_columns(tmp_path, monkeypatch):
    records = json.loads(SYNC_CAPTURED.read_text())
    root = tmp_path / "res"
    _write_v1(root, records, monkeypatch)
    con = duckdb.connect(str(root / "results.duckdb"), read_only=True)
    assert migrate.read_version(con, "v1") == 1
    assert "goodput_bps" not in [c for c, _ in _columns(con, "runs")]
    extra = json.loads(con.execute("SELECT metrics_extra FROM runs ORDER BY run_index").fetchone()[0])
    assert extra["full_sync"] is True and extra["bundles_from_to"] == 6  # where version 1 kept them
    con.close()

    with pytest.raises(ResultsError, match=f"needs an upgrade to {FORMAT_VERSION}"):
        Store(root, read_only=True)
    with Store(root) as store:  # 1 -> 2 -> 3 in one go
        assert store.format_version() == FORMAT_VERSION
        con = store.con
        _assert_columns_of_a_new_file(con)
        rows = con.execute(
            f"SELECT run_id, {', '.join(SYNC_COLUMNS)}, metrics_extra FROM runs ORDER BY run_index").fetchall()
        assert len(rows) == 2
        for row, rec in zip(rows, records, strict=True):
            assert row[0] == rec["run_id"]
            for name, value in zip(SYNC_COLUMNS, row[1:-1], strict=True):
                assert value == pytest.approx(rec["metrics"][name]), name
            assert row[1 + SYNC_COLUMNS.index("full_sync")] is True
            left = json.loads(row[-1])
            assert not set(left) & set(SYNC_COLUMNS)  # moved, not copied
            assert left["sync_messages"] == rec["metrics"]["sync_messages"]  # the rest stays
        # the format-3 columns exist and are empty: these sync records never carried those values
        assert con.execute(f"SELECT count(*) FROM runs WHERE coalesce({', '.join(V3_COLUMNS)}) IS NOT NULL"
                           ).fetchone()[0] == 0
        # receivers: the per-side sync fields that are columns moved too
        side = con.execute(
            "SELECT host, goodput_bps, full_sync, time_to_full_sync_s, metrics_extra FROM receivers "
            "WHERE run_id = ? ORDER BY host", [records[0]["run_id"]]).fetchall()
        want = {r["host"]: r["metrics"] for r in records[0]["receivers"]}
        assert [s[0] for s in side] == sorted(want)
        for host, goodput, full, t, rest in side:
            assert goodput == want[host]["goodput_bps"] and full is True
            assert t == pytest.approx(want[host]["time_to_full_sync_s"])
            assert json.loads(rest)["bundles_received"] == want[host]["bundles_received"]
            assert "goodput_bps" not in json.loads(rest)
        # reading back gives the records' metrics, whichever column or JSON they live in
        for have, rec in zip(store.runs(records[0]["sweep_id"]), records, strict=True):
            for name, value in rec["metrics"].items():
                assert have["metrics"][name] == pytest.approx(value), name
            for hr, wr in zip(have["receivers"], sorted(rec["receivers"], key=lambda r: r["host"]), strict=True):
                for name, value in wr["metrics"].items():
                    assert hr["metrics"][name] == pytest.approx(value), (hr["host"], name)
        out = store.export(records[0]["sweep_id"], "csv", tmp_path / "sync.csv")
    table = pyarrow.csv.read_csv(out)
    assert table.column("bundles_to_from").to_pylist() == [6, 6]
    assert table.column("full_sync").to_pylist() == [True, True]
    backup = root / "results.duckdb.v1.bak"
    con = duckdb.connect(str(backup), read_only=True)
    assert migrate.read_version(con, "backup") == 1
    con.close()


def test_upgrade_from_v1_keeps_values_that_do_not_fit_a_column(tmp_path):
    """A metrics_extra value of the wrong type stays in the JSON (nothing is lost); nulls go."""
    con = duckdb.connect(str(tmp_path / "results.duckdb"))
    migrate.create(con, 1)
    con.execute(
        "INSERT INTO runs (sweep_id, run_id, status, metrics_extra) VALUES ('s', 'r', 'ok', ?)",
        [json.dumps({"full_sync": "maybe", "bundles_from_to": 2.5, "goodput_bps": 10,
                     "time_to_full_sync_s": None, "other": 1})])
    con.close()
    with Store(tmp_path) as store:
        row = store.con.execute(
            "SELECT full_sync, bundles_from_to, goodput_bps, time_to_full_sync_s, metrics_extra FROM runs"
        ).fetchone()
    assert row[:4] == (None, None, 10.0, None)
    assert json.loads(row[4]) == {"full_sync": "maybe", "bundles_from_to": 2.5, "other": 1}


def test_v2_round_trip_of_sync_records(tmp_path):
    records = json.loads(SYNC_CAPTURED.read_text())
    with Store(tmp_path) as store:
        store.begin_sweep(_sync_sweep(records))
        for rec in records:
            store.record_run(copy.deepcopy(rec))
        (full,) = store.con.execute("SELECT list(full_sync ORDER BY run_index) FROM runs").fetchone()
        assert full == [True, True]
        bad = copy.deepcopy(records[0])
        bad["metrics"]["full_sync"] = "yes"
        with pytest.raises(ResultsError, match=r"full_sync is 'yes'; expected true, false or null"):
            store.record_run(bad)
        assert store.runs(records[0]["sweep_id"])[0]["metrics"]["full_sync"] is True


# ------------------------------------------------------------------ format 2 -> 3 (sender held / own, UDP drops)

V3_COLUMNS = ("sched_own_late_fraction", "sched_own_behind_max_us", "sched_held_fraction", "sched_held_s",
              "udp_rcvbuf_errors")


def _with_v3_metrics(records: list[dict]) -> list[dict]:
    """The stream fixture's records carrying what collect.aggregate / udp_metrics add since the agent
    splits a sender's lag (the failed run carries none); receiver b of each ok run has its own
    udp_rcvbuf_errors, and every ok run one metric that is no column (service_reused)."""
    out = copy.deepcopy(records)
    for i, rec in enumerate(out):
        if rec["status"] != "ok":
            continue
        rec["metrics"].update(sched_own_late_fraction=0.001 * i, sched_own_behind_max_us=250.0 + i,
                              sched_held_fraction=0.125 + 0.01 * i, sched_held_s=0.5 * i,
                              udp_rcvbuf_errors=3 * i, service_reused=i % 2 == 0)
        rec["receivers"][0]["metrics"]["udp_rcvbuf_errors"] = i
    return out


def test_v3_adds_schedule_split_and_udp_drop_columns_last():
    v2 = [m.name for m in schema.metrics_of(2)]
    assert not set(V3_COLUMNS) & set(v2)
    assert list(schema.METRIC_NAMES) == v2 + list(V3_COLUMNS)
    assert [schema.METRIC_BY_NAME[c].sql_type for c in V3_COLUMNS] == ["DOUBLE"] * 4 + ["BIGINT"]
    assert {schema.METRIC_BY_NAME[c].since for c in V3_COLUMNS} == {3}
    assert sorted(migrate.MIGRATIONS) == list(range(FORMAT_VERSION))


def test_upgrade_from_v2_moves_schedule_split_and_udp_drops_into_columns(tmp_path, monkeypatch, stream):
    sweep, plain = stream
    records = _with_v3_metrics(plain)
    root = tmp_path / "res"
    _write_old(root, 2, sweep, records, monkeypatch)
    con = duckdb.connect(str(root / "results.duckdb"), read_only=True)
    assert migrate.read_version(con, "v2") == 2
    assert not set(V3_COLUMNS) & {c for c, _ in _columns(con, "runs")}
    extra = json.loads(con.execute("SELECT metrics_extra FROM runs WHERE run_index = 3").fetchone()[0])
    assert extra["sched_held_fraction"] == 0.155 and extra["udp_rcvbuf_errors"] == 9  # where version 2 kept them
    con.close()

    with pytest.raises(ResultsError, match=f"needs an upgrade to {FORMAT_VERSION}"):
        Store(root, read_only=True)
    with Store(root) as store:
        assert store.format_version() == FORMAT_VERSION
        con = store.con
        _assert_columns_of_a_new_file(con)
        rows = con.execute(f"SELECT run_id, status, {', '.join(V3_COLUMNS)}, metrics_extra FROM runs "
                           "ORDER BY run_index").fetchall()
        assert [r[0] for r in rows] == [r["run_id"] for r in records]
        for row, rec in zip(rows, records, strict=True):
            values, rest = row[2:-1], json.loads(row[-1]) if row[-1] else {}
            assert not set(rest) & set(V3_COLUMNS)  # moved, not copied
            if row[1] != "ok":
                assert values == (None,) * len(V3_COLUMNS)
                continue
            for name, value in zip(V3_COLUMNS, values, strict=True):
                assert value == pytest.approx(rec["metrics"][name]), name
            assert isinstance(values[-1], int)
            assert rest == {"service_reused": rec["metrics"]["service_reused"]}  # the rest stays
        side = con.execute("SELECT run_id, host, udp_rcvbuf_errors, metrics_extra FROM receivers "
                           "WHERE host = 'b' ORDER BY run_id").fetchall()
        want = {r["run_id"]: r["receivers"][0]["metrics"] for r in records if r["status"] == "ok"}
        assert sorted(want) == [s[0] for s in side]
        for run_id, _, drops, rest in side:
            assert drops == want[run_id]["udp_rcvbuf_errors"]
            assert rest is None or "udp_rcvbuf_errors" not in json.loads(rest)
        # reading back gives the records' metrics, whichever column or JSON they live in
        for have, rec in zip(store.runs(sweep.sweep_id), records, strict=True):
            for name, value in rec["metrics"].items():
                assert have["metrics"][name] == pytest.approx(value), name
            for hr, wr in zip(have["receivers"], rec["receivers"], strict=True):
                for name, value in wr["metrics"].items():
                    assert hr["metrics"][name] == pytest.approx(value), (hr["host"], name)
    backup = root / "results.duckdb.v2.bak"
    con = duckdb.connect(str(backup), read_only=True)
    assert migrate.read_version(con, "backup") == 2
    con.close()


def test_v3_records_store_schedule_split_and_udp_drops_in_columns(tmp_path, stream):
    sweep, plain = stream
    rec = _with_v3_metrics(plain)[2]
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(copy.deepcopy(rec))
        row = store.con.execute(f"SELECT {', '.join(V3_COLUMNS)}, metrics_extra FROM runs").fetchone()
        assert row[:-1] == tuple(pytest.approx(rec["metrics"][c]) for c in V3_COLUMNS)
        assert json.loads(row[-1]) == {"service_reused": True}
        bad = copy.deepcopy(rec)
        bad["metrics"]["udp_rcvbuf_errors"] = 2.5
        with pytest.raises(ResultsError, match=r"udp_rcvbuf_errors is 2.5; expected a whole number"):
            store.record_run(bad)


def test_retry_failed_runs_the_failed_and_missing_runs_again(tmp_path, stream):
    from roughnet.run import pending_runs

    sweep, records = stream
    failed = copy.deepcopy(records[1])
    failed.update(status="failed", failure_reason="receiver@b: config: payload too large")
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        for rec in (records[0], failed):
            store.record_run(rec)
        ids = [r.run_id for r in sweep.runs]
        assert [r.run_id for r in pending_runs(sweep, store, resume=False)] == ids
        assert [r.run_id for r in pending_runs(sweep, store, resume=True)] == ids[2:]
        assert [r.run_id for r in pending_runs(sweep, store, resume=False, retry_failed=True)] == ids[1:]
        assert store.completed_run_ids(sweep.sweep_id, include_failed=False) == {records[0]["run_id"]}
        store.record_run(records[1])  # the retried run's record replaces the failed one
        (run,) = [r for r in store.runs(sweep.sweep_id) if r["run_id"] == records[1]["run_id"]]
        assert run["status"] == "ok"


def test_listing_an_older_file_upgrades_it_once_then_reads(tmp_path, monkeypatch, stream):
    # `roughnet results` / `report` open read-only; an older file is upgraded first (backup kept),
    # as the read-only error tells users to do.
    from typer.testing import CliRunner

    from roughnet.cli import app

    sweep, plain = stream
    root = tmp_path / "res"
    _write_old(root, 2, sweep, _with_v3_metrics(plain), monkeypatch)
    out = CliRunner().invoke(app, ["results", "--results", str(root)])
    assert out.exit_code == 0, out.output
    assert sweep.sweep_id in out.output
    with Store(root, create=False, read_only=True) as store:
        assert store.format_version() == FORMAT_VERSION
    assert (root / "results.duckdb.v2.bak").exists()


def _reader(root: Path, hold_s: float) -> subprocess.Popen:
    """A process that opens the store read-only, prints how many runs it sees, holds it ``hold_s``."""
    src = Path(__file__).resolve().parents[2] / "python"
    return subprocess.Popen(
        [sys.executable, "-c",
         f"import sys, time; sys.path.insert(0, {str(src)!r}); from roughnet.results import Store; "
         f"s = Store({str(root)!r}, create=False, read_only=True, lock_wait_s=30); "
         f"print(sum(len(s.runs(x['sweep_id'])) for x in s.sweeps()), flush=True); "
         f"time.sleep({hold_s}); s.close()"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def test_a_running_sweep_can_be_read_between_its_writes(tmp_path, stream):
    """`roughnet run` (hold=False) lets readers in between runs and waits for them before a write."""
    sweep, records = stream
    root = tmp_path / "res"
    writer = Store(root, hold=False)
    try:
        writer.begin_sweep(sweep)
        writer.record_run(records[0])
        reader = _reader(root, hold_s=1.0)  # opens while the writer is between runs
        assert reader.stdout.readline().strip() == b"1", reader.communicate()[1].decode()
        writer.record_run(records[1])  # the reader still has it open: the write waits, then lands
        assert reader.communicate(timeout=60) and reader.returncode == 0
        out, errs = _reader(root, hold_s=0).communicate(timeout=60)
        assert out.strip() == b"2", errs.decode()
        # one sweep writer per folder: a second `roughnet run` is refused, naming the holder
        with pytest.raises(ResultsError, match=rf"PID {os.getpid()}"):
            Store(root, hold=False)
    finally:
        writer.close()
    Store(root, hold=False).close()  # closing let go of the folder


def test_a_holding_writer_keeps_readers_out(tmp_path, stream):
    """The default writer (hold=True) keeps the file: what hold=False is for."""
    sweep, records = stream
    root = tmp_path / "res"
    with Store(root) as writer:
        writer.begin_sweep(sweep)
        writer.record_run(records[0])
        src = Path(__file__).resolve().parents[2] / "python"
        proc = subprocess.run(
            [sys.executable, "-c",
             f"import sys; sys.path.insert(0, {str(src)!r}); from roughnet.results import Store; "
             f"Store({str(root)!r}, create=False, read_only=True, lock_wait_s=0.5)"],
            capture_output=True, timeout=60)
        assert proc.returncode != 0 and b"in use by another process" in proc.stderr


def test_retry_invalid_also_runs_the_ok_runs_judged_invalid_again(tmp_path, stream):
    from roughnet.run import pending_runs

    sweep, records = stream
    invalid = copy.deepcopy(records[1])
    invalid.update(validity="invalid", validity_reasons=["receiver b incomplete at timeout (82/150 messages)"])
    failed = copy.deepcopy(records[2])
    failed.update(status="failed", failure_reason="receiver@b: config: payload too large")
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        for rec in (records[0], invalid, failed):
            store.record_run(rec)
        ids = [r.run_id for r in sweep.runs]
        assert [r.run_id for r in pending_runs(sweep, store, resume=True)] == ids[3:]
        assert [r.run_id for r in pending_runs(sweep, store, resume=False, retry_failed=True)] == ids[2:]
        assert [r.run_id for r in pending_runs(sweep, store, resume=False, retry_invalid=True)] == ids[1:]
        store.record_run(records[1])  # the valid record replaces the invalid one: no longer to do
        assert [r.run_id for r in pending_runs(sweep, store, resume=False, retry_invalid=True)] == ids[2:]


def test_only_limits_what_the_other_flags_pick_to_the_chosen_runs(tmp_path, stream):
    """`roughnet run --only`: the chosen runs are redone even when stored; with --resume/--retry-*
    only those of them the flag picks."""
    from roughnet.run import pending_runs

    sweep, records = stream
    ids = [r.run_id for r in sweep.runs]
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(records[0])
        chosen = frozenset(ids[:2])
        assert [r.run_id for r in pending_runs(sweep, store, resume=False, only=chosen)] == ids[:2]
        assert [r.run_id for r in pending_runs(sweep, store, resume=True, only=chosen)] == ids[1:2]
        assert [r.run_id for r in pending_runs(sweep, store, resume=False, only=None)] == ids


def test_upgrade_from_v3_says_every_older_run_was_made_in_namespaces(tmp_path, monkeypatch, stream):
    sweep, plain = stream
    records = _with_v3_metrics(plain)
    root = tmp_path / "res"
    _write_old(root, 3, sweep, records, monkeypatch)
    con = duckdb.connect(str(root / "results.duckdb"), read_only=True)
    assert "backend" not in {c for c, _ in _columns(con, "runs")}
    con.close()
    with Store(root) as store:
        assert store.format_version() == FORMAT_VERSION
        _assert_columns_of_a_new_file(store.con)
        have = store.runs(sweep.sweep_id)
        assert [r["backend"] for r in have] == ["namespace"] * len(records)
        assert all(r["backend_info"] is None for r in have)


def test_v4_records_keep_backend_and_its_facts(tmp_path, stream):
    sweep, plain = stream
    rec = dict(plain[0], backend="kubernetes",
               backend_info={"backend": "kubernetes", "cluster_version": "v1.32.13",
                             "hosts": {"a": {"pod": "rn-x-a", "node": "node1", "ip": "198.19.200.5"}}})
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store.record_run(rec)
        (have,) = [r for r in store.runs(sweep.sweep_id) if r["run_id"] == rec["run_id"]]
        assert have["backend"] == "kubernetes"
        assert have["backend_info"]["hosts"]["a"]["node"] == "node1"
        out = store.export(sweep.sweep_id, "csv", tmp_path / "x.csv")
    header = out.read_text().splitlines()[0].split(",")
    assert "backend" in header and "backend_info" in header
