"""The user's own processes ([[process]], docs/applications.md) in real runs: what roughnet reads from the
kernel agrees with an independent meter, final states are judged, events act on processes, and a killed
roughnet leaves nothing after `roughnet clean`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from cli_run import ROUGHNET, roughnet_run

from roughnet.topo.ledger import process_start_time

pytestmark = pytest.mark.root

HEAD = """
[scenario]
name = "apps-{name}"
timeout = "60 s"
seed = 7

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
engine = "wire"
{link}

[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["b"]
messages = 20
payload = "100 B"
rate = "20 msg/s"
"""


#: An iperf3 server on b (one test, then it exits) and a client on a that starts once the server listens; the
#: client's command follows (``command = [...]``).
IPERF_PAIR = """
[[process]]
name = "srv"
host = "b"
command = ["iperf3", "-s", "-1", "--forceflush"]
ready = { log = "Server listening" }

[[process]]
name = "cli"
host = "a"
after = "srv"
"""


def _record(results: Path) -> dict:
    (path,) = list(results.glob("runs/*/*/record.json"))
    return json.loads(path.read_text())


def _proc(record: dict, name: str) -> dict:
    return next(p for p in record["processes"] if p["name"] == name)


def test_iperf3_as_user_processes_agrees_with_iperf3s_own_figures(tmp_path):
    """iperf3 server and client as user processes over a wire link (5 ms each way, 20 Mbit/s, 1 % seeded loss
    from a to b): the client's data connection as roughnet read it from the kernel (sock_diag, final state from
    the destroy broadcast) against iperf3's own -J report, an independent meter of the same sockets.

    Bounds, from what each side reads and when:
    - retransmissions: iperf3 reads tcpi_total_retrans once, when its test ends; the segments still in flight
      then (a window of about 20-60 at this rate and RTT) may be resent after that read, and roughnet's figure
      is the socket's last. At 1 % loss that adds Poisson(<= 0.6) retransmissions: more than 8 has odds below
      1e-8. roughnet's is never lower.
    - bytes: the server's kernel received iperf3's 37-byte cookie and every byte iperf3's server read
      (sum_received), plus at most a receive buffer (tcp_rmem's ceiling) it had not read when the test ended.
    - RTT: the link's 10 ms round trip is a floor no sample can go under; min_rtt is within a few ms of it
      (queueing at 20 Mbit/s adds at most the wire's queue).
    - the link did drop frames: 3 s at 20 Mbit/s is ~5000 segments, so P(no loss at 1 %) is about e^-50.
    """
    scenario = tmp_path / "iperf.toml"
    scenario.write_text(HEAD.format(name="iperf", link='rate = "20 Mbit/s"\ndelay = "5 ms"\n'
                                    '[link.forward]\nloss = "1%"\n') + IPERF_PAIR + """command = ["iperf3", "-c", "b", "-t", "3", "-J", "--logfile", "client.json"]
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=180)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    srv, cli = _proc(rec, "srv"), _proc(rec, "cli")
    assert srv["ok"] and cli["ok"] and srv["final"] == {"exit": 0} == cli["final"]
    assert cli["run_as"].startswith("nobody")
    run_dir = next(results.glob("runs/*/*/"))
    iperf = json.loads((run_dir / "process-cli" / "client.json").read_text())
    sent = iperf["end"]["sum_sent"]
    received = iperf["end"]["sum_received"]["bytes"]
    data = max(cli["connections"], key=lambda c: c["bytes_acked"])  # the data stream (the other: control)
    assert data["dport"] == 5201 and data["closed"]
    assert sent["retransmits"] > 0  # the loss was there
    assert 0 <= data["total_retrans"] - sent["retransmits"] <= 8, (data["total_retrans"], sent["retransmits"])
    served = max(srv["connections"], key=lambda c: c["bytes_received"])
    rmem = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    assert 0 <= served["bytes_received"] - 37 - received <= rmem, (served["bytes_received"], received)
    assert served["total_retrans"] == 0  # the reverse direction loses nothing
    assert 10_000 <= data["min_rtt_us"] <= 15_000, data["min_rtt_us"]
    assert data["rtt_us_mean"] >= 10_000
    con = duckdb.connect(str(results / "results.duckdb"), read_only=True)
    rows = con.execute("select name, ok, tcp_retrans from processes order by position").fetchall()
    assert [r[:2] for r in rows] == [("srv", True), ("cli", True)]
    names = {r[0] for r in con.execute("select name from process_series where process = 'cli' and source = 'tcp'")
             .fetchall()}
    assert {"rtt_us", "retrans", "bytes_acked"} <= names


def test_a_final_state_other_than_expected_fails_the_run_with_the_reason_and_keeps_its_figures(tmp_path):
    scenario = tmp_path / "states.toml"
    scenario.write_text(HEAD.format(name="states", link='delay = "1 ms"') + """
[[process]]
name = "bad"
host = "a"
command = ["sh", "-c", "echo boom >&2; exit 3"]

[[process]]
name = "srv"
host = "b"
command = ["sleep", "30"]
stop = "1500 ms"
expect = { running = true }

[[process]]
name = "early"
host = "b"
command = ["sleep", "0.2"]
expect = { running = true }

[[process]]
name = "dies"
host = "a"
command = ["sh", "-c", "kill -INT $$"]
expect = { signal = "SIGINT" }

[[process]]
name = "busy"
host = "b"
command = ["sh", "-c", "(end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done); true"]
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120, exit_codes=(1,))
    rec = _record(results)
    assert rec["status"] == "failed"
    reason = rec["failure_reason"]
    assert "process 'bad': expected exit 0, got exit 3" in reason, reason
    assert "process 'early': expected it still running when stopped, but it ended by itself (exit 0)" in reason
    assert "'srv'" not in reason and "'dies'" not in reason
    assert "boom" in rec["stderr_tail"]
    assert rec["metrics"]["received"] == 20  # the agents' figures are kept
    srv = _proc(rec, "srv")
    assert srv["ok"] and srv["stop_sent"] == "SIGTERM" and srv["final"] == {"signal": "SIGTERM"}
    assert 1.4 <= srv["ended_s"] - 0 <= 10
    assert _proc(rec, "dies")["final"] == {"signal": "SIGINT"}
    # CPU of the process tree: the busy loop runs 1-2 s in a subshell (a child, counted through the shell's
    # cutime once reaped); on a 2-core machine it gets at least a third of a core
    busy = _proc(rec, "busy")
    assert busy["ok"] and busy["cpu_s"] >= 0.3, busy["cpu_s"]


def test_events_act_on_processes(tmp_path):
    scenario = tmp_path / "events.toml"
    scenario.write_text(HEAD.format(name="events", link='delay = "1 ms"').replace('rate = "20 msg/s"',
                                                                                  'rate = "10 msg/s"') + """
[[process]]
name = "victim"
host = "a"
command = ["sleep", "60"]
expect = { signal = "SIGKILL" }

[[process]]
name = "again"
host = "b"
command = ["sleep", "60"]
stop = "2500 ms"
expect = { running = true }

[[process]]
name = "napper"
host = "b"
command = ["sleep", "60"]
stop = "2500 ms"
expect = { running = true }

[[event]]
at = "500 ms"
action = "kill"
process = "victim"

[[event]]
at = "1 s"
action = "restart"
process = "again"

[[event]]
at = "500 ms"
action = "pause"
process = "napper"
for = "1 s"
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    victim, again, napper = (_proc(rec, n) for n in ("victim", "again", "napper"))
    assert victim["final"] == {"signal": "SIGKILL"} and 0.4 <= victim["ended_s"] <= 2.4
    assert again["restarts"] == 1 and again["earlier_exits"] == [{"signal": "SIGTERM", "stop_sent": "SIGTERM"}]
    assert again["ok"] and napper["ok"]
    events = {(e["target"], e["action"]): e for e in rec["events"]}
    assert set(events) == {("process victim", "kill"), ("process again", "restart"), ("process napper", "pause"),
                           ("process napper", "resume")}
    assert all(e["error"] is None for e in events.values()), events


def _ledger_of(token_prefix: str | None = None) -> list[Path]:
    return sorted(Path("/run/roughnet/ledger").glob("*.jsonl"))


def test_sigkill_of_roughnet_with_a_process_and_an_image_leaves_nothing_after_clean(tmp_path):
    import shutil

    from roughnet.apps import ocibundle

    if shutil.which("runc") is None:
        pytest.fail("runc missing: `make test` installs it (scripts/install-cluster-deps.sh)")
    image = ocibundle.build_test_image(tmp_path / "bb.oci.tar", name="bb", entrypoint=["/bin/sh", "-c"],
                                       cmd=["sleep 60"])
    scenario = tmp_path / "kill.toml"
    scenario.write_text(HEAD.format(name="kill", link='delay = "1 ms"').replace('messages = 20', 'messages = 600')
                        + f"""
[[process]]
name = "cmd"
host = "a"
command = ["sleep", "60"]
expect = {{ running = true }}

[[process]]
name = "img"
host = "b"
image = "{image}"
expect = {{ running = true }}
""")
    before = set(_ledger_of())
    proc = subprocess.Popen([*ROUGHNET, "run", str(scenario), "--no-report", "--results", str(tmp_path / "r")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        entries: list[dict] = []
        ledger = None
        while time.monotonic() < deadline:
            new = [p for p in _ledger_of() if p not in before]
            if new:
                ledger = new[0]
                entries = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
                if sum(1 for e in entries if e.get("process") in ("cmd", "img") and e["kind"] == "process") >= 2:
                    break
            time.sleep(0.1)
        assert ledger is not None and any(e["kind"] == "container" for e in entries), entries
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    user_procs = [(e["pid"], e["start_time"]) for e in entries if e.get("process") and e["kind"] == "process"]
    container = next(e for e in entries if e["kind"] == "container")
    token = ledger.name.split(".")[0]
    out = subprocess.run([*ROUGHNET, "clean"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for pid, st in user_procs:
        assert process_start_time(pid) != st, f"process {pid} still runs after clean"
    assert ocibundle.container_state(container["id"]) is None
    assert not Path(container["bundle"]).exists()
    assert container["bundle"] not in Path("/proc/self/mounts").read_text()
    assert not (Path("/var/lib/roughnet/work") / token).exists()
    assert not list(Path("/etc/netns").glob(f"rn-{token}-*"))
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"rn-{token}")]
    assert not ledger.exists()
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith("sleep 60")
                and p.name in {str(pid) for pid, _ in user_procs}]


def _cmdline(p: Path) -> str:
    try:
        return p.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_run_of_processes_only_with_an_event_on_its_link(tmp_path):
    """No [workload]: the processes are the run. A link event at 1 s raises the loss from 0 to 5 % (the wire's
    seeded loss); the client, a 3 s iperf3, then retransmits: at 5 % over ~2 s of a 20 Mbit/s stream (about
    3000 segments) P(no retransmission) is about e^-150. Before the event nothing is lost (0 % on the link),
    so the series' retransmissions come after 1 s but for drops at the link's queue in slow start (a few at
    most: the queue holds 50 ms at the rate): 5 % of ~3000 segments is ~150, more than 5 times those and at
    least 30 (P(fewer than 30 | mean 150) is below 1e-30). The run's CPU verdict is the machine's, as for
    agents."""
    head = HEAD.format(name="only", link='rate = "20 Mbit/s"\ndelay = "5 ms"')
    scenario = tmp_path / "only.toml"
    scenario.write_text(head[:head.index("[workload]")] + IPERF_PAIR + """command = ["iperf3", "-c", "b", "-t", "3"]

[[event]]
at = "1 s"
action = "set"
link = 0
loss = "5%"
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    assert rec["pattern"] is None and rec["protocol"] is None
    assert rec["events"][0]["error"] is None and rec["events"][0]["action"] == "set"
    cli = _proc(rec, "cli")
    assert cli["ok"] and cli["tcp_retrans"] > 0
    assert rec["metrics"]["link_drops_loss"] > 0
    retrans = [(r["t_s"], r["value"]) for r in rec["process_series"]
               if r["process"] == "cli" and r["source"] == "tcp" and r["name"] == "retrans" and r["value"]]
    before = sum(v for t, v in retrans if t < 1.0)  # only the queue's drops (slow start), if any
    after = sum(v for t, v in retrans if t >= 1.0)
    assert after >= 30 and after > 5 * before, (retrans, rec["metrics"])


def test_an_image_process_cpu_is_its_containers_not_runcs(tmp_path):
    """The image's program (a busy loop of busybox sh for ~1 s) runs under runc: the CPU roughnet records is
    the process tree's (runc, its init, the container's processes), so at least most of that second."""
    import shutil

    from roughnet.apps import ocibundle

    if shutil.which("runc") is None:
        pytest.fail("runc missing: `make test` installs it (scripts/install-cluster-deps.sh)")
    image = ocibundle.build_test_image(tmp_path / "busy.oci.tar", name="busy", entrypoint=["/bin/sh", "-c"],
                                       cmd=['end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done'])
    scenario = tmp_path / "busy.toml"
    head = HEAD.format(name="busy", link='delay = "1 ms"')
    scenario.write_text(head[:head.index("[workload]")] + f"""
[[process]]
name = "busy"
host = "a"
image = "{image}"
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    busy = _proc(rec, "busy")
    assert busy["kind"] == "image" and busy["final"] == {"exit": 0}
    assert busy["run_as"].startswith("nobody")
    # the loop runs 1-2 s of wall time; on a loaded 2-core machine it gets at least a third of a core
    assert busy["cpu_s"] >= 0.3, busy["cpu_s"]


def test_the_mqtt_example_measures_the_apps_own_latency_through_a_broker_restart(tmp_path):
    """scenarios/app-mqtt.toml at one point (0 % loss): the paho-mqtt subscriber's own latency samples (JSON
    lines) and both programs' sockets, while mosquitto restarts at 8 s. The one-way path car -> edge -> cloud
    has 30 + 5 ms of delay and 5 ms of uniform jitter on the first hop, so no message can arrive in under 30 ms
    (a floor); the subscriber resubscribes after the restart, so samples keep coming after it."""
    repo = Path(__file__).resolve().parents[2]
    text = (repo / "scenarios" / "app-mqtt.toml").read_text().replace('loss = ["0%", "2%"]', 'loss = ["0%"]')
    import shutil

    shutil.copytree(repo / "scenarios" / "app-mqtt", tmp_path / "app-mqtt")  # its scripts (files = ...)
    scenario = tmp_path / "app-mqtt.toml"
    scenario.write_text(text)
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=240)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    sub, pub = _proc(rec, "sub"), _proc(rec, "pub")
    assert sub["ok"] and pub["ok"]
    assert sub["app_count"] > 100  # 20 msg/s for 14 s, less what the restart cost
    assert sub["lat_p50_us"] >= 30_000
    restart = next(e for e in rec["events"] if e["target"] == "mosquitto")
    assert restart["error"] is None
    after = [r for r in rec["process_series"] if r["process"] == "sub" and r["source"] == "app"
             and r["name"] == "latency_ms" and r["t_s"] > restart["took_effect_s"] + 1]
    assert after, "no latency samples after the restart"
    run_dir = next(results.glob("runs/*/*/"))
    summary = json.loads((run_dir / "process-pub.stdout").read_text().strip().splitlines()[-1])
    assert summary["published"] == 280


PROM_SERVER = '''
import http.server, sys, threading
count = 0
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global count
        with lock:
            count += 1
            n = count
        body = ("# TYPE scrapes_total counter\\nscrapes_total %d\\n"
                "# TYPE op_seconds histogram\\n"
                'op_seconds_bucket{le="0.01"} %d\\nop_seconds_bucket{le="0.1"} %d\\n'
                'op_seconds_bucket{le="+Inf"} %d\\nop_seconds_sum %f\\nop_seconds_count %d\\n'
                % (n, 9 * n, 10 * n, 10 * n, 0.05 * n, 10 * n)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("0.0.0.0", 9100), H)
print("serving", flush=True)
s.serve_forever()
'''


def test_a_prometheus_endpoint_is_scraped_every_interval(tmp_path):
    """A process serving Prometheus text (a counter of its own scrapes and a histogram); roughnet scrapes it
    every series interval (200 ms) from inside its namespace while it runs (~2.5 s): the counter rises by one
    per scrape, and the histogram's buckets give a latency distribution (90 % of observations at or under
    10 ms, the rest under 100 ms)."""
    (tmp_path / "prom.py").write_text(PROM_SERVER)
    head = HEAD.format(name="prom", link='delay = "1 ms"').replace('timeout = "60 s"',
                                                                   'timeout = "60 s"\nseries_interval = "200 ms"')
    scenario = tmp_path / "prom.toml"
    scenario.write_text(head[:head.index("[workload]")] + """
[[process]]
name = "prom"
host = "b"
command = ["python3", "prom.py"]
files = ["prom.py"]
user = "root"  # python3 is roughnet's own; where it lives under /root, only root may run it
ready = { log = "serving" }
stop = "2500 ms"
expect = { running = true }
metrics = { prometheus = "http://:9100/metrics" }
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    prom = _proc(rec, "prom")
    assert prom["ok"] and prom["app_scrapes"] >= 5, prom
    values = [r["value"] for r in rec["process_series"] if r["process"] == "prom" and r["name"] == "scrapes_total"]
    assert len(values) >= 5 and values == sorted(values) and values[-1] - values[0] == len(values) - 1, values
    assert prom["app_count"] == 10 * values[-1]  # the last scrape's histogram
    assert prom["lat_p50_us"] <= 10_000 < prom["lat_max_us"] <= 100_000


def test_a_malformed_image_is_refused_before_anything_is_created(tmp_path):
    (tmp_path / "bad.oci.tar").write_bytes(b"not a tar archive at all")
    head = HEAD.format(name="badimg", link='delay = "1 ms"')
    scenario = tmp_path / "bad.toml"
    scenario.write_text(head[:head.index("[workload]")] + '\n[[process]]\nname = "x"\nhost = "a"\n'
                        'image = "bad.oci.tar"\n')
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    out = subprocess.run([*ROUGHNET, "run", str(scenario), "--no-report", "--results", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "process 'x': image bad.oci.tar" in out.stderr, out.stderr
    assert not (tmp_path / "r").exists()
    assert (set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()) <= before


def test_a_capture_names_the_process_of_each_conversation(tmp_path):
    """With capture = true the capture's TCP conversations are matched to the processes' connections (by
    address and port). The client's data direction, captured where it left host a: its payload bytes include
    every retransmission, so they are at least the kernel's bytes_acked less the SYN and FIN (2) and iperf3's
    cookie is in both; its retransmissions are counted by sequence ranges seen again, the kernel's by segments
    resent: the capture sees every segment the kernel resent on this interface (the link drops after it), so
    they agree up to a few (the capture test of the agents allows 2 for the same reason: tests/integration/
    test_capture.py)."""
    scenario = tmp_path / "cap.toml"
    head = HEAD.format(name="cap", link='rate = "10 Mbit/s"\ndelay = "2 ms"\ncapture = true\n'
                       '[link.forward]\nloss = "1%"\n')
    scenario.write_text(head[:head.index("[workload]")] + IPERF_PAIR + """command = ["iperf3", "-c", "b", "-t", "2"]
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    cli = _proc(rec, "cli")
    data = max(cli["connections"], key=lambda c: c["bytes_acked"])
    mine = [c for c in cli["captured"] if c["outbound"] and c["captured_at"] == "a"
            and c["conversation"].endswith(f":{data['dport']}") and f":{data['sport']} " in c["conversation"]]
    assert len(mine) == 1, cli["captured"]
    seen = mine[0]
    assert seen["data_bytes"] >= data["bytes_acked"] - 2
    assert seen["retrans"] > 0 and abs(seen["retrans"] - data["total_retrans"]) <= 3, (seen, data)


def test_processes_only_with_a_managed_broker(tmp_path):
    """No [workload], a managed mosquitto kept for the processes: Debian's own MQTT clients (mosquitto_sub for one
    message, mosquitto_pub) talk through it by host name (/etc/hosts of the namespaces)."""
    head = HEAD.format(name="brk", link='delay = "1 ms"')
    scenario = tmp_path / "brk.toml"
    scenario.write_text(head[:head.index("[workload]")] + """
[[service]]
kind = "mosquitto"
host = "b"

[[process]]
name = "sub"
host = "a"
# -d: its debug lines say when the subscription is in place; stdbuf -oL: its stdout (a file) line by line
command = ["stdbuf", "-oL", "mosquitto_sub", "-h", "b", "-t", "t/x", "-C", "1", "-v", "-d"]
ready = { log = "received SUBACK" }

[[process]]
name = "pub"
host = "a"
after = "sub"
command = ["mosquitto_pub", "-h", "b", "-t", "t/x", "-m", "hello"]
""")
    results = tmp_path / "results"
    roughnet_run(scenario, results, timeout=120)
    rec = _record(results)
    assert rec["status"] == "ok", rec["failure_reason"]
    assert _proc(rec, "sub")["final"] == {"exit": 0} and _proc(rec, "pub")["final"] == {"exit": 0}
    run_dir = next(results.glob("runs/*/*/"))
    assert "t/x hello" in (run_dir / "process-sub.stdout").read_text().splitlines()
    assert any(k.startswith("service_mosquitto") and k.endswith("_cpu_s") for k in rec["metrics"]), rec["metrics"]
