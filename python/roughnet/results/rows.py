"""A run record as the store's rows: ids checked, values typed to their columns (a bad one named with where it
came from), metrics split into columns and the rest, timeline tables, and inserts through Arrow.

No connection of its own: ``results.store`` opens the database and calls these inside its transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
from typing import Any

import duckdb
import pyarrow as pa

from roughnet import __version__
from roughnet.errors import ResultsError
from roughnet.results import schema

SWEEP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_id(value: Any, what: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise ResultsError(
            f"{what} is {value!r}; expected letters, digits, '.', '_' or '-' "
            f"(pattern {pattern.pattern})"
        )
    return value


def to_json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, default=str, ensure_ascii=False)


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def as_utc(value: Any, what: str) -> dt.datetime | None:
    """An ISO 8601 string (or datetime) as a naive UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ResultsError(
                f"{what} is {value!r}; expected an ISO 8601 time such as "
                "'2026-11-22T10:00:00+00:00'"
            ) from None
    if not isinstance(value, dt.datetime):
        raise ResultsError(f"{what} is {value!r}; expected an ISO 8601 time string")
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def iso_text(value: dt.datetime | None) -> str | None:
    return None if value is None else value.replace(tzinfo=dt.UTC).isoformat()


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _metric_value(name: str, sql_type: str, value: Any, where: str) -> bool | int | float | None:
    if value is None:
        return None
    if sql_type == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        raise ResultsError(f"{where}.{name} is {value!r}; expected true, false or null")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy scalars, numeric strings
        except (TypeError, ValueError):
            raise ResultsError(
                f"{where}.{name} is {value!r}; expected a number or null"
            ) from None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if sql_type == "BIGINT":
        if isinstance(value, float) and not value.is_integer():
            raise ResultsError(f"{where}.{name} is {value!r}; expected a whole number")
        return int(value)
    return float(value)


def signal_inside(e: BaseException) -> bool:
    """Whether DuckDB failed because a signal interrupted it: the CLI's handler raised its Interrupted inside
    DuckDB's own signal check ("Query interrupted") or inside a Python callback DuckDB was running, e.g.
    while it read a registered Arrow table ("... failed: Interrupted: SIGTERM"; found by test_self_chaos)."""
    text = str(e)
    return "query interrupted" in text.lower() or "Interrupted: SIGINT" in text or "Interrupted: SIGTERM" in text


def split_metrics(metrics: Any, where: str) -> tuple[list[int | float | None], str | None]:
    """Metric column values in ``schema.METRICS`` order, plus unknown keys as JSON."""
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        raise ResultsError(f"{where} is {type(metrics).__name__}; expected an object of metrics")
    values: list[int | float | None] = []
    for m in schema.METRICS:  # the common cases first (20,000 receivers and flows of ~60 metrics at 100 cars)
        v = metrics.get(m.name)
        t = type(v)
        if v is None:
            values.append(None)
        elif t is float and m.sql_type == "DOUBLE" and math.isfinite(v):
            values.append(v)
        elif t is int and m.sql_type == "BIGINT":
            values.append(v)
        else:
            values.append(_metric_value(m.name, m.sql_type, v, where))
    extra = {k: v for k, v in metrics.items() if k not in schema.METRIC_BY_NAME}
    return values, (to_json(extra) if extra else None)


def metrics_dict(row: dict[str, Any]) -> dict[str, Any]:
    metrics = {name: row.pop(name) for name in schema.METRIC_NAMES}
    extra = from_json(row.pop("metrics_extra"))
    if extra:
        metrics.update(extra)
    return metrics


_ARROW_TYPES = {"VARCHAR": pa.string(), "JSON": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64(),
                "INTEGER": pa.int32(), "BOOLEAN": pa.bool_()}


def receiver_types() -> list[tuple[str, str]]:
    """(column, SQL type) of ``receivers`` in schema.receiver_columns() order (its CREATE TABLE; read when called:
    tests write older formats by changing schema.METRICS)."""
    return [("sweep_id", "VARCHAR"), ("run_id", "VARCHAR"), ("host", "VARCHAR"), ("metrics_extra", "JSON"),
            *((m.name, m.sql_type) for m in schema.METRICS)]


#: (column, SQL type) of ``histograms`` (its CREATE TABLE).
HISTOGRAM_TYPES = [("sweep_id", "VARCHAR"), ("run_id", "VARCHAR"), ("host", "VARCHAR"), ("kind", "VARCHAR"),
                   ("count", "BIGINT"), ("hdr", "VARCHAR")]


def base_type(sql_type: str) -> str:
    return sql_type.split()[0]


def _cell(name: str, sql_type: str, value: Any, where: str) -> Any:
    """A record value as a timeline table's column type; ResultsError naming the key when it does not fit."""
    base = base_type(sql_type)
    if value is None:
        if "NOT NULL" in sql_type:
            raise ResultsError(f"{where}.{name} is missing; expected a value")
        return None
    if base == "JSON":
        return to_json(value)
    if base == "VARCHAR":
        if isinstance(value, str):
            if "NOT NULL" in sql_type and not value:
                raise ResultsError(f"{where}.{name} is empty; expected a name")
            return value
        return to_json(value) if isinstance(value, (dict, list)) else str(value)
    return _metric_value(name, "BIGINT" if base == "INTEGER" else base, value, where)


def _timeline_items(record: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    items = record.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise ResultsError(f"{where}: {key} is {type(items).__name__}; expected a list of objects")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ResultsError(f"{where}: {key}[{i}] is {item!r}; expected an object")
    return items


def timeline_rows(record: dict[str, Any], table: str, sweep_id: str, run_id: str, where: str) -> list[list[Any]]:
    """Rows of one timeline table (``schema.timeline_columns`` order) from the record's list of that name."""
    cols = schema.timeline_columns(table)
    metric_names = set(schema.METRIC_NAMES)
    converters = [(n, _converter(n, t)) for n, t in cols]
    all_names = {n for n, _ in cols}
    not_metrics = {n for n, _ in cols if n not in metric_names}
    rows = []
    for i, item in enumerate(_timeline_items(record, table, where)):
        at = f"{where}: {table}[{i}]"
        values: dict[str, Any] = {"sweep_id": sweep_id, "run_id": run_id, "position": i}
        if table in ("workloads", "flows"):
            metrics = item.get("metrics")
            if metrics is None:
                metrics = {}
            if not isinstance(metrics, dict):
                raise ResultsError(f"{at}.metrics is {type(metrics).__name__}; expected an object of metrics")
            metrics = dict(metrics)
            if table == "flows":
                values["end_reason"] = _cell("end_reason", "VARCHAR", metrics.pop("end_reason", item.get("end_reason")),
                                             f"{at}.metrics")
            metric_values, extra = split_metrics(metrics, f"{at}.metrics")
            values.update(zip(schema.METRIC_NAMES, metric_values, strict=True))
            values["metrics_extra"] = extra
            if table == "workloads":
                validity = item.get("validity")
                if validity is not None and validity not in schema.VALIDITIES:
                    raise ResultsError(f"{at}.validity is {validity!r}; expected one of {schema.VALIDITIES} or null")
                reasons = item.get("validity_reasons") or []
                if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
                    raise ResultsError(f"{at}.validity_reasons is {reasons!r}; expected a list of strings")
                for key in ("senders", "receivers"):
                    hosts = item.get(key)
                    if hosts is not None and not isinstance(hosts, list):
                        raise ResultsError(f"{at}.{key} is {hosts!r}; expected a list of host names")
                values["validity_reasons"] = to_json(reasons)
            fixed = not_metrics
        else:
            fixed = all_names
            extra = {k: v for k, v in item.items() if k not in fixed}
            values["extra"] = to_json(extra) if extra else None
        row = []
        for name, conv in converters:
            if name in values:
                row.append(values[name])
            elif name in fixed:
                row.append(conv(item.get(name), at))
        rows.append(row)
    return rows


_NONE = type(None)


def timeline_table_columns(record: dict[str, Any], table: str, sweep_id: str, run_id: str,
                           where: str) -> list[list[Any]]:
    """``timeline_rows`` by column: one list per column of ``schema.timeline_columns`` order, the same cells.
    A column whose values are all of its type already (one pass over the types of the column: the common case,
    a 100-car run's series and distances are some 4 million cells) is taken as it is; any other column goes cell
    by cell through ``timeline_rows``'s converter (its errors name the item). ``workloads`` and ``flows`` (their
    metrics split per item) are ``timeline_rows`` transposed."""
    if table in ("workloads", "flows"):
        rows = timeline_rows(record, table, sweep_id, run_id, where)
        n_cols = len(schema.timeline_columns(table))
        return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(n_cols)]
    items = _timeline_items(record, table, where)
    n = len(items)
    cols = schema.timeline_columns(table)
    fixed = {c for c, _ in cols}
    out: list[list[Any]] = []
    for name, sql_type in cols:
        if name == "sweep_id":
            out.append([sweep_id] * n)
        elif name == "run_id":
            out.append([run_id] * n)
        elif name == "position":
            out.append(list(range(n)))
        elif name == "extra":
            if all(it.keys() <= fixed for it in items):
                out.append([None] * n)
            else:
                extras = ({k: v for k, v in it.items() if k not in fixed} for it in items)
                out.append([to_json(e) if e else None for e in extras])
        else:
            out.append(_column(name, sql_type, [it.get(name) for it in items], table, where))
    return out


def _column(name: str, sql_type: str, values: list[Any], table: str, where: str) -> list[Any]:
    """One column's cells as ``_converter`` makes them, the whole column at once when its types allow."""
    base = base_type(sql_type)
    nullable = "NOT NULL" not in sql_type
    types = set(map(type, values))
    ok_none = {_NONE} if nullable else set()
    if base == "DOUBLE" and types <= {float} | ok_none:
        if all(map(math.isfinite, (v for v in values if v is not None))):
            return values
    elif base in ("BIGINT", "INTEGER") and types <= {int} | ok_none:
        return values
    elif base == "VARCHAR" and types <= {str} | ok_none and (nullable or all(values)):
        return values
    conv = _converter(name, sql_type)
    return [conv(v, f"{where}: {table}[{i}]") for i, v in enumerate(values)]


def _converter(name: str, sql_type: str) -> Any:
    """``_cell`` for one column, with the common case (a value already of the column's type) first: a 100-car
    run's record has some 10 million cells (series and distances)."""
    base = base_type(sql_type)
    nullable = "NOT NULL" not in sql_type

    def slow(v: Any, at: str) -> Any:
        return None if v is None and nullable else _cell(name, sql_type, v, at)

    if base == "DOUBLE":
        def conv(v: Any, at: str) -> Any:
            if type(v) is float:
                return v if math.isfinite(v) else None
            return slow(v, at)
    elif base in ("BIGINT", "INTEGER"):
        def conv(v: Any, at: str) -> Any:
            return v if type(v) is int else slow(v, at)
    elif base == "VARCHAR":
        def conv(v: Any, at: str) -> Any:
            return v if type(v) is str and v else slow(v, at)
    else:
        conv = slow
    return conv


def arrow_insert(table: str, rows: list[list[Any]] | None, cols: list[tuple[str, str]] | None = None,
                 columns: list[list[Any]] | None = None) -> Any:
    """A transaction step inserting ``rows`` into ``table`` through an Arrow table (executemany costs ~0.4 ms a row;
    a run's series has thousands, a 100-car run 9,900 receivers and 19,800 histograms). ``cols``: (name, SQL type)
    in the rows' order, a timeline table's own by default. ``columns``: the values by column instead of ``rows``
    (``timeline_table_columns``)."""
    cols = schema.timeline_columns(table) if cols is None else cols
    fields = [pa.field(n, _ARROW_TYPES[base_type(t)]) for n, t in cols]
    if columns is None:
        columns = [[r[i] for r in rows or []] for i in range(len(fields))]
    data = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, fields, strict=True)],
                                schema=pa.schema(fields))
    names = ", ".join(ident(n) for n, _ in cols)
    view = f"_roughnet_insert_{table}"

    def step(con: duckdb.DuckDBPyConnection) -> None:
        con.register(view, data)
        try:
            con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}")
        except BaseException:
            # The failed insert aborted the transaction, and DuckDB then refuses unregister too ("Current
            # transaction is aborted"): that error must not replace the insert's own (an interrupt is told
            # apart by its text, signal_inside; found by test_self_chaos). The view goes with the next
            # register of its name.
            try:
                con.unregister(view)
            except duckdb.Error:
                pass
            raise
        con.unregister(view)

    return step


def machine_info() -> dict[str, Any]:
    """What this machine is, stored with each sweep (reports show it)."""
    return {
        "hostname": platform.node(),
        "system": platform.system(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "roughnet": __version__,
    }

def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
