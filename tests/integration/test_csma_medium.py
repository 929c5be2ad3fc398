"""The CSMA medium (``medium = "csma"``) on both backends: the real Linux stack over the wire engine's CSMA
channel and ns-3's CSMA channel, one `roughnet run --backend namespace,ns3`, so the two differ only by the
stack.

A 5 Mbit/s link with 2 ms propagation carries a UDP stream of 1 KiB at 500 msg/s (4.3 Mbit/s of frames: below
the rate, so the plain link loses nothing).  On the CSMA medium a frame holds the channel for its
serialisation plus the propagation delay (about 1.7 + 2 ms, and a backoff), so about 250 frames a second get
through and the sender's 100-packet queue drops the rest: on both backends about half is lost and the
throughput is about half the offered one.  Both backends' normal reports carry the side by side (one plot,
one table per metric with the difference).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from cli_run import RUNS, fetch, run_argv

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(importlib.util.find_spec("ns") is None,
                       reason="ns-3's Python package (ns3) is not installed (make extras)"),
]

SCENARIO = """
[scenario]
name = "csma-both"
seed = 1
timeout = "30 s"

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
rate = "5 Mbit/s"
delay = "2 ms"
queue = "100 packets"
medium = "${medium}"

[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["b"]
payload = "1 KiB"
duration = "2 s"
rate = "500 msg/s"

[sweep]
medium = ["plain", "csma"]
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("csma")
    path = work / "csma.toml"
    path.write_text(SCENARIO)
    out = work / "results"
    done = subprocess.run(run_argv(path, out, report=True) + ["--backend", "namespace,ns3"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out


def _runs(results: Path) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for backend in ("namespace", "ns3"):
        for r in fetch(results / backend, RUNS):
            params = r["params"] if isinstance(r["params"], dict) else json.loads(r["params"])
            assert r["status"] == "ok", (backend, params, r["failure_reason"])
            out.setdefault(backend, {})[params["medium"]] = r
    return out


def test_csma_medium_halves_the_stream_on_both_backends(results: Path):
    runs = _runs(results)
    for backend, by_medium in runs.items():
        plain, csma = by_medium["plain"], by_medium["csma"]
        assert plain["loss_ratio"] <= 0.005, (backend, plain["loss_ratio"])
        # about one frame per 1.7 ms + 2 ms + backoff of the 2 ms offered interval gets through
        assert 0.35 <= csma["loss_ratio"] <= 0.6, (backend, csma["loss_ratio"])
        assert csma["throughput_bps"] < 0.7 * plain["throughput_bps"], backend
    # the two stacks on one channel model: throughput within 15 % of each other
    em, sim = runs["namespace"]["csma"]["throughput_bps"], runs["ns3"]["csma"]["throughput_bps"]
    assert abs(em - sim) <= 0.15 * sim, (em, sim)
    # the wire's configuration carried the medium (and the plain run's did not)
    def counters(r):
        c = r["link_counters"]
        return json.dumps(c if isinstance(c, (dict, list)) else json.loads(c))
    assert '"csma": true' in counters(runs["namespace"]["csma"])
    assert '"csma": true' not in counters(runs["namespace"]["plain"])


def test_normal_reports_show_both_backends_side_by_side(results: Path):
    for backend in ("namespace", "ns3"):
        (page,) = (results / backend / "reports").glob("*/index.html")
        text = page.read_text()
        assert "<h2>Side by side: namespace and ns3</h2>" in text, backend
        part = text[text.index("<h2>Side by side: namespace and ns3</h2>"):]
        assert "data:image/png;base64," in part.split("<h3>")[0]
        table = part[part.index("<h3>throughput</h3>"):].split("</table>")[0]
        row = next(line for line in table.splitlines() if line.startswith("<tr><td>medium=csma"))
        assert row.count("<td>") == 4, row
