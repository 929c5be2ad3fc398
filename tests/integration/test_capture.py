"""capture.start / stop / metrics on a real topology (root): files, ledger, teardown ends tcpdump."""

from __future__ import annotations

import os
import shutil

import pytest

from roughnet import capture, topo
from roughnet.runspec import Link

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")]


def _topology(make_run, captured=True):
    run = make_run(["a", "b", "c"], [Link(index=0, hosts=("a", "b"), capture=captured), ("b", "c")])
    t = topo.Topology(run, topo.Ledger(run.run_id[:8], run.run_id))
    t.build()
    return run, t


def test_capture_files_and_metrics(make_run, ping, tmp_path):
    run, t = _topology(make_run)
    try:
        caps = capture.start(run, t, tmp_path)
        assert [(c.link, c.host) for c in caps.items] == [(0, "a"), (0, "b")]  # link 1 is not captured
        assert all(c.mac is not None for c in caps.items)
        assert ping(t, "a", "b", 5) == 5
        capture.stop(caps)
        m = capture.metrics(caps, sender="a", messages=5)
    finally:
        t.teardown()
    assert sorted(p.name for p in tmp_path.glob("*.pcap")) == ["capture-0-a.pcap", "capture-0-b.pcap"]
    # 5 echo requests from a and 5 replies from b, each counted once on the interface it left by
    assert m["pcap_packets"] == 10
    assert m["pcap_tcp_segments"] == 0 and m["pcap_capture_drops"] == 0
    assert (tmp_path / "capture-analysis.json").exists()
    assert t.teardown_errors == []


def test_teardown_ends_a_tcpdump_that_was_never_stopped(make_run, tmp_path):
    run, t = _topology(make_run)
    try:
        caps = capture.start(run, t, tmp_path)
        pids = [c.dump.proc.pid for c in caps.items]
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    finally:
        t.teardown()  # as after a crash: the ledger has the tcpdump processes
    for c in caps.items:
        assert c.dump.proc.poll() is not None
    assert t.teardown_errors == []


def test_no_captured_link_starts_nothing(make_run, tmp_path):
    run, t = _topology(make_run, captured=False)
    try:
        caps = capture.start(run, t, tmp_path)
        assert not caps and capture.metrics(caps) == {}
    finally:
        t.teardown()
    assert not list(tmp_path.glob("*.pcap"))
