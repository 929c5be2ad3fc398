#!/usr/bin/env python3
"""How long a newcomer waits for `make demo` on this machine, nothing cached (issue 17).

Clones the committed HEAD into a fresh directory and runs `make demo` there with every
cache of its own empty: a new cargo target directory *and* a new CARGO_HOME (so the crates
are downloaded again), no pip cache, a new Maven repository and Kafka folder. Only the
Debian packages (`make system-deps`) and the Rust toolchain are the machine's own.

Prints the wall time of `make demo`, when the Rust build finished, the build's CPU time,
the binaries' sizes, and the ratio to the target (480 s). Each output line of make is kept
with its elapsed time in the log (``--log``).

    .venv/bin/python bench/first_run.py            # about 5-10 min on 2 cores
    .venv/bin/python bench/first_run.py --keep     # keep the clone to look at
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 480.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the clone and its caches")
    ap.add_argument("--log", type=Path, default=None, help="where to write make's timed output")
    ap.add_argument("--rev", default="HEAD", help="the commit to clone (default HEAD)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="roughnet-first-run-"))
    clone = work / "roughnet"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.rev], check=True)
    env = dict(os.environ)
    env.update(
        CARGO_TARGET_DIR=str(work / "target"),
        CARGO_HOME=str(work / "cargo-home"),
        RUSTUP_HOME=env.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
        PIP_NO_CACHE_DIR="1",
        ROUGHNET_KAFKA_HOME=str(work / "kafka"),
        MAVEN_OPTS=f"-Dmaven.repo.local={work / 'm2'}",
    )
    # The toolchain's cargo, not rustup's proxy in the old CARGO_HOME (which reads the new one anyway).
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo/bin/cargo")
    log_path = args.log or (work / "make-demo.log")
    print(f"first_run: make demo in {clone} (caches under {work})", flush=True)

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    build_done = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "demo", f"CARGO={cargo}"],
            cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            t = time.monotonic() - t0
            log.write(f"{t:8.1f} {line}")
            if build_done is None and "install -m 0755" in line:
                build_done = t
            if "Compiling roughnet-agent" in line or "Finished" in line or "roughnet run" in line:
                print(f"  {t:6.0f} s  {line.strip()[:100]}", flush=True)
        rc = proc.wait()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    sizes = {b: (clone / "bin" / b).stat().st_size for b in ("roughnet-agent", "roughnet-wire")
             if (clone / "bin" / b).exists()}
    load = os.getloadavg()
    print(f"first_run: make demo exit {rc}, wall {wall:.0f} s"
          + (f", build done at {build_done:.0f} s" if build_done else "")
          + f", CPU of everything {cpu:.0f} s, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for b, n in sizes.items():
        print(f"first_run: {b} {n / 2**20:.1f} MiB")
    print(f"first_run: ratio to the {TARGET_S:.0f} s target: {wall / TARGET_S:.2f}"
          f" ({'met' if wall <= TARGET_S else 'not met'})")
    print(f"first_run: log with elapsed seconds per line: {log_path}")
    if not args.keep:
        # The demo's namespaces are gone when roughnet run returns; only files are left here.
        shutil.rmtree(work / "target", ignore_errors=True)
        shutil.rmtree(work / "cargo-home", ignore_errors=True)
        if args.log is None:
            print(f"first_run: (clone kept for the log: {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
