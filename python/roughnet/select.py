"""``roughnet run --only``: pick runs of a planned sweep to (re)do, by run id, index or parameter.

Owns the parsing and matching of ``--only`` expressions and their errors.  It does not
narrow the sweep itself (the stored sweep keeps every run and axis: ``--only`` redoes a
part of it) nor run anything: the runner takes the chosen run ids (``pending_runs``).
``--from``/``--to`` (rows of a schedule file) are ``spec.schedule.select_rows``.

An expression is one of:

- ``KEY=VALUE``: the runs whose ``params[KEY]`` is VALUE (as ``roughnet show`` prints it;
  spaces and case do not matter, so ``payload=10kb`` is ``10 KB``);
- a run id (12 hex digits, as in the results and the artifacts' directory names);
- a run index (a number, as ``roughnet show`` and the progress bar number the runs).

Several values of one key select any of them; different keys must all match; ids and
indexes select any of them, and further narrow the parameter choice when both are given.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from .errors import SpecError
from .runspec import Run, Sweep

_RUN_ID_RE = re.compile(r"^[0-9a-f]{12}$")


def _norm(value: Any) -> str:
    return re.sub(r"\s+", "", str(value)).lower()


def _matches(value: Any, text: str) -> bool:
    if _norm(value) == _norm(text):
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(text) == float(value)
        except ValueError:
            return False
    return False


def select_only(sweep: Sweep, exprs: list[str] | None) -> frozenset[str] | None:
    """The run ids ``exprs`` choose (None without expressions: every run).

    Raises SpecError naming the expression when a key is not an axis of the sweep, a value
    or id names no run, or the expressions together leave no run."""
    if not exprs:
        return None
    by_key: dict[str, list[str]] = defaultdict(list)
    picked: set[str] = set()
    ids = {r.run_id for r in sweep.runs}
    indexes = {r.index: r.run_id for r in sweep.runs}
    for raw in exprs:
        expr = raw.strip()
        if "=" in expr:
            key, _, value = (p.strip() for p in expr.partition("="))
            if key not in sweep.axes:
                axes = ", ".join(sweep.axes) or "none (the scenario has no [sweep])"
                raise SpecError(f"--only {raw}: {key!r} is not a swept key of {sweep.source} (swept: {axes})")
            if not value or not any(_matches(v, value) for v in _labels(sweep, key)):
                values = ", ".join(str(v) for v in _labels(sweep, key))
                raise SpecError(f"--only {raw}: no run has {key} = {value!r} (values: {values})")
            by_key[key].append(value)
        elif _RUN_ID_RE.match(expr.lower()):
            if expr.lower() not in ids:
                raise SpecError(f"--only {raw}: no run of {sweep.source} has this run id "
                                "(`roughnet show` lists them; a changed scenario has new ids)")
            picked.add(expr.lower())
        elif expr.isdigit():
            if int(expr) not in indexes:
                span = f"runs {min(indexes)} to {max(indexes)}" if indexes else "no runs"
                raise SpecError(f"--only {raw}: no run {expr} in {sweep.source} ({span})")
            picked.add(indexes[int(expr)])
        else:
            raise SpecError(f"--only {raw}: expected KEY=VALUE (a swept key), a run id (12 hex digits) "
                            "or a run index")
    chosen = {r.run_id for r in sweep.runs if _chosen(r, by_key)}
    if picked:
        chosen &= picked
    if not chosen:
        raise SpecError(f"--only {' '.join(exprs)}: no run of {sweep.source} matches all of them")
    return frozenset(chosen)


def _labels(sweep: Sweep, key: str) -> list[Any]:
    """The labels ``key`` takes in the runs (as ``Run.params`` holds them), in sweep order."""
    seen: list[Any] = []
    for r in sweep.runs:
        v = r.params.get(key)
        if v not in seen:
            seen.append(v)
    return seen


def _chosen(run: Run, by_key: dict[str, list[str]]) -> bool:
    return all(any(_matches(run.params.get(k), v) for v in values) for k, values in by_key.items())
