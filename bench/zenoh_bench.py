#!/usr/bin/env python3
"""roughnet-agent's zenoh driver against eclipse-zenoh Python programs, on loopback.

zenoh's own Rust z_ping/z_pong/z_pub_thr/z_sub_thr live in the zenoh repository's examples crate, which
is not on crates.io and cannot be built here offline; the reference is therefore the eclipse-zenoh Python
binding (the same Rust zenoh underneath) running the same programs as zenoh's examples
(z_ping.py / z_pong.py: two publishers and two subscribers; z_pub_thr.py / z_sub_thr.py), stated as such.
Peer mode, TCP on 127.0.0.1, multicast scouting off, reliable, congestion control block, for both.
Interleaved rounds; medians; ratios are agent / Python reference (below 1 for latency = agent faster).

Usage: python bench/zenoh_bench.py [--rounds 3] [--seconds 4] [--size 200]. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from dds_bench import agent_ping_p50, agent_stream_rate, free_port, median  # noqa: E402

COMMON = r"""
import json, os, sys, time, threading, zenoh
def session(listen, connect):
    c = zenoh.Config()
    c.insert_json5("mode", '"peer"')
    c.insert_json5("listen/endpoints", json.dumps(listen))
    c.insert_json5("connect/endpoints", json.dumps(connect))
    c.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(c)
"""

PONG = COMMON + r"""
port = int(sys.argv[1])
s = session([f"tcp/127.0.0.1:{port}"], [])
pub = s.declare_publisher("bench/pong", congestion_control=zenoh.CongestionControl.BLOCK, express=True)
sub = s.declare_subscriber("bench/ping", lambda sample: pub.put(sample.payload))
print("ready", flush=True)
sys.stdin.read()
os._exit(0)  # zenoh-python can hang in interpreter teardown with a live session
"""

PING = COMMON + r"""
port, size, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = session([], [f"tcp/127.0.0.1:{port}"])
ev = threading.Event()
sub = s.declare_subscriber("bench/pong", lambda sample: ev.set())
pub = s.declare_publisher("bench/ping", congestion_control=zenoh.CongestionControl.BLOCK, express=True)
while not pub.matching_status.matching:
    time.sleep(0.01)
time.sleep(0.5)
data = bytes(size)
rtts = []
for i in range(n + n // 10):
    ev.clear()
    t = time.perf_counter_ns()
    pub.put(data)
    ev.wait()
    if i >= n // 10:
        rtts.append(time.perf_counter_ns() - t)
rtts.sort()
print(json.dumps({"p50_us": rtts[len(rtts) // 2] / 1000}), flush=True)
os._exit(0)
"""

SUB_THR = COMMON + r"""
port = int(sys.argv[1])
s = session([f"tcp/127.0.0.1:{port}"], [])
st = {"n": 0, "t0": None, "t1": None}
def on(sample):
    if st["t0"] is None:
        st["t0"] = time.perf_counter()
    st["n"] += 1
    st["t1"] = time.perf_counter()
sub = s.declare_subscriber("bench/thr", on)
print("ready", flush=True)
sys.stdin.readline()
time.sleep(0.5)
d = (st["t1"] or 0) - (st["t0"] or 0)
print(json.dumps({"msgs_per_s": st["n"] / d if d > 0 else 0}), flush=True)
os._exit(0)
"""

PUB_THR = COMMON + r"""
port, size, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = session([], [f"tcp/127.0.0.1:{port}"])
pub = s.declare_publisher("bench/thr", congestion_control=zenoh.CongestionControl.BLOCK)
while not pub.matching_status.matching:
    time.sleep(0.01)
time.sleep(0.5)
data = zenoh.ZBytes(bytes(size))
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    for _ in range(100):
        pub.put(data)
time.sleep(0.5)
os._exit(0)
"""


def py(code: str, *args: object, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], text=True, **kw)


def python_ping(size: int, n: int) -> float:
    port = free_port()
    pong = py(PONG, port, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert pong.stdout.readline().strip() == "ready"
    try:
        out = subprocess.run([sys.executable, "-c", PING, str(port), str(size), str(n)], capture_output=True,
                             text=True, timeout=300, check=True).stdout
    finally:
        pong.stdin.close()
        try:
            pong.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pong.kill()
            pong.wait()
    return json.loads(out.splitlines()[-1])["p50_us"]


def python_throughput(size: int, seconds: float) -> float:
    port = free_port()
    sub = py(SUB_THR, port, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert sub.stdout.readline().strip() == "ready"
    subprocess.run([sys.executable, "-c", PUB_THR, str(port), str(size), str(seconds)], timeout=300, check=True)
    sub.stdin.write("done\n")
    sub.stdin.flush()
    out = sub.stdout.readline()
    sub.stdin.close()
    sub.wait(timeout=10)
    return json.loads(out)["msgs_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--pings", type=int, default=10000)
    a = ap.parse_args()
    r: dict[str, list[float]] = {k: [] for k in ("python_p50_us", "agent_p50_us", "agent_express_p50_us",
                                                 "python_msgs_per_s", "agent_msgs_per_s")}
    for _ in range(a.rounds):
        r["python_p50_us"].append(python_ping(a.size, a.pings))
        r["agent_p50_us"].append(agent_ping_p50("zenoh", a.size, a.pings))
        r["agent_express_p50_us"].append(agent_ping_p50("zenoh", a.size, a.pings, {"express": True}))
        r["python_msgs_per_s"].append(python_throughput(a.size, a.seconds))
        r["agent_msgs_per_s"].append(agent_stream_rate("zenoh", a.size, a.seconds))
    med = {k: round(median(v), 2) for k, v in r.items()}
    print(json.dumps({
        "bench": "zenoh", "reference": "eclipse-zenoh Python programs (z_ping/z_pong, z_pub_thr/z_sub_thr shape)",
        "transport": "peer mode, tcp/127.0.0.1", "size_bytes": a.size, "rounds": a.rounds, "median": med, "all": r,
        "ratio_latency_express_vs_python_express": round(med["agent_express_p50_us"] / med["python_p50_us"], 3),
        "ratio_throughput": round(med["agent_msgs_per_s"] / med["python_msgs_per_s"], 3),
        "load_avg": os.getloadavg(),
    }, indent=1))


if __name__ == "__main__":
    main()
