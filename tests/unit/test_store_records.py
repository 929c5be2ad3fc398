"""A finished run is not lost to the store (issue 26, "Nothing lost, nothing left behind").

The record goes to its run folder (atomically) before the database commit; a commit that fails names that
file and `roughnet import` / ``Store.import_records`` stores it later; Ctrl-C during the commit keeps the run;
a database locked past the wait names who holds it.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from roughnet.errors import ResultsError
from roughnet.results import Store
from roughnet.run.runner import Interrupted, store_record

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records_import", Path(__file__).parent / "fixtures" / "results" / "records.py"
)
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


@pytest.fixture
def stream():
    sweep, records = records_fixture.load()[0]
    return sweep, copy.deepcopy(records)


def _comparable(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "recorded_at"}  # when it was stored differs, the rest not


def test_a_failed_commit_keeps_the_record_file_which_imports_later(tmp_path, stream, monkeypatch):
    sweep, records = stream
    rec = records[0]
    with Store(tmp_path / "a") as store:
        store.begin_sweep(sweep)

        def broken(*args, **kwargs):
            raise duckdb.IOException("IO Error: No space left on device")

        monkeypatch.setattr(store, "_transaction", broken)
        with pytest.raises(ResultsError) as info:
            store.record_run(copy.deepcopy(rec))
        kept = store.root / "runs" / rec["sweep_id"] / rec["run_id"] / "record.json"
        msg = str(info.value)
        assert "No space left on device" in msg and str(kept) in msg and f"roughnet import {kept.parent}" in msg
        assert store.runs(sweep.sweep_id) == []  # not in the database...
        assert json.loads(kept.read_text())["run_id"] == rec["run_id"]  # ...but in its folder
        assert [p.name for p in kept.parent.iterdir() if p.name.startswith(".")] == []  # no temporary file left
        monkeypatch.undo()
        assert store.import_records(kept.parent) == [(rec["sweep_id"], rec["run_id"])]  # the same store, later
        (got,) = store.runs(sweep.sweep_id)

    # and into a database that never had the sweep: it gets a sweeps row made from the records
    with Store(tmp_path / "b") as other:
        assert other.import_records(tmp_path / "a" / "runs") == [(rec["sweep_id"], rec["run_id"])]
        (again,) = other.runs(sweep.sweep_id)
        assert _comparable(again) == _comparable(got)
        assert other.histograms(sweep.sweep_id, rec["run_id"]) == store_hists(tmp_path / "a", sweep, rec)
        (row,) = other.sweeps()
        assert row["sweep_id"] == sweep.sweep_id and row["runs_stored"] == 1 and "imported from" in row["source"]


def store_hists(root: Path, sweep, rec) -> list:
    with Store(root, create=False, read_only=True) as s:
        return s.histograms(sweep.sweep_id, rec["run_id"])


def test_an_interrupt_during_the_commit_keeps_the_finished_run(tmp_path, stream, monkeypatch):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        real = store._transaction
        calls = []

        def interrupted_once(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise Interrupted("SIGINT")  # Ctrl-C while the transaction runs: rolled back
            return real(*args, **kwargs)

        monkeypatch.setattr(store, "_transaction", interrupted_once)
        with pytest.raises(Interrupted):
            store_record(store, copy.deepcopy(records[0]))
        assert [r["run_id"] for r in store.runs(sweep.sweep_id)] == [records[0]["run_id"]]


def test_a_database_locked_past_the_wait_names_its_holder(tmp_path):
    Store(tmp_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb, sys; c = duckdb.connect({str(tmp_path / 'results.duckdb')!r}); "
                               "print('open', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"open"
        with pytest.raises(ResultsError) as info:
            Store(tmp_path, lock_wait_s=0.1)
        assert f"PID {holder.pid} (`{sys.executable} -c import duckdb" in str(info.value)
        assert "after waiting 0.1 s" in str(info.value)
    finally:
        holder.stdin.close()
        holder.stdout.close()
        holder.wait(timeout=60)


def test_the_import_command_stores_kept_records(tmp_path, stream):
    from roughnet.cli import app

    sweep, records = stream
    with Store(tmp_path / "a") as store:
        store.begin_sweep(sweep)
        for rec in records:
            store.record_run(copy.deepcopy(rec))
    out = CliRunner().invoke(app, ["import", str(tmp_path / "a" / "runs" / sweep.sweep_id),
                                   "--results", str(tmp_path / "b")])
    assert out.exit_code == 0, out.output
    assert f"{len(records)} run(s) stored" in out.output
    with Store(tmp_path / "b", create=False, read_only=True) as b:
        assert sorted(r["run_id"] for r in b.runs(sweep.sweep_id)) == sorted(r["run_id"] for r in records)
    bad = CliRunner().invoke(app, ["import", str(tmp_path / "nothing-here"), "--results", str(tmp_path / "b")])
    assert bad.exit_code == 1 and "no record.json" in bad.output


class _ClosesThenInterrupted:
    """A connection whose close() is interrupted right after it closed (the CLI's handler raises Interrupted at any
    bytecode): found by tests/integration/test_self_chaos.py's benchmark (1 in 100 interrupts)."""

    def __init__(self, con):
        self._real = con
        self.fired = False

    def __getattr__(self, name):
        return getattr(self._real, name)

    def close(self):
        self._real.close()
        if not self.fired:
            self.fired = True
            raise Interrupted("SIGTERM")


def test_an_interrupt_right_after_the_store_closed_its_connection_keeps_the_run(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path, hold=False) as store:
        store.begin_sweep(sweep)
        store._con = _ClosesThenInterrupted(store.con)
        with pytest.raises(Interrupted):
            store_record(store, copy.deepcopy(records[0]))  # before: "Connection already closed!" on the retry
        assert [r["run_id"] for r in store.runs(sweep.sweep_id)] == [records[0]["run_id"]]


INTERRUPTED_IN_DUCKDB = [  # (what DuckDB raised, the signal it stands for, another error of that kind, how it surfaces)
    # the CLI handler's Interrupted raised inside DuckDB's own signal check (bench/self_chaos.py)
    pytest.param(RuntimeError("Query interrupted"), "SIGINT", RuntimeError("other"), RuntimeError,
                 id="signal-check"),
    # ... or inside a Python callback while DuckDB read a registered Arrow table (CI's self-chaos test: exit 1
    # "storing it ... failed")
    pytest.param(duckdb.InvalidInputException("Invalid Input Error: reading the schema of the object registered as "
                                              "'_roughnet_insert_workloads' failed: Interrupted: SIGTERM"),
                 "SIGTERM", duckdb.InvalidInputException("Invalid Input Error: other"), ResultsError,
                 id="arrow-read"),
]


@pytest.mark.parametrize("raised,signal,other,surfaces", INTERRUPTED_IN_DUCKDB)
def test_a_signal_inside_duckdb_during_the_commit_keeps_the_run(tmp_path, stream, monkeypatch, raised, signal, other,
                                                                surfaces):
    """DuckDB reports the CLI handler's Interrupted in its own words: the run is stored again and the interrupt
    goes on as Interrupted of that signal; any other error of the same kind is still the store's failure."""
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        real = store._transaction
        calls = []

        def interrupted_once(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise raised
            return real(*args, **kwargs)

        monkeypatch.setattr(store, "_transaction", interrupted_once)
        with pytest.raises(Interrupted, match=f"^{signal}$"):
            store_record(store, copy.deepcopy(records[0]))
        assert [r["run_id"] for r in store.runs(sweep.sweep_id)] == [records[0]["run_id"]]
        monkeypatch.setattr(store, "_transaction", lambda *a, **k: (_ for _ in ()).throw(other))
        with pytest.raises(surfaces, match="other"):
            store_record(store, copy.deepcopy(records[1]))


class _InterruptedAfterCommit:
    """A connection interrupted right after COMMIT took effect: the rollback then has no transaction."""

    def __init__(self, con):
        self._real = con
        self.fired = False

    def __getattr__(self, name):
        return getattr(self._real, name)

    def execute(self, sql, *args):
        out = self._real.execute(sql, *args)
        if sql == "COMMIT" and not self.fired:
            self.fired = True
            raise Interrupted("SIGTERM")
        return out


def test_an_interrupt_right_after_the_commit_is_an_interrupt_and_the_run_is_stored_once(tmp_path, stream):
    sweep, records = stream
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        store._con = _InterruptedAfterCommit(store.con)
        with pytest.raises(Interrupted):  # before: ResultsError "cannot rollback - no transaction is active"
            store_record(store, copy.deepcopy(records[0]))
        assert [r["run_id"] for r in store.runs(sweep.sweep_id)] == [records[0]["run_id"]]
