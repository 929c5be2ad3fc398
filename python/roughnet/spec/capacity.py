"""Capacity traces: a link direction's capacity over time, from a measured trace (docs/scenario-format.md).

Owns the two formats roughnet reads and their rules: **Mahimahi** (one integer per line, the ms of
a delivery opportunity for one 1500-byte packet; the trace repeats with its last timestamp as the
period; Winstein et al., NSDI 2013, as mahimahi's ``LinkQueue`` reads it) and a **per-second
capacity CSV** like those of the public 4G/5G datasets (a time in seconds and a rate per line, the
rate's column and unit chosen), the conversion of the second into the first (``from_rates``: each
second's bytes spread over evenly spaced opportunities, the fraction of a packet carried to the
next second, so a trace's mean is the CSV's to a packet), and a trace's summary (``summary``: the
figures the profiles quote, from 1-s bins).  The wire engine reads the Mahimahi file a scenario
names (``capacity_trace``) when it starts the link.

Errors are ``ValueError("<where>: <problem>; expected <what>")`` naming the file and line; they
never quote the file's content (a scenario run as root may name any file).
"""

from __future__ import annotations

import datetime
import functools
import math
from pathlib import Path

from typing import TYPE_CHECKING

from .tracefile import number, read_trace_text

if TYPE_CHECKING:
    from .model import Scenario
    from .problems import Problem

#: Mahimahi's PACKET_SIZE: the bytes one delivery opportunity carries (wire-core MAHIMAHI_OPPORTUNITY_BYTES).
OPPORTUNITY_BYTES = 1500
MAHIMAHI_EXPECTED = "a Mahimahi trace: one whole number of milliseconds per line, never decreasing, the last above 0"
CSV_EXPECTED = ("lines of 'time,rate' (a time in seconds or a timestamp, never going back; a rate >= 0 in the unit "
                "given)")
#: A trace of more than this many bytes is refused (64 MiB: Mahimahi's longest bundled traces are ~10 MB).
MAX_BYTES = 64 * 1024 * 1024
#: The largest capacity a trace may give (10 Gbit/s): above it a unit was probably wrong.
MAX_RATE_BPS = 10_000_000_000
RATE_UNITS = {"bit/s": 1, "kbit/s": 1e3, "Mbit/s": 1e6, "Gbit/s": 1e9, "B/s": 8, "kB/s": 8e3, "MB/s": 8e6}


def parse_mahimahi(text: str, name: str) -> list[int]:
    """The opportunities (ms) of a Mahimahi trace; ValueError naming the line otherwise."""
    out: list[int] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if not line.isdigit():
            raise ValueError(f"{name} line {n}: not a whole number of milliseconds; expected {MAHIMAHI_EXPECTED}")
        ms = int(line)
        if out and ms < out[-1]:
            raise ValueError(f"{name} line {n}: {ms} ms is before the line above ({out[-1]} ms); "
                             f"expected {MAHIMAHI_EXPECTED}")
        out.append(ms)
    if not out:
        raise ValueError(f"{name}: no delivery opportunity; expected {MAHIMAHI_EXPECTED}")
    if out[-1] == 0:
        raise ValueError(f"{name}: the last timestamp is 0 ms (it is the trace's period); expected {MAHIMAHI_EXPECTED}")
    return out


def read_mahimahi(path: Path) -> list[int]:
    return parse_mahimahi(read_trace_text(path, MAX_BYTES, MAHIMAHI_EXPECTED), str(path))


#: Timestamps a time column may hold besides seconds: ISO 8601 and the G-NetTrack logs' 2019.12.16_13.40.04.
TIME_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y.%m.%d_%H.%M.%S", "%Y-%m-%dT%H:%M:%S.%f",
                "%Y-%m-%d %H:%M:%S.%f")


def _seconds(text: str) -> float | None:
    """A time field as seconds: a number, or a timestamp of ``TIME_FORMATS`` (seconds since the epoch, UTC)."""
    v = number(text)
    if v is not None:
        return float(v)
    for fmt in TIME_FORMATS:
        try:
            return datetime.datetime.strptime(text.strip(), fmt).replace(tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def parse_rate_csv(text: str, name: str, unit: str = "Mbit/s", time_column: int = 1,
                   rate_column: int = 2) -> list[tuple[float, float]]:
    """(time s, rate bit/s) per line of a capacity CSV; one header line, ``#`` comments and blank lines skipped;
    columns are 1-based; the time is seconds or a timestamp (``TIME_FORMATS``). ValueError naming the line
    otherwise."""
    if unit not in RATE_UNITS:
        raise ValueError(f"unit {unit!r} is unknown; expected one of {', '.join(RATE_UNITS)}")
    scale = RATE_UNITS[unit]
    rows: list[tuple[float, float]] = []
    header_allowed = True
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"{name} line {n}"
        need = max(time_column, rate_column)
        if len(fields) < need:
            raise ValueError(f"{where}: {len(fields)} comma-separated fields, fewer than {need}; expected {CSV_EXPECTED}")
        t, r = _seconds(fields[time_column - 1]), number(fields[rate_column - 1])
        if header_allowed and (t is None or r is None):
            header_allowed = False  # a header such as "time_s,throughput_mbps"
            continue
        header_allowed = False
        if t is None:
            raise ValueError(f"{where}: field {time_column} (the time) is neither seconds nor a timestamp like "
                             f"2019-12-16T13:40:04; expected {CSV_EXPECTED}")
        if r is None:
            raise ValueError(f"{where}: field {rate_column} (the rate) is not a number; expected {CSV_EXPECTED}")
        if t < 0 or (rows and t < rows[-1][0]):
            raise ValueError(f"{where}: the time goes back; expected {CSV_EXPECTED}")
        bps = float(r) * scale
        if bps < 0 or bps > MAX_RATE_BPS:
            raise ValueError(f"{where}: a rate of {bps / 1e6:g} Mbit/s is out of range; expected a rate from 0 to "
                             f"{MAX_RATE_BPS / 1e9:g} Gbit/s (is the unit right? --unit)")
        rows.append((t, bps))
    if not rows:
        raise ValueError(f"{name}: no rate; expected {CSV_EXPECTED}")
    return rows


def per_second(rows: list[tuple[float, float]]) -> list[float]:
    """The rates of ``rows`` (time s, bit/s) by whole second since the first row: rows in one second averaged, a
    second without a row holding the second before (a logger's skipped line, not an outage: an outage is a 0)."""
    t0 = rows[0][0]
    bins: dict[int, list[float]] = {}
    for t, bps in rows:
        bins.setdefault(int(t - t0), []).append(bps)
    out: list[float] = []
    for k in range(max(bins) + 1):
        out.append(sum(bins[k]) / len(bins[k]) if k in bins else out[-1])
    return out


def from_rates(rows: list[tuple[float, float]]) -> list[int]:
    """Mahimahi opportunities for per-second rates (``per_second``): each second's bytes in evenly spaced 1500-byte
    opportunities, the fraction of a packet carried to the next second."""
    rates = per_second(rows)
    out: list[int] = []
    carry = 0.0
    for k, bps in enumerate(rates):
        packets = bps / 8 / OPPORTUNITY_BYTES + carry
        n = int(packets)
        carry = packets - n
        out.extend(k * 1000 + (i * 1000) // n for i in range(n))
    period = len(rates) * 1000
    if not out:
        raise ValueError("the trace carries nothing: every second's rate is below one 1500-byte packet; expected "
                         "some capacity")
    # Mahimahi repeats a trace with its last timestamp as the period: the last opportunity moves to the period
    # (still inside the last second's share) or, when the last second carries nothing, one is added there.
    if out[-1] >= period - 1000:
        out[-1] = period
    else:
        out.append(period)
    return out


def to_mahimahi(opportunities: list[int]) -> str:
    return "\n".join(str(ms) for ms in opportunities) + "\n"


def percentile(xs: list[float], q: float) -> float:
    """The q-quantile of ``xs`` (0 <= q <= 1), linear between the order statistics (numpy's default)."""
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(opportunities: list[int]) -> dict[str, float]:
    """Figures of a trace from 1-s bins: duration, mean, p10/p50/p90 (Mbit/s), seconds at zero, longest outage."""
    period_s = max(1, math.ceil(opportunities[-1] / 1000))
    bins = [0] * period_s
    for ms in opportunities:
        bins[min(period_s - 1, ms // 1000)] += 1
    mbps = [b * OPPORTUNITY_BYTES * 8 / 1e6 for b in bins]
    longest = run = 0
    for b in bins:
        run = run + 1 if b == 0 else 0
        longest = max(longest, run)
    return {"duration_s": opportunities[-1] / 1000, "opportunities": len(opportunities),
            "mean_mbps": len(opportunities) * OPPORTUNITY_BYTES * 8 / 1e6 / (opportunities[-1] / 1000),
            "p10_mbps": percentile(mbps, 0.1), "p50_mbps": percentile(mbps, 0.5), "p90_mbps": percentile(mbps, 0.9),
            "zero_seconds": sum(1 for b in bins if b == 0) / len(bins), "longest_outage_s": longest}


def check_files(s: "Scenario", base: Path) -> tuple[dict[str, str], list["Problem"]]:
    """Every ``capacity_trace`` of a checked scenario (no placeholders left) read and checked: the path as written
    -> the absolute path the wire engine reads; problems name the key (``link[0].forward.capacity_trace``)."""
    from .problems import Problem

    found: dict[str, str] = {}
    problems: list[Problem] = []
    for i, link in enumerate(s.link):
        for where, table in ((f"link[{i}]", link), (f"link[{i}].forward", link.forward),
                             (f"link[{i}].reverse", link.reverse)):
            written = getattr(table, "capacity_trace", None) if table is not None else None
            if written is None:
                continue
            path = Path(written) if Path(written).is_absolute() else base / written
            try:
                _read_cached(str(path.resolve()), *_stamp(path))
            except ValueError as e:
                problem, _, expected = str(e).partition("; expected ")
                problems.append(Problem(f"{where}.capacity_trace", problem, expected or MAHIMAHI_EXPECTED, written))
                continue
            found[written] = str(path.resolve())
    return found, problems


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _read_cached(path: str, mtime_ns: int, size: int) -> int:
    """Reads and checks a trace once per (path, modification, size): a sweep's points share their files."""
    return len(read_mahimahi(Path(path)))
