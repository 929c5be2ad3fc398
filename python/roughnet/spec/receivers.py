"""The ``to`` key of ``[workload]``: which hosts receive.

This module owns the forms ``to`` may take and the list of receivers each gives:

- a host name, ``to = "b"``;
- a list of host names, ``to = ["b", "c"]``;
- the first n of a list, ``to = { first = 2, of = ["sub1", "sub2", "sub3"] }``: with
  ``first = "${schedule.subscribers}"`` a schedule row picks how many subscribers
  a run has, and every run's receivers are declared hosts (SEEDS S2).

``first`` is checked against the list (1 to its length) once it is a number; with
a placeholder it is checked again on every expanded run.  Whether the hosts exist
and are connected is ``spec.checks``' (on the hosts ``receivers`` returns).
"""

from __future__ import annotations

from typing import Any

from . import kinds
from .table import HOST

__all__ = ["FIRST", "OF", "TO", "receivers"]

FIRST, OF = "first", "of"
_NAMES = kinds.name_list(HOST, 1, "a host name or a list of host names", single=True)
_EXPECTED = ('a host name, a list of host names, or { first = n, of = ["sub1", "sub2", ...] } (the first n '
             "hosts of the list; n may be a ${key.field} placeholder)")  # fmt: skip


def _check(value: Any) -> None:
    if not isinstance(value, dict):
        _NAMES.check(value)
        return
    keys = set(value)
    if keys != {FIRST, OF}:
        missing = sorted({FIRST, OF} - keys)
        extra = sorted(keys - {FIRST, OF})
        what = "; ".join(([f"missing {', '.join(missing)}"] if missing else []) +
                         ([f"unknown key {', '.join(extra)}"] if extra else []))  # fmt: skip
        raise ValueError(f"a table with the wrong keys ({what}); expected {_EXPECTED}")
    of = value[OF]
    if not isinstance(of, list) or not of:
        raise ValueError(f"`of` is not a non-empty list of host names; expected {_EXPECTED}")
    for entry in of:
        if kinds.has_placeholder(entry):
            raise ValueError(f"`of` lists a placeholder ({entry}); expected host names (only `first` may be swept)")
        try:
            HOST.check(entry)
        except ValueError as e:
            raise ValueError(f"`of` lists {kinds.describe(entry)}: {e}") from None
    if len(set(of)) != len(of):
        raise ValueError(f"`of` names a host twice; expected distinct host names (got {kinds.describe(of)})")
    first = value[FIRST]
    if kinds.has_placeholder(first):
        if not kinds.PLACEHOLDER_FULL.match(first):
            raise ValueError(f"`first` is not a single placeholder; expected an integer or ${{key.field}}")
        return
    if isinstance(first, bool) or not isinstance(first, int):
        raise ValueError(f"`first` is not an integer (got {kinds.describe(first)}); expected an integer from 1 to "
                         f"{len(of)} (the hosts listed in `of`)")
    if not 1 <= first <= len(of):
        raise ValueError(f"`first` = {first} asks for {first} receiver(s), but `of` lists {len(of)} host(s); "
                         f"expected an integer from 1 to {len(of)}")


_ARRAY = {"type": "array", "items": HOST.json_schema(), "minItems": 1}
_TABLE = {"type": "object", "required": [FIRST, OF], "additionalProperties": False,
          "properties": {FIRST: {"anyOf": [{"type": "integer", "minimum": 1}, kinds.PLACEHOLDER_SCHEMA]},
                         OF: _ARRAY}}  # fmt: skip
#: The kind of ``to``.  A whole-value placeholder is allowed (it fills in one host name).
TO = kinds.Kind(_EXPECTED, _check, {"anyOf": [HOST.json_schema(), _ARRAY, _TABLE]}, placeholders=True,
                schema_placeholder=False)


def receivers(to: Any) -> list[Any]:
    """The receivers ``to`` names (a placeholder ``first``: every host of ``of``, the most it can be)."""
    if isinstance(to, str):
        return [to]
    if isinstance(to, dict):
        of = list(to.get(OF) or [])
        first = to.get(FIRST)
        if isinstance(first, int) and not isinstance(first, bool):
            return of[:first]
        return of
    return list(to)
