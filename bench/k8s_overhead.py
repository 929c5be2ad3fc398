#!/usr/bin/env python3
"""What a run costs on the Kubernetes backend against the namespace backend, in the same session.

The same scenario (two hosts on one link, UDP stream of a fixed length; a clean link, and the same
link with 5 ms of delay, which the namespace backend realises with its wire engine and the
Kubernetes backend with the wire inside the carrier pod) is run with ``--backend namespace`` and
``--backend kubernetes`` on roughnet's local cluster, alternating, ``--rounds`` times.  Per run,
the overhead is the run's duration (setup, services, agents, teardown: ``duration_s`` in the
record) minus the traffic's own time (messages / rate).  Prints each figure and the median
ratio kubernetes / namespace, and the pods' time to Ready (``backend_info.pods_ready_s``).

Usage (root, a local cluster up: `roughnet cluster up`):
    python bench/k8s_overhead.py [--cluster local] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
MESSAGES, RATE = 400, 200  # 2 s of traffic per run

SCENARIO = f"""
[scenario]
name = "k8s-overhead"
seed = 1
timeout = "60 s"
[[host]]
name = "a"
node = "node1"
[[host]]
name = "b"
node = "node2"
[[link]]
between = ["a", "b"]
delay = "${{link.delay}}"
engine = "${{link.engine}}"
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["b"]
messages = {MESSAGES}
rate = "{RATE} msg/s"
payload = "256 B"
[sweep]
link = [{{ delay = "0 ms", engine = "auto" }}, {{ delay = "5 ms", engine = "wire" }}]
"""


def run(backend: str, cluster: str, folder: Path) -> list[dict]:
    path = folder / "k8s-overhead.toml"
    path.write_text(SCENARIO)
    results = folder / f"res-{backend}"
    argv = [sys.executable, "-m", "roughnet.cli", "run", str(path), "--no-report", "--results", str(results),
            "--backend", backend]
    if backend == "kubernetes":
        argv += ["--cluster", cluster]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{backend}: roughnet run failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    con = duckdb.connect(str(results / "results.duckdb"), read_only=True)
    rows = con.execute("select run_index, status, duration_s, backend_info from runs order by run_index").fetchall()
    con.close()
    return [{"index": i, "status": s, "duration_s": d, "info": json.loads(b) if b else {}} for i, s, d, b in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="local")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    traffic_s = MESSAGES / RATE
    seen: dict[str, dict[int, list[float]]] = {"namespace": {0: [], 1: []}, "kubernetes": {0: [], 1: []}}
    ready: list[float] = []
    for rnd in range(args.rounds):
        order = ("namespace", "kubernetes") if rnd % 2 == 0 else ("kubernetes", "namespace")
        for backend in order:
            with tempfile.TemporaryDirectory(prefix="rn-k8s-bench-") as tmp:
                for r in run(backend, args.cluster, Path(tmp)):
                    if r["status"] != "ok":
                        sys.exit(f"{backend} run {r['index']} failed")
                    over = r["duration_s"] - traffic_s
                    seen[backend][r["index"]].append(over)
                    if backend == "kubernetes" and r["info"].get("pods_ready_s") is not None:
                        ready.append(r["info"]["pods_ready_s"])
                    print(f"round {rnd + 1} {backend:10s} link {'clean' if r['index'] == 0 else '5 ms (wire)':12s} "
                          f"run {r['duration_s']:6.2f} s, overhead {over:6.2f} s", flush=True)
    out = {"traffic_s": traffic_s, "rounds": args.rounds, "pods_ready_s_median": statistics.median(ready)}
    for idx, name in ((0, "clean"), (1, "wire_5ms")):
        ns, k8s = statistics.median(seen["namespace"][idx]), statistics.median(seen["kubernetes"][idx])
        out[name] = {"namespace_overhead_s": round(ns, 3), "kubernetes_overhead_s": round(k8s, 3),
                     "ratio": round(k8s / ns, 2)}
        print(f"{name}: overhead per run, median of {args.rounds}: namespace {ns:.2f} s, kubernetes {k8s:.2f} s "
              f"({k8s / ns:.2f}x)")
    print(f"pods Ready after {out['pods_ready_s_median']:.2f} s (median)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
