#!/usr/bin/env python3
"""How topology setup and teardown grow with the number of hosts (issue 17).

Builds and tears down, for each host count, one shared segment holding every host
(``--engine kernel``: a bridge; ``--engine wire``: the wire's relay ports), and
prints the median build and teardown times over ``--repeat`` tries and the time per
host. With ``--run``, whole runs instead (`roughnet run`: one UDP sender, every other host
a receiver, 100 msg/s for 5 s): the run's own ``harness_setup_s``, ``harness_measure_s`` and
``harness_teardown_s`` (docs/results-format.md) and the wall time of the command. Needs root.

    .venv/bin/python bench/topo_scale.py --hosts 10,50,100,200 --repeat 3
    .venv/bin/python bench/topo_scale.py --run --hosts 2,10,50,100,200 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet.plan import plan_sweep  # noqa: E402
from roughnet.topo import Ledger, Topology  # noqa: E402


def scenario(n: int, engine: str, receivers: int = 1, duration: str | None = None) -> str:
    hosts = "\n".join(f'[[host]]\nname = "h{i}"\n' for i in range(n))
    names = ", ".join(f'"h{i}"' for i in range(n))
    to = ", ".join(f'"h{i}"' for i in range(1, 1 + receivers))
    amount = f'duration = "{duration}"' if duration else "messages = 10"
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
to = [{to}]
rate = "100 msg/s"
{amount}
payload = "64 B"
"""


def whole_run(n: int, engine: str, work: Path) -> dict[str, float]:
    """One `roughnet run` of n hosts (h0 sends to all others for 5 s): its harness times and wall time."""
    path = work / f"run{n}.toml"
    path.write_text(scenario(n, engine, receivers=n - 1, duration="5 s"))
    results = work / f"results{n}-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "roughnet.cli", "run", str(path), "--results", str(results),
                          "--no-report"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"roughnet run of {n} hosts failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    import duckdb

    with duckdb.connect(str(results / "results.duckdb"), read_only=True) as db:
        status, extra = db.execute("SELECT status, metrics_extra FROM runs").fetchone()
    extra = json.loads(extra) if isinstance(extra, str) else extra
    if status != "ok" or "harness_setup_s" not in extra:
        raise SystemExit(f"run of {n} hosts: status {status}, no harness times: {extra}")
    return {"setup": extra["harness_setup_s"], "measure": extra["harness_measure_s"],
            "teardown": extra["harness_teardown_s"], "wall": wall}


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
    ap.add_argument("--run", action="store_true", help="whole runs (roughnet run) instead of topologies")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (namespaces)", file=sys.stderr)
        return 2
    if args.run:
        print(f"{'hosts':>6} {'setup s':>8} {'measure s':>10} {'teardown s':>11} {'setup+teardown s':>17} {'wall s':>7}")
        with tempfile.TemporaryDirectory(prefix="rn-run-scale-") as d:
            for n in (int(x) for x in args.hosts.split(",")):
                rows = [whole_run(n, args.engine, Path(d)) for _ in range(args.repeat)]
                m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                print(f"{n:>6} {m['setup']:>8.2f} {m['measure']:>10.2f} {m['teardown']:>11.2f} "
                      f"{m['setup'] + m['teardown']:>17.2f} {m['wall']:>7.1f}", flush=True)
        return 0
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
