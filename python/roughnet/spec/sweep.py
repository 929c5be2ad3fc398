"""The ``[sweep]`` table: its axes, their labels, and ``[[sweep.exclude]]``.

This module owns the shape of ``[sweep]``: keys, non-empty lists, the two kinds
of axis (a *scalar axis* lists strings or numbers; a *table axis* lists inline
tables with the same keys, whose fields are filled in together, "zipped"), the
label of each value (what ``Run.params`` and ``Sweep.axes`` hold: the value
itself, or for a table the entry's ``name``, else ``"k=v, k=v"``), and the
exclude list (``[[sweep.exclude]]``: combinations to skip) with its matching.
The key ``exclude`` is reserved for that list; every other key is an axis.
Placeholders (``${key}``, ``${key.field}``) are ``spec.placeholders``'.
Works on the plain data from TOML, before and independently of the models.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .kinds import describe
from .model import SWEEP_KEY
from .problems import Problem

#: The key of [sweep] that holds [[sweep.exclude]] instead of an axis.
EXCLUDE = "exclude"
#: The field of a table axis entry that names it (its label); it need not be used as a placeholder.
NAME_FIELD = "name"

_SWEEP_VALUE = "a non-empty list of distinct strings or numbers, like [\"0%\", \"5%\"], or of inline tables"
_FIELD_VALUE = "a string, a number or a boolean"
_EXCLUDE = ("[[sweep.exclude]] tables mapping axis names to values, like { protocol = \"udp\", payload = "
            "\"100 KiB\" } (the key `exclude` is reserved: it cannot name an axis)")  # fmt: skip


def axes_of(sweep: Any) -> dict[str, Any]:
    """The axes of a [sweep] table (every key but ``exclude``), values as written."""
    if not isinstance(sweep, Mapping):
        return {}
    return {k: v for k, v in sweep.items() if k != EXCLUDE}


def excludes_of(sweep: Any) -> list[dict[str, Any]]:
    """The [[sweep.exclude]] entries (empty when there are none)."""
    if not isinstance(sweep, Mapping):
        return []
    entries = sweep.get(EXCLUDE, [])
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def is_table_axis(values: Any) -> bool:
    """True when an axis lists inline tables (a malformed axis counts when any entry is one)."""
    return isinstance(values, list) and any(isinstance(v, dict) for v in values)


def table_fields(values: list[Any]) -> list[str]:
    """The fields of a table axis, in the order of the first entry that has each."""
    fields: dict[str, None] = {}
    for v in values:
        if isinstance(v, dict):
            fields.update(dict.fromkeys(v))
    return list(fields)


def label(value: Any) -> Any:
    """What ``Run.params`` holds for one axis value: scalars as they are; a table's
    ``name``, else ``"k=v, k=v"`` of its fields in file order."""
    if not isinstance(value, dict):
        return value
    if NAME_FIELD in value:
        return str(value[NAME_FIELD])
    return ", ".join(f"{k}={describe(v) if isinstance(v, bool) else v}" for k, v in value.items())


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type (100 and 100.0 are different sweep values)."""
    return type(a) is type(b) and a == b


def excluded(params: Mapping[str, Any], excludes: list[dict[str, Any]]) -> bool:
    """True when ``params`` (axis -> label) matches every key of some exclude entry."""
    return any(entry and all(k in params and _same(params[k], v) for k, v in entry.items()) for entry in excludes)


# ----------------------------------------------------------------------------- checks


def check_sweep(data: dict[str, Any]) -> list[Problem]:
    """The shape of ``[sweep]``: keys, non-empty lists, value types, no duplicates, exclude entries."""
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        return []  # the model reports "wrong type"
    problems: list[Problem] = []
    good: dict[str, list[Any]] = {}  # well-formed axes, for checking exclude values
    for key, values in axes_of(sweep).items():
        path = f"sweep.{key}"
        if not re.fullmatch(SWEEP_KEY, key):
            problems.append(Problem(path, "not a valid sweep key",
                                    "a key of lowercase letters, digits and '_', not starting with a digit", key))
            continue  # fmt: skip
        if not isinstance(values, list) or not values:
            problems.append(Problem(path, "not a non-empty list", _SWEEP_VALUE, values))
            continue
        before = len(problems)
        table = isinstance(values[0], dict)
        mixed = [i for i, v in enumerate(values) if isinstance(v, dict) != table]
        for i in mixed:
            problems.append(Problem(f"{path}[{i}]", "scalars and tables mixed in one axis",
                                    f"every entry {'an inline table' if table else 'a string or a number'}, like "
                                    f"{path}[0] (tables and scalars are separate axes)", values[i]))  # fmt: skip
        if mixed:
            continue
        if table:
            _check_table_axis(path, values, problems)
        else:
            _check_scalar_axis(path, values, problems)
        if len(problems) == before:
            good[key] = values
    if EXCLUDE in sweep:
        problems += _check_excludes(sweep[EXCLUDE], good, list(axes_of(sweep)))
    return problems


def _check_scalar_axis(path: str, values: list[Any], problems: list[Problem]) -> None:
    seen: dict[Any, int] = {}
    for i, value in enumerate(values):
        vpath = f"{path}[{i}]"
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            problems.append(Problem(vpath, "not a string or a number", _SWEEP_VALUE, value))
        elif isinstance(value, str) and "${" in value:
            problems.append(Problem(vpath, "placeholders are not allowed in [sweep]", _SWEEP_VALUE, value))
        elif (type(value), value) in seen:
            problems.append(Problem(vpath, f"same value as {path}[{seen[(type(value), value)]}]",
                                    _SWEEP_VALUE, value))  # fmt: skip
        else:
            seen[(type(value), value)] = i


def _check_table_axis(path: str, values: list[Any], problems: list[Problem]) -> None:
    """Every entry a table with the keys of the first; fields strings or numbers; distinct labels."""
    keys = list(values[0])
    labels: dict[Any, int] = {}
    for i, entry in enumerate(values):
        epath = f"{path}[{i}]"
        if not entry:
            problems.append(Problem(epath, "empty table",
                                    "an inline table of fields, like { name = \"fast\", rate = \"10 Mbit/s\" }", entry))
            continue  # fmt: skip
        if set(entry) != set(keys):
            missing = [k for k in keys if k not in entry]
            extra = [k for k in entry if k not in keys]
            what = "; ".join(([f"missing {', '.join(missing)}"] if missing else [])
                             + ([f"extra {', '.join(extra)}"] if extra else []))  # fmt: skip
            problems.append(Problem(epath, f"not the same keys as {path}[0] ({what})",
                                    f"every entry with the keys {', '.join(keys)}", entry))  # fmt: skip
            continue
        bad = False
        for field, value in entry.items():
            fpath = f"{epath}.{field}"
            if not re.fullmatch(SWEEP_KEY, field):
                problems.append(Problem(fpath, "not a valid field name",
                                        "a name of lowercase letters, digits and '_', not starting with a digit",
                                        field))  # fmt: skip
            elif field == NAME_FIELD and (not isinstance(value, str) or not value):
                problems.append(Problem(fpath, "not a non-empty string",
                                        "a string naming the entry (its label in reports)", value))  # fmt: skip
            elif not isinstance(value, (str, int, float)):  # bool is an int: allowed in tables
                problems.append(Problem(fpath, "not a string, a number or a boolean", _FIELD_VALUE, value))
            elif isinstance(value, str) and "${" in value:
                problems.append(Problem(fpath, "placeholders are not allowed in [sweep]", _FIELD_VALUE, value))
            else:
                continue
            bad = True
        if bad:
            continue
        lab = label(entry)
        if lab in labels:
            what = "name" if NAME_FIELD in entry else "fields"
            problems.append(Problem(f"{epath}.{NAME_FIELD}" if NAME_FIELD in entry else epath,
                                    f"same {what} as {path}[{labels[lab]}]",
                                    "entries with distinct names" if what == "name" else "distinct entries",
                                    entry.get(NAME_FIELD, entry)))  # fmt: skip
        else:
            labels[lab] = i


def _check_excludes(entries: Any, axes: dict[str, list[Any]], all_axes: list[str]) -> list[Problem]:
    """[[sweep.exclude]]: tables naming known axes and, for each, one of its values (a table axis: a label)."""
    if not isinstance(entries, list) or not entries:
        return [Problem(f"sweep.{EXCLUDE}", "not a non-empty array of tables", _EXCLUDE, entries)]
    problems: list[Problem] = []
    known = ", ".join(all_axes) if all_axes else "none: [sweep] has no axes"
    for i, entry in enumerate(entries):
        epath = f"sweep.{EXCLUDE}[{i}]"
        if not isinstance(entry, dict):
            problems.append(Problem(epath, "not a table", _EXCLUDE, entry))
            continue
        if not entry:
            problems.append(Problem(epath, "empty exclude entry (it would skip every run)",
                                    "at least one axis = value, like { protocol = \"udp\" }", entry))  # fmt: skip
            continue
        for key, value in entry.items():
            kpath = f"{epath}.{key}"
            if key not in all_axes:
                problems.append(Problem(kpath, "not a sweep axis", f"one of the [sweep] axes ({known})", value))
                continue
            if key not in axes:
                continue  # the axis itself is malformed (reported)
            labels = [label(v) for v in axes[key]]
            if not any(_same(value, lab) for lab in labels):
                table = is_table_axis(axes[key])
                what = (f"the name of an entry of sweep.{key}" if table and NAME_FIELD in axes[key][0]
                        else f"the label of an entry of sweep.{key}" if table else f"a value of sweep.{key}")
                problems.append(Problem(kpath, f"not a value of sweep.{key}",
                                        f"{what} (" + ", ".join(describe(lab) for lab in labels) + ")", value))
    return problems  # fmt: skip
