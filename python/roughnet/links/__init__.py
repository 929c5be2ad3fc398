"""Link engines: how a link's impairments are applied, and which engine applies them.

Who does what: ``caps`` probes what this machine can do; ``choose`` resolves
``auto`` and checks explicit choices at preflight; ``points`` says which
interface carries each direction; ``kernel`` (tbf + nftables) and ``netem``
apply impairments and read their counters; ``wire`` (another part) drives the
userspace emulator in a relayed link's namespace; ``base`` holds the interface and
the engines a backend registers; ``engines`` finds an engine by name.
"""

from .base import LinkEngine, register_engine
from .caps import Capabilities, find_wire, probe_capabilities
from .choose import AUTO_ORDER, ENGINE_FEATURES, choose_engine, choose_engines
from .engines import engine_for

__all__ = [
    "AUTO_ORDER",
    "ENGINE_FEATURES",
    "Capabilities",
    "LinkEngine",
    "choose_engine",
    "choose_engines",
    "engine_for",
    "find_wire",
    "probe_capabilities",
    "register_engine",
]
