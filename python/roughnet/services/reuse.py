"""A service that serves several runs (``reuse = true``): what each run gets of it.

Owns the per-run view of a long-lived service (docs/services.md, "reuse = true"):
``begin_run`` checks that every service still runs, probes it again for the
coming run (for Kafka that creates the run's topic with its partitions), and
marks where each service's log ends and where its CPU/RSS window starts;
``end_run`` copies the run's slice of each log into the run's artifacts and
returns each service's usage in the run's window with the reuse facts the
record keeps (pid, which run started it).  Starting, watching and stopping
services stay ``services.lifecycle``'s; which runs share a service is
``run.reuse``'s.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ServiceError
from ..runspec import Run
from . import probes
from .handle import ServiceHandle
from .lifecycle import LOG_LINES, PROBE_INTERVAL_S, READY_TIMEOUT_S, check_alive

log = logging.getLogger(__name__)

#: Bytes copied at a time when a log slice goes into a run's artifacts.
_COPY_CHUNK = 1 << 20


def service_key(h: ServiceHandle) -> str:
    """``<kind>@<host>``: how a service is named in usage dicts (as ``stop_services`` does)."""
    return f"{h.kind}@{h.host}"


@dataclass
class RunWindow:
    """Where one run's share of each service begins: log offsets (bytes) and the run."""

    run_id: str
    offsets: dict[str, int] = field(default_factory=dict)
    reprobes: dict[str, str] = field(default_factory=dict)  # service key -> what the probe saw for this run


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def reprobe(h: ServiceHandle, run: Run) -> str:
    """Probe a running service again for ``run`` until READY_TIMEOUT_S; ServiceError with its log otherwise."""
    attempt = h.reprobe
    if attempt is None:
        return "no probe"
    deadline = time.monotonic() + READY_TIMEOUT_S[h.kind]
    last = "no attempt finished"
    while True:
        if not h.alive():
            raise ServiceError(f"{h.kind} on host {h.host} (started for run {h.started_by}) exited with code "
                               f"{h.proc.returncode} before run {run.run_id} (last probe: {last}); last lines of "
                               f"{h.log_path.name}:\n{h.log_tail(LOG_LINES)}")
        try:
            return attempt(run, deadline)
        except probes.ProbeFatal as e:
            raise ServiceError(f"{h.kind} on host {h.host}, probed for run {run.run_id}: {e}") from e
        except (OSError, ServiceError) as e:
            last = f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e)
        if time.monotonic() > deadline:
            raise ServiceError(f"{h.kind} on host {h.host} (started for run {h.started_by}) did not answer its "
                               f"probe for run {run.run_id} within {READY_TIMEOUT_S[h.kind]:g} s (last probe: "
                               f"{last}); last lines of {h.log_path.name}:\n{h.log_tail(LOG_LINES)}")
        time.sleep(PROBE_INTERVAL_S)


def begin_run(handles: Sequence[ServiceHandle], run: Run, log_from: dict[str, int] | None = None) -> RunWindow:
    """Ready running services for ``run``; ServiceError when one died or no longer answers.

    For the run that started a service its window starts at the service's start (its log
    from the first byte, its CPU from zero, as a fresh service's run has); for a later
    run it starts now, after a successful probe for that run.  ``log_from`` (service key ->
    byte offset, the previous run's ``log_to``) makes the log slices contiguous: lines a
    service writes between two runs (the last run's clients disconnecting) go to the next.
    """
    window = RunWindow(run.run_id)
    died = check_alive(handles)
    if died:
        raise ServiceError(died)
    for h in handles:
        key = service_key(h)
        if h.started_by == run.run_id:
            window.offsets[key] = 0
            window.reprobes[key] = h.probe
            continue
        window.reprobes[key] = reprobe(h, run)
        window.offsets[key] = (log_from or {}).get(key, _log_size(h.log_path))
        if h.sampler is not None:
            h.sampler.begin_window()
        log.info("%s serves run %s too (started for run %s): %s", h.describe(), run.run_id, h.started_by,
                 window.reprobes[key])
    return window


def copy_slice(src: Path, dst: Path, start: int, end: int) -> int:
    """Copy bytes [start, end) of ``src`` into a new ``dst``; the number of bytes copied."""
    copied = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fin.seek(start)
        left = max(0, end - start)
        while left:
            chunk = fin.read(min(_COPY_CHUNK, left))
            if not chunk:
                break
            fout.write(chunk)
            copied += len(chunk)
            left -= len(chunk)
    return copied


def end_run(handles: Sequence[ServiceHandle], window: RunWindow, artifacts: Path) -> dict[str, dict[str, Any]]:
    """Each service's share of the run: its log slice copied to ``artifacts/<log name>``, usage, reuse facts.

    Returns ``{"<kind>@<host>": {"kind", "host", "pid", "started_by", "reused", "log", "log_from", "log_to",
    "cpu_s", "rss_max_bytes", "samples", "probe", "service_dir"}}``.  Never raises for an unreadable log
    (the record matters more): the entry then says ``"log": None``.
    """
    out: dict[str, dict[str, Any]] = {}
    for h in handles:
        key = service_key(h)
        start = window.offsets.get(key, 0)
        end = _log_size(h.log_path)
        dst = artifacts / h.log_path.name
        log_name: str | None = h.log_path.name
        try:
            if os.path.abspath(dst) != os.path.abspath(h.log_path):
                copy_slice(h.log_path, dst, start, end)
        except OSError as e:
            log.warning("copying %s [%d, %d) into %s failed: %s", h.log_path, start, end, dst, e)
            log_name = None
        usage = h.sampler.window() if h.sampler is not None else {"cpu_s": 0.0, "rss_max_bytes": 0, "samples": 0}
        out[key] = {
            "kind": h.kind,
            "host": h.host,
            "pid": h.pid,
            "started_by": h.started_by,
            "reused": h.started_by != window.run_id,
            "log": log_name,
            "log_from": start,
            "log_to": end,
            "probe": window.reprobes.get(key, h.probe),
            "service_dir": str(h.log_path.parent),
            **usage,
        }
    return out
