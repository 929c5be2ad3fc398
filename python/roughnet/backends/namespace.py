"""The namespace backend: hosts are network namespaces of this machine (the default).

It only wires the existing stages into the backend interface: ``topo`` builds the
namespaces and links, ``links`` chooses and applies the engines.
"""

from __future__ import annotations

import os
from typing import Any

from .. import links, topo
from ..errors import PreflightError


class NamespaceBackend:
    name = "namespace"
    processes = "here"  # user processes run on this machine (apps.launch)

    def probe(self) -> links.Capabilities:
        if os.geteuid() != 0:
            raise PreflightError("roughnet run needs root (it creates network namespaces); run it as root")
        caps = links.probe_capabilities()
        if not caps.netns:
            raise PreflightError("network namespaces are not usable here (`ip netns add` failed); roughnet needs them")
        return caps

    def check(self, sweep: Any, caps: Any) -> None:
        """Everything the namespace backend needs is checked by ``probe`` and the engines' choice."""

    def engines(self, run: Any, caps: Any) -> dict[int, str]:
        return links.choose_engines(run, caps)

    def environment(self, run: Any, ledger: Any, engines: dict[int, str], files: Any = None) -> topo.Topology:
        return topo.Topology(run, ledger, engines=engines)

    def describe(self) -> dict[str, Any]:
        return {"backend": "namespace", "kernel": os.uname().release}
