"""The link engine interface and the lookup from an engine name to an engine.

Owns ``LinkEngine`` (what the runner calls), what each engine says of its loss generator and the table of
engines that backends bring (``register_engine``); ``links.engines.engine_for`` looks a name up.  This machine's engines (kernel, netem, wire) live in this package; a backend's own
engines (ns3's simulated channels, Kubernetes' ``pod-wire`` and ``cluster``) are registered by the backend's
module when it is imported (``backends.ns3.env``, ``backends.kubernetes.podwire``), which the backend lookup
(``backends.backend_for``) does before any run: this package imports no backend.  ``wire`` lives in
``links/wire.py`` (the userspace emulator's Python side): it is imported when asked for and must define
``WireEngine`` with the same methods.  Imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..runspec import Link

if TYPE_CHECKING:
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


#: Engines a backend brings: name -> a function that makes one (``register_engine``).
BACKEND_ENGINES: dict[str, Callable[[], LinkEngine]] = {}


def register_engine(name: str, make: Callable[[], LinkEngine]) -> None:
    """A backend's engine ``name`` (made by ``make()``), for ``engine_for``; called by the backend's module at import."""
    if name in ("kernel", "netem", "wire", "auto"):
        raise ValueError(f"link engine {name!r} is this machine's own; a backend cannot replace it")
    BACKEND_ENGINES[name] = make
