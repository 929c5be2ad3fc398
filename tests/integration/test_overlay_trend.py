"""SEEDS S2 trends through `roughnet run`: VXLAN costs at least its header overhead; dds-overlay at CI size.

The trend test sends UDP as fast as it can through a 10 Mbit/s link (kernel engine, tbf on the
underlay veth), plain and with a VXLAN overlay, for two message sizes.  The rate limit counts whole
frames, so goodput scales with payload / frame: a frame of f bytes (UDP payload + 8 + 20 + 14)
becomes f + 50 with VXLAN, and the overlay's goodput cannot exceed plain * f / (f + 50), plus a
tolerance for measurement noise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from roughnet.binaries import agent_version, find_binary

REPO = Path(__file__).resolve().parents[2]
ROUGHNET = [sys.executable, "-m", "roughnet.cli"]
UDP_IP_ETH = 8 + 20 + 14
VXLAN = 50
TOLERANCE = 0.03  # relative, on top of the header overhead

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")


def _protocols() -> set[str]:
    agent = find_binary("roughnet-agent")
    try:
        return set(agent_version(str(agent)).get("protocols", [])) if agent else set()
    except Exception:  # noqa: BLE001
        return set()


PROTOCOLS = _protocols()

TREND = """
[scenario]
name = "vxlan-cost"
engine = "kernel"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
rate = "10 Mbit/s"
overlay = "${network}"
[workload]
pattern = "bulk"
protocol = "udp"
from = "a"
to = "b"
payload = "${payload}"
duration = "3 s"
[sweep]
payload = ["200 B", "1000 B"]
network = ["none", "vxlan"]
"""


def _run(args: list[str], res: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    out = subprocess.run([*ROUGHNET, "run", *args, "--results", str(res), "--no-report"], capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    return out


def _rows(res: Path) -> list[dict]:
    con = duckdb.connect(str(res / "results.duckdb"), read_only=True)
    try:
        cur = con.execute("select * from runs order by run_index")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        con.close()


@pytest.mark.skipif("udp" not in PROTOCOLS, reason="roughnet-agent not built (make build)")
def test_vxlan_costs_at_least_its_header_overhead(tmp_path):
    path = tmp_path / "vxlan-cost.toml"
    path.write_text(TREND)
    _run([str(path)], tmp_path / "res")
    rows = _rows(tmp_path / "res")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [r["failure_reason"] for r in rows]
    got = {(json.loads(r["params"])["payload"], json.loads(r["params"])["network"]): r["throughput_bps"] for r in rows}
    ratios = {}
    for payload in ("200 B", "1000 B"):
        plain, vxlan = got[(payload, "none")], got[(payload, "vxlan")]
        frame = int(payload.split()[0]) + UDP_IP_ETH
        bound = frame / (frame + VXLAN)
        ratios[payload] = vxlan / plain
        # the overlay pays at least the headers' share of the link (and works: not far below that)
        assert vxlan <= plain * bound * (1 + TOLERANCE), (payload, plain, vxlan, bound)
        assert vxlan >= plain * bound * 0.8, (payload, plain, vxlan, bound)
        # the plain link is near the rate limit, payload's share of each frame
        assert 0.8 * 10e6 * (frame - UDP_IP_ETH) / frame <= plain <= 1.05 * 10e6, (payload, plain)
    # the overhead weighs more on small messages
    assert ratios["200 B"] < ratios["1000 B"], ratios


@pytest.mark.skipif("dds" not in PROTOCOLS, reason="roughnet-agent built without dds (make build)")
def test_dds_overlay_scenario_rows_from_to_and_perftest_lines(tmp_path):
    text = (REPO / "scenarios" / "dds-overlay.toml").read_text()
    text = text.replace('duration = "10 s"', 'duration = "1 s"').replace("warmup = 100", "warmup = 10")
    text = text.replace('schedule = { file = "dds-schedule.csv"', 'schedule = { file = "%s"'
                        % (REPO / "scenarios" / "dds-schedule.csv"))
    text = text.replace('test = [{ name = "throughput", rate = "max" }, { name = "latency", rate = "1000 msg/s" }]',
                        'test = [{ name = "latency", rate = "1000 msg/s" }]')
    assert 'duration = "1 s"' in text and 'name = "latency"' in text and str(REPO) in text
    path = tmp_path / "dds-overlay.toml"
    path.write_text(text)
    res = tmp_path / "res"
    _run([str(path), "--from", "6", "--to", "7"], res)
    rows = _rows(res)
    # rows 6 (multicast, 2 subscribers) and 7 (unicast, 4 subscribers), plain and vxlan; no other row
    got = sorted((json.loads(r["params"])["network"], json.loads(r["params"])["schedule"]) for r in rows)
    assert got == [("none", "row 6"), ("none", "row 7"), ("vxlan", "row 6"), ("vxlan", "row 7")]
    for r in rows:
        assert r["status"] == "ok", r["failure_reason"]
        assert r["received"] and r["received"] > 0, r
    out = subprocess.run([*ROUGHNET, "report", "dds-overlay", "--format", "perftest", "--results", str(res)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("One-way Latency Summary:") >= 4 and "Throughput Summary:" in out.stdout
    # the summary says 4 planned runs, not 36: the rows left out are not missing
    sweeps = duckdb.connect(str(res / "results.duckdb"), read_only=True)
    try:
        assert sweeps.execute("select run_count from sweeps").fetchall() == [(4,)]
    finally:
        sweeps.close()
