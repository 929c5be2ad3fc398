#!/usr/bin/env python3
"""Where roughnet-wire's time goes while it forwards a bulk TCP stream (issue 17).

One iperf3 TCP stream A -> B through the wire (zero impairment, or --delay-ms each way), in the topology of
bench/wire_bench.py. While it runs, `perf stat` counts the wire's system calls (recvmmsg, sendmmsg, ppoll) and
its context switches, and /proc gives its CPU time; the wire's own stats line gives the frames it forwarded.
Prints CPU per forwarded frame, frames per recvmmsg / sendmmsg call, ppoll sleeps per frame, and the same
iperf3 stream's CPU over a plain veth (the two iperf3 processes' CPU per GB, with and without the wire), so that
the cost the wire adds to the path is in one line. With --record, also `perf record` the wire and print its
top symbols.

Usage (root): python bench/wire_profile.py [--seconds 5] [--delay-ms 0] [--record] [--extra "--busy-poll-us 0"]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

from wire_bench import proc_cpu_s, tune_tcp, wire_config  # noqa: E402
from wire_topo import ADDR_B, Topo  # noqa: E402

from roughnet.binaries import find_binary  # noqa: E402

EVENTS = ["syscalls:sys_enter_recvmmsg", "syscalls:sys_enter_sendmmsg", "syscalls:sys_enter_ppoll",
          "context-switches"]


def iperf_with_cpu(t: Topo, seconds: float) -> dict:
    """One iperf3 stream A -> B; its throughput and both iperf3 processes' CPU seconds."""
    srv = t.popen(t.ns_b, ["iperf3", "-s", "-1", "-B", ADDR_B], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        cli = t.popen(t.ns_a, ["iperf3", "-c", ADDR_B, "-t", str(seconds), "-J"], stdout=subprocess.PIPE,
                      text=True)
        out = cli.stdout.read()
        _, _, ru_c = os.wait4(cli.pid, 0)
        cli.returncode = 0
        res = json.loads(out)
        if "error" in res:
            raise RuntimeError(f"iperf3: {res['error']}")
        _, _, ru_s = os.wait4(srv.pid, 0)
        srv.returncode = 0
        cpu = ru_c.ru_utime + ru_c.ru_stime + ru_s.ru_utime + ru_s.ru_stime
        return {"bps": res["end"]["sum_received"]["bits_per_second"],
                "bytes": res["end"]["sum_received"]["bytes"], "iperf_cpu_s": cpu}
    finally:
        if srv.poll() is None:
            srv.terminate()
            srv.wait(timeout=10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--tcp-max-mb", type=int, help="TCP buffer maximum (tcp_rmem/tcp_wmem) in both hosts, MiB "
                   "(default: wire_bench's 64)")
    p.add_argument("--record", action="store_true", help="also perf record the wire and print its top symbols")
    p.add_argument("--extra", default="", help="extra roughnet-wire arguments, e.g. \"--busy-poll-us 0\"")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("wire_profile needs root (network namespaces)", file=sys.stderr)
        return 2
    binary = find_binary("roughnet-wire")
    perf = shutil.which("perf")
    if binary is None or perf is None:
        print("needs roughnet-wire (make build) and perf (apt-get install linux-perf)", file=sys.stderr)
        return 2
    tcp_mem = f"4096 131072 {args.tcp_max_mb << 20}" if args.tcp_max_mb else None
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with Topo("pplain", wired=False) as t:
        tune_tcp(t, tcp_mem)
        plain = iperf_with_cpu(t, args.seconds)
    print(f"plain veth: {plain['bps'] / 1e9:.2f} Gbit/s, iperf3 pair {plain['iperf_cpu_s'] / plain['bytes'] * 1e9:.2f}"
          f" CPU s per GB")
    with tempfile.TemporaryDirectory(prefix="rn-wire-prof-") as d, Topo("pwire") as t:
        tune_tcp(t, tcp_mem)
        ready = t.start_wire(binary, wire_config(args.delay_ms), 1, Path(d), extra=shlex.split(args.extra),
                             control=False)
        pid = ready["pid"]
        stat = subprocess.Popen([perf, "stat", "-x,", "-e", ",".join(EVENTS), "-p", str(pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rec = None
        if args.record:
            rec = subprocess.Popen([perf, "record", "-F", "2000", "-g", "-o", f"{d}/perf.data", "-p", str(pid)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu0 = proc_cpu_s(pid)
        r = iperf_with_cpu(t, args.seconds)
        cpu = proc_cpu_s(pid) - cpu0
        for q in (stat, rec):
            if q is not None:
                q.send_signal(2)
        _, err = stat.communicate(timeout=30)
        if rec is not None:
            rec.wait(timeout=60)
        stats = t.stop_wire()
        counts = {}
        for line in err.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                counts[f[2]] = int(f[0])
        frames = sum(stats[k]["packets_out"] for k in ("a_to_b", "b_to_a"))
        print(f"wire {args.delay_ms:g} ms: {r['bps'] / 1e9:.2f} Gbit/s ({r['bps'] / plain['bps']:.2f} of plain), "
              f"iperf3 pair {r['iperf_cpu_s'] / r['bytes'] * 1e9:.2f} CPU s per GB")
        print(f"  wire CPU {cpu:.2f} s for {frames} frames forwarded (both ways): "
              f"{cpu / frames * 1e9:.0f} ns per frame, {cpu / r['bytes'] * 1e9:.2f} s per GB")
        rx = counts.get("syscalls:sys_enter_recvmmsg", 0)
        tx = counts.get("syscalls:sys_enter_sendmmsg", 0)
        pp = counts.get("syscalls:sys_enter_ppoll", 0)
        cs = counts.get("context-switches", 0)
        print(f"  recvmmsg {rx} ({frames / max(rx, 1):.1f} frames per call), sendmmsg {tx} "
              f"({frames / max(tx, 1):.1f} frames per call), ppoll {pp} ({pp / max(frames, 1):.3f} per frame), "
              f"context switches {cs} ({cs / max(frames, 1):.3f} per frame)")
        spin = stats.get("loop", {}).get("spin_fraction", float("nan"))
        print(f"  syscalls per frame: {(rx + tx + pp) / max(frames, 1):.3f}; wire spinning {spin:.1%} of its time")
        if args.record:
            rep = subprocess.run([perf, "report", "-i", f"{d}/perf.data", "--no-children", "--sort", "dso,symbol",
                                  "--stdio", "-g", "none", "--percent-limit", "1.5"],
                                 capture_output=True, text=True, timeout=120).stdout
            dso = subprocess.run([perf, "report", "-i", f"{d}/perf.data", "--no-children", "--sort", "dso",
                                  "--stdio", "-g", "none"], capture_output=True, text=True, timeout=120).stdout
            print("  the wire's samples by object: " + ", ".join(
                " ".join(m.groups()) for m in re.finditer(r"(\d+\.\d+%)\s+(\S+)", dso)))
            print("  top symbols of the wire (perf record):")
            for line in rep.splitlines():
                if re.match(r"\s+\d+\.\d+%", line):
                    print("   " + line.rstrip()[:110])
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
