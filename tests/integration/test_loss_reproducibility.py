"""Which engine's random loss can be reproduced (issue 26), as every run's record says it: the kernel engine's
nftables `numgen random` cannot be seeded (the record says the loss pattern is not reproducible and names the
wire engine for one that is), the wire engine's loss is seeded with the run's seed (the record says so, with
the seed). One short lossy UDP stream on each engine, through `roughnet run` (root, namespaces)."""

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
    pytest.mark.skipif(find_binary("roughnet-agent") is None or find_binary("roughnet-wire") is None,
                       reason="roughnet-agent and roughnet-wire are not built (make build)"),
]


def scenario(engine: str) -> str:
    return f"""
[scenario]
name = "loss-{engine}"
engine = "{engine}"
timeout = "20 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
loss = "5%"
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = "b"
payload = "200 B"
messages = 300
rate = "1000 msg/s"
"""


def record(tmp_path: Path, engine: str) -> dict:
    f = tmp_path / f"{engine}.toml"
    f.write_text(scenario(engine))
    res = tmp_path / f"res-{engine}"
    roughnet_run(f, res, timeout=120)
    (path,) = res.glob("runs/*/*/record.json")
    return json.loads(path.read_text())


def test_the_kernel_engines_record_says_its_loss_is_not_reproducible(tmp_path: Path) -> None:
    rec = record(tmp_path, "kernel")
    c = rec["link_counters"]["0"]
    assert c["engine"] == "kernel" and c["loss_reproducible"] is False, c
    assert "numgen" in c["loss_random"] and 'engine = "wire"' in c["loss_random"], c


def test_the_wire_engines_record_says_its_loss_is_seeded(tmp_path: Path) -> None:
    rec = record(tmp_path, "wire")
    c = rec["link_counters"]["0"]
    assert c["engine"] == "wire" and c["loss_reproducible"] is True, c
    assert c["seed"] == rec["seed"] + 0 and "seeded" in c["loss_random"], c
