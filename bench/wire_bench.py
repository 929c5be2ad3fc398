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

`--threads 1,2` measures the single loop (the default) and one thread per direction (`wire_threads = 2`) in the
same rounds, named `wire1t` / `wire2t`.

Usage (root): python bench/wire_bench.py [--seconds 6] [--rounds 2] [--only throughput,rtt,timing] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
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


def tune_tcp(t: Topo, tcp_mem: str | None = None) -> None:
    for ns in (t.ns_a, t.ns_b):
        for key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
            t.run(ns, ["sysctl", "-q", "-w", f"{key}={tcp_mem or TCP_MEM}"])


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
    """The UDP probe A -> B; both ends under SCHED_FIFO 5 (below the wire's 10) when chrt exists, so that on a
    busy machine the probe's own scheduling delays do not dominate the tail."""
    rt = ["chrt", "-f", "5"] if shutil.which("chrt") else []
    rx = t.popen(t.ns_b, [*rt, sys.executable, str(PROBE), "recv", "--bind", f"{ADDR_B}:7001", "--count", str(count),
                          "--timeout", str(count / rate + 30)], stdout=subprocess.PIPE, text=True)
    rx.stdout.readline()  # ready
    t.run(t.ns_a, [*rt, sys.executable, str(PROBE), "send", "--to", f"{ADDR_B}:7001", "--count", str(count),
                   "--rate", str(rate)], timeout=count / rate + 60)
    out, _ = rx.communicate(timeout=count / rate + 60)
    return json.loads(out.splitlines()[-1])


class Bench:
    def __init__(self, binary: Path, seconds: float, workdir: Path, rounds: int, threads: tuple[int, ...] = (1,)):
        self.binary, self.seconds, self.workdir, self.rounds = binary, seconds, workdir, rounds
        self.threads = threads
        self.results: dict = {"binary": str(binary), "seconds": seconds}

    def log(self, msg: str) -> None:
        print(msg, flush=True)

    def tag(self, n: int) -> str:
        """How results of `--threads n` are named: plain `wire` for the default single loop when it is the only
        one measured (the names of earlier runs), else `wire1t` / `wire2t`."""
        return "wire" if self.threads == (1,) else f"wire{n}t"

    def throughput(self) -> None:
        runs: dict[str, list[dict]] = {}
        for rnd in range(self.rounds):
            with Topo("plain", wired=False) as t:
                tune_tcp(t)
                runs.setdefault("plain", []).append({"bps": iperf(t, self.seconds, 1)})
            self.log(f"[{rnd}] TCP plain veth            : {runs['plain'][-1]['bps'] / 1e9:6.2f} Gbit/s")
            for delay, n in [(d, n) for d in (0, 10, 50) for n in self.threads]:
                with Topo(f"tp{delay}") as t:
                    tune_tcp(t)
                    ready = t.start_wire(self.binary, wire_config(delay), 1, self.workdir, control=False,
                                         extra=["--threads", str(n)])
                    cpu0, t0 = proc_cpu_s(ready["pid"]), time.monotonic()
                    bps = iperf(t, self.seconds + (4 if delay else 0), 3 if delay else 1)
                    cpu = (proc_cpu_s(ready["pid"]) - cpu0) / (time.monotonic() - t0)
                    stats = t.stop_wire()
                sched = stats["a_to_b"]["sched_error"]
                r = {"bps": bps, "cpu": cpu, "sched_p50_us": sched["p50_us"], "sched_p99_us": sched["p99_us"],
                     "rx_kernel_drops": stats["a_to_b"]["io"]["rx_kernel_drops"]}
                runs.setdefault(f"{self.tag(n)}_{delay}ms", []).append(r)
                self.log(f"[{rnd}] TCP {self.tag(n)} {delay:3d} ms each way : {bps / 1e9:6.2f} Gbit/s  wire CPU {cpu:.2f} cores  "
                         f"sched p50/p99 {sched['p50_us']:.0f}/{sched['p99_us']:.0f} us  rx drops {r['rx_kernel_drops']}")
        med = {k: statistics.median(x["bps"] for x in v) for k, v in runs.items()}
        for k, v in med.items():
            self.log(f"median {k:12s}: {v / 1e9:6.2f} Gbit/s   ratio to plain {v / med['plain']:.2f}")
        self.results["throughput"] = {"runs": runs, "median_bps": med}

    def rtt(self) -> None:
        plain: list[dict] = []
        wire: dict[int, list[dict]] = {n: [] for n in self.threads}
        kinds = ["plain", *self.threads]
        for rnd in range(max(3, self.rounds)):
            # Alternate the order: sockperf's p50 is bimodal (~5 or ~70 us) by CPU placement alone.
            for kind in (kinds if rnd % 2 == 0 else kinds[::-1]):
                if kind == "plain":
                    with Topo("rplain", wired=False) as t:
                        plain.append(sockperf_rtt(t, self.seconds))
                else:
                    with Topo("rwire") as t:
                        t.start_wire(self.binary, wire_config(0), 1, self.workdir, control=False,
                                     extra=["--threads", str(kind)])
                        wire[kind].append(sockperf_rtt(t, self.seconds))
                        t.stop_wire()
            for n in self.threads:
                self.log(f"[{rnd}] sockperf RTT p50 plain {plain[-1]['p50_us']:.1f} us, {self.tag(n)} "
                         f"{wire[n][-1]['p50_us']:.1f} us (p99 {plain[-1]['p99_us']:.1f} / {wire[n][-1]['p99_us']:.1f} us)")
        mp = statistics.median(x["p50_us"] for x in plain)
        out: dict = {"plain": plain}
        for n in self.threads:
            mw = statistics.median(x["p50_us"] for x in wire[n])
            lo = min(x["p50_us"] for x in wire[n]) - min(x["p50_us"] for x in plain)
            self.log(f"sockperf RTT p50, median of rounds: plain {mp:.1f} us, {self.tag(n)} {mw:.1f} us: added "
                     f"{mw - mp:.1f} us (lowest p50s: added {lo:.1f} us)")
            out[self.tag(n)] = {"runs": wire[n], "added_p50_us": mw - mp, "added_lowest_p50_us": lo}
        self.results["rtt"] = out

    def timing(self) -> None:
        rows = []
        # Static ARP entries (quiet): otherwise the first datagrams wait one round trip for ARP, which at 100 ms
        # puts 200 ms into the p99 of a 4 s probe.
        with Topo("tplain", wired=False) as t:
            t.quiet()
            base = one_way(t, 2000, 500)["latency_us"]
        self.log(f"one-way UDP probe over plain veth: p50 {base['p50']:.0f} us, p99 {base['p99']:.0f} us")
        self.log("configured | realised p50 | p99      | p50-configured | wire sched err p50/p99/max")
        for delay, n in [(d, n) for d in (1, 10, 100) for n in self.threads]:
            with Topo(f"tm{delay}") as t:
                t.quiet()
                t.start_wire(self.binary, wire_config(delay), 1, self.workdir, control=False,
                             extra=["--threads", str(n)])
                lat = one_way(t, 2000, 500)["latency_us"]
                st = t.stop_wire()
            sched = st["a_to_b"]["sched_error"]
            row = {"threads": n, "configured_ms": delay, "p50_ms": lat["p50"] / 1e3, "p99_ms": lat["p99"] / 1e3,
                   "excess_p50_us": lat["p50"] - delay * 1e3, "sched_p50_us": sched["p50_us"],
                   "sched_p99_us": sched["p99_us"], "sched_max_us": sched["max_us"]}
            rows.append(row)
            self.log(f"{delay:7d} ms{' (' + self.tag(n) + ')' if len(self.threads) > 1 else ''} | {row['p50_ms']:9.3f} ms | {row['p99_ms']:8.3f} | {row['excess_p50_us']:11.0f} us"
                     f" | {sched['p50_us']:.1f}/{sched['p99_us']:.1f}/{sched['max_us']:.1f} us")
        self.results["timing"] = {"plain_one_way_us": base, "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--rounds", type=int, default=2, help="repeat each measurement; medians are reported")
    p.add_argument("--only", default="throughput,rtt,timing")
    p.add_argument("--json", type=Path)
    p.add_argument("--threads", default="1",
                   help="the wire's forwarding threads to measure, comma-separated (1, 2 or 1,2: both in the same rounds)")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("wire_bench needs root (network namespaces)", file=sys.stderr)
        return 2
    binary = find_binary("roughnet-wire")
    if binary is None:
        print("roughnet-wire is not built (cargo build --release -p roughnet-wire)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rn-wire-bench-") as d:
        threads = tuple(int(x) for x in args.threads.split(","))
        if not threads or any(n not in (1, 2) for n in threads):
            print(f"--threads {args.threads}: expected 1, 2 or 1,2", file=sys.stderr)
            return 2
        b = Bench(binary, args.seconds, Path(d), args.rounds, threads)
        for part in args.only.split(","):
            getattr(b, part.strip())()
    if args.json:
        args.json.write_text(json.dumps(b.results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
