"""Every scenario in scenarios/ runs at a small size, and its trend holds (root, agent, brokers).

Each test shrinks a committed scenario file by replacing a few whole lines (fewer messages,
fewer sweep values), runs it with `roughnet run`, and asserts the seed experiment's trend as a
property. The scenario files themselves stay full size for users.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from roughnet.binaries import agent_version, find_binary

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
ROUGHNET = [sys.executable, "-m", "roughnet.cli"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")


def _protocols() -> set[str]:
    agent = find_binary("roughnet-agent")
    try:
        return set(agent_version(str(agent)).get("protocols", [])) if agent else set()
    except Exception:  # noqa: BLE001
        return set()


PROTOCOLS = _protocols()


def needs(*protocols: str):
    missing = [p for p in protocols if p not in PROTOCOLS]
    return pytest.mark.skipif(bool(missing), reason=f"roughnet-agent built without {', '.join(missing)} (make build)")


def shrink(name: str, replace: dict[str, str], tmp_path: Path) -> Path:
    """A copy of scenarios/<name>.toml with lines replaced: {"sweep.loss": 'loss = [...]'}.

    The key names a table ([sweep], [workload], [scenario], ...) and a key in it; the
    line `key = ...` inside that table is replaced by the given line.
    """
    lines = (SCENARIOS / f"{name}.toml").read_text().splitlines()
    for dotted, new_line in replace.items():
        table, key = dotted.rsplit(".", 1)
        section, hits = None, 0
        for i, line in enumerate(lines):
            header = re.match(r"^\[+([^\]]+)\]+\s*$", line)
            if header:
                section = header.group(1).strip()
                continue
            if section == table and re.match(rf"^{re.escape(key)}\s*=", line):
                lines[i] = new_line
                hits += 1
                break
        assert hits == 1, f"{name}.toml has no line '{key} = ...' in [{table}]"
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(path: Path, tmp_path: Path, timeout: float = 1500) -> list[dict]:
    res = tmp_path / "res"
    out = subprocess.run([*ROUGHNET, "run", str(path), "--results", str(res)], capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    assert "report:" in out.stdout
    con = duckdb.connect(str(res / "results.duckdb"), read_only=True)
    try:
        cur = con.execute("select * from runs order by run_index")
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        con.close()
    for r in rows:
        assert r["status"] == "ok", (r["params"], r["failure_reason"])
    return rows


def param(row: dict, key: str):
    import json

    return json.loads(row["params"])[key]


def test_quickstart_small(tmp_path):
    path = shrink("quickstart", {"workload.messages": "messages = 300", "sweep.rate": 'rate = ["100 Mbit/s"]'}, tmp_path)
    rows = run(path, tmp_path)
    assert len(rows) == 8
    # UDP loses about the link's loss; TCP loses nothing
    for r in rows:
        if param(r, "protocol") == "tcp":
            assert r["lost"] == 0
        elif param(r, "loss") == "0%":
            assert r["lost"] == 0


@needs("zenoh", "mqtt", "kafka")
def test_v2v_loss_latency_does_not_fall_as_drop_rate_rises(tmp_path):
    path = shrink("v2v-loss", {
        "workload.messages": "messages = 150",
        "workload.warmup": "warmup = 10",
        "sweep.loss": 'loss = ["0%", "10%", "25%"]',
        "sweep.payload": 'payload = ["10 KB"]',
        "scenario.timeout": 'timeout = "240 s"',
    }, tmp_path)
    rows = run(path, tmp_path)
    assert len(rows) == 9
    for proto in ("zenoh", "mqtt", "kafka"):
        by_loss = {param(r, "loss"): r for r in rows if param(r, "protocol") == proto}
        # reliable settings: nothing lost, whatever the drop rate
        assert all(r["lost"] == 0 for r in by_loss.values()), proto
        # the S0 trend, with slack for noise at the low end: the mean at 25 % is not below the mean at 0 %
        assert by_loss["25%"]["lat_mean_us"] >= by_loss["0%"]["lat_mean_us"], proto
        assert by_loss["25%"]["link_drops"] > by_loss["0%"]["link_drops"], proto


@needs("zmq", "dds")
def test_zmq_dds_rtt_round_trip_grows_with_message_size(tmp_path):
    import json

    path = shrink("zmq-dds-rtt", {"workload.messages": "messages = 120", "workload.step": 'step = "8 KB"',
                                  "sweep.interval": 'interval = ["10 ms"]'}, tmp_path)
    rows = run(path, tmp_path)
    assert len(rows) == 2
    for r in rows:
        points = json.loads(r["points"]) if isinstance(r["points"], str) else r["points"]
        assert len(points) >= 100, len(points)
        small = statistics.median(rtt for size, rtt in points[:20])
        large = statistics.median(rtt for size, rtt in points[-20:])
        assert large > small, (param(r, "protocol"), small, large)
