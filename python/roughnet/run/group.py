"""Running a reuse group: consecutive runs that share one topology and one set of services.

Owns the life of a shared environment (docs/services.md, "reuse = true"): the
first run of a group builds the topology (namespaces named from *its* run id, in
*its* ledger), applies the links and starts the services; every later run
re-applies each link's impairments (kernel: its qdiscs and loss rules removed
and added again; netem: its qdiscs replaced; wire: its roughnet-wire stopped and
started with the new run's link), readies the services for itself
(``services.begin_run``: alive, probed again, Kafka topic created), measures,
and takes its share of each service (``services.end_run``: the log slice in its
own artifacts, CPU/RSS of its time span).  After a run that failed for another
reason than its agents, or whose service died, the environment is torn down
and the next run of the group starts a fresh one.  ``close`` stops the
services and tears the topology down; the runner calls it when the group ends,
on error, Ctrl-C and SIGTERM.  If roughnet itself is killed, the ledger of the
run that built the environment names everything for ``roughnet clean``.

Which runs form a group is ``run.reuse``'s; measuring one run is
``runner.measure``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from .. import services, topo
from ..errors import AgentError, RunBusyError
from ..links.kernel import clear_link
from ..runspec import Run
from .counters import tcp_counters
from .runner import (
    Interrupted,
    Preflight,
    apply_links,
    base_record,
    link_by_index,
    measure,
    record_failure,
    store_record,
    teardown_shielded,
)

log = logging.getLogger(__name__)

#: Folder (in the sweep's results folder) holding a shared service's config, data and whole log.
SERVICE_DIR_PREFIX = "services-"


class RunTopology:
    """One run's view of a topology built for an earlier run of its group.

    Everything is the shared ``Topology``'s, except ``spec``, which is this run (the
    wire engine seeds from ``topo.spec.seed``; error messages name the run).
    """

    def __init__(self, topology: topo.Topology, run: Run):
        self._topology = topology
        self.spec = run

    def __getattr__(self, name: str) -> Any:
        return getattr(self._topology, name)


def service_dir(artifacts: Path, run: Run) -> Path:
    """Where the services started for ``run`` keep their files: beside the runs, in the sweep's folder."""
    return artifacts.parent / f"{SERVICE_DIR_PREFIX}{run.run_id}"


class SharedEnvironment:
    """A topology, its link engines and its services, kept across the runs of one reuse group."""

    def __init__(self, pf: Preflight):
        self.pf = pf
        self.topology: topo.Topology | None = None
        self.link_engines: dict[int, Any] = {}
        self.handles: list[services.ServiceHandle] = []
        self.started_by: str | None = None
        self.runs_served = 0
        self.log_ends: dict[str, int] = {}  # service key -> where the last run's log slice ended

    @property
    def up(self) -> bool:
        return self.topology is not None

    # ---- building and re-applying ---------------------------------------------------

    def _start(self, run: Run, artifacts: Path) -> None:
        engines = self.pf.engines[run.run_id]
        ledger = topo.Ledger(run.run_id[:8], run.run_id)
        self.topology = self.pf.backend.environment(run, ledger, engines, artifacts.parent)
        self.started_by = run.run_id
        self.runs_served = 0
        self.topology.build()
        self.link_engines = apply_links(self.topology, run, engines)
        folder = service_dir(artifacts, run)
        folder.mkdir(parents=True, exist_ok=True)
        self.handles = services.start_services(run, self.topology, folder)
        log.info("reuse group: environment %s built for run %s (services: %s)", self.topology.token, run.run_id,
                 ", ".join(h.describe() for h in self.handles))

    def _reapply(self, run: Run) -> None:
        """Give every link ``run``'s impairments (the links' structure is the same: run.reuse)."""
        assert self.topology is not None
        view = RunTopology(self.topology, run)
        for index, eng in self.link_engines.items():
            link = link_by_index(run, index)
            if eng.name == "wire":
                eng.stop(link)
                eng.apply(view, link)
            elif hasattr(eng, "reapply"):
                eng.reapply(view, link)
            else:  # netem: `tc qdisc replace` would leave a direction that became clean impaired
                clear_link(view, link)
                eng.apply(view, link)

    # ---- one run --------------------------------------------------------------------

    def execute(self, run: Run, artifacts: Path) -> dict[str, Any]:
        """Run ``run`` in this environment (building it first if it is not up); its record.

        Never raises RoughnetError (a failed run is a record with its reason); Interrupted and
        KeyboardInterrupt go up, and the caller then calls ``close``.
        """
        engines = self.pf.engines[run.run_id]
        record = base_record(run, engines, self.pf)
        (artifacts / "run.json").write_text(json.dumps(run.to_dict(), indent=1, default=str))
        t0 = time.monotonic()
        agents: list = []
        window = None
        rebuild = False
        try:
            if self.up:
                self._reapply(run)
            else:
                self._start(run, artifacts)
            window = services.begin_run(self.handles, run, log_from=self.log_ends)
            assert self.topology is not None
            view = RunTopology(self.topology, run)
            tcp_before = {h: tcp_counters(view, h) for h in run.host_names()}
            link_before = {i: eng.counters(view, link_by_index(run, i)) for i, eng in self.link_engines.items()}
            measure(run, self.pf, view, self.link_engines, self.handles, artifacts, record, tcp_before, agents,
                    link_before=link_before)
        except (Interrupted, KeyboardInterrupt, RunBusyError):  # RunBusyError: the same run, live elsewhere
            raise
        except AgentError as e:  # the agents failed; the environment may still be sound
            record_failure(record, e, agents)
            rebuild = services.check_alive(self.handles) is not None
        except Exception as e:  # noqa: BLE001 - topology, links, a service: start afresh for the next run
            record_failure(record, e, agents)
            rebuild = True
        finally:
            if window is not None:
                shares = services.end_run(self.handles, window, artifacts)
                self.log_ends = {key: int(share["log_to"]) for key, share in shares.items()}
                _record_shares(record, shares)
            elif self.started_by is not None:
                record["service_started_by"] = self.started_by
            if self.topology is not None and hasattr(self.topology, "describe"):
                record["backend_info"] = self.topology.describe()
            record["duration_s"] = round(time.monotonic() - t0, 3)
        self.runs_served += 1
        if record["status"] != "ok" and not rebuild and services.check_alive(self.handles) is not None:
            rebuild = True
        if rebuild:
            log.warning("reuse group: run %s failed (%s); the next run starts a fresh environment", run.run_id,
                        record.get("failure_reason"))
            self.close()
        return record

    # ---- teardown -------------------------------------------------------------------

    def close(self) -> dict[str, dict]:
        """Stop the services and tear the topology down (idempotent; finishes even if interrupted once)."""
        usage: dict[str, dict] = {}
        handles, topology = self.handles, self.topology
        self.handles, self.topology, self.link_engines, self.log_ends = [], None, {}, {}
        try:
            if handles:
                try:
                    usage = services.stop_services(handles)
                except (Interrupted, KeyboardInterrupt):
                    services.stop_services(handles)
                    raise
        finally:
            if topology is not None:
                teardown_shielded(topology)
                log.info("reuse group: environment %s (started by run %s) torn down after %d run(s)",
                         topology.token, self.started_by, self.runs_served)
        self.started_by = None
        return usage


def _record_shares(record: dict[str, Any], shares: dict[str, dict[str, Any]]) -> None:
    """Each service's share of the run into the record: top-level ``services`` and metric extras."""
    metrics = record["metrics"]
    for key, share in shares.items():
        name = key.replace("-", "_")
        metrics[f"service_{name}_cpu_s"] = share.get("cpu_s")
        metrics[f"service_{name}_rss_max_bytes"] = share.get("rss_max_bytes")
        metrics[f"service_{name}_pid"] = share.get("pid")
    reused = any(s["reused"] for s in shares.values())
    started_by = next((s["started_by"] for s in shares.values()), record["run_id"])
    metrics["service_reused"] = reused
    metrics["service_started_by"] = started_by
    record["service_reused"] = reused
    record["service_started_by"] = started_by
    record["services"] = list(shares.values())


def run_group(runs: list[Run], pf: Preflight, store, on_start=None, on_done=None) -> list[dict[str, Any]]:
    """Run a reuse group in order, storing each record as it ends; the environment is closed in every case."""
    env = SharedEnvironment(pf)
    records = []
    try:
        for run in runs:
            if on_start:
                on_start(run)
            artifacts = store.run_dir(run.sweep_id, run.run_id)
            record = env.execute(run, artifacts)
            store_record(store, record)  # kept even if Ctrl-C arrives meanwhile
            records.append(record)
            if on_done:
                on_done(run, record)
    finally:
        env.close()
    return records
