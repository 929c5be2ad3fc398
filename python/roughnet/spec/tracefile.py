"""Trace files of the scenario format: lines of numbers, the first a time in seconds.

Owns the line rules every trace file shares, and the time order of inline points (``link.distance_trace``'s ``time_s,metres``, a host's
``path_trace``'s ``time_s,x_m,y_m``): comments, blank lines, one header line, numbers, times that
never go back, and errors naming the file, the line and what was expected; the callers turn the rows into their points.

An error never quotes the file's content: a scenario (run as root) may name any file, and a file that is
not a trace (``path_trace = "/etc/shadow"``) must not have a line of it printed (issue 26). Errors say
which line and which field, and what they should be.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .. import units
from .kinds import has_placeholder
from .problems import Problem


def number(text: str) -> Decimal | None:
    """A finite decimal number, or None."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def timed_rows(text: str, name: str, width: int, expected: str) -> list[tuple[str, int, list[Decimal]]]:
    """The lines of a trace file of ``width`` numbers a line, the first a time in seconds: ("<name> line
    <n>", time in ns, the numbers) per line, times >= 0 and never going back; ``#`` comments, blank lines and one header line
    skipped. ValueError naming the line otherwise (``expected``: what a line should be)."""
    rows: list[tuple[str, int, list[Decimal]]] = []
    header_allowed = True
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        values = [number(f) for f in fields]
        if header_allowed and len(fields) == width and values[0] is None:
            header_allowed = False  # a header such as "time_s,metres"
            continue
        header_allowed = False
        where = f"{name} line {n}"
        if len(fields) != width:
            raise ValueError(f"{where}: {len(fields)} comma-separated field{'s' if len(fields) != 1 else ''}, "
                             f"not {width}; expected {expected}")
        bad = next((k for k, v in enumerate(values, 1) if v is None), None)
        if bad is not None:
            raise ValueError(f"{where}: field {bad} is not a number; expected {expected}")
        t = values[0]
        assert t is not None
        if t < 0:
            raise ValueError(f"{where}: negative time; expected {expected}")
        at_ns = int((t * 1_000_000_000).to_integral_value())
        if rows and at_ns < rows[-1][1]:
            raise ValueError(f"{where}: time {t} s is before the line above; expected {expected}")
        rows.append((where, at_ns, [v for v in values if v is not None]))
    if not rows:
        raise ValueError(f"{name}: no points; expected {expected}")
    return rows


def read_trace_text(path: Path, max_bytes: int, expected: str) -> str:
    """The text of a trace file; ValueError "<problem>; expected <expected>" if it is missing, unreadable,
    larger than ``max_bytes`` or not UTF-8."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{path}: {size} bytes, more than {max_bytes}; expected a smaller file")
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read {path} ({e.strerror or e}); expected {expected}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text; expected {expected}") from None


def time_order_problems(points: Iterable[Any], path: str) -> list[Problem]:
    """Problems at ``<path>[k].at`` for inline points (each with an ``at`` duration) that go back in time;
    points whose ``at`` is still a placeholder are skipped."""
    problems: list[Problem] = []
    last = None
    for k, point in enumerate(points):
        if has_placeholder(point.at):
            continue
        at = units.parse_duration_ns(point.at)
        if last is not None and at < last:
            problems.append(Problem(f"{path}[{k}].at", "earlier than the point before",
                                    "points in time order (`at` never decreasing)", point.at))  # fmt: skip
        last = at
    return problems
