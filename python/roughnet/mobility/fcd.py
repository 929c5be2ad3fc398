"""Reading SUMO floating-car data (``sumo --fcd-output``): every vehicle's (x, y) over time.

This module owns the parsing only (standard library XML, no SUMO needed): an FCD file is
``<fcd-export>`` with ``<timestep time="..">`` elements, each holding the ``<vehicle id=.. x=.. y=..>``
present then (SUMO also writes ``<person>`` and ``<container>``: ignored). It returns, per vehicle id,
points in wire-core's ``PositionPoint`` JSON (``{at_ns, x_m, y_m}``, the shape of a host's
``path_trace``), the FCD's time taken as the run's time. A vehicle absent at some time steps (not yet
departed, or gone and back) is held where it was last seen: before its first appearance and after its
last the wire holds the first and last points anyway, and when it comes back after a gap a point at the
last position is added at the time step just before its return, so it does not glide across the gap.

Which hosts are which vehicles, and the scenario errors, are ``spec.positions``'s job; running SUMO to
write an FCD is ``mobility.sumo``'s.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

#: Largest FCD file read (a memory bound: about 100 bytes per vehicle and time step).
FCD_MAX_BYTES = 100_000_000
FCD_EXPECTED = ("a SUMO floating-car-data file (sumo --fcd-output): <fcd-export> with <timestep time=\"..\"> "
                "elements holding <vehicle id=\"..\" x=\"..\" y=\"..\"/>, times never decreasing")

Points = tuple[dict[str, Any], ...]


class FcdError(ValueError):
    """An FCD file that cannot be used; the message says what and where, then '; expected ...'."""


def _number(value: str | None, what: str) -> float:
    where = ""
    if value is None:
        raise FcdError(f"{what} missing{where}; expected {FCD_EXPECTED}")
    try:
        x = float(value)
    except ValueError:
        raise FcdError(f"{what} is not a number{where}; expected {FCD_EXPECTED}") from None
    if not math.isfinite(x):
        raise FcdError(f"{what} is not finite{where}; expected {FCD_EXPECTED}")
    return x


def parse_fcd(source: str | Path | Any, name: str = "") -> dict[str, Points]:
    """Vehicle id -> its points (``{at_ns, x_m, y_m}``, time order, one per time step it is present).

    ``source``: a path or a binary file object. Errors never quote an element or value of a file that is
    not an FCD (a scenario may name any file, issue 26); past the ``<fcd-export>`` root, they name time
    steps and vehicle ids. Raises ``FcdError`` for XML that does not parse (the message
    has its line), a root that is not ``fcd-export``, a time step or vehicle without its numbers (geographic
    FCD, ``--fcd-output.geo``, has ``lon``/``lat`` instead of ``x``/``y``: refused), times that go back.
    """
    name = name or str(source)
    seen: dict[str, list[dict[str, Any]]] = {}
    last_step: dict[str, int] = {}  # vehicle -> index of the last time step it was present in
    steps: list[int] = []  # at_ns of every time step so far
    root_tag = None
    try:
        parser = ET.XMLPullParser(events=("start", "end"))
        with (open(source, "rb") if isinstance(source, (str, Path)) else source) as f:
            while chunk := f.read(1 << 16):
                parser.feed(chunk)
                for event, el in parser.read_events():
                    if event == "start":
                        if root_tag is None:
                            root_tag = el.tag
                            if el.tag != "fcd-export":
                                # The tag is not quoted: a file of another kind must not have its content printed.
                                raise FcdError(f"{name}: the root element is not <fcd-export> (not an FCD file); "
                                               f"expected {FCD_EXPECTED}")
                        continue
                    if el.tag == "vehicle":
                        continue  # read with its time step
                    if el.tag != "timestep":
                        continue
                    at_s = _number(el.get("time"), f"{name}: <timestep> time")
                    at_ns = round(at_s * 1e9)
                    if steps and at_ns < steps[-1]:
                        raise FcdError(f"{name}: time step {el.get('time')} comes after {steps[-1] / 1e9:g}; "
                                       f"expected {FCD_EXPECTED}")
                    steps.append(at_ns)
                    k = len(steps) - 1
                    for v in el.iter("vehicle"):
                        vid = v.get("id")
                        if not vid:
                            raise FcdError(f"{name}: a <vehicle> at time {el.get('time')} has no id; "
                                           f"expected {FCD_EXPECTED}")
                        if v.get("x") is None and v.get("lon") is not None:
                            raise FcdError(f"{name}: vehicle {vid} at time {el.get('time')} has lon/lat, not x/y "
                                           f"(geographic FCD); expected {FCD_EXPECTED}, written without "
                                           "--fcd-output.geo")
                        x = _number(v.get("x"), f"{name}: vehicle {vid} at time {el.get('time')}: x")
                        y = _number(v.get("y"), f"{name}: vehicle {vid} at time {el.get('time')}: y")
                        points = seen.setdefault(vid, [])
                        j = last_step.get(vid)
                        if j is not None and j < k - 1:  # back after a gap: held until the step before
                            points.append({"at_ns": steps[k - 1], "x_m": points[-1]["x_m"],
                                           "y_m": points[-1]["y_m"]})
                        points.append({"at_ns": at_ns, "x_m": x, "y_m": y})
                        last_step[vid] = k
                    el.clear()
            parser.close()
    except ET.ParseError as e:
        raise FcdError(f"{name}: not XML ({e}); expected {FCD_EXPECTED}") from None
    if root_tag is None:
        raise FcdError(f"{name}: empty file; expected {FCD_EXPECTED}")
    return {vid: tuple(points) for vid, points in seen.items()}


def read_fcd(path: Path) -> dict[str, Points]:
    """``parse_fcd`` of a file, refusing one larger than ``FCD_MAX_BYTES``. OSError if it cannot be read."""
    size = path.stat().st_size
    if size > FCD_MAX_BYTES:
        raise FcdError(f"{path}: {size} bytes, more than {FCD_MAX_BYTES}; expected a smaller FCD file (fewer "
                       "vehicles, a longer --device.fcd.period or a shorter --end)")
    return parse_fcd(path, str(path))


__all__ = ["FCD_EXPECTED", "FCD_MAX_BYTES", "FcdError", "Points", "parse_fcd", "read_fcd"]
