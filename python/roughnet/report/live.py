"""What a sweep is doing now, read without disturbing it: the data of `roughnet watch` (issue 29).

Public API:

- ``snapshot(root, sweep=None, lock_wait_s=10.0) -> Snapshot``: the sweep (its id, a unique prefix or its
  scenario's name; left out, the newest sweep of the folder), how many runs it plans, the runs stored so far
  (the rows of the summary ``roughnet run`` prints at its end), the run in progress with its flows' series,
  and whether a ``roughnet run`` still writes the folder.

How it reads, and why that cannot disturb the sweep: the store is opened read-only for each snapshot and
closed again (``roughnet run`` opens the database only while it writes a run and waits for a reader's short
hold, results/store.py); the run in progress is the run folder that has a ``run.json`` (written when the run
starts) and no ``record.json`` (written when it ends); its agents' JSON lines (``agent-<host>-<role>.jsonl``,
one ``interval`` line a second, docs/agent-protocol.md) are read as files, a line still being written left
for the next snapshot. The writer is the PID in ``writer.lock`` if /proc/locks shows that process holding the
file's flock; never found by taking the lock (which would refuse a ``roughnet run`` starting at that instant).
Nothing here writes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roughnet.errors import ResultsError
from roughnet.results.store import WRITER_LOCK, Store

__all__ = ["Flow", "Current", "Snapshot", "snapshot", "MAX_POINTS"]

#: Intervals kept per flow (the newest): what a terminal line of sparkline shows.
MAX_POINTS = 120


@dataclass
class Flow:
    """One agent of the run in progress: its series of one-second intervals so far."""

    name: str  # the file's stem without "agent-": "<host>-<role>" (a workload's name may follow the host)
    role: str
    #: (seconds since the agent's start, messages, bit/s) per interval, oldest first (at most MAX_POINTS).
    points: list[tuple[float, int, float]] = field(default_factory=list)
    intervals: int = 0  # every interval line read (points keeps the newest MAX_POINTS)
    messages: int = 0  # over every interval read
    finished: bool = False  # its result line is there


@dataclass
class Current:
    """The run in progress: the one run folder with a run.json and no record.json."""

    run_id: str
    index: int | None
    params: dict[str, Any]
    elapsed_s: float  # since its run.json was written
    flows: list[Flow]


@dataclass
class Snapshot:
    root: Path
    sweep_id: str
    scenario: str
    planned: int  # runs the sweep plans (repeats included)
    headers: list[str]
    rows: list[dict[str, str]]  # the stored runs, as `roughnet run`'s summary prints them
    statuses: dict[str, int]  # stored runs by status
    suspect: int  # stored runs judged suspect or invalid
    current: Current | None
    writer_pid: int | None  # the `roughnet run` that holds writer.lock, None when none runs
    taken_at: float = field(default_factory=time.time)

    @property
    def stored(self) -> int:
        return len(self.rows)

    @property
    def complete(self) -> bool:
        return self.planned > 0 and self.stored >= self.planned

    @property
    def over(self) -> bool:
        """Nothing more will come: every planned run stored, or no `roughnet run` writes the folder."""
        return self.complete or self.writer_pid is None


def snapshot(root: Path | str, sweep: str | None = None, lock_wait_s: float = 10.0) -> Snapshot:
    """The sweep ``sweep`` of the results folder ``root`` as it is now (see the module docstring).

    ResultsError: no results database there, no such sweep (naming the stored ones), none stored yet."""
    from roughnet.report import shaping  # the summary's table, as `roughnet run` prints it

    root = Path(root)
    with Store(root, create=False, read_only=True, lock_wait_s=lock_wait_s) as store:
        if sweep is None:
            sweeps = store.sweeps()
            if not sweeps:
                raise ResultsError(f"{store.path} holds no sweeps yet; expected a folder a `roughnet run` writes "
                                   "(start the run first, or name its --results folder)")
            sweep_id = max(sweeps, key=lambda s: (str(s.get("created_at") or ""), s["sweep_id"]))["sweep_id"]
        else:
            sweep_id = store.resolve_sweep(sweep)
        info = store.sweep(sweep_id)
        runs = store.runs(sweep_id)
        axes = shaping.axis_values(info.get("axes") or {}, runs)
        headers, rows = shaping.run_table(runs, list(axes))
    statuses: dict[str, int] = {}
    for r in runs:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    suspect = sum(1 for r in runs if r.get("validity") in ("suspect", "invalid"))
    writer = writer_pid(root)
    stored_ids = {str(r.get("run_id")) for r in runs}
    current = _current(root / "runs" / sweep_id, stored_ids) if writer is not None else None
    return Snapshot(root=root, sweep_id=sweep_id, scenario=str(info.get("scenario") or ""),
                    planned=int(info.get("run_count") or 0), headers=headers, rows=rows, statuses=statuses,
                    suspect=suspect, current=current, writer_pid=writer)


def writer_pid(root: Path) -> int | None:
    """The PID of the `roughnet run` writing ``root`` (writer.lock's, if that process lives), else None."""
    try:
        text = (root / WRITER_LOCK).read_text(errors="replace").strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    if not Path(f"/proc/{pid}").exists():
        return None  # gone: the lock file outlives its writer (the flock does not)
    if not _holds_flock(root / WRITER_LOCK, pid):
        return None  # the writer ended and its PID went to another process
    return pid


def _holds_flock(path: Path, pid: int) -> bool:
    """Whether ``pid`` holds a flock on ``path``, from /proc/locks (true when /proc/locks cannot be read)."""
    try:
        st = os.stat(path)
        locks = Path("/proc/locks").read_text()
    except OSError:
        return True
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 00:2d:1234 0 EOF" (a blocked waiter has "->" after the number)
        if "->" in parts:
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4] == str(pid) and parts[5] == dev:
            return True
    return False


def _current(sweep_dir: Path, stored: set[str]) -> Current | None:
    """The newest run folder of the sweep with a run.json and no record.json (and not stored)."""
    best: tuple[float, Path] | None = None
    try:
        folders = list(sweep_dir.iterdir())
    except OSError:
        return None
    for d in folders:
        spec = d / "run.json"
        if d.name in stored or (d / "record.json").exists():
            continue
        try:
            mtime = spec.stat().st_mtime
        except OSError:
            continue
        if best is None or mtime > best[0]:
            best = (mtime, d)
    if best is None:
        return None
    mtime, d = best
    try:
        run = json.loads((d / "run.json").read_text())
    except (OSError, ValueError):
        run = {}
    flows = [f for f in (_flow(p) for p in sorted(d.glob("agent-*.jsonl"))) if f is not None]
    return Current(run_id=d.name, index=run.get("index"), params=run.get("params") or {},
                   elapsed_s=max(0.0, time.time() - mtime), flows=flows)


def _flow(path: Path) -> Flow | None:
    stem = path.name[len("agent-"):-len(".jsonl")]
    role = stem.rsplit("-", 1)[-1]
    flow = Flow(name=stem, role=role)
    try:
        with path.open("rb") as f:
            data = f.read()
    except OSError:
        return None
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # the line the agent is writing now: the next snapshot has it whole
        kind = line.get("type")
        if kind == "interval":
            flow.intervals += 1
            flow.messages += int(line.get("messages") or 0)
            flow.points.append((float(line.get("t_ms") or 0) / 1000.0, int(line.get("messages") or 0),
                                float(line.get("rate_bps") or 0.0)))
        elif kind == "result":
            flow.finished = True
    del flow.points[:-MAX_POINTS]
    return flow
