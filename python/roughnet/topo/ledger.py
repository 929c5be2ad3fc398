"""The ledger: what a run is about to create, written down before it is created.

``Ledger`` appends a run's objects to its file (the format, and reading it: ``topo.ledgerfile``, whose
names are importable from here too).  It does not remove anything itself, except a dead run's ledger of
the same token, which it has ``topo.clean`` replay before it writes its own; ``topo.build`` (teardown)
and ``topo.clean`` read the file and act.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import RunBusyError, TopologyError
from .clean import clean_ledger
from .ledgerfile import (  # noqa: F401 - the file's names, importable from here (the writer's module)
    DEFAULT_LEDGER_DIR,
    LEDGER_SUFFIX,
    PATH_PREFIXES,
    busy_message,
    directory_lock,
    ledger_cleaner,
    live_owner,
    owner_alive,
    process_alive,
    process_start_time,
    read_ledger,
    remove_other,
    remove_path,
    run_cleaner,
)

log = logging.getLogger(__name__)


class Ledger:
    """Append-only record of one run's objects; the owner is the process that created it.

    If a ledger for the same token is already there: when its owner is alive,
    that is a second run with the same token and this one refuses
    (TopologyError); when its owner is gone, its leftovers are cleaned first.
    """

    def __init__(self, token: str, run_id: str, root: Path = DEFAULT_LEDGER_DIR):
        from .naming import check_token

        check_token(token)
        self.token = token
        self.run_id = run_id
        self.root = Path(root)
        self.path = self.root / f"{token}{LEDGER_SUFFIX}"
        self._lock = threading.Lock()
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise TopologyError(f"cannot create the ledger directory {self.root}: {e}") from e
        pid = os.getpid()
        owner = {"kind": "owner", "pid": pid, "start_time": process_start_time(pid), "run_id": run_id}
        with directory_lock(self.root):  # check, clean a dead one, create: one process at a time
            if self.path.exists():
                entries = read_ledger(self.path)
                if owner_alive(entries):
                    live = [e for e in entries if e.get("kind") == "owner"][-1]
                    raise RunBusyError(busy_message(live, self.path))
                removed = clean_ledger(self.path, dry_run=False)
                log.warning("ledger %s was left by a dead run; removed %d object(s) first", self.path, len(removed))
            self._create(owner)

    def _create(self, owner: dict[str, Any]) -> None:
        """Write the ledger with its owner line as one step (a temporary file renamed into place): a reader
        never finds it empty."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(owner, separators=(",", ":")) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise TopologyError(f"cannot write ledger {self.path}: {e}") from e

    def _write(self, obj: dict[str, Any] | list[dict[str, Any]], mode: str) -> None:
        objs = obj if isinstance(obj, list) else [obj]
        line = "".join(json.dumps(o, separators=(",", ":"), sort_keys=False) + "\n" for o in objs)
        with self._lock:
            try:
                with open(self.path, mode) as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise TopologyError(f"cannot write ledger {self.path}: {e}") from e

    def add(self, kind: str, **fields: Any) -> None:
        """Append one object (``{"kind": kind, **fields}``) and fsync; call BEFORE creating it."""
        self._write({"kind": kind, **fields}, "a")

    def add_many(self, objects: list[dict[str, Any]]) -> None:
        """Append several objects (each ``{"kind": ..., ...}``) with one write and one fsync; call BEFORE
        creating any of them (a topology of 100 hosts records 300 objects: one fsync each cost a second)."""
        if objects:
            self._write(list(objects), "a")

    def entries(self) -> list[dict[str, Any]]:
        return read_ledger(self.path)

    def remove_file(self) -> None:
        """Delete the ledger file (after every object in it is gone); missing is fine."""
        with self._lock:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise TopologyError(f"cannot remove ledger {self.path}: {e}") from e
