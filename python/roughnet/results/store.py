"""The results store: one DuckDB file plus a folder of artifacts per run.

Owns opening (version check, upgrade with a backup, locking errors), writing
sweeps and runs (each ``record_run`` is one transaction, so a crash or Ctrl-C
between or during runs never leaves a half-written run), reading them back,
resolving sweep references and exporting.  The layout is in ``schema``, the
upgrades in ``migrate``; plots and tables are the report's job.

Sharing the file: DuckDB lets one process write, or several read, never both.
``roughnet run`` opens its store with ``hold=False``: it keeps ``writer.lock``
(one sweep writer at a time) for the whole sweep but the database only while it
writes a run, so ``roughnet results``/``report`` can read a sweep that is still
running; each side waits (``lock_wait_s``) for the other's short hold.

Layout on disk (docs/results-format.md)::

    <root>/results.duckdb
    <root>/runs/<sweep_id>/<run_id>/record.json   (+ the runner's artifacts)
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import duckdb

from roughnet import __version__
from roughnet.errors import ResultsError, UnknownResults
from roughnet.results import migrate, schema
from roughnet.results.rows import (  # noqa: F401 - signal_inside: the runner's, importable from here
    HISTOGRAM_TYPES,
    RUN_ID_RE,
    SWEEP_ID_RE,
    arrow_insert,
    as_utc,
    base_type,
    check_id,
    from_json,
    ident,
    iso_text,
    machine_info,
    metrics_dict,
    now_utc,
    receiver_types,
    signal_inside,
    split_metrics,
    timeline_table_columns,
    to_json,
)

log = logging.getLogger(__name__)

DB_NAME = "results.duckdb"
#: Held (flock) by a ``hold=False`` writer for its whole life: one ``roughnet run`` per results folder.
WRITER_LOCK = "writer.lock"
#: How long a ``hold=False`` writer waits for readers to let go of the database before a write.
WRITER_WAIT_S = 600.0
#: How long a command reading results waits for a running sweep's write to finish.
READER_WAIT_S = 15.0
RUNS_DIR = "runs"
#: A run's record in its folder (written before the commit; ``Store.import_records`` loads it).
RECORD_FILE = "record.json"
#: Largest scenario file copied into the sweeps table.
MAX_SCENARIO_TEXT = 1_000_000

class NeedsUpgrade(ResultsError):
    """A read-only open of a file in an older format (opening it for writing upgrades it)."""


class Store:
    """A results folder.  One writer process at a time (DuckDB's file lock).

    ``Store(root)`` creates ``root`` if needed; ``Store(root, create=False)``
    refuses a folder without a database.  ``read_only=True`` opens without the
    write lock (several readers may share it) and cannot upgrade an old file.
    ``hold=False`` (a writer: ``roughnet run``) takes ``writer.lock`` instead and
    opens the database only for each write, waiting up to ``WRITER_WAIT_S`` for
    readers.  ``lock_wait_s``: how long opening waits for another process's hold.
    """

    def __init__(self, root: Path, create: bool = True, *, read_only: bool = False, hold: bool = True,
                 lock_wait_s: float = 0.0) -> None:
        self.root = Path(root)
        self.path = self.root / DB_NAME
        self.read_only = read_only
        self.hold = hold or read_only
        self._con: duckdb.DuckDBPyConnection | None = None
        self._closed = False
        self._writer_lock: int | None = None
        if not self.path.exists():
            if not create or read_only:
                raise UnknownResults(
                    f"no results database at {self.path}; expected a folder written by "
                    "`roughnet run` (set it with --results or $ROUGHNET_RESULTS)"
                )
            self.root.mkdir(parents=True, exist_ok=True)
        if not self.hold:
            self._take_writer_lock()
        try:
            con = self._connect(lock_wait_s)
        except BaseException:
            self._drop_writer_lock()
            raise
        try:
            version = migrate.read_version(con, str(self.path))
            if version == migrate.EMPTY:
                if read_only:
                    raise ResultsError(f"{self.path} holds no tables; expected a results database")
                migrate.create(con)
            elif version > schema.FORMAT_VERSION:
                raise ResultsError(
                    f"{self.path} has results format version {version}, newer than this "
                    f"roughnet ({__version__}) reads (up to {schema.FORMAT_VERSION}); "
                    "expected an older file: upgrade roughnet to read it"
                )
            elif version < schema.FORMAT_VERSION:
                if read_only:
                    raise NeedsUpgrade(
                        f"{self.path} has results format version {version} and needs an "
                        f"upgrade to {schema.FORMAT_VERSION}; open it once for writing "
                        "(any roughnet command does when no other roughnet has it open)"
                    )
                con = self._backup_and_upgrade(con, version)
        except BaseException:
            con.close()
            self._drop_writer_lock()
            raise
        self._con = con
        self._release()

    # ------------------------------------------------------------------ opening

    def _take_writer_lock(self) -> None:
        path = self.root / WRITER_LOCK
        # O_NOFOLLOW: the lock is truncated and written as root; a symlink in its place (anyone who can write
        # the results folder could plant one) would have us overwrite its target (issue 26).
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ResultsError(f"{path} is a symlink; refusing to follow it (roughnet writes its PID into the "
                                   "lock); expected a regular file or none: remove it") from None
            raise ResultsError(f"cannot open {path} ({e.strerror or e}); expected a writable results folder") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ResultsError(f"{path} is not a regular file; expected a regular file or none: remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ResultsError(
                f"results folder {self.root} is in use by another process (a `roughnet run`, PID {holder}, "
                f"holds {path.name}); expected it free: wait for that run to finish or use another --results"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._writer_lock = fd

    def _drop_writer_lock(self) -> None:
        if self._writer_lock is not None:
            os.close(self._writer_lock)  # closing the descriptor releases the flock
            self._writer_lock = None

    def _connect(self, wait_s: float = 0.0) -> duckdb.DuckDBPyConnection:
        """A connection; a lock held by another process is waited for up to ``wait_s``."""
        start = time.monotonic()
        deadline = start + wait_s
        pause, told = 0.02, False
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=self.read_only)
            except duckdb.IOException as e:
                msg = str(e)
                if "lock" not in msg.lower():
                    raise ResultsError(f"cannot open results database {self.path}: {msg}") from None
                if time.monotonic() >= deadline:
                    raise ResultsError(
                        f"results database {self.path} is in use by another process, {_lock_holder(msg, self.root)}"
                        f", still after waiting {wait_s:g} s; expected it free: wait for that process to finish "
                        "(or end it), or use another --results"
                    ) from None
                if not told and time.monotonic() - start > 2:
                    log.warning("waiting for %s: another process has it open", self.path)
                    told = True
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
            except duckdb.Error as e:
                raise ResultsError(
                    f"cannot open results database {self.path}: {e}; expected a DuckDB file"
                ) from None

    def _release(self) -> None:
        """A ``hold=False`` store lets go of the database between operations (readers can open it)."""
        if not self.hold and self._con is not None:
            # forget it first: an interrupt (the CLI raises Interrupted from its signal handler) between the two
            # steps must not leave a closed connection here for the next operation ("Connection already closed")
            con, self._con = self._con, None
            con.close()

    def _backup_and_upgrade(
        self, con: duckdb.DuckDBPyConnection, version: int
    ) -> duckdb.DuckDBPyConnection:
        con.execute("CHECKPOINT")
        con.close()
        backup = self.path.with_name(f"{DB_NAME}.v{version}.bak")
        if not backup.exists():
            shutil.copy2(self.path, backup)
            log.info("backed up %s to %s before upgrading", self.path, backup)
        con = self._connect()
        try:
            migrate.upgrade(con, version, str(self.path))
        except BaseException:
            con.close()
            raise
        return con

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._closed:
            raise ResultsError(f"results store {self.path} is closed; expected an open store")
        if self._con is None:
            self._con = self._connect(WRITER_WAIT_S)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            con, self._con = self._con, None  # (as in _release)
            con.close()
        self._closed = True
        self._drop_writer_lock()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def format_version(self) -> int:
        return migrate.read_version(self.con, str(self.path))

    # ------------------------------------------------------------------ writing

    def _transaction(self, statements: list[Any]) -> None:
        """Run (sql, params, many) statements, or callables taking the connection, in one transaction; roll back
        on anything."""
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for item in statements:
                if callable(item):
                    item(con)
                    continue
                sql, params, many = item
                if many:
                    if params:
                        con.executemany(sql, params)
                else:
                    con.execute(sql, params)
            con.execute("COMMIT")
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except duckdb.TransactionException:  # an interrupt before BEGIN took effect or after COMMIT did:
                pass  # nothing to roll back; the interrupt goes on (found by bench/self_chaos.py)
            raise
        finally:
            self._release()

    def begin_sweep(self, sweep: Any) -> None:
        """Insert or refresh the sweeps row of a ``runspec.Sweep`` (keeps created_at)."""
        sweep_id = check_id(sweep.sweep_id, "sweep id", SWEEP_ID_RE)
        text = None
        try:
            src = Path(sweep.source)
            if src.is_file() and src.stat().st_size <= MAX_SCENARIO_TEXT:
                text = src.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            log.debug("scenario text of %s not stored: %s", sweep.source, e)
        row = self.con.execute(
            "SELECT created_at FROM sweeps WHERE sweep_id = ?", [sweep_id]
        ).fetchone()
        now = now_utc()
        created = row[0] if row else now
        self._transaction(
            [
                ("DELETE FROM sweeps WHERE sweep_id = ?", [sweep_id], False),
                (
                    "INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        sweep_id,
                        sweep.scenario,
                        str(sweep.source),
                        getattr(sweep, "description", "") or "",
                        to_json(dict(sweep.axes)),
                        to_json(dict(getattr(sweep, "report", {}) or {})),
                        to_json(machine_info()),
                        len(sweep.runs),
                        text,
                        created,
                        now,
                    ],
                    False,
                ),
            ]
        )

    def record_run(self, record: dict[str, Any]) -> None:
        """Store one run record (see docs/results-format.md) in one transaction.

        Replaces a run already stored under the same (sweep_id, run_id), its
        receivers and histograms, and its rows of the timeline tables (``workloads``,
        ``flows``, ``series``, ``events``, ``recovery``: written from the record's lists of
        those names when it has them, docs/timelines.md).  Everything is validated before the
        transaction starts; on any error (or KeyboardInterrupt) nothing is kept.
        """
        if not isinstance(record, dict):
            raise ResultsError(f"run record is {type(record).__name__}; expected a dict")
        sweep_id = check_id(record.get("sweep_id"), "record.sweep_id", SWEEP_ID_RE)
        run_id = check_id(record.get("run_id"), "record.run_id", RUN_ID_RE)
        where = f"run {sweep_id}/{run_id}"
        status = record.get("status")
        if status not in schema.STATUSES:
            raise ResultsError(f"{where}: status is {status!r}; expected one of {schema.STATUSES}")
        validity = record.get("validity")
        if validity is not None and validity not in schema.VALIDITIES:
            raise ResultsError(
                f"{where}: validity is {validity!r}; expected one of {schema.VALIDITIES} or null"
            )
        reasons = record.get("validity_reasons") or []
        if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
            raise ResultsError(f"{where}: validity_reasons is {reasons!r}; expected a list of strings")

        scalars: dict[str, Any] = {
            "sweep_id": sweep_id,
            "run_id": run_id,
            "run_index": record.get("index"),
            "scenario": record.get("scenario"),
            "repeat": record.get("repeat", 0),
            "seed": record.get("seed"),
            "status": status,
            "failure_reason": record.get("failure_reason"),
            "stderr_tail": record.get("stderr_tail"),
            "started_at": as_utc(record.get("started_at"), f"{where}: started_at"),
            "duration_s": record.get("duration_s"),
            "engine": record.get("engine"),
            "pattern": record.get("pattern"),
            "protocol": record.get("protocol"),
            "validity": validity,
        }
        jsons = {name: to_json(record.get(name)) for name in schema.RUN_JSON}
        jsons["validity_reasons"] = to_json(reasons)
        metric_values, extra = split_metrics(record.get("metrics"), f"{where}: metrics")
        run_row = (
            [scalars[n] for n, _ in schema.RUN_SCALARS]
            + [jsons[n] for n in schema.RUN_JSON]
            + [extra, now_utc()]
            + metric_values
            + ([record.get("backend") or "namespace", to_json(record.get("backend_info"))]
               if schema.FORMAT_VERSION >= schema.BACKEND_SINCE else [])
        )

        receiver_rows = []
        for i, rec in enumerate(record.get("receivers") or []):
            host = rec.get("host") if isinstance(rec, dict) else None
            if not isinstance(host, str) or not host:
                raise ResultsError(f"{where}: receivers[{i}].host is {host!r}; expected a host name")
            values, rextra = split_metrics(rec.get("metrics"), f"{where}: receivers[{i}].metrics")
            receiver_rows.append([sweep_id, run_id, host, rextra, *values])

        hist_rows = []
        for i, h in enumerate(record.get("histograms") or []):
            if not isinstance(h, dict):
                raise ResultsError(f"{where}: histograms[{i}] is {h!r}; expected an object")
            kind, hdr = h.get("kind"), h.get("hdr")
            if kind not in schema.HISTOGRAM_KINDS:
                raise ResultsError(
                    f"{where}: histograms[{i}].kind is {kind!r}; expected one of {schema.HISTOGRAM_KINDS}"
                )
            if isinstance(hdr, bytes):
                hdr = hdr.decode("ascii")
            if not isinstance(hdr, str) or not hdr:
                raise ResultsError(
                    f"{where}: histograms[{i}].hdr is {hdr!r}; expected a base64 HdrHistogram string"
                )
            hist_rows.append([sweep_id, run_id, str(h.get("host") or ""), kind, h.get("count"), hdr])

        key = [sweep_id, run_id]
        timeline: list[Any] = []
        if schema.FORMAT_VERSION >= schema.TIMELINE_SINCE:  # (tests write older formats with this code)
            for table in schema.TIMELINE_TABLES:
                tcols = timeline_table_columns(record, table, sweep_id, run_id, where)
                timeline.append((f"DELETE FROM {table} WHERE sweep_id = ? AND run_id = ?", key, False))
                if tcols and tcols[0]:
                    timeline.append(arrow_insert(table, None, columns=tcols))
        cols = schema.run_columns()
        # The record goes to its folder first (atomically): a commit that fails, or a database that is lost,
        # does not lose the run; `roughnet import` (``import_records``) stores it later.
        kept = self._write_record_file(sweep_id, run_id, record)
        try:
            self._commit_run(key, timeline, cols, run_row, receiver_rows, hist_rows)
        except (ResultsError, duckdb.Error, OSError) as e:
            if signal_inside(e):  # an interrupt, not a fault of the store: the caller stores it again
                raise
            again = (f"; the record is kept in {kept}: `roughnet import {kept.parent}` stores it later"
                     if kept is not None else "")
            raise ResultsError(f"{where}: storing it in {self.path} failed: {e}{again}") from None

    def _commit_run(self, key: list[Any], timeline: list[Any], cols: list[str], run_row: list[Any],
                    receiver_rows: list[list[Any]], hist_rows: list[list[Any]]) -> None:
        """The transaction of ``record_run``: replace the run's rows."""
        self._transaction(
            [
                *timeline,
                ("DELETE FROM histograms WHERE sweep_id = ? AND run_id = ?", key, False),
                ("DELETE FROM receivers WHERE sweep_id = ? AND run_id = ?", key, False),
                ("DELETE FROM runs WHERE sweep_id = ? AND run_id = ?", key, False),
                (
                    f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    run_row,
                    False,
                ),
                *([arrow_insert("receivers", receiver_rows, receiver_types())] if receiver_rows else []),
                *([arrow_insert("histograms", hist_rows, HISTOGRAM_TYPES)] if hist_rows else []),
            ]
        )

    def _write_record_file(self, sweep_id: str, run_id: str, record: dict[str, Any]) -> Path | None:
        """The record beside the artifacts, ``record.json``, written atomically (a temporary file, fsync,
        rename) before the commit; its path, or None when it could not be written (logged: the run then
        depends on the commit alone)."""
        path = None
        try:
            folder = self.run_dir(sweep_id, run_id)
            path = folder / RECORD_FILE
            tmp = folder / f".{RECORD_FILE}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                # compact: the C encoder (indent makes json use its pure-Python one: 41 s for a 100-car run's record)
                f.write(json.dumps(record, default=str, separators=(",", ":")))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return path
        except (OSError, TypeError, ValueError) as e:
            log.warning("could not write %s: %s", path or f"the record of run {sweep_id}/{run_id}", e)
            return None

    def import_records(self, source: Path) -> list[tuple[str, str]]:
        """Store the run records found at ``source`` (a ``record.json``, a run folder, a sweep folder or a
        whole results folder: every ``record.json`` below it), each as ``record_run`` does (replacing a run
        stored under the same ids); a sweep this database lacks gets a row made from its records.  Returns the
        (sweep_id, run_id) stored, in order.  ResultsError for an unreadable record (nothing of it stored)."""
        source = Path(source)
        files = [source] if source.is_file() else sorted(source.rglob(RECORD_FILE))
        if not files:
            raise ResultsError(f"no {RECORD_FILE} in {source}; expected a run, sweep or results folder "
                               "written by `roughnet run`")
        records = []
        for f in files:
            try:
                rec = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ResultsError(f"cannot read run record {f}: {e}; expected the JSON `roughnet run` wrote") from None
            if not isinstance(rec, dict):
                raise ResultsError(f"{f} holds {type(rec).__name__}; expected a run record (a JSON object)")
            records.append((f, rec))
        known = set(self._ids())
        for sweep_id in dict.fromkeys(str(r.get("sweep_id")) for _, r in records):
            if sweep_id not in known:
                self._sweep_from_records(sweep_id, [(f, r) for f, r in records if r.get("sweep_id") == sweep_id])
        stored = []
        for _, rec in records:
            self.record_run(rec)
            stored.append((str(rec["sweep_id"]), str(rec["run_id"])))
        return stored

    def _sweep_from_records(self, sweep_id: str, records: list[tuple[Path, dict[str, Any]]]) -> None:
        """A sweeps row for imported records whose sweep this database does not have: scenario and axes
        (every parameter's values) from the records, the scenario file unknown."""
        check_id(sweep_id, "record.sweep_id", SWEEP_ID_RE)
        axes: dict[str, list[Any]] = {}
        for _, rec in records:
            for k, v in (rec.get("params") or {}).items():
                if v not in axes.setdefault(k, []):
                    axes[k].append(v)
        now = now_utc()
        folder = records[0][0].parent.parent
        self._transaction([(
            "INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [sweep_id, records[0][1].get("scenario"), f"(imported from {folder})", "", to_json(axes), to_json({}),
             to_json(machine_info()), len(records), None, now, now],
            False,
        )])

    def run_dir(self, sweep_id: str, run_id: str) -> Path:
        """``<root>/runs/<sweep_id>/<run_id>/``, created if missing."""
        check_id(sweep_id, "sweep id", SWEEP_ID_RE)
        check_id(run_id, "run id", RUN_ID_RE)
        folder = self.root / RUNS_DIR / sweep_id / run_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # ------------------------------------------------------------------ reading

    def _dicts(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def sweeps(self) -> list[dict[str, Any]]:
        """Every stored sweep, oldest first, with counts of stored runs by status.

        Keys: sweep_id, scenario, source, description, axes, report, machine
        (dicts), run_count (planned), created_at, updated_at (ISO, UTC),
        runs_stored, runs_ok, runs_failed.  The scenario file text is in ``sweep()``.
        """
        return self._sweep_rows(None)

    def _sweep_rows(self, sweep_id: str | None) -> list[dict[str, Any]]:
        where = "" if sweep_id is None else "WHERE s.sweep_id = ?"
        text = "" if sweep_id is None else ", any_value(s.scenario_text) AS scenario_text"
        rows = self._dicts(
            f"""SELECT s.sweep_id, s.scenario, s.source, s.description, s.axes, s.report,
                      s.machine, s.run_count, s.created_at, s.updated_at,
                      count(r.run_id) AS runs_stored,
                      count(r.run_id) FILTER (WHERE r.status = 'ok') AS runs_ok,
                      count(r.run_id) FILTER (WHERE r.status = 'failed') AS runs_failed
                      {text}
               FROM sweeps s LEFT JOIN runs r USING (sweep_id) {where}
               GROUP BY s.sweep_id, s.scenario, s.source, s.description, s.axes, s.report,
                        s.machine, s.run_count, s.created_at, s.updated_at
               ORDER BY s.created_at, s.sweep_id""",
            [] if sweep_id is None else [sweep_id],
        )
        for row in rows:
            for key in ("axes", "report", "machine"):
                row[key] = from_json(row[key]) or {}
            row["created_at"] = iso_text(row["created_at"])
            row["updated_at"] = iso_text(row["updated_at"])
        return rows

    def sweep(self, sweep_id: str) -> dict[str, Any]:
        """One sweeps row as in ``sweeps()`` plus ``scenario_text``; ResultsError if missing."""
        rows = self._sweep_rows(sweep_id)
        if not rows:
            raise UnknownResults(
                f"no sweep {sweep_id!r} in {self.path}; expected one of {self._ids() or 'none stored'}"
            )
        return rows[0]

    def _ids(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT sweep_id FROM sweeps ORDER BY created_at").fetchall()]

    def completed_run_ids(self, sweep_id: str, include_failed: bool = True, include_invalid: bool = True) -> set[str]:
        """Run ids of ``sweep_id`` stored as ok or failed (``--resume`` skips them); only ok ones
        without ``include_failed`` (``--retry-failed`` runs the failed ones again); without
        ``include_invalid`` not the ok ones judged invalid either (``--retry-invalid``)."""
        statuses = ("ok", "failed") if include_failed else ("ok",)
        valid = "" if include_invalid else " AND validity IS DISTINCT FROM 'invalid'"
        rows = self.con.execute(
            f"SELECT run_id FROM runs WHERE sweep_id = ? AND status IN ({', '.join('?' * len(statuses))}){valid}",
            [sweep_id, *statuses],
        ).fetchall()
        return {r[0] for r in rows}

    def runs(self, sweep_id: str) -> list[dict[str, Any]]:
        """The stored runs of a sweep in plan order, shaped like run records.

        Each dict has the record's keys (``index``, ``params``, ``metrics`` with
        every metric name, None where missing, ``receivers``...) plus
        ``recorded_at``; histograms come from ``histograms()``.
        """
        rows = self._dicts(
            f"SELECT {', '.join(schema.run_columns())} FROM runs WHERE sweep_id = ? "
            "ORDER BY run_index, repeat, run_id",
            [sweep_id],
        )
        receivers: dict[str, list[dict[str, Any]]] = {}
        for rec in self._dicts(
            f"SELECT {', '.join(schema.receiver_columns())} FROM receivers WHERE sweep_id = ? "
            "ORDER BY run_id, host",
            [sweep_id],
        ):
            run_id = rec.pop("run_id")
            rec.pop("sweep_id")
            receivers.setdefault(run_id, []).append(
                {"host": rec.pop("host"), "metrics": metrics_dict(rec)}
            )
        out = []
        for row in rows:
            row["index"] = row.pop("run_index")
            for name in schema.RUN_JSON:
                row[name] = from_json(row[name])
            if "backend_info" in row:
                row["backend_info"] = from_json(row["backend_info"])
            row["validity_reasons"] = row["validity_reasons"] or []
            row["started_at"] = iso_text(row["started_at"])
            row["recorded_at"] = iso_text(row["recorded_at"])
            row["metrics"] = metrics_dict(row)
            row["receivers"] = receivers.get(row["run_id"], [])
            out.append(row)
        return out

    def histograms(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """Stored histograms (``hdr`` is the base64 HdrHistogram, values in ns)."""
        sql = "SELECT * FROM histograms WHERE sweep_id = ?"
        params: list[Any] = [sweep_id]
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        return self._dicts(sql + " ORDER BY run_id, host, kind", params)

    def _timeline_table(self, table: str, sweep_id: str, run_id: str | None) -> list[dict[str, Any]]:
        """Rows of a timeline table, in plan order of the runs, then in the order of the record's list."""
        if schema.FORMAT_VERSION < schema.TIMELINE_SINCE:
            return []
        cols = [n for n, _ in schema.timeline_columns(table)]
        order = "t.\"index\"" if table == "events" else "t.position"
        sql = (f"SELECT {', '.join('t.' + ident(c) for c in cols)} FROM {table} t "
               "LEFT JOIN runs r ON r.sweep_id = t.sweep_id AND r.run_id = t.run_id WHERE t.sweep_id = ?")
        params: list[Any] = [sweep_id]
        if run_id is not None:
            sql += " AND t.run_id = ?"
            params.append(run_id)
        rows = self._dicts(sql + f" ORDER BY r.run_index, r.repeat, t.run_id, {order}", params)
        for row in rows:
            row.pop("position", None)
            if table in ("workloads", "flows"):
                metrics = metrics_dict(row)
                if table == "flows":
                    metrics["end_reason"] = row.pop("end_reason")
                else:
                    for key in ("senders", "receivers"):
                        row[key] = from_json(row[key])
                    row["validity_reasons"] = from_json(row["validity_reasons"]) or []
                row["metrics"] = metrics
            else:
                row.update(from_json(row.pop("extra")) or {})
        return rows

    def workloads(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored workloads of a sweep's runs (or one run's), as in the record's ``workloads`` plus
        ``sweep_id`` and ``run_id``; ``metrics`` has every metric name (None where missing)."""
        return self._timeline_table("workloads", sweep_id, run_id)

    def flows(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored flows (one per workload, sender and receiver), as in the record's ``flows``; ``metrics``
        has every metric name and ``end_reason``."""
        return self._timeline_table("flows", sweep_id, run_id)

    def series(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored per-interval rows of every flow, as in the record's ``series``."""
        return self._timeline_table("series", sweep_id, run_id)

    def events(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored events, by run and index, as in the record's ``events``."""
        return self._timeline_table("events", sweep_id, run_id)

    def recovery(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored recovery rows (per fault and flow), as in the record's ``recovery``."""
        return self._timeline_table("recovery", sweep_id, run_id)

    def distance(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored rows of delivery by distance (per flow, send interval and distance bin), as in the record's
        ``distance``."""
        return self._timeline_table("distance", sweep_id, run_id)

    def processes(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The stored rows of the runs' user processes (one per [[process]] of a run), as in the record's
        ``processes``."""
        return self._timeline_table("processes", sweep_id, run_id)

    def process_series(self, sweep_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """Per process, interval and named value (``source`` "tcp" or "app"), as in the record's
        ``process_series``."""
        return self._timeline_table("process_series", sweep_id, run_id)

    def timelines(self, sweep_id: str, run_id: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """run_id -> {table: rows} for the runs of a sweep (or one run) with rows in any timeline table, in plan
        order; each run has every key of ``schema.TIMELINE_TABLES`` but ``distance`` (``distance()`` reads it)
        (an empty list where it has none)."""
        out: dict[str, dict[str, list[dict[str, Any]]]] = {}
        names = [t for t in schema.TIMELINE_TABLES if t not in ("distance", "processes", "process_series")]
        tables = {t: self._timeline_table(t, sweep_id, run_id) for t in names}
        order = [r[0] for r in self.con.execute(
            "SELECT run_id FROM runs WHERE sweep_id = ? ORDER BY run_index, repeat, run_id", [sweep_id]).fetchall()]
        for table, rows in tables.items():
            for row in rows:
                out.setdefault(row["run_id"], {t: [] for t in names})[table].append(row)
        rank = {rid: i for i, rid in enumerate(order)}
        return dict(sorted(out.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))

    def resolve_sweep(self, ref: str) -> str:
        """A sweep id from a full id, a scenario name (its latest sweep) or a unique id prefix."""
        rows = self.con.execute(
            "SELECT sweep_id, scenario FROM sweeps ORDER BY created_at, sweep_id"
        ).fetchall()
        ids = [r[0] for r in rows]
        if ref in ids:
            return ref
        by_name = [sid for sid, scen in rows if scen == ref]
        if by_name:
            return by_name[-1]
        prefixed = [sid for sid in ids if sid.startswith(ref)] if ref else []
        if len(prefixed) == 1:
            return prefixed[0]
        if not ids:
            raise UnknownResults(f"no sweep matches {ref!r}: {self.path} holds no sweeps yet")
        candidates = prefixed or ids
        what = "several sweeps start with" if prefixed else "no sweep matches"
        raise UnknownResults(
            f"{what} {ref!r}; expected a full sweep id, a unique prefix or a scenario name, "
            f"one of: {', '.join(candidates)}"
        )

    # ------------------------------------------------------------------ export

    def param_names(self, sweep_id: str) -> list[str]:
        """Swept parameter names: the sweep's axes in file order, then any other run param."""
        names: list[str] = []
        row = self.con.execute("SELECT axes FROM sweeps WHERE sweep_id = ?", [sweep_id]).fetchone()
        if row and row[0]:
            names.extend(json.loads(row[0]))
        for (params,) in self.con.execute(
            "SELECT params FROM runs WHERE sweep_id = ? ORDER BY run_index", [sweep_id]
        ).fetchall():
            for k in from_json(params) or {}:
                if k not in names:
                    names.append(k)
        return names

    def export(self, sweep_id: str, fmt: str, out: Path, table: str = "runs") -> Path:
        """Write one row per run (params as ``param_<name>``, metrics as columns).

        ``fmt`` is ``csv`` or ``parquet``; ``out`` is a file path, or an existing
        folder (the file is then ``<sweep_id>.<fmt>`` in it).  Returns the path.
        ``table`` another than ``runs`` (one of ``schema.TIMELINE_TABLES``) writes that
        table's rows of the sweep instead, every column as stored (file ``<sweep_id>-<table>.<fmt>``).
        """
        if fmt not in ("csv", "parquet"):
            raise ResultsError(f"export format is {fmt!r}; expected 'csv' or 'parquet'")
        if table != "runs" and (table not in schema.TIMELINE_TABLES or schema.FORMAT_VERSION < schema.TIMELINE_SINCE):
            raise ResultsError(f"export table is {table!r}; expected one of runs, {', '.join(schema.TIMELINE_TABLES)}")
        if self.con.execute("SELECT 1 FROM sweeps WHERE sweep_id = ?", [sweep_id]).fetchone() is None:
            self.sweep(sweep_id)  # raises with the candidates
        out = Path(out)
        if out.is_dir():
            out = out / (f"{sweep_id}.{fmt}" if table == "runs" else f"{sweep_id}-{table}.{fmt}")
        out.parent.mkdir(parents=True, exist_ok=True)
        options = "FORMAT csv, HEADER true" if fmt == "csv" else "FORMAT parquet"
        if table != "runs":
            order = 't."index"' if table == "events" else "t.position"
            cols = ", ".join(
                f"CAST(t.{ident(n)} AS VARCHAR) AS {ident(n)}" if base_type(ty) == "JSON" else f"t.{ident(n)}"
                for n, ty in schema.timeline_columns(table))
            query = (f"SELECT {cols} FROM {table} t LEFT JOIN runs r ON r.sweep_id = t.sweep_id AND r.run_id = t.run_id "
                     f"WHERE t.sweep_id = {_sql_str(sweep_id)} ORDER BY r.run_index, r.repeat, t.run_id, {order}")
            try:
                self.con.execute(f"COPY ({query}) TO {_sql_str(str(out))} ({options})")
            except duckdb.Error as e:
                raise ResultsError(f"export of {sweep_id} ({table}) to {out} failed: {e}") from None
            return out

        select = ["sweep_id", "run_id", "run_index", "scenario"]
        used: set[str] = set(schema.run_columns())
        for name in self.param_names(sweep_id):
            col = "param_" + re.sub(r"\W", "_", name)
            while col in used:
                col += "_"
            used.add(col)
            path = "$." + json.dumps(name)
            select.append(f"json_extract_string(params, {_sql_str(path)}) AS {ident(col)}")
        select += [
            "repeat", "seed", "status", "failure_reason", "started_at", "duration_s",
            "engine", "backend", "pattern", "protocol", "validity",
            "array_to_string(CAST(validity_reasons AS VARCHAR[]), '; ') AS validity_reasons",
            "CAST(versions AS VARCHAR) AS versions",
            "CAST(backend_info AS VARCHAR) AS backend_info",
            *schema.METRIC_NAMES,
            "stderr_tail",
        ]
        query = (
            f"SELECT {', '.join(select)} FROM runs WHERE sweep_id = {_sql_str(sweep_id)} "
            "ORDER BY run_index, repeat, run_id"
        )
        try:
            self.con.execute(f"COPY ({query}) TO {_sql_str(str(out))} ({options})")
        except duckdb.Error as e:
            raise ResultsError(f"export of {sweep_id} to {out} failed: {e}") from None
        return out


def _lock_holder(msg: str, root: Path) -> str:
    """Who holds a results database: the PID DuckDB's lock error names, else the PID in ``writer.lock`` while a
    `roughnet run` holds it; with its command line."""
    found = re.search(r"\(PID (\d+)\)", msg)
    pid = int(found.group(1)) if found else None
    writer = _writer_lock_pid(root)
    if pid is None:
        pid = writer
    if pid is None:
        return f"not named ({msg})"
    what = f"PID {pid}"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        cmd = " ".join(a.decode("utf-8", "replace") for a in argv if a)
        what += f" (`{cmd[:200]}`)" if cmd else ""
    except OSError:
        what += " (gone meanwhile)"
    if writer == pid:
        what += f", the `roughnet run` that holds {root / WRITER_LOCK}"
    return what


def _writer_lock_pid(root: Path) -> int | None:
    """The PID written in ``root``/writer.lock when a process holds that lock; None otherwise."""
    path = Path(root) / WRITER_LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: by a writer, whose PID the file says
            text = os.read(fd, 64).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else None
        return None  # nobody holds it (our shared lock goes with the descriptor)
    finally:
        os.close(fd)


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
