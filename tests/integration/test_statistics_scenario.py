"""scenarios/mqtt-wifi-repeat.toml at a small size: repeats become points with intervals in the
report and points.json, and `roughnet compare` judges two sets of its runs (root, agent, mosquitto).

The scenario shrunk by whole lines (200 messages, 3 repeats) and run with `roughnet run`; the
statistics themselves are tested on synthetic samples in tests/unit (test_stats, test_report_points,
test_compare). Here: the real records carry what they need (histograms, counts), and the numbers
hold together (every interval holds its estimate, each run's value lies in the runs' range).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import typer
from cli_run import needs, run_all_ok
from test_seed_scenarios import shrink
from typer.testing import CliRunner

from roughnet.cli.compare import register

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)"),
    pytest.mark.skipif(shutil.which("mosquitto") is None and not os.path.exists("/usr/sbin/mosquitto"),
                       reason="mosquitto is not installed (apt-get install mosquitto)"),
    needs("mqtt"),
]


def test_mqtt_wifi_repeat_small_points_and_compare(tmp_path):
    path = shrink("mqtt-wifi-repeat", {"workload.messages": "messages = 200", "scenario.repeat": "repeat = 3"},
                  tmp_path)
    res = tmp_path / "res"
    rows = run_all_ok(path, res, timeout=600)
    assert len(rows) == 6 and sorted(r["repeat"] for r in rows) == [0, 0, 1, 1, 2, 2]
    sweep_id = rows[0]["sweep_id"]
    report = res / "reports" / sweep_id
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "<h2>Points: 2, 3 runs each</h2>" in page
    doc = json.loads((report / "points.json").read_text())
    assert [p["params"] for p in doc["points"]] == [{"qos": 0}, {"qos": 1}]
    for p in doc["points"]:
        assert len(p["runs"]) == 3 and p["excluded"] == []
        for column in ("lat_p50_us", "lat_p99_us", "throughput_bps"):
            m = p["metrics"][column]
            assert m["n"] == 3 and m["lo"] <= m["value"] <= m["hi"] and m["min"] <= m["value"] <= m["max"]
        loss = p["metrics"]["loss_ratio"]
        assert loss["method"] == "wilson" and loss["lo"] <= loss["value"] <= loss["hi"]

    app = typer.Typer()

    @app.callback()
    def _main() -> None:
        pass

    register(app)
    out = CliRunner().invoke(app, ["compare", sweep_id, sweep_id, "--results", str(res), "--where-a", "qos=0",
                                   "--where-b", "qos=1", "--ignore", "qos", "--json", "-", "--fail-if-worse", "1000"])
    assert out.exit_code == 0, out.output  # no change beyond 1000 %
    cmp = json.loads(out.stdout)
    (point,) = cmp["points"]
    assert (point["a_runs"], point["b_runs"]) == (3, 3)
    assert set(point["metrics"]) == {"lat_p50_us", "lat_p99_us", "loss_ratio", "throughput_bps"}
    assert (res / "reports" / "compare" / f"{sweep_id}--{sweep_id}" / "compare.png").exists()


def test_load_search_small_finds_the_link_capacity(tmp_path):
    """scenarios/load-search.toml, UDP only, 1 s runs: the search brackets the 10 Mbit/s link's
    capacity for 1 KiB messages (1173 msg/s computed), with 2 runs at each boundary load."""
    import subprocess
    import sys

    path = shrink("load-search", {"workload.duration": 'duration = "1 s"', "sweep.protocol": 'protocol = ["udp"]'},
                  tmp_path)
    res = tmp_path / "res"
    cli = "from roughnet.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", cli, "search", str(path), "--key", "load", "--from", "300 msg/s",
                          "--to", "5000 msg/s", "--precision", "0.1", "--repeats", "2", "--results", str(res)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    doc = json.loads((res / "reports" / "search" / "load-search-load" / "search.json").read_text())
    (s,) = doc["searches"]
    assert s["point"] == {"protocol": "udp"} and s["stop"] == "bracketed"
    best, failing = s["best"], s["first_failing"]
    assert 900 <= best["load"] < failing["load"] <= 1500 and failing["load"] / best["load"] <= 1.1 + 1e-9
    assert len(best["runs"]) == 2 and all(r["ok"] for r in best["runs"])
    assert any("message loss" in reason for r in failing["runs"] for reason in r["reasons"])
    assert "highest sustainable load:" in out.stdout
