"""Per-pair links on a shared radio medium (issue 16), on the wire (root): four hosts on one segment with the
802.11p loss model and fixed positions; a broadcast and a UDP stream reach the receivers near the sender and
never the one 1 km away, and the wire's per-port counters put the far host's losses in its own downlink; a host
that drives away is reached before and not after; bad positions are refused by the binary (exit 2).

With the model's defaults (docs/wire-models.md) a frame of a few hundred bytes is lost with probability below
1e-3 up to about 300 m and always beyond about 450 m: 60 m and 150 m are near, 1 km is far.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from roughnet.binaries import agent_version, find_binary
from roughnet.plan import plan_sweep
from roughnet.run.runner import Preflight, execute_run
from roughnet.runspec import Direction, Link

from test_wire_segment import Wired, collect

WIRE = find_binary("roughnet-wire")
AGENT = find_binary("roughnet-agent")
HOSTS = ("a", "near", "mid", "far")
#: (x, y) in metres: near at 60 m, mid at 150 m, far at 1 km from a.
PLACES = {"a": (0.0, 0.0), "near": (60.0, 0.0), "mid": (0.0, -150.0), "far": (-1000.0, 0.0)}
RADIO = {"model": "ieee80211p"}

pytestmark = [
    pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SCENARIO = """
[scenario]
name = "wire-positions"
engine = "wire"
timeout = "10 s"

[[host]]
name = "a"
position = ["0 m", "0 m"]
[[host]]
name = "near"
position = ["60 m", "0 m"]
[[host]]
name = "mid"
position = ["0 m", "-150 m"]
[[host]]
name = "far"
position = ["-1 km", "0 m"]

[[link]]
between = ["a", "near", "mid", "far"]
loss_model = { model = "ieee80211p" }

[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["near", "far"]
payload = "500 B"
messages = 400
rate = "200 msg/s"
"""


def radio_segment() -> Link:
    positions = tuple(({"at_ns": 0, "x_m": x, "y_m": y},) for x, y in (PLACES[h] for h in HOSTS))
    d = Direction(loss_model=RADIO)
    return Link(index=0, hosts=HOSTS, forward=d, reverse=d, positions=positions)


@pytest.mark.root
def test_a_broadcast_reaches_the_near_hosts_and_not_the_far_one():
    port, group, n = 7420, "239.255.0.3", 100
    with Wired(HOSTS, radio_segment()) as w:
        # 8 s (not 30) for a first datagram: the far host never gets one
        procs = w.receivers(["near", "mid", "far"], port, group, idle_s=1.5, first_s=8.0)
        w.send("a", port, n, "198.18.0.255")
        got = collect(procs)
        st = w.stats()
    assert got["near"].get("198.18.0.255", 0) >= n - 1, got
    assert got["mid"].get("198.18.0.255", 0) >= n - 1, got
    assert got["far"] == {}, got
    far = st["ports"][3]["downlink"]
    # Every copy towards far was handed to its downlink and lost there to the radio, none in a's uplink.
    assert far["drops"]["frame_error"] >= n and far["packets_out"] == 0, far
    assert st["ports"][0]["uplink"]["drops"]["frame_error"] == 0, st["ports"][0]["uplink"]
    # What near's downlink lost came from far (IGMP reports, 1 km away), never from a or mid.
    assert st["ports"][1]["downlink"]["drops"]["frame_error"] <= st["ports"][3]["uplink"]["packets_in"]


@pytest.mark.root
def before_and_after_leaving(hosts: tuple[str, ...], link: Link, leaver: str, port: int, group: str,
                             n: int) -> tuple[float, dict, dict]:
    """``hosts[0]`` broadcasts ``n`` datagrams at once, then ``n`` to ``group`` 9.5 s after the wire's start
    (time 0 of its positions), to ``near`` and ``leaver`` (a host that drives off at 8-9 s): (when the first
    batch ended, after the start; what each receiver got; the wire's counters)."""
    with Wired(hosts, link) as w:
        t0 = time.monotonic()  # the wire started (and its positions' time 0) just before
        procs = w.receivers(["near", leaver], port, group, idle_s=12.0)
        w.send(hosts[0], port, n, "198.18.0.255")
        first_done = time.monotonic() - t0
        time.sleep(max(0.0, 9.5 - (time.monotonic() - t0)))
        w.send(hosts[0], port, n, group)
        return first_done, collect(procs), w.stats()


def test_a_host_that_drives_away_is_reached_before_and_not_after():
    # "mover" waits 50 m from a for 8 s after the wire starts, then drives to 2 km in 1 s and stays there. A
    # first batch (to the broadcast address) goes while it is near, a second (to a multicast group) once it
    # is far: it gets the first and none of the second; "near" gets both. The receivers tell the batches
    # apart by destination.
    port, group, n = 7430, "239.255.0.4", 50
    hosts = ("a", "near", "mover")
    path = ({"at_ns": 0, "x_m": 50.0, "y_m": 0.0}, {"at_ns": 8_000_000_000, "x_m": 50.0, "y_m": 0.0},
            {"at_ns": 9_000_000_000, "x_m": 2000.0, "y_m": 0.0})  # fmt: skip
    positions = (({"at_ns": 0, "x_m": 0.0, "y_m": 0.0},), ({"at_ns": 0, "x_m": 0.0, "y_m": 60.0},), path)
    d = Direction(loss_model=RADIO)
    link = Link(index=0, hosts=hosts, forward=d, reverse=d, positions=positions)
    first_done, got, st = before_and_after_leaving(hosts, link, "mover", port, group, n)
    assert first_done < 7.5, f"the first batch ended {first_done:.1f} s after the start: the mover had left"
    assert got["near"] == {"198.18.0.255": n, group: n}, got
    assert got["mover"] == {"198.18.0.255": n}, got
    assert st["ports"][2]["downlink"]["drops"]["frame_error"] >= n, st["ports"][2]["downlink"]


@pytest.mark.root
@pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")
def test_a_stream_from_a_scenario_reaches_near_and_not_far(tmp_path: Path):
    f = tmp_path / "wire-positions.toml"
    f.write_text(SCENARIO)
    run = plan_sweep(f).runs[0]
    assert [p[0]["x_m"] for p in run.links[0].positions] == [0.0, 60.0, 0.0, -1000.0]
    pf = Preflight(agent_path=AGENT, agent=agent_version(str(AGENT)), caps=None, engines={run.run_id: {0: "wire"}})
    art = tmp_path / run.run_id
    art.mkdir()
    rec = execute_run(run, pf, art)
    # The run ends at its timeout (far never sees the end marker) and is recorded as measured.
    assert rec["status"] == "ok", (rec["failure_reason"], rec["stderr_tail"])
    per_rx = {r["host"]: r["metrics"] for r in rec["receivers"]}
    assert sorted(per_rx) == ["far", "near"], rec
    assert per_rx["near"]["received"] >= 398, per_rx["near"]
    assert per_rx["far"]["received"] == 0, per_rx["far"]
    lc = rec["link_counters"]["0"]
    assert lc["engine"] == "wire"
    # The far host's copies were lost to the radio in its own downlink; mid (150 m) lost none of a's.
    assert lc["ports"]["far"]["downlink"]["drops_frame_error"] >= 400, lc["ports"]["far"]
    assert lc["ports"]["far"]["downlink"]["tx_packets"] == 0, lc["ports"]["far"]
    assert lc["ports"]["near"]["downlink"]["tx_packets"] >= 398, lc["ports"]["near"]


@pytest.mark.parametrize(
    ("ports", "positions", "named"),
    [
        (3, [[{"x_m": 0, "y_m": 0}], [{"x_m": 1, "y_m": 0}]], "positions = 2 port positions"),
        (3, [[{"x_m": 0, "y_m": 0}], [], [{"x_m": 1, "y_m": 0}]], "positions[1] = []"),
        (2, [[{"x_m": 0, "y_m": 0}], [{"x_m": 1, "y": 0}]], "unknown field `y`"),
    ],
)
def test_the_binary_refuses_bad_positions_with_exit_2_naming_the_key(ports: int, positions: list, named: str):
    # No namespace, no root: the configuration is checked before any interface is opened.
    where = [arg for i in range(ports) for arg in ("--port", f"rnnothere{i}")]
    cfg = {"a_to_b": {"loss": RADIO}, "b_to_a": {"loss": RADIO}, "positions": positions}
    out = subprocess.run([str(WIRE), *where, "--config", "-", "--seed", "1"], input=json.dumps(cfg),
                         capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["type"] == "error" and line["kind"] == "config" and named in line["message"], line
