#!/usr/bin/env python3
"""roughnet-agent's dds driver against Cyclone DDS's own ddsperf (Debian cyclonedds-tools), on loopback.

Both use Cyclone DDS with the same configuration (interface 127.0.0.1, multicast off, unicast peer
127.0.0.1: the agent's default; the agent also announces itself every 1 s, SPDPInterval) and reliable
QoS. Interleaved rounds, so machine drift (this machine is shared) hits both alike; the figures are medians over rounds and the ratios are agent / ddsperf.

- round-trip p50: ``ddsperf ping size S waitset`` against ``ddsperf pong waitset`` (waitsets, as the agent
  uses; ddsperf's default listener mode, which answers on Cyclone's receive thread, is reported too)
  versus agent pinger/ponger, closed loop, S-byte messages.  ddsperf prints half the round trip (one-way
  latency estimate); the ``ddsperf_*_p50_us`` figures here are 2x what it prints, i.e. round trips.
- throughput: ``ddsperf pub size S`` against ``ddsperf sub waitset`` (samples/s over the whole run) versus
  an agent stream sender/receiver as fast as possible (received messages / receiver duration), reliable
  KEEP_ALL on both.  ddsperf's data writer ALWAYS batches (ddsperf.c: ``dds_qset_writer_batching (qos,
  true)`` on the data writer, flushed only when its rate limiter sleeps or a sample asks for a reply),
  with Cyclone's default ``General/MaxMessageSize`` of 14720 B, so the like-for-like agent run uses the
  dds knob ``batch = 14720`` (``--batch``); the agent without batching is reported beside it.

CPU placement dominates round trips on a small VM: with both processes on one CPU the round trip was
~16 us (agent and ddsperf alike), with the two sides on different CPUs ~55-70 us (cross-CPU wake-ups), and
unpinned runs land in either mode at random.  ``--pin same`` / ``--pin split`` pin both sides (via taskset)
to CPU 0 / to CPUs 0 and 1 for every run, agent and ddsperf alike, so rounds compare like with like.

Usage: python bench/dds_bench.py [--rounds 3] [--seconds 4] [--size 200] [--pin none|same|split].
Prints one JSON object.
Helpers here (agent runs, medians) are shared by bench/zenoh_bench.py and bench/zmq_bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

from roughnet.binaries import find_binary  # noqa: E402

XML = (
    '<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface address="127.0.0.1"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
    '<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex><Peers><Peer address="127.0.0.1"/></Peers>'
    "</Discovery></Domain></CycloneDDS>"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_binary() -> str:
    a = find_binary("roughnet-agent")
    if a is None:
        sys.exit("roughnet-agent is not built (make build, or set ROUGHNET_AGENT)")
    return str(a)


PIN: dict[str, list[str]] = {"listener": [], "connector": []}
"""Command prefixes (taskset) for the listening / connecting side of every run; set by --pin."""


def set_pin(mode: str) -> None:
    cpus = {"none": (None, None), "same": ("0", "0"), "split": ("0", "1")}[mode]
    for side, cpu in zip(("listener", "connector"), cpus):
        PIN[side] = [] if cpu is None else ["taskset", "-c", cpu]


def agent_pair(protocol: str, pattern: str, listener: dict, connector: dict, options: dict | None = None,
               topic: str = "roughnet/bench") -> tuple[dict, dict]:
    """Run a listening role, then the connecting role against it; (listener result, connector result)."""
    agent = agent_binary()
    port = free_port()
    roles = ("receiver", "sender") if pattern in ("stream", "bulk") else ("ponger", "pinger")
    base = {"v": 1, "protocol": protocol, "pattern": pattern, "report_interval_ms": 0, "timeout_ms": 120000,
            "topic": topic, "options": options or {}}
    lcfg = base | {"role": roles[0], "listen": f"127.0.0.1:{port}"} | listener
    lp = subprocess.Popen([*PIN["listener"], agent, "run", "--config-json", json.dumps(lcfg)], stdout=subprocess.PIPE,
                          text=True)
    ready = json.loads(lp.stdout.readline())
    if ready.get("type") != "ready":
        sys.exit(f"agent {roles[0]} did not start: {ready}")
    ccfg = base | {"role": roles[1], "peers": [ready["listen"]]} | connector
    cp = subprocess.run([*PIN["connector"], agent, "run", "--config-json", json.dumps(ccfg)], capture_output=True,
                        text=True, timeout=180, check=False)
    out, _ = lp.communicate(timeout=180)

    def res(text: str) -> dict:
        lines = [json.loads(x) for x in text.splitlines() if x.strip()]
        return next(x for x in lines if x.get("type") in ("result", "error"))

    return res(out), res(cp.stdout)


def agent_ping_p50(protocol: str, size: int, n: int, options: dict | None = None) -> float:
    _po, pi = agent_pair(protocol, "ping", {"payload_bytes": size, "messages": n},
                         {"payload_bytes": size, "messages": n, "warmup": n // 10}, options)
    return pi["rtt_actual"]["p50_us"]


def agent_stream_rate(protocol: str, size: int, seconds: float, options: dict | None = None) -> float:
    """Messages per second a receiver got from an as-fast-as-possible sender."""
    d = int(seconds * 1000)
    rx, _tx = agent_pair(protocol, "stream", {"payload_bytes": size, "duration_ms": d},
                         {"payload_bytes": size, "duration_ms": d}, options)
    if not rx.get("duration_s"):
        return 0.0
    return rx["received"] / rx["duration_s"]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


DDSPERF = ["ddsperf"]


def ddsperf_ping(size: int, seconds: int, mode: str) -> float:
    env = dict(os.environ, CYCLONEDDS_URI=XML)
    pong = subprocess.Popen([*PIN["listener"], *DDSPERF, "-D", str(seconds + 2), "pong", mode], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = subprocess.run([*PIN["connector"], *DDSPERF, "-D", str(seconds), "ping", "size", str(size), mode],
                             env=env, capture_output=True, text=True, timeout=seconds + 30, check=False).stdout
    finally:
        pong.terminate()
        pong.wait(timeout=10)
    # ddsperf's ping statistics are HALF the round trip: process_pong records
    # (t_receive - t_send) / 2 (update_roundtrip in ddsperf.c, Cyclone 0.10 and 11 alike).  Its own
    # counts agree: cnt per second x mean is ~0.5 s, i.e. each ping really takes 2 x mean.  The agent
    # reports the full round trip, so double ddsperf's figure to compare like with like.
    p50s = [2 * float(m.group(1)) for m in re.finditer(r" 50% ([0-9.]+)us", out)]
    return median(p50s[1:] or p50s)  # skip the first second (discovery, warm-up)


def ddsperf_throughput(size: int, seconds: int) -> float:
    env = dict(os.environ, CYCLONEDDS_URI=XML)
    sub = subprocess.Popen([*PIN["listener"], *DDSPERF, "-D", str(seconds + 2), "sub", "waitset"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.5)
    subprocess.run([*PIN["connector"], *DDSPERF, "-D", str(seconds), "pub", "size", str(size)], env=env,
                   capture_output=True, timeout=seconds + 30, check=False)
    out, _ = sub.communicate(timeout=seconds + 30)
    # Each second ddsperf sub prints "size S total T lost L delta D lost L rate R kS/s ... (A kS/s ...)".
    # R is that second's rate; A (in parentheses) is the samples of the last 10 s divided by 10 s
    # (ddsperf.c print_stats: nrecv10s / (10 * dt)), i.e. NOT the rate while data flowed in a run of
    # a few seconds: an earlier version of this bench took the largest A and under-reported ddsperf
    # about 2x.  The figure here is the mean of R over the seconds with data, less the first
    # and last (partial: discovery, the publisher's end); the agent's is received / (first to last arrival).
    rates = [float(m.group(2)) * 1000 for m in re.finditer(r" delta (\d+) lost \d+ rate ([0-9.]+) kS/s", out)
             if int(m.group(1)) > 0]
    full = rates[1:-1] or rates
    return statistics.mean(full) if full else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--pings", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=14720,
                    help="the agent's dds `batch` (bytes) for the like-for-like throughput run (default 14720: "
                         "ddsperf's writer batching with Cyclone's default MaxMessageSize)")
    ap.add_argument("--ddsperf", default="ddsperf",
                    help="ddsperf to compare with (default: Debian's, Cyclone 0.10; the agent bundles Cyclone 11: "
                         "a ddsperf built from cyclors' bundled source compares like with like)")
    ap.add_argument("--pin", choices=("none", "same", "split"), default="none",
                    help="CPU placement of both sides, agent and ddsperf alike: unpinned, one CPU (0), CPUs 0 and 1")
    a = ap.parse_args()
    if a.pin != "none" and shutil.which("taskset") is None:
        sys.exit("--pin needs taskset (util-linux)")
    set_pin(a.pin)
    if shutil.which(a.ddsperf) is None:
        sys.exit(f"{a.ddsperf} not found (apt-get install cyclonedds-tools, or pass --ddsperf)")
    DDSPERF[0] = a.ddsperf
    r: dict[str, list[float]] = {k: [] for k in ("ddsperf_ws_p50_us", "ddsperf_listener_p50_us", "agent_p50_us",
                                                 "ddsperf_msgs_per_s", "agent_msgs_per_s",
                                                 "agent_unbatched_msgs_per_s")}
    for _ in range(a.rounds):
        r["ddsperf_ws_p50_us"].append(ddsperf_ping(a.size, a.seconds, "waitset"))
        r["agent_p50_us"].append(agent_ping_p50("dds", a.size, a.pings))
        r["ddsperf_listener_p50_us"].append(ddsperf_ping(a.size, a.seconds, "listener"))
        r["ddsperf_msgs_per_s"].append(ddsperf_throughput(a.size, a.seconds))
        r["agent_msgs_per_s"].append(agent_stream_rate("dds", a.size, a.seconds, {"batch": a.batch}))
        r["agent_unbatched_msgs_per_s"].append(agent_stream_rate("dds", a.size, a.seconds))
    med = {k: round(median(v), 2) for k, v in r.items()}
    out = {
        "bench": "dds", "ddsperf": a.ddsperf, "transport": "loopback 127.0.0.1, unicast discovery", "size_bytes": a.size,
        "rounds": a.rounds, "pin": a.pin, "median": med, "all": r,
        "ratio_latency_vs_ddsperf_waitset": round(med["agent_p50_us"] / med["ddsperf_ws_p50_us"], 3),
        "ratio_latency_vs_ddsperf_listener": round(med["agent_p50_us"] / med["ddsperf_listener_p50_us"], 3),
        "agent_batch_bytes": a.batch,
        "ratio_throughput": round(med["agent_msgs_per_s"] / med["ddsperf_msgs_per_s"], 3),
        "ratio_throughput_unbatched": round(med["agent_unbatched_msgs_per_s"] / med["ddsperf_msgs_per_s"], 3),
        "load_avg": os.getloadavg(),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
