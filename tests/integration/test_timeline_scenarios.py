"""The timeline scenarios at CI size (docs/timelines.md, docs/scenarios.md): latency-under-load.toml
(a control stream beside a bulk transfer, deep against short queue) and broker-outage.toml (a broker
killed and restarted, a subscriber cut off, per brokered protocol). Root, the agent, the brokers."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_run import needs, run_argv

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def records(results: Path) -> list[dict]:
    out = [json.loads(Path(p).read_text()) for p in glob.glob(str(results / "runs" / "*" / "*" / "record.json"))]
    return sorted(out, key=lambda r: r["index"])


def run_file(text: str, tmp_path: Path, timeout: float) -> list[dict]:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    out = subprocess.run(run_argv(path, tmp_path / "res", report=True), capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return records(tmp_path / "res")


@needs("udp", "tcp")
def test_latency_under_load_deep_queue_holds_the_control_stream_back(tmp_path):
    text = (SCENARIOS / "latency-under-load.toml").read_text()
    text = (text.replace('duration = "30 s"', 'duration = "8 s"').replace('start = "10 s"', 'start = "2 s"')
            .replace('duration = "10 s"', 'duration = "4 s"').replace('protocol = ["udp", "tcp"]', 'protocol = ["udp"]'))
    rows = run_file(text, tmp_path, timeout=300)
    assert [r["params"]["queue"] for r in rows] == ["32 KiB", "1 MiB"]
    p99 = {}
    for r in rows:
        assert r["status"] == "ok", r["failure_reason"]
        w = {x["name"]: x for x in r["workloads"]}
        assert w["bulk"]["background"] and w["bulk"]["metrics"]["throughput_bps"] > 7e6
        p99[r["params"]["queue"]] = w["control"]["metrics"]["lat_p99_us"]
        assert r["metrics"]["lat_p99_us"] == p99[r["params"]["queue"]]  # the headline is the control stream's
        # per second: the control stream's p99 is higher while the bulk transfer runs than before it
        series = {round(s["t_s"]): s for s in r["series"] if s["workload"] == "control"}
        assert series[1]["lat_p99_us"] < 20_000 and max(series[t]["lat_p99_us"] or 0 for t in (3, 4, 5)) > 20_000
    # a 1 MiB queue at 10 Mbit/s holds up to 0.84 s; 32 KiB about 26 ms
    assert p99["32 KiB"] < 60_000 and p99["1 MiB"] > 300_000, p99
