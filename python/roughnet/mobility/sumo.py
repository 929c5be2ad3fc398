"""Running SUMO headless to write floating-car data: ``roughnet mobility fcd NET ROUTES --out FILE``.

This module owns finding SUMO (the ``sumo`` binary of the ``eclipse-sumo`` wheel, ``sumo.SUMO_HOME/bin``,
which ``make`` installs through the ``sim`` extra) and one ``sumo`` run that writes an FCD file
(``--fcd-output``). It does not read the FCD (``mobility.fcd``) nor map vehicles to hosts
(``spec.positions``). A scenario replays an FCD written beforehand (then runs need no SUMO), or names
a network and routes: ``simulate`` then runs SUMO when the sweep is planned, before anything is created.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import RoughnetError, SpecError
from .fcd import Points, read_fcd

#: Longest simulation written (a bound on the FCD's size and SUMO's run time).
MAX_END_S = 3600.0
#: Shortest SUMO step (SUMO's own minimum is 1 ms).
MIN_STEP_S = 0.001


class SumoError(RoughnetError):
    """SUMO is missing or failed on the given network and routes."""

    exit_code = 2


@dataclass(frozen=True)
class Sumo:
    home: Path  # SUMO_HOME of the wheel: bin/, data/, tools/
    binary: Path  # home / "bin" / "sumo"


def find_sumo() -> Sumo:
    """The ``eclipse-sumo`` wheel's SUMO; ``SumoError`` naming the fix when it is not installed."""
    try:
        import sumo  # the eclipse-sumo wheel's package
    except ImportError:
        raise SumoError("SUMO is not installed (the eclipse-sumo package); expected `make extras` (the 'sim' extra: "
                        "pip install -e '.[sim]')") from None
    home = Path(sumo.SUMO_HOME)
    binary = home / "bin" / "sumo"
    if not os.access(binary, os.X_OK):
        raise SumoError(f"{binary} is not an executable; expected the eclipse-sumo wheel's sumo binary "
                        "(reinstall it: make)")
    return Sumo(home=home, binary=binary)


def write_fcd(net: Path, routes: list[Path], out: Path, end_s: float, step_s: float, seed: int = 1,
              timeout_s: float = 600.0) -> Path:
    """Run ``sumo`` on ``net`` and ``routes`` from 0 to ``end_s`` seconds in steps of ``step_s``, writing the
    position of every vehicle at every step to ``out`` (FCD XML). ``SpecError`` for bad arguments (before
    SUMO starts), ``SumoError`` with SUMO's own message when it refuses the files."""
    for what, p in [("NET", net), *(("ROUTES", r) for r in routes)]:
        if not p.is_file():
            kind = "network (.net.xml)" if what == "NET" else "route file (.rou.xml)"
            raise SpecError(f"{what} {p}: no such file; expected a SUMO {kind}")
    if not 0 < end_s <= MAX_END_S:
        raise SpecError(f"--end {end_s:g} s: expected a duration above 0 and at most {MAX_END_S:g} s")
    if not MIN_STEP_S <= step_s <= end_s:
        raise SpecError(f"--step {step_s:g} s: expected a duration from {MIN_STEP_S:g} s to --end")
    s = find_sumo()
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(s.binary), "--net-file", str(net), "--route-files", ",".join(str(r) for r in routes),
           "--begin", "0", "--end", f"{end_s:g}", "--step-length", f"{step_s:g}", "--fcd-output", str(out),
           "--seed", str(seed), "--no-step-log", "true", "--duration-log.disable", "true",
           "--xml-validation", "never"]  # fmt: skip
    env = dict(os.environ, SUMO_HOME=str(s.home))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SumoError(f"sumo did not finish within {timeout_s:g} s on {net}; expected a shorter --end") from None
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.startswith("Error")]
        detail = "; ".join(lines[:3]) or (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SumoError(f"sumo failed on {net} and {', '.join(map(str, routes))} (exit {done.returncode}): {detail}")
    return out


_simulated: dict[tuple, dict[str, Points]] = {}


def simulate(net: Path, routes: list[Path], end_s: float, step_s: float, seed: int) -> dict[str, Points]:
    """The FCD of ``write_fcd`` on these files, parsed (``mobility.fcd.read_fcd``): vehicle id -> points.

    Written to a temporary folder and removed; the result is kept for the process (keyed on the files'
    paths, sizes and modification times, and the arguments), so the points of a sweep run SUMO once.
    """
    key = (tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in (net, *routes)),
           end_s, step_s, seed)  # fmt: skip
    if key not in _simulated:
        with tempfile.TemporaryDirectory(prefix="roughnet-sumo-") as tmp:
            out = write_fcd(net, routes, Path(tmp) / "fcd.xml", end_s, step_s, seed=seed)
            _simulated[key] = read_fcd(out)
    return _simulated[key]


__all__ = ["MAX_END_S", "MIN_STEP_S", "Sumo", "SumoError", "find_sumo", "simulate", "write_fcd"]
