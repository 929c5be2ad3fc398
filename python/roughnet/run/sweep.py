"""The sweep loop: the runs to do, each run (``runner.execute_run``) or each group of runs that share their
services (``run.reuse``, ``run.group``), each record stored as it ends.

Above ``runner`` and ``group`` (it dispatches to both); neither imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..runspec import Run, Sweep
from .group import run_group
from .reuse import reuse_groups
from .runner import Preflight, execute_run, store_record


def run_sweep(
    sweep: Sweep,
    store,
    pf: Preflight,
    resume: bool = False,
    on_start: Callable[[Run], None] | None = None,
    on_done: Callable[[Run, dict[str, Any]], None] | None = None,
    retry_failed: bool = False,
    retry_invalid: bool = False,
    only: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """Run every run of ``sweep`` (only the missing ones with ``resume``; those and the runs stored as
    failed with ``retry_failed``, and also the ok runs judged invalid with ``retry_invalid``; of those,
    only the run ids in ``only`` when given), storing each record as it ends (a new record replaces
    the old).

    Consecutive runs whose services all ask ``reuse = true`` and whose environments are equal
    share one topology and one set of services (``run.reuse``, ``run.group``); every other run
    gets its own.
    """
    store.begin_sweep(sweep)
    todo = pending_runs(sweep, store, resume, retry_failed, retry_invalid, only)
    records = []
    for shared, group in reuse_groups(todo, pf.engines):
        if shared:
            records.extend(run_group(group, pf, store, on_start=on_start, on_done=on_done))
            continue
        run = group[0]
        if on_start:
            on_start(run)
        artifacts = store.run_dir(sweep.sweep_id, run.run_id)
        record = execute_run(run, pf, artifacts)
        store_record(store, record)
        records.append(record)
        if on_done:
            on_done(run, record)
    return records


def pending_runs(sweep: Sweep, store, resume: bool, retry_failed: bool = False,
                 retry_invalid: bool = False, only: frozenset[str] | None = None) -> list[Run]:
    """The runs to do: all; with ``resume`` those not stored yet; with ``retry_failed`` also those stored as
    failed; with ``retry_invalid`` also those stored as failed or judged invalid. With ``only`` (run ids,
    ``select.select_only``) just those of them."""
    if retry_invalid:
        done = store.completed_run_ids(sweep.sweep_id, include_failed=False, include_invalid=False)
    elif retry_failed:
        done = store.completed_run_ids(sweep.sweep_id, include_failed=False)
    elif resume:
        done = store.completed_run_ids(sweep.sweep_id)
    else:
        done = set()
    return [r for r in sweep.runs if r.run_id not in done and (only is None or r.run_id in only)]
