#!/usr/bin/env python3
"""roughnet-wire's performance section (issue 3), measured against a plain veth in the same run.

- TCP throughput (iperf3, one stream, MTU 1500, offloads off): plain veth A<->B against A<->L<->B with
  roughnet-wire in L at zero impairment, and with 10 ms / 50 ms delay each way. Targets: >= 2 Gbit/s at zero
  delay, >= 1 Gbit/s at 50 ms each way.
- Added round trip at zero configured delay: sockperf UDP ping-pong (64 B, --full-rtt) p50 through the wire
  minus p50 over the plain veth. Target: <= 30 us.
- Timing table: configured one-way delay 1, 10, 100 ms against the realised one-way p50/p99 (UDP probe with
  CLOCK_MONOTONIC timestamps, bench/wire_probe.py) and the wire's own scheduling error (actual - due).

Prints each measurement and the ratios; absolute figures drift between machines, ratios taken in one run are
what to trust (MEASUREMENTS.md).

Usage (root): python bench/wire_bench.py [--seconds 6] [--only throughput,rtt,timing] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

from wire_topo import ADDR_B, Topo  # noqa: E402

from roughnet.binaries import find_binary  # noqa: E402

PROBE = HERE / "wire_probe.py"
# TCP buffers big enough for 1 Gbit/s x 100 ms (12.5 MB in flight); per-namespace sysctls only.
TCP_MEM = "4096 131072 67108864"


def wire_config(delay_ms: float) -> dict:
    d = {"delay_ns": int(delay_ms * 1_000_000)}
    return {"a_to_b": dict(d), "b_to_a": dict(d)}


def tune_tcp(t: Topo) -> None:
    for ns in (t.ns_a, t.ns_b):
        for key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
            t.run(ns, ["sysctl", "-q", "-w", f"{key}={TCP_MEM}"])


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def iperf(t: Topo, seconds: float, omit: int) -> float:
    srv = t.popen(t.ns_b, ["iperf3", "-s", "-1", "-B", ADDR_B], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = t.run(t.ns_a, ["iperf3", "-c", ADDR_B, "-t", str(seconds), "-O", str(omit), "-J"], timeout=seconds + 60)
        res = json.loads(r.stdout)
        if "error" in res:
            raise RuntimeError(f"iperf3: {res['error']}")
        return res["end"]["sum_received"]["bits_per_second"]
    finally:
        if srv.poll() is None:
            srv.terminate()
        srv.wait(timeout=10)


def sockperf_rtt(t: Topo, seconds: float) -> dict:
    srv = t.popen(t.ns_b, ["sockperf", "server", "-i", ADDR_B, "-p", "11111"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = t.run(t.ns_a, ["sockperf", "ping-pong", "-i", ADDR_B, "-p", "11111", "-t", str(int(seconds)),
                           "-m", "64", "--full-rtt"], timeout=seconds + 60)
        pct = {m.group(1): float(m.group(2)) for m in re.finditer(r"percentile (\d+\.\d+) =\s+([\d.]+)", r.stdout)}
        if "50.000" not in pct:
            raise RuntimeError(f"sockperf printed no percentiles: {r.stdout[-500:]} {r.stderr[-300:]}")
        return {"p50_us": pct["50.000"], "p99_us": pct["99.000"]}
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def one_way(t: Topo, count: int, rate: float) -> dict:
    rx = t.popen(t.ns_b, [sys.executable, str(PROBE), "recv", "--bind", f"{ADDR_B}:7001", "--count", str(count),
                          "--timeout", str(count / rate + 30)], stdout=subprocess.PIPE, text=True)
    rx.stdout.readline()  # ready
    t.run(t.ns_a, [sys.executable, str(PROBE), "send", "--to", f"{ADDR_B}:7001", "--count", str(count),
                   "--rate", str(rate)], timeout=count / rate + 60)
    out, _ = rx.communicate(timeout=count / rate + 60)
    return json.loads(out.splitlines()[-1])


class Bench:
    def __init__(self, binary: Path, seconds: float, workdir: Path):
        self.binary, self.seconds, self.workdir = binary, seconds, workdir
        self.results: dict = {"binary": str(binary), "seconds": seconds}

    def log(self, msg: str) -> None:
        print(msg, flush=True)

    def throughput(self) -> None:
        res = {}
        with Topo("plain", wired=False) as t:
            tune_tcp(t)
            res["plain_bps"] = iperf(t, self.seconds, 1)
        self.log(f"TCP plain veth            : {res['plain_bps'] / 1e9:6.2f} Gbit/s")
        for delay in (0, 10, 50):
            with Topo(f"tp{delay}") as t:
                tune_tcp(t)
                ready = t.start_wire(self.binary, wire_config(delay), 1, self.workdir, control=False)
                cpu0, t0 = proc_cpu_s(ready["pid"]), time.monotonic()
                bps = iperf(t, self.seconds + (4 if delay else 0), 3 if delay else 1)
                cpu = (proc_cpu_s(ready["pid"]) - cpu0) / (time.monotonic() - t0)
                stats = t.stop_wire()
            sched = stats["a_to_b"]["sched_error"]
            res[f"wire_{delay}ms_bps"] = bps
            res[f"wire_{delay}ms_cpu"] = cpu
            res[f"wire_{delay}ms_sched_p99_us"] = sched["p99_us"]
            res[f"wire_{delay}ms_kernel_drops"] = stats["a_to_b"]["io"]["rx_kernel_drops"]
            self.log(f"TCP wire {delay:3d} ms each way : {bps / 1e9:6.2f} Gbit/s  ratio to plain "
                     f"{bps / res['plain_bps']:.2f}  wire CPU {cpu:.2f} cores  sched p50/p99 "
                     f"{sched['p50_us']:.0f}/{sched['p99_us']:.0f} us  rx drops {res[f'wire_{delay}ms_kernel_drops']}")
        self.results["throughput"] = res

    def rtt(self) -> None:
        with Topo("rplain", wired=False) as t:
            plain = sockperf_rtt(t, self.seconds)
        with Topo("rwire") as t:
            t.start_wire(self.binary, wire_config(0), 1, self.workdir, control=False)
            wire = sockperf_rtt(t, self.seconds)
            t.stop_wire()
        added = wire["p50_us"] - plain["p50_us"]
        self.log(f"sockperf RTT p50 plain {plain['p50_us']:.1f} us, wire {wire['p50_us']:.1f} us: added {added:.1f} us "
                 f"(p99 {plain['p99_us']:.1f} -> {wire['p99_us']:.1f} us)")
        self.results["rtt"] = {"plain": plain, "wire": wire, "added_p50_us": added}

    def timing(self) -> None:
        rows = []
        with Topo("tplain", wired=False) as t:
            base = one_way(t, 2000, 500)["latency_us"]
        self.log(f"one-way UDP probe over plain veth: p50 {base['p50']:.0f} us, p99 {base['p99']:.0f} us")
        self.log("configured | realised p50 | p99      | p50-configured | wire sched err p50/p99/max")
        for delay in (1, 10, 100):
            with Topo(f"tm{delay}") as t:
                t.start_wire(self.binary, wire_config(delay), 1, self.workdir, control=False)
                lat = one_way(t, 2000, 500)["latency_us"]
                st = t.stop_wire()
            sched = st["a_to_b"]["sched_error"]
            row = {"configured_ms": delay, "p50_ms": lat["p50"] / 1e3, "p99_ms": lat["p99"] / 1e3,
                   "excess_p50_us": lat["p50"] - delay * 1e3, "sched_p50_us": sched["p50_us"],
                   "sched_p99_us": sched["p99_us"], "sched_max_us": sched["max_us"]}
            rows.append(row)
            self.log(f"{delay:7d} ms | {row['p50_ms']:9.3f} ms | {row['p99_ms']:8.3f} | {row['excess_p50_us']:11.0f} us"
                     f" | {sched['p50_us']:.1f}/{sched['p99_us']:.1f}/{sched['max_us']:.1f} us")
        self.results["timing"] = {"plain_one_way_us": base, "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--only", default="throughput,rtt,timing")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("wire_bench needs root (network namespaces)", file=sys.stderr)
        return 2
    binary = find_binary("roughnet-wire")
    if binary is None:
        print("roughnet-wire is not built (cargo build --release -p roughnet-wire)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rn-wire-bench-") as d:
        b = Bench(binary, args.seconds, Path(d))
        for part in args.only.split(","):
            getattr(b, part.strip())()
    if args.json:
        args.json.write_text(json.dumps(b.results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
