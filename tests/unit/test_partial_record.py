"""A run some of whose agents failed mid-run keeps every figure measured (issue 26): runner._fill_record with agents
as run.agents leaves them (a receiver whose connection ended, with its partial result and error; one without any
result), no processes or namespaces involved. On real stacks: tests/integration/test_partial_results.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from specutil import plan_text

from roughnet.run.agents import AgentProcess, AgentSpec
from roughnet.run.runner import _fill_record

SCENARIO = """
[scenario]
name = "partial"
[[host]]
name = "a"
[[host]]
name = "b"
[[host]]
name = "c"
[[link]]
between = ["a", "b", "c"]
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = ["b", "c"]
messages = 1000
rate = "100 msg/s"
payload = "100 B"
"""

LAT = {"count": 400, "p50_us": 120.0, "p90_us": 200.0, "p99_us": 300.0, "max_us": 900.0, "mean_us": 130.0}


def agent(host: str, role: str, result: dict | None, intervals=(), error=None, started_ns=1_000_000_000):
    a = AgentProcess(AgentSpec(host, role, {"report_interval_ms": 1000}), proc=SimpleNamespace(poll=lambda: 1),
                     out_path=Path("/nonexistent"), err_path=Path("/nonexistent"))
    a.result, a.error, a.started_ns = result, error, started_ns
    a.intervals = list(intervals)
    return a


def record() -> dict:
    return {"status": "failed", "failure_reason": None, "metrics": {}, "histograms": [], "receivers": [],
            "validity": "invalid", "validity_reasons": []}


def test_a_receiver_cut_off_mid_run_keeps_its_figures_and_the_run_says_why():
    run = plan_text(SCENARIO).runs[0]
    broken = agent("b", "receiver", {"role": "receiver", "received": 400, "expected": 1000, "lost": 600,
                                     "bytes": 40000, "end_reason": "error", "latency_intended": LAT,
                                     "error": {"kind": "io", "message": "recv 198.18.0.1:5000: connection reset"}},
                   intervals=[{"t_ms": 1000, "messages": 100, "bytes": 10000, "rate_bps": 8e4},
                              {"t_ms": 2000, "messages": 100, "bytes": 10000, "rate_bps": 8e4}])
    whole = agent("c", "receiver", {"role": "receiver", "received": 1000, "expected": 1000, "lost": 0,
                                    "bytes": 100000, "end_reason": "complete", "latency_intended": LAT})
    sender = agent("a", "sender", {"role": "sender", "sent": 1000, "end_reason": "complete",
                                   "schedule": {}, "cpu": {"user_s": 0.5, "sys_s": 0.25}},
                   intervals=[{"t_ms": 1000, "messages": 100, "bytes": 10000, "rate_bps": 8e4}],
                   started_ns=1_200_000_000)
    rec = record()
    _fill_record(rec, run, [broken, whole, sender], {}, {}, {"mean": 0.2})
    assert rec["status"] == "failed" and rec["partial"] is True
    assert rec["failure_reason"] == ("incomplete: receiver@b: io: recv 198.18.0.1:5000: connection reset "
                                     "(after 400 of 1000 messages)")
    assert rec["validity"] == "invalid" and rec["validity_reasons"] == ["incomplete: " + rec["failure_reason"][12:]]
    assert rec["metrics"]["received"] == 1400 and rec["metrics"]["sent"] == 1000
    assert rec["metrics"]["cpu_agents_s"] == 0.75
    assert [r["host"] for r in rec["receivers"]] == ["b", "c"]
    assert rec["metrics"]["lat_p50_us"] == 120.0  # the receivers' latency (the worst p50 of the two)
    # the interval lines as series rows, on one clock (seconds since the first agent started)
    rows = sorted((s["receiver"] or "", s["t_s"], s["delivered"], s["sent"]) for s in rec["series"])
    assert rows == [("", 0.2, None, 100), ("b", 0.0, 100, None), ("b", 1.0, 100, None)]


def test_an_agent_without_a_result_beside_one_with_keeps_the_figures_of_the_one():
    run = plan_text(SCENARIO).runs[0]
    gone = agent("b", "receiver", None, error={"kind": "io", "message": "connect: refused"})
    whole = agent("c", "receiver", {"role": "receiver", "received": 1000, "expected": 1000, "lost": 0,
                                    "end_reason": "complete", "latency_actual": LAT})
    sender = agent("a", "sender", {"role": "sender", "sent": 1000, "end_reason": "complete", "schedule": {}})
    rec = record()
    _fill_record(rec, run, [gone, whole, sender], {}, {}, {"mean": 0.2})
    assert rec["status"] == "failed" and rec["failure_reason"] == "incomplete: receiver@b: io: connect: refused"
    assert rec["metrics"]["received"] == 1000 and [r["host"] for r in rec["receivers"]] == ["c"]


def test_no_result_at_all_is_a_failure_without_figures_as_before():
    run = plan_text(SCENARIO).runs[0]
    agents = [agent(h, role, None, error={"kind": "io", "message": "x"})
              for h, role in (("b", "receiver"), ("c", "receiver"), ("a", "sender"))]
    rec = record()
    _fill_record(rec, run, agents, {}, {}, {"mean": 0.2})
    assert rec["status"] == "failed" and rec["metrics"] == {} and "partial" not in rec
    assert rec["failure_reason"].startswith("receiver@b: io: x")
