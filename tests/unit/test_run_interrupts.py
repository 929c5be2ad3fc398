"""Interrupts and failures never skip a run's teardown (issue 26, "Nothing lost, nothing left behind").

``execute_run`` with a fake backend (no namespaces: the environment only counts its teardowns and removes the
ledger as a real teardown does), the CLI's signal handler, and the haste a second interrupt asks for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from roughnet import services, topo
from roughnet.errors import RunBusyError, TopologyError
from roughnet.run import runner
from roughnet.run.runner import Interrupted, Preflight, execute_run
from roughnet.runspec import Host, Link, Run, Service, Workload
from roughnet.topo import system
from roughnet.topo.clean import own_leftovers
from roughnet.topo.ledger import Ledger, read_ledger


class FakeEnvironment:
    """An environment that builds nothing; ``teardown`` counts and removes the ledger (what the real one ends
    with); ``fail_teardowns`` raises this exception from the first call(s), as a signal arriving mid-teardown."""

    def __init__(self, ledger, fail_teardowns=()):
        self.ledger = ledger
        self.teardowns = 0
        self.fail_teardowns = list(fail_teardowns)

    def build(self):
        pass

    def describe(self):
        return {"fake": True}

    def teardown(self):
        self.teardowns += 1
        if self.fail_teardowns:
            raise self.fail_teardowns.pop(0)
        self.ledger.remove_file()


class FakeBackend:
    name = "fake"

    def __init__(self, env_error=None, fail_teardowns=()):
        self.env_error = env_error
        self.fail_teardowns = fail_teardowns
        self.env = None

    def describe(self):
        return {}

    def environment(self, run, ledger, engines, folder):
        if self.env_error is not None:
            raise self.env_error
        self.env = FakeEnvironment(ledger, self.fail_teardowns)
        return self.env


def _run(run_id: str, with_service: bool = True) -> Run:
    return Run(scenario="t", sweep_id="t-00000000", run_id=run_id, index=0, params={}, seed=1, repeat=0,
               hosts=(Host("a"), Host("b")), links=(Link(index=0, hosts=("a", "b")),),
               workload=Workload(pattern="stream", protocol="mqtt", sender="a", receivers=("b",), payload_bytes=100),
               services=(Service(kind="mosquitto", host="b"),) if with_service else ())


@pytest.fixture
def harness(tmp_path, monkeypatch):
    """execute_run without namespaces: ledgers in tmp_path, no links, counters or agents; one fake service."""
    ledgers = tmp_path / "ledger"
    monkeypatch.setattr(topo, "Ledger", lambda token, run_id: Ledger(token, run_id, ledgers))
    monkeypatch.setattr(runner, "apply_links", lambda topology, run, engines: {})
    monkeypatch.setattr(runner, "tcp_counters", lambda topology, host: {})
    monkeypatch.setattr(runner, "measure", lambda *a, **k: None)
    monkeypatch.setattr(services, "start_services", lambda run, topology, artifacts: ["a service"])
    monkeypatch.setattr(system, "_hurry", threading.Event())  # a second interrupt's haste stays in its test
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    return ledgers, artifacts


def _pf(run: Run, backend: FakeBackend) -> Preflight:
    return Preflight(agent_path=None, agent={}, caps=None, engines={run.run_id: {}}, backend=backend)


def test_an_interrupt_while_the_services_stop_still_tears_the_run_down(harness, monkeypatch):
    ledgers, artifacts = harness
    run = _run("a1b2c3d4e5f6")
    backend = FakeBackend()

    def interrupted_stop(handles, record):
        raise Interrupted("SIGINT")  # Ctrl-C while the services stop

    monkeypatch.setattr(runner, "_stop_services", interrupted_stop)
    with pytest.raises(Interrupted):
        execute_run(run, _pf(run, backend), artifacts)
    assert backend.env.teardowns == 1
    assert not (ledgers / "a1b2c3d4.jsonl").exists()


def test_an_interrupt_in_the_middle_of_the_teardown_it_led_to_is_finished(harness, monkeypatch):
    """First interrupt at the services' stop, another in the middle of the teardown it leads to (a KeyboardInterrupt:
    what a caller without the CLI's handler gets at every Ctrl-C): the teardown is run again to its end."""
    ledgers, artifacts = harness
    run = _run("a1b2c3d4e5f7")
    backend = FakeBackend(fail_teardowns=[KeyboardInterrupt()])

    def interrupted_stop(handles, record):
        raise Interrupted("SIGINT")

    monkeypatch.setattr(runner, "_stop_services", interrupted_stop)
    with pytest.raises((Interrupted, KeyboardInterrupt)):
        execute_run(run, _pf(run, backend), artifacts)
    assert backend.env.teardowns == 2
    assert not (ledgers / "a1b2c3d4.jsonl").exists()


def test_two_interrupts_in_the_teardown_itself_still_finish_it(harness, monkeypatch):
    ledgers, artifacts = harness
    run = _run("a1b2c3d4e5f8")
    backend = FakeBackend(fail_teardowns=[Interrupted("SIGINT"), KeyboardInterrupt()])
    monkeypatch.setattr(runner, "measure", lambda *a, **k: (_ for _ in ()).throw(Interrupted("SIGTERM")))
    monkeypatch.setattr(runner, "_stop_services", lambda handles, record: None)
    with pytest.raises((Interrupted, KeyboardInterrupt)):
        execute_run(run, _pf(run, backend), artifacts)
    assert backend.env.teardowns == 3
    assert not (ledgers / "a1b2c3d4.jsonl").exists()


def test_a_failure_while_the_environment_is_made_removes_the_ledger(harness):
    ledgers, artifacts = harness
    run = _run("b1b2c3d4e5f6", with_service=False)
    record = execute_run(run, _pf(run, FakeBackend(env_error=TopologyError("no namespaces here"))), artifacts)
    assert record["status"] == "failed" and "no namespaces here" in record["failure_reason"]
    assert not (ledgers / "b1b2c3d4.jsonl").exists()


def test_the_same_run_live_elsewhere_is_refused_before_anything_is_made(harness, tmp_path):
    """A live owner (here: a sleeping child) holds the token: RunBusyError (exit code 2) goes up, not a record;
    the other run's ledger is left as it was."""
    ledgers, artifacts = harness
    run = _run("c1b2c3d4e5f6", with_service=False)
    child = subprocess.Popen(["sleep", "600"])
    try:
        path = ledgers / "c1b2c3d4.jsonl"
        ledgers.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"kind":"owner","pid":{child.pid},"start_time":{topo.process_start_time(child.pid)},'
                        f'"run_id":"c1b2c3d4e5f6"}}\n{{"kind":"netns","name":"rn-c1b2c3d4-a"}}\n')
        before = path.read_text()
        backend = FakeBackend()
        with pytest.raises(RunBusyError) as info:
            execute_run(run, _pf(run, backend), artifacts)
        assert info.value.exit_code == 2
        assert f"pid {child.pid}" in str(info.value) and "is being run right now" in str(info.value)
        assert backend.env is None and path.read_text() == before
    finally:
        child.kill()
        child.wait()


def test_a_ledger_is_never_empty_and_a_live_token_has_one_owner(tmp_path):
    first = Ledger("d1b2c3d4", "d1b2c3d4e5f6", tmp_path)
    assert [e["kind"] for e in read_ledger(first.path)] == ["owner"]
    with pytest.raises(RunBusyError):
        Ledger("d1b2c3d4", "d1b2c3d4e5f6", tmp_path)  # this process owns it and is alive
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d1b2c3d4.jsonl"]  # no temporary file left
    first.remove_file()


def test_own_leftovers_lists_what_this_process_left(tmp_path):
    led = Ledger("e1b2c3d4", "e1b2c3d4e5f6", tmp_path)
    led.add("path", path="/var/lib/roughnet/work/e1b2c3d4-not-there")
    left = own_leftovers(tmp_path)
    assert {x.kind for x in left} == {"path", "ledger"} and all(x.run_id == "e1b2c3d4e5f6" for x in left)
    assert own_leftovers(tmp_path, pid=os.getppid()) == []
    led.remove_file()
    assert own_leftovers(tmp_path) == []


@pytest.fixture
def cli_handlers(monkeypatch):
    """The CLI's handlers installed for one test, the previous ones restored after it."""
    from roughnet.cli import common as cli

    monkeypatch.setattr(system, "_hurry", threading.Event())
    old = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        yield cli._install_signal_handlers()
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])


def test_the_second_signal_asks_for_a_quick_teardown_and_later_ones_are_ignored(cli_handlers, capfd):
    """The first Ctrl-C or SIGTERM interrupts; the second raises nothing (an exception landing in the first one's
    cleanup breaks it: seen as "release unlocked lock" in a real run) but asks for haste and says so; later ones
    are ignored."""
    with pytest.raises(Interrupted):
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs in this thread right after the call
    assert not system.hurrying()
    os.kill(os.getpid(), signal.SIGTERM)
    assert system.hurrying()
    said = capfd.readouterr().err
    assert "tearing down quickly" in said and "roughnet clean" in said
    os.kill(os.getpid(), signal.SIGINT)  # a third: ignored while the quick teardown finishes
    cli_handlers["done"] = True
    os.kill(os.getpid(), signal.SIGINT)
    assert cli_handlers["hits"] == 4


def test_haste_kills_a_process_that_ignores_sigterm_without_waiting_out_the_grace(monkeypatch):
    """With a grace of an hour, ending a process that ignores SIGTERM returns at once once haste is asked for
    (bounded by a join of 60 s; without haste it would take the hour)."""
    monkeypatch.setattr(system, "_hurry", threading.Event())
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; exec sleep 600"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        st = topo.process_start_time(proc.pid)
        out: dict = {}
        worker = threading.Thread(target=lambda: out.update(r=system.end_processes([(proc.pid, st)],
                                                                                   grace_s=3600)))
        system.hurry()
        worker.start()
        threading.Thread(target=proc.wait, daemon=True).start()  # our child: reaped when it dies
        worker.join(timeout=60)
        assert not worker.is_alive(), "end_processes waited out the grace despite the haste"
        ended, left = out["r"]
        assert ended[proc.pid].startswith("SIGKILL") and left == {}
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_execute_run_keeps_no_ledger_when_the_run_folder_cannot_be_written(harness, tmp_path):
    ledgers, _ = harness
    run = _run("f1b2c3d4e5f6", with_service=False)
    record = execute_run(run, _pf(run, FakeBackend()), Path(tmp_path / "missing" / "folder"))
    assert record["status"] == "failed" and "run.json" in str(record["failure_reason"])
    assert not (ledgers / "f1b2c3d4.jsonl").exists()


#: `roughnet calibrate` whose calibration gets a SIGTERM in the middle (the namespaces are the calibration's:
#: here a stand-in that records that its finally ran).
CALIBRATE_SIGTERM = r"""
import os, signal, sys
import roughnet.binaries, roughnet.calibrate
from roughnet import cli
os.geteuid = lambda: 0
roughnet.binaries.require_binary = lambda name: "/bin/true"
def calibration(*args, **kwargs):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        print("torn down", flush=True)
roughnet.calibrate.calibrate = calibration
sys.argv = ["roughnet", "calibrate", "--profile", "lte"]
cli.main()
"""


def test_calibrate_tears_down_and_exits_130_on_sigterm():
    out = subprocess.run([sys.executable, "-c", CALIBRATE_SIGTERM], capture_output=True, text=True, timeout=120)
    assert out.returncode == 130, (out.returncode, out.stdout, out.stderr)  # not -15: killed with no teardown
    assert "torn down" in out.stdout and "interrupted (SIGTERM)" in out.stderr


def test_clean_of_one_run_refuses_a_live_one_and_leaves_the_others(tmp_path):
    """`roughnet clean RUN`: a live run's ledger is refused (and kept); a dead run not named is not touched."""
    from roughnet.topo import clean

    live = Ledger("a9b2c3d4", "a9b2c3d4e5f6", tmp_path)  # owned by this (live) process
    dead = tmp_path / "b9b2c3d4.jsonl"
    dead.write_text('{"kind":"owner","pid":1,"start_time":-1,"run_id":"b9b2c3d4e5f6"}\n')  # not pid 1 any more
    with pytest.raises(TopologyError, match="still running"):
        clean(tmp_path, run="a9b2c3d4e5f6")
    assert live.path.exists() and dead.exists()
    assert clean(tmp_path, run="b9b2c3d4") == [f"ledger b9b2c3d4.jsonl ({dead})"]
    assert live.path.exists() and not dead.exists()
    live.remove_file()


def test_after_an_interrupt_the_cli_lists_what_the_teardown_left_and_names_clean(tmp_path, monkeypatch, capfd):
    import importlib

    from roughnet.cli import common as cli

    clean_mod = importlib.import_module("roughnet.topo.clean")  # (roughnet.topo.clean is also the function)
    real = clean_mod.own_leftovers
    monkeypatch.setattr(clean_mod, "own_leftovers", lambda: real(tmp_path))
    assert cli._say_left_behind("the current run's teardown") is False  # nothing left: nothing said
    assert capfd.readouterr().err == ""
    led = Ledger("c9b2c3d4", "c9b2c3d4e5f6", tmp_path)
    led.add("path", path="/var/lib/roughnet/work/c9b2c3d4-not-there")
    assert cli._say_left_behind("the current run's teardown") is True
    said = " ".join(capfd.readouterr().err.split())
    assert "the current run's teardown was cut short and left behind" in said
    assert "/var/lib/roughnet/work/c9b2c3d4-not-there" in said and str(led.path) in said
    assert "`roughnet clean c9b2c3d4e5f6` removes it once this roughnet has exited" in said
    led.remove_file()


def test_a_signal_inside_duckdb_is_the_interrupt_it_stands_for():
    """Ctrl-C or SIGTERM landing inside one of the store's queries comes out of DuckDB as RuntimeError("Query
    interrupted") or a duckdb.Error naming the Interrupted; `duckdb_interrupts` turns those (and only those) back
    into Interrupted (test_self_chaos: a SIGTERM while the store created its tables, a SIGINT while the sweep
    began, each exited 1 with a traceback)."""
    import duckdb

    from roughnet.run.runner import duckdb_interrupts

    with pytest.raises(Interrupted, match="SIGINT"):
        with duckdb_interrupts():
            raise RuntimeError("Query interrupted")
    with pytest.raises(Interrupted, match="SIGTERM"):
        with duckdb_interrupts():
            raise duckdb.InvalidInputException("Invalid Input Error: Python exception: Interrupted: SIGTERM")
    with pytest.raises(RuntimeError, match="disk full"):  # anything else goes on as itself
        with duckdb_interrupts():
            raise RuntimeError("disk full")
    con = duckdb.connect()
    with pytest.raises(duckdb.CatalogException):
        with duckdb_interrupts():
            con.execute("SELECT * FROM no_such_table")
