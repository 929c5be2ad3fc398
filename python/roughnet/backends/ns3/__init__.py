"""The ns3 backend: a run's hosts are ns-3 nodes, its links ns-3 channels, in simulated time.

Who does what: ``preflight`` refuses, naming the key, what the simulation cannot express (and
imports nothing); ``sim`` builds and runs one simulation (the only module that imports ns-3, lazily,
with ``apps.cc`` JIT-compiled into it); ``results`` turns the simulation's counts into the agents'
result lines; ``env`` is a run's environment, through which the runner gets agents' results as if
roughnet-agent had run.  The runner, the results store and the report see only the backend
interface (``backends.base``), and records carry ``backend = "ns3"`` with ns-3's version, the
simulated and wall-clock seconds and the model used (``backend_info``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ... import runspec
from ...errors import PreflightError
from . import preflight
from .env import Ns3Environment


class Ns3Backend:
    name = "ns3"

    def probe(self) -> dict[str, Any]:
        """ns-3's Python package is installed (checked without importing it: that takes ~10 s)."""
        if importlib.util.find_spec("ns") is None or importlib.util.find_spec("ns3") is None:
            raise PreflightError("the ns3 backend needs ns-3's Python package (PyPI `ns3`); `make test` installs it "
                                 "(`make extras`, or pip install -e '.[sim]')")
        from .sim import version

        return {"ns3_version": version()}

    def plays_agents(self) -> dict[str, Any]:
        """In place of roughnet-agent's version line: the simulation plays the agents, so the runner starts
        none; every protocol and pattern passes here and ``check`` refuses what the simulation lacks."""
        from .sim import version

        return {"agent": f"ns-3 {version()}", "protocols": list(runspec.PROTOCOLS),
                "patterns": list(runspec.PATTERNS)}

    def check(self, sweep: Any, caps: Any) -> None:
        preflight.check(sweep)

    def engines(self, run: Any, caps: Any) -> dict[int, str]:
        return {link.index: "ns3" for link in run.links}

    def environment(self, run: Any, ledger: Any, engines: dict[int, str], files: Any = None) -> Ns3Environment:
        return Ns3Environment(run, ledger, self.describe())

    def describe(self) -> dict[str, Any]:
        from .sim import version

        return {"backend": "ns3", "ns3_version": version(), "time": "simulated"}
