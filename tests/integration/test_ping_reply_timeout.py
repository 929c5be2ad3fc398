"""`[workload] reply_timeout` reaches the pinger (issue 26): on a link that loses every reply, a closed-loop
ping waits `reply_timeout` per request, so 6 requests take about 6 x 50 ms with `reply_timeout = "50 ms"` and
about 6 x 2 s with `"2 s"` (the agent's default was a fixed 1 s). Through `roughnet run` (root, namespaces)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roughnet.binaries import find_binary

from cli_run import roughnet_run

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)"),
    pytest.mark.skipif(find_binary("roughnet-agent") is None, reason="roughnet-agent is not built (make build)"),
]


def scenario(reply_timeout: str) -> str:
    return f"""
[scenario]
name = "reply-timeout"
engine = "kernel"
timeout = "30 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
[link.reverse]
loss = "100%"
[workload]
pattern = "ping"
protocol = "udp"
from = "a"
to = "b"
payload = "100 B"
messages = 6
reply_timeout = "{reply_timeout}"
"""


def pinger(tmp_path: Path, reply_timeout: str) -> tuple[dict, float]:
    """The pinger's result line and how long it pinged (from its agent's JSON lines)."""
    f = tmp_path / f"{reply_timeout.replace(' ', '')}.toml"
    f.write_text(scenario(reply_timeout))
    res = tmp_path / f"res-{reply_timeout.replace(' ', '')}"
    roughnet_run(f, res, timeout=120, exit_codes=(0, 1))
    (record_path,) = res.glob("runs/*/*/record.json")
    record = json.loads(record_path.read_text())
    return record, float(record["duration_s"])


@pytest.mark.slowlink(seconds=16)  # waits out lost replies; 3.4 s of CPU in 21 s
def test_the_pinger_waits_reply_timeout_for_each_lost_reply(tmp_path: Path) -> None:
    short, short_s = pinger(tmp_path, "50 ms")
    long, long_s = pinger(tmp_path, "2 s")
    for rec in (short, long):
        assert rec["run"]["workload"]["reply_timeout_ns"] in (50_000_000, 2_000_000_000), rec["run"]["workload"]
    # 6 requests, every reply lost: 6 x (2 s - 50 ms) = 11.7 s longer; generous for a busy machine
    assert long_s - short_s > 8.0, (short_s, long_s)
    assert short_s < long_s / 2, (short_s, long_s)
