"""reuse = true live (root, namespaces, the built agent, real brokers): one broker serves a whole sweep.

A 3-run sweep (drop 0 / 5 / 10 % on the publisher's leg) over mosquitto and over Kafka with
``reuse = true``: one broker process (the same pid in every record) serves all three runs, each
run's impairments are its own (link drops grow with the drop rate; none at 0 %), each run has
its own complete records and artifacts (agent output, its slice of the broker's log), and
nothing is left afterwards (namespaces, ledger, broker process).  A broker that dies between two
runs fails the next run with its log lines and the run after it gets a fresh broker; a sweep
killed with SIGKILL mid-group leaves objects that `roughnet clean` finds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from roughnet.binaries import find_binary
from roughnet.services import kafka_libs, missing_for
from roughnet.topo import DEFAULT_LEDGER_DIR, clean_ledger, process_start_time

from cli_run import PROTOCOLS, ROUGHNET, fetch, roughnet_run, run_argv
from conftest import toml_hosts, toml_stream

ROOT_REASON = "needs root and network namespaces (run as root)"
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason=ROOT_REASON),
    pytest.mark.skipif(find_binary("roughnet-agent") is None, reason="roughnet-agent is not built (make build)"),
]
needs_mqtt = pytest.mark.skipif("mqtt" not in PROTOCOLS or bool(missing_for("mosquitto")),
                                reason="needs roughnet-agent with mqtt and mosquitto (make build; apt-get install "
                                       "mosquitto)")
needs_kafka = pytest.mark.skipif("kafka" not in PROTOCOLS or bool(missing_for("kafka")),
                                 reason=f"needs roughnet-agent with kafka, Java 17 and the Kafka jars in "
                                        f"{kafka_libs()} (make build; bash scripts/fetch-kafka.sh)")

MQTT_WORKLOAD = "\n" + toml_stream("mqtt", '["b"]', "512 B", "{messages}", "{rate}") + """\
[workload.mqtt]
qos = 1
"""
KAFKA_WORKLOAD = "\n" + toml_stream("kafka", '["b"]', "512 B", "{messages}", "{rate}") + """\
[workload.kafka]
acks = "all"
partitions = 2
"""


#: Messages and rate of a reuse sweep: enough frames cross the lossy link (1000 to 2000 forward for 2000 messages:
#: MQTT and Kafka put several in a segment) that each
#: run's measured loss tells its own rate from its neighbour's (check_loss_is_the_runs_own).
REUSE_MESSAGES, REUSE_RATE = 3000, "1000 msg/s"


def scenario(kind: str, workload: str, reuse: bool = True, messages: int = 300, name: str = "reuse",
             rate: str = "200 msg/s") -> str:
    return f"""
[scenario]
name = "{name}"
seed = 5
timeout = "120 s"
{toml_hosts("a", "b", "m")}\
[[link]]
between = ["a", "m"]
loss = "${{loss}}"
[[link]]
between = ["m", "b"]
[[service]]
kind = "{kind}"
host = "m"
reuse = {str(reuse).lower()}
{workload.format(messages=messages, rate=rate)}
[sweep]
loss = ["0%", "5%", "10%"]
"""


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(body)
    return p


def tokens_of(path: Path) -> set[str]:
    shown = subprocess.run([*ROUGHNET, "show", str(path), "--json"], capture_output=True, text=True, check=True).stdout
    return {r["run_id"][:8] for r in json.loads(shown)}


def namespaces_of(tokens: set[str]) -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    names = {ln.split()[0] for ln in out.splitlines() if ln.startswith("rn-")}
    return {n for n in names if n.split("-")[1] in tokens}


def ledgers_of(tokens: set[str]) -> list[Path]:
    return [DEFAULT_LEDGER_DIR / f"{t}.jsonl" for t in tokens if (DEFAULT_LEDGER_DIR / f"{t}.jsonl").exists()]


def run_cli(path: Path, results: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return roughnet_run(path, results, timeout=timeout)


def records(results: Path) -> list[dict]:
    """record.json of every run (what the store wrote beside the artifacts), in run order."""
    recs = [json.loads(p.read_text()) for p in results.glob("runs/*/*/record.json")]
    return sorted(recs, key=lambda r: r["index"])


def db_rows(results: Path) -> list[dict]:
    return fetch(results, "select run_id, run_index, status, metrics_extra, link_drops_loss from runs "
                          "order by run_index")


def _forward_loss(rec: dict) -> tuple[int, int]:
    fwd = rec["link_counters"]["0"]["forward"]
    return int(fwd["drops_loss"]), int(fwd.get("seen_at_loss_hook") or fwd.get("rx_packets", 0))


#: Standard deviations a run's measured loss may stray from its configured rate: |Z| > 4.5 happens with probability
#: 7e-6 per run (each frame is dropped independently: the wire's seeded generator or nftables' numgen random).
LOSS_SIGMAS = 4.5


def check_loss_is_the_runs_own(recs: list[dict], rates: tuple[float, ...] = (0.0, 0.05, 0.10)) -> None:
    """Each run's forward drops match its own loss (0, 5, 10 %), within LOSS_SIGMAS binomial deviations at the
    frames the link saw; those frames must be enough that the bound excludes the neighbouring rates, so that a run
    which silently kept the previous run's impairment fails (what reuse could get wrong)."""
    import math

    for rec, rate in zip(recs, rates):
        lost, seen = _forward_loss(rec)
        if rate == 0:
            assert lost == 0, (rec["index"], lost, seen)
            continue
        bound = LOSS_SIGMAS * math.sqrt(rate * (1 - rate) / seen)
        others = [r for r in rates if r != rate]
        assert all(abs(r - rate) > bound for r in others), \
            f"run {rec['index']}: {seen} frames cannot tell {rate:.0%} from {others} (bound {bound:.3f}); send more"
        assert abs(lost / seen - rate) <= bound, (rec["index"], lost, seen, rate, bound)


def check_one_broker_served_all(results: Path, path: Path, kind: str, log_name: str) -> list[dict]:
    recs = records(results)
    assert len(recs) == 3
    assert all(r["status"] == "ok" for r in recs), [(r["index"], r["failure_reason"]) for r in recs]
    key = f"service_{kind}@m_pid"
    pids = {r["metrics"][key] for r in recs}
    assert len(pids) == 1, f"expected one broker process for the three runs, got pids {pids}"
    first = recs[0]["run_id"]
    assert [r["service_started_by"] for r in recs] == [first] * 3
    assert [r["service_reused"] for r in recs] == [False, True, True]
    # the database has the same facts (metric extras)
    rows = db_rows(results)
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert {json.loads(r["metrics_extra"])[key] for r in rows} == pids
    check_loss_is_the_runs_own(recs)
    # each run's records and artifacts are complete
    for r in recs:
        art = results / "runs" / r["sweep_id"] / r["run_id"]
        for f in ("run.json", "record.json", "agent-a-sender.jsonl", "agent-b-receiver.jsonl", log_name):
            assert (art / f).is_file() and (art / f).stat().st_size > 0, f"{art / f} missing or empty"
        assert r["metrics"]["received"] == r["metrics"]["sent"] > 0  # reliable mode: nothing lost end to end
        assert r["metrics"][f"service_{kind}@m_rss_max_bytes"] > 0
        share = r["services"][0]
        assert share["pid"] in pids and share["log"] == log_name
    # the log slices are consecutive pieces of the broker's one log
    shares = [r["services"][0] for r in recs]
    assert shares[0]["log_from"] == 0
    assert all(b["log_from"] == a["log_to"] for a, b in zip(shares, shares[1:]))
    whole = Path(shares[0]["service_dir"]) / log_name
    slices = b"".join((results / "runs" / r["sweep_id"] / r["run_id"] / log_name).read_bytes() for r in recs)
    assert whole.read_bytes().startswith(slices)
    # nothing left: namespaces, ledger, the broker
    tokens = tokens_of(path)
    assert not namespaces_of(tokens) and not ledgers_of(tokens)
    pid = pids.pop()
    assert process_start_time(pid) is None or not Path(f"/proc/{pid}/cmdline").read_bytes().count(kind.encode()), \
        f"broker pid {pid} still runs"
    return recs


@needs_mqtt
def test_mosquitto_reused_across_a_lossy_sweep(tmp_path):
    path = write(tmp_path, scenario("mosquitto", MQTT_WORKLOAD, messages=REUSE_MESSAGES, rate=REUSE_RATE))
    res = tmp_path / "res"
    run_cli(path, res)
    check_one_broker_served_all(res, path, "mosquitto", "mosquitto.log")


@needs_mqtt
def test_without_reuse_every_run_has_its_own_broker(tmp_path):
    path = write(tmp_path, scenario("mosquitto", MQTT_WORKLOAD, reuse=False, messages=100))
    res = tmp_path / "res"
    run_cli(path, res)
    recs = records(res)
    assert all(r["status"] == "ok" for r in recs)
    assert len({r["metrics"]["service_mosquitto@m_pid"] for r in recs}) == 3
    assert [r["service_started_by"] for r in recs] == [r["run_id"] for r in recs]
    assert not any(r["service_reused"] for r in recs)


@needs_mqtt
def test_broker_dying_between_runs_fails_the_next_run_and_the_one_after_gets_a_fresh_broker(tmp_path):
    from roughnet.plan import plan_sweep
    from roughnet.results.store import Store
    from roughnet.run import preflight, run_sweep

    path = write(tmp_path, scenario("mosquitto", MQTT_WORKLOAD, messages=100))
    sweep = plan_sweep(path)
    pf = preflight(sweep)
    killed = []

    def on_done(run, record):
        if run.index == 0:  # our own broker, by its pid
            pid = record["metrics"]["service_mosquitto@m_pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    with Store(tmp_path / "res") as store:
        recs = run_sweep(sweep, store, pf, on_done=on_done)
    assert [r["status"] for r in recs] == ["ok", "failed", "ok"], [r["failure_reason"] for r in recs]
    assert "mosquitto on host m died" in recs[1]["failure_reason"] and "mosquitto.log" in recs[1]["failure_reason"]
    assert recs[2]["metrics"]["service_mosquitto@m_pid"] != killed[0]
    assert recs[2]["service_started_by"] == recs[2]["run_id"] and recs[2]["service_reused"] is False
    tokens = {r.run_id[:8] for r in sweep.runs}
    assert not namespaces_of(tokens) and not ledgers_of(tokens)


@needs_mqtt
def test_sigkill_mid_group_leaves_what_clean_finds(tmp_path):
    path = write(tmp_path, scenario("mosquitto", MQTT_WORKLOAD, messages=600))
    res = tmp_path / "res"
    tokens = tokens_of(path)
    proc = subprocess.Popen(run_argv(path, res), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(res.glob("runs/*/*/record.json")) and time.monotonic() < deadline:  # run 0 stored
        assert proc.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)  # in the middle of run 1, which uses run 0's environment
    proc.kill()
    proc.wait()
    left = namespaces_of(tokens)
    ledgers = ledgers_of(tokens)
    assert left and len(ledgers) == 1, (left, ledgers)
    entries = [json.loads(line) for line in ledgers[0].read_text().splitlines() if line.strip()]
    broker = [e for e in entries if e.get("kind") == "process" and "mosquitto" in str(e.get("argv0", ""))]
    assert len(broker) == 1
    dry = subprocess.run([*ROUGHNET, "clean", "--dry-run"], capture_output=True, text=True, timeout=60)
    assert all(ns in dry.stdout for ns in left), dry.stdout  # `roughnet clean` finds every namespace
    # remove only this sweep's objects (other engineers' dead runs are theirs to inspect)
    clean_ledger(ledgers[0])
    assert not namespaces_of(tokens) and not ledgers_of(tokens)
    assert process_start_time(int(broker[0]["pid"])) != broker[0]["start_time"]


@needs_kafka
def test_kafka_reused_across_a_lossy_sweep(tmp_path):
    path = write(tmp_path, scenario("kafka", KAFKA_WORKLOAD, messages=REUSE_MESSAGES, rate=REUSE_RATE))
    res = tmp_path / "res"
    run_cli(path, res)
    recs = check_one_broker_served_all(res, path, "kafka", "kafka.log")
    # every run had its own topic, created on the shared broker for it
    for r in recs:
        assert f"roughnet-{r['run_id']}" in r["services"][0]["probe"]


WIRE_SWEEP = """
[scenario]
name = "reuse-wire"
seed = 5
timeout = "120 s"
""" + toml_hosts("a", "b", "m") + """\
[[link]]
between = ["a", "m"]
engine = "wire"
delay = "${delay}"
loss = "${loss}"
[[link]]
between = ["m", "b"]
[[service]]
kind = "mosquitto"
host = "m"
reuse = true
""" + MQTT_WORKLOAD.format(messages=200, rate="200 msg/s") + """
[sweep]
delay = ["2 ms", "25 ms"]
loss = ["0%", "10%"]
"""


@needs_mqtt
@pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)")
def test_wire_link_gets_each_runs_delay_and_loss_with_one_broker(tmp_path):
    path = write(tmp_path, WIRE_SWEEP)
    res = tmp_path / "res"
    run_cli(path, res)
    recs = records(res)
    assert [r["status"] for r in recs] == ["ok"] * 4, [r["failure_reason"] for r in recs]
    assert len({r["metrics"]["service_mosquitto@m_pid"] for r in recs}) == 1
    assert [r["service_reused"] for r in recs] == [False, True, True, True]
    for r in recs:
        fwd = r["link_counters"]["0"]["forward"]
        delay_ns = {"2 ms": 2_000_000, "25 ms": 25_000_000}[r["params"]["delay"]]
        assert r["link_counters"]["0"]["engine"] == "wire" and fwd["configured_delay_ns"] == delay_ns
        # the publisher's leg crosses the link once: no message can be faster than its delay
        assert r["metrics"]["lat_min_us"] >= delay_ns / 1000
        assert (fwd["drops_loss"] > 0) == (r["params"]["loss"] == "10%"), (r["params"], fwd["drops_loss"])
    tokens = tokens_of(path)
    assert not namespaces_of(tokens) and not ledgers_of(tokens)


@needs_mqtt
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_group_tears_everything_down(tmp_path, sig):
    path = write(tmp_path, scenario("mosquitto", MQTT_WORKLOAD, messages=600))
    res = tmp_path / "res"
    tokens = tokens_of(path)
    proc = subprocess.Popen(run_argv(path, res), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(res.glob("runs/*/*/record.json")) and time.monotonic() < deadline:  # run 0 stored
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    ledger = next(iter(ledgers_of(tokens)))
    broker = [json.loads(line) for line in ledger.read_text().splitlines()
              if '"process"' in line and "mosquitto" in line]
    time.sleep(1.0)  # in the middle of run 1, on run 0's broker
    proc.send_signal(sig)
    out, errs = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out[-2000:], errs[-2000:])
    assert not namespaces_of(tokens) and not ledgers_of(tokens)
    assert len(broker) == 1 and process_start_time(int(broker[0]["pid"])) != broker[0]["start_time"]
    stored = records(res)
    assert len(stored) == 1 and stored[0]["status"] == "ok"
