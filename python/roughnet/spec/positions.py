"""Where the hosts are: ``[[host]] position`` and ``[[host.path]]``, for links whose loss follows distance.

This module owns the host keys of issue 16's per-pair links: a fixed ``position = ["x", "y"]`` (two
signed distances on a plane, like ``["120 m", "-5 m"]``) or a path over time (``[[host.path]]``
entries: ``at``, ``position``; linear between points, held before the first and after the last),
their checks against the links, and their wire-core JSON (``LinkConfig.positions``: per port, in the
link's ``between`` order, ``[{at_ns, x_m, y_m}]``).

A moving host's path may also come from a file, ``path_trace = "car1.csv"`` (relative to the scenario
file; ``time_s,x_m,y_m`` lines, plain numbers, times never decreasing; ``#`` comments, blank lines and
one header line allowed), read by ``read_path_files`` like the links' distance traces. Or from a vehicle
of a SUMO floating-car-data file (``[mobility] fcd = "town.fcd.xml"``, ``[[host]] vehicle = "veh3"``;
parsed by ``mobility.fcd``): the host's path is the vehicle's (x, y) at every time step, exactly as a
``path_trace`` of those lines. ``[mobility] net`` and ``routes`` instead of ``fcd``: SUMO simulates them
when the sweep is planned (``mobility.sumo.simulate``) and the hosts replay that FCD.

A link is *distance-based* when its loss model is ``ieee80211p`` or ``distance_table`` (on the link, a
direction or a schedule entry) or its profile is ``v2v-80211p``. On such a link whose hosts have positions, the
wire draws every frame's loss from the distance between the sender and each receiver (a shared
segment: per pair and per copy; docs/wire-models.md "Per-pair links"). The rules: if one host of a
distance-based link has a position, every host of it must (the error names the host); such a link
takes its distances from the positions, so it has no ``distance`` / ``distance_trace`` and its
model no fixed ``distance``; a host with a position must be on some distance-based link (a position
nothing uses would describe another network than the one measured). Hosts without positions on a
distance-based link keep the link's one distance (``distance``, ``distance_trace``, or the model's).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .. import units
from ..errors import RoughnetError
from . import kinds
from .kinds import has_placeholder
from .problems import Problem
from .table import Table, field
from .tracefile import read_trace_text, time_order_problems, timed_rows
from .wire import DISTANCE, DISTANCE_MODELS, _number_unit
from ..mobility.fcd import FCD_EXPECTED, FcdError, read_fcd
from ..mobility import sumo

if TYPE_CHECKING:
    from .model import LinkTable, Scenario

COORDINATE = "a coordinate like '120 m' or '-5 m' (units: m, km)"
POSITION_EXPECTED = "a position [x, y] of two coordinates like [\"120 m\", \"-5 m\"] (units: m, km)"
PATH_EXPECTED = ("a CSV file of 'time_s,x_m,y_m' lines (seconds and metres as plain numbers, times never "
                 "decreasing; '#' comments, blank lines and one header line allowed)")
#: Largest path file read (a memory bound, as for distance traces).
PATH_MAX_BYTES = 10_000_000
#: The profile whose loss model is distance-based.
DISTANCE_PROFILES = ("v2v-80211p",)
_UNITS = {"m": 1.0, "km": 1000.0}
#: The host keys that place a host (one of them at most), with their names in messages.
PLACEMENTS = {"position": "position", "path": "[[host.path]]", "path_trace": "path_trace", "vehicle": "vehicle"}
VEHICLE = kinds.text("a vehicle id of the [mobility] fcd file, like \"veh3\"")


def parse_coordinate_m(value: Any) -> float:
    """``"-1.5 km"`` -> -1500.0 (metres, signed)."""
    number, unit = _number_unit(value, COORDINATE, signed=True)
    mult = _UNITS.get(unit)
    if mult is None:
        raise ValueError(f"unknown distance unit {unit!r}; expected {COORDINATE}")
    return float(number) * mult


def _check_position(value: Any) -> None:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"not a list of two coordinates; expected {POSITION_EXPECTED}")
    for v in value:
        if has_placeholder(v):
            continue
        try:
            parse_coordinate_m(v)
        except ValueError as e:
            raise ValueError(f"{str(e).split('; expected ', 1)[0]}; expected {POSITION_EXPECTED}") from None


POSITION = kinds.Kind(POSITION_EXPECTED, _check_position,
                      {"type": "array", "minItems": 2, "maxItems": 2,
                       "items": {"type": "string", "examples": ["120 m", "-5 m"]}})  # fmt: skip


class PathPointTable(Table):
    """``[[host.path]]``: where the host is at one time; between points it moves in a straight line."""

    at: kinds.duration().type() = field("Time after the start of the run: " + kinds.DURATION + ".")
    position: POSITION.type() = field("Where the host is then: " + POSITION_EXPECTED + ".")
    key_noun: ClassVar[str] = "key"
    key_owner: ClassVar[str] = "[[host.path]]"


class MobilityTable(Table):
    """``[mobility]``: where the vehicles of the hosts with ``vehicle = "..."`` come from."""

    fcd: kinds.text("a path to a SUMO FCD file (sumo --fcd-output XML)", placeholders=False).type() = field(
        "The file, relative to the scenario file, written by `sumo --fcd-output` or `roughnet mobility fcd`: "
        + FCD_EXPECTED + ". Its time is the run's time; x and y are metres. Or `net` and `routes`.", None)
    net: kinds.text("a path to a SUMO network (.net.xml)", placeholders=False).type() = field(
        "Instead of `fcd`: a SUMO network (.net.xml, relative to the scenario file) that SUMO (the eclipse-sumo "
        "wheel) simulates with `routes` when the sweep is planned, from 0 to the scenario's timeout (at most "
        f"{sumo.MAX_END_S:g} s) with the scenario's seed; the hosts replay its FCD as from `fcd`.", None)
    routes: kinds.name_list(kinds.text(placeholders=False), 1, "a SUMO route file (.rou.xml) or a list of them",
                            single=True).type() = field(
        "With `net`: the SUMO route file(s) (.rou.xml, relative to the scenario file).", None)
    step: kinds.bounded_duration(1_000_000, 60_000_000_000, ("0.1 s", "1 s")).type() = field(
        "With `net`: SUMO's step length, one FCD time step each, from 1 ms to 60 s. Unset: 1 s.", None)
    key_noun: ClassVar[str] = "key"
    key_owner: ClassVar[str] = "[mobility]"


def distance_based(link: LinkTable) -> bool:
    """Whether the link's loss follows the distance between its hosts (``ieee80211p``, or its profile)."""
    if link.profile in DISTANCE_PROFILES:
        return True
    tables = [link, link.forward, link.reverse, *(link.schedule or [])]
    return any(t is not None and isinstance(t.loss_model, DISTANCE_MODELS) for t in tables)


def _placed(host: Any) -> bool:
    return any(getattr(host, k) is not None for k in PLACEMENTS)


def _check_vehicles(s: Scenario, problems: list[Problem]) -> None:
    """``vehicle`` needs ``[mobility] fcd`` and names one host's vehicle; ``[mobility]`` needs a vehicle host."""
    owner: dict[str, int] = {}
    for i, h in enumerate(s.host):
        if h.vehicle is None:
            continue
        if s.mobility is None:
            problems.append(Problem(f"host[{i}].vehicle", "a vehicle and no [mobility] table",
                                    '[mobility] fcd = "file.fcd.xml", the SUMO trace this vehicle is in', h.vehicle))
        if has_placeholder(h.vehicle):
            continue
        if h.vehicle in owner:
            problems.append(Problem(f"host[{i}].vehicle", f"vehicle {h.vehicle} is already host "
                                    f"{s.host[owner[h.vehicle]].name}'s", "one host per vehicle", h.vehicle))
        owner.setdefault(h.vehicle, i)
    m = s.mobility
    if m is not None and (m.fcd is None) == (m.net is None):
        problems.append(Problem("mobility.fcd" if m.fcd is not None else "mobility", "both fcd and net" if m.fcd
                                else "neither fcd nor net", "one of them: an FCD file to replay, or a SUMO network "
                                "and routes to simulate"))  # fmt: skip
    for key in ("routes", "step"):
        if m is not None and m.net is None and getattr(m, key) is not None:
            problems.append(Problem(f"mobility.{key}", "without net", "net = \"....net.xml\" (SUMO simulates "
                                    "net and routes), or no " + key, getattr(m, key)))  # fmt: skip
    if m is not None and m.net is not None and m.routes is None:
        problems.append(Problem("mobility.routes", "missing", "the route file(s) SUMO runs on net, like "
                                "routes = \"town.rou.xml\""))  # fmt: skip
    if s.mobility is not None and not any(h.vehicle is not None for h in s.host):
        problems.append(Problem("mobility", "no host is mapped to a vehicle",
                                'vehicle = "..." on the [[host]] entries that move as vehicles, or no [mobility]'))


def check_positions(s: Scenario, problems: list[Problem]) -> None:
    _check_vehicles(s, problems)
    hosts = {h.name: (i, h) for i, h in enumerate(s.host) if isinstance(h.name, str)}
    used: set[str] = set()
    for i, h in enumerate(s.host):
        given = [k for k in PLACEMENTS if getattr(h, k) is not None]
        if len(given) > 1:
            both = f"both {PLACEMENTS[given[0]]} and {PLACEMENTS[given[1]]}"
            problems.append(Problem(f"host[{i}].{given[1]}", both,
                                    "one of them: a fixed position, [[host.path]] points, a path_trace file or a "
                                    "vehicle"))  # fmt: skip
        problems.extend(time_order_problems(h.path or [], f"host[{i}].path"))
    for li, link in enumerate(s.link):
        if not distance_based(link) or not all(isinstance(n, str) for n in link.between):
            continue
        members = [hosts[n] for n in link.between if n in hosts]
        used.update(h.name for _, h in members)
        placed = [h.name for _, h in members if _placed(h)]
        if not placed:
            continue
        for hi, h in members:
            if not _placed(h):
                problems.append(Problem(
                    f"host[{hi}].position", f"host {h.name} has no position, and link[{li}] takes its distances "
                    f"from its hosts' positions ({', '.join(placed)} have one)",
                    "a position on every host of the link (position = [\"x\", \"y\"] or [[host.path]]), or on none "
                    "of them (the link's one distance)"))  # fmt: skip
        for key in ("distance", "distance_trace"):
            if getattr(link, key) is not None:
                problems.append(Problem(f"link[{li}].{key}", "a distance and hosts with positions",
                                        "one of them (the hosts' positions give the distance of every pair)"))
        for where, t in [(f"link[{li}]", link), (f"link[{li}].forward", link.forward),
                         (f"link[{li}].reverse", link.reverse),
                         *((f"link[{li}].schedule[{k}]", e) for k, e in enumerate(link.schedule or []))]:
            model = getattr(t, "loss_model", None) if t is not None else None
            if isinstance(model, DISTANCE_MODELS) and model.distance is not None:
                problems.append(Problem(f"{where}.loss_model.distance", "a fixed distance and hosts with positions",
                                        "no distance (the hosts' positions give the distance of every pair)",
                                        model.distance))  # fmt: skip
    for i, h in enumerate(s.host):
        if _placed(h) and h.name not in used:
            key = next(k for k in PLACEMENTS if getattr(h, k) is not None)
            problems.append(Problem(f"host[{i}].{key}", f"host {h.name} has a position but is on no link whose "
                                    "loss follows distance",
                                    'a link of this host with loss_model = { model = "ieee80211p" } (or '
                                    '"distance_table", or profile = "v2v-80211p"), or no position'))  # fmt: skip


def _point(at_ns: int, position: list[Any]) -> dict[str, Any]:
    return {"at_ns": at_ns, "x_m": parse_coordinate_m(position[0]), "y_m": parse_coordinate_m(position[1])}


Points = tuple[dict[str, Any], ...]


def link_positions(s: Scenario, link: LinkTable, paths: dict[str, Points] | None = None) -> tuple[Points, ...]:
    """wire-core's ``positions`` of a checked link (no placeholders left): per host in ``between`` order, or ()
    when the link is not distance-based or its hosts have no positions. ``paths``: the points of the hosts'
    ``path_trace`` files by host name (``read_path_files``)."""
    if not distance_based(link):
        return ()
    by_name = {h.name: h for h in s.host}
    members = [by_name[n] for n in link.between]
    if not all(_placed(h) for h in members):
        return ()
    out = []
    for h in members:
        if h.path_trace is not None or h.vehicle is not None:
            out.append((paths or {}).get(h.name, ()))
        elif h.path is not None:
            out.append(tuple(_point(units.parse_duration_ns(p.at), p.position) for p in h.path))
        else:
            out.append((_point(0, h.position),))
    return tuple(out)


def parse_path_csv(text: str, name: str) -> tuple[dict[str, Any], ...]:
    """``time_s,x_m,y_m`` lines into wire-core ``PositionPoint`` JSON; ValueError naming the line otherwise."""
    return tuple({"at_ns": at_ns, "x_m": float(x), "y_m": float(y)}
                 for _, at_ns, (_, x, y) in timed_rows(text, name, 3, PATH_EXPECTED))


def read_path_files(s: Scenario, base: Path) -> tuple[dict[str, tuple[dict[str, Any], ...]], list[Problem]]:
    """The ``path_trace`` files of a checked scenario's hosts (no placeholders left), by host name.

    Paths are relative to ``base`` (the scenario file's folder). Problems name the key.
    """
    paths: dict[str, tuple[dict[str, Any], ...]] = {}
    problems: list[Problem] = []
    for i, h in enumerate(s.host):
        if h.path_trace is None:
            continue
        file = Path(h.path_trace)
        file = file if file.is_absolute() else base / file
        try:
            paths[h.name] = parse_path_csv(read_trace_text(file, PATH_MAX_BYTES, PATH_EXPECTED), str(file))
        except ValueError as e:
            problem, _, expected = str(e).partition("; expected ")
            problems.append(Problem(f"host[{i}].path_trace", problem, expected, h.path_trace))
    vehicles = [(i, h) for i, h in enumerate(s.host) if h.vehicle is not None]
    if vehicles and s.mobility is not None:
        paths.update(_vehicle_paths(s, vehicles, base, problems))
    return paths, problems


def _sumo_trace(s: Scenario, base: Path, problems: list[Problem]) -> dict[str, Points] | None:
    """``[mobility] net`` and ``routes`` simulated by SUMO (``mobility.sumo.simulate``); None after a problem."""
    m = s.mobility
    routes = [m.routes] if isinstance(m.routes, str) else list(m.routes)
    files = []
    for key, name, kind, roots in [("mobility.net", m.net, "a SUMO network (.net.xml, root element <net>)",
                                    ("net",)),
                                   *((f"mobility.routes[{k}]", r, "a SUMO route file (.rou.xml, root element "
                                      "<routes> or <additional>)", ("routes", "additional"))
                                     for k, r in enumerate(routes))]:  # fmt: skip
        file = Path(name) if Path(name).is_absolute() else base / name
        # SUMO reads only files of the right kind: its own messages about another XML file could quote it, and
        # nothing of a file that is not a SUMO input is ever printed (issue 26): its root element (not quoted)
        # is checked here, and ET's parse errors name a line and column only.
        root = None
        try:
            for event, el in ET.iterparse(file, events=("start", "end")):
                if root is None:
                    root = el.tag
                if event == "end":
                    el.clear()
        except OSError as e:
            problems.append(Problem(key, f"cannot read {file} ({e.strerror or e})", kind, name))
        except ET.ParseError as e:
            problems.append(Problem(key, f"{file} is not XML ({e})", kind, name))
        else:
            if root not in roots:
                problems.append(Problem(key, f"{file}: the root element is not <{'> or <'.join(roots)}>", kind, name))
        files.append(file)
    if problems:
        return None
    end_s = min(units.parse_duration_ns(s.scenario.timeout) / 1e9, sumo.MAX_END_S)
    step_s = units.parse_duration_ns(m.step) / 1e9 if m.step is not None else 1.0
    try:
        return sumo.simulate(files[0], files[1:], end_s, step_s, s.scenario.seed)
    except (RoughnetError, FcdError) as e:
        problem, _, expected = str(e).partition("; expected ")
        problems.append(Problem("mobility.net", problem, expected, m.net))
        return None


def _vehicle_paths(s: Scenario, vehicles: list[tuple[int, Any]], base: Path,
                   problems: list[Problem]) -> dict[str, tuple[dict[str, Any], ...]]:  # fmt: skip
    """The points of the hosts mapped to vehicles of ``[mobility]``'s trace, by host name; problems name the key."""
    fcd = s.mobility.fcd
    if fcd is None:
        trace = _sumo_trace(s, base, problems)
        if trace is None:
            return {}
        file = f"SUMO's run of {s.mobility.net}"
    else:
        file = Path(fcd)
        file = file if file.is_absolute() else base / file
        try:
            trace = read_fcd(file)
        except OSError as e:
            problems.append(Problem("mobility.fcd", f"cannot read {file} ({e.strerror or e})", FCD_EXPECTED, fcd))
            return {}
        except FcdError as e:
            problem, _, expected = str(e).partition("; expected ")
            problems.append(Problem("mobility.fcd", problem, expected, fcd))
            return {}
    out = {}
    for i, h in vehicles:
        if h.vehicle in trace:
            out[h.name] = trace[h.vehicle]
        else:
            shown = sorted(trace, key=lambda v: (len(v), v))
            listed = ", ".join(shown[:10]) + (f" and {len(shown) - 10} more" if len(shown) > 10 else "")
            problems.append(Problem(f"host[{i}].vehicle", f"{file} never shows vehicle {h.vehicle}",
                                    f"a vehicle id of that file ({listed or 'it has no vehicles'})", h.vehicle))
    return out


__all__ = ["COORDINATE", "DISTANCE", "PLACEMENTS", "POSITION", "VEHICLE", "MobilityTable", "PathPointTable",
           "check_positions", "distance_based", "link_positions", "parse_coordinate_m", "parse_path_csv",
           "read_path_files"]
