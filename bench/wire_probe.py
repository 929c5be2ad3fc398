#!/usr/bin/env python3
"""A small UDP probe for measuring roughnet-wire: a sender of numbered, timestamped datagrams at a fixed rate
and a receiver that records which sequence numbers arrived and their one-way latency (all namespaces of one
machine share CLOCK_MONOTONIC, so one-way latency is exact up to Python's own overhead of some tens of us).

    wire_probe.py recv --bind IP:PORT --count N --timeout S      # prints one JSON object at the end
    wire_probe.py send --to IP:PORT --count N --rate PPS [--size B]

Datagram layout: magic b"RNWP", u32 padding, u64 sequence number, u64 send time (CLOCK_MONOTONIC ns),
little-endian, then filler up to --size. The receiver ends when it has all N, or after --linger seconds
without traffic once something arrived, or at --timeout. Used by bench/wire_bench.py and tests/integration.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("<4sIQQ")
MAGIC = b"RNWP"


def parse_addr(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host, int(port)


def percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def recv(args: argparse.Namespace) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(parse_addr(args.bind))
    print(json.dumps({"type": "ready"}), flush=True)
    seqs: list[int] = []
    lat_us: list[float] = []
    reordered = 0
    highest = -1
    deadline = time.monotonic() + args.timeout
    got_any = False
    while len(seqs) < args.count:
        now = time.monotonic()
        if now >= deadline:
            break
        s.settimeout(min(deadline - now, args.linger) if got_any else deadline - now)
        try:
            data = s.recv(65536)
        except socket.timeout:
            if got_any:
                break
            continue
        t = time.monotonic_ns()
        if len(data) < HEADER.size:
            continue
        magic, _, seq, sent = HEADER.unpack_from(data)
        if magic != MAGIC:
            continue
        got_any = True
        if seq < highest:
            reordered += 1
        highest = max(highest, seq)
        seqs.append(seq)
        lat_us.append((t - sent) / 1e3)
    srt = sorted(lat_us)
    return {
        "type": "result",
        "received": len(seqs),
        "unique": len(set(seqs)),
        "reordered": reordered,
        "seqs": seqs,
        "latency_us": {"p50": percentile(srt, 0.5), "p90": percentile(srt, 0.9), "p99": percentile(srt, 0.99),
                       "min": srt[0] if srt else float("nan"), "max": srt[-1] if srt else float("nan")},
    }


def send(args: argparse.Namespace) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    dest = parse_addr(args.to)
    filler = b"\0" * max(0, args.size - HEADER.size)
    interval = 1e9 / args.rate
    start = time.monotonic_ns()
    errors = 0
    for seq in range(args.count):
        due = start + int(seq * interval)
        while True:
            now = time.monotonic_ns()
            if now >= due:
                break
            if due - now > 200_000:
                time.sleep((due - now - 100_000) / 1e9)
        try:
            s.sendto(HEADER.pack(MAGIC, 0, seq, time.monotonic_ns()) + filler, dest)
        except OSError:
            errors += 1
    return {"type": "result", "sent": args.count, "errors": errors,
            "duration_s": (time.monotonic_ns() - start) / 1e9}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="role", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--count", type=int, required=True)
    r.add_argument("--timeout", type=float, default=60.0)
    r.add_argument("--linger", type=float, default=2.0)
    t = sub.add_parser("send")
    t.add_argument("--to", required=True)
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--rate", type=float, required=True)
    t.add_argument("--size", type=int, default=64)
    args = p.parse_args()
    out = recv(args) if args.role == "recv" else send(args)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
