"""A cluster ledger's lifetime (alive while `cluster up` runs, then while its processes run, then `down`'s) and
its teardown by `roughnet clean`, without root: ledgers in a temporary directory, processes are `sleep`s."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roughnet.cluster import down, layout, state
from roughnet.cluster.ledger import ClusterLedger, handed_over, is_cluster_ledger
from roughnet.cluster.state import ClusterPreflightError
from roughnet.topo.ledger import owner_alive, process_alive, process_start_time, read_ledger

clean = importlib.import_module("roughnet.topo.clean")  # the module (roughnet.topo.clean is also a function)


@pytest.fixture
def roots(tmp_path, monkeypatch):
    run, data = tmp_path / "run" / "cluster", tmp_path / "data" / "cluster"
    for mod in (state, layout, down):
        monkeypatch.setattr(mod, "RUN_ROOT", run, raising=False)
        monkeypatch.setattr(mod, "DATA_ROOT", data, raising=False)
    return tmp_path / "ledger", run, data


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def _dead_pid() -> tuple[int, int | None]:
    p = subprocess.Popen(["true"])
    st = process_start_time(p.pid)
    p.wait()
    return p.pid, st


def test_run_ledgers_keep_their_meaning():
    me = os.getpid()
    alive = [{"kind": "owner", "pid": me, "start_time": process_start_time(me), "run_id": "r"}]
    assert owner_alive(alive)
    pid, st = _dead_pid()
    assert not owner_alive([{"kind": "owner", "pid": pid, "start_time": st}, {"kind": "netns", "name": "rn-x-a"}])
    assert not owner_alive([])


def test_cluster_ledger_lives_with_up_then_with_its_processes_then_with_down(roots):
    ledger_dir, _, _ = roots
    led = ClusterLedger.create("t1", ledger_dir)
    assert is_cluster_ledger(led.entries()) and owner_alive(led.entries()) and not handed_over(led.entries())
    with pytest.raises(ClusterPreflightError, match="already up"):
        ClusterLedger.create("t1", ledger_dir)
    with pytest.raises(ClusterPreflightError, match="being brought up"):
        ClusterLedger.attach("t1", ledger_dir)
    p = _sleeper()
    try:
        led.add("process", pid=p.pid, start_time=process_start_time(p.pid), role="etcd")
        # `cluster up` ends: the ledger now lives as long as a process it records
        led.handover()
        entries = led.entries()
        entries[0]["pid"], entries[0]["start_time"] = _dead_pid()  # as if the up process were gone
        assert handed_over(entries) and owner_alive(entries)
        p.kill()
        p.wait()
        assert not owner_alive(entries)  # every process died: `roughnet clean` may remove it
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_killed_cluster_up_leaves_a_dead_ledger(roots):
    ledger_dir, _, _ = roots
    code = ("import sys, time; from pathlib import Path; from roughnet.cluster.ledger import ClusterLedger;"
            "ClusterLedger.create('t2', Path(sys.argv[1])); print('ok', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(ledger_dir)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ok"
    path = ledger_dir / "kt2.jsonl"
    assert owner_alive(read_ledger(path))
    child.kill()
    child.wait()
    child.stdout.close()
    assert not owner_alive(read_ledger(path))
    # a new `cluster up` of that name cleans it first (topo.ledger.Ledger does) and owns it
    led = ClusterLedger.create("t2", ledger_dir)
    owners = [e for e in led.entries() if e["kind"] == "owner"]
    assert len(owners) == 1 and owners[0]["pid"] == os.getpid()
    led.remove_file()


def test_down_takes_over_a_handed_over_ledger(roots):
    ledger_dir, _, _ = roots
    led = ClusterLedger.create("t3", ledger_dir)
    led.handover()
    taken = ClusterLedger.attach("t3", ledger_dir)
    entries = taken.entries()
    assert [e["kind"] for e in entries][-1] == "owner" and entries[-1]["pid"] == os.getpid()
    assert owner_alive(entries) and not handed_over(entries)
    taken.remove_file()
    with pytest.raises(ClusterPreflightError, match="no ledger"):
        ClusterLedger.attach("t3", ledger_dir)


def test_clean_removes_a_dead_cluster_ledgers_processes_and_trees_only(roots):
    ledger_dir, run_root, data_root = roots
    led = ClusterLedger.create("t4", ledger_dir)
    mine, theirs = run_root / "t4", data_root / "t4"
    for d in (mine, theirs):
        led.add("dir", path=str(d))
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "f").write_text("x")
    outside = ledger_dir.parent / "not-ours"
    outside.mkdir()
    p = _sleeper()
    led.add("process", pid=p.pid, start_time=process_start_time(p.pid), role="kube-apiserver", ns=None)
    lines = led.path.read_text().splitlines()
    owner = json.loads(lines[0])
    owner["pid"], owner["start_time"] = _dead_pid()
    led.path.write_text("\n".join([json.dumps(owner)] + lines[1:]) + "\n")
    try:
        listed = clean.clean(ledger_dir, dry_run=True)
        assert any("kube-apiserver" in x for x in listed) and any(str(mine) in x for x in listed)
        assert process_alive(p.pid, process_start_time(p.pid)) and mine.exists()  # dry run changed nothing
        removed = clean.clean(ledger_dir)
        p.wait(timeout=10)
        assert not mine.exists() and not theirs.exists() and not led.path.exists()
        assert outside.exists()
        assert any("kube-apiserver" in x for x in removed)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_clean_leaves_a_cluster_that_is_up_alone(roots):
    ledger_dir, run_root, _ = roots
    led = ClusterLedger.create("t5", ledger_dir)
    d = run_root / "t5"
    led.add("dir", path=str(d))
    d.mkdir(parents=True)
    p = _sleeper()
    try:
        led.add("process", pid=p.pid, start_time=process_start_time(p.pid), role="etcd")
        led.handover()
        lines = led.path.read_text().splitlines()
        owner = json.loads(lines[0])
        owner["pid"], owner["start_time"] = _dead_pid()  # `cluster up` has exited
        led.path.write_text("\n".join([json.dumps(owner)] + lines[1:]) + "\n")
        assert clean.clean(ledger_dir) == []
        assert d.exists() and p.poll() is None
    finally:
        p.kill()
        p.wait()
        led.remove_file()


def test_teardown_refuses_directories_outside_the_cluster_roots(roots, tmp_path):
    ledger_dir, _, _ = roots
    victim = tmp_path / "precious"
    victim.mkdir()
    entries = [{"kind": "owner", "pid": 1, "start_time": 0}, {"kind": "cluster", "name": "t6"},
               {"kind": "dir", "path": str(victim)}, {"kind": "emptydir", "path": str(tmp_path)}]
    with pytest.raises(state.ClusterError, match="left alone"):
        down.teardown(entries, None, ledger_dir)
    assert victim.exists()


def test_allowed_empty_dirs_are_few_and_named():
    allowed = down.allowed_empty_dirs()
    assert {"/var/lib/cni", "/run/containerd", "/var/log/containers", "/var/lib/kubelet", "/run/mount"} <= allowed
    assert not {"/", "/run", "/var", "/var/lib", "/etc", "/opt"} & allowed


def test_teardown_stops_recorded_processes_in_role_order(roots):
    ledger_dir, _, _ = roots
    procs = {role: _sleeper() for role in ("etcd", "kubelet", "containerd")}
    entries = [{"kind": "owner", "pid": 1, "start_time": 0}, {"kind": "cluster", "name": "t7"}]
    entries += [{"kind": "process", "pid": p.pid, "start_time": process_start_time(p.pid), "role": r}
                for r, p in procs.items()]
    t0 = time.monotonic()
    removed = down.teardown(entries, None, ledger_dir)
    for p in procs.values():
        p.wait(timeout=10)
    order = [next(r for r in procs if f"({r})" in x) for x in removed if x.startswith("process")]
    assert order == ["kubelet", "containerd", "etcd"]
    assert time.monotonic() - t0 < 20
