"""Schedule files: a CSV file as a sweep axis (``[sweep] schedule = { file = "dds-schedule.csv" }``).

This module owns reading a schedule CSV into the entries of a table axis (one
entry per data row, each named ``"row <n>"``, its fields used as
``${schedule.data_length}`` ...), the file-axis value itself (``{ file = ...,
ignore = [...] }``), the columns it knows and how their cells are read, and
choosing a range of rows (``roughnet run --from N --to M``, ``select_rows``).

The file layout follows the schedule of the DDS perftest runner of SEEDS S2: a
header row, then one row per test.  Header names are matched without regard to
case, spaces or punctuation ("Data Length" is ``data_length``).  Known columns:

==================  ====================================  =====================================
column (aliases)    cell                                  field(s) of the entry
==================  ====================================  =====================================
data_length         bytes, an integer >= 1                ``data_length`` (int)
(datalen, length)
multicast           0/1, true/false, yes/no               ``multicast`` (bool)
subscribers         an integer >= 1                       ``subscribers`` (int)
(number_of_
subscribers, ...)
best_effort         0/1, true/false, yes/no               ``reliability``: "best_effort" or
                                                          "reliable" (the DDS knob's values)
batch_size (batch)  bytes, an integer >= 0 (0: none)      ``batch_size`` (int); for the DDS knob
                                                          ``batch = "${schedule.batch_size} B"``
==================  ====================================  =====================================

Any other column is read as an integer, a number, true/false, or else text.
Blank lines and lines starting with ``#`` are skipped (they do not count as rows).
Columns the scenario does not use are listed in ``ignore`` (every field of an
axis must be used, so that a typo cannot silently leave a column out).
Errors name the file, the row (and its line) and the column, and never quote a cell: a scenario (run as
root) may name any file, and one that is not a schedule (``file = "/etc/shadow"``) must not have its content
printed (issue 26). A header cell must look like a column name (a letter, then letters, digits, spaces and
``_ - ( ) .``, at most 64 characters), so that a file whose first line is not a header is refused as such;
the columns of a header that passed may be named in later errors (they are the user's column names).

The expansion happens when the scenario file is read (``spec.load``), before any
other check: from there on the axis is an ordinary table axis, and the sweep id
covers the rows' content.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..runspec import Sweep
from .kinds import describe
from .problems import Problem
from .sweep import NAME_FIELD, axes_of

__all__ = ["FILE_KEY", "IGNORE_KEY", "COLUMNS", "expand_file_axes", "file_axes", "row_number", "select_rows"]

FILE_KEY = "file"
IGNORE_KEY = "ignore"
#: Largest schedule read (rows): a sweep larger than this is a mistake here.
MAX_ROWS = 10_000
MAX_FILE_BYTES = 4 * 1024 * 1024
_FILE_AXIS = ('an inline table { file = "schedule.csv" } (optionally with ignore = ["column", ...]) or a '
              "list of values")  # fmt: skip
_BOOL = {"1": True, "0": False, "true": True, "false": False, "yes": True, "no": False}
_BOOL_EXPECTED = "0 or 1, true or false, yes or no"


_HEADER_CELL = re.compile(r"[A-Za-z][A-Za-z0-9 _().-]{0,63}")


def _normal(name: str) -> str:
    """``"Data Length (bytes)"`` -> ``"data_length_bytes"``."""
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def _int_cell(lo: int, what: str) -> Callable[[str], Any]:
    expected = f"{what}, an integer >= {lo}"

    def read(cell: str) -> Any:
        if not re.fullmatch(r"[+-]?\d+", cell):
            raise ValueError(f"not an integer; expected {expected}")
        value = int(cell)
        if value < lo:
            raise ValueError(f"below {lo}; expected {expected}")
        return value

    return read


def _bool_cell(cell: str) -> bool:
    value = _BOOL.get(cell.lower())
    if value is None:
        raise ValueError(f"not a yes/no value; expected {_BOOL_EXPECTED}")
    return value


@dataclasses.dataclass(frozen=True)
class Column:
    """A column the schedule knows: its field name, how a cell is read, and into which fields."""

    field: str
    read: Callable[[str], Any]
    aliases: tuple[str, ...] = ()
    to_fields: Callable[[Any], dict[str, Any]] | None = None  # None: {field: value}

    def fields(self, value: Any) -> dict[str, Any]:
        return self.to_fields(value) if self.to_fields is not None else {self.field: value}


COLUMNS: tuple[Column, ...] = (
    Column("data_length", _int_cell(1, "a size in bytes"), ("datalen", "data_len", "length", "data_length_bytes")),
    Column("multicast", _bool_cell, ("mc", "use_multicast")),
    Column("subscribers", _int_cell(1, "a number of subscribers"),
           ("number_of_subscribers", "num_subscribers", "nsubscribers", "num_subs", "subscriber_count", "subs")),
    Column("best_effort", _bool_cell, ("besteffort", "best_effort_reliability"),
           lambda v: {"reliability": "best_effort" if v else "reliable"}),
    Column("batch_size", _int_cell(0, "a size in bytes (0: no batching)"), ("batch", "batchsize", "batch_bytes")),
)
_KNOWN = {c.field: c for c in COLUMNS} | {a: c for c in COLUMNS for a in c.aliases}


def _generic(cell: str) -> Any:
    """An unknown column's cell: integer, number, true/false, or text."""
    if re.fullmatch(r"[+-]?\d+", cell):
        return int(cell)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", cell):
        return float(cell)
    if cell.lower() in ("true", "false"):
        return cell.lower() == "true"
    return cell


def expand_file_axes(data: dict[str, Any], base: Path) -> tuple[dict[str, Any], dict[str, str], list[Problem]]:
    """Replace every file axis of ``data["sweep"]`` by the entries of its CSV (paths relative to ``base``).

    Returns the new data (``data`` itself when there is no file axis), axis -> path of
    the file read, and the problems (then the data is unusable).
    """
    sweep = data.get("sweep")
    if not isinstance(sweep, dict) or not any(isinstance(v, dict) for v in axes_of(sweep).values()):
        return data, {}, []
    sweep = dict(sweep)
    files: dict[str, str] = {}
    problems: list[Problem] = []
    for key, value in axes_of(sweep).items():
        if not isinstance(value, dict):
            continue
        path = f"sweep.{key}"
        spec = _file_spec(path, value, problems)
        if spec is None:
            continue
        name, ignore = spec
        file = Path(name) if Path(name).is_absolute() else base / name
        entries = read_schedule(file, path, name, ignore, problems)
        if entries is not None:
            sweep[key] = entries
            files[key] = str(file)
    return {**data, "sweep": sweep}, files, problems


def _file_spec(path: str, value: dict[str, Any], problems: list[Problem]) -> tuple[str, list[str]] | None:
    extra = [k for k in value if k not in (FILE_KEY, IGNORE_KEY)]
    if extra:
        problems.append(Problem(f"{path}.{extra[0]}", "unknown key of a file axis", _FILE_AXIS, value[extra[0]]))
        return None
    name = value.get(FILE_KEY)
    if not isinstance(name, str) or not name.strip() or "${" in name:
        problems.append(Problem(f"{path}.{FILE_KEY}", "missing or not a file name" if name is None else
                                "not a file name", "a path to a CSV file, relative to the scenario file",
                                name if name is not None else value))  # fmt: skip
        return None
    ignore = value.get(IGNORE_KEY, [])
    if not isinstance(ignore, list) or not all(isinstance(c, str) and c for c in ignore):
        problems.append(Problem(f"{path}.{IGNORE_KEY}", "not a list of column names",
                                'a list of the CSV\'s column names, like ["batch_size"]', ignore))  # fmt: skip
        return None
    return name, ignore


def read_schedule(file: Path, path: str, name: str, ignore: list[str],
                  problems: list[Problem]) -> list[dict[str, Any]] | None:  # fmt: skip
    """The table-axis entries of one schedule CSV; None (and problems) when it is unusable."""
    where = f"{path}.{FILE_KEY}"
    try:
        raw = file.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as e:
        problems.append(Problem(where, f"cannot read the schedule file {file} ({e.strerror or e})",
                                "a readable CSV file, relative to the scenario file", name))  # fmt: skip
        return None
    if len(raw) > MAX_FILE_BYTES:
        problems.append(Problem(where, f"schedule file larger than {MAX_FILE_BYTES // 2**20} MiB",
                                "a smaller CSV file", name))  # fmt: skip
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        problems.append(Problem(where, f"line {line} is not UTF-8 text", "a UTF-8 encoded CSV file", name))
        return None
    rows = [(ln, cells) for ln, cells in _rows(text)]
    if not rows:
        problems.append(Problem(where, "the schedule has no header row", "a header row naming the columns, like "
                                "data_length,multicast,subscribers,best_effort,batch_size", name))  # fmt: skip
        return None
    before = len(problems)
    at = f"{path} ({name}"
    header_line, header = rows[0]
    columns = _header(header, header_line, at, problems)
    ignored = _ignored(ignore, columns, path, name, problems)
    if len(problems) > before or columns is None:
        return None
    if len(rows) == 1:
        problems.append(Problem(where, "the schedule has a header but no rows", "at least one row after the header",
                                name))  # fmt: skip
        return None
    if len(rows) - 1 > MAX_ROWS:
        problems.append(Problem(where, f"the schedule has {len(rows) - 1} rows", f"at most {MAX_ROWS}", name))
        return None
    entries = []
    for n, (line, cells) in enumerate(rows[1:], start=1):
        entry = _entry(n, line, cells, columns, ignored, at, problems)
        if entry is not None:
            entries.append(entry)
    return entries if len(problems) == before else None


def _rows(text: str) -> list[tuple[int, list[str]]]:
    """(line number, stripped cells) of every row that is not blank or a comment."""
    reader = csv.reader(io.StringIO(text))
    out = []
    start = 1
    for cells in reader:
        line, start = start, reader.line_num + 1
        stripped = [c.strip() for c in cells]
        if not any(stripped) or stripped[0].startswith("#"):
            continue
        out.append((line, stripped))
    return out


def _header(cells: list[str], line: int, at: str, problems: list[Problem]) -> list[tuple[str, Column | None]] | None:
    """(field name, known column or None) per column."""
    out: list[tuple[str, Column | None]] = []
    seen: dict[str, int] = {}
    for i, cell in enumerate(cells, start=1):
        norm = _normal(cell)
        col = _KNOWN.get(norm)
        field = col.field if col is not None else norm
        where = f"{at}, header, line {line}, column {i})"
        if not _HEADER_CELL.fullmatch(cell) or not norm or not re.fullmatch(r"[a-z_][a-z0-9_]*", field):
            # Not quoted: a file that is not a schedule must not have its first line printed.
            problems.append(Problem(where, "not a column name (this is not a schedule's header row)",
                                    "a header row of column names, each a letter followed by letters, digits, "
                                    "spaces and _-(). (at most 64 characters), like Data Length,Batch Size"))  # fmt: skip
            return None
        if field == NAME_FIELD:
            problems.append(Problem(where, "the column name `name` is reserved (rows are named \"row <n>\")",
                                    "another column name", cell))  # fmt: skip
        elif field in seen:
            problems.append(Problem(where, f"same column as column {seen[field]}", "distinct column names", cell))
        else:
            seen[field] = i
        out.append((field, col))
    if "reliability" in seen and "best_effort" in seen:
        problems.append(Problem(f"{at}, header, line {line})", "both a best_effort and a reliability column",
                                "one of them (best_effort fills in the field reliability)", cells))  # fmt: skip
    return out


def _ignored(ignore: list[str], columns: list[tuple[str, Column | None]] | None, path: str, file_name: str,
             problems: list[Problem]) -> set[str]:  # fmt: skip
    if columns is None:
        return set()
    names = {f for f, _ in columns}
    out = set()
    for j, name in enumerate(ignore):
        norm = _normal(name)
        field = _KNOWN[norm].field if norm in _KNOWN else norm
        if field not in names:
            problems.append(Problem(f"{path}.{IGNORE_KEY}[{j}]", f"not a column of the schedule {file_name}",
                                    f"one of the {len(columns)} column names of its header row", name))  # fmt: skip
        out.add(field)
    return out


def _entry(n: int, line: int, cells: list[str], columns: list[tuple[str, Column | None]], ignored: set[str],
           at: str, problems: list[Problem]) -> dict[str, Any] | None:  # fmt: skip
    if len(cells) != len(columns):
        problems.append(Problem(f"{at}, row {n}, line {line})", f"{len(cells)} cells",
                                f"{len(columns)}, one per column of the header row"))  # fmt: skip
        return None
    entry: dict[str, Any] = {NAME_FIELD: f"row {n}"}
    ok = True
    for i, ((field, col), cell) in enumerate(zip(columns, cells), start=1):
        where = f"{at}, row {n}, line {line}, column {i} \"{field}\")"
        if not cell:
            problems.append(Problem(where, "empty cell", "a value in every column"))
            ok = False
            continue
        if field in ignored:
            continue
        try:
            value = col.read(cell) if col is not None else _generic(cell)
        except ValueError as e:
            problem, _, expected = str(e).partition("; expected ")
            problems.append(Problem(where, problem, expected))  # the cell is not quoted
            ok = False
            continue
        entry.update(col.fields(value) if col is not None else {field: value})
    return entry if ok else None


def file_axes(scenario: Any) -> dict[str, str]:
    """Axis -> schedule file of a loaded scenario (``spec.load`` records them)."""
    return dict(getattr(scenario, "_file_axes", None) or {})


def row_number(sweep: Sweep, axis: str, label: Any) -> int:
    """The 1-based row of a file axis entry, from its label (its position in the axis)."""
    return list(sweep.axes[axis]).index(label) + 1


def select_rows(sweep: Sweep, first: int | None, last: int | None) -> Sweep:
    """The sweep restricted to rows ``first``..``last`` (1-based, inclusive) of its schedule file axis.

    The other runs are left out (not run, not counted as planned); the axis lists
    only the rows kept.  Raises SpecError when the sweep has no file axis (or
    several), or the range is empty or outside the schedule.
    """
    if first is None and last is None:
        return sweep
    opts = " / ".join(o for o, v in (("--from", first), ("--to", last)) if v is not None)
    if len(sweep.files) != 1:
        got = "none" if not sweep.files else ", ".join(sweep.files)
        raise SpecError(f"{sweep.source}: {opts} select rows of a schedule file, but the sweep has "
                        f"{'no' if not sweep.files else 'several'} file axes ({got}); expected exactly one "
                        "[sweep] axis of the form { file = \"schedule.csv\" }")  # fmt: skip
    axis = next(iter(sweep.files))
    rows = len(sweep.axes[axis])
    lo = 1 if first is None else first
    hi = rows if last is None else last
    if not 1 <= lo <= rows or not 1 <= hi <= rows or lo > hi:
        raise SpecError(f"{sweep.source}: rows {describe(lo)} to {describe(hi)} of sweep.{axis} "
                        f"({sweep.files[axis]}, {rows} rows): expected 1 <= --from <= --to <= {rows}")  # fmt: skip
    # Runs keep their index in the whole sweep, so "run 7" names the same run whatever the range.
    runs = [r for r in sweep.runs if lo <= row_number(sweep, axis, r.params[axis]) <= hi]
    axes = {k: (list(v)[lo - 1: hi] if k == axis else v) for k, v in sweep.axes.items()}
    return dataclasses.replace(sweep, runs=tuple(runs), axes=axes)
