"""``${key}`` placeholders and the ``[sweep]`` table they refer to.

This module owns: where placeholders may appear ([[host]], [[link]],
[workload] and [[service]]; not [scenario], [sweep] or [report]), their syntax (``${key}``;
``${key.field}`` for a field of a table axis), the rule that every placeholder
names a sweep axis (and field) and every axis (every field but ``name``) is
used, and substitution of one parameter point into the raw file data.  The
shape of ``[sweep]`` itself is ``spec.sweep``'s.  It works on the plain data from TOML (dicts and lists), before and
independently of the pydantic models.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .kinds import PLACEHOLDER, PLACEHOLDER_FULL
from .model import SWEEP_KEY
from .problems import Problem
from .sweep import NAME_FIELD, axes_of, is_table_axis, table_fields

#: Top-level tables whose strings may hold placeholders.
SUBSTITUTED = ("host", "link", "workload", "workloads", "service", "event", "process")
_SYNTAX = ("${name} where name is a [sweep] key (lowercase letters, digits and '_'), or ${name.field} for a "
           "field of a table axis")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside ``value`` with its key path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield from _strings(sub, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _strings(sub, f"{path}[{i}]")


def _malformed(text: str) -> bool:
    """True when ``text`` has a "${" that is not a well-formed placeholder."""
    return PLACEHOLDER.sub("", text).find("${") >= 0


def check_placeholders(data: dict[str, Any]) -> list[Problem]:
    """Syntax and placement of placeholders; every placeholder names a sweep axis (a table axis: one
    of its fields) and every axis is used (a table axis: every field but ``name``)."""
    problems: list[Problem] = []
    axes = axes_of(data.get("sweep", {}))
    fields = {k: table_fields(v) for k, v in axes.items() if is_table_axis(v)}
    used: set[tuple[str, str | None]] = set()
    for table, value in data.items():
        if table == "sweep":
            continue  # spec.sweep.check_sweep
        for path, text in _strings(value, table):
            if "${" not in text:
                continue
            if table not in SUBSTITUTED:
                problems.append(Problem(path, f"placeholders are not allowed in [{table}]",
                                        "a literal value (placeholders go in [[host]], [[link]], [workload], "
                                        "[[service]] and [[process]])",
                                        text))  # fmt: skip
                continue
            if _malformed(text):
                problems.append(Problem(path, "malformed placeholder", _SYNTAX, text))
                continue
            for m in PLACEHOLDER.finditer(text):
                name, field = m.group(1), m.group(2)
                problem = _placeholder_problem(name, field, axes, fields)
                if problem is None:
                    used.add((name, field))
                else:
                    problems.append(Problem(path, problem[0], problem[1], text))
    for key, values in axes.items():
        if not re.fullmatch(SWEEP_KEY, key):
            continue
        if not any(k == key for k, _ in used):
            problems.append(Problem(f"sweep.{key}", "sweep key is never used",
                                    f"a ${{{key}}} placeholder in [[host]], [[link]], [workload] or [[service]]"
                                    if key not in fields else
                                    f"${{{key}.<field>}} placeholders in [[host]], [[link]], [workload] or [[service]]",
                                    values))  # fmt: skip
            continue
        for field in fields.get(key, []):
            if field != NAME_FIELD and (key, field) not in used:
                first = next(i for i, v in enumerate(values) if isinstance(v, dict) and field in v)
                problems.append(Problem(f"sweep.{key}[{first}].{field}", "field of a table axis is never used",
                                        f"a ${{{key}.{field}}} placeholder in [[host]], [[link]], [workload] or "
                                        "[[service]] (every field but `name` is used)", values[first][field]))  # fmt: skip
    return problems


def _placeholder_problem(name: str, field: str | None, axes: dict[str, Any],
                         fields: dict[str, list[str]]) -> tuple[str, str] | None:  # fmt: skip
    """(problem, expected) of one placeholder, None when it names an axis (and field) that exists."""
    text = f"${{{name}.{field}}}" if field is not None else f"${{{name}}}"
    if name not in axes:
        known = ", ".join(axes) if axes else "none: there is no [sweep] table"
        return f"placeholder {text} names no [sweep] key", f"one of the [sweep] keys ({known})"
    if name in fields:
        listed = ", ".join(fields[name])
        if field is None:
            return (f"sweep.{name} is a table axis: use ${{{name}.<field>}}",
                    f"a placeholder naming one of its fields ({listed}), like ${{{name}.{fields[name][0]}}}")
        if field not in fields[name]:
            return f"placeholder {text} names no field of sweep.{name}", f"one of its fields ({listed})"
        return None
    if field is not None:
        return (f"sweep.{name} is not a table axis, it has no field {field!r}",
                f"${{{name}}} (fields are for axes of inline tables)")
    return None


def substitute(data: dict[str, Any], point: dict[str, tuple[Any, int]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Fill one parameter point into the raw file data.

    ``point`` maps each sweep key to (value, index in its list).  A string that is
    exactly ``${key}`` becomes the value itself (any type); other strings get the
    value's text.  Returns the new data and, for every substituted key path, the
    sweep entries it came from (``"sweep.loss[2]"``).
    """
    origins: dict[str, str] = {}

    def fill(value: Any, path: str) -> Any:
        if isinstance(value, str):
            if "${" not in value:
                return value
            origins[path] = ", ".join(_origin(m, point) for m in PLACEHOLDER.finditer(value))
            full = PLACEHOLDER_FULL.match(value)
            if full is not None:
                return _value(full, point)
            return PLACEHOLDER.sub(lambda m: str(_value(m, point)), value)
        if isinstance(value, dict):
            return {k: fill(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    out = {table: (fill(value, table) if table in SUBSTITUTED else value) for table, value in data.items()}
    return out, origins



def _value(m: re.Match[str], point: dict[str, tuple[Any, int]]) -> Any:
    value = point[m.group(1)][0]
    return value[m.group(2)] if m.group(2) is not None else value


def _origin(m: re.Match[str], point: dict[str, tuple[Any, int]]) -> str:
    """``sweep.loss[2]``, or ``sweep.link[1].rate`` for a field of a table axis."""
    where = f"sweep.{m.group(1)}[{point[m.group(1)][1]}]"
    return where + (f".{m.group(2)}" if m.group(2) is not None else "")
