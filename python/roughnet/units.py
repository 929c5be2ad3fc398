"""Quantities with units: parsing "10 ms", "100 Mbit/s", "5%", "64 KiB", "200 msg/s", "100 packets".

This module owns the unit vocabulary of scenario files and nothing else.  Every
parser takes the value as written (a string; a bare number is refused with a
"missing unit" message) and returns an int or float in base units (ns, bit/s,
bytes, a fraction, messages per second, packets).  Errors are plain
``ValueError``s whose message says what was expected; ``roughnet.spec`` turns
them into ``SpecError``s naming the file and key.  The ``format_*`` functions are
the display inverses (``parse_x(format_x(v)) == v`` for the values they print
exactly).

Numbers are parsed with ``decimal`` so "1.1 ms" is exactly 1_100_000 ns.
Negative quantities are always errors: nothing roughnet measures or shapes is
negative.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "parse_duration_ns",
    "parse_rate_bps",
    "parse_size_bytes",
    "parse_fraction",
    "parse_msg_rate",
    "parse_packets",
    "format_duration_ns",
    "format_rate_bps",
    "format_size_bytes",
    "format_fraction",
    "format_msg_rate",
    "format_packets",
    "DURATION_UNITS",
    "RATE_UNITS",
    "SIZE_UNITS",
]

# A number (sign allowed so that "-5 ms" gets a "negative" message rather than
# "not a number"), optional spaces, then the unit.
_QUANTITY = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>.*?)\s*$")

#: Duration units (matched case-insensitively) -> nanoseconds.
DURATION_UNITS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "min": 60_000_000_000,
}

#: Size units -> bytes.  The final "B" must be upper case (a lower-case "b" is a bit);
#: prefixes are case-insensitive.
SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "kB": 1000,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
}

_BIT_PREFIX = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
_BYTE_PREFIX = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "ki": 1024, "mi": 1024**2, "gi": 1024**3}

#: Rate units as documented (display list; matching is more lenient, see _rate_multiplier).
RATE_UNITS = (
    "bit/s", "kbit/s", "Mbit/s", "Gbit/s",
    "bps", "kbps", "Mbps", "Gbps",
    "B/s", "kB/s", "MB/s", "GB/s", "KiB/s", "MiB/s", "GiB/s",
)  # fmt: skip

_EXAMPLE = {
    "duration": "a duration like '10 ms' (units: ns, us, ms, s, min)",
    "rate": "a rate like '10 Mbit/s' (units: bit/s kbit/s Mbit/s Gbit/s, bps kbps Mbps Gbps, B/s kB/s MB/s)",
    "size": "a size like '64 KiB' (units: B, kB, MB, GB, KiB, MiB, GiB)",
    "fraction": "a percentage like '5%' (0% to 100%)",
    "msg_rate": "a message rate like '200 msg/s' or 'max'",
    "packets": "a packet count like '100 packets'",
}


_NOUN = {
    "duration": "duration",
    "rate": "rate",
    "size": "size",
    "fraction": "percentage",
    "msg_rate": "message rate",
    "packets": "packet count",
}


def _split(value: object, kind: str) -> tuple[Decimal, str]:
    """Split ``"10 ms"`` into ``(Decimal("10"), "ms")``; refuse bare numbers and non-strings."""
    expected = _EXAMPLE[kind]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"wrong type; expected {expected}")
    if isinstance(value, (int, float)):
        raise ValueError(f"missing unit; expected {expected}")
    m = _QUANTITY.match(value)
    if m is None:
        raise ValueError(f"not a number followed by a unit; expected {expected}")
    try:
        number = Decimal(m.group("num"))
    except InvalidOperation:  # pragma: no cover - the regex only admits valid decimals
        raise ValueError(f"not a number; expected {expected}") from None
    unit = m.group("unit")
    if not unit:
        raise ValueError(f"missing unit; expected {expected}")
    if number < 0:
        raise ValueError(f"negative {_NOUN[kind]}; expected {expected}")
    return number, unit


def _to_int(number: Decimal, what: str, expected: str) -> int:
    result = number.to_integral_value()
    if result != number:
        raise ValueError(f"{what} must be a whole number; expected {expected}")
    return int(result)


def parse_duration_ns(value: str) -> int:
    """Parse ``"10 ms"`` (ns, us/µs, ms, s, min; case-insensitive) into integer nanoseconds."""
    number, unit = _split(value, "duration")
    units = {k.lower(): v for k, v in DURATION_UNITS.items()}
    mult = units.get(unit.lower())
    if mult is None:
        raise ValueError(f"unknown duration unit {unit!r}; expected {_EXAMPLE['duration']}")
    return int((number * mult).to_integral_value())


def _rate_multiplier(unit: str) -> int | None:
    """Bits per second in one ``unit``, or None when the unit is not a rate.

    Bits: ``<p>bit/s`` (any case), ``<p>bps`` and ``<p>b/s`` (lower-case b).
    Bytes: ``<p>B/s`` and ``<p>Bps`` (upper-case B).  Prefixes k, M, G, T are
    case-insensitive and 1000-based; Ki, Mi, Gi (bytes only) are 1024-based.
    """
    m = re.fullmatch(r"([kmgt]?)(?:bits?/s)", unit, flags=re.IGNORECASE)
    if m is None:
        m = re.fullmatch(r"([kKmMgGtT]?)(?:bps|b/s)", unit)
    if m is not None:
        return _BIT_PREFIX[m.group(1).lower()]
    m = re.fullmatch(r"([kKmMgG][iI]?|)(?:B/s|Bps)", unit)
    if m is not None:
        return 8 * _BYTE_PREFIX[m.group(1).lower()]
    return None


def parse_rate_bps(value: str) -> int:
    """Parse ``"10 Mbit/s"`` into integer bits per second (> 0).

    Bit units use 1000-based prefixes (``kbit/s``, ``Mbps``, ``Gb/s``); byte units
    need an upper-case B (``MB/s`` = 8e6 bit/s, ``MiB/s`` = 8 * 2^20 bit/s).
    """
    number, unit = _split(value, "rate")
    mult = _rate_multiplier(unit)
    if mult is None:
        raise ValueError(f"unknown rate unit {unit!r}; expected {_EXAMPLE['rate']}")
    bps = (number * mult).to_integral_value()
    if bps <= 0:
        raise ValueError(f"a rate must be above 0 bit/s; expected {_EXAMPLE['rate']}")
    return int(bps)


def parse_size_bytes(value: str) -> int:
    """Parse ``"64 KiB"`` into integer bytes (B, kB/KB = 1000, MB, GB, KiB = 1024, MiB, GiB)."""
    number, unit = _split(value, "size")
    m = re.fullmatch(r"([kKmMgG](?:[iI])?|)(B|bytes?|BYTES?|Bytes?)", unit)
    if m is None:
        hint = ""
        if re.fullmatch(r"[kKmMgG]?[iI]?b(?:its?)?", unit):
            hint = " ('b' is a bit; sizes are in bytes: 'B')"
        raise ValueError(f"unknown size unit {unit!r}{hint}; expected {_EXAMPLE['size']}")
    mult = _BYTE_PREFIX[m.group(1).lower()]
    return _to_int(number * mult, "a size in bytes", _EXAMPLE["size"])


def parse_fraction(value: str) -> float:
    """Parse a percentage ``"5%"`` (0% to 100%) into a fraction (0.05)."""
    number, unit = _split(value, "fraction")
    if unit != "%":
        raise ValueError(f"unknown unit {unit!r}; expected {_EXAMPLE['fraction']}")
    if number > 100:
        raise ValueError(f"above 100%; expected {_EXAMPLE['fraction']}")
    return float(number / 100)


def parse_msg_rate(value: str) -> float | None:
    """Parse ``"200 msg/s"`` into messages per second (> 0); ``"max"`` gives None (as fast as possible)."""
    if isinstance(value, str) and value.strip().lower() == "max":
        return None
    number, unit = _split(value, "msg_rate")
    if unit.lower() not in ("msg/s", "msgs/s", "messages/s", "message/s"):
        raise ValueError(f"unknown message rate unit {unit!r}; expected {_EXAMPLE['msg_rate']}")
    if number <= 0:
        raise ValueError(f"a message rate must be above 0; expected {_EXAMPLE['msg_rate']}")
    return float(number)


def parse_packets(value: str) -> int:
    """Parse ``"100 packets"`` (also packet, pkt, pkts) into an integer >= 1."""
    number, unit = _split(value, "packets")
    if unit.lower() not in ("packets", "packet", "pkts", "pkt"):
        raise ValueError(f"unknown unit {unit!r}; expected {_EXAMPLE['packets']}")
    count = _to_int(number, "a packet count", _EXAMPLE["packets"])
    if count < 1:
        raise ValueError(f"a packet count must be at least 1; expected {_EXAMPLE['packets']}")
    return count


# ----------------------------------------------------------------------------- formatting


def _decimal_text(number: Decimal) -> str:
    text = format(number.normalize(), "f")
    return text


def _format_scaled(value: int, units: list[tuple[str, int]]) -> str:
    """Largest unit in which ``value`` is at least 1, printed exactly (units descending)."""
    for name, mult in units:
        if value >= mult:
            return f"{_decimal_text(Decimal(value) / Decimal(mult))} {name}"
    name, mult = units[-1]
    return f"{_decimal_text(Decimal(value) / Decimal(mult))} {name}"


def format_duration_ns(ns: int) -> str:
    """``10_000_000`` -> ``"10 ms"``; exact (``parse_duration_ns`` gives the value back)."""
    if ns == 0:
        return "0 ms"
    units = [("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)]
    if ns >= 60 * 10**9 and ns % (60 * 10**9) == 0:
        return f"{ns // (60 * 10**9)} min"
    return _format_scaled(ns, units)


def format_rate_bps(bps: int) -> str:
    """``10_000_000`` -> ``"10 Mbit/s"``; exact."""
    units = [("Tbit/s", 10**12), ("Gbit/s", 10**9), ("Mbit/s", 10**6), ("kbit/s", 10**3), ("bit/s", 1)]
    return _format_scaled(bps, units)


def format_size_bytes(n: int) -> str:
    """``65536`` -> ``"64 KiB"``, ``1500`` -> ``"1500 B"``, ``10_000`` -> ``"10 kB"``; exact."""
    for name, mult in (("GiB", 1024**3), ("GB", 1000**3), ("MiB", 1024**2), ("MB", 1000**2),
                       ("KiB", 1024), ("kB", 1000)):  # fmt: skip
        if n >= mult and n % mult == 0:
            return f"{n // mult} {name}"
    if n >= 1024**2:
        return _format_scaled(n, [("GiB", 1024**3), ("MiB", 1024**2)])
    return f"{n} B"


def format_fraction(fraction: float) -> str:
    """``0.05`` -> ``"5%"``."""
    percent = Decimal(repr(fraction)) * 100
    return f"{_decimal_text(percent)}%"


def format_msg_rate(rate: float | None) -> str:
    """``200.0`` -> ``"200 msg/s"``; None -> ``"max"``."""
    if rate is None:
        return "max"
    return f"{_decimal_text(Decimal(repr(rate)))} msg/s"


def format_packets(count: int) -> str:
    """``100`` -> ``"100 packets"``."""
    return f"{count} packet" if count == 1 else f"{count} packets"


# Short names used by the CLI for display.
format_duration = format_duration_ns
format_rate = format_rate_bps
format_size = format_size_bytes
