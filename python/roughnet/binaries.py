"""Finding roughnet's own binaries (roughnet-agent, roughnet-wire).

Looked up in order: the environment variable (``ROUGHNET_AGENT``,
``ROUGHNET_WIRE``), ``<repo>/bin/<name>`` (where ``make`` puts them), the
shared cargo target ``/var/cache/roughnet/target/release/<name>``, then PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from .errors import AgentError

REPO_ROOT = Path(__file__).resolve().parents[2]
CARGO_TARGET = Path(os.environ.get("CARGO_TARGET_DIR", "/var/cache/roughnet/target"))

_ENV = {"roughnet-agent": "ROUGHNET_AGENT", "roughnet-wire": "ROUGHNET_WIRE"}


def find_binary(name: str) -> Path | None:
    """Path of one of roughnet's binaries, or None when it is not built."""
    env = os.environ.get(_ENV.get(name, ""), "")
    candidates = [Path(env)] if env else []
    candidates += [REPO_ROOT / "bin" / name, CARGO_TARGET / "release" / name]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    return Path(found) if found else None


def require_binary(name: str) -> Path:
    path = find_binary(name)
    if path is None:
        raise AgentError(
            f"{name} is not built; expected it in ${_ENV.get(name, '')}, {REPO_ROOT / 'bin'}, "
            f"{CARGO_TARGET / 'release'} or PATH (run `make build`)"
        )
    return path


#: Every protocol driver of roughnet-agent (crates/agent/src/drivers; each but tcp and udp is a cargo feature).
AGENT_DRIVERS = ("tcp", "udp", "mqtt", "kafka", "nats", "zenoh", "zmq", "dds")
#: The make target that builds roughnet-agent with every driver (`make demo` builds tcp and udp only when no
#: agent is installed yet; issue 31).
FULL_AGENT_TARGET = "make build"


def agent_drivers(agent: dict) -> tuple[list[str], list[str]]:
    """(drivers built, drivers missing) of an agent's ``version`` line. An agent older than the
    ``missing`` field was built with every driver it lists (missing: none)."""
    built = [str(p) for p in agent.get("protocols", [])]
    missing = [str(p) for p in agent.get("missing", [])]
    return built, missing


def lacking_drivers_message(agent_path: str, agent: dict, needed: dict[str, list[int]]) -> str | None:
    """Why this agent cannot run the protocols ``needed`` (protocol -> run indexes), naming each protocol
    and the make target that adds it; None when it has them all."""
    built, _ = agent_drivers(agent)
    lacking = [p for p in needed if p not in built]
    if not lacking:
        return None
    known = [p for p in lacking if p in AGENT_DRIVERS]
    runs = "; ".join(f"protocol {p!r}: run{'s' if len(needed[p]) > 1 else ''} "
                     f"{', '.join(str(i) for i in needed[p][:8])}{', ...' if len(needed[p]) > 8 else ''}"
                     for p in lacking)
    kind = agent.get("build")
    what = f"{agent_path} ({'a ' + kind + ' build, ' if kind else ''}drivers: {', '.join(built) or 'none'})"
    if not known:
        return (f"this roughnet-agent does not speak {', '.join(repr(p) for p in lacking)} ({runs}); "
                f"{what}")
    msg = (f"this roughnet-agent was built without the {' and '.join(known)} driver{'s' if len(known) > 1 else ''} "
           f"({runs}): {what}. `{FULL_AGENT_TARGET}` builds it with every driver (a few minutes the first time; "
           f"`make demo` builds tcp and udp only)")
    if "kafka" in known:
        msg += "; Kafka's broker also needs its jars: `make setup` does both"
    return msg


@lru_cache(maxsize=None)
def agent_version(path: str) -> dict:
    """The agent's own ``version`` line (protocols and patterns it speaks)."""
    out = subprocess.run([path, "version"], capture_output=True, text=True, timeout=10, check=False)
    for line in out.stdout.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if obj.get("type") == "version":
            return obj
    raise AgentError(f"{path} version printed no version line (exit {out.returncode}): {out.stderr.strip()[-300:]}")
