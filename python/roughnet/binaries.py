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
