#!/usr/bin/env python3
"""How long a newcomer waits for `make demo` on this machine, nothing cached (issues 17 and 31).

Clones the committed HEAD into a fresh directory and runs `make demo`'s steps there with every
cache of its own empty: a new cargo target directory *and* a new CARGO_HOME (so the crates are
downloaded again), no pip cache, a new Maven repository and Kafka folder. Only the Debian packages
and the Rust toolchain are the machine's own (the apt step says whether it installed anything).

By default (``--mode steps``) the steps run one after the other, each timed with its CPU time:

    apt       make system-deps-demo  the Debian packages the quick start needs (a no-op where they are installed)
    pip       make python-deps     the virtualenv and roughnet's Python dependencies
    cargo     make demo-agent      the Rust build `make demo` does: the agent with tcp and udp only,
                                   and roughnet-wire (the full agent if one were installed)
    demo      make demo            the quick start itself (everything before it is done by then)

`make demo` itself runs pip and cargo side by side, so its wall time is about
apt + max(pip, cargo) + demo; the breakdown prints that estimate beside the plain sum.
``--full-build`` then times `make build` in the same clone: what `make setup` / `make test` add
(the agent with every driver, from a target directory of its own, cold). ``--mode together``
runs plain `make demo` once and reports its wall time and when the build finished.

    .venv/bin/python bench/first_run.py                  # about 3-5 min on 2 cores
    .venv/bin/python bench/first_run.py --full-build     # and the full agent: about 6-10 min more
    .venv/bin/python bench/first_run.py --mode together  # one plain `make demo`
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 480.0

#: (name, make target, what it is)
STEPS = (
    ("apt", "system-deps-demo", "Debian packages (make system-deps-demo)"),
    ("pip", "python-deps", "virtualenv and Python dependencies (make python-deps)"),
    ("cargo", "demo-agent", "Rust build of the demo's agent and wire (make demo-agent)"),
    ("demo", "demo", "the quick start itself (make demo, the rest done)"),
)


@dataclass
class Step:
    name: str
    what: str
    wall: float
    cpu: float
    rc: int
    note: str = ""


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def make(target: str, clone: Path, env: dict, cargo: str, log, t0: float, echo: tuple[str, ...]) -> tuple[int, list[str]]:
    """Run `make target` in the clone; each output line goes to the log with its elapsed time."""
    lines: list[str] = []
    proc = subprocess.Popen(["make", "--no-print-directory", target, f"CARGO={cargo}"], cwd=clone, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        t = time.monotonic() - t0
        log.write(f"{t:8.1f} [{target}] {line}")
        lines.append(line)
        if any(e in line for e in echo):
            print(f"  {t:6.0f} s  {line.strip()[:110]}", flush=True)
    return proc.wait(), lines


def timed(name: str, target: str, what: str, clone: Path, env: dict, cargo: str, log, t0: float) -> Step:
    cpu0, w0 = children_cpu(), time.monotonic()
    rc, lines = make(target, clone, env, cargo, log, t0,
                     ("Finished", "build-min:", "roughnet run", "install-system-deps:", "report:"))
    step = Step(name, what, time.monotonic() - w0, children_cpu() - cpu0, rc)
    text = "".join(lines)
    if name == "apt":
        step.note = ("installed " + text.split("installing", 1)[1].split("\n", 1)[0].strip()
                     if "install-system-deps: installing" in text else "nothing to install: every package was here")
    fin = [ln.strip() for ln in lines if "Finished" in ln]
    if fin:
        step.note = fin[-1].split("] ", 1)[-1] if "] " in fin[-1] else fin[-1]
    if name == "demo":
        runs = [ln.strip() for ln in lines if "run(s) to do" in ln]
        step.note = runs[0][:80] if runs else ""
    print(f"first_run: {name:<6} {step.wall:6.1f} s wall, {step.cpu:6.1f} s CPU, exit {rc}"
          + (f"  ({step.note})" if step.note else ""), flush=True)
    return step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("steps", "together"), default="steps",
                    help="steps: each of make demo's steps timed alone (default); together: one plain make demo")
    ap.add_argument("--full-build", action="store_true",
                    help="then time `make build` (every driver, cold) in the same clone")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its caches")
    ap.add_argument("--log", type=Path, default=None, help="where to write make's timed output")
    ap.add_argument("--rev", default="HEAD", help="the commit to clone (default HEAD)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="roughnet-first-run-"))
    clone = work / "roughnet"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.rev], check=True)
    rev = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    env = dict(os.environ)
    for k in ("ROUGHNET_AGENT", "ROUGHNET_WIRE", "VIRTUAL_ENV"):
        env.pop(k, None)
    env.update(
        CARGO_TARGET_DIR=str(work / "target"),  # the Makefile's minimal build goes to <this>-min
        CARGO_HOME=str(work / "cargo-home"),
        RUSTUP_HOME=env.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
        PIP_NO_CACHE_DIR="1",
        ROUGHNET_KAFKA_HOME=str(work / "kafka"),
        MAVEN_OPTS=f"-Dmaven.repo.local={work / 'm2'}",
    )
    # The toolchain's cargo, not rustup's proxy in the old CARGO_HOME (which reads the new one anyway).
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo/bin/cargo")
    log_path = args.log or (work / "make-demo.log")
    load0 = os.getloadavg()
    print(f"first_run: {args.mode} of make demo at {rev} in {clone} (caches under {work}); "
          f"load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}", flush=True)

    t0 = time.monotonic()
    steps: list[Step] = []
    rc = 0
    with open(log_path, "w") as log:
        if args.mode == "steps":
            for name, target, what in STEPS:
                step = timed(name, target, what, clone, env, cargo, log, t0)
                steps.append(step)
                if step.rc != 0:
                    rc = step.rc
                    break
        else:
            cpu0 = children_cpu()
            code, lines = make("demo", clone, env, cargo, log, t0, ("Finished", "build-min:", "roughnet run"))
            wall = time.monotonic() - t0
            log.flush()
            built = next((ln for ln in open(log_path) if "install -m 0755" in ln), None)
            print(f"first_run: make demo exit {code}, wall {wall:.0f} s, CPU {children_cpu() - cpu0:.0f} s"
                  + (f", build installed at {float(built.split()[0]):.0f} s" if built else ""))
            steps.append(Step("make demo", "plain make demo", wall, children_cpu() - cpu0, code))
            rc = code
        if args.full_build and rc == 0:
            steps.append(timed("full", "build", "make build: every driver, cold (what make setup/test add)",
                               clone, env, cargo, log, t0))
            rc = steps[-1].rc

    bins = {}
    for b in ("roughnet-agent", "roughnet-wire"):
        for d, label in ((work / "target-min" / "release", "minimal"), (work / "target" / "release", "full")):
            if (d / b).exists():
                bins[f"{b} ({label})"] = (d / b).stat().st_size
    load = os.getloadavg()
    print()
    print(f"first_run: breakdown ({rev}, {os.cpu_count()} CPUs, load average at the end "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}):")
    print(f"  {'step':<10} {'wall s':>8} {'CPU s':>8}  what")
    for s in steps:
        print(f"  {s.name:<10} {s.wall:8.1f} {s.cpu:8.1f}  {s.what}" + (f"; {s.note}" if s.note else ""))
    by = {s.name: s for s in steps}
    if all(n in by for n, _, _ in STEPS):
        total = sum(by[n].wall for n, _, _ in STEPS)
        overlap = by["apt"].wall + max(by["pip"].wall, by["cargo"].wall) + by["demo"].wall
        print(f"  {'sum':<10} {total:8.1f}           the steps one after the other")
        print(f"  {'make demo':<10} {overlap:8.1f}           estimated: apt + max(pip, cargo) + demo "
              f"(make demo runs pip and cargo side by side); ratio to the {TARGET_S:.0f} s target "
              f"{overlap / TARGET_S:.2f}")
    for b, n in bins.items():
        print(f"first_run: {b} {n / 2**20:.1f} MiB")
    print(f"first_run: log with elapsed seconds per line: {log_path}")
    if not args.keep:
        # The demo's namespaces are gone when roughnet run returns; only files are left here.
        for d in ("target", "target-min", "cargo-home", "m2", "kafka"):
            shutil.rmtree(work / d, ignore_errors=True)
        if args.log is None:
            print(f"first_run: (clone kept for the log: {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
