"""run.timeline without namespaces: flows of a run (ports, topics, trace files, tags), promises."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specutil import plan_text
from test_spec_timeline import BASE

from roughnet.run.timeline import plan_flows, promise_of


def addr(host: str, seen_from: str) -> str:
    return {"pub": "198.18.0.1", "pub2": "198.18.0.2", "brk": "198.18.0.3", "sub": "198.18.0.4"}[host]


def test_one_flow_per_workload_and_sender_with_its_own_port_topic_and_traces(tmp_path: Path):
    run = plan_text(BASE).runs[0]
    flows = plan_flows(run, addr, lambda h: "198.18.0.3:1883", None, tmp_path)
    assert [(f.name, f.sender) for f in flows] == [("ctl", "pub"), ("ctl", "pub2"), ("bulk", "pub")]
    topics = [f.specs[0].config["topic"] for f in flows]
    assert topics[0] == f"roughnet/{run.run_id}" and topics[1] == f"roughnet/{run.run_id}/ctl/pub2"
    assert len(set(topics)) == 3
    for f in flows:
        assert f.specs[-1].role == "sender" and f.specs[-1].host == f.sender
        assert all(s.tag == f"{f.name}-{f.sender}" for s in f.specs)
    # MQTT flows go through the broker; the TCP bulk flow listens on its own port
    bulk = flows[2]
    assert bulk.specs[0].config["listen"] == "198.18.0.4:5203" and bulk.specs[-1].config["peers"] == ["198.18.0.4:5203"]
    # streams are traced, one file per sender and per receiver; bulk is not
    assert flows[1].specs[-1].config["trace_path"] == str(tmp_path / "trace-ctl-pub2.tx")
    assert flows[1].specs[0].config["trace_path"] == str(tmp_path / "trace-ctl-pub2-sub.rx")
    assert "trace_path" not in bulk.specs[0].config and not bulk.traced


def test_promises_follow_the_settings_that_make_them():
    run = plan_text(BASE).runs[0]
    w = run.workload
    assert promise_of(dataclasses.replace(w, options={"qos": 0}), run) is None
    assert promise_of(dataclasses.replace(w, options={"qos": 1, "clean_session": False}), run) is None  # no persistence
    stored = dataclasses.replace(run, services=tuple(dataclasses.replace(s, options={**s.options, "persistence": True})
                                                     for s in run.services))
    p = promise_of(dataclasses.replace(w, options={"qos": 1, "clean_session": False}), stored)
    assert p["no_loss"] and not p["no_duplicates"]
    p = promise_of(dataclasses.replace(w, options={"qos": 2, "clean_session": False}), stored)
    assert p["no_loss"] and p["no_duplicates"]
    assert promise_of(dataclasses.replace(w, options={"qos": 2}), run)["no_loss"] is False
    kafka = dataclasses.replace(w, protocol="kafka", options={"acks": "all"})
    assert promise_of(kafka, run)["no_loss"]
    assert promise_of(dataclasses.replace(kafka, options={"acks": "1"}), run) is None
    assert promise_of(dataclasses.replace(w, protocol="nats", options={"jetstream": True}), run)["no_loss"]
    assert promise_of(dataclasses.replace(w, protocol="nats", options={}), run) is None
