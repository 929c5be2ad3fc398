"""Running scenarios through the `roughnet` CLI as a user does, for the integration tests that do.

Owns: the command line of `roughnet run`, running it to its end with its exit code checked,
reading tables of the results.duckdb it wrote, and which protocols the built roughnet-agent
speaks (for skip marks).  Does not own: the scenario texts (tests/conftest.py has the shared
TOML pieces) or what a test asserts about the results.  Imported as ``from cli_run import ...``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import duckdb
import pytest

from roughnet.binaries import agent_version, find_binary

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]
RUNS = "select * from runs order by run_index"


def agent_protocols() -> set[str]:
    """The protocols the built roughnet-agent speaks (none when it is missing or broken)."""
    agent = find_binary("roughnet-agent")
    if agent is None:
        return set()
    try:
        return set(agent_version(str(agent)).get("protocols", []))
    except Exception:  # noqa: BLE001 - a broken binary shows up as "protocol missing"
        return set()


PROTOCOLS = agent_protocols()


def needs(*protocols: str) -> pytest.MarkDecorator:
    """Skip (with the reason) unless roughnet-agent speaks every one of ``protocols``."""
    missing = [p for p in protocols if p not in PROTOCOLS]
    return pytest.mark.skipif(bool(missing), reason=f"roughnet-agent built without {', '.join(missing)} (make build)")


def run_argv(path: Path, results: Path, report: bool = False) -> list[str]:
    """`roughnet run` of the scenario file ``path`` into ``results`` (``--no-report`` unless ``report``)."""
    return [*ROUGHNET, "run", str(path), *([] if report else ["--no-report"]), "--results", str(results)]


def roughnet_run(path: Path, results: Path, *, timeout: float, report: bool = False,
                 exit_codes: Collection[int] = (0,)) -> subprocess.CompletedProcess:
    """Run run_argv() to its end; assert its exit code is one of ``exit_codes`` and, with ``report``,
    that it wrote a report."""
    out = subprocess.run(run_argv(path, results, report), capture_output=True, text=True, timeout=timeout)
    assert out.returncode in exit_codes, \
        f"roughnet run exited {out.returncode}:\n{out.stdout[-4000:]}\n{out.stderr[-3000:]}"
    if report:
        assert "report:" in out.stdout
    return out


def fetch(results: Path, sql: str) -> list[dict]:
    """The rows ``sql`` selects from ``results``/results.duckdb, each as a dict column -> value."""
    con = duckdb.connect(str(results / "results.duckdb"), read_only=True)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        con.close()


def run_all_ok(path: Path, results: Path, timeout: float) -> list[dict]:
    """`roughnet run` with its report, exit code 0; the stored runs in order, each asserted ``ok``."""
    roughnet_run(path, results, timeout=timeout, report=True)
    rows = fetch(results, RUNS)
    for r in rows:
        assert r["status"] == "ok", (r["params"], r["failure_reason"])
    return rows
