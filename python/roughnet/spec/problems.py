"""What is wrong with a scenario file, and how it is said.

This module owns the wording of scenario errors: a ``Problem`` is one bad value
(key path, problem, what was expected, the value), ``ScenarioError`` (a
``SpecError``) carries every problem found, and its message is one line per
problem::

    <file>: <key path>: <problem>; expected <what> (got <value>)

A value that came from a sweep also names the sweep entry and the run::

    q.toml: link[0].loss = "150%" (from sweep.loss[2]): above 100%; expected ... (got "150%") [run 2: loss="150%"]

``from_validation_error`` turns pydantic's errors into problems, walking the
models to name the keys a table accepts.  An array of tables told apart by a
``kind`` key (``[[service]]``) or a ``model`` key (``loss_model``) is walked through the model of the entry's kind;
pydantic's tag in the error location is dropped from the key path.
"""

from __future__ import annotations

import difflib
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import SpecError
from .kinds import ENTRY_PREFIX, describe

_ENTRY = re.compile(re.escape(ENTRY_PREFIX) + r"(\d+)\] ")

_NOTHING = object()


@dataclass(frozen=True)
class Problem:
    path: str  # "link[0].loss"; "" for the whole file
    problem: str  # "above 100%"
    expected: str = ""  # "a percentage like '5%' (0% to 100%)"
    got: Any = _NOTHING  # the bad value (omitted when there is none, e.g. a missing key)
    origin: str = ""  # "sweep.loss[2]" when the value came from a sweep

    def format(self, file: str) -> str:
        where = self.path or "(file)"
        if self.origin:
            where = f"{where} = {describe(self.got)} (from {self.origin})"
        text = f"{file}: {where}: {self.problem}"
        if self.expected:
            text += f"; expected {self.expected}"
        if self.got is not _NOTHING:
            text += f" (got {describe(self.got)})"
        return text


class ScenarioError(SpecError):
    """A scenario file is malformed; ``problems`` lists every bad value found."""

    def __init__(self, file: str, problems: list[Problem], run: str = "") -> None:
        self.file = file
        self.problems = list(problems)
        self.run = run  # "run 3: loss=\"5%\", payload=\"1 KiB\"" when found while expanding a sweep
        suffix = f" [{run}]" if run else ""
        super().__init__("\n".join(p.format(file) + suffix for p in self.problems))


def without_file_values(problems: list[Problem], file_axes: Any) -> list[Problem]:
    """``problems`` with the values of a schedule file's cells left out: those of a problem at a file axis
    (``sweep.schedule[2].batch_size``) or whose value came from one (origin ``sweep.schedule[2]``). A
    scenario may name any file as a schedule; its cells are never quoted (issue 26)."""
    prefixes = tuple(f"sweep.{axis}{end}" for axis in file_axes for end in ("[", ".", ""))
    if not prefixes:
        return list(problems)
    out = []
    for p in problems:
        if p.path.startswith(prefixes) or any(o.strip().startswith(prefixes) for o in p.origin.split(",") if o):
            p = Problem(p.path, p.problem, p.expected, origin=p.origin)
        out.append(p)
    return out


def path_text(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("link", 0, "loss")`` -> ``"link[0].loss"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _field_models(annotation: Any) -> list[type[BaseModel]]:
    """The models inside ``Model``, ``Model | None``, ``list[Model]`` or ``list[A | B]`` (a tagged union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += [m for m in _field_models(arg) if m not in found]
    return found


#: The keys that tell the members of a tagged union apart: [[service]] ``kind``, ``loss_model``'s ``model``.
TAG_KEYS = ("kind", "model")


def _tag(model: type[BaseModel]) -> str | None:
    """The value of ``kind`` (or ``model``) that selects ``model`` in a tagged union (``Literal["kafka"]``)."""
    for key in TAG_KEYS:
        info = model.model_fields.get(key)
        args = typing.get_args(info.annotation) if info is not None else ()
        if len(args) == 1 and isinstance(args[0], str):
            return args[0]
    return None


def _walk(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel] | None, tuple[Any, ...]]:
    """The model class of the table at ``loc`` (walks fields by their TOML name), and ``loc`` without
    the tags pydantic puts in the locations of tagged-union members (``("service", 0, "kafka", "heap")``)."""
    model: type[BaseModel] | None = root
    members: dict[str, type[BaseModel]] = {}
    clean: list[Any] = []
    for part in loc:
        if isinstance(part, int):
            clean.append(part)
            continue
        if members and part in members:
            model, members = members[part], {}
            continue
        clean.append(part)
        if model is None:
            continue
        fields = {(f.alias or n): f for n, f in model.model_fields.items()}
        if part not in fields:
            model = None
            continue
        found = _field_models(fields[part].annotation)
        tags = {_tag(m): m for m in found}
        if len(found) > 1 and None not in tags:
            model, members = None, {t: m for t, m in tags.items() if t is not None}
        else:
            model, members = (found[0] if found else None), {}
    return model, tuple(clean)


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    return _walk(root, loc)[0]


def _field_info(root: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    parent = _model_at(root, loc[:-1])
    if parent is None:
        return None
    for n, f in parent.model_fields.items():
        if (f.alias or n) == loc[-1]:
            return f
    return None


def _unknown_key(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, str]:
    parent = _model_at(root, loc[:-1])
    if parent is None:
        return "unknown key", "no other keys here"
    allowed = [f.alias or n for n, f in parent.model_fields.items()]
    problem = "unknown key"
    noun, owner = getattr(parent, "key_noun", ""), getattr(parent, "key_owner", "")
    if noun and owner:
        problem += f": not a {noun} of {owner}"
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    if close:
        problem += f" (did you mean '{close[0]}'?)"
    if not allowed:
        return problem, f"no {noun or 'key'}s here (an empty table, or none)"
    return problem, "one of: " + ", ".join(allowed)


def _split_message(message: str) -> tuple[str, str]:
    problem, _, expected = message.partition("; expected ")
    return problem, expected


_TYPE_EXPECTED = {
    "model_type": "a table",
    "model_attributes_type": "a table",
    "dict_type": "a table",
    "list_type": "an array",
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
}


def from_validation_error(root: type[BaseModel], error: ValidationError) -> list[Problem]:
    """One ``Problem`` per pydantic error, with our wording."""
    problems: list[Problem] = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        kind = err["type"]
        value = err.get("input", _NOTHING)
        path = path_text(_walk(root, loc)[1])
        if kind == "value_error":
            message = str(err["ctx"]["error"])
            entry = _ENTRY.match(message)
            if entry is not None and isinstance(value, list):
                index = int(entry.group(1))
                path, value, message = f"{path}[{index}]", value[index], message[entry.end():]
            problem, expected = _split_message(message)
            problems.append(Problem(path, problem, expected, value))
        elif kind == "missing":
            info = _field_info(root, loc)
            what = info.description if info is not None and info.description else "a value"
            problems.append(Problem(path, "missing required key", _lower_first(what)))
        elif kind == "extra_forbidden":
            problem, expected = _unknown_key(root, loc)
            problems.append(Problem(path, problem, expected, value))
        elif kind == "too_short":
            info = _field_info(root, loc)
            need = err.get("ctx", {}).get("min_length", 1)
            what = f"at least {need} entries" + (f" ({_lower_first(info.description)})" if info else "")
            problems.append(Problem(path, f"too few entries ({len(value) if isinstance(value, list) else 0})",
                                    what, _NOTHING))  # fmt: skip
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            tag = err.get("ctx", {}).get("discriminator", "kind").strip("'")
            expected = "one of " + err.get("ctx", {}).get("expected_tags", "").replace("'", '"') if (
                kind == "union_tag_invalid") else _tags_expected(root, loc)  # fmt: skip
            if kind == "union_tag_not_found":
                problems.append(Problem(f"{path}.{tag}", "missing required key", expected))
            else:
                got = value.get(tag, _NOTHING) if isinstance(value, dict) else _NOTHING
                problems.append(Problem(f"{path}.{tag}", "unknown value", expected, got))
        elif kind in _TYPE_EXPECTED:
            expected = _TYPE_EXPECTED[kind]
            if kind == "list_type" and loc and loc[-1] in ("host", "link", "service"):
                expected = f"an array of tables ([[{loc[-1]}]])"
            problems.append(Problem(path, "wrong type", expected, value))
        else:  # pragma: no cover - every kind of field we declare is covered above
            problems.append(Problem(path, err["msg"], "", value))
    return problems


def _tags_expected(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """``one of "mosquitto", "kafka", ...``: the tags of the tagged union at ``loc``."""
    if loc and isinstance(loc[-1], int):  # an entry of an array of tables ([[service]])
        parent = _model_at(root, loc[:-2]) if len(loc) >= 2 else None
        name = loc[-2] if len(loc) >= 2 else None
    else:  # a single table (loss_model = { model = ... })
        parent = _model_at(root, loc[:-1]) if loc else None
        name = loc[-1] if loc else None
    field = next((f for n, f in parent.model_fields.items() if (f.alias or n) == name), None) if parent else None
    tags = [t for t in (_tag(m) for m in _field_models(field.annotation)) if t] if field is not None else []
    return "one of " + ", ".join(f'"{t}"' for t in tags) if tags else "a kind"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text else text


@dataclass
class Collector:
    """Gathers problems while checking; ``raise_if_any`` ends a check with one ScenarioError."""

    file: str
    problems: list[Problem] = field(default_factory=list)

    def add(self, path: str, problem: str, expected: str = "", got: Any = _NOTHING) -> None:
        self.problems.append(Problem(path, problem, expected, got))

    def raise_if_any(self, run: str = "") -> None:
        if self.problems:
            raise ScenarioError(self.file, self.problems, run)


NOTHING = _NOTHING
