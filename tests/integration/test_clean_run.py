"""A real `roughnet run` killed, then `roughnet clean`: nothing of the run still exists when clean returns;
two runs of one scenario at the same time: both run or the second is refused (exit 2), never a traceback.

Each test runs a scenario of its own (a unique name: its own run ids, ledger token and namespaces), so that
other runs on the machine are never touched: `roughnet clean RUN` names the run it cleans.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from cli_run import ROUGHNET, needs
from roughnet.services.lifecycle import _which
from roughnet.topo.ledger import DEFAULT_LEDGER_DIR, read_ledger
from roughnet.topo.system import pids_in_namespaces

pytestmark = pytest.mark.root

#: Longest a test waits for something a working run does within a second or two (a bound, not a measurement).
WAIT_S = 60.0


def _scenario(tmp_path: Path, messages: int = 100000) -> Path:
    """Two hosts, a wire link with delay (roughnet-wire runs), mosquitto on b, an MQTT stream that lasts
    (100000 messages at 200 msg/s: minutes) unless ``messages`` says otherwise."""
    name = f"clean-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
[scenario]
name = "{name}"
seed = 1
timeout = "900 s"

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
engine = "wire"
delay = "5 ms"
rate = "10 Mbit/s"

[[service]]
kind = "mosquitto"
host = "b"

[workload]
pattern = "stream"
protocol = "mqtt"
from = "a"
to = ["b"]
messages = {messages}
rate = "200 msg/s"
payload = "100 B"
""")
    return path


def _run_id(path: Path) -> str:
    out = subprocess.run([*ROUGHNET, "show", str(path)], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "200"})
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1] == "0":
            return cells[2]
    raise AssertionError(f"no run id in `roughnet show`:\n{out.stdout}")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of ``pid`` as /proc has it, zombies included; None when there is no such pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return rest[0], int(rest[19])


def _wait_for_agents(ledger: Path, run: subprocess.Popen) -> list[dict]:
    """The ledger's entries once both agents of the run are in it (and the run still runs)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert run.poll() is None, f"roughnet run ended early ({run.returncode}): {run.stderr.read()[-3000:]}"
        entries = read_ledger(ledger)
        if sum(e.get("kind") == "process" and str(e.get("argv0", "")).endswith("roughnet-agent")
               for e in entries) >= 2:
            return entries
        time.sleep(0.1)
    raise AssertionError(f"the run's agents did not start within {WAIT_S:.0f} s; ledger: {read_ledger(ledger)}")


@needs("mqtt")
def test_clean_after_a_killed_run_returns_once_its_processes_are_gone(tmp_path):
    if _which("mosquitto") is None:
        pytest.skip("mosquitto is not installed (make)")
    scenario = _scenario(tmp_path)
    run_id = _run_id(scenario)
    ledger = DEFAULT_LEDGER_DIR / f"{run_id[:8]}.jsonl"
    run = subprocess.Popen([*ROUGHNET, "run", str(scenario), "--no-report", "--results", str(tmp_path / "res")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        entries = _wait_for_agents(ledger, run)
        namespaces = [e["name"] for e in entries if e.get("kind") == "netns"]
        procs = {int(e["pid"]): int(e["start_time"]) for e in entries if e.get("kind") == "process"}
        for pids in pids_in_namespaces(namespaces).values():
            for pid in pids:
                st = _stat(pid)
                if st is not None:
                    procs.setdefault(pid, st[1])
        names = {str(e.get("argv0")).rsplit("/", 1)[-1] for e in entries if e.get("kind") == "process"}
        assert {"roughnet-wire", "mosquitto", "roughnet-agent"} <= names
        assert all(_stat(pid) is not None for pid in procs)
    finally:
        run.send_signal(signal.SIGKILL)  # our own child, by pid
        run.wait(timeout=30)
        run.stderr.close()

    out = subprocess.run([*ROUGHNET, "clean", run_id], capture_output=True, text=True, timeout=120)
    still = {pid: _stat(pid) for pid, start in procs.items() if (_stat(pid) or ("", -1))[1] == start}
    assert out.returncode == 0, out.stdout + out.stderr
    assert still == {}, f"after `roughnet clean` returned these processes of the run still exist: {still}\n{out.stdout}"
    assert not ledger.exists()
    for pid in procs:
        assert f"process {pid} " in out.stdout, out.stdout
    assert not any(ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
                   for ns in namespaces)


@needs("mqtt")
def test_one_scenario_run_twice_at_once_both_run_or_the_second_is_refused_with_exit_2(tmp_path):
    """Two `roughnet run`s of one scenario into two results folders, started together: the same run ids (so the
    same ledger token and namespaces). Each either runs (exit 0) or is refused (exit 2, saying another process
    runs that run) before it makes anything; never a traceback, never both refused; nothing left behind."""
    if _which("mosquitto") is None:
        pytest.skip("mosquitto is not installed (make)")
    scenario = _scenario(tmp_path, messages=400)
    run_id = _run_id(scenario)
    runs = [subprocess.Popen([*ROUGHNET, "run", str(scenario), "--no-report", "--results", str(tmp_path / f"r{i}")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
    outs = [p.communicate(timeout=300) for p in runs]
    codes = [p.returncode for p in runs]
    for (out, errs), code in zip(outs, codes):
        assert "Traceback" not in out + errs, out + errs
        assert code in (0, 2), f"exit {code}:\n{out[-3000:]}\n{errs[-3000:]}"
        if code == 2:
            assert f"run {run_id} is being run right now by another roughnet" in " ".join(errs.split()), errs
    assert 0 in codes, codes
    assert not (DEFAULT_LEDGER_DIR / f"{run_id[:8]}.jsonl").exists()
    assert f"rn-{run_id[:8]}-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@needs("mqtt")
@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGTERM, signal.SIGINT)], ids=["once", "twice"])
def test_an_interrupted_run_leaves_nothing_and_says_so(tmp_path, signals):
    """Ctrl-C (or SIGTERM then Ctrl-C, the second while the first's teardown runs or after it) during the
    measurement: exit 130, no traceback, and nothing of the run exists any more: no process, namespace or ledger."""
    if _which("mosquitto") is None:
        pytest.skip("mosquitto is not installed (make)")
    scenario = _scenario(tmp_path)
    run_id = _run_id(scenario)
    ledger = DEFAULT_LEDGER_DIR / f"{run_id[:8]}.jsonl"
    run = subprocess.Popen([*ROUGHNET, "run", str(scenario), "--no-report", "--results", str(tmp_path / "res")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        entries = _wait_for_agents(ledger, run)
        procs = {int(e["pid"]): int(e["start_time"]) for e in entries if e.get("kind") == "process"}
        namespaces = [e["name"] for e in entries if e.get("kind") == "netns"]
        for sig in signals:
            run.send_signal(sig)
        out, errs = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, out[-2000:] + errs[-3000:]
    assert "Traceback" not in out + errs, errs
    assert "interrupted" in errs and "roughnet run" in errs, errs
    assert {pid: _stat(pid) for pid, st in procs.items() if (_stat(pid) or ("", -1))[1] == st and
            _stat(pid)[0] != "Z"} == {}
    assert not ledger.exists()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces)
