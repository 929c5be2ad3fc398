"""Reading a results database's format version and upgrading older layouts.

Owns: ``read_version`` (what layout a DuckDB connection holds), the
``MIGRATIONS`` table (one function per step, version N -> N+1) and
``upgrade`` (runs the steps in one transaction).  The current layout itself is
defined in ``schema``; opening files, backups and locking live in ``store``.

Version 0 is the draft layout of the project skeleton (never released): one
``runs`` table with all metrics in a single JSON column and no receivers or
histograms tables.  Version 1 -> 2 adds the sync metric columns (pattern
sync, SEEDS S3) to ``runs`` and ``receivers`` and moves their values out of
``metrics_extra``, where version 1 kept them.  Version 2 -> 3 does the same
for a sender's schedule split (``sched_own_*``, ``sched_held_*``) and the
hosts' UDP receive-buffer drops (``udp_rcvbuf_errors``).  Version 3 -> 4 adds
where each run happened: ``backend`` (older runs: "namespace") and
``backend_info``.  Version 4 -> 5 creates the (empty) tables of run timelines:
``workloads``, ``flows``, ``series``, ``events``, ``recovery`` (docs/timelines.md).
Version 5 -> 6 creates the (empty) table ``distance`` (issue 16: delivery by sender-receiver distance).
Version 6 -> 7 creates the (empty) tables ``processes`` and ``process_series`` (the user's own processes).
docs/results-format.md describes every step.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import duckdb

from roughnet.errors import ResultsError
from roughnet.results import schema

log = logging.getLogger(__name__)

#: Sentinel returned by ``read_version`` for a database with no tables at all.
EMPTY = -1

#: The draft (version 0) layout, kept to build test databases and to document it.
V0_STATEMENTS = (
    "CREATE TABLE meta (key VARCHAR NOT NULL, value VARCHAR)",
    "INSERT INTO meta VALUES ('format_version', '0')",
    """CREATE TABLE sweeps (sweep_id VARCHAR, scenario VARCHAR, source VARCHAR,
        axes JSON, created_at TIMESTAMP)""",
    """CREATE TABLE runs (sweep_id VARCHAR, run_id VARCHAR, run_index INTEGER,
        scenario VARCHAR, params JSON, status VARCHAR, failure_reason VARCHAR,
        started_at TIMESTAMP, duration_s DOUBLE, engine VARCHAR, metrics JSON)""",
)


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()
    return {r[0] for r in rows}


def read_version(con: duckdb.DuckDBPyConnection, where: str) -> int:
    """The format version stored in ``meta``; ``EMPTY`` for a database without tables.

    ``where`` names the file in error messages.
    """
    tables = _tables(con)
    if not tables:
        return EMPTY
    if "meta" not in tables:
        raise ResultsError(
            f"{where} is a DuckDB file but not a roughnet results database "
            f"(it has tables {sorted(tables)} and no 'meta' table); "
            "expected a file written by roughnet, or point --results at another folder"
        )
    row = con.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
    if row is None or row[0] is None:
        raise ResultsError(
            f"{where}: table 'meta' has no format_version row; expected an integer format version"
        )
    try:
        return int(row[0])
    except ValueError:
        raise ResultsError(
            f"{where}: format_version is {row[0]!r}; expected an integer"
        ) from None


def _v0_to_v1(con: duckdb.DuckDBPyConnection) -> None:
    """Version 0 -> 1: metrics JSON becomes one column per metric; new tables."""
    con.execute("ALTER TABLE sweeps RENAME TO sweeps_v0")
    con.execute("ALTER TABLE runs RENAME TO runs_v0")
    for stmt in schema.create_statements(1):
        if stmt.startswith("CREATE TABLE meta"):
            continue
        con.execute(stmt)
    con.execute(
        """INSERT INTO sweeps (sweep_id, scenario, source, axes, report, machine, run_count,
               scenario_text, created_at, updated_at)
           SELECT s.sweep_id, s.scenario, s.source, s.axes, '{}', NULL,
                  (SELECT count(*) FROM runs_v0 r WHERE r.sweep_id = s.sweep_id),
                  NULL, s.created_at, s.created_at
           FROM sweeps_v0 s"""
    )
    metric_exprs = ",\n".join(
        f"TRY_CAST(json_extract_string(metrics, '$.{m.name}') AS {m.sql_type})"
        for m in schema.metrics_of(1)
    )
    metric_cols = ", ".join(m.name for m in schema.metrics_of(1))
    con.execute(
        f"""INSERT INTO runs (sweep_id, run_id, run_index, scenario, repeat, status,
               failure_reason, started_at, duration_s, engine, params, validity_reasons,
               recorded_at, {metric_cols})
           SELECT sweep_id, run_id, run_index, scenario, 0, status, failure_reason,
                  started_at, duration_s, engine, params, '[]', started_at,
                  {metric_exprs}
           FROM runs_v0"""
    )
    con.execute("DROP TABLE runs_v0")
    con.execute("DROP TABLE sweeps_v0")


def _column_value(metric: schema.Metric, value: Any) -> Any:
    """A metrics_extra JSON value as the column's type; None when it does not fit (kept in JSON)."""
    if value is None:
        return None
    if metric.sql_type == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if metric.sql_type == "BIGINT":
        return int(value) if float(value).is_integer() else None
    return float(value)


def _move_extra_to_columns(con: duckdb.DuckDBPyConnection, table: str, metrics: list[schema.Metric]) -> int:
    """Add ``metrics`` as columns of ``table`` and move their values out of ``metrics_extra``.

    A value of the wrong type stays in metrics_extra (nothing is lost).  Returns rows changed."""
    for m in metrics:
        con.execute(f"ALTER TABLE {table} ADD COLUMN {m.name} {m.sql_type}")
    rows = con.execute(
        f"SELECT rowid, metrics_extra FROM {table} WHERE metrics_extra IS NOT NULL"
    ).fetchall()
    updates = []
    for rowid, text in rows:
        try:
            extra = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(extra, dict):
            continue
        values: list[Any] = []
        moved = False
        for m in metrics:
            v = _column_value(m, extra.get(m.name))
            if m.name in extra and (v is not None or extra[m.name] is None):  # a null is the column's null
                del extra[m.name]
                moved = True
            values.append(v)
        if moved:
            rest = json.dumps(extra, ensure_ascii=False) if extra else None
            updates.append([*values, rest, rowid])
    if updates:
        sets = ", ".join(f"{m.name} = ?" for m in metrics)
        con.executemany(f"UPDATE {table} SET {sets}, metrics_extra = ? WHERE rowid = ?", updates)
    return len(updates)


def _add_metric_columns(con: duckdb.DuckDBPyConnection, version: int, what: str) -> None:
    """The metric columns new in ``version`` on every table with metric columns that the file has (runs,
    receivers; workloads and flows from format 5 on), values moved from metrics_extra."""
    added = [m for m in schema.METRICS if m.since == version]
    present = _tables(con)
    for table in (t for t in ("runs", "receivers", "workloads", "flows") if t in present):
        n = _move_extra_to_columns(con, table, added)
        log.info("format %d: %d %s row(s) had %s moved out of metrics_extra", version, n, table, what)


def _v1_to_v2(con: duckdb.DuckDBPyConnection) -> None:
    """Version 1 -> 2: sync metric columns on runs and receivers, values moved from metrics_extra."""
    _add_metric_columns(con, 2, "sync metrics")


def _v2_to_v3(con: duckdb.DuckDBPyConnection) -> None:
    """Version 2 -> 3: sender held / own lag and UDP receive-buffer drop columns, values moved from
    metrics_extra."""
    _add_metric_columns(con, 3, "schedule split / UDP receive-buffer drops")


def _v3_to_v4(con: duckdb.DuckDBPyConnection) -> None:
    """Version 3 -> 4: where each run happened (``backend``, ``backend_info``); every older run was made
    by the namespace backend, the only one there was."""
    for name, sql_type in schema.RUN_BACKEND:
        con.execute(f"ALTER TABLE runs ADD COLUMN {name} {sql_type}")
    con.execute("UPDATE runs SET backend = 'namespace'")


def _v4_to_v5(con: duckdb.DuckDBPyConnection) -> None:
    """Version 4 -> 5: the tables of run timelines, empty (older runs had one workload and no events)."""
    for stmt in schema.create_statements(5)[-len(schema.timeline_tables(5)):]:
        con.execute(stmt)


def _v5_to_v6(con: duckdb.DuckDBPyConnection) -> None:
    """Version 5 -> 6: the (empty) table ``distance`` (older runs recorded no distances)."""
    con.execute(schema.create_statements(6)[-1])


def _v6_to_v7(con: duckdb.DuckDBPyConnection) -> None:
    """Version 6 -> 7: the (empty) tables ``processes`` and ``process_series`` (older runs had no user processes)."""
    for stmt in schema.create_statements(7)[-2:]:
        con.execute(stmt)


#: from-version -> function upgrading a connection to from-version + 1.
MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {
    0: _v0_to_v1,
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
}


def upgrade(con: duckdb.DuckDBPyConnection, from_version: int, where: str) -> None:
    """Upgrade to ``schema.FORMAT_VERSION`` in one transaction (all steps or none)."""
    missing = [v for v in range(from_version, schema.FORMAT_VERSION) if v not in MIGRATIONS]
    if missing:
        raise ResultsError(
            f"{where} has format version {from_version} and no upgrade exists from "
            f"version {missing[0]}; expected a version between "
            f"{min(MIGRATIONS, default=schema.FORMAT_VERSION)} and {schema.FORMAT_VERSION}"
        )
    con.execute("BEGIN TRANSACTION")
    try:
        for v in range(from_version, schema.FORMAT_VERSION):
            log.info("upgrading %s from format version %d to %d", where, v, v + 1)
            MIGRATIONS[v](con)
        con.execute(
            "UPDATE meta SET value = ? WHERE key = 'format_version'",
            [str(schema.FORMAT_VERSION)],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def create(con: duckdb.DuckDBPyConnection, version: int | None = None) -> None:
    """Create the layout of ``version`` (default: the current one) in an empty database,
    in one transaction.  Older versions build test files for the upgrade steps."""
    if version is None:
        version = schema.FORMAT_VERSION
    con.execute("BEGIN TRANSACTION")
    try:
        for stmt in schema.create_statements(version):
            con.execute(stmt)
        con.execute(
            "INSERT INTO meta VALUES ('format_version', ?), ('created_by', ?)",
            [str(version), "roughnet"],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
