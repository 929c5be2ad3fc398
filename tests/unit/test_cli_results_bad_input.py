"""`roughnet results`, `report`, `export`: a results folder without a database or a sweep it does not hold is bad
input, exit 2 with the message naming what is there, and nothing is created (as `watch` and `compare` do)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app
from roughnet.errors import ResultsError, UnknownResults
from roughnet.results import Store

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records_cli_bad_input", Path(__file__).parent / "fixtures" / "results" / "records.py")
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad") / "res"
    sweep, records = records_fixture.load()[0]
    with Store(root) as store:
        store.begin_sweep(sweep)
        store.record_run(copy.deepcopy(records[0]))
    return root, sweep.sweep_id


@pytest.mark.parametrize("argv", [["results", "nosuch"], ["report", "nosuch"], ["export", "nosuch", "--format", "csv"]])
def test_an_unknown_sweep_is_exit_2_naming_the_stored_ones(folder, argv):
    root, sweep_id = folder
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    out = CliRunner().invoke(app, [*argv, "--results", str(root)])
    assert out.exit_code == 2, out.output
    assert "no sweep matches 'nosuch'" in out.output and sweep_id in out.output
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


@pytest.mark.parametrize("argv", [["results"], ["report", "x"], ["export", "x", "--format", "csv"]])
def test_a_folder_without_results_is_exit_2_and_stays_absent(tmp_path, argv):
    out = CliRunner().invoke(app, [*argv, "--results", str(tmp_path / "none")])
    assert out.exit_code == 2 and "no results database" in out.output, out.output
    assert not (tmp_path / "none").exists()


def test_the_error_is_still_a_results_error():
    assert issubclass(UnknownResults, ResultsError) and UnknownResults.exit_code == 2 and ResultsError.exit_code == 1
