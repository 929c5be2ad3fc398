"""Links that change over time: ``[[link.schedule]]``, distance traces, and their wire-core JSON.

This module owns what a schedule means (entries in time order; each entry's
impairment keys patch the direction(s) it names as the entries before it left
them, so ``loss = "5%"`` at 10 s keeps the delay of the link; ``down = true`` /
``up = true`` switch the whole link), its translation into wire-core's
``ScheduledChange`` JSON (``{at_ns, a_to_b?, b_to_a?, up?}``: the core replaces a
direction's whole configuration, so every change carries the complete patched
direction, sparse: only what differs from the defaults), reading a distance trace
file (``time_s,metres`` lines, relative to the scenario file) or inline
``[[link.distance]]`` points into wire-core's ``DistancePoint`` JSON, and the
``half_duplex`` table's JSON.  The checks of these keys are ``spec.wirechecks``'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import runspec, units
from .tracefile import read_trace_text, timed_rows
from .directions import direction_config_json, fields_of, merged_direction, patch
from .model import DIRECTION_KEYS, LinkTable, Scenario, ScheduleTable
from .problems import Problem
from .wire import distance_point_json, half_duplex_json, parse_distance_m

#: Which runspec sides a schedule entry's ``direction`` names, and wire-core's name of each.
SIDES = {"forward": ("forward",), "reverse": ("reverse",), "both": ("forward", "reverse")}
WIRE_SIDE = {"forward": "a_to_b", "reverse": "b_to_a"}
TRACE_EXPECTED = ("a CSV file of 'time_s,metres' lines (seconds and metres as plain numbers, times "
                  "non-decreasing; '#' comments, blank lines and one header line allowed)")  # fmt: skip
#: Largest distance trace file read (a memory bound; 10 MB hold about a million points).
TRACE_MAX_BYTES = 10_000_000


def sets_direction_keys(entry: ScheduleTable) -> bool:
    return any(getattr(entry, key) is not None for key in DIRECTION_KEYS)


def schedule_states(table: LinkTable) -> list[dict[str, dict[str, Any]]]:
    """The impairment keys of each direction after each schedule entry (as written, merged)."""
    state = {side: merged_direction(table, getattr(table, side)) for side in ("forward", "reverse")}
    out = []
    for entry in table.schedule or []:
        for side in SIDES[entry.direction]:
            state[side] = patch(state[side], entry)
        out.append(dict(state))
    return out


def schedule(table: LinkTable) -> tuple[dict[str, Any], ...]:
    """wire-core ``ScheduledChange`` JSON objects of a checked link (no placeholders left)."""
    changes = []
    for entry, state in zip(table.schedule or [], schedule_states(table)):
        change: dict[str, Any] = {"at_ns": units.parse_duration_ns(entry.at)}
        if sets_direction_keys(entry):
            for side in SIDES[entry.direction]:
                d = runspec.Direction(**fields_of(state[side]))
                change[WIRE_SIDE[side]] = direction_config_json(d, table.mtu)
        if entry.down:
            change["up"] = False
        if entry.up:
            change["up"] = True
        changes.append(change)
    return tuple(changes)


def half_duplex(table: LinkTable) -> dict[str, Any] | None:
    return half_duplex_json(table.half_duplex) if table.half_duplex is not None else None


def distance_trace(table: LinkTable, from_file: tuple[dict[str, Any], ...] | None) -> tuple[dict[str, Any], ...]:
    """The link's distance points: inline ``[[link.distance]]`` or those read from its trace file."""
    if table.distance is not None:
        return tuple(distance_point_json(units.parse_duration_ns(p.at), parse_distance_m(p.distance))
                     for p in table.distance)  # fmt: skip
    return from_file or ()


# ----------------------------------------------------------------------------- trace files


def parse_distance_csv(text: str, name: str) -> tuple[dict[str, Any], ...]:
    """``time_s,metres`` lines into ``DistancePoint`` JSON; ValueError naming the line otherwise."""
    points: list[dict[str, Any]] = []
    for where, at_ns, (_, d) in timed_rows(text, name, 2, TRACE_EXPECTED):
        if d < 0:
            raise ValueError(f"{where}: negative distance; expected {TRACE_EXPECTED}")
        points.append(distance_point_json(at_ns, float(d)))
    return tuple(points)


def read_distance_trace(path: Path) -> tuple[dict[str, Any], ...]:
    return parse_distance_csv(read_trace_text(path, TRACE_MAX_BYTES, TRACE_EXPECTED), str(path))


def read_trace_files(s: Scenario, base: Path) -> tuple[dict[int, tuple[dict[str, Any], ...]], list[Problem]]:
    """The distance trace files of a checked scenario (no placeholders left), by link index.

    Paths are relative to ``base`` (the scenario file's folder).  Problems name the key.
    """
    traces: dict[int, tuple[dict[str, Any], ...]] = {}
    problems: list[Problem] = []
    for i, table in enumerate(s.link):
        if table.distance_trace is None:
            continue
        path = Path(table.distance_trace)
        try:
            traces[i] = read_distance_trace(path if path.is_absolute() else base / path)
        except ValueError as e:
            problem, _, expected = str(e).partition("; expected ")
            problems.append(Problem(f"link[{i}].distance_trace", problem, expected, table.distance_trace))
    return traces, problems
