"""Backends: where a run's hosts, links and services live (shared/DESIGN.md, "Backends").

Who does what: ``base`` defines the interface between the plan and the results
(``Backend``: preflight checks, the engine per link, an environment per run);
``namespace`` is the default backend (network namespaces of this machine, built
by ``topo`` and impaired by ``links``); ``kubernetes`` puts each host in a pod of
a real cluster and drives it through kubectl.  The runner, the results store and
the report see only the interface: an environment that builds, starts processes
in a host, gives addresses and tears down.
"""

from .base import BACKENDS, Backend, backend_for

__all__ = ["BACKENDS", "Backend", "backend_for"]
