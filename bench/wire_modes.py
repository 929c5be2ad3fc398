#!/usr/bin/env python3
"""Measurements behind roughnet-wire's design choices (docs/wire.md): the same workloads through the wire run
in different modes, interleaved over rounds so machine drift hits every mode alike.

Modes:
- ``single``: one process, one loop for both directions (the default, ``--threads 1``; spin at most 20 % of
  the time);
- ``threads``: one process, one thread per direction (``--threads 2``, a link's ``wire_threads = 2``);
- ``busy-spin``: the default loop with an unlimited spin budget (``--spin-budget 100``);
- ``per-direction``: two processes, each reading one side only (``--receive-from a`` / ``b``), standing in
  for one thread per direction (what the C relay of MEASUREMENTS.md did);
- ``no-rxts``: the default loop with kernel RX timestamps off (arrival time = the loop's clock);
- ``no-spin``: the default loop with ``--spin-us 0`` (sleep until the due time, no busy wait);
- ``no-realtime``: the default loop under ordinary scheduling (``--realtime 0``) instead of SCHED_FIFO 10;
- ``no-busy-poll``: the default loop without the busy-poll window after traffic (``--busy-poll-us 0``: sleep in
  ppoll as soon as nothing is due, issue 17).

Workloads: iperf3 TCP at 0 and 10 ms each way; sockperf UDP ping-pong p50 at 0 ms, and at 10 ms each way (minus
the configured 20 ms); one-way UDP probe at 10 ms (realised p50/p99 minus configured). Usage (root): python bench/wire_modes.py [--rounds 2] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

from wire_bench import iperf, one_way, sockperf_rtt, tune_tcp, wire_config  # noqa: E402
from wire_topo import Topo  # noqa: E402

from roughnet.binaries import find_binary  # noqa: E402

MODES = {
    "single": [["--threads", "1"]],
    "threads": [["--threads", "2"]],
    "threads-no-realtime": [["--threads", "2", "--realtime", "0"]],
    "threads-no-busy-poll": [["--threads", "2", "--busy-poll-us", "0"]],
    "busy-spin": [["--threads", "1", "--spin-budget", "100"]],
    "per-direction": [["--threads", "1", "--receive-from", "a"], ["--threads", "1", "--receive-from", "b"]],
    "no-rxts": [["--threads", "1", "--rx-timestamps", "false"]],
    "no-spin": [["--threads", "1", "--spin-us", "0"]],
    "no-realtime": [["--threads", "1", "--realtime", "0"]],
    "no-busy-poll": [["--threads", "1", "--busy-poll-us", "0"]],
}
PARTS = ("tcp0", "rtt", "tcp10", "oneway10", "rtt10")


def start(t: Topo, binary: Path, delay_ms: float, mode: str, workdir: Path) -> list[subprocess.Popen]:
    procs = []
    for i, extra in enumerate(MODES[mode]):
        t.start_wire(binary, wire_config(delay_ms), 1, workdir, extra=extra, control=False)
        procs.append(t.wire)
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.communicate(timeout=10)


def measure(binary: Path, mode: str, seconds: float, workdir: Path, parts: tuple[str, ...] = PARTS) -> dict:
    r = {}
    if "tcp0" in parts or "rtt" in parts:
        with Topo(f"m{mode[:3]}0") as t:
            tune_tcp(t)
            procs = start(t, binary, 0, mode, workdir)
            if "tcp0" in parts:
                r["tcp_0ms_gbps"] = iperf(t, seconds, 1) / 1e9
            if "rtt" in parts:
                r["rtt_p50_us"] = sockperf_rtt(t, seconds)["p50_us"]
            stop(procs)
            t.wire = None
    if "tcp10" in parts or "oneway10" in parts or "rtt10" in parts:
        with Topo(f"m{mode[:3]}10") as t:
            tune_tcp(t)
            procs = start(t, binary, 10, mode, workdir)
            if "tcp10" in parts:
                r["tcp_10ms_gbps"] = iperf(t, seconds + 4, 3) / 1e9
            if "oneway10" in parts:
                lat = one_way(t, 2000, 500)["latency_us"]
                r["oneway_10ms_excess_p50_us"] = lat["p50"] - 10_000
                r["oneway_10ms_excess_p99_us"] = lat["p99"] - 10_000
            if "rtt10" in parts:
                r["rtt_10ms_excess_p50_us"] = sockperf_rtt(t, seconds)["p50_us"] - 20_000
            stop(procs)
            t.wire = None
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--parts", default=",".join(PARTS), help="what to measure per mode: " + ",".join(PARTS))
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("wire_modes needs root (network namespaces)", file=sys.stderr)
        return 2
    binary = find_binary("roughnet-wire")
    if binary is None:
        print("roughnet-wire is not built", file=sys.stderr)
        return 2
    modes = args.modes.split(",")
    parts = tuple(args.parts.split(","))
    if unknown := [x for x in parts if x not in PARTS] + [m for m in modes if m not in MODES]:
        print(f"unknown --parts/--modes {unknown}; parts are {','.join(PARTS)}, modes {','.join(MODES)}",
              file=sys.stderr)
        return 2
    results: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="rn-wire-modes-") as d:
        for rnd in range(args.rounds):
            order = modes if rnd % 2 == 0 else list(reversed(modes))
            for m in order:
                r = measure(binary, m, args.seconds, Path(d), parts)
                r["load"] = os.getloadavg()[0]
                results[m].append(r)
                print(f"round {rnd} {m:14s} " + "  ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    print("median over rounds:")
    for m in modes:
        keys = results[m][0].keys()
        med = {k: statistics.median(r[k] for r in results[m]) for k in keys}
        print(f"  {m:14s} " + "  ".join(f"{k} {v:.2f}" for k, v in med.items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
