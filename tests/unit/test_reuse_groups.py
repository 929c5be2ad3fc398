"""reuse = true without root: which runs share an environment, the per-run share of a service,
link counter deltas, clearing a kernel link, and the group's rebuild-after-failure logic (with stand-ins).

The live sweep (namespaces, mosquitto, Kafka) is tests/integration/test_service_reuse.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roughnet import services
from roughnet.errors import AgentError, ServiceError
from roughnet.links import kernel
from roughnet.run import group as groupmod
from roughnet.run.reuse import environment_key, reusable, reuse_groups, why_not_shared
from roughnet.run.runner import link_counter_delta
from roughnet.runspec import Direction, Host, Link, Run, Service, Workload
from roughnet.services import lifecycle, reuse as sreuse
from roughnet.services.handle import UsageSampler

_ids = iter(range(1, 10_000))


def _run(loss=0.0, services_=(Service("mosquitto", "m", reuse=True),), mtu=1500, hosts=("a", "b", "m"),
         overlay="none", payload=100, index=None):
    n = next(_ids)
    links = (Link(0, ("a", "m"), mtu=mtu, forward=Direction(loss=loss), overlay=overlay), Link(1, ("m", "b")))
    w = Workload(pattern="stream", protocol="mqtt", sender="a", receivers=("b",), payload_bytes=payload)
    return Run(scenario="t", sweep_id="t-00000000", run_id=f"{n:012x}", index=n if index is None else index,
               params={"loss": loss}, seed=1, repeat=0, hosts=tuple(Host(h) for h in hosts), links=links,
               workload=w, services=tuple(services_))


def _engines(runs, per_link=None):
    return {r.run_id: dict(per_link or {0: "kernel", 1: "kernel"}) for r in runs}


def _shape(groups):
    return [(shared, len(runs)) for shared, runs in groups]


# ---- grouping ---------------------------------------------------------------------------------


def test_equal_environments_with_different_impairments_and_workloads_share_one_group():
    runs = [_run(loss=0.0), _run(loss=0.05, payload=1000), _run(loss=0.10)]
    groups = reuse_groups(runs, _engines(runs))
    assert _shape(groups) == [(True, 3)]
    assert groups[0][1] == runs  # order kept
    assert why_not_shared(runs[0], runs[2], _engines(runs)) is None


def test_reuse_false_runs_are_groups_of_one_not_shared():
    runs = [_run(services_=(Service("mosquitto", "m"),)) for _ in range(3)]
    assert _shape(reuse_groups(runs, _engines(runs))) == [(False, 1)] * 3
    assert not reusable(runs[0]) and environment_key(runs[0], {}) is None


def test_runs_without_services_are_never_shared():
    runs = [_run(services_=()), _run(services_=())]
    assert _shape(reuse_groups(runs, _engines(runs))) == [(False, 1), (False, 1)]


def test_mixed_reuse_splits_at_the_run_that_does_not_reuse():
    runs = [_run(), _run(), _run(services_=(Service("mosquitto", "m"),)), _run(), _run()]
    assert _shape(reuse_groups(runs, _engines(runs))) == [(True, 2), (False, 1), (True, 2)]


@pytest.mark.parametrize("change", [
    pytest.param(dict(mtu=9000), id="mtu"),
    pytest.param(dict(hosts=("a", "b", "m", "x")), id="hosts"),
    pytest.param(dict(overlay="vxlan"), id="overlay"),
    pytest.param(dict(services_=(Service("mosquitto", "m", reuse=True, options={"max_queued": 5}),)),
                 id="service-options"),
    pytest.param(dict(services_=(Service("mosquitto", "a", reuse=True),)), id="service-host"),
    pytest.param(dict(services_=(Service("nats", "m", reuse=True),)), id="service-kind"),
])
def test_any_environment_difference_starts_a_new_group(change):
    runs = [_run(), _run(**change), _run(**change)]
    groups = reuse_groups(runs, _engines(runs))
    assert _shape(groups) == [(True, 1), (True, 2)]
    assert why_not_shared(runs[0], runs[1], _engines(runs)) is not None


def test_a_different_engine_on_a_link_starts_a_new_group():
    runs = [_run(), _run()]
    engines = {runs[0].run_id: {0: "kernel", 1: "kernel"}, runs[1].run_id: {0: "wire", 1: "kernel"}}
    assert _shape(reuse_groups(runs, engines)) == [(True, 1), (True, 1)]
    assert "links differ" in why_not_shared(runs[0], runs[1], engines)


def test_equal_environments_that_are_not_consecutive_are_separate_groups():
    a1, b1, a2 = _run(), _run(mtu=9000), _run()
    assert _shape(reuse_groups([a1, b1, a2], _engines([a1, b1, a2]))) == [(True, 1), (True, 1), (True, 1)]


def test_environment_key_ignores_link_order_and_option_order():
    r1 = _run(services_=(Service("mosquitto", "m", reuse=True, options={"a": 1, "b": 2}),))
    r2 = _run(services_=(Service("mosquitto", "m", reuse=True, options={"b": 2, "a": 1}),))
    r2 = Run(**{**r2.__dict__, "links": tuple(reversed(r2.links))})
    assert environment_key(r1, {0: "kernel", 1: "kernel"}) == environment_key(r2, {0: "kernel", 1: "kernel"})


# ---- link counters of a shared environment -----------------------------------------------------


def test_link_counter_delta_subtracts_counts_and_keeps_levels_and_settings():
    before = {"engine": "kernel", "forward": {"drops_loss": 5, "tx_packets": 100, "rx_bytes": 1000,
                                              "queue_high_packets": 7, "sched_error_p99_us": 10.0, "up": True,
                                              "configured_delay_ns": 5}}
    after = {"engine": "kernel", "forward": {"drops_loss": 9, "tx_packets": 250, "rx_bytes": 4000,
                                             "queue_high_packets": 3, "sched_error_p99_us": 12.0, "up": True,
                                             "configured_delay_ns": 5, "seen_at_loss_hook": 40}}
    d = link_counter_delta(before, after)
    f = d["forward"]
    assert (f["drops_loss"], f["tx_packets"], f["rx_bytes"]) == (4, 150, 3000)
    assert f["queue_high_packets"] == 3 and f["sched_error_p99_us"] == 12.0 and f["up"] is True
    assert f["configured_delay_ns"] == 5 and f["seen_at_loss_hook"] == 40 and d["engine"] == "kernel"


def test_link_counter_delta_keeps_a_counter_that_restarted():
    # The wire was restarted between the readings: its counters start from zero, so "after" is the run's.
    assert link_counter_delta({"forward": {"tx_packets": 500}}, {"forward": {"tx_packets": 20}}) == \
        {"forward": {"tx_packets": 20}}


# ---- clearing a kernel-engine link ----------------------------------------------------------------


def test_clear_argvs_remove_every_qdisc_and_loss_table_of_the_link(tmp_path):
    from roughnet.topo import Ledger, Topology

    run = _run()
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, root=tmp_path))
    argvs = kernel.clear_argvs(topo.interfaces(), run.links[0])
    ns_a, ns_m = topo.ns("a"), topo.ns("m")
    assert ["tc", "-n", ns_a, "qdisc", "del", "dev", "rn0-m", "root"] in argvs
    assert ["tc", "-n", ns_m, "qdisc", "del", "dev", "rn0-a", "root"] in argvs
    tables = [a for a in argvs if "nft" in a]
    assert sorted(a[3] for a in tables) == sorted([ns_a, ns_m])
    assert all(a[4:] == ["nft", "delete", "table", "netdev", "rn0"] for a in tables)
    assert len(argvs) == 4  # nothing of link 1


def test_nothing_to_delete_is_not_an_error():
    assert kernel._nothing_there("Error: Cannot delete qdisc with handle of zero.")
    assert kernel._nothing_there("Error: No such file or directory\ndelete table netdev rn0")
    assert not kernel._nothing_there("Error: Operation not permitted")


# ---- a service's share of one run -------------------------------------------------------------------


def test_copy_slice(tmp_path):
    src = tmp_path / "svc.log"
    src.write_bytes(b"0123456789")
    assert sreuse.copy_slice(src, tmp_path / "a.log", 3, 7) == 4
    assert (tmp_path / "a.log").read_bytes() == b"3456"
    assert sreuse.copy_slice(src, tmp_path / "b.log", 8, 50) == 2  # a log shorter than asked: what is there


def test_usage_window_counts_from_its_start():
    s = UsageSampler(os.getpid(), interval_s=60)
    s.start()
    try:
        sum(i * i for i in range(300_000))  # some CPU before the window
        s.begin_window()
        w = s.window()
        assert 0.0 <= w["cpu_s"] <= s.cpu_s and w["rss_max_bytes"] > 0 and w["samples"] >= 1
        assert s.snapshot()["cpu_s"] >= w["cpu_s"]
    finally:
        s.stop()


class _LocalTopology:
    """Starts processes in this namespace: enough for the lifecycle's logic (no sockets are used)."""

    def __init__(self):
        self.started = []

    def popen(self, host, argv, **kw):
        p = subprocess.Popen(argv, **kw)
        self.started.append(p)
        return p

    def address(self, host, seen_from):
        return "198.18.0.2"


_SCRIPT = "import sys, time\nfor i in range(600):\n    print('line', i, flush=True)\n    time.sleep(0.05)\n"


def _fake_mosquitto(monkeypatch, probe_runs):
    def prepare(svc, run, topology, artifacts):
        prep = lifecycle._Prepared([sys.executable, "-c", _SCRIPT], artifacts / "fake.log", lambda d: "first", 1883)
        prep.reprobe = lambda for_run, deadline: probe_runs.append(for_run.run_id) or f"probed for {for_run.run_id}"
        return prep

    monkeypatch.setitem(lifecycle._PREPARE, "mosquitto", prepare)


def test_begin_and_end_run_give_each_run_its_log_slice_and_reuse_facts(monkeypatch, tmp_path):
    probed: list[str] = []
    _fake_mosquitto(monkeypatch, probed)
    first, second = _run(), _run()
    handles = lifecycle.start_services(first, _LocalTopology(), tmp_path / "svc")
    try:
        w1 = services.begin_run(handles, first)
        assert probed == []  # the run that started it needs no second probe
        import time
        time.sleep(0.3)
        (tmp_path / "r1").mkdir()
        s1 = services.end_run(handles, w1, tmp_path / "r1")["mosquitto@m"]
        w2 = services.begin_run(handles, second, log_from={"mosquitto@m": s1["log_to"]})
        assert probed == [second.run_id]
        time.sleep(0.3)
        (tmp_path / "r2").mkdir()
        s2 = services.end_run(handles, w2, tmp_path / "r2")["mosquitto@m"]
    finally:
        lifecycle.stop_services(handles)
    assert s1["reused"] is False and s2["reused"] is True
    assert s1["started_by"] == s2["started_by"] == first.run_id and s1["pid"] == s2["pid"] == handles[0].pid
    assert s1["log_from"] == 0 and s2["log_from"] == s1["log_to"] and s2["log_to"] > s2["log_from"]
    one, two = (tmp_path / "r1" / "fake.log").read_text(), (tmp_path / "r2" / "fake.log").read_text()
    assert one.startswith("line 0\n") and two and not two.startswith("line 0\n")
    assert (tmp_path / "svc" / "fake.log").read_text().startswith(one + two)  # contiguous slices of one log
    assert s2["probe"] == f"probed for {second.run_id}"


def test_begin_run_refuses_a_dead_service_with_its_log(monkeypatch, tmp_path):
    _fake_mosquitto(monkeypatch, [])
    first = _run()
    handles = lifecycle.start_services(first, _LocalTopology(), tmp_path / "svc")
    handles[0].proc.kill()
    handles[0].proc.wait()
    try:
        with pytest.raises(ServiceError, match="mosquitto on host m died"):
            services.begin_run(handles, _run())
    finally:
        lifecycle.stop_services(handles)


# ---- the group: rebuild after a failure (stand-ins for topology, links, services, agents) ---------------


class _FakeTopology:
    built: list[str] = []
    torn: list[str] = []

    def __init__(self, run, ledger, engines=None):
        self.spec, self.token = run, run.run_id[:8]

    def build(self):
        _FakeTopology.built.append(self.spec.run_id)

    def teardown(self):
        _FakeTopology.torn.append(self.spec.run_id)

    def address(self, host, seen_from):
        return "198.18.0.1"


class _FakeHandle:
    def __init__(self, run):
        self.started_by, self.kind, self.host, self.pid = run.run_id, "mosquitto", "m", 1000 + len(_FakeTopology.built)
        self.dead = False

    def describe(self):
        return "fake mosquitto"


def test_group_rebuilds_after_a_service_failure_and_keeps_it_after_an_agent_failure(monkeypatch, tmp_path):
    _FakeTopology.built, _FakeTopology.torn = [], []
    runs = [_run(index=i) for i in range(5)]
    outcome = {runs[1].run_id: AgentError("receiver@b did not report ready within 60 s"),
               runs[2].run_id: ServiceError("mosquitto on host m died (exit -9); last lines of mosquitto.log:\nx")}
    stopped: list[list] = []
    monkeypatch.setattr(groupmod.topo, "Ledger", lambda token, run_id: None)
    monkeypatch.setattr(groupmod.topo, "Topology", _FakeTopology)
    monkeypatch.setattr(groupmod, "apply_links", lambda topology, run, engines: {})
    monkeypatch.setattr(groupmod, "tcp_counters", lambda topology, host: {})
    monkeypatch.setattr(groupmod.services, "start_services", lambda run, topology, folder: [_FakeHandle(run)])
    monkeypatch.setattr(groupmod.services, "stop_services", lambda handles: stopped.append(list(handles)) or {})
    monkeypatch.setattr(groupmod.services, "check_alive", lambda handles: None)
    monkeypatch.setattr(groupmod.services, "begin_run", lambda handles, run, log_from=None: sreuse.RunWindow(run.run_id))
    monkeypatch.setattr(groupmod.services, "end_run", lambda handles, window, artifacts: {
        "mosquitto@m": {"pid": h.pid, "started_by": h.started_by, "reused": h.started_by != window.run_id,
                        "log_to": 0, "cpu_s": 0.0, "rss_max_bytes": 0} for h in handles})

    def fake_measure(run, pf, topology, link_engines, handles, artifacts, record, tcp_before, agents,
                     link_before=None):
        assert topology.spec is run  # each run sees itself as the topology's spec
        if run.run_id in outcome:
            raise outcome[run.run_id]
        record["status"] = "ok"

    monkeypatch.setattr(groupmod, "measure", fake_measure)

    class _Store:
        def run_dir(self, sweep_id, run_id):
            d = tmp_path / run_id
            d.mkdir(exist_ok=True)
            return d

        def record_run(self, record):
            pass

    pf = groupmod.Preflight(Path("/bin/true"), {}, None, _engines(runs))
    records = groupmod.run_group(runs, pf, _Store())
    assert [r["status"] for r in records] == ["ok", "failed", "failed", "ok", "ok"]
    assert "did not report ready" in records[1]["failure_reason"]
    # the agent failure kept the environment; the dead service made run 3 start a fresh one
    assert _FakeTopology.built == [runs[0].run_id, runs[3].run_id]
    assert _FakeTopology.torn == [runs[0].run_id, runs[3].run_id] and len(stopped) == 2
    assert [r["service_started_by"] for r in records] == [runs[0].run_id] * 3 + [runs[3].run_id] * 2
    assert [r["service_reused"] for r in records] == [False, True, True, False, True]


def test_run_topology_is_the_shared_topology_with_this_run_as_spec():
    class T:
        spec, token = "first", "abcd0123"

        def ns(self, host):
            return f"rn-abcd0123-{host}"

    view = groupmod.RunTopology(T(), "second")
    assert view.spec == "second" and view.token == "abcd0123" and view.ns("a") == "rn-abcd0123-a"
