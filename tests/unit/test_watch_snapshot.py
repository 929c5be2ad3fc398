"""`roughnet watch`'s data and text (issue 29), without namespaces: report/live.py against the fixture sweeps
(tests/unit/fixtures/results/records.py) with a run in progress laid out as the runner lays it out, and the
CLI's refusals. tests/integration/test_watch.py follows a real running sweep."""

from __future__ import annotations

import copy
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app
from roughnet.cli.watch import bar, sparkline
from roughnet.errors import ResultsError
from roughnet.report import live
from roughnet.results import Store

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records_watch_snapshot", Path(__file__).parent / "fixtures" / "results" / "records.py")
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


@pytest.fixture
def folder(tmp_path):
    """The fixture sweeps with the first sweep's last run not stored yet (one run of it to go)."""
    root = tmp_path / "res"
    sweeps = records_fixture.load()
    with Store(root) as store:
        for sweep, records in sweeps:
            store.begin_sweep(sweep)
            for rec in records[:-1] if sweep is sweeps[0][0] else records:
                store.record_run(copy.deepcopy(rec))
    return root, sweeps[0]


def _in_progress(root: Path, sweep_id: str, run: dict, lines: dict[str, list[str]]) -> Path:
    d = root / "runs" / sweep_id / run["run_id"]
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"run_id": run["run_id"], "index": run["index"], "params": run["params"]}))
    for name, body in lines.items():
        (d / f"agent-{name}.jsonl").write_text("\n".join(body))
    return d


def _interval(t_s: int, messages: int) -> str:
    return json.dumps({"v": 1, "type": "interval", "t_ms": t_s * 1000, "messages": messages,
                       "bytes": messages * 100, "rate_bps": messages * 800.0, "role": "receiver"})


@pytest.fixture
def writer(folder):
    """A process holding the folder's writer.lock as `roughnet run` does (flock, its PID in the file)."""
    root, _ = folder
    script = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
              "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode()); "
              "print('held', flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", script, str(root / "writer.lock")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    yield p.pid
    p.stdin.close()
    p.stdout.close()
    p.wait(timeout=10)


def test_sparkline_scales_to_the_maximum_and_leaves_silence_blank():
    assert sparkline([0, 1, 2, 4, 8]) == " ▁▂▄█"
    assert sparkline([0, 0]) == "  " and sparkline([]) == ""
    assert sparkline(list(range(1, 200)), width=10) == sparkline(list(range(190, 200)), width=10)
    assert len(sparkline(list(range(1, 200)))) == 60


def test_bar_fills_its_width_in_proportion():
    assert bar(0, 4, width=8) == "░" * 8 + " 0 %"
    assert bar(2, 4, width=8) == "█" * 4 + "░" * 4 + " 50 %"
    assert bar(5, 4, width=8) == "█" * 8 + " 100 %" and bar(0, 0, width=4) == "░" * 4 + " 0 %"


def test_a_snapshot_has_the_stored_runs_and_the_run_in_progress_with_its_series(folder, writer):
    root, (sweep, records) = folder
    last = records[-1]
    _in_progress(root, sweep.sweep_id, last, {
        "b-receiver": [json.dumps({"v": 1, "type": "ready"}), _interval(1, 10), _interval(2, 0), _interval(3, 30),
                       '{"v": 1, "type": "interv'],  # the line the agent is writing: left for the next look
        "a-sender": [_interval(1, 40), json.dumps({"v": 1, "type": "result", "role": "sender"})],
    })
    s = live.snapshot(root, sweep.scenario)
    assert s.sweep_id == sweep.sweep_id and s.planned == len(sweep.runs) == len(records)
    assert s.stored == len(records) - 1 and not s.complete and not s.over and s.writer_pid == writer
    assert [row["run"] for row in s.rows] == [r["run_id"] for r in records[:-1]]
    assert s.headers[:2] == ["#", "run"] and sum(s.statuses.values()) == s.stored
    c = s.current
    assert c is not None and c.run_id == last["run_id"] and c.index == last["index"] and c.params == last["params"]
    flows = {f.name: f for f in c.flows}
    assert set(flows) == {"a-sender", "b-receiver"}
    rx = flows["b-receiver"]
    assert rx.role == "receiver" and rx.points == [(1.0, 10, 8000.0), (2.0, 0, 0.0), (3.0, 30, 24000.0)]
    assert rx.messages == 40 and rx.intervals == 3 and not rx.finished
    assert flows["a-sender"].finished and flows["a-sender"].messages == 40


def test_without_a_writer_nothing_is_in_progress_and_the_sweep_is_over(folder):
    root, (sweep, records) = folder
    _in_progress(root, sweep.sweep_id, records[-1], {"b-receiver": [_interval(1, 5)]})
    (root / "writer.lock").write_text("999999999")  # a lock file its writer left: no such process
    s = live.snapshot(root, sweep.sweep_id)
    assert s.writer_pid is None and s.current is None and s.over and not s.complete


def test_a_pid_that_does_not_hold_the_lock_is_not_the_writer(folder):
    root, _ = folder
    (root / "writer.lock").write_text(str(os.getpid()))  # alive, but holds no flock on the file
    assert live.writer_pid(root) is None
    fd = os.open(root / "writer.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert live.writer_pid(root) == os.getpid()
    finally:
        os.close(fd)


def test_the_newest_sweep_is_the_default_and_a_stored_run_is_never_in_progress(folder):
    root, (sweep, records) = folder
    s = live.snapshot(root)
    with Store(root, create=False, read_only=True) as store:
        newest = max(store.sweeps(), key=lambda x: (str(x["created_at"]), x["sweep_id"]))
    assert s.sweep_id == newest["sweep_id"] != sweep.sweep_id  # the fixture's last sweep, begun last
    d = _in_progress(root, sweep.sweep_id, records[0], {})  # stored already, its record.json gone
    (d / "record.json").unlink(missing_ok=True)
    assert live._current(root / "runs" / sweep.sweep_id, {records[0]["run_id"]}) is None
    assert live._current(root / "runs" / sweep.sweep_id, set()).run_id == records[0]["run_id"]


def test_an_unknown_sweep_or_folder_is_refused(folder, tmp_path):
    root, _ = folder
    with pytest.raises(ResultsError, match="no sweep matches 'nosuch'"):
        live.snapshot(root, "nosuch")
    with pytest.raises(ResultsError, match="no results database"):
        live.snapshot(tmp_path / "elsewhere")


@pytest.mark.parametrize("args, words", [
    (["nosuch"], "no sweep matches 'nosuch'"),
    (["--interval", "0"], "--interval must be between 0.2 and 60"),
    (["--wait", "-1"], "--wait must be between 0 and 3600"),
])  # fmt: skip
def test_the_cli_refuses_bad_input_with_exit_2(folder, args, words):
    root, _ = folder
    out = CliRunner().invoke(app, ["watch", *args, "--results", str(root)])
    assert out.exit_code == 2 and words in out.output, out.output


def test_the_cli_refuses_a_folder_without_results_at_once(tmp_path):
    out = CliRunner().invoke(app, ["watch", "--results", str(tmp_path / "none")])
    assert out.exit_code == 2 and "no results database" in out.output and not (tmp_path / "none").exists()


def test_once_prints_the_screen_and_a_log_follows_to_the_end(folder):
    root, (sweep, records) = folder
    out = CliRunner().invoke(app, ["watch", sweep.sweep_id, "--results", str(root), "--once"])
    assert out.exit_code == 0, out.output
    assert f"{len(records) - 1} of {len(records)} runs stored" in out.output and "no roughnet run writes it" in out.output
    out = CliRunner().invoke(app, ["watch", sweep.sweep_id, "--results", str(root)])
    lines = out.output.splitlines()
    assert out.exit_code == 0 and sum(1 for x in lines if x.startswith("stored ")) == len(records) - 1, out.output
    assert lines[-1].startswith("no roughnet run writes") and "--resume" in lines[-1], out.output


def test_a_log_prints_each_run_once_when_a_resumed_sweep_stores_one_out_of_plan_order():
    from types import SimpleNamespace

    from roughnet.cli.watch import _log_lines

    def look(ids):
        rows = [{"#": str(i), "run": f"run{i:08d}", "status": "ok"} for i in ids]
        return SimpleNamespace(rows=rows, headers=["#", "run", "status"], planned=4, current=None)

    seen: set[str] = set()
    first, _ = _log_lines(look([0, 1, 3]), seen, None)
    then, _ = _log_lines(look([0, 1, 2, 3]), seen, None)  # run 2, resumed, lands between stored ones
    assert [x.split(":")[0] for x in first] == ["stored 1/4", "stored 2/4", "stored 3/4"]
    assert then == ["stored 4/4: #2 run00000002  status=ok"]
