#!/usr/bin/env python3
"""roughnet-agent's zmq driver against a minimal pyzmq reference (libzmq underneath both), on loopback.

- round trip: pyzmq REQ -> REP echo, closed loop, S-byte messages (the reference), versus the agent's
  pinger (DEALER, REQ-style envelope) and ponger (ROUTER); p50.
- throughput: pyzmq PUB -> SUB as fast as possible (messages/s at the subscriber; the PUB waits for the
  subscription first) versus an agent stream (XPUB with NODROP -> SUB).
Transport tcp://127.0.0.1, default high-water marks. Interleaved rounds; medians; ratios agent / pyzmq.

Usage: python bench/zmq_bench.py [--rounds 3] [--seconds 4] [--size 200]. Prints one JSON object.
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

REP = r"""
import sys, zmq
c = zmq.Context(); s = c.socket(zmq.REP); s.bind(f"tcp://127.0.0.1:{sys.argv[1]}")
print("ready", flush=True)
while True:
    m = s.recv()
    if m == b"end":
        s.send(b"end"); break
    s.send(m)
"""

REQ = r"""
import json, sys, time, zmq
port, size, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = zmq.Context(); s = c.socket(zmq.REQ); s.connect(f"tcp://127.0.0.1:{port}")
data = bytes(size); rtts = []
for i in range(n + n // 10):
    t = time.perf_counter_ns(); s.send(data); s.recv()
    if i >= n // 10:
        rtts.append(time.perf_counter_ns() - t)
s.send(b"end"); s.recv()
rtts.sort(); print(json.dumps({"p50_us": rtts[len(rtts) // 2] / 1000}))
"""

SUB = r"""
import json, sys, time, zmq
c = zmq.Context(); s = c.socket(zmq.SUB); s.setsockopt(zmq.SUBSCRIBE, b""); s.bind(f"tcp://127.0.0.1:{sys.argv[1]}")
print("ready", flush=True)
n = 0; t0 = None
while True:
    m = s.recv()
    if t0 is None:
        t0 = time.perf_counter()
    if m == b"end":
        break
    n += 1
print(json.dumps({"msgs_per_s": n / (time.perf_counter() - t0)}))
"""

PUB = r"""
import sys, time, zmq
port, size, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
c = zmq.Context(); s = c.socket(zmq.XPUB); s.setsockopt(zmq.XPUB_NODROP, 1); s.connect(f"tcp://127.0.0.1:{port}")
s.recv()  # the subscription: no slow joiner
data = bytes(size); end = time.perf_counter() + seconds
while time.perf_counter() < end:
    for _ in range(100):
        s.send(data)
s.send(b"end"); s.close(linger=5000); c.term()
"""


def py(code: str, *args: object, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], text=True, **kw)


def pyzmq_ping(size: int, n: int) -> float:
    port = free_port()
    rep = py(REP, port, stdout=subprocess.PIPE)
    assert rep.stdout.readline().strip() == "ready"
    out = subprocess.run([sys.executable, "-c", REQ, str(port), str(size), str(n)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    rep.wait(timeout=10)
    return json.loads(out)["p50_us"]


def pyzmq_throughput(size: int, seconds: float) -> float:
    port = free_port()
    sub = py(SUB, port, stdout=subprocess.PIPE)
    assert sub.stdout.readline().strip() == "ready"
    subprocess.run([sys.executable, "-c", PUB, str(port), str(size), str(seconds)], timeout=300, check=True)
    out, _ = sub.communicate(timeout=60)
    return json.loads(out)["msgs_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--pings", type=int, default=10000)
    a = ap.parse_args()
    r: dict[str, list[float]] = {k: [] for k in ("pyzmq_p50_us", "agent_p50_us", "pyzmq_msgs_per_s",
                                                 "agent_msgs_per_s")}
    for _ in range(a.rounds):
        r["pyzmq_p50_us"].append(pyzmq_ping(a.size, a.pings))
        r["agent_p50_us"].append(agent_ping_p50("zmq", a.size, a.pings))
        r["pyzmq_msgs_per_s"].append(pyzmq_throughput(a.size, a.seconds))
        r["agent_msgs_per_s"].append(agent_stream_rate("zmq", a.size, a.seconds))
    med = {k: round(median(v), 2) for k, v in r.items()}
    print(json.dumps({
        "bench": "zmq", "reference": "minimal pyzmq REQ/REP and XPUB(NODROP)/SUB programs",
        "transport": "tcp://127.0.0.1", "size_bytes": a.size, "rounds": a.rounds, "median": med, "all": r,
        "ratio_latency": round(med["agent_p50_us"] / med["pyzmq_p50_us"], 3),
        "ratio_throughput": round(med["agent_msgs_per_s"] / med["pyzmq_msgs_per_s"], 3),
        "load_avg": os.getloadavg(),
    }, indent=1))


if __name__ == "__main__":
    main()
