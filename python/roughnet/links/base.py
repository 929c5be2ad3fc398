"""The link engine interface and the lookup from an engine name to an engine.

Owns ``LinkEngine`` (what the runner calls) and ``engine_for``.  ``wire`` lives
in ``links/wire.py`` (the userspace emulator's Python side, another part): it is
imported when asked for and must define ``WireEngine`` with the same methods.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from ..errors import LinkError
from ..runspec import Link
from ..topo.build import Topology


class LinkEngine(Protocol):
    name: str

    def apply(self, topo: Topology, link: Link) -> None:
        """Apply both directions of ``link`` inside ``topo``'s namespaces (after build)."""

    def counters(self, topo: Topology, link: Link) -> dict[str, Any]:
        """``{"engine": name, "forward": {"drops_loss": n, "drops_queue": n, "tx_packets": n, ...}, "reverse": {...}}``."""


#: Which engines draw random loss from a generator seeded with the run's seed (so that one run id loses the same
#: frames again) and from which generator: said in every run's ``link_counters`` (``loss_randomness``).
LOSS_RANDOMNESS: dict[str, tuple[bool, str]] = {
    "kernel": (False, "nftables `numgen random` on the receiving side: the kernel's own generator, which cannot "
                      "be seeded; the same run loses different frames each time (at the same rate). For a "
                      "reproducible loss pattern use engine = \"wire\""),
    "netem": (False, "netem's own generator (this machine's tc has no netem seed): the same run loses different "
                     "frames each time (at the same rate). For a reproducible loss pattern use engine = \"wire\""),
    "wire": (True, "roughnet-wire's generator, seeded with the run's seed + the link index (`seed`): the same "
                   "run id and seed lose the same frames of the same traffic"),
}


def loss_randomness(engine: str) -> dict[str, Any]:
    """``{"loss_reproducible": bool, "loss_random": how}`` of an engine, for its counters (run records)."""
    reproducible, how = LOSS_RANDOMNESS[engine]
    return {"loss_reproducible": reproducible, "loss_random": how}


class ClusterNetwork:
    """The ``cluster`` engine: the Kubernetes backend's links without impairments, as the cluster's own
    network carries them.  It applies nothing and counts nothing; an impaired link gets ``pod-wire``
    (backends.kubernetes.podwire) or is refused at preflight.
    """

    name = "cluster"

    def apply(self, topo: Any, link: Link) -> None:
        return None

    def counters(self, topo: Any, link: Link) -> dict[str, Any]:
        return {"engine": self.name}


def engine_for(name: str) -> LinkEngine:
    if name == "ns3":  # the ns3 backend's channels, built with its simulation
        from ..backends.ns3.env import Ns3LinkEngine

        return Ns3LinkEngine()
    if name == "cluster":
        return ClusterNetwork()
    if name == "pod-wire":  # the kubernetes backend's wire inside pods
        from ..backends.kubernetes.podwire import PodWireEngine

        return PodWireEngine()
    if name == "kernel":
        from .kernel import KernelEngine

        return KernelEngine()
    if name == "netem":
        from .netem import NetemEngine

        return NetemEngine()
    if name == "wire":
        try:
            mod = importlib.import_module("roughnet.links.wire")
        except ImportError as e:
            raise LinkError(f"engine \"wire\" has no Python side yet (roughnet.links.wire: {e}); "
                            f"expected it once roughnet-wire lands") from e
        cls = getattr(mod, "WireEngine", None)
        if cls is None:
            raise LinkError("roughnet.links.wire defines no WireEngine; expected a class with apply() and counters()")
        return cls()
    raise LinkError(f"unknown link engine {name!r}; expected kernel, netem, wire or cluster (auto is resolved by choose_engines)")
