"""`clean` after a crash: a SIGKILLed owner's objects go, a live owner's stay, nothing else is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import ping_in_ns, root_ns_snapshot, unique_run_id
from roughnet.topo import Ledger, Topology, clean, list_leftovers, process_start_time

pytestmark = pytest.mark.root

#: Builds a topology (chain + shared segment), starts a process in it, says so, then waits to be killed.
CHILD = r"""
import sys, time
from pathlib import Path
from roughnet.runspec import Host, Link, Run, Workload
from roughnet.topo import Ledger, Topology
ledger_dir, run_id = sys.argv[1], sys.argv[2]
run = Run(scenario="t", sweep_id="t-0", run_id=run_id, index=0, params={}, seed=1, repeat=0,
          hosts=tuple(Host(h) for h in "abcd"),
          links=(Link(index=0, hosts=("a", "b")), Link(index=1, hosts=("b", "c", "d"))),
          workload=Workload(pattern="stream", protocol="udp", sender="a", receivers=("d",), payload_bytes=100))
topo = Topology(run, Ledger(run_id[:8], run_id, Path(ledger_dir)))
topo.build()
p = topo.popen("a", ["sleep", "600"])
print(p.pid, " ".join(topo.namespaces()), flush=True)
time.sleep(600)
"""


def _ns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _killed_owner(ledger_dir, run_id) -> tuple[int, list[str]]:
    """Start CHILD, wait until it built, SIGKILL it; return the pid it started and its namespaces."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(ledger_dir), run_id], stdout=subprocess.PIPE,
                             text=True)
    try:
        line = child.stdout.readline().split()
        assert line, "the child did not build its topology"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()
    return int(line[0]), line[1:]


def test_sigkilled_owner_leaves_objects_that_clean_removes_completely(tmp_path, make_run):
    before_root = root_ns_snapshot()
    live_run = make_run(["x", "y"], [("x", "y")])
    live = Topology(live_run, Ledger(live_run.run_id[:8], live_run.run_id, tmp_path))
    live.build()
    try:
        dead_id = unique_run_id()
        sleeper, dead_ns = _killed_owner(tmp_path, dead_id)
        assert len(dead_ns) == 5
        assert set(dead_ns) <= _ns_list()  # the crash left them
        assert process_start_time(sleeper) is not None  # and its process, now an orphan

        found = {(x.kind, x.name.split()[0]) for x in list_leftovers(tmp_path) if x.removable}
        assert {("netns", ns) for ns in dead_ns} | {("process", str(sleeper))} <= found
        assert not any(ns in name for _, name in found for ns in live.namespaces())

        would = clean(tmp_path, dry_run=True)
        assert len(would) == len(dead_ns) + 2 and set(dead_ns) <= _ns_list()

        removed = clean(tmp_path)
        assert sum(r.startswith("netns ") for r in removed) == 5
        assert any(r.startswith(f"process {sleeper} ") for r in removed)
        assert not set(dead_ns) & _ns_list()
        assert process_start_time(sleeper) is None
        assert not (tmp_path / f"{dead_id[:8]}.jsonl").exists()

        # the live owner's topology is untouched and still works
        assert set(live.namespaces()) <= _ns_list() and live.ledger.path.exists()
        assert ping_in_ns(live.ns("x"), live.address("y", "x")) == 1
        assert clean(tmp_path) == []
        assert list_leftovers(tmp_path) == [] or all(not x.removable for x in list_leftovers(tmp_path))
    finally:
        live.teardown()
    assert live.teardown_errors == []
    assert root_ns_snapshot() == before_root


def test_a_new_ledger_for_a_dead_runs_token_cleans_its_leftovers_first(tmp_path, make_run):
    run_id = unique_run_id()
    _, dead_ns = _killed_owner(tmp_path, run_id)
    assert set(dead_ns) <= _ns_list()
    # the same run again (e.g. `roughnet run --resume` after a crash): same token, same names
    again = make_run(["a", "b", "c", "d"], [("a", "b"), ("b", "c", "d")], run_id=run_id)
    topo = Topology(again, Ledger(run_id[:8], run_id, tmp_path))
    try:
        topo.build()
        assert ping_in_ns(topo.ns("a"), topo.address("d", "a")) == 1
        kinds = [e["kind"] for e in topo.ledger.entries()]
        assert kinds.count("owner") == 1 and "process" not in kinds
    finally:
        topo.teardown()
    assert not set(dead_ns) & _ns_list()


def test_unledgered_rn_namespaces_are_reported_never_removed(tmp_path):
    orphan = f"rn-t{os.getpid()}-orphan"
    subprocess.run(["ip", "netns", "add", orphan], check=True)
    try:
        report = [x for x in list_leftovers(tmp_path) if x.name == orphan]
        assert len(report) == 1 and not report[0].removable and "left alone" in str(report[0])
        assert clean(tmp_path) == []
        assert orphan in _ns_list()
    finally:
        subprocess.run(["ip", "netns", "delete", orphan], check=True)
