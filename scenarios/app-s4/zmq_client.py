"""SEEDS S4's ZeroMQ client, as the seed wrote it: a REQ socket that sends --count requests of --size
bytes, one every --interval ms, and writes each round trip in ms, one number per line, to --out.

    python3 zmq_client.py --server HOST [--port 5555] --size "64 KiB" --count 200 --interval 25 --out rtt.txt

A request leaves at its scheduled time (start + i * interval) or, when the previous reply came later
than that, as soon as it came (REQ/REP is lock-step).  The round trip is perf_counter() from just before
send() to just after the reply's recv().  Exits 0 when every request got its reply, 1 when one did not
within --timeout seconds.  roughnet runs it unchanged as a [[process]] (scenarios/app-s4.toml).
"""

import argparse
import re
import struct
import sys
import time

import zmq

UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2}


def size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS | {"": 1}:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1024, '1 KiB', '64 KiB')")
    return int(m.group(1)) * (UNITS.get(m.group(2).lower(), 1))


ap = argparse.ArgumentParser()
ap.add_argument("--server", required=True)
ap.add_argument("--port", type=int, default=5555)
ap.add_argument("--size", type=size, default=1024)
ap.add_argument("--count", type=int, default=100)
ap.add_argument("--interval", type=float, default=25.0, help="ms between requests")
ap.add_argument("--timeout", type=float, default=10.0, help="s to wait for one reply")
ap.add_argument("--out", default="rtt.txt")
args = ap.parse_args()

ctx = zmq.Context()
sock = ctx.socket(zmq.REQ)
sock.setsockopt(zmq.LINGER, 0)
sock.connect(f"tcp://{args.server}:{args.port}")
payload = bytearray(max(8, args.size))
rtts = []
start = time.perf_counter()
with open(args.out, "w") as out:
    for i in range(args.count):
        time.sleep(max(0.0, start + i * args.interval / 1000 - time.perf_counter()))
        struct.pack_into("<Q", payload, 0, i)
        t0 = time.perf_counter()
        sock.send(payload, copy=False)
        if not sock.poll(args.timeout * 1000):
            print(f"no reply to request {i} within {args.timeout} s", file=sys.stderr, flush=True)
            sys.exit(1)
        reply = sock.recv()
        t1 = time.perf_counter()
        if len(reply) != len(payload) or struct.unpack_from("<Q", reply)[0] != i:
            print(f"request {i}: wrong reply ({len(reply)} B)", file=sys.stderr, flush=True)
            sys.exit(1)
        rtts.append((t1 - t0) * 1000)
        out.write(f"{rtts[-1]:.4f}\n")
rtts.sort()
print(f"done: {len(rtts)} round trips of {len(payload)} B, median {rtts[len(rtts) // 2]:.3f} ms", flush=True)
sock.close()
ctx.term()
