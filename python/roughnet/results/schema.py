"""The results database layout: format version, metric columns, table definitions.

This module owns *what* the DuckDB file contains (see docs/results-format.md);
``store`` owns reading and writing it and ``migrate`` owns upgrading older
layouts.  Nothing here touches a database.

Metrics are real columns (one per name in ``METRICS``) so that SQL and exports
need no JSON unpacking; everything of variable shape (params, versions, the
resolved run, validity reasons, raw counters) is a JSON column.
"""

from __future__ import annotations

from dataclasses import dataclass

from roughnet.errors import ResultsError

#: Layout version written into ``meta.format_version``.  Bump it, add a
#: migration in ``migrate.MIGRATIONS`` and describe the change in
#: docs/results-format.md whenever a table or column changes.
FORMAT_VERSION = 7


@dataclass(frozen=True)
class Metric:
    name: str
    sql_type: str  # "BIGINT", "DOUBLE" or "BOOLEAN"
    unit: str  # "msgs", "bytes", "us", "bit/s", "fraction", "s", "segments", "packets", "bundles", "ratio", "bool"
    label: str  # human name for reports
    since: int = 1  # the format version that added the column (migrate adds it to older files)


#: Every metric a run record (and a receiver) may carry, in column order.
METRICS: tuple[Metric, ...] = (
    Metric("sent", "BIGINT", "msgs", "messages sent"),
    Metric("received", "BIGINT", "msgs", "messages received"),
    Metric("lost", "BIGINT", "msgs", "messages lost"),
    Metric("duplicates", "BIGINT", "msgs", "duplicate messages"),
    Metric("reordered", "BIGINT", "msgs", "reordered messages"),
    Metric("loss_ratio", "DOUBLE", "fraction", "message loss"),
    Metric("throughput_bps", "DOUBLE", "bit/s", "throughput"),
    Metric("bytes", "BIGINT", "bytes", "bytes received"),
    Metric("lat_min_us", "DOUBLE", "us", "latency min"),
    Metric("lat_mean_us", "DOUBLE", "us", "latency mean"),
    Metric("lat_std_us", "DOUBLE", "us", "latency std"),
    Metric("lat_p50_us", "DOUBLE", "us", "latency p50"),
    Metric("lat_p90_us", "DOUBLE", "us", "latency p90"),
    Metric("lat_p99_us", "DOUBLE", "us", "latency p99"),
    Metric("lat_p999_us", "DOUBLE", "us", "latency p99.9"),
    Metric("lat_p9999_us", "DOUBLE", "us", "latency p99.99"),
    Metric("lat_p999999_us", "DOUBLE", "us", "latency p99.9999"),
    Metric("lat_max_us", "DOUBLE", "us", "latency max"),
    Metric("lat_actual_p50_us", "DOUBLE", "us", "latency p50 (from actual send)"),
    Metric("lat_actual_p99_us", "DOUBLE", "us", "latency p99 (from actual send)"),
    Metric("lat_actual_mean_us", "DOUBLE", "us", "latency mean (from actual send)"),
    Metric("lat_actual_max_us", "DOUBLE", "us", "latency max (from actual send)"),
    Metric("link_drops", "BIGINT", "packets", "link drops"),
    Metric("link_drops_loss", "BIGINT", "packets", "link drops (random loss)"),
    Metric("link_drops_queue", "BIGINT", "packets", "link drops (queue)"),
    Metric("tcp_retrans_segs", "BIGINT", "segments", "TCP retransmitted segments"),
    Metric("tcp_out_segs", "BIGINT", "segments", "TCP segments out"),
    Metric("tcp_in_segs", "BIGINT", "segments", "TCP segments in"),
    Metric("cpu_agents_s", "DOUBLE", "s", "agent CPU time"),
    Metric("cpu_machine_util", "DOUBLE", "fraction", "machine CPU utilisation"),
    Metric("sched_behind_max_us", "DOUBLE", "us", "sender max behind schedule"),
    Metric("sched_late_fraction", "DOUBLE", "fraction", "sender late fraction"),
    # version 2: pattern sync (SEEDS S3; run.collect.sync_metrics).  New columns go last, so a
    # file upgraded with ALTER TABLE ADD COLUMN has the same column order as a new one.
    Metric("bundles_from_to", "BIGINT", "bundles", "bundles delivered from -> to", since=2),
    Metric("bundles_to_from", "BIGINT", "bundles", "bundles delivered to -> from", since=2),
    Metric("goodput_bps", "DOUBLE", "bit/s", "goodput", since=2),
    Metric("channel_capacity_bps", "DOUBLE", "bit/s", "channel capacity", since=2),
    Metric("goodput_fraction", "DOUBLE", "fraction", "goodput / channel capacity", since=2),
    Metric("overhead_ratio", "DOUBLE", "ratio", "overhead (bytes sent / goodput bytes)", since=2),
    Metric("time_to_full_sync_s", "DOUBLE", "s", "time to full sync", since=2),
    Metric("full_sync", "BOOLEAN", "bool", "full sync", since=2),
    # version 3: a stream/ping sender's lag split into its own (the machine's, which the verdict
    # judges) and held (the protocol blocked the previous send), and the hosts' UDP receive-buffer
    # drops (run.collect.aggregate, udp_metrics); version 2 kept them in metrics_extra.
    Metric("sched_own_late_fraction", "DOUBLE", "fraction", "sender late fraction (own)", since=3),
    Metric("sched_own_behind_max_us", "DOUBLE", "us", "sender max behind schedule (own)", since=3),
    Metric("sched_held_fraction", "DOUBLE", "fraction", "sender held by the protocol", since=3),
    Metric("sched_held_s", "DOUBLE", "s", "sender time held", since=3),
    Metric("udp_rcvbuf_errors", "BIGINT", "packets", "UDP receive-buffer drops", since=3),
)

METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
METRIC_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

#: Histogram kinds the runner may hand over (values in ns, HdrHistogram V2 base64).
HISTOGRAM_KINDS = ("latency_intended", "latency_actual", "rtt_intended", "rtt_actual")

STATUSES = ("ok", "failed")
VALIDITIES = ("valid", "suspect", "invalid")

#: Scalar (non-metric, non-JSON) run columns, in column order, with their types.
RUN_SCALARS: tuple[tuple[str, str], ...] = (
    ("sweep_id", "VARCHAR NOT NULL"),
    ("run_id", "VARCHAR NOT NULL"),
    ("run_index", "INTEGER"),
    ("scenario", "VARCHAR"),
    ("repeat", "INTEGER"),
    ("seed", "BIGINT"),
    ("status", "VARCHAR NOT NULL"),
    ("failure_reason", "VARCHAR"),
    ("stderr_tail", "VARCHAR"),
    ("started_at", "TIMESTAMP"),  # UTC
    ("duration_s", "DOUBLE"),
    ("engine", "VARCHAR"),
    ("pattern", "VARCHAR"),
    ("protocol", "VARCHAR"),
    ("validity", "VARCHAR"),
)

#: JSON run columns (record key == column name).
RUN_JSON: tuple[str, ...] = (
    "params",
    "versions",
    "run",
    "validity_reasons",
    "points",
    "link_counters",
    "tcp_counters",
)


#: Run columns added in format 4 (after the metric columns, where ALTER TABLE puts them): where the run
#: happened.  ``backend`` is the backend's name, ``backend_info`` (JSON) what it knows (cluster, nodes, pods).
RUN_BACKEND: tuple[tuple[str, str], ...] = (("backend", "VARCHAR"), ("backend_info", "JSON"))
BACKEND_SINCE = 4


#: Format 5: the tables of run timelines (docs/timelines.md, "The record"): one row per item of the record's
#: ``workloads``, ``flows``, ``series``, ``events`` and ``recovery`` lists, ``sweep_id`` and ``run_id`` on every
#: row, ``position`` the item's place in its list (readers return rows in that order).  Records without
#: these keys write nothing here.
TIMELINE_SINCE = 5
#: Format 6: ``distance``, what the messages of runs whose hosts have positions (issue 16) delivered by the
#: distance between sender and receiver at each message's send time (``mobility.distance``).
DISTANCE_SINCE = 6
#: Format 7: the user's own processes ([[process]], docs/applications.md): ``processes``, one row per process of a
#: run (its final state against the expected one, CPU, memory, its TCP connections' totals from the kernel, its
#: own latency distribution), and ``process_series``, per process, interval and named value (``source`` "tcp":
#: sampled from the kernel's tcp_info; "app": the numbers the process offered).
PROCESSES_SINCE = 7
#: The timeline tables, in the order ``create_statements`` makes them (``distance`` from format 6, the process
#: tables from format 7).
TIMELINE_TABLES: tuple[str, ...] = ("workloads", "flows", "series", "events", "recovery", "distance", "processes",
                                    "process_series")
_SINCE = {"distance": DISTANCE_SINCE, "processes": PROCESSES_SINCE, "process_series": PROCESSES_SINCE}


def timeline_tables(version: int | None = None) -> tuple[str, ...]:
    """The timeline tables format ``version`` (default: the current one) has."""
    version = FORMAT_VERSION if version is None else version
    if version < TIMELINE_SINCE:
        return ()
    return tuple(t for t in TIMELINE_TABLES if version >= _SINCE.get(t, TIMELINE_SINCE))

_KEY: tuple[tuple[str, str], ...] = (("sweep_id", "VARCHAR NOT NULL"), ("run_id", "VARCHAR NOT NULL"))
_LATENCY = (("lat_p50_us", "DOUBLE"), ("lat_p90_us", "DOUBLE"), ("lat_p99_us", "DOUBLE"), ("lat_max_us", "DOUBLE"))

#: workloads: scalar columns (record key == column name; ``metrics`` go to the metric columns after them, the keys
#: that are not metric columns to ``metrics_extra``).
WORKLOAD_SCALARS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("name", "VARCHAR NOT NULL"),
    ("protocol", "VARCHAR"),
    ("pattern", "VARCHAR"),
    ("senders", "JSON"),
    ("receivers", "JSON"),
    ("start_s", "DOUBLE"),
    ("background", "BOOLEAN"),
    ("validity", "VARCHAR"),
    ("validity_reasons", "JSON"),
    ("metrics_extra", "JSON"),
)
#: flows: one per (workload, sender, receiver); the flow's ``metrics`` as in ``receivers`` (metric columns,
#: ``metrics_extra``) with ``end_reason`` a column of its own.
FLOW_SCALARS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("workload", "VARCHAR NOT NULL"),
    ("sender", "VARCHAR"),
    ("receiver", "VARCHAR"),
    ("end_reason", "VARCHAR"),
    ("metrics_extra", "JSON"),
)
#: series: per flow and interval.  ``extra`` (JSON) keeps keys a row had that are not columns (NULL when none).
SERIES_COLUMNS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("workload", "VARCHAR NOT NULL"),
    ("sender", "VARCHAR"),
    ("receiver", "VARCHAR"),
    ("t_s", "DOUBLE"),
    ("interval_s", "DOUBLE"),
    ("sent", "BIGINT"),
    ("delivered", "BIGINT"),
    ("bytes", "BIGINT"),
    ("throughput_bps", "DOUBLE"),
    ("lost", "BIGINT"),
    ("duplicates", "BIGINT"),
    ("reordered", "BIGINT"),
    *_LATENCY,
    ("extra", "JSON"),
)
#: distance: per flow, send interval (``t_s``, ``interval_s``) and distance bin (``d_bin_m``, its lower edge): the
#: messages sent then at that sender-receiver distance (``distance_m``: their mean), how many arrived, and the
#: latency of those (mean, nearest-rank percentiles, max).
DISTANCE_COLUMNS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("workload", "VARCHAR NOT NULL"),
    ("sender", "VARCHAR"),
    ("receiver", "VARCHAR"),
    ("t_s", "DOUBLE"),
    ("interval_s", "DOUBLE"),
    ("d_bin_m", "DOUBLE"),
    ("distance_m", "DOUBLE"),
    ("sent", "BIGINT"),
    ("delivered", "BIGINT"),
    ("lat_mean_us", "DOUBLE"),
    *_LATENCY,
    ("extra", "JSON"),
)
#: events: one per event of the run (``index`` is the event's own number, which ``ends`` and ``recovery.event``
#: refer to).
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("index", "INTEGER"),
    ("at_s", "DOUBLE"),
    ("kind", "VARCHAR"),
    ("target", "VARCHAR"),
    ("action", "VARCHAR"),
    ("detail", "VARCHAR"),
    ("started_s", "DOUBLE"),
    ("took_effect_s", "DOUBLE"),
    ("ends", "INTEGER"),
    ("error", "VARCHAR"),
    ("extra", "JSON"),
)
#: recovery: per fault (``event``: the interrupting event's index) and flow.
RECOVERY_COLUMNS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("event", "INTEGER"),
    ("workload", "VARCHAR"),
    ("sender", "VARCHAR"),
    ("receiver", "VARCHAR"),
    ("fault_start_s", "DOUBLE"),
    ("fault_end_s", "DOUBLE"),
    ("last_before_s", "DOUBLE"),
    ("first_after_s", "DOUBLE"),
    ("outage_s", "DOUBLE"),
    ("recover_s", "DOUBLE"),
    ("lost", "BIGINT"),
    ("duplicated", "BIGINT"),
    ("reordered", "BIGINT"),
    ("backlog", "BIGINT"),
    ("pre_rate_msgs_s", "DOUBLE"),
    ("promise", "VARCHAR"),
    ("verdict", "VARCHAR"),
    ("evidence", "VARCHAR"),
    ("extra", "JSON"),
)


#: processes: one per [[process]] of a run (``apps.results``).
PROCESS_COLUMNS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("name", "VARCHAR NOT NULL"),
    ("host", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("run_as", "VARCHAR"),
    ("started_s", "DOUBLE"),
    ("ready_s", "DOUBLE"),
    ("ended_s", "DOUBLE"),
    ("final", "JSON"),
    ("expected", "JSON"),
    ("ok", "BOOLEAN"),
    ("reason", "VARCHAR"),
    ("restarts", "INTEGER"),
    ("cpu_s", "DOUBLE"),
    ("rss_max_bytes", "BIGINT"),
    ("tcp_connections", "INTEGER"),
    ("tcp_retrans", "BIGINT"),
    ("tcp_bytes_sent", "BIGINT"),
    ("tcp_bytes_acked", "BIGINT"),
    ("tcp_bytes_received", "BIGINT"),
    ("tcp_rtt_us", "DOUBLE"),
    ("app_count", "BIGINT"),
    *_LATENCY,
    ("extra", "JSON"),
)
#: process_series: per process, interval and named value.
PROCESS_SERIES_COLUMNS: tuple[tuple[str, str], ...] = (
    *_KEY,
    ("position", "INTEGER"),
    ("process", "VARCHAR NOT NULL"),
    ("source", "VARCHAR"),
    ("name", "VARCHAR"),
    ("t_s", "DOUBLE"),
    ("interval_s", "DOUBLE"),
    ("value", "DOUBLE"),
    ("extra", "JSON"),
)


def timeline_columns(table: str, version: int | None = None) -> list[tuple[str, str]]:
    """(column, type) of a timeline table in format ``version`` (default: the current one), in table order
    (types as in the DDL, NOT NULL included).  ``workloads`` and ``flows`` end with the metric columns of that version."""
    if version is None:
        version = FORMAT_VERSION
    metric_cols = [(m.name, m.sql_type) for m in metrics_of(version)]
    cols = {
        "workloads": [*WORKLOAD_SCALARS, *metric_cols],
        "flows": [*FLOW_SCALARS, *metric_cols],
        "series": list(SERIES_COLUMNS),
        "events": list(EVENT_COLUMNS),
        "recovery": list(RECOVERY_COLUMNS),
        "distance": list(DISTANCE_COLUMNS),
        "processes": list(PROCESS_COLUMNS),
        "process_series": list(PROCESS_SERIES_COLUMNS),
    }.get(table)
    if cols is None:
        raise ResultsError(f"timeline table {table!r}: unknown; expected one of {TIMELINE_TABLES}")
    return cols


def _timeline_ddl(version: int) -> list[str]:
    out = []
    for table in timeline_tables(version):
        body = ",\n    ".join(f'"{n}" {t}' if n == "index" else f"{n} {t}" for n, t in timeline_columns(table, version))
        out.append(f"CREATE TABLE {table} (\n    {body}\n)")
    return out


def metrics_of(version: int) -> tuple[Metric, ...]:
    """The metric columns of format ``version`` (1 or later), in column order."""
    return tuple(m for m in METRICS if m.since <= version)


def _metric_ddl(version: int) -> str:
    return ",\n    ".join(f"{m.name} {m.sql_type}" for m in metrics_of(version))


def create_statements(version: int | None = None) -> list[str]:
    """DDL of format ``version`` (default: the current one; 1 or later), in order.

    Older versions are for ``migrate`` (an upgrade step creates its own
    version's tables) and for tests that build old files.  Tables carry no key
    constraints: ``store.record_run`` keeps (sweep_id, run_id) unique by
    deleting and inserting inside one transaction."""
    if version is None:
        version = FORMAT_VERSION
    if not 1 <= version <= FORMAT_VERSION:
        raise ResultsError(f"format version {version} has no table layout here; expected 1..{FORMAT_VERSION}")
    scalars = ",\n    ".join(f"{n} {t}" for n, t in RUN_SCALARS)
    jsons = ",\n    ".join(f"{n} JSON" for n in RUN_JSON)
    backend = "".join(f",\n    {n} {t}" for n, t in RUN_BACKEND) if version >= BACKEND_SINCE else ""
    return [
        "CREATE TABLE meta (key VARCHAR NOT NULL, value VARCHAR)",
        """CREATE TABLE sweeps (
    sweep_id VARCHAR NOT NULL,
    scenario VARCHAR,
    source VARCHAR,
    description VARCHAR,
    axes JSON,
    report JSON,
    machine JSON,
    run_count INTEGER,
    scenario_text VARCHAR,
    created_at TIMESTAMP,
    updated_at TIMESTAMP
)""",
        f"""CREATE TABLE runs (
    {scalars},
    {jsons},
    metrics_extra JSON,
    recorded_at TIMESTAMP,
    {_metric_ddl(version)}{backend}
)""",
        f"""CREATE TABLE receivers (
    sweep_id VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    host VARCHAR NOT NULL,
    metrics_extra JSON,
    {_metric_ddl(version)}
)""",
        """CREATE TABLE histograms (
    sweep_id VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    host VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    count BIGINT,
    hdr VARCHAR NOT NULL
)""",
    ] + (_timeline_ddl(version) if version >= TIMELINE_SINCE else [])


def run_columns() -> list[str]:
    """Every column of ``runs`` in table order."""
    return (
        [n for n, _ in RUN_SCALARS]
        + list(RUN_JSON)
        + ["metrics_extra", "recorded_at"]
        + list(METRIC_NAMES)
        + ([n for n, _ in RUN_BACKEND] if FORMAT_VERSION >= BACKEND_SINCE else [])
    )


def receiver_columns() -> list[str]:
    return ["sweep_id", "run_id", "host", "metrics_extra", *METRIC_NAMES]
