"""``${key}`` placeholders and the ``[sweep]`` table they refer to.

This module owns: where placeholders may appear ([[host]], [[link]] and
[workload]; not [scenario], [sweep] or [report]), their syntax, the rule that
every placeholder names a sweep key and every sweep key is used, the shape of
``[sweep]`` itself, and substitution of one parameter point into the raw file
data.  It works on the plain data from TOML (dicts and lists), before and
independently of the pydantic models.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .kinds import PLACEHOLDER, PLACEHOLDER_FULL
from .model import SWEEP_KEY
from .problems import Problem

#: Top-level tables whose strings may hold placeholders.
SUBSTITUTED = ("host", "link", "workload")
_SYNTAX = "${name} where name is a [sweep] key (lowercase letters, digits and '_')"
_SWEEP_VALUE = "a non-empty list of distinct strings or numbers, like [\"0%\", \"5%\"]"


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


def check_sweep(data: dict[str, Any]) -> list[Problem]:
    """The shape of ``[sweep]``: keys, non-empty lists, value types, no duplicates."""
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        return []  # the model reports "wrong type"
    problems: list[Problem] = []
    for key, values in sweep.items():
        path = f"sweep.{key}"
        if not re.fullmatch(SWEEP_KEY, key):
            problems.append(Problem(path, "not a valid sweep key",
                                    "a key of lowercase letters, digits and '_', not starting with a digit", key))
            continue  # fmt: skip
        if not isinstance(values, list) or not values:
            problems.append(Problem(path, "not a non-empty list", _SWEEP_VALUE, values))
            continue
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
    return problems


def check_placeholders(data: dict[str, Any]) -> list[Problem]:
    """Syntax and placement of placeholders; every placeholder names a sweep key and every key is used."""
    problems: list[Problem] = []
    sweep = data.get("sweep", {})
    keys = list(sweep) if isinstance(sweep, dict) else []
    used: set[str] = set()
    for table, value in data.items():
        if table == "sweep":
            continue  # check_sweep
        for path, text in _strings(value, table):
            if "${" not in text:
                continue
            if table not in SUBSTITUTED:
                problems.append(Problem(path, f"placeholders are not allowed in [{table}]",
                                        "a literal value (placeholders go in [[host]], [[link]] and [workload])",
                                        text))  # fmt: skip
                continue
            if _malformed(text):
                problems.append(Problem(path, "malformed placeholder", _SYNTAX, text))
                continue
            for name in PLACEHOLDER.findall(text):
                used.add(name)
                if name not in keys:
                    known = ", ".join(keys) if keys else "none: there is no [sweep] table"
                    problems.append(Problem(path, f"placeholder ${{{name}}} names no [sweep] key",
                                            f"one of the [sweep] keys ({known})", text))  # fmt: skip
    for key in keys:
        if key not in used and re.fullmatch(SWEEP_KEY, key):
            problems.append(Problem(f"sweep.{key}", "sweep key is never used",
                                    f"a ${{{key}}} placeholder in [[host]], [[link]] or [workload]",
                                    sweep[key]))  # fmt: skip
    return problems


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
            names = PLACEHOLDER.findall(value)
            origins[path] = ", ".join(f"sweep.{n}[{point[n][1]}]" for n in names)
            full = PLACEHOLDER_FULL.match(value)
            if full is not None:
                return point[full.group(1)][0]
            return PLACEHOLDER.sub(lambda m: str(point[m.group(1)][0]), value)
        if isinstance(value, dict):
            return {k: fill(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    out = {table: (fill(value, table) if table in SUBSTITUTED else value) for table, value in data.items()}
    return out, origins

