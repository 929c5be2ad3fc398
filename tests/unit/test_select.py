"""`roughnet run --only`: choosing runs of a planned sweep by parameter, run id or index (no root)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app
from roughnet.errors import SpecError
from roughnet.plan import plan_sweep
from roughnet.select import select_only

V2V_LOSS = Path(__file__).resolve().parents[2] / "scenarios" / "v2v-loss.toml"


@pytest.fixture(scope="module")
def sweep():
    return plan_sweep(V2V_LOSS)  # 3 protocols x 5 drop rates x 3 payloads


def _params(sweep, ids):
    return sorted((r.params["protocol"], r.params["loss"], r.params["payload"]) for r in sweep.runs if r.run_id in ids)


def test_keys_narrow_each_other_and_values_of_one_key_add_up(sweep):
    ids = select_only(sweep, ["protocol=zenoh", "loss=25%"])
    assert _params(sweep, ids) == [("zenoh", "25%", p) for p in ("10 KB", "100 KB", "500 KB")]
    ids = select_only(sweep, ["loss=0%", "loss = 25%", "payload=500kb"])  # spaces and case do not matter
    assert len(ids) == 6 and {p for _, _, p in _params(sweep, ids)} == {"500 KB"}
    assert select_only(sweep, None) is None and select_only(sweep, []) is None


def test_run_ids_and_indexes_pick_runs_and_narrow_a_parameter_choice(sweep):
    runs = sweep.runs
    assert select_only(sweep, [runs[3].run_id, "7"]) == {runs[3].run_id, runs[7].run_id}
    # with a parameter: only the given runs that also match it
    zenoh = next(r for r in runs if r.params["protocol"] == "zenoh")
    kafka = next(r for r in runs if r.params["protocol"] == "kafka")
    assert select_only(sweep, [zenoh.run_id, kafka.run_id, "protocol=zenoh"]) == {zenoh.run_id}


@pytest.mark.parametrize("expr,message", [
    ("rate=5", r"'rate' is not a swept key .* \(swept: protocol, loss, payload\)"),
    ("loss=30%", r"no run has loss = '30%' \(values: 0%, 5%, 10%, 15%, 25%\)"),
    ("loss=", r"no run has loss = ''"),
    ("0123456789ab", r"no run of .* has this run id"),
    ("45", r"no run 45 in .* \(runs 0 to 44\)"),
    ("zenoh", r"expected KEY=VALUE \(a swept key\), a run id \(12 hex digits\) or a run index"),
])
def test_bad_expressions_are_named(sweep, expr, message):
    with pytest.raises(SpecError, match=message):
        select_only(sweep, [expr])


def test_expressions_that_leave_no_run_are_an_error(sweep):
    other = next(r for r in sweep.runs if r.params["protocol"] != "zenoh")
    with pytest.raises(SpecError, match="matches all of them"):
        select_only(sweep, ["protocol=zenoh", other.run_id])


def test_cli_refuses_a_bad_only_with_exit_2_and_creates_nothing(tmp_path):
    res = tmp_path / "res"
    out = CliRunner().invoke(app, ["run", str(V2V_LOSS), "--results", str(res), "--only", "speed=9"])
    assert out.exit_code == 2, out.output
    assert "--only speed=9" in out.output and "not a swept key" in out.output
    assert not res.exists()
