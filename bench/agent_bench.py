#!/usr/bin/env python3
"""roughnet-agent against independent tools on the same veth pair, interleaved.

- UDP ping-pong round trip p50: roughnet-agent `ping` (64 B, closed loop) against
  `sockperf ping-pong` (which reports half round trips; doubled here).
- TCP bulk throughput: roughnet-agent `bulk` against `iperf3`.

Both run in the same namespaces, built by roughnet's own topology code (no
impairment, offloads off as in every roughnet run), alternating tool order in
each round so drift hits both.  Prints each measurement and the median ratios;
targets (issue 2): p50 round trip <= 1.10x sockperf's, throughput >= 0.9x iperf3's.

Usage (root): python bench/agent_bench.py [--rounds 3] [--seconds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet import topo  # noqa: E402
from roughnet.binaries import require_binary  # noqa: E402
from roughnet.runspec import Host, Link, Run, Workload  # noqa: E402

PORT = 5201


def make_run() -> Run:
    w = Workload(pattern="ping", protocol="udp", sender="a", receivers=("b",), payload_bytes=64, messages=1)
    return Run(scenario="bench", sweep_id="bench-00000000", run_id="be0c0000" + "beef", index=0, params={},
               seed=1, repeat=0, hosts=(Host("a"), Host("b")), links=(Link(0, ("a", "b")),), workload=w)


def agent_result(t: topo.Topology, agent: Path, host: str, cfg: dict, tmp: Path) -> dict:
    path = tmp / f"{host}-{cfg['role']}.json"
    path.write_text(json.dumps(cfg))
    return t.popen(host, [str(agent), "run", "--config", str(path)], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)


def read_lines(proc, want: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        obj = json.loads(line)
        if obj.get("type") == want:
            return obj
        if obj.get("type") == "error":
            raise RuntimeError(obj)
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"no {want} line; stderr: {proc.stderr.read()[-500:]}")


def agent_pair(t, agent, tmp, pattern, protocol, seconds, extra):
    base = {"v": 1, "protocol": protocol, "pattern": pattern, "timeout_ms": int(seconds * 1000) + 20000,
            "warmup": 0, "seed": 1, "options": {}, "report_interval_ms": 0} | extra
    rx_role, tx_role = ("ponger", "pinger") if pattern == "ping" else ("receiver", "sender")
    rx = agent_result(t, agent, "b", base | {"role": rx_role, "listen": f"{t.address('b', 'a')}:{PORT}"}, tmp)
    read_lines(rx, "ready", 10)
    tx = agent_result(t, agent, "a", base | {"role": tx_role, "peers": [f"{t.address('b', 'a')}:{PORT}"]}, tmp)
    tx_res = read_lines(tx, "result", seconds + 30)
    tx.wait(timeout=10)
    if rx.poll() is None:
        rx.terminate()
    try:
        rx_res = read_lines(rx, "result", 10)
    except RuntimeError:
        rx_res = {}
    rx.wait(timeout=10)
    return tx_res, rx_res


def agent_ping_p50_us(t, agent, tmp, seconds) -> float:
    n = int(seconds * 15000)
    tx, _ = agent_pair(t, agent, tmp, "ping", "udp", seconds,
                       {"payload_bytes": 64, "messages": n, "interval_ns": None, "duration_ms": None})
    return tx["rtt_actual"]["p50_us"]


def agent_bulk_bps(t, agent, tmp, seconds) -> float:
    tx, rx = agent_pair(t, agent, tmp, "bulk", "tcp", seconds,
                        {"payload_bytes": 65536, "messages": None, "duration_ms": int(seconds * 1000)})
    return (rx or tx)["throughput_bps"]


def sockperf_p50_rtt_us(t, seconds) -> float:
    addr = t.address("b", "a")
    srv = t.popen("b", ["sockperf", "server", "-i", addr, "-p", str(PORT + 1)], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = t.run("a", ["sockperf", "ping-pong", "-i", addr, "-p", str(PORT + 1), "-m", "64", "-t", str(int(seconds))],
                    capture_output=True, text=True, timeout=seconds + 30)
        m = re.search(r"percentile 50\.000 =\s+([\d.]+)", out.stdout + out.stderr)
        if not m:
            raise RuntimeError(f"sockperf output not understood: {out.stdout[-800:]}{out.stderr[-400:]}")
        return 2 * float(m.group(1))  # sockperf reports half round trips
    finally:
        srv.terminate()
        srv.wait(timeout=5)


def iperf3_bps(t, seconds) -> float:
    addr = t.address("b", "a")
    srv = t.popen("b", ["iperf3", "-s", "-1", "-B", addr, "-p", str(PORT + 2)], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = t.run("a", ["iperf3", "-c", addr, "-p", str(PORT + 2), "-t", str(int(seconds)), "-J"],
                    capture_output=True, text=True, timeout=seconds + 30)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    finally:
        if srv.poll() is None:
            srv.terminate()
        srv.wait(timeout=5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    agent = require_binary("roughnet-agent")
    run = make_run()
    ledger = topo.Ledger(run.run_id[:8], run.run_id)
    t = topo.Topology(run, ledger, engines={0: "kernel"})
    rows: dict[str, list[float]] = {"agent_rtt_p50_us": [], "sockperf_rtt_p50_us": [], "agent_tcp_bps": [],
                                    "iperf3_tcp_bps": []}
    try:
        t.build()
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for i in range(args.rounds):
                order = [0, 1] if i % 2 == 0 else [1, 0]
                for which in order:
                    if which == 0:
                        rows["agent_rtt_p50_us"].append(agent_ping_p50_us(t, agent, tmp, args.seconds))
                        rows["sockperf_rtt_p50_us"].append(sockperf_p50_rtt_us(t, args.seconds))
                    else:
                        rows["sockperf_rtt_p50_us"].append(sockperf_p50_rtt_us(t, args.seconds))
                        rows["agent_rtt_p50_us"].append(agent_ping_p50_us(t, agent, tmp, args.seconds))
                for which in order:
                    if which == 0:
                        rows["agent_tcp_bps"].append(agent_bulk_bps(t, agent, tmp, args.seconds))
                        rows["iperf3_tcp_bps"].append(iperf3_bps(t, args.seconds))
                    else:
                        rows["iperf3_tcp_bps"].append(iperf3_bps(t, args.seconds))
                        rows["agent_tcp_bps"].append(agent_bulk_bps(t, agent, tmp, args.seconds))
                print(f"round {i + 1}: " + ", ".join(f"{k}={v[-1]:.4g}" for k, v in rows.items()), flush=True)
    finally:
        t.teardown()
    med = {k: statistics.median(v) for k, v in rows.items()}
    rtt_ratio = med["agent_rtt_p50_us"] / med["sockperf_rtt_p50_us"]
    bps_ratio = med["agent_tcp_bps"] / med["iperf3_tcp_bps"]
    print(f"UDP ping-pong p50 RTT: agent {med['agent_rtt_p50_us']:.1f} us, sockperf {med['sockperf_rtt_p50_us']:.1f} us, "
          f"ratio {rtt_ratio:.3f} (target <= 1.10) {'PASS' if rtt_ratio <= 1.10 else 'MISS'}")
    print(f"TCP bulk throughput: agent {med['agent_tcp_bps'] / 1e9:.2f} Gbit/s, iperf3 {med['iperf3_tcp_bps'] / 1e9:.2f} Gbit/s, "
          f"ratio {bps_ratio:.3f} (target >= 0.90) {'PASS' if bps_ratio >= 0.90 else 'MISS'}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rows, "median": med, "rtt_ratio": rtt_ratio, "bps_ratio": bps_ratio},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
