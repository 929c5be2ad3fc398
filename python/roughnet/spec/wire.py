"""The wire-only link keys of the scenario format: loss models, half duplex, distances, profiles.

This module owns the tables that describe what only the userspace emulator
(``roughnet-wire``, crates/wire-core) can do beyond rate, delay, jitter and random
loss: the ``loss_model`` inline tables (one model per ``model`` name, told apart
like [[service]] by ``kind``), ``half_duplex``, the points of ``[[link.distance]]``,
the names of the wire's link profiles (``PROFILES``, from spec/profiles.toml, the table
roughnet-wire compiles in), the units these keys
use beyond ``roughnet.units`` (metres, dB, dBm, Hz), and the conversion of each
table into wire-core's JSON (config.rs: ``LossModel``, ``HalfDuplex``,
``DistancePoint``), in the units that JSON expects (fractions, ns, bytes, metres).

The keys are engine-agnostic in the format; which engine can apply them is
decided at preflight from ``runspec.Link.needs()``.  Rules between keys (a
distance trace needs an 802.11p model, ...) are ``spec.wirechecks``'; schedules
and distance traces over time are ``spec.timeline``'s.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field

from .. import units
from . import kinds, profiles
from .table import Table, field

#: The named link profiles (spec/profiles.toml, which roughnet-wire compiles in: one table).
PROFILES = profiles.names()

#: Jitter shapes of wire-core's ``JitterDist`` (netem's distribution tables).
JITTER_DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")

#: The 14-byte Ethernet header: a half-duplex frame limit must leave room for a payload
#: (wire-core ``ETHERNET_HEADER_BYTES``).
ETHERNET_HEADER_BYTES = 14
U32_MAX = 2**32 - 1
#: A bit error ratio above 1/2 is worse than random bits: no channel has one.
BER_MAX = 0.5

# ----------------------------------------------------------------------------- units

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
DISTANCE = "a distance like '100 m' (units: m, km)"
DECIBEL = "a level in decibels like '7 dB'"
DBM = "a power like '20 dBm'"
FREQUENCY = "a bandwidth like '10 MHz' (units: Hz, kHz, MHz, GHz)"
_DISTANCE_UNITS = {"m": Decimal(1), "km": Decimal(1000)}
_FREQUENCY_UNITS = {"hz": Decimal(1), "khz": Decimal(10**3), "mhz": Decimal(10**6), "ghz": Decimal(10**9)}


def _number_unit(value: Any, expected: str, signed: bool = False) -> tuple[Decimal, str]:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"wrong type; expected {expected}")
    if not isinstance(value, str):
        raise ValueError(f"missing unit; expected {expected}")
    m = re.fullmatch(r"\s*" + _NUMBER + r"\s*(?P<unit>.*?)\s*", value)
    if m is None:
        raise ValueError(f"not a number followed by a unit; expected {expected}")
    number = Decimal(m.group("num"))
    if not m.group("unit"):
        raise ValueError(f"missing unit; expected {expected}")
    if number < 0 and not signed:
        raise ValueError(f"negative value; expected {expected}")
    return number, m.group("unit")


def parse_distance_m(value: Any) -> float:
    """``"100 m"`` -> 100.0, ``"1.5 km"`` -> 1500.0 (metres, >= 0)."""
    number, unit = _number_unit(value, DISTANCE)
    mult = _DISTANCE_UNITS.get(unit)
    if mult is None:
        raise ValueError(f"unknown distance unit {unit!r}; expected {DISTANCE}")
    return float(number * mult)


def parse_db(value: Any) -> float:
    """``"7 dB"`` -> 7.0 (a loss or a noise figure: >= 0)."""
    number, unit = _number_unit(value, DECIBEL)
    if unit != "dB":
        raise ValueError(f"unknown unit {unit!r}; expected {DECIBEL}")
    return float(number)


def parse_dbm(value: Any) -> float:
    """``"20 dBm"`` -> 20.0 (may be negative: -10 dBm is 0.1 mW)."""
    number, unit = _number_unit(value, DBM, signed=True)
    if unit != "dBm":
        raise ValueError(f"unknown unit {unit!r}; expected {DBM}")
    return float(number)


def parse_frequency_hz(value: Any) -> float:
    """``"10 MHz"`` -> 1e7 (Hz, above 0)."""
    number, unit = _number_unit(value, FREQUENCY)
    mult = _FREQUENCY_UNITS.get(unit.lower())
    if mult is None:
        raise ValueError(f"unknown frequency unit {unit!r}; expected {FREQUENCY}")
    if number == 0:
        raise ValueError(f"zero; expected {FREQUENCY}, above 0 Hz")
    return float(number * mult)


def _kind(parser: Any, expected: str, examples: list[str], lo: float | None = None, above: bool = False) -> kinds.Kind:
    """A quantity parsed by ``parser``; ``lo``: smallest value (``above``: values must exceed it)."""
    if lo is not None:
        expected += f", above {lo:g}" if above else f", at least {lo:g}"

    def check(value: Any) -> None:
        try:
            n = parser(value)
        except ValueError as e:
            raise ValueError(f"{str(e).split('; expected ', 1)[0]}; expected {expected}") from None
        if lo is not None and (n < lo or (above and n == lo)):
            raise ValueError(f"out of range; expected {expected}")

    return kinds.Kind(expected, check, {"type": "string", "examples": examples}, convert=parser)


def _plain_number(lo: float, hi: float | None, expected: str) -> kinds.Kind:
    """A plain (unitless) number, integer or float, in [lo, hi]."""

    def check(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"not a number; expected {expected}")
        if not math.isfinite(value) or value < lo or (hi is not None and value > hi):
            raise ValueError(f"out of range; expected {expected}")

    schema: dict[str, Any] = {"type": "number", "minimum": lo}
    if hi is not None:
        schema["maximum"] = hi
    return kinds.Kind(expected, check, schema, convert=float)


def _percent_below_100() -> kinds.Kind:
    expected = "a percentage like '25%', 0% to less than 100%"

    def check(value: Any) -> None:
        try:
            f = units.parse_fraction(value)
        except ValueError as e:
            raise ValueError(f"{str(e).split('; expected ', 1)[0]}; expected {expected}") from None
        if f >= 1.0:
            raise ValueError(f"100% or more; expected {expected}")

    return kinds.Kind(expected, check, {"type": "string", "examples": ["25%", "75%"]}, convert=units.parse_fraction)


PERCENT = kinds.percent()
CORRELATION = _percent_below_100()
JITTER_DISTRIBUTION = kinds.choice(JITTER_DISTRIBUTIONS)
PROFILE = kinds.choice(PROFILES)
REORDER_GAP = kinds.integer(1, U32_MAX, "an integer from 1 to 4294967295 (frames)")
OVERHEAD = kinds.bounded_size(0, 65535, ("24 B", "0 B"))
DISTANCE_KIND = _kind(parse_distance_m, DISTANCE, ["100 m", "1.5 km"])
DIRECTION_CHOICE = kinds.choice(("forward", "reverse", "both"))


def _true(value: Any) -> None:
    if value is not True:
        raise ValueError("only true is meaningful here; expected true (`up = true` brings a link back, "
                         "`down = true` takes it down)")


TRUE = kinds.Kind("true", _true, {"const": True})

# ----------------------------------------------------------------------------- loss models


class LossModelTable(Table):
    """The keys every ``loss_model`` has."""

    model: str = field("Loss model: " + ", ".join(f'"{m}"' for m in ("gilbert_elliott", "markov4", "size_dependent",
                                                                        "ieee80211p", "distance_table")) + ".")  # fmt: skip
    key_noun: ClassVar[str] = "parameter"


class GilbertElliottTable(LossModelTable):
    """``loss_model = { model = "gilbert_elliott", ... }``: netem's ``loss gemodel`` (two-state Markov chain)."""

    model: Literal["gilbert_elliott"] = field("Loss model.")
    p: PERCENT.type() = field("Probability of the transition good -> bad, per frame: " + kinds.PERCENT + ".")
    r: PERCENT.type() = field("Probability of the transition bad -> good, per frame (mean loss burst 1/r "
                              "frames with the default h and k): " + kinds.PERCENT + ".")  # fmt: skip
    h: PERCENT.type() = field("Probability that a frame in the bad state is delivered (netem's 1-h is the "
                              "bad state's loss): " + kinds.PERCENT + ".", "0%")  # fmt: skip
    k: PERCENT.type() = field("Probability that a frame in the good state is delivered (netem's 1-k is the "
                              "good state's loss): " + kinds.PERCENT + ".", "100%")  # fmt: skip
    key_owner: ClassVar[str] = 'loss model "gilbert_elliott"'


class Markov4Table(LossModelTable):
    """``loss_model = { model = "markov4", ... }``: netem's ``loss state`` (4-state Markov model, Salsano et al.)."""

    model: Literal["markov4"] = field("Loss model.")
    p13: PERCENT.type() = field("Transition gap (1) -> burst loss (3): " + kinds.PERCENT + ".")
    p31: PERCENT.type() = field("Transition burst loss (3) -> gap (1). Unset: 100% - p13.", None)
    p32: PERCENT.type() = field("Transition burst loss (3) -> burst delivered (2).", "0%")
    p23: PERCENT.type() = field("Transition burst delivered (2) -> burst loss (3).", "0%")
    p14: PERCENT.type() = field("Transition gap (1) -> isolated loss (4).", "0%")
    key_owner: ClassVar[str] = 'loss model "markov4"'


class SizeDependentTable(LossModelTable):
    """``loss_model = { model = "size_dependent", ber = 1e-6 }``: independent bit errors, longer frames fail more."""

    model: Literal["size_dependent"] = field("Loss model.")
    ber: _plain_number(0.0, BER_MAX, "a bit error ratio, a plain number from 0 to 0.5 like 1e-6").type() = field(
        "Bit error ratio, a plain number (not a percentage): a frame of n bytes is lost with probability "
        "1 - (1 - ber)^(8 n). 0 to 0.5.")
    key_owner: ClassVar[str] = 'loss model "size_dependent"'


class Ieee80211pTable(LossModelTable):
    """``loss_model = { model = "ieee80211p", ... }``: 802.11p distance and frame size to loss (docs/wire-models.md)."""

    model: Literal["ieee80211p"] = field("Loss model.")
    distance: DISTANCE_KIND.type() = field(
        "Distance between the ends: " + DISTANCE + ". Unset: 100 m, or the link's distance trace (one or the "
        "other, not both).", None)
    tx_power: _kind(parse_dbm, DBM, ["20 dBm"]).type() = field(
        "Transmit power plus antenna gains: " + DBM + ". Unset: 20 dBm.", None)
    ref_loss: _kind(parse_db, DECIBEL, ["47.86 dB"]).type() = field(
        "Path loss at 1 m: " + DECIBEL + ". Unset: 47.86 dB (free space at 5.9 GHz).", None)
    exponent_near: _plain_number(0.0, 10.0, "a plain number from 0 to 10").type() = field(
        "Path loss exponent up to `critical_distance` (a plain number). Unset: 2.1.", None)
    exponent_far: _plain_number(0.0, 10.0, "a plain number from 0 to 10").type() = field(
        "Path loss exponent beyond `critical_distance` (a plain number). Unset: 3.8.", None)
    critical_distance: _kind(parse_distance_m, DISTANCE, ["100 m"], lo=0, above=True).type() = field(
        "Breakpoint of the dual-slope path loss: " + DISTANCE + ", above 0. Unset: 100 m.", None)
    noise_figure: _kind(parse_db, DECIBEL, ["7 dB"]).type() = field(
        "Receiver noise figure: " + DECIBEL + ". Unset: 7 dB.", None)
    bandwidth: _kind(parse_frequency_hz, FREQUENCY, ["10 MHz"]).type() = field(
        "Channel bandwidth: " + FREQUENCY + ". Unset: 10 MHz.", None)
    bit_rate: kinds.rate().type() = field("PHY bit rate: " + kinds.RATE + ". Unset: 6 Mbit/s.", None)
    shadowing: _kind(parse_db, DECIBEL, ["0 dB", "4 dB"]).type() = field(
        "Standard deviation of log-normal shadowing drawn per frame: " + DECIBEL + ". Unset: 0 dB.", None)
    key_owner: ClassVar[str] = 'loss model "ieee80211p"'


RANGE_POINTS = ("a list of [distance, loss] pairs like [[\"100 m\", \"0%\"], [\"400 m\", \"100%\"]], "
                "distances never decreasing")


def _check_range_points(value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise ValueError(f"not a non-empty list; expected {RANGE_POINTS}")
    last = None
    for i, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"entry {i} is not a [distance, loss] pair; expected {RANGE_POINTS}")
        d, p = pair
        if kinds.has_placeholder(d) or kinds.has_placeholder(p):
            last = None
            continue
        try:
            metres = parse_distance_m(d)
            units.parse_fraction(p)
        except ValueError as e:
            raise ValueError(f"entry {i}: {str(e).split('; expected ', 1)[0]}; expected {RANGE_POINTS}") from None
        if last is not None and metres < last:
            raise ValueError(f"entry {i}: a distance shorter than the one before; expected {RANGE_POINTS}")
        last = metres


RANGE_POINTS_KIND = kinds.Kind(RANGE_POINTS, _check_range_points,
                               {"type": "array", "minItems": 1,
                                "items": {"type": "array", "minItems": 2, "maxItems": 2,
                                          "items": {"type": "string", "examples": ["100 m", "5%"]}}})  # fmt: skip


class DistanceTableTable(LossModelTable):
    """``loss_model = { model = "distance_table", points = [...] }``: loss from distance alone, a range curve."""

    model: Literal["distance_table"] = field("Loss model.")
    points: RANGE_POINTS_KIND.type() = field(
        "Loss at each distance: " + RANGE_POINTS + "; linear between points, held before the first and after the "
        "last (two points at one distance make a step). The distance comes from the hosts' positions or the "
        "link's distance trace, like ieee80211p's.")
    distance: DISTANCE_KIND.type() = field(
        "Distance when the link has neither hosts' positions nor a distance trace: " + DISTANCE + ". Unset: 0 m.",
        None)
    key_owner: ClassVar[str] = 'loss model "distance_table"'


#: The loss models whose loss follows the distance between sender and receiver.
DISTANCE_MODELS = (Ieee80211pTable, DistanceTableTable)

#: Model per ``model`` name, and wire-core's JSON name of each TOML key of the 802.11p table.
LOSS_MODEL_TABLES: dict[str, type[LossModelTable]] = {
    "gilbert_elliott": GilbertElliottTable,
    "markov4": Markov4Table,
    "size_dependent": SizeDependentTable,
    "ieee80211p": Ieee80211pTable,
    "distance_table": DistanceTableTable,
}
IEEE80211P_JSON = {
    "distance": "distance_m",
    "tx_power": "tx_power_dbm",
    "ref_loss": "ref_loss_db",
    "exponent_near": "exponent_near",
    "exponent_far": "exponent_far",
    "critical_distance": "critical_distance_m",
    "noise_figure": "noise_figure_db",
    "bandwidth": "bandwidth_hz",
    "bit_rate": "bit_rate_bps",
    "shadowing": "shadowing_db",
}

AnyLossModel = Annotated[
    Union[GilbertElliottTable, Markov4Table, SizeDependentTable, Ieee80211pTable,  # noqa: UP007 (pydantic union)
          DistanceTableTable],
    Field(discriminator="model"),
]


def _value(table: Table, key: str) -> Any:
    """A key of ``table`` in base units (None when unset)."""
    value = getattr(table, key)
    return None if value is None else kinds.to_base(type(table).model_fields[key].metadata, value)


def loss_model_json(table: LossModelTable) -> dict[str, Any]:
    """wire-core's ``LossModel`` JSON of a checked table (no placeholders left): fractions as floats."""
    if isinstance(table, GilbertElliottTable):
        return {"model": table.model, **{k: _value(table, k) for k in ("p", "r", "h", "k")}}
    if isinstance(table, Markov4Table):
        out = {"model": table.model, **{k: _value(table, k) for k in ("p13", "p32", "p23", "p14")}}
        if table.p31 is not None:
            out["p31"] = _value(table, "p31")
        return out
    if isinstance(table, SizeDependentTable):
        return {"model": table.model, "ber": float(table.ber)}
    if isinstance(table, DistanceTableTable):
        points = [{"distance_m": parse_distance_m(d), "p": units.parse_fraction(p)} for d, p in table.points]
        out = {"model": table.model, "points": points}
        if table.distance is not None:
            out["distance_m"] = _value(table, "distance")
        return out
    assert isinstance(table, Ieee80211pTable)
    out = {"model": table.model}
    for key, name in IEEE80211P_JSON.items():
        value = _value(table, key)
        if value is not None:
            out[name] = float(value)
    return out


# ----------------------------------------------------------------------------- half duplex, distance points


class HalfDuplexTable(Table):
    """``half_duplex = { ... }`` on a link: one transmitter at a time, as an HF modem pair (SEEDS S3)."""

    turnaround: kinds.duration().type() = field(
        "Time between the end of a frame in one direction and the start of one in the other: " + kinds.DURATION
        + ". Each key left out keeps the link profile's value (docs/profiles.md).",
        "0 ms")
    frame_limit: kinds.bounded_size(ETHERNET_HEADER_BYTES + 1, U32_MAX, ("255 B", "1514 B")).type() = field(
        "Largest frame the medium carries (the whole Ethernet frame, its 14-byte header included); larger "
        "frames are dropped (`too_large`): " + kinds.SIZE + ", at least 15 B. Unset: no limit.", None)
    buffer: kinds.bounded_size(1, None, ("4 KiB",)).type() = field(
        "Bytes each side's modem buffers before transmission; a frame that does not fit is dropped "
        "(`overrun`): " + kinds.SIZE + ", at least 1 B. Unset: no limit.", None)
    key_noun: ClassVar[str] = "key"
    key_owner: ClassVar[str] = "half_duplex"


def half_duplex_json(table: HalfDuplexTable) -> dict[str, Any]:
    """wire-core's ``HalfDuplex`` JSON (``turnaround_ns``, ``max_frame_bytes``, ``buffer_bytes``): the keys written.

    Only what the scenario wrote is given, so that on a link with a profile the
    unwritten keys keep the profile's values (``links.wire.link_config`` merges
    key by key); with no profile, wire-core's defaults apply (no turnaround, no limits).
    """
    out: dict[str, Any] = {}
    if "turnaround" in table.model_fields_set:
        out["turnaround_ns"] = _value(table, "turnaround")
    if table.frame_limit is not None:
        out["max_frame_bytes"] = _value(table, "frame_limit")
    if table.buffer is not None:
        out["buffer_bytes"] = _value(table, "buffer")
    return out


class DistanceTable(Table):
    """``[[link.distance]]``: one point of the distance between the link's ends over time."""

    at: kinds.duration().type() = field("Time after the start of the run: " + kinds.DURATION + ".")
    distance: DISTANCE_KIND.type() = field("Distance at that time: " + DISTANCE + ".")


def distance_point_json(at_ns: int, distance_m: float) -> dict[str, Any]:
    """wire-core's ``DistancePoint`` JSON."""
    return {"at_ns": at_ns, "distance_m": float(distance_m)}
