"""From an engine's name to the engine: this machine's own (kernel, netem, wire) and those a backend registered
(``links.base.register_engine``)."""

from __future__ import annotations

import importlib

from ..errors import LinkError
from .base import BACKEND_ENGINES, LinkEngine


def engine_for(name: str) -> LinkEngine:
    make = BACKEND_ENGINES.get(name)
    if make is not None:  # a backend's (registered when its module was imported)
        return make()
    if name == "kernel":
        from .kernel import KernelEngine  # (each imported when asked for: netem's and the wire's tools are optional)

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
    known = ", ".join(["kernel", "netem", "wire", *sorted(BACKEND_ENGINES)])
    raise LinkError(f"unknown link engine {name!r}; expected one of {known} (auto is resolved by choose_engines; "
                    f"a backend's engines are known once its backend is loaded: backends.backend_for)")
