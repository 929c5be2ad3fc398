"""The backend interface and the choice of a backend by name.

A backend answers three questions for the runner: can every run of this sweep
happen here (``check``, before anything is created; PreflightError naming what
is missing), which engine realises each link (``engines``), and, for one run,
an *environment* (``environment``): an object with ``build()``, ``teardown()``,
``popen(host, argv, **kw)``, ``run(host, argv, **kw)``, ``address(host,
seen_from)``, ``ns(host)``, ``interfaces()``, ``token`` and ``describe()``
(what the record keeps of where the run happened).  ``topo.Topology`` is the
namespace backend's environment; ``backends.kubernetes.env.PodEnvironment``
the Kubernetes one.  A backend that plays the agents itself (``ns3``: a
simulation) has ``plays_agents()`` (what stands for the agent's version line)
and its environment ``run_agents(run, artifacts, specs)`` and
``tcp_counters(host)``, which the runner then uses instead of starting
roughnet-agent and reading /proc; ``simulated = True`` on an environment
keeps the machine's CPU load out of the validity verdict.  A backend that runs
the user's own programs ([[process]]) says ``processes = "here"`` (on this
machine: apps.preflight checks its programs and images) or ``"remote"`` (its
``check`` does; its environment's ``process_runtime()`` starts them, see
``apps.launch``); without it the runner refuses such a scenario.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import PreflightError

#: Backend names ``roughnet run --backend`` accepts.
BACKENDS = ("namespace", "kubernetes", "ns3")


class Backend(Protocol):
    name: str

    def probe(self) -> Any:
        """What this backend can do here (the namespace backend: ``links.Capabilities``); PreflightError if
        it cannot run at all (not root, no namespaces, no cluster)."""

    def check(self, sweep: Any, caps: Any) -> None:
        """Raise PreflightError if some run of ``sweep`` cannot happen on this backend; create nothing."""

    def engines(self, run: Any, caps: Any) -> dict[int, str]:
        """Link index -> the engine that realises that link's impairments."""

    def environment(self, run: Any, ledger: Any, engines: dict[int, str], files: Any = None) -> Any:
        """A fresh, not yet built environment for ``run`` whose objects go to ``ledger``; ``files`` is the
        sweep's folder in the results (what the run's programs may be given as files: configs, certificates)."""

    def describe(self) -> dict[str, Any]:
        """What every record of this backend keeps (name, versions, cluster facts)."""


def backend_for(name: str, **options: Any) -> Backend:
    """The backend called ``name`` with its options (``kubeconfig``, ``image``, ``namespace``, ``cluster``)."""
    if name == "namespace":
        from .namespace import NamespaceBackend

        if any(v is not None for v in options.values()):
            given = ", ".join(f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None)
            raise PreflightError(f"{given}: only for --backend kubernetes; the namespace backend takes no such option")
        return NamespaceBackend()
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend.from_options(**options)
    if name == "ns3":
        from .ns3 import Ns3Backend

        if any(v is not None for v in options.values()):
            given = ", ".join(f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None)
            raise PreflightError(f"{given}: only for --backend kubernetes; the ns3 backend takes no such option")
        return Ns3Backend()
    raise PreflightError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
