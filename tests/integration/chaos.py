"""Self-chaos: interrupt `roughnet run` at a random instant, many times, and check what is left (issue 26).

Used by tests/integration/test_self_chaos.py (50 interrupts) and bench/self_chaos.py (as many as asked). One
iteration: a small scenario with a managed broker (mosquitto), a link on roughnet's wire and an [[event]] is
started into a results folder of its own; at a uniformly random instant within a reference run's duration it
gets SIGINT, SIGTERM or SIGKILL (in turn; the instants stratified over the run); after a SIGKILL `roughnet clean` runs (after SIGINT and SIGTERM nothing may
be left without it). Then: no namespace, process, mount, socket or ledger of the run is left, the root
namespace is as it was, the database holds the run at most once and only with its record.json beside it, and
`roughnet run --resume` completes the sweep (the run then stored exactly once, ok). The phase an interrupt hit is
the last one the run's own log (-v) announced before it.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from roughnet.topo.ledger import DEFAULT_LEDGER_DIR, read_ledger
from roughnet.topo.system import proc_state

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]

SCENARIO = """
[scenario]
name = "self-chaos"
seed = 3
timeout = "30 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[host]]
name = "m"
[[link]]
between = ["a", "m"]
delay = "5 ms"           # roughnet's wire: a process and a control socket of its own
[[link]]
between = ["m", "b"]
[[service]]
kind = "mosquitto"
host = "m"
[workload]
pattern = "stream"
protocol = "mqtt"
from = "a"
to = ["b"]
messages = 60
rate = "100 msg/s"
payload = "200 B"
[[event]]
at = "0.3 s"
link = 0
action = "set"
loss = "2%"
"""

#: The run's log lines that open a phase (roughnet -v), in order; before the first: preflight.
PHASES = (
    ("topology", re.compile(r"run\(s\) to do")),
    ("links", re.compile(r"topology \S+ built")),
    ("services", re.compile(r"wire engine on link")),
    ("agents and events", re.compile(r"mosquitto on host m .* ready in")),
    ("collection, store, teardown", re.compile(r"━━━━━━━━━━")),  # the progress bar: the run has ended
)
SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")


def root_namespace() -> dict[str, str]:
    """What must not change in the root network namespace: links, addresses, routes, rules, qdiscs, nftables."""
    cmds = {"links": ["ip", "-o", "link", "show"], "addrs": ["ip", "-o", "addr", "show"],
            "routes": ["ip", "route", "show", "table", "all"], "rules": ["ip", "rule", "show"],
            "qdiscs": ["tc", "qdisc", "show"], "nft": ["nft", "list", "ruleset"]}
    out = {}
    for key, argv in cmds.items():
        res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        # packet and byte counters and link state flags move by themselves: compare the rest
        text = re.sub(r"\b(packets|bytes) \d+", r"\1 N", res.stdout)
        text = re.sub(r"(valid_lft|preferred_lft) \S+", r"\1 T", text)
        out[key] = "\n".join(sorted(line for line in text.splitlines() if "rn-" not in line or key == "nft"))
    return out


def _ledger_pids(ledger: Path) -> set[tuple[int, int]]:
    return {(int(e["pid"]), int(e["start_time"])) for e in read_ledger(ledger)
            if e.get("kind") == "process" and e.get("start_time") is not None}


def running(pid: int, start: int) -> bool:
    st = proc_state(pid)
    return st is not None and st[1] == start and st[0] not in ("Z", "X")



def _python_init_interrupted(lines: list[str]) -> bool:
    """Python's own words for a SIGINT while it initialises (its standard streams, the site module: before any
    roughnet code): the fatal error line of an init step, and a traceback ending in KeyboardInterrupt."""
    text = "".join(lines)
    return re.search(r"^Fatal Python error: init_\w+: ", text, re.M) is not None and text.rstrip().endswith("KeyboardInterrupt")


@dataclass
class Outcome:
    signal: str
    at_s: float
    phase: str
    exit_code: int | None
    cleaned: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    stored_before_resume: int = 0
    lost: list[str] = field(default_factory=list)  # records lost or doubled


class Chaos:
    """Iterations of one scenario file in ``workdir`` (results folders ``r<N>`` beside it)."""

    def __init__(self, workdir: Path, seed: int):
        self.workdir = workdir
        self.scenario = workdir / "self-chaos.toml"
        self.scenario.write_text(SCENARIO)
        self.rng = random.Random(seed)
        shown = subprocess.run([*ROUGHNET, "show", str(self.scenario), "--json"], capture_output=True, text=True,
                               check=True, timeout=60).stdout
        runs = json.loads(shown)
        self.run_ids = [r["run_id"] for r in runs]
        self.tokens = {rid[:8] for rid in self.run_ids}
        self.root = root_namespace()
        self.reference_s = 0.0

    def _argv(self, results: Path, resume: bool = False) -> list[str]:
        return [*ROUGHNET, "-v", "run", str(self.scenario), "--results", str(results), "--no-report",
                *(["--resume"] if resume else [])]

    def reference(self) -> float:
        """One uninterrupted run: its duration is the window the interrupts fall in."""
        t = time.monotonic()
        res = subprocess.run(self._argv(self.workdir / "reference"), capture_output=True, text=True, timeout=120)
        self.reference_s = time.monotonic() - t
        if res.returncode != 0:
            raise AssertionError(f"the reference run failed ({res.returncode}): {res.stderr[-2000:]}")
        return self.reference_s

    def iteration(self, n: int, of: int = 1) -> Outcome:
        """Interrupt ``n`` of ``of``: its instant is uniformly random within the n-th of ``of`` equal slices of
        the reference run (stratified: every part of the run gets its share of interrupts)."""
        results = self.workdir / f"r{n}"
        sig = SIGNALS[n % len(SIGNALS)]  # each in turn
        at = (n % of + self.rng.random()) / of * self.reference_s
        proc = subprocess.Popen(self._argv(results), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)
        phase = ["preflight"]
        lines: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                for name, pattern in PHASES:
                    if pattern.search(line):
                        phase[0] = name
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        pids: set[tuple[int, int]] = set()
        deadline = time.monotonic() + at
        while time.monotonic() < deadline and proc.poll() is None:  # the ledger's processes, as they start
            for t in self.tokens:
                pids |= _ledger_pids(DEFAULT_LEDGER_DIR / f"{t}.jsonl")
            time.sleep(0.02)
        hit = phase[0] if proc.poll() is None else "after the end"
        if proc.poll() is None:
            os.kill(proc.pid, getattr(__import__("signal"), sig))
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            lines.append(f"roughnet did not end within 120 s of {sig}\n")
        reader.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        for t in self.tokens:
            pids |= _ledger_pids(DEFAULT_LEDGER_DIR / f"{t}.jsonl")
        out = Outcome(sig, round(at, 3), hit, code)
        if sig == "SIGKILL" and hit != "after the end":
            res = subprocess.run([*ROUGHNET, "clean"], capture_output=True, text=True, timeout=300)
            out.cleaned = [ln for ln in res.stdout.splitlines() if ln.strip()]
            if res.returncode != 0:
                out.leaks.append(f"roughnet clean failed ({res.returncode}): {res.stderr.strip()[-500:]}")
        elif code not in (0, 130, 143, -2, -15) and not (sig == "SIGINT" and code == 1 and _python_init_interrupted(lines)):
            # -2/-15: the signal's default action, before roughnet installed its handlers (Python starting up:
            # nothing made yet, which leftovers() checks); exit 1 only for Python's own KeyboardInterrupt while
            # it initialises, before any roughnet code runs (seen in CI at 5 ms, in the site module)
            out.leaks.append(f"exit code {code} after {sig} ({hit}): {''.join(lines)[-1500:]}")
        out.leaks += self.leftovers(results, pids)
        out.stored_before_resume, problems = self.stored(results)
        out.lost += problems
        if out.stored_before_resume < len(self.run_ids) or problems:  # (else --resume would have nothing to do)
            res = subprocess.run(self._argv(results, resume=True), capture_output=True, text=True, timeout=180)
            if res.returncode != 0:
                out.lost.append(f"--resume failed ({res.returncode}): {res.stdout[-800:]} {res.stderr[-800:]}")
        count, problems = self.stored(results, final=True)
        out.lost += problems
        if count != len(self.run_ids):
            out.lost.append(f"after --resume the database holds {count} of {len(self.run_ids)} runs")
        out.leaks += self.leftovers(results, set())
        return out

    def leftovers(self, results: Path, pids: set[tuple[int, int]]) -> list[str]:
        """What the run left: namespaces, ledgers, processes, mounts, sockets; a changed root namespace."""
        left = []
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout.split()
        left += [f"namespace {n}" for n in names if n.startswith("rn-") and n.split("-")[1] in self.tokens]
        left += [f"ledger {DEFAULT_LEDGER_DIR / (t + '.jsonl')}" for t in self.tokens
                 if (DEFAULT_LEDGER_DIR / f"{t}.jsonl").exists()]
        left += [f"process {p}" for p, st in pids if running(p, st)]
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            st = proc_state(int(d.name))
            if st is not None and st[0] not in ("Z", "X") and (str(results) in cmd or
                                                               any(f"rn-{t}" in cmd for t in self.tokens)):
                left.append(f"process {d.name}: {cmd[:200]}")
        mounts = Path("/proc/self/mounts").read_text()
        left += [f"mount {ln.split()[1]}" for ln in mounts.splitlines()
                 if any(f"rn-{t}" in ln for t in self.tokens) or str(results) in ln]
        for p in [*Path("/run/roughnet").glob("**/*"), *Path("/tmp").iterdir()]:  # sockets, folders of the run
            if any(t in p.name for t in self.tokens) and not p.is_relative_to(self.workdir):
                left.append(f"file {p}")
        now = root_namespace()
        left += [f"root namespace {k} changed:\n{self.root[k]}\n->\n{now[k]}" for k in now if now[k] != self.root[k]]
        return left

    def stored(self, results: Path, final: bool = False) -> tuple[int, list[str]]:
        """(runs in the database, problems): every run at most once, each with its record.json (final: ok)."""
        db = results / "results.duckdb"
        if not db.exists():
            return 0, []
        try:
            con = duckdb.connect(str(db), read_only=True)
            try:
                tables = {t for (t,) in con.execute("select table_name from duckdb_tables()").fetchall()}
                if not tables:  # interrupted while the store created it: its schema is made in one transaction
                    return 0, []  # (results.migrate.create), so it is empty, and the next open creates it
                rows = con.execute("select run_id, status from runs").fetchall()
            finally:
                con.close()
        except duckdb.Error as e:
            return 0, [f"database {db} unreadable: {e}"]
        problems = []
        ids = [r[0] for r in rows]
        if len(ids) != len(set(ids)):
            problems.append(f"a run stored twice: {ids}")
        for run_id, status in rows:
            if not list(results.glob(f"runs/*/{run_id}/record.json")):
                problems.append(f"run {run_id} stored without its record.json")
            if final and status != "ok":
                problems.append(f"run {run_id} stored as {status}")
        return len(set(ids)), problems


def summary(outcomes: list[Outcome]) -> dict:
    """Interrupts tried per phase and signal, leaks and records lost (for the test's message and the bench)."""
    per: dict[str, dict[str, int]] = {}
    for o in outcomes:
        per.setdefault(o.phase, {}).setdefault(o.signal, 0)
        per[o.phase][o.signal] += 1
    return {"interrupts": len(outcomes), "per_phase": per, "leaks": sum(len(o.leaks) for o in outcomes),
            "records_lost": sum(len(o.lost) for o in outcomes)}
