"""Hosts as network namespaces, links as veth pairs and bridges; the ledger and cleanup.

Who does what: ``naming`` says what things are called and where they sit (pure);
``overlay`` builds VXLAN overlays on top of links;
``ledger`` writes down each object before it exists; ``build.Topology`` creates
a run's namespaces and links and starts processes in them; ``clean`` removes
what dead runs left; ``system`` runs the commands.  Impairments are ``links``'s.
"""

from .build import IfaceInfo, Topology
from .clean import Leftover, clean, clean_ledger, list_leftovers
from .ledger import DEFAULT_LEDGER_DIR, Ledger, process_alive, process_start_time

__all__ = [
    "DEFAULT_LEDGER_DIR",
    "IfaceInfo",
    "Leftover",
    "Ledger",
    "Topology",
    "clean",
    "clean_ledger",
    "list_leftovers",
    "process_alive",
    "process_start_time",
]
