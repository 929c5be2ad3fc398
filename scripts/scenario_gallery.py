#!/usr/bin/env python3
"""Scenario gallery: run a reduced copy of every scenario in scenarios/ and keep its report's plots.

This script owns the reductions that make each committed scenario small enough to run in a
couple of minutes (REDUCTIONS below) and the choice of which report PNGs become
docs/img/<scenario>[-<what>].png for docs/scenarios.md. It only calls `roughnet run` on a
reduced copy written to a temporary folder; roughnet creates and removes its own namespaces.

A reduction replaces whole lines inside a TOML table, as tests/integration/test_seed_scenarios.py
does: {"sweep.loss": 'loss = ["0%", "25%"]'} replaces the line `loss = ...` of table [sweep].
The copy keeps the scenario's shape (same hosts, links, protocols, axes), only with fewer
messages, fewer values or shorter windows.

    .venv/bin/python scripts/scenario_gallery.py               # all seven
    .venv/bin/python scripts/scenario_gallery.py --only hf-sync
    .venv/bin/python scripts/scenario_gallery.py --keep /tmp/g  # keep the results folders
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"
IMG = REPO / "docs" / "img"
ROUGHNET = REPO / ".venv" / "bin" / "roughnet"


@dataclass(frozen=True)
class Reduction:
    """How one scenario is cut down, and which report PNGs are kept.

    replace: "table.key" -> the whole new line. pngs: report PNG name (without .png) -> the
    suffix of the docs/img file ("" gives <scenario>.png). full_runs: runs at full size.
    args: extra `roughnet run` arguments (e.g. schedule rows).
    """

    replace: dict[str, str]
    pngs: dict[str, str]
    full_runs: int
    args: list[str] = field(default_factory=list)


REDUCTIONS: dict[str, Reduction] = {
    # 16 runs at full size; 1500 -> 300 messages per run, every axis kept.
    "quickstart": Reduction(
        replace={"workload.messages": "messages = 300", "workload.warmup": "warmup = 20"},
        pngs={"loss_ratio": "", "lat_p99_us": "latency-p99"},
        full_runs=16,
    ),
    # 80 runs of 3 s at full size (48 TCP bulk, 32 UDP); every run kept, 1 s each. The sweep's
    # [[sweep.exclude]] tables name every value of mss, buffer, size and send, and roughnet refuses an
    # exclude naming a value the axis no longer has, so only the duration can shrink with whole-line
    # replacements. The efficiency tables are in the report's HTML, not in a PNG.
    # docs/img/tcp-udp-link.png is the full-size run's (docs/scenarios.md), so this one is -reduced.
    "tcp-udp-link": Reduction(
        replace={"workload.duration": 'duration = "1 s"'},
        pngs={"throughput_bps": "reduced"},
        full_runs=80,
    ),
    # 45 runs of 15000 messages at full size; 150 messages, three drop rates, two payloads: 18 runs.
    "v2v-loss": Reduction(
        replace={
            "workload.messages": "messages = 150",
            "workload.warmup": "warmup = 10",
            "sweep.loss": 'loss = ["0%", "10%", "25%"]',
            "sweep.payload": 'payload = ["10 KB", "100 KB"]',
            "scenario.timeout": 'timeout = "240 s"',
        },
        pngs={"lat_mean_us": "", "tcp_retrans_segs": "retransmits"},
        full_runs=45,
    ),
    # 27 runs of 1000 messages at full size; 60 messages, three payloads: 9 runs.
    "v2v-payload": Reduction(
        replace={
            "workload.messages": "messages = 60",
            "workload.warmup": "warmup = 5",
            "sweep.payload": 'payload = ["1 KB", "16 KB", "256 KB"]',
            "scenario.timeout": 'timeout = "240 s"',
        },
        pngs={"payload": ""},
        full_runs=27,
    ),
    # 36 runs of 10 s at full size; 1 s runs, rows 3 to 5 of the schedule: 12 runs.
    "dds-overlay": Reduction(
        replace={
            "workload.duration": 'duration = "1 s"',
            "workload.warmup": "warmup = 10",
            "sweep.schedule": f'schedule = {{ file = "{SCENARIOS / "dds-schedule.csv"}", ignore = ["batch_size"] }}',
        },
        pngs={"throughput_bps": "", "lat_p50_us": "latency"},
        full_runs=36,
        args=["--from", "3", "--to", "5"],
    ),
    # 6 runs of up to 1000 s at full size; same modem, same stores, a 40 s window (too short to deliver a
    # bundle: it shows the report's layout). docs/img/hf-sync*.png are the full-size run's.
    "hf-sync": Reduction(
        replace={"workload.duration": 'duration = "40 s"', "scenario.timeout": 'timeout = "200 s"'},
        pngs={"sync_bundles": "reduced", "sync_goodput": "reduced-goodput"},
        full_runs=6,
    ),
    # 6 runs of 1500 iterations at full size; 200 iterations of 8 KB steps (still 1 KB to 1.6 MB).
    "zmq-dds-rtt": Reduction(
        replace={"workload.messages": "messages = 200", "workload.step": 'step = "8 KB"'},
        pngs={"ramp": ""},
        full_runs=6,
    ),
}


def reduce_scenario(name: str, replace: dict[str, str], out_dir: Path) -> Path:
    """Write scenarios/<name>.toml to out_dir with the given whole lines replaced (see module doc)."""
    lines = (SCENARIOS / f"{name}.toml").read_text().splitlines()
    for dotted, new_line in replace.items():
        table, key = dotted.rsplit(".", 1)
        section, hit = None, False
        for i, line in enumerate(lines):
            header = re.match(r"^\[+([^\]]+)\]+\s*$", line)
            if header:
                section = header.group(1).strip()
                continue
            if section == table and re.match(rf"^{re.escape(key)}\s*=", line):
                lines[i] = new_line
                hit = True
                break
        if not hit:
            raise SystemExit(f"{name}.toml has no line '{key} = ...' in [{table}]; fix REDUCTIONS")
    path = out_dir / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def runs_table(results: Path) -> list[dict]:
    db = results / "results.duckdb"
    if not db.exists():
        return []
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("select run_index, params, status, failure_reason, duration_s from runs order by run_index")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        con.close()


def gallery(name: str, red: Reduction, work: Path) -> dict:
    """Run one reduced scenario, copy its PNGs, return a summary (printed by main)."""
    work.mkdir(parents=True, exist_ok=True)
    path = reduce_scenario(name, red.replace, work)
    results = work / "results"
    cmd = [str(ROUGHNET), "run", str(path), "--results", str(results), *red.args]
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (work / "stdout.txt").write_text(out.stdout)
    (work / "stderr.txt").write_text(out.stderr)
    runs = runs_table(results)
    failed = [r for r in runs if r["status"] != "ok"]
    summary = {"name": name, "rc": out.returncode, "wall_s": wall, "runs": len(runs), "failed": failed,
               "copied": [], "missing": []}
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:], sep="\n", file=sys.stderr)
    reports = sorted((results / "reports").glob("*/")) if (results / "reports").exists() else []
    if reports:
        report = max(reports, key=lambda p: p.stat().st_mtime)
        IMG.mkdir(parents=True, exist_ok=True)
        for png, suffix in red.pngs.items():
            src = report / f"{png}.png"
            dst = IMG / (f"{name}-{suffix}.png" if suffix else f"{name}.png")
            if src.exists():
                shutil.copyfile(src, dst)
                summary["copied"].append(str(dst.relative_to(REPO)))
            else:
                summary["missing"].append(png)
        summary["available"] = sorted(p.stem for p in report.glob("*.png"))
    per_run = [r["duration_s"] for r in runs if r["duration_s"] is not None]
    summary["per_run_s"] = sum(per_run) / len(per_run) if per_run else None
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(REDUCTIONS), action="append", help="run only this scenario (repeatable)")
    ap.add_argument("--keep", type=Path, help="keep reduced scenarios and results under this folder")
    a = ap.parse_args()
    names = a.only or list(REDUCTIONS)
    root = a.keep or Path(tempfile.mkdtemp(prefix="roughnet-gallery-"))
    rc = 0
    try:
        for name in names:
            s = gallery(name, REDUCTIONS[name], root / name)
            per = s["per_run_s"]
            est = f"{REDUCTIONS[name].full_runs} runs x {per:.1f} s = {REDUCTIONS[name].full_runs * per / 60:.1f} min" \
                if per else "n/a"
            print(f"{name}: wall {s['wall_s']:.0f} s, {s['runs']} runs, mean run {per or 0:.1f} s, "
                  f"rc {s['rc']}, full-size lower bound (full runs x reduced per-run time) {est}", flush=True)
            print(f"  copied: {', '.join(s['copied']) or '-'}; missing: {', '.join(s['missing']) or '-'}; "
                  f"report PNGs: {', '.join(s.get('available', [])) or '-'}", flush=True)
            for r in s["failed"]:
                print(f"  run {r['run_index']} {r['status']}: {json.loads(r['params'])}: {r['failure_reason']}",
                      flush=True)
            if s["rc"] != 0 or s["failed"] or s["missing"]:
                rc = 1
    finally:
        if a.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
