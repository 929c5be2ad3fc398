#!/usr/bin/env python3
"""Where a `roughnet run`'s wall time goes, phase by phase, without a profiler's overhead (issue 27).

Runs `roughnet run ARGS...` in this process with timers around the steps of a run (each function's wall
time from its start to its end, summed over its calls), and prints them after the run, in the order they
began, with the time since this script started:

    PYTHONPATH=python .venv/bin/python bench/run_phases.py scenarios/v2v-fleet-100.toml --results /tmp/r

Needs root (namespaces), as `roughnet run`. The phases are functions of roughnet as it is now; a renamed one is
reported as missing, not fatal.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time

T0 = time.monotonic()
TIMES: dict[str, list[float]] = {}  # name -> [first start, total seconds, calls]

#: (module, attribute path, label): what is timed.
PHASES = (
    ("roughnet.plan", "plan_sweep", "plan the sweep"),
    ("roughnet.run", "preflight", "preflight"),
    ("roughnet.run.sweep", "execute_run", "execute_run (all of the run)"),
    ("roughnet.topo.build", "Topology.build", "  build namespaces and links"),
    ("roughnet.run.runner", "apply_links", "  links' engines (the wire)"),
    ("roughnet.run.hostagent", "start_host_agents", "  start host agents"),
    ("roughnet.run.hostagent", "_write_config", "    write their configurations"),
    ("roughnet.run.hostagent", "_start_one", "    start one (summed over threads)"),
    ("roughnet.run.agents", "AgentProcess.wait_ready", "  wait for receivers ready"),
    ("roughnet.run.hostagent", "send_t0", "  t0 (senders start)"),
    ("roughnet.run.timeline", "wait_watching", "  traffic: wait for the agents' ends"),
    ("roughnet.run.hostagent", "stop_all", "  stop host agents"),
    ("roughnet.run.timeline", "fill_record", "  fill the record"),
    ("roughnet.run.timeline", "analyse", "    series (analyse)"),
    ("roughnet.mobility.distance", "record_distances", "    distances"),
    ("roughnet.run.runner", "_teardown_run", "  teardown"),
    ("roughnet.run.sweep", "store_record", "store the record"),
    ("roughnet.results.store", "Store._write_record_file", "  write record.json"),
    ("roughnet.results.store", "Store._commit_run", "  DuckDB transaction"),
    ("roughnet.cli.results", "_print_summary", "summary"),
    ("roughnet.report", "build_report", "report"),
)


def _timed(label: str, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        start = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            end = time.monotonic()
            t = TIMES.setdefault(label, [start - T0, 0.0, 0])
            t[1] += end - start
            t[2] += 1
    return wrapper


def install() -> list[str]:
    missing = []
    for mod, path, label in PHASES:
        try:
            m = importlib.import_module(mod)
            owner = m
            *parents, name = path.split(".")
            for p in parents:
                owner = getattr(owner, p)
            setattr(owner, name, _timed(label, getattr(owner, name)))
        except (ImportError, AttributeError):
            missing.append(f"{mod}.{path}")
    return missing


def main() -> int:
    from roughnet.cli import main as cli_main

    imported = time.monotonic() - T0
    missing = install()
    sys.argv = ["roughnet", "run", *sys.argv[1:]]
    code = 0
    try:
        cli_main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    total = time.monotonic() - T0
    print(f"\nphases (s; 'at' = since this script started), exit {code}:", file=sys.stderr)
    print(f"  {'imports':44s} at {0:7.2f}  took {imported:7.2f}", file=sys.stderr)
    for label, (at, took, calls) in sorted(TIMES.items(), key=lambda kv: kv[1][0]):
        more = f"  ({calls} calls)" if calls > 1 else ""
        print(f"  {label:44s} at {at:7.2f}  took {took:7.2f}{more}", file=sys.stderr)
    print(f"  {'total':44s}            {total:7.2f}", file=sys.stderr)
    for m in missing:
        print(f"  (not timed: {m})", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
