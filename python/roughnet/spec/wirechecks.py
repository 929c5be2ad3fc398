"""Checks between the wire-only keys of a link (the model checks each value alone).

This module owns the rules of ``spec.wire`` and ``spec.timeline``'s keys: ``loss`` and
``loss_model`` not in one table; a key that needs another (``jitter_distribution``,
``jitter_correlation`` and ``reorder_by_jitter`` need ``jitter``, ``reorder`` a delay
above 0, ``reorder_gap`` needs ``reorder``, ``overhead`` a ``rate``: a key without effect
would measure another network than the one written); the 4-state model's sums; the
schedule's order and entries (each changes something, ``down`` and ``up`` not together,
every state it leads to obeys the same rules, jitter at most delay); a distance trace
needs an ``ieee80211p`` loss model and excludes its fixed ``distance``; and, on a link
with a ``profile``, no key may be set to its "off" value (the wire engine merges the
set values over the profile's, so "off" would silently keep the profile's value).
With a profile the "needs" rules are left out (the profile may supply the other key).
A value still holding a placeholder is skipped here; the checks run again on every
expanded run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .. import runspec, units
from .directions import DIRECTION_FIELDS, LOSS_KEYS
from .kinds import describe, has_placeholder
from .model import DIRECTION_KEYS, DirectionTable, LinkTable
from .problems import Problem
from .profiles import get as get_profile
from .timeline import SIDES, sets_direction_keys
from .tracefile import time_order_problems
from .wire import DISTANCE_MODELS, Markov4Table

_JITTER = "a jitter in this direction, like jitter = \"1 ms\""
#: key -> (key it needs, what is expected)
_NEEDS = {
    "jitter_distribution": ("jitter", _JITTER),
    "jitter_correlation": ("jitter", _JITTER),
    "reorder_by_jitter": ("jitter", _JITTER),
    "reorder_gap": ("reorder", "reorder = \"<percent>\" in this direction (the gap applies to it)"),
    "overhead": ("rate", "a rate in this direction (the overhead counts in serialisation at the rate)"),
}
_IEEE = 'loss_model = { model = "ieee80211p" } (or "distance_table") on the link, a direction or a schedule ' \
        'entry (or profile = "v2v-80211p")'

State = dict[str, tuple[Any, str]]  # key -> (value as written, key path where it was written)


def _concrete(*values: Any) -> bool:
    """No placeholder in ``values`` (a nested table such as a loss model: in none of its fields)."""
    for value in values:
        if isinstance(value, BaseModel):
            if not _concrete(*value.__dict__.values()):
                return False
        elif has_placeholder(value):
            return False
    return True


def _apply(state: State, table: DirectionTable, where: str) -> State:
    out = dict(state)
    given = [key for key in DIRECTION_KEYS if getattr(table, key) is not None]
    if any(key in LOSS_KEYS for key in given):
        for key in LOSS_KEYS:
            out[key] = (None, "")
    for key in given:
        out[key] = (getattr(table, key), f"{where}.{key}")
    return out


def _tables(link: LinkTable, path: str) -> list[tuple[str, DirectionTable]]:
    tables: list[tuple[str, DirectionTable]] = [(path, link)]
    tables += [(f"{path}.{side}", getattr(link, side)) for side in ("forward", "reverse") if getattr(link, side)]
    tables += [(f"{path}.schedule[{i}]", e) for i, e in enumerate(link.schedule or [])]
    return tables


def check_wire_link(link: LinkTable, path: str, problems: list[Problem]) -> None:
    for where, table in _tables(link, path):
        _check_table(table, where, problems)
        if link.profile is not None:
            _check_profile_override(table, where, link.profile, problems)
    base = {key: (getattr(link, key), f"{path}.{key}") for key in DIRECTION_KEYS}
    states = {side: _apply(base, getattr(link, side), f"{path}.{side}") if getattr(link, side) else base
              for side in ("forward", "reverse")}  # fmt: skip
    every = list(states.values())
    for state in states.values():
        _check_state(state, link.profile is not None, False, problems)
    _check_schedule(link, path, states, every, problems)
    _check_distance(link, path, every, problems)
    _check_capacity(link, path, states, problems)
    if link.wire_threads == 2:
        coupled = ("a shared segment" if len(link.between) > 2 else "half_duplex" if link.half_duplex is not None
                   else "the hf-modem profile (half duplex)" if link.profile == "hf-modem"
                   else 'medium = "csma"' if link.medium == "csma" else None)  # fmt: skip
        if coupled:
            problems.append(Problem(f"{path}.wire_threads", f"2 threads on {coupled}",
                                    "1 (one loop): a shared segment, half duplex and CSMA couple the directions; "
                                    "2 is for a pair with a plain medium", 2))  # fmt: skip
    if link.medium == "csma" and (link.half_duplex is not None or link.profile == "hf-modem"):
        problems.append(Problem(f"{path}.medium", "csma on a half-duplex link",
                                "one shared medium: medium = \"csma\" or half_duplex (or the hf-modem profile)",
                                "csma"))  # fmt: skip


def _check_capacity(link: LinkTable, path: str, states: dict[str, State], problems: list[Problem]) -> None:
    """A capacity trace replaces the rate of a plain two-host direction, for the whole run."""
    for i, entry in enumerate(link.schedule or []):
        if entry.capacity_trace is not None:
            problems.append(Problem(f"{path}.schedule[{i}].capacity_trace", "a capacity trace in a schedule entry",
                                    "capacity_trace on the link or its [link.forward] / [link.reverse] (a trace "
                                    "is already capacity over time)", entry.capacity_trace))  # fmt: skip
    traced = {state["capacity_trace"] for state in states.values() if state["capacity_trace"][0] is not None}
    for value, where in sorted(traced, key=lambda t: t[1]):
        side = next(s for s in states.values() if s["capacity_trace"] == (value, where))
        if side["rate"][0] is not None:
            problems.append(Problem(where, "capacity_trace together with rate",
                                    "one of them: the trace is the direction's capacity", value))
    if not traced:
        return
    value, where = min(traced, key=lambda t: t[1])
    half = link.half_duplex is not None or bool(
        link.profile and isinstance(link.profile, str) and (p := get_profile(link.profile)) is not None
        and p.link.get("half_duplex") is not None)
    other = ("a shared segment" if len(link.between) > 2 else "half duplex" if half
             else 'medium = "csma"' if link.medium == "csma" else "[[link.schedule]]" if link.schedule else None)
    if other:
        problems.append(Problem(where, f"a capacity trace on a link with {other}",
                                "a capacity trace on a two-host link with a plain medium and no schedule", value))


def _check_table(table: DirectionTable, where: str, problems: list[Problem]) -> None:
    if table.loss is not None and table.loss_model is not None:
        problems.append(Problem(f"{where}.loss_model", "both loss and loss_model in one table",
                                "either loss (random loss) or loss_model (another model)",
                                table.loss_model.model_dump(exclude_none=True)))  # fmt: skip
    m = table.loss_model
    if isinstance(m, Markov4Table) and _concrete(m):
        p13, p14 = units.parse_fraction(m.p13), units.parse_fraction(m.p14)
        p31 = units.parse_fraction(m.p31) if m.p31 is not None else 1.0 - p13
        p32 = units.parse_fraction(m.p32)
        if p13 + p14 > 1.0:  # the same float test as wire-core (config.rs)
            problems.append(Problem(f"{where}.loss_model.p14", "p13 + p14 above 100%",
                                    "p13 + p14 at most 100% (both leave state 1)", m.p14))  # fmt: skip
        if p31 + p32 > 1.0:  # the same float test as wire-core (config.rs)
            problems.append(Problem(f"{where}.loss_model.p32", "p31 + p32 above 100%" +
                                    (" (p31 unset: 100% - p13)" if m.p31 is None else ""),
                                    "p31 + p32 at most 100% (both leave state 3)", m.p32))  # fmt: skip


def _check_state(state: State, profile: bool, scheduled: bool, problems: list[Problem]) -> None:
    """The rules of one direction's keys (``state``: merged, with where each was written)."""
    if not profile:
        for key, (needed, expected) in _NEEDS.items():
            value, where = state[key]
            if value is not None and state[needed][0] is None:
                problems.append(Problem(where, f"{key} without {needed}", expected, value))
        reorder, where = state["reorder"]
        delay = state["delay"][0]
        if reorder is not None and _concrete(reorder) and _concrete(delay) and units.parse_fraction(reorder) > 0 \
                and (delay is None or units.parse_duration_ns(delay) == 0):
            problems.append(Problem(where, "reorder without a delay (reordered frames are those sent without it)",
                                    "a delay above 0 in this direction (as netem)", reorder))  # fmt: skip
    if scheduled:  # the link's own directions get this rule from spec.checks
        (jitter, jwhere), (delay, dwhere) = state["jitter"], state["delay"]
        if jitter is not None and _concrete(jitter, delay):
            d = units.parse_duration_ns(delay) if delay is not None else 0
            if units.parse_duration_ns(jitter) > d:
                where, got = (dwhere, delay) if delay is not None and ".schedule[" in dwhere else (jwhere, jitter)
                problems.append(Problem(where, "jitter larger than delay after this schedule entry",
                                        f"a delay at least as large as the jitter ({jitter})", got))  # fmt: skip


def _check_schedule(link: LinkTable, path: str, states: dict[str, State], every: list[State],
                    problems: list[Problem]) -> None:  # fmt: skip
    last_at: tuple[int, int] | None = None
    for i, entry in enumerate(link.schedule or []):
        epath = f"{path}.schedule[{i}]"
        if _concrete(entry.at):
            at = units.parse_duration_ns(entry.at)
            if last_at is not None and at < last_at[0]:
                problems.append(Problem(f"{epath}.at", f"earlier than schedule[{last_at[1]}]",
                                        "entries in time order (`at` never decreasing)", entry.at))  # fmt: skip
            last_at = (at, i)
        changes = sets_direction_keys(entry)
        if not changes and not entry.down and not entry.up:
            problems.append(Problem(epath, "the entry changes nothing",
                                    "impairment keys (rate, delay, loss, ...), down = true or up = true besides at"))
        elif "direction" in entry.model_fields_set and not changes:
            problems.append(Problem(f"{epath}.direction", "direction without impairment keys to change",
                                    "impairment keys (rate, delay, loss, ...) in the entry, or no direction",
                                    entry.direction))  # fmt: skip
        if entry.down and entry.up:
            problems.append(Problem(f"{epath}.up", "down and up in one entry",
                                    "either down = true or up = true (two entries for a short outage)", True))
        if not _concrete(entry.direction):
            continue
        for side in SIDES[entry.direction]:
            states[side] = _apply(states[side], entry, epath)
            _check_state(states[side], link.profile is not None, True, problems)
            every.append(states[side])


def _check_distance(link: LinkTable, path: str, every: list[State], problems: list[Problem]) -> None:
    trace = link.distance_trace is not None or link.distance is not None
    if link.distance_trace is not None and link.distance is not None:
        problems.append(Problem(f"{path}.distance", "both distance_trace and [[link.distance]]",
                                "one of them: a trace file or inline points"))  # fmt: skip
    problems.extend(time_order_problems(link.distance or [], f"{path}.distance"))
    if not trace:
        return
    models = {where: value for state in every for value, where in [state["loss_model"]]
              if isinstance(value, DISTANCE_MODELS)}  # fmt: skip
    key = "distance_trace" if link.distance_trace is not None else "distance"
    if not models and link.profile is None:
        problems.append(Problem(f"{path}.{key}", "a distance over time without the loss model that uses it",
                                _IEEE))  # fmt: skip
    for where, model in models.items():
        if model.distance is not None:
            problems.append(Problem(f"{where}.distance", f"a fixed distance and the link's {key}",
                                    f"one of them (the link's {key} sets the distance over time)",
                                    model.distance))  # fmt: skip


def _check_profile_override(table: DirectionTable, where: str, profile: Any, problems: list[Problem]) -> None:
    """A key given on a profiled link must not resolve to the "off" default: the engine would keep the profile's."""
    defaults = runspec.Direction()
    for key in DIRECTION_KEYS:
        value = getattr(table, key)
        if value is None or not _concrete(value):
            continue
        fields = DIRECTION_FIELDS[key](value)
        if all(getattr(defaults, f) == v for f, v in fields.items()):
            problems.append(Problem(f"{where}.{key}", f"the \"off\" value cannot override profile "
                                    f"{describe(profile)} (the wire engine merges only the values that are set "
                                    "over the profile's)", "a value other than the default, or the link without "
                                    "profile", value))  # fmt: skip
