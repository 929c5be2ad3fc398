"""A run's environment on the ns3 backend: the runner's view of one simulation.

The runner asks an environment for addresses, counters and agents; here the agents are played by
the simulation.  ``run_agents`` takes the agents' configurations the runner built (the same objects
roughnet-agent gets), runs the simulation (``sim``) once, writes each simulated agent's result line
to the run's folder under the agent's file names, and hands back objects that look like finished
agent processes, so ``run.collect`` and the results store take them unchanged.  Nothing is created
on the machine: build and teardown only manage the run's ledger file.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import TopologyError
from ...links.base import register_engine
from ...topo import naming
from . import results, sim

log = logging.getLogger(__name__)


@dataclass
class SimulatedAgent:
    """An agent the simulation played: what run.collect reads of an agent process."""

    spec: Any  # run.agents.AgentSpec
    result: dict[str, Any] | None
    out_path: Path
    error: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.spec.role}@{self.spec.host} (ns-3)"

    def stderr_tail(self, limit: int = 2000) -> str:
        return ""

    def describe_failure(self) -> str:
        return f"{self.name}: {(self.error or {}).get('message', 'no result')}"


class Ns3LinkEngine:
    """The link "engine" of the ns3 backend: the channels are built with the simulation, so ``apply`` has
    nothing to do; ``counters`` are the simulation's drops of that link (after ``run_agents``)."""

    name = "ns3"

    def apply(self, topo: Any, link: Any) -> None:
        return None

    def counters(self, topo: Any, link: Any) -> dict[str, Any]:
        return topo.link_counters(link)


register_engine(Ns3LinkEngine.name, Ns3LinkEngine)


class Ns3Environment:
    #: Results are in simulated time: the runner does not judge them by the machine's CPU load.
    simulated = True

    def __init__(self, run: Any, ledger: Any, backend_info: dict[str, Any]):
        self.spec = run
        self.ledger = ledger
        self.token = ledger.token
        self._hosts = run.host_names()
        self._info = dict(backend_info)
        self._raw: sim.Raw | None = None

    # ---- lifecycle: nothing on the machine ------------------------------------------

    def build(self) -> None:
        naming.check_names(self.token, self._hosts, self.spec.links)

    def teardown(self) -> None:
        try:
            self.ledger.remove_file()
        except Exception as e:  # noqa: BLE001 - teardown never raises
            log.warning("removing the ledger of run %s: %s", self.token, e)

    # ---- what the runner asks -------------------------------------------------------

    def address(self, host: str, seen_from: str) -> str:
        for h in (host, seen_from):
            if h not in self._hosts:
                raise TopologyError(f"unknown host {h!r}; expected one of {self._hosts}")
        return str(naming.address_seen_from(host, seen_from, self._hosts, self.spec.links))

    def ns(self, host: str) -> str:
        return f"ns-3 node {host}"

    def interfaces(self) -> list[Any]:
        return []

    def namespaces(self) -> list[str]:
        return []

    def popen(self, host: str, argv: Any, **kw: Any) -> Any:
        raise TopologyError(f"the ns3 backend runs no programs (asked to start {argv[0]} on {host}); "
                            "hosts are simulated nodes")

    def run(self, host: str, argv: Any, **kw: Any) -> Any:
        raise TopologyError(f"the ns3 backend runs no programs (asked to run {argv[0]} on {host}); "
                            "hosts are simulated nodes")

    def tcp_counters(self, host: str) -> dict[str, int]:
        """The node's TCP and UDP counters (kernel names): zero before the simulation, its counts after."""
        if self._raw is None:
            return {}
        return dict(self._raw.node_counters.get(host, {}))

    def link_counters(self, link: Any) -> dict[str, Any]:
        if self._raw is None:
            return {"engine": "ns3"}
        return self._raw.link_counters.get(link.index, {"engine": "ns3"})

    def run_agents(self, run: Any, artifacts: Path, specs: list[Any]) -> list[SimulatedAgent]:
        """Simulate the run with ``specs`` (receivers first, the sender last); the agents as if they had run."""
        for spec in specs:
            base = f"agent-{spec.host}-{spec.role}"
            (artifacts / f"{base}.config.json").write_text(json.dumps(spec.config, indent=1))
        raw = sim.simulate(run, specs)
        self._raw = raw
        self._info.update({
            "simulated_s": round(raw.simulated_s, 6), "wall_s": round(raw.wall_s, 6),
            "sim_wall_ratio": round(raw.simulated_s / raw.wall_s, 3) if raw.wall_s > 0 else None,
            "model": raw.model,
        })
        agents = []
        peers = len(specs) - 1
        for spec, fields in raw.apps:
            result = _result(spec, fields, peers)
            out = artifacts / f"agent-{spec.host}-{spec.role}.jsonl"
            out.write_text(json.dumps(result, separators=(",", ":")) + "\n")
            agents.append(SimulatedAgent(spec, result, out))
        return agents

    def describe(self) -> dict[str, Any]:
        return dict(self._info)


def _result(spec: Any, r: dict[str, Any], peers: int) -> dict[str, Any]:
    """The result line of the Application that played ``spec``, from its fields (``sim.read_app``)."""
    tcp = spec.config["protocol"] == "tcp"
    pattern = spec.config.get("pattern") or "stream"  # UDP: stream, or bulk (the same Applications)
    if spec.role == "receiver":
        return results.bulk_receiver(r) if tcp else results.stream_receiver(r, pattern)
    return results.bulk_sender(r, peers) if tcp else results.stream_sender(r, peers, pattern)
