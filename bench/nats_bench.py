#!/usr/bin/env python3
"""roughnet-agent's NATS driver against `nats-bench`, NATS's own Go benchmark.

nats-bench (github.com/nats-io/nats.go/examples/nats-bench@v1.11.0, built from the
Go module proxy: `go install github.com/nats-io/nats.go/examples/nats-bench@v1.11.0`)
runs one publisher and one subscriber as fast as they can and prints each side's
msgs/sec.  The agent runs the same workload as two processes: a stream receiver
and a stream sender with no rate, N messages of S bytes; its receiver's msgs/sec
(first to last arrival) is compared with nats-bench's "Sub stats".  Both go through
one nats-server started here on 127.0.0.1 (or --server); rounds alternate the order.

Like for like is nats-bench as two processes, as the agent runs: one `nats-bench -np 0
-ns 1` (the subscriber; its "Sub stats" count first to last arrival, as the agent's
receiver does) and one `nats-bench -np 1 -ns 0` (the publisher), started once the
subscriber's "Starting benchmark" line says its subscription is flushed to the server.
With publisher and subscriber in one Go process (`-np 1 -ns 1`, printed as
`nats_bench_1proc_sub_msgs_s`) the two share one scheduler, one heap and one process's
CPU accounting, which two processes on two cores do not: that single-process figure is
shown, not the target's reference.  The target (issue 17) is `ratio` >= 0.9, the agent
against the two-process nats-bench.

Usage: python bench/nats_bench.py [--rounds 3] [--messages 200000] [--size 128] [--json out.json]
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet.binaries import require_binary  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def nats_server() -> Iterator[str]:
    port = free_port()
    p = subprocess.Popen([shutil.which("nats-server") or "/usr/sbin/nats-server", "-a", "127.0.0.1", "-p",
                          str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if p.poll() is not None:
                    raise RuntimeError("nats-server exited")
                time.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(timeout=10)


def _reap(p: subprocess.Popen, timeout: float) -> tuple[str, float]:
    """Read a child's stdout to the end and reap it; (stdout, its CPU seconds, user + system)."""
    out = p.stdout.read() if p.stdout is not None else ""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            raise RuntimeError(f"{p.args[0]} did not finish in {timeout} s")
        time.sleep(0.005)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{p.args[0]} exited {p.returncode}")
    return out, ru.ru_utime + ru.ru_stime


CPU: dict[str, list[float]] = {}


def _cpu(which: str, seconds: float, n: int) -> None:
    """Record CPU time per message (us) of one process, for the profile in docs/PERFORMANCE.md."""
    CPU.setdefault(which, []).append(seconds / n * 1e6)


def agent_rate(agent: Path, server: str, subject: str, n: int, size: int) -> float:
    def cfg(role: str) -> str:
        return json.dumps({"v": 1, "role": role, "protocol": "nats", "pattern": "stream", "broker": server,
                           "topic": subject, "payload_bytes": size, "messages": n, "report_interval_ms": 0,
                           "timeout_ms": 120000})

    rx = subprocess.Popen([str(agent), "run", "--config-json", cfg("receiver")], stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    assert json.loads(rx.stdout.readline())["type"] == "ready"
    tx = subprocess.Popen([str(agent), "run", "--config-json", cfg("sender")], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    _, tx_cpu = _reap(tx, 300)
    out, rx_cpu = _reap(rx, 120)
    _cpu("agent_sender", tx_cpu, n)
    _cpu("agent_receiver", rx_cpu, n)
    r = json.loads(out.splitlines()[-1])
    if r["lost"]:
        print(f"agent receiver lost {r['lost']} (slow consumer)", file=sys.stderr)
    return r["received"] / r["duration_s"]


def _sub_stats(out: str) -> float:
    m = re.search(r"Sub stats: ([\d,]+) msgs/sec", out)
    if m is None:
        raise RuntimeError(f"no 'Sub stats' in nats-bench's output: {out!r}")
    return float(m.group(1).replace(",", ""))


def bench_rate(tool: str, server: str, subject: str, n: int, size: int) -> float:
    """nats-bench in one process: publisher and subscriber share it."""
    out = subprocess.run([tool, "-s", f"nats://{server}", "-np", "1", "-ns", "1", "-n", str(n), "-ms", str(size),
                          subject], capture_output=True, text=True, check=True, timeout=300).stdout
    return _sub_stats(out)


def bench_rate_2proc(tool: str, server: str, subject: str, n: int, size: int) -> float:
    """nats-bench as two processes, subscriber first, like the agent's receiver and sender."""
    common = ["-s", f"nats://{server}", "-n", str(n), "-ms", str(size)]
    sub = subprocess.Popen([tool, *common, "-np", "0", "-ns", "1", subject], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert sub.stderr is not None
        line = sub.stderr.readline()  # printed once the subscription is flushed to the server
        if "Starting benchmark" not in line:
            raise RuntimeError(f"nats-bench subscriber: {line!r}")
        pub = subprocess.Popen([tool, *common, "-np", "1", "-ns", "0", subject], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True)
        _, pub_cpu = _reap(pub, 300)
        out, sub_cpu = _reap(sub, 120)
        _cpu("nats_bench_pub", pub_cpu, n)
        _cpu("nats_bench_sub", sub_cpu, n)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    return _sub_stats(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="use this nats-server (IP:PORT) instead of starting one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--nats-bench", default=shutil.which("nats-bench") or os.path.expanduser("~/go/bin/nats-bench"))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not Path(a.nats_bench).exists():
        sys.exit("nats-bench not found: go install github.com/nats-io/nats.go/examples/nats-bench@v1.11.0")
    agent = require_binary("roughnet-agent")
    rows = []
    with (nats_server() if a.server is None else _given(a.server)) as server:
        for r in range(a.rounds):
            res = {}
            order = ["agent", "nats-bench-2", "nats-bench-1"]
            for which in (order if r % 2 == 0 else order[::-1]):
                if which == "agent":
                    res[which] = agent_rate(agent, server, f"rn.bench.a{r}", a.messages, a.size)
                elif which == "nats-bench-2":
                    res[which] = bench_rate_2proc(a.nats_bench, server, f"rn.bench.m{r}", a.messages, a.size)
                else:
                    res[which] = bench_rate(a.nats_bench, server, f"rn.bench.n{r}", a.messages, a.size)
            row = {"round": r, "load": round(os.getloadavg()[0], 2), "agent_msgs_s": round(res["agent"]),
                   "nats_bench_sub_msgs_s": round(res["nats-bench-2"]),
                   "nats_bench_1proc_sub_msgs_s": round(res["nats-bench-1"]),
                   "ratio": round(res["agent"] / res["nats-bench-2"], 3),
                   "ratio_1proc": round(res["agent"] / res["nats-bench-1"], 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {"ratio_median": statistics.median(r["ratio"] for r in rows),
               "ratio_1proc_median": statistics.median(r["ratio_1proc"] for r in rows),
               "agent_median": statistics.median(r["agent_msgs_s"] for r in rows),
               "nats_bench_2proc_median": statistics.median(r["nats_bench_sub_msgs_s"] for r in rows),
               "nats_bench_1proc_median": statistics.median(r["nats_bench_1proc_sub_msgs_s"] for r in rows),
               "size": a.size, "messages": a.messages, "load_end": round(os.getloadavg()[0], 2),
               # CPU per message of each process (user + system, us), medians over rounds: load-independent
               # where the rates are not.
               "cpu_us_per_msg": {k: round(statistics.median(v), 3) for k, v in CPU.items()}}
    print(json.dumps(summary))
    if a.json:
        a.json.write_text(json.dumps({"rounds": rows, "summary": summary}, indent=1))


@contextmanager
def _given(server: str) -> Iterator[str]:
    yield server


if __name__ == "__main__":
    main()
