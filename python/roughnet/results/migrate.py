"""Reading a results database's format version and upgrading older layouts.

Owns: ``read_version`` (what layout a DuckDB connection holds), the
``MIGRATIONS`` table (one function per step, version N -> N+1) and
``upgrade`` (runs the steps in one transaction).  The current layout itself is
defined in ``schema``; opening files, backups and locking live in ``store``.

Version 0 is the draft layout of the project skeleton (never released): one
``runs`` table with all metrics in a single JSON column and no receivers or
histograms tables.  Its migration exists so the mechanism is exercised by
tests before a real version 2 needs it; docs/results-format.md describes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
    for stmt in schema.create_statements():
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
        for m in schema.METRICS
    )
    metric_cols = ", ".join(schema.METRIC_NAMES)
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


#: from-version -> function upgrading a connection to from-version + 1.
MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {0: _v0_to_v1}


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


def create(con: duckdb.DuckDBPyConnection) -> None:
    """Create the current layout in an empty database, in one transaction."""
    con.execute("BEGIN TRANSACTION")
    try:
        for stmt in schema.create_statements():
            con.execute(stmt)
        con.execute(
            "INSERT INTO meta VALUES ('format_version', ?), ('created_by', ?)",
            [str(schema.FORMAT_VERSION), "roughnet"],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
