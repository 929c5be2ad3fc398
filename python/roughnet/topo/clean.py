"""Finding and removing what dead runs left behind, by ledger only.

Owns ``roughnet clean`` and the leftover listing of ``roughnet clean --dry-run``
and ``roughnet doctor``.  A ledger whose owner process is gone (or whose pid now
belongs to another process: the start time differs) is replayed in reverse:
its recorded processes are ended (by pid, after checking their start time),
anything still running inside its namespaces is ended, its namespaces are
deleted (their veths and bridges go with them), and the ledger file is removed.
Ledgers of live owners are never touched.  Namespaces that carry the ``rn-``
prefix but appear in no ledger are reported, never removed: they may belong to
a test or tool that keeps no ledger and is still running.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TopologyError
from .ledgerfile import (DEFAULT_LEDGER_DIR, LEDGER_SUFFIX, directory_lock, ledger_cleaner, owner_alive, process_alive,
                     process_start_time, read_ledger, remove_other)
from .naming import NS_PREFIX
from .system import delete_ns, end_processes, list_namespaces, ns_exists, pids_in_namespaces, proc_state

log = logging.getLogger(__name__)

#: A ledger with no readable owner line yet may be one being written right now.
FRESH_LEDGER_S = 10.0


@dataclass(frozen=True)
class Leftover:
    """An object a dead run left (``removable``), or an unledgered ``rn-`` namespace (reported only)."""

    kind: str  # "process" | "netns" | "ledger" | "unledgered-netns"
    name: str
    ledger: str | None  # path of the ledger that recorded it
    run_id: str | None
    removable: bool = True

    def __str__(self) -> str:
        where = f" (run {self.run_id}, ledger {self.ledger})" if self.ledger else ""
        if not self.removable:
            return f"{self.kind} {self.name}: in no ledger, left alone"
        return f"{self.kind} {self.name}{where}"


def _ledger_files(ledger_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in Path(ledger_dir).iterdir() if p.name.endswith(LEDGER_SUFFIX) and p.is_file())
    except FileNotFoundError:
        return []


def _is_dead(path: Path, entries: list[dict]) -> bool:
    if owner_alive(entries):
        return False
    if not any(e.get("kind") == "owner" for e in entries):
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return False
        return age > FRESH_LEDGER_S
    return True


def _ledger_leftovers(path: Path, entries: list[dict]) -> list[Leftover]:
    owner = next((e for e in entries if e.get("kind") == "owner"), {})
    run_id = owner.get("run_id")
    out: list[Leftover] = []
    for e in entries:
        if e.get("kind") in ("path", "container") or e.get("cleaner"):  # "what": how its maker describes it
            out.append(Leftover(str(e.get("kind")), str(e.get("path") or e.get("id") or e.get("what") or e),
                                str(path), run_id))
    for e in entries:
        if e.get("kind") == "process" and process_alive(int(e.get("pid", -1)), e.get("start_time")):
            out.append(Leftover("process", f"{e['pid']} ({e.get('argv0', '?')}) in {e.get('ns', '?')}",
                                str(path), run_id))
    for e in entries:
        name = e.get("name")
        if e.get("kind") == "netns" and isinstance(name, str) and name.startswith(NS_PREFIX) and ns_exists(name):
            out.append(Leftover("netns", name, str(path), run_id))
    out.append(Leftover("ledger", path.name, str(path), run_id))
    return out


def list_leftovers(ledger_dir: Path = DEFAULT_LEDGER_DIR) -> list[Leftover]:
    """What `roughnet clean` would remove, plus unledgered ``rn-`` namespaces (not removable)."""
    out: list[Leftover] = []
    ledgered: set[str] = set()
    for path in _ledger_files(Path(ledger_dir)):
        entries = read_ledger(path)
        ledgered |= {e["name"] for e in entries if e.get("kind") == "netns" and isinstance(e.get("name"), str)}
        if _is_dead(path, entries):
            out.extend(_ledger_leftovers(path, entries))
    for ns in list_namespaces(NS_PREFIX):
        if ns not in ledgered:
            out.append(Leftover("unledgered-netns", ns, None, None, removable=False))
    return out


def own_leftovers(ledger_dir: Path = DEFAULT_LEDGER_DIR, pid: int | None = None) -> list[Leftover]:
    """What the ledgers owned by process ``pid`` (default: this one) still hold: after an interrupted teardown,
    what `roughnet clean` will remove once that process has exited."""
    pid = os.getpid() if pid is None else pid
    start = process_start_time(pid)
    out: list[Leftover] = []
    for path in _ledger_files(Path(ledger_dir)):
        entries = read_ledger(path)
        owners = [e for e in entries if e.get("kind") == "owner"]
        if owners and owners[-1].get("pid") == pid and owners[-1].get("start_time") == start:
            out.extend(_ledger_leftovers(path, entries))
    return out


def clean_ledger(path: Path, dry_run: bool = False) -> list[str]:
    """Remove every object of one ledger (whose owner the caller found dead); returns descriptions."""
    path = Path(path)
    entries = read_ledger(path)
    own = ledger_cleaner(entries)  # a local cluster's ledger: its own teardown (roughnet.cluster.down)
    if own is not None:
        return own.clean_ledger(path, entries, dry_run=dry_run)
    if any(e.get("kind") == "cluster" for e in entries):  # written before ledgers named their cleaner
        raise TopologyError(f"ledger {path} is a local cluster's written by an older roughnet (it names no "
                            f"ledger_cleaner); left alone: take it down with `roughnet cluster down`")
    leftovers = _ledger_leftovers(path, entries)
    if dry_run:
        return [str(x) for x in leftovers]
    removed: list[str] = []
    failures: list[str] = []
    run_id = next((x.run_id for x in leftovers), None)
    namespaces = []
    for e in entries:
        ns = e.get("name")
        if e.get("kind") != "netns" or not isinstance(ns, str) or ns in namespaces:
            continue
        if not ns.startswith(NS_PREFIX):
            # roughnet never creates such a namespace: a hand-edited or foreign ledger.
            log.warning("ledger %s names namespace %r without the %s prefix; left alone", path, ns, NS_PREFIX)
            continue
        namespaces.append(ns)
    # Every process of the run first, and only then its namespaces and ledger: the ledger's processes and
    # anything else inside its namespaces, ended together and waited for until gone.
    stuck = _end_run_processes(entries, namespaces, removed, failures)
    other, other_errors = remove_other(entries)  # containers, working folders, /etc/netns files
    removed += other
    failures += other_errors
    for ns in reversed(namespaces):
        if ns in stuck:  # deleting it now would only hide the processes still in it
            continue
        try:
            if delete_ns(ns):
                removed.append(f"netns {ns} (run {run_id}, ledger {path})")
        except TopologyError as e:
            failures.append(str(e))
    if failures:
        raise TopologyError(f"cleaning ledger {path} left objects behind: {'; '.join(failures)}")
    try:
        path.unlink()
        removed.append(f"ledger {path.name} ({path})")
    except FileNotFoundError:
        pass
    except OSError as e:
        raise TopologyError(f"cannot remove ledger {path}: {e}") from e
    for item in removed:
        log.info("clean: removed %s", item)
    return removed


#: Rounds of "find the run's processes, end them, wait until gone": a process that forks while it is being ended
#: leaves a child in the namespace, which the next round finds.
END_ROUNDS = 3


def _end_run_processes(entries: list[dict], namespaces: list[str], removed: list[str],
                       failures: list[str]) -> set[str]:
    """End every process of a dead run: its ledger's (pid and start time) and any other process inside its
    namespaces (/proc/*/ns/net against each namespace's inode), SIGTERM then SIGKILL, and wait until they are
    gone.  Appends a line per process ended to ``removed`` and a line per process that would not go to
    ``failures``; returns the namespaces that still hold a process (not to be deleted)."""
    recorded = {int(e["pid"]): e for e in entries if e.get("kind") == "process" and "pid" in e}
    seen: set[tuple[int, int | None]] = set()
    for _ in range(END_ROUNDS):
        batch: dict[tuple[int, int | None], str] = {}
        for pid, e in recorded.items():
            key = (pid, e.get("start_time"))
            if key not in seen and process_alive(pid, e.get("start_time")):
                batch[key] = f"process {pid} ({e.get('argv0', '?')}) in {e.get('ns', '?')}"
        for ns, pids in pids_in_namespaces(namespaces).items():
            for pid in pids:
                st = proc_state(pid)
                key = (pid, st[1] if st else None)
                if st is not None and key not in seen and key not in batch:
                    batch[key] = f"process {pid} ({_comm(pid)}, unrecorded) in {ns}"
        if not batch:
            break
        seen |= set(batch)
        ended, left = end_processes(batch)
        for (pid, _), what in batch.items():
            how = ended.get(pid)
            why = left.get(pid)
            if why and not why.startswith("exited"):
                failures.append(f"{what}: {why}")
                continue
            line = what + (f" ({how})" if how else " (had exited already)")
            removed.append(line[:-1] + f"; {why})" if why else line)
    stuck = {ns: pids for ns, pids in pids_in_namespaces(namespaces).items() if pids}
    for ns, pids in stuck.items():
        failures.append(f"namespace {ns} still holds process(es) {', '.join(map(str, pids))} after {END_ROUNDS} "
                        f"rounds of ending them; it and the ledger are kept for another `roughnet clean`")
    return set(stuck)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or "?"
    except OSError:
        return "?"


def _owner_run_id(entries: list[dict]) -> str:
    return str(next((e.get("run_id") for e in entries if e.get("kind") == "owner"), "") or "")


def clean(ledger_dir: Path = DEFAULT_LEDGER_DIR, dry_run: bool = False, run: str | None = None) -> list[str]:
    """Remove the objects of every ledger whose owner is gone; returns a description of each.

    With ``run`` (a ledger's token, e.g. a run id's first 8 characters, or a run id or a prefix of one of at
    least 8 characters) only that ledger is considered; a live run's is left alone (TopologyError saying so).  With ``dry_run`` nothing is
    changed and the descriptions say what would go.  Raises TopologyError (after trying every ledger) if
    something could not be removed.
    """
    removed: list[str] = []
    errors: list[str] = []
    for path in _ledger_files(Path(ledger_dir)):
        entries = read_ledger(path)
        if run is not None and path.name.removesuffix(LEDGER_SUFFIX) != run \
                and not (len(run) >= 8 and _owner_run_id(entries).startswith(run)):
            continue
        if not _is_dead(path, entries):
            if run is not None:
                errors.append(f"run {run} (ledger {path}) is still running (its owner process is alive); left alone")
            continue
        try:
            if dry_run:
                removed += clean_ledger(path, dry_run=True)
                continue
            with directory_lock(Path(ledger_dir)):  # no run of this token starts meanwhile (topo.ledger.Ledger)
                entries = read_ledger(path)  # again, under the lock: a new run of the token may own it by now
                if path.exists() and _is_dead(path, entries):
                    removed += clean_ledger(path, dry_run=False)
        except TopologyError as e:
            errors.append(str(e))
    if errors:
        raise TopologyError("; ".join(errors))
    return removed
