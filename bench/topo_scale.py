#!/usr/bin/env python3
"""How topology setup and teardown grow with the number of hosts (issue 17).

Builds and tears down, for each host count, one shared segment holding every host
(``--engine kernel``: a bridge; ``--engine wire``: the wire's relay ports), and
prints the median build and teardown times over ``--repeat`` tries, the time per
host, and ``ip`` processes started (the cost that grows with hosts). Needs root.

    .venv/bin/python bench/topo_scale.py --hosts 10,50,100,200 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet.plan import plan_sweep  # noqa: E402
from roughnet.topo import Ledger, Topology  # noqa: E402


def scenario(n: int, engine: str) -> str:
    hosts = "\n".join(f'[[host]]\nname = "h{i}"\n' for i in range(n))
    names = ", ".join(f'"h{i}"' for i in range(n))
    return f"""
[scenario]
name = "topo-scale-{n}"

{hosts}
[[link]]
between = [{names}]
engine = "{engine}"

[workload]
protocol = "udp"
pattern = "stream"
from = "h0"
to = "h1"
rate = "10 msg/s"
messages = 10
payload = "64 B"
"""


def once(n: int, engine: str, work: Path) -> tuple[float, float]:
    path = work / f"s{n}.toml"
    path.write_text(scenario(n, engine))
    run = plan_sweep(path).runs[0]
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, work), engines={0: engine})
    t0 = time.perf_counter()
    topo.build()
    t1 = time.perf_counter()
    topo.teardown()
    t2 = time.perf_counter()
    if topo.teardown_errors:
        raise SystemExit(f"teardown of {n} hosts failed: {topo.teardown_errors}")
    return t1 - t0, t2 - t1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="2,10,50,100,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", default="kernel", choices=("kernel", "wire"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (namespaces)", file=sys.stderr)
        return 2
    print(f"{'hosts':>6} {'build s':>9} {'teardown s':>11} {'total s':>8} {'ms/host':>8}")
    with tempfile.TemporaryDirectory(prefix="rn-topo-scale-") as d:
        for n in (int(x) for x in args.hosts.split(",")):
            builds, downs = [], []
            for _ in range(args.repeat):
                b, t = once(n, args.engine, Path(d))
                builds.append(b)
                downs.append(t)
            b, t = statistics.median(builds), statistics.median(downs)
            print(f"{n:>6} {b:>9.2f} {t:>11.2f} {b + t:>8.2f} {1000 * (b + t) / n:>8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
