"""roughnet run end to end (root, namespaces, the built agent): what the user sees.

Properties across conditions rather than exact numbers: a rate-limited link
gives a throughput close to its rate, random loss is measured within a
binomial bound, the root namespace is the same before and after, an
interrupted sweep leaves nothing behind and resumes with only what is missing.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from roughnet.binaries import find_binary

ROOT_REASON = "needs root and network namespaces (run as root)"
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason=ROOT_REASON),
    pytest.mark.skipif(find_binary("roughnet-agent") is None, reason="roughnet-agent is not built (make build)"),
]

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]


def scenario(tmp_path: Path, body: str, name: str = "it") -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(body)
    return p


def roughnet(*args: str, results: Path, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([*ROUGHNET, *args, "--results", str(results)] if args[0] in ("run", "results", "report", "export")
                         else [*ROUGHNET, *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"roughnet {' '.join(args)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def runs(results: Path) -> list[dict]:
    con = duckdb.connect(str(results / "results.duckdb"), read_only=True)
    try:
        cur = con.execute("select * from runs order by run_index")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        con.close()


def rn_namespaces(scenario_path: Path | None = None) -> set[str]:
    """roughnet's namespaces; with a scenario, only those of its runs (other runs may be going on)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    names = {ln.split()[0] for ln in out.splitlines() if ln.startswith("rn-")}
    if scenario_path is None:
        return names
    shown = subprocess.run([*ROUGHNET, "show", str(scenario_path), "--json"], capture_output=True, text=True,
                           check=True).stdout
    tokens = {r["run_id"][:8] for r in json.loads(shown)}
    return {n for n in names if n.split("-")[1] in tokens}


def root_snapshot() -> dict[str, str]:
    cmds = {
        "links": ["ip", "-j", "link"], "addrs": ["ip", "-j", "addr"], "routes": ["ip", "-j", "route", "show", "table", "all"],
        "rules": ["ip", "-j", "rule"], "qdiscs": ["tc", "-j", "qdisc"], "nft": ["nft", "-j", "list", "ruleset"],
    }
    snap = {k: subprocess.run(c, capture_output=True, text=True).stdout for k, c in cmds.items()}
    # counters and link statistics change with any traffic; keep the configuration only
    links = json.loads(snap["links"])
    snap["links"] = json.dumps(sorted((lk["ifname"], lk.get("mtu"), lk.get("operstate")) for lk in links))
    return snap


TWO_HOSTS = """
[scenario]
name = "{name}"
timeout = "40 s"
[[host]]
name = "a"
[[host]]
name = "b"
"""


def test_rate_limited_link_tcp_and_udp_throughput_close_to_rate(tmp_path):
    body = TWO_HOSTS.format(name="rate") + """
[[link]]
between = ["a", "b"]
rate = "10 Mbit/s"
[workload]
pattern = "bulk"
protocol = "${protocol}"
from = "a"
to = "b"
payload = "1400 B"
duration = "4 s"
[sweep]
protocol = ["tcp", "udp"]
"""
    res = tmp_path / "res"
    roughnet("run", str(scenario(tmp_path, body)), "--no-report", results=res)
    rows = runs(res)
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    for r in rows:
        mbps = r["throughput_bps"] / 1e6
        # goodput is below the 10 Mbit/s line rate by headers (TCP/IP ~4 %, UDP/IP ~2 % at 1400 B)
        assert 8.5 <= mbps <= 10.05, (r["protocol"], mbps)
        # what the run cost around the measurement (docs/results-format.md), with the 4 s of traffic inside
        extra = json.loads(r["metrics_extra"]) if isinstance(r["metrics_extra"], str) else r["metrics_extra"]
        assert extra["harness_setup_s"] > 0 and extra["harness_teardown_s"] > 0, extra
        assert extra["harness_measure_s"] >= 4.0, extra
        assert (extra["harness_setup_s"] + extra["harness_measure_s"] + extra["harness_teardown_s"]
                <= r["duration_s"] + 0.01), (extra, r["duration_s"])


def test_random_loss_measured_within_binomial_bound(tmp_path):
    n, p = 6000, 0.10
    body = TWO_HOSTS.format(name="loss") + f"""
[[link]]
between = ["a", "b"]
loss = "10%"
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = "b"
payload = "200 B"
messages = {n}
rate = "3000 msg/s"
"""
    res = tmp_path / "res"
    roughnet("run", str(scenario(tmp_path, body)), "--no-report", results=res)
    (r,) = runs(res)
    assert r["status"] == "ok"
    z = 3.29  # two-sided 99.9 %
    sd = math.sqrt(n * p * (1 - p))
    assert n * p - z * sd <= r["lost"] <= n * p + z * sd, r["lost"]
    # the engine's own count of dropped packets agrees with what the receiver missed
    assert r["link_drops_loss"] is not None and abs(r["link_drops_loss"] - r["lost"]) <= 0.02 * n


def test_root_namespace_unchanged_by_a_run(tmp_path):
    body = TWO_HOSTS.format(name="root") + """
[[host]]
name = "c"
[[link]]
between = ["a", "b"]
rate = "20 Mbit/s"
loss = "1%"
[[link]]
between = ["b", "c"]
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = "c"
payload = "512 B"
messages = 300
rate = "300 msg/s"
"""
    before = root_snapshot()
    res = tmp_path / "res"
    path = scenario(tmp_path, body)
    roughnet("run", str(path), "--no-report", results=res)
    assert runs(res)[0]["status"] == "ok"
    assert root_snapshot() == before
    assert not rn_namespaces(path)


SWEEP = TWO_HOSTS.format(name="sweep") + """
[[link]]
between = ["a", "b"]
rate = "50 Mbit/s"
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = "b"
payload = "${payload}"
messages = 750
rate = "500 msg/s"
[sweep]
payload = ["100 B", "200 B", "300 B", "400 B"]
"""  # runs of 1.5 s: an interrupt 1 s after the first is stored lands in the second


def _wait_for_rows(results: Path, count: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until ``count`` runs are stored.

    The running sweep holds the database open for writing (DuckDB lets no other process
    read it meanwhile), so progress is read from the per-run record.json files, which the
    store writes just before each run's transaction commits (and the run is then kept even if interrupted).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if len(list(results.glob("runs/*/*/record.json"))) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} runs stored after {timeout} s")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_sweep_leaves_nothing_and_resume_runs_only_missing(tmp_path, sig):
    path = scenario(tmp_path, SWEEP)
    res = tmp_path / "res"
    proc = subprocess.Popen([*ROUGHNET, "run", str(path), "--no-report", "--results", str(res)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_rows(res, 1, proc)
    time.sleep(1.0)  # now in the middle of the second run
    proc.send_signal(sig)
    out, errs = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, errs)
    assert not rn_namespaces(path)
    done = runs(res)
    assert 1 <= len(done) < 4 and all(r["status"] == "ok" for r in done)
    first_ids = {r["run_id"] for r in done}
    r2 = roughnet("run", str(path), "--resume", "--no-report", results=res)
    assert f"{len(done)} already stored" in r2.stdout
    after = runs(res)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after)
    # the stored runs were not run again
    before_started = {r["run_id"]: r["started_at"] for r in done}
    for r in after:
        if r["run_id"] in first_ids:
            assert r["started_at"] == before_started[r["run_id"]]


# one run of 20 s: a SIGKILL soon after its namespaces appear lands inside the run, not between
# two runs of a sweep (whose teardown and setup leave moments with no namespaces at all)
LONG_RUN = TWO_HOSTS.format(name="killed") + """
[[link]]
between = ["a", "b"]
[workload]
pattern = "stream"
protocol = "tcp"
from = "a"
to = "b"
payload = "100 B"
messages = 10000
rate = "500 msg/s"
"""


def test_sigkill_leaves_objects_that_clean_removes(tmp_path):
    path = scenario(tmp_path, LONG_RUN)
    res = tmp_path / "res"
    before = root_snapshot()
    # the scenario's run tokens, read once (`roughnet show` takes a second, longer than the polling step)
    shown = subprocess.run([*ROUGHNET, "show", str(path), "--json"], capture_output=True, text=True,
                           check=True).stdout
    tokens = {r["run_id"][:8] for r in json.loads(shown)}

    def namespaces() -> set[str]:
        return {n for n in rn_namespaces() if n.split("-")[1] in tokens}

    proc = subprocess.Popen([*ROUGHNET, "run", str(path), "--no-report", "--results", str(res)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not namespaces() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.5)
    assert proc.poll() is None, "the 20 s run ended before it could be killed"
    proc.kill()
    proc.wait()
    assert namespaces(), "expected namespaces left behind by the killed run"
    out = roughnet("clean", results=res)
    assert "removed" in out.stdout
    assert not namespaces()
    assert root_snapshot() == before
    # stored runs stay readable
    if (res / "results.duckdb").exists():
        runs(res)


def test_results_report_export_commands(tmp_path):
    body = TWO_HOSTS.format(name="cmds") + """
[[link]]
between = ["a", "b"]
[workload]
pattern = "ping"
protocol = "udp"
from = "a"
to = "b"
payload = "64 B"
messages = 500
interval = "1 ms"
"""
    res = tmp_path / "res"
    out = roughnet("run", str(scenario(tmp_path, body)), results=res)
    assert "report:" in out.stdout
    assert "cmds" in roughnet("results", results=res).stdout
    assert roughnet("report", "cmds", "--format", "perftest", results=res).stdout.strip()
    csv = tmp_path / "x.csv"
    roughnet("export", "cmds", "--format", "csv", "--out", str(csv), results=res)
    assert csv.read_text().count("\n") >= 2
    (r,) = runs(res)
    assert r["status"] == "ok" and r["validity"] in ("valid", "suspect")
    assert 0 < r["lat_p50_us"] < 10_000  # a round trip over an unimpaired veth
