"""What the ROS 2 endpoint puts on the wire and what it reports: the message, its header, latency objects.

The message type is ``std_msgs/msg/UInt8MultiArray``: it is in ``std_msgs``, which every ROS 2
install has (ros-base included), so any ROS 2 node can publish or read roughnet's traffic without
building a package; its ``data`` (``uint8[]``) carries roughnet's message (the 32-byte header of
docs/agent-protocol.md, then filler) byte for byte; its ``layout`` stays empty (no dimensions,
offset 0), 8 bytes of CDR.  The endpoint publishes and takes the serialized form (rclpy's
``publish(bytes)`` and ``raw=True`` subscriptions), built here: XCDR1 little-endian encapsulation
``00 01 00 00``, ``layout.dim`` length 0 (u32), ``layout.data_offset`` 0 (u32), ``data`` length (u32),
the bytes.  tests/unit/test_ros2_wire.py checks it against rclpy's own ``serialize_message``.

Latency objects have the agent's shape (docs/agent-protocol.md, "Output lines"): summary figures
from the exact values, ``hdr`` an HdrHistogram (1 us to 1 h, 3 digits, ns) in base64.
"""

from __future__ import annotations

import math
import resource
import struct
from dataclasses import dataclass

MAGIC = 0x314D4E52  # "RNM1"
HEADER = struct.Struct("<IHHQQQ")  # magic, flags, header length, seq, intended ns, actual ns
HEADER_LEN = 32
FLAG_WARMUP, FLAG_END, FLAG_REPLY = 1, 2, 4

#: The ROS 2 type of every data, ping and pong message.
MSG_TYPE = "std_msgs/msg/UInt8MultiArray"
#: Serialized UInt8MultiArray up to its data: encapsulation (CDR, little endian), empty dim sequence,
#: data_offset 0; the data's length follows.
_CDR_PREFIX = b"\x00\x01\x00\x00" + b"\x00" * 8
CDR_OVERHEAD = len(_CDR_PREFIX) + 4

HDR_LOWEST_NS = 1000
HDR_HIGHEST_NS = 3_600_000_000_000
HDR_DIGITS = 3


@dataclass(frozen=True)
class Header:
    flags: int
    seq: int
    intended_ns: int
    actual_ns: int


def message(flags: int, seq: int, intended_ns: int, actual_ns: int, size: int) -> bytearray:
    """One roughnet message of ``size`` bytes (header, then zero filler)."""
    buf = bytearray(size)
    HEADER.pack_into(buf, 0, MAGIC, flags, HEADER_LEN, seq, intended_ns, actual_ns)
    return buf


def to_cdr(msg: bytes | bytearray) -> bytes:
    """``msg`` as a serialized std_msgs/msg/UInt8MultiArray whose ``data`` it is."""
    return _CDR_PREFIX + struct.pack("<I", len(msg)) + bytes(msg)


def from_cdr(raw: bytes) -> memoryview | None:
    """The ``data`` of a serialized UInt8MultiArray; None when ``raw`` is not one with an empty layout."""
    if len(raw) < CDR_OVERHEAD or raw[:2] != b"\x00\x01":
        return None
    dims = struct.unpack_from("<I", raw, 4)[0]
    if dims != 0:
        return None  # someone else's array with dimensions: not ours
    n = struct.unpack_from("<I", raw, 12)[0]
    if CDR_OVERHEAD + n > len(raw):
        return None
    return memoryview(raw)[CDR_OVERHEAD:CDR_OVERHEAD + n]


def parse(data: memoryview | bytes) -> Header | None:
    """The header of a roughnet message; None when it is not one (too short, bad magic or length)."""
    if len(data) < HEADER_LEN:
        return None
    magic, flags, hlen, seq, intended, actual = HEADER.unpack_from(data, 0)
    if magic != MAGIC or hlen != HEADER_LEN:
        return None
    return Header(flags, seq, intended, actual)


def _percentile(sorted_ns: list[int], q: float) -> int:
    """Nearest-rank percentile (``q`` in 0..100) of sorted values."""
    k = max(0, min(len(sorted_ns) - 1, math.ceil(q / 100.0 * len(sorted_ns)) - 1))
    return sorted_ns[k]


def latency_object(values_ns: list[int]) -> dict:
    """A latency object (docs/agent-protocol.md) from values in ns."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(HDR_LOWEST_NS, HDR_HIGHEST_NS, HDR_DIGITS)
    clamped = 0
    for v in values_ns:
        if v > HDR_HIGHEST_NS:
            clamped += 1
        hist.record_value(min(max(v, 0), HDR_HIGHEST_NS))
    out: dict = {"count": len(values_ns)}
    keys = (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("p9999", 99.99), ("p999999", 99.9999))
    if values_ns:
        s = sorted(values_ns)
        mean = sum(s) / len(s)
        std = math.sqrt(sum((v - mean) ** 2 for v in s) / len(s))
        out |= {"min_us": s[0] / 1e3, "mean_us": mean / 1e3, "std_us": std / 1e3}
        out |= {f"{k}_us": _percentile(s, q) / 1e3 for k, q in keys}
        out["max_us"] = s[-1] / 1e3
    else:
        out |= {k: None for k in ("min_us", "mean_us", "std_us", *(f"{k}_us" for k, _ in keys), "max_us")}
    out["hdr"] = hist.encode().decode("ascii")
    if clamped:
        out["clamped"] = clamped
    return out


def cpu() -> dict:
    """This process's CPU time so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"user_s": round(r.ru_utime, 6), "sys_s": round(r.ru_stime, 6)}


class Schedule:
    """How far actual send times fell behind intended ones (the sender's ``schedule`` object).

    Each lag is split at the moment the previous send returned: before it *held* (the middleware kept
    the sender), after it the sender's *own*.
    """

    LATE_NS = 1_000_000

    def __init__(self) -> None:
        self.behind: list[int] = []
        self.own: list[int] = []
        self.held_ns = 0
        self.held_late = 0

    def record(self, intended_ns: int, actual_ns: int, prev_return_ns: int) -> None:
        lag = max(0, actual_ns - intended_ns)
        held = max(0, min(prev_return_ns, actual_ns) - intended_ns)
        self.behind.append(lag)
        self.own.append(lag - held)
        self.held_ns += held
        self.held_late += held > self.LATE_NS

    def result(self) -> dict:
        n = len(self.behind)
        if not n:
            return {"behind_max_us": 0.0, "behind_p99_us": 0.0, "late_fraction": 0.0, "own_behind_max_us": 0.0,
                    "own_late_fraction": 0.0, "held_fraction": 0.0, "held_s": 0.0}
        s = sorted(self.behind)
        return {
            "behind_max_us": s[-1] / 1e3,
            "behind_p99_us": _percentile(s, 99) / 1e3,
            "late_fraction": sum(v > self.LATE_NS for v in s) / n,
            "own_behind_max_us": max(self.own) / 1e3,
            "own_late_fraction": sum(v > self.LATE_NS for v in self.own) / n,
            "held_fraction": self.held_late / n,
            "held_s": self.held_ns / 1e9,
        }
