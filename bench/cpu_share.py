#!/usr/bin/env python3
"""Where the machine's CPU goes for a while: every process's utime + stime from /proc/PID/stat, read twice
SECONDS apart, summed by command name (python processes by their script), in cores.

    .venv/bin/python bench/cpu_share.py 8        # during a run, e.g. 22 s after bench/fleet_scale.py started it

Used for docs/PERFORMANCE.md ("MQTT: one client per host"): which of the agents, roughnet-wire, the broker and
roughnet's runner take the two cores in the middle of a fleet run.
"""

from __future__ import annotations

import os
import sys
import time


def snapshot() -> dict[int, tuple[str, int]]:
    """pid -> (command name, utime + stime in clock ticks)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            s = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        out[int(p)] = (comm, int(fields[11]) + int(fields[12]))
    return out


def name(pid: int, comm: str) -> str:
    if comm != "python":
        return comm
    try:
        argv = open(f"/proc/{pid}/cmdline").read().split("\0")
        return "python " + os.path.basename(argv[1]) if len(argv) > 1 else comm
    except OSError:
        return comm


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    a, t0 = snapshot(), time.monotonic()
    time.sleep(seconds)
    b, dt = snapshot(), time.monotonic() - t0
    hz = os.sysconf("SC_CLK_TCK")
    cores: dict[str, float] = {}
    for pid, (comm, ticks) in b.items():
        if pid in a and a[pid][0] == comm:
            key = name(pid, comm)
            cores[key] = cores.get(key, 0.0) + (ticks - a[pid][1]) / hz / dt
    for key, v in sorted(cores.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{v:6.3f} cores  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
