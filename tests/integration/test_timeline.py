"""Run timelines end to end (docs/timelines.md): several workloads and senders, events that take a link
down, pause a broker and cut a host off, the time each took effect, per-flow results, time series and
recovery from the agents' traces; a run killed with a paused broker and an isolated host leaves
nothing `roughnet clean` cannot remove (root, agent, mosquitto)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import needs, run_argv

from roughnet.topo.ledger import process_start_time

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")]

HOSTS = "".join(f'[[host]]\nname = "{h}"\n' for h in ("a", "b", "brk", "c"))


def record_of(results: Path) -> dict:
    [path] = glob.glob(str(results / "runs" / "*" / "*" / "record.json"))
    return json.loads(Path(path).read_text())


def run_ok(path: Path, results: Path, timeout: float = 180) -> dict:
    out = subprocess.run(run_argv(path, results, report=True), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    rec = record_of(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    return rec


@needs("udp", "tcp")
def test_two_senders_and_a_bulk_transfer_with_the_link_down_half_a_second(tmp_path):
    path = tmp_path / "tl.toml"
    path.write_text(f"""
[scenario]
name = "tl-udp"
timeout = "20 s"
{HOSTS}
[[link]]
between = ["a", "b", "brk", "c"]
delay = "1 ms"
rate = "20 Mbit/s"

[[workload]]
name = "ctl"
pattern = "stream"
protocol = "udp"
from = ["a", "b"]
to = "c"
messages = 400
rate = "100 msg/s"
payload = "200 B"

[[workload]]
name = "bulk"
pattern = "bulk"
protocol = "tcp"
from = "a"
to = "c"
duration = "1 s"
start = "1 s"
background = true
payload = "64 KiB"

[[event]]
at = "2 s"
link = 0
action = "down"
for = "0.5 s"
""")
    rec = run_ok(path, tmp_path / "res")
    # the events took effect when asked (the wire's control socket answers within milliseconds)
    ev = rec["events"]
    assert [(e["action"], e["ends"]) for e in ev] == [("down", None), ("up", 0)]
    for e in ev:
        assert e["error"] is None and 0 <= e["started_s"] - e["at_s"] < 0.1 and e["took_effect_s"] >= e["started_s"]
    # one flow per sender; 50 of each sender's 400 messages fell into the 0.5 s outage
    flows = {(f["workload"], f["sender"]): f["metrics"] for f in rec["flows"]}
    assert set(flows) == {("ctl", "a"), ("ctl", "b"), ("bulk", "a")}
    for s in ("a", "b"):
        m = flows[("ctl", s)]
        assert m["received"] + m["lost"] == 400 and 40 <= m["lost"] <= 60, m
    names = {w["name"]: w for w in rec["workloads"]}
    assert names["bulk"]["background"] and names["bulk"]["metrics"]["throughput_bps"] > 1e6
    assert rec["metrics"]["lost"] == flows[("ctl", "a")]["lost"] + flows[("ctl", "b")]["lost"]
    # the time series shows the outage: an interval of the ctl flows with nothing delivered
    ctl = [r for r in rec["series"] if r["workload"] == "ctl" and r["sender"] == "a"]
    assert ctl and all(r["interval_s"] == 1.0 for r in ctl[:-1]) and 0 < ctl[-1]["interval_s"] <= 1.0
    by_t = {round(r["t_s"]): r for r in ctl}
    assert by_t[0]["delivered"] >= 95 and by_t[2]["delivered"] <= 60 and by_t[2]["lost"] >= 40
    # recovery: per flow, an outage of about the half second the link was down, then the rate again
    rows = [r for r in rec["recovery"] if r["workload"] == "ctl"]
    assert {(r["sender"], r["event"]) for r in rows} == {("a", 0), ("b", 0)}
    for r in rows:
        assert 0.45 <= r["outage_s"] <= 0.7, r
        assert r["recover_s"] is not None and r["recover_s"] <= 1.5, r
        assert 40 <= r["lost"] <= 60 and r["promise"] is None


@needs("mqtt")
@pytest.mark.skipif(shutil.which("mosquitto") is None and not os.path.exists("/usr/sbin/mosquitto"),
                    reason="mosquitto is not installed (apt-get install mosquitto)")
def test_mqtt_qos1_across_a_paused_broker_and_an_isolated_subscriber(tmp_path):
    path = tmp_path / "tl.toml"
    path.write_text(f"""
[scenario]
name = "tl-mqtt"
timeout = "30 s"
{HOSTS}
[[link]]
between = ["a", "brk", "c"]
delay = "1 ms"

[[service]]
kind = "mosquitto"
host = "brk"

[workload]
pattern = "stream"
protocol = "mqtt"
from = "a"
to = "c"
duration = "7 s"
rate = "100 msg/s"
payload = "256 B"
[workload.mqtt]
qos = 1

[[event]]
at = "2 s"
service = "mosquitto"
action = "pause"
for = "1 s"

[[event]]
at = "4.5 s"
host = "c"
action = "isolate"
for = "1 s"
""".replace('[[host]]\nname = "b"\n', ""))
    rec = run_ok(path, tmp_path / "res")
    assert [(e["action"], e["target"], e["error"]) for e in rec["events"]] == [
        ("pause", "mosquitto", None), ("resume", "mosquitto", None), ("isolate", "host c", None),
        ("rejoin", "host c", None)]
    # QoS 1 over TCP: the stalls delay messages, none is lost
    assert rec["metrics"]["lost"] == 0 and rec["metrics"]["received"] == 700
    assert rec["metrics"]["lat_p99_us"] > 500_000  # messages held through a 1 s stall
    faults = {r["event"]: r for r in rec["recovery"]}
    assert set(faults) == {0, 2}
    for r in faults.values():
        assert r["outage_s"] >= 0.8 and r["lost"] == 0 and r["backlog"] > 50, r


@needs("mqtt")
@pytest.mark.skipif(shutil.which("mosquitto") is None and not os.path.exists("/usr/sbin/mosquitto"),
                    reason="mosquitto is not installed (apt-get install mosquitto)")
def test_sigkill_with_a_paused_broker_and_an_isolated_host_then_clean(tmp_path):
    path = tmp_path / "tl.toml"
    path.write_text(f"""
[scenario]
name = "tl-kill"
timeout = "60 s"
[[host]]
name = "a"
[[host]]
name = "brk"
[[host]]
name = "c"
[[link]]
between = ["a", "brk", "c"]

[[service]]
kind = "mosquitto"
host = "brk"

[workload]
pattern = "stream"
protocol = "mqtt"
from = "a"
to = "c"
duration = "30 s"
rate = "10 msg/s"
payload = "256 B"

[[event]]
at = "1 s"
service = "mosquitto"
action = "pause"

[[event]]
at = "1 s"
host = "a"
action = "isolate"
""")
    ledgers = Path("/run/roughnet/ledger")
    before = set(ledgers.glob("*.jsonl")) if ledgers.exists() else set()
    proc = subprocess.Popen(run_argv(path, tmp_path / "res"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        broker = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and broker is None:  # the paused mosquitto: state T in /proc
            for ledger in set(ledgers.glob("*.jsonl")) - before:
                for line in ledger.read_text().splitlines():
                    obj = json.loads(line)
                    if obj.get("kind") == "process":
                        try:
                            stat = Path(f"/proc/{obj['pid']}/stat").read_text()
                        except OSError:
                            continue
                        if "mosquitto" in stat and stat[stat.rfind(")") + 2] == "T":
                            broker = obj["pid"]
            time.sleep(0.2)
        assert broker is not None, "the broker was never seen paused"
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    new = set(ledgers.glob("*.jsonl")) - before
    assert new  # the killed run left its ledger
    out = subprocess.run([str(Path(sys.executable).with_name("roughnet")), "clean"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert process_start_time(broker) is None  # a paused process is removed too
    assert not any(p.exists() for p in new)
    tokens = {p.stem for p in new}
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(f"rn-{t}-" in left for t in tokens), left
