"""A cluster's ledger: the run ledger's format, with a lifetime that outlives `cluster up`.

Owns how a local cluster's ledger (``/run/roughnet/ledger/k<name>.jsonl``, the same
directory and line format as a run's, topo.ledger) is opened, handed over and taken
back:

- ``ClusterLedger.create`` (in `cluster up`): the usual owner line (the `cluster up`
  process), then a ``{"kind": "cluster", "name": ...}`` line that marks the ledger as a
  cluster's (``roughnet clean`` then removes it with ``cluster.down``, not only by
  namespaces and processes);
- every object is appended before it is created (namespaces and veths by topo.Topology,
  then directories, mount points, cgroups, sysctls with their old values, processes);
- ``handover()`` once every node is Ready: from then on the ledger is alive while any
  process it records runs (topo.ledger.owner_alive), so `roughnet clean` leaves a cluster
  that is up alone, and cleans one whose processes all died;
- ``ClusterLedger.attach`` (in `cluster down`): a new owner line, the `cluster down`
  process; if that one is killed half way, the ledger is dead and `roughnet clean` ends
  the job.

A `cluster up` killed half way has written no handover: its ledger is dead as soon as its
owner is gone, exactly like a run's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..topo.ledger import DEFAULT_LEDGER_DIR, LEDGER_SUFFIX, Ledger, owner_alive, process_start_time, read_ledger
from .layout import token
from .state import ClusterError, ClusterPreflightError

#: Kinds of ledger lines a cluster writes beyond a run's (netns, veth, bridge, process, owner).
KIND_CLUSTER = "cluster"
KIND_HANDOVER = "handover"
KIND_DIR = "dir"  # a directory tree of ours: removed whole (only under the cluster roots)
KIND_EMPTYDIR = "emptydir"  # a host directory we created empty (a mount point, a parent): rmdir if still empty
KIND_CGROUP = "cgroup"  # a cgroup path created in every hierarchy (the kubelet's cgroupRoot)
KIND_SYSCTL = "sysctl"  # a host-wide sysctl the kubelet changes: {"key", "old"}


def ledger_path(name: str, root: Path = DEFAULT_LEDGER_DIR) -> Path:
    return Path(root) / f"{token(name)}{LEDGER_SUFFIX}"


def is_cluster_ledger(entries: list[dict[str, Any]]) -> bool:
    return any(e.get("kind") == KIND_CLUSTER for e in entries)


def cluster_name(entries: list[dict[str, Any]]) -> str | None:
    return next((e.get("name") for e in entries if e.get("kind") == KIND_CLUSTER), None)


def handed_over(entries: list[dict[str, Any]]) -> bool:
    """True when the last owner line is followed by a handover (the cluster is up, nobody owns it)."""
    last = max((i for i, e in enumerate(entries) if e.get("kind") == "owner"), default=None)
    return last is not None and any(e.get("kind") == KIND_HANDOVER for e in entries[last + 1:])


class ClusterLedger(Ledger):
    """The ledger of one local cluster (see the module docstring for its lifetime)."""

    name: str

    @classmethod
    def create(cls, name: str, root: Path = DEFAULT_LEDGER_DIR, **info: Any) -> ClusterLedger:
        """A new ledger for cluster ``name`` owned by this process (`cluster up`).

        ClusterPreflightError if a live one exists (the cluster is up, or another `cluster up`
        or `cluster down` of it runs); a dead one is cleaned first (topo.ledger.Ledger does).
        """
        path = ledger_path(name, root)
        entries = read_ledger(path)
        if path.exists() and owner_alive(entries):
            raise ClusterPreflightError(
                f"cluster {name!r} is already up or being brought up or down (ledger {path} is alive); expected "
                f"`roughnet cluster down --name {name}` first")
        led = cls(token(name), f"cluster-{name}", root)
        led.name = name
        led.add(KIND_CLUSTER, name=name, ledger_cleaner="roughnet.cluster.down", **info)  # topo.clean's way here
        return led

    @classmethod
    def attach(cls, name: str, root: Path = DEFAULT_LEDGER_DIR) -> ClusterLedger:
        """The existing ledger of cluster ``name``, taken over by this process (`cluster down`)."""
        path = ledger_path(name, root)
        entries = read_ledger(path)
        if not entries or not is_cluster_ledger(entries):
            raise ClusterPreflightError(f"no ledger of cluster {name!r} at {path}; nothing to take down")
        if not handed_over(entries) and owner_alive(entries):
            owner = [e for e in entries if e.get("kind") == "owner"][-1]
            raise ClusterPreflightError(
                f"cluster {name!r} is being brought up or down by pid {owner.get('pid')}; expected that to finish "
                f"(or end it) first")
        led = cls.__new__(cls)
        import threading

        led.token = token(name)
        led.run_id = f"cluster-{name}"
        led.root = Path(root)
        led.path = path
        led._lock = threading.Lock()
        led.name = name
        pid = os.getpid()
        led.add("owner", pid=pid, start_time=process_start_time(pid), run_id=led.run_id, taken_at=time.time())
        return led

    def handover(self) -> None:
        """The cluster is up: from now on it lives as long as its processes (topo.ledger.owner_alive)."""
        self.add(KIND_HANDOVER, at=time.time())

    def entries_or_fail(self) -> list[dict[str, Any]]:
        try:
            return self.entries()
        except Exception as e:  # noqa: BLE001
            raise ClusterError(f"cannot read the ledger of cluster {self.name}: {e}") from e
