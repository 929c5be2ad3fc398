#!/usr/bin/env python3
"""Self-chaos at scale: `roughnet run` interrupted N times at random instants (issue 26; docs/PERFORMANCE.md).

The iteration of tests/integration/chaos.py (its docstring says what one interrupt checks: a small run with a
managed broker, the wire and an event; SIGINT, SIGTERM and SIGKILL in turn at a uniformly random instant within an
uninterrupted run's duration (stratified: the n-th in the n-th of N slices); `roughnet clean` after a SIGKILL; no namespace, process, mount, socket or ledger
left, the root namespace unchanged, the database holding the run at most once with its record, `--resume`
completing it), repeated ``--n`` times; prints each interrupt as it ends and then the table: interrupts per phase
and signal, leaks, records lost, and the time per interrupt.

    .venv/bin/python bench/self_chaos.py --n 200 --seed 7

Needs root and what `make test` installs (mosquitto, the agent with MQTT).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from chaos import SIGNALS, Chaos, summary  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="interrupts (default 200)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the instants (default 7)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rn-chaos-") as d:
        chaos = Chaos(Path(d), args.seed)
        ref = chaos.reference()
        print(f"reference run: {ref:.2f} s; interrupts fall uniformly in [0, {ref:.2f}] s")
        outcomes = []
        t0 = time.monotonic()
        for n in range(args.n):
            o = chaos.iteration(n, args.n)
            outcomes.append(o)
            flag = "ok" if not (o.leaks or o.lost) else f"LEAKS {o.leaks} LOST {o.lost}"
            print(f"{n:4d} {o.signal:7s} at {o.at_s:5.2f} s  {o.phase:28s} exit {o.exit_code!s:5s} {flag}", flush=True)
        took = time.monotonic() - t0
    s = summary(outcomes)
    print()
    print(f"{'phase':28s} " + " ".join(f"{sig:>8s}" for sig in SIGNALS) + "    total")
    for phase, per in s["per_phase"].items():
        print(f"{phase:28s} " + " ".join(f"{per.get(sig, 0):8d}" for sig in SIGNALS) + f" {sum(per.values()):8d}")
    print(f"interrupts {s['interrupts']}, leaks {s['leaks']}, records lost {s['records_lost']}, "
          f"{took / max(1, len(outcomes)):.1f} s per interrupt")
    return 0 if not s["leaks"] and not s["records_lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
