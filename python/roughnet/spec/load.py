"""Reading a scenario file: TOML, then every check, into a ``Scenario``.

This module owns the order of checking: TOML syntax (errors name line and
column), the [sweep] table (axes and excludes) and the placeholders, the pydantic model (single
values), then the checks between keys.  Every problem found is reported at
once, in one ``ScenarioError``.  Nothing here touches anything but the file.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .checks import check_scenario
from .model import Scenario
from .placeholders import check_placeholders
from . import groups
from .problems import Problem, ScenarioError, from_validation_error, without_file_values
from .schedule import expand_file_axes
from .sweep import check_sweep


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; placeholders stay unresolved.

    Raises ``ScenarioError`` (a ``SpecError``) naming the file, key path, problem,
    what was expected and the bad value.
    """
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ScenarioError(file, [Problem("", f"cannot read the file ({e.strerror or e})",
                                           "a readable scenario file (TOML)")]) from None  # fmt: skip
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ScenarioError(file, [Problem(f"line {line}", "not UTF-8 text", "a UTF-8 encoded TOML file")]) from None
    return loads(text, file, Path(path).parent)


def loads(text: str, source: str = "<string>", base: Path | None = None) -> Scenario:
    """Validate a scenario given as TOML text; ``source`` names it in errors.

    ``base``: the folder schedule files of file axes are relative to (default: the
    current directory).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(source, [_syntax_problem(str(e), text)]) from None
    data, files, problems = expand_file_axes(data, base if base is not None else Path("."))
    if problems:
        raise ScenarioError(source, problems)
    try:
        model = validate_data(data, source)
    except ScenarioError as e:
        if not files:
            raise
        raise ScenarioError(source, without_file_values(e.problems, files), e.run) from None
    model._file_axes = files
    return model


_AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")


def _syntax_problem(message: str, text: str) -> Problem:
    m = _AT.search(message)
    problem = message[: m.start()] if m else message
    if m and m.group(1):
        where = f"line {m.group(1)}, column {m.group(2)}"
    else:  # "at end of document"
        lines = text.split("\n")
        where = f"line {len(lines)}, column {len(lines[-1]) + 1} (end of file)"
    problem = problem[:1].lower() + problem[1:]
    return Problem(where, f"TOML syntax error: {problem}", "valid TOML (https://toml.io/en/v1.0.0)")


def check_data(data: dict[str, Any], expanded: bool = False) -> tuple[Scenario | None, list[Problem]]:
    """Every problem of already parsed file data, and the model when the data fits it.

    ``expanded``: the data is one parameter point with its placeholders filled in
    (the [sweep] and placeholder rules were checked on the file already).
    """
    listed = isinstance(data.get("workload"), list)  # [[workload]] tables: the first, then ``workloads``
    if listed:
        entries = data["workload"]
        if not entries:
            return None, [Problem("workload", "an empty list", "[workload] or [[workload]] tables")]
        data = {**data, "workload": entries[0]}
        if len(entries) > 1:
            data["workloads"] = entries[1:]
    problems = [] if expanded else check_sweep(data) + check_placeholders(data)
    data, patterns = groups.expand(data)  # host-name patterns in from / to (spec.groups)
    problems += patterns
    try:
        model = Scenario.model_validate(data)
    except ValidationError as e:
        problems += from_validation_error(Scenario, e)
        model = None
    else:
        problems += check_scenario(model)
        model._listed_workloads = listed
    if listed:
        problems = [listed_path(p) for p in problems]
    return model, _dedupe(problems)


_WORKLOADS = re.compile(r"^workloads\[(\d+)\]")


def listed_path(p: Problem) -> Problem:
    """A problem's path as the file wrote it with [[workload]] tables: workload[0].x, workload[1].x, ..."""
    path = p.path
    m = _WORKLOADS.match(path)
    if m:
        path = f"workload[{int(m.group(1)) + 1}]" + path[m.end():]
    elif path == "workload" or path.startswith(("workload.", "workload[")):
        path = "workload[0]" + path[len("workload"):]
    return dataclasses.replace(p, path=path) if path != p.path else p


def validate_data(data: dict[str, Any], source: str = "<data>", run: str = "") -> Scenario:
    """``check_data``, raising ``ScenarioError`` on any problem."""
    model, problems = check_data(data)
    if problems or model is None:
        raise ScenarioError(source, problems, run)
    return model


def _dedupe(problems: list[Problem]) -> list[Problem]:
    """One problem per key path (the first found: placeholder checks come before the model's)."""
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.path and p.path in seen:
            continue
        seen.add(p.path)
        out.append(p)
    return out
