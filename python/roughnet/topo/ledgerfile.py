"""The ledger file: its format, reading it, whose it is, and removing what its entries name.

Owns the ledger file format (docs/architecture.md, "Ledger and cleanup") and
process identity (pid + start time).  One file per run token,
``/run/roughnet/ledger/<token>.jsonl``: an owner line first, then one JSON
line per object, each appended and fsync'd before the object exists, so that
whatever a crash leaves behind is written down.  The writer is ``topo.ledger.Ledger``
(which cleans a dead run's ledger of its token first, with ``topo.clean``);
``topo.build`` (teardown) and ``topo.clean`` read the file and act.  This module
imports no other module of ``topo``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import TopologyError

log = logging.getLogger(__name__)

DEFAULT_LEDGER_DIR = Path("/run/roughnet/ledger")
LEDGER_SUFFIX = ".jsonl"
#: Files and folders a ``path`` entry may name (anything else is left alone, with a warning).
PATH_PREFIXES = ("/var/lib/roughnet/work/", "/etc/netns/rn-")


def remove_path(entry: dict[str, Any]) -> str | None:
    """Remove the file or folder of a ``{"kind": "path"}`` entry (only below PATH_PREFIXES); its description
    when something was removed."""
    import shutil

    path = str(entry.get("path", ""))
    if not path.startswith(PATH_PREFIXES) or ".." in Path(path).parts:
        log.warning("ledger names path %r outside roughnet's folders; left alone", path)
        return None
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink(missing_ok=True)
    else:
        return None
    return f"path {path}"


def _cleaner_module(entry: dict[str, Any], key: str):
    """The roughnet module an entry names under ``key`` (``cleaner``, ``ledger_cleaner``), imported; None (and a
    warning) for a name that is not a roughnet module's."""
    import importlib

    name = str(entry.get(key, ""))
    if not name.startswith("roughnet.") or not name.replace(".", "").replace("_", "").isalnum():
        log.warning("ledger entry %s names %s %r: not a roughnet module; left alone", entry, key, name)
        return None
    return importlib.import_module(name)


def run_cleaner(entry: dict[str, Any]) -> str | None:
    """An entry whose ``cleaner`` names a roughnet module (``{"kind": "container", "cleaner":
    "roughnet.apps.images", ...}``, ``{"kind": "k8s-pods", "cleaner": "roughnet.backends.kubernetes.env", ...}``):
    that module's ``clean_entry(entry)`` removes the object (the layer that made it knows how; topo imports it by
    the name the entry gives, so it depends on no such layer).  Its description, or None."""
    mod = _cleaner_module(entry, "cleaner")
    return None if mod is None else mod.clean_entry(entry)


def ledger_cleaner(entries: list[dict[str, Any]]):
    """The module that cleans a whole ledger its own way, named by an entry's ``ledger_cleaner`` (a local
    cluster's ledger: ``{"kind": "cluster", "ledger_cleaner": "roughnet.cluster.down", ...}``), whose
    ``clean_ledger(path, entries, dry_run)`` then replaces topo's replay; None for a run's ledger."""
    entry = next((e for e in entries if e.get("ledger_cleaner")), None)
    return None if entry is None else _cleaner_module(entry, "ledger_cleaner")


def remove_other(entries: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Remove what the ``path`` and ``cleaner`` entries name, last first; (descriptions, errors)."""
    done: list[str] = []
    errors: list[str] = []
    for e in reversed(entries):
        try:
            if e.get("cleaner"):
                what = run_cleaner(e)
            elif e.get("kind") == "path":
                what = remove_path(e)
            else:
                continue
        except Exception as ex:  # noqa: BLE001 - the others still go
            errors.append(f"{e.get('kind')} {e}: {ex}")
            continue
        if what:
            done.append(what)
    return done, errors


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/<pid>/stat); None if gone.

    A zombie (state Z: dead, not yet reaped) counts as gone.
    """
    try:
        raw = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    # Field 2 (comm) is in parentheses and may hold spaces or ')': split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    # rest[0] is field 3 (state); field 22 is rest[19].
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def process_alive(pid: int, start_time: int | None) -> bool:
    """True when ``pid`` runs and is the same process (same start time) as recorded."""
    if start_time is None:
        return False
    return process_start_time(pid) == start_time


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The lines of a ledger file; a torn last line (crash mid-write) is skipped."""
    entries: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return entries
    except OSError as e:
        raise TopologyError(f"cannot read ledger {path}: {e}") from e
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            log.warning("ledger %s line %d is not JSON (torn write?): %r", path, n, line[:80])
            continue
        if isinstance(obj, dict) and "kind" in obj:
            entries.append(obj)
    return entries


def owner_alive(entries: list[dict[str, Any]]) -> bool:
    """True when the ledger's owner still runs: the process of its (last) owner line, same pid and start time.

    A run's ledger has one owner line. A local cluster's ledger (roughnet.cluster.ledger)
    outlives the `cluster up` that wrote it: after up finished it appends a ``handover``
    line, and from then on the ledger is alive while any process it records still runs;
    `cluster down` takes it over again with a new owner line (so a killed `cluster down`
    leaves a ledger that `roughnet clean` finishes).
    """
    last = max((i for i, e in enumerate(entries) if e.get("kind") == "owner"), default=None)
    if last is None:
        return False
    if any(e.get("kind") == "handover" for e in entries[last + 1:]):
        return any(process_alive(int(e.get("pid", -1)), e.get("start_time"))
                   for e in entries if e.get("kind") == "process")
    owner = entries[last]
    return process_alive(int(owner.get("pid", -1)), owner.get("start_time"))


@contextmanager
def directory_lock(root: Path) -> Iterator[None]:
    """Hold an exclusive flock on the ledger directory ``root``: taken while a ledger is checked, a dead one
    cleaned and a new one created for its token (``Ledger``), and while ``roughnet clean`` checks and cleans one
    (``topo.clean``), so that two processes never both own one token, nor clean a dead run's namespaces while a
    new run of the same token builds them."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def live_owner(token: str, root: Path = DEFAULT_LEDGER_DIR) -> dict[str, Any] | None:
    """The owner line of token ``token``'s ledger when its owner still runs (a run with that token is live)."""
    entries = read_ledger(Path(root) / f"{token}{LEDGER_SUFFIX}")
    if not owner_alive(entries):
        return None
    return [e for e in entries if e.get("kind") == "owner"][-1]


def busy_message(owner: dict[str, Any], path: Path) -> str:
    return (f"run {owner.get('run_id')} is being run right now by another roughnet (its ledger {path} belongs to "
            f"a live process, pid {owner.get('pid')}); a run's id (and so its namespaces) is the same wherever its "
            f"results go, so one run cannot be run twice at the same time on one machine: expected that process to "
            f"finish first")
