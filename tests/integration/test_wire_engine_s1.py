"""SEEDS S1 at CI size: scenarios/tcp-udp-link.toml cut down (two links, TCP, two segment sizes, 2 s), run with
the real CLI on the wire engine; the S1 trend as a property: TCP throughput does not fall as the segment grows,
and no run gets more than its link's rate.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from roughnet.binaries import find_binary

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)"),
    pytest.mark.skipif(find_binary("roughnet-agent") is None, reason="roughnet-agent is not built (make build)"),
]


def small_s1(text: str) -> str:
    text = re.sub(r"link = \[\n(.*\n)*?\]\n", 'link = [\n  { name = "5M-2ms", rate = "5 Mbit/s", delay = "2 ms" },\n'
                  '  { name = "10M-1ms", rate = "10 Mbit/s", delay = "1 ms" },\n]\n', text)
    text = text.replace('protocol = ["tcp", "udp"]', 'protocol = ["tcp"]')
    text = re.sub(r"send = \[\n(.*\n)*?\]\n", 'send = [{ name = "bulk", pattern = "bulk", rate = "max" }]\n', text)
    text = text.replace('mss = ["536 B", "1024 B", "1436 B"]', 'mss = ["536 B", "1436 B"]')
    text = text.replace('buffer = ["131072 B", "1310720 B"]', 'buffer = ["131072 B"]')
    text = text.replace('size = ["512 B", "1024 B", "1436 B"]', 'size = ["1436 B"]')
    text = text.replace('duration = "3 s"', 'duration = "2 s"')
    return text.split("[[sweep.exclude]]")[0] + "\n"


def test_s1_tcp_throughput_grows_with_segment_size(tmp_path):
    src = (REPO / "scenarios" / "tcp-udp-link.toml").read_text()
    scen = tmp_path / "s1-small.toml"
    scen.write_text(small_s1(src))
    results = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "roughnet.cli", "run", str(scen), "--results", str(results),
                          "--no-report"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    con = duckdb.connect(str(results / "results.duckdb"), read_only=True)
    cols = [r[0] for r in con.execute("DESCRIBE runs").fetchall()]
    assert "engine" in cols
    rows = con.execute("SELECT params, engine, throughput_bps, status FROM runs").fetchall()
    con.close()
    import json

    got: dict[tuple[str, str], float] = {}
    for params, engine, throughput, status in rows:
        params = json.loads(params) if isinstance(params, str) else params
        assert status == "ok" and engine == "wire"
        got[(params["link"], params["mss"])] = throughput
    assert len(got) == 4
    for link, rate in (("5M-2ms", 5e6), ("10M-1ms", 10e6)):
        small, large = got[(link, "536 B")], got[(link, "1436 B")]
        # Efficiency = throughput / rate: at most 1, and a larger segment carries less header per byte.
        assert 0.5 < small / rate <= 1.0 and 0.5 < large / rate <= 1.0, (link, small, large)
        assert large >= 0.98 * small, (link, small, large)
