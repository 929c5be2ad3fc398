"""The numbers a user's own program offers, turned into roughnet's distributions and series.

Owns the three ``metrics`` sources of a ``[[process]]`` (not starting the process, not storing the
record): reading JSON-lines and samples files, parsing the Prometheus text exposition format and
scraping it over a socket made elsewhere (inside the process's namespace), and turning values into
the agent's latency objects and into per-interval series rows.

Latency objects are the agent's (crates/agent/src/hist.rs, docs/agent-protocol.md): ``hdr`` is the
contract HdrHistogram (ns, lowest discernible 1000 ns, highest 3.6e12 ns = 1 h, 3 significant
digits, V2 compressed, base64) that results/schema.py HISTOGRAM_KINDS rows carry; the summary
figures (``min_us`` ... ``max_us``, with ``p9999_us`` and ``p999999_us``) come from a copy at 1 ns
resolution.  Values above 1 h are recorded as 1 h and counted in ``clamped``; negative ones as 0.
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hdrh.histogram import HdrHistogram

from ..errors import RoughnetError, SpecError

log = logging.getLogger(__name__)

UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
LOWEST_NS, HIGHEST_NS, SIGFIG = 1_000, 3_600_000_000_000, 3
QUANTILES = ((0.50, "p50_us"), (0.90, "p90_us"), (0.99, "p99_us"), (0.999, "p999_us"), (0.9999, "p9999_us"),
             (0.999999, "p999999_us"))
#: Points a histogram bucket's observations are spread over by histogram_distribution().
BUCKET_POINTS = 1000
MAX_SCRAPE_BYTES = 64 * 2**20


class AppMetricsError(RoughnetError, ValueError):
    """A user program's metrics are unreadable (a file, an exposition, a scrape)."""


class MetricsSpecError(SpecError, ValueError):
    """A process's ``metrics`` description is malformed (unit, URL, interval)."""


def _scale(unit: str) -> int:
    if unit not in UNITS_NS:
        raise MetricsSpecError(f"metrics unit {unit!r} is unknown; expected one of {', '.join(UNITS_NS)}")
    return UNITS_NS[unit]


def _float(x: str | float) -> float | None:
    """``x`` as a finite float; None when it is not one (text, NaN, infinite, too large)."""
    try:
        f = float(x)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def _num(v: object) -> float | None:
    """A JSON number (int or float, not bool) as a finite float; else None."""
    return _float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# --- JSON lines and samples files ---

def _json(line: str) -> dict:
    try:
        obj = json.loads(line)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


@dataclass
class JsonLines:
    rows: list[tuple[float | None, dict[str, float]]]
    ignored: int
    first_ignored_line: int | None
    truncated: bool = False  # the file was longer than max_bytes; only its first max_bytes were read


def read_json_lines(path: Path, max_bytes: int = 256 * 2**20) -> JsonLines:
    """One row per line holding a JSON object with at least one finite number at its top level.

    ``t`` (Unix seconds) is the row's time; without a numeric ``t`` the row is untimed (None).
    Every other top-level int/float key (bools, strings, nested objects, NaN and infinities are
    not values) is a named value.  Blank lines are skipped silently; any other line (not JSON, not
    an object, an object without numbers) is ignored and counted.  Past ``max_bytes`` reading
    stops at the last whole line and ``truncated`` is set.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise AppMetricsError(f"cannot read JSON-lines metrics {path}: {e}") from e
    truncated = len(data) > max_bytes
    if truncated:
        data = data[:max_bytes]
        data = data[: data.rfind(b"\n") + 1]
        log.warning("%s is longer than %d bytes; reading only its first %d", path, max_bytes, len(data))
    rows: list[tuple[float | None, dict[str, float]]] = []
    ignored, first = 0, None
    for no, raw in enumerate(data.decode("utf-8", errors="replace").split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        obj = _json(line)
        values = {k: f for k, v in obj.items() if k != "t" and (f := _num(v)) is not None}
        if values:
            rows.append((_num(obj.get("t")), values))
        else:
            ignored, first = ignored + 1, first or no
    return JsonLines(rows, ignored, first, truncated)


@dataclass
class Samples:
    values_ns: list[int]
    malformed: int
    first_malformed_line: int | None


def read_samples(path: Path, unit: str) -> Samples:
    """One number per line in ``unit``; blank lines and lines starting with '#' are skipped.

    Anything else (two numbers, "seq,value", text, NaN, infinities) is malformed: counted, with
    the first such line number, and not fatal.
    """
    scale = _scale(unit)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise AppMetricsError(f"cannot read samples file {path}: {e}") from e
    values: list[int] = []
    bad, first = 0, None
    for no, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        v = _float(line)
        if v is None:
            bad, first = bad + 1, first or no
        else:
            values.append(round(v * scale))
    if bad:
        log.warning("%s: %d malformed line(s), the first at line %d", path, bad, first)
    return Samples(values, bad, first)


def latency_from_json(jl: JsonLines, key: str, unit: str) -> list[int]:
    """The values of ``key`` in every row (timed or not), in file order, converted to ns."""
    scale = _scale(unit)
    return [round(vals[key] * scale) for _, vals in jl.rows if key in vals]


# --- latency objects ---

def _us(ns: float) -> float:
    return round(ns) / 1000.0


def _latency_object(weighted: Iterable[tuple[int, int]]) -> dict:
    """The agent's latency object from (value in ns, count) pairs."""
    h = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGFIG)
    fine = HdrHistogram(1, HIGHEST_NS, SIGFIG)
    clamped = 0
    for v, n in weighted:
        if n <= 0:
            continue
        if v > HIGHEST_NS:
            clamped += n
        v = min(max(0, int(v)), HIGHEST_NS)
        h.record_value(v, n)
        fine.record_value(v, n)
    out: dict = {"count": h.get_total_count()}
    if not out["count"]:
        out |= {k: None for k in ("min_us", "mean_us", "std_us", *(k for _, k in QUANTILES), "max_us")}
    else:
        out |= {"min_us": _us(fine.get_min_value()), "mean_us": _us(fine.get_mean_value()),
                "std_us": _us(fine.get_stddev())}
        out |= {k: _us(fine.get_value_at_percentile(q * 100.0)) for q, k in QUANTILES}
        out["max_us"] = _us(fine.get_max_value())
    if clamped:
        out["clamped"] = clamped
    out["hdr"] = h.encode().decode("ascii")
    return out


def distribution(values_ns: list[int]) -> dict:
    """The agent's latency object of ``values_ns``: count, min/mean/std/p50..p999999/max in us
    (None when empty), ``clamped`` when some exceeded 1 h, and ``hdr``."""
    return _latency_object(Counter(values_ns).items())


def histogram_distribution(buckets: list[tuple[float, float]], scale_ns: float,
                           total: float | None = None) -> dict:
    """The latency object estimated from cumulative Prometheus buckets ``[(le, count)]``.

    ``scale_ns`` converts a bound to ns (1e9 for seconds).  The estimate is Prometheus'
    ``histogram_quantile``'s: a bucket's observations are spread uniformly from the previous bound
    (0 below the first bound when it is positive) to its ``le``; its n observations are recorded
    at the midpoints of min(n, BUCKET_POINTS) equal sub-intervals, sharing the count (the cost does
    not grow with n).  Observations only the +Inf bucket counts have no upper bound: they are put at
    the highest finite bound (as histogram_quantile does), so high percentiles and max are lower
    bounds then; with no finite bound they are only counted, in ``unestimated``.  A decreasing
    cumulative count adds 0.  ``total`` (the ``_sum``, in the bounds' unit) gives the exact mean.
    """
    pts = sorted((float(le), float(c)) for le, c in buckets if not math.isnan(float(le)) and math.isfinite(c))
    finite = [le for le, _ in pts if math.isfinite(le)]
    weighted: list[tuple[int, int]] = []
    prev_le, prev_c = None, 0.0
    for le, c in pts:
        n = round(c - prev_c)
        if n < 0:
            log.warning("histogram buckets decrease at le=%s (%s after %s); counted as 0", le, c, prev_c)
            n = 0
        prev_c = max(prev_c, c)
        if n and not math.isfinite(le):
            if finite:
                weighted.append((round(finite[-1] * scale_ns), n))
        elif n:
            lo = prev_le if prev_le is not None else min(0.0, le)
            m = min(n, BUCKET_POINTS)
            for k in range(m):
                v = lo + (le - lo) * (k + 0.5) / m
                weighted.append((round(v * scale_ns), n // m + (1 if k < n % m else 0)))
        if math.isfinite(le):
            prev_le = le
    out = _latency_object(weighted)
    if (left := round(prev_c) - out["count"]) > 0:
        out["unestimated"] = left  # counted only by +Inf with no finite bound: nowhere to place them
    if total is not None and out["count"] and math.isfinite(total):
        out["mean_us"] = _us(total * scale_ns / out["count"])
    return out


# --- series ---

def _rank(sorted_vals: list[float], q: float) -> float:
    return sorted_vals[max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))]


def series(rows: list[tuple[float | None, dict[str, float]]], t0_unix: float, interval_s: float,
           latency_key: str | None = None, unit: str = "ms") -> list[dict]:
    """One row per (interval, name) that has data: ``t_s`` (interval start relative to t0),
    ``interval_s``, ``name``, ``count``, ``mean`` and ``last`` (the value with the latest ``t``,
    the later line on a tie) in the program's own unit; for ``latency_key`` also ``p50_us``,
    ``p99_us`` and ``max_us`` (exact nearest-rank figures of the interval's values).

    Untimed rows are skipped (they are in the whole-run figures only).  Times are taken to the
    microsecond (a float of Unix seconds carries about 0.24 us today), so a row stamped at an
    interval's edge, t0 + k * interval_s, starts interval k.  Rows before t0 land in intervals
    with a negative ``t_s``.  Rows are ordered by ``t_s``, then name.
    """
    iv_us = round(interval_s * 1e6)
    if not math.isfinite(interval_s) or iv_us < 1:
        raise MetricsSpecError(f"series interval {interval_s!r} s is not positive; expected at least 1 us")
    scale = _scale(unit) if latency_key else 1
    buckets: dict[tuple[int, str], list[float]] = {}
    for t, _, vals in sorted((t, i, vals) for i, (t, vals) in enumerate(rows) if t is not None):
        idx = round((t - t0_unix) * 1e6) // iv_us
        for name, v in vals.items():
            buckets.setdefault((idx, name), []).append(v)
    out = []
    for (idx, name), vals in sorted(buckets.items()):
        row = {"t_s": idx * iv_us / 1e6, "interval_s": interval_s, "name": name, "count": len(vals),
               "mean": sum(vals) / len(vals), "last": vals[-1]}
        if name == latency_key:
            s = sorted(vals)
            row |= {"p50_us": _rank(s, 0.5) * scale / 1e3, "p99_us": _rank(s, 0.99) * scale / 1e3,
                    "max_us": s[-1] * scale / 1e3}
        out.append(row)
    return out


# --- Prometheus text exposition format ---

_STR = r'"(?:[^"\\]|\\.)*"'
_SAMPLE = re.compile(rf'([a-zA-Z_:][a-zA-Z0-9_:]*)?(?:\{{((?:[^"}}]|{_STR})*)\}})?(.*)')
_PAIR = re.compile(rf'\s*(?:([a-zA-Z_][a-zA-Z0-9_]*)|({_STR}))\s*(?:=\s*({_STR}))?\s*(?:,|$)')
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped", "gaugehistogram", "stateset", "info", "unknown")
_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_gsum", "_gcount", "_info")
_ESC = {"\\": "\\", '"': '"', "n": "\n"}


def _unquote(q: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESC.get(m[1], "\\" + m[1]), q[1:-1])


def _sample_line(line: str, no: int) -> tuple[str, dict[str, str], float, int | None]:
    """name, labels, value, timestamp of a sample line; a quoted name alone in the braces (the
    UTF-8 names of Prometheus 3) is the metric's name."""
    def bad(why: str) -> AppMetricsError:
        return AppMetricsError(f"exposition line {no}: {why}: {line!r}")

    name, body, rest = _SAMPLE.fullmatch(line).groups()
    labels: dict[str, str] = {}
    pos = 0
    while body and body[pos:].strip():
        if not (m := _PAIR.match(body, pos)) or m.end() == pos:
            raise bad("expected label=\"value\" pairs inside { }")
        key, quoted, value = m[1] or _unquote(m[2]), m[2], m[3]
        if value is None and quoted and not name:
            name = key
        elif value is None or key in labels:
            raise bad(f"label {key} has no value" if value is None else f"label {key} given twice")
        else:
            labels[key] = _unquote(value)
        pos = m.end()
    if not name:
        raise bad("no metric name")
    parts = rest.split(" # ")[0].split()  # an OpenMetrics exemplar follows " # "
    if rest[:1] not in (" ", "\t") or not 1 <= len(parts) <= 2:
        raise bad("expected whitespace, a value and an optional timestamp after the name and labels")
    try:
        return name, labels, float(parts[0]), int(parts[1]) if len(parts) == 2 else None
    except ValueError:
        raise bad("unreadable value or timestamp") from None


def parse_prometheus(text: str) -> list[dict]:
    """The samples of an exposition: ``{"name", "labels", "value", "type", "family", "timestamp_ms"}``.

    ``type`` is that of the ``# TYPE`` of the sample's family ("untyped" without one); the family
    of ``x_bucket``, ``x_sum``, ``x_count`` (also ``_created``, ``_total``, ``_gsum``, ``_gcount``,
    ``_info``) is ``x`` when ``x`` has a TYPE.  Values take NaN and +/-Inf; ``timestamp_ms`` is the
    optional integer after the value (None without).  Other comments, ``# HELP`` and ``# EOF`` are
    skipped.  A malformed line raises AppMetricsError (a ValueError) naming its number.
    """
    types: dict[str, str] = {}
    out: list[dict] = []
    for no, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            words = line[1:].split(None, 3)
            if len(words) >= 2 and words[0] == "TYPE":
                if len(words) != 3 or words[2] not in _TYPES:
                    raise AppMetricsError(f"exposition line {no}: expected '# TYPE <name> <one of "
                                          f"{'|'.join(_TYPES)}>': {raw!r}")
                types[words[1]] = words[2]
            continue
        name, labels, value, ts = _sample_line(line, no)
        family = name
        if name not in types:
            family = next((name[: -len(s)] for s in _SUFFIXES if name.endswith(s) and name[: -len(s)] in types),
                          name)
        out.append({"name": name, "labels": labels, "value": value, "type": types.get(family, "untyped"),
                    "family": family, "timestamp_ms": ts})
    return out


def _label_key(family: str, labels: dict[str, str]) -> str:
    if not labels:
        return family
    inner = ",".join(f'{k}="{json.dumps(v, ensure_ascii=False)[1:-1]}"' for k, v in sorted(labels.items()))
    return f"{family}{{{inner}}}"


def prometheus_histograms(samples: list[dict]) -> dict[str, dict]:
    """Histogram families by ``name{labels}`` (labels sorted, ``le`` left out; just ``name`` without
    labels) -> ``{"family", "labels", "buckets": [(le, cumulative count)] ascending, "sum", "count"}``
    (``sum``/``count`` None when absent).  Only families whose TYPE is histogram."""
    out: dict[str, dict] = {}
    for s in samples:
        if s.get("type") != "histogram":
            continue
        fam, name = s["family"], s["name"]
        labels = {k: v for k, v in s["labels"].items() if k != "le"}
        h = out.setdefault(_label_key(fam, labels), {"family": fam, "labels": labels, "buckets": [],
                                                     "sum": None, "count": None})
        if name == fam + "_bucket" and "le" in s["labels"]:
            try:
                h["buckets"].append((float(s["labels"]["le"]), s["value"]))
            except ValueError:
                raise AppMetricsError(f"{name}: le={s['labels']['le']!r} is not a number") from None
        elif name == fam + "_sum":
            h["sum"] = s["value"]
        elif name == fam + "_count":
            h["count"] = s["value"]
    for h in out.values():
        h["buckets"].sort()
    return out


# --- scraping ---

def check_url(url: str) -> tuple[str, int, str]:
    """(host or "", port, path with any query) of ``http://[host]:port/path``; else MetricsSpecError."""
    try:
        u = urlsplit(url)
        port = u.port
        why = (f"scheme {u.scheme or 'missing'!r} is not http" if u.scheme != "http" else
               "user info and fragments are not supported" if u.username is not None or u.fragment else
               "no port (or port 0)" if not port else "no path" if not u.path.startswith("/") else None)
    except ValueError as e:
        why = str(e)
    if why:
        raise MetricsSpecError(f"metrics URL {url!r}: {why}; expected http://[host]:port/path, "
                               "e.g. http://:9100/metrics")
    return u.hostname or "", port, u.path + (f"?{u.query}" if u.query else "")


class PrometheusScraper:
    """Scrapes url every interval_s from INSIDE a network namespace (the URL's host may be empty:
    "http://:9100/metrics" means the process's own host, i.e. 127.0.0.1 in its namespace); keeps
    each scrape (t_unix, samples).

    ``connect(host, port, timeout_s)`` returns a connected TCP socket (roughnet passes one made in
    the namespace, services/netns.py ``connect_in_ns``); the scraper sends a plain HTTP/1.0 GET over
    it and reads to EOF.  Scrapes start at ``start()`` and follow at start + k * interval_s (a late
    scrape skips the ticks it missed); ``t_unix`` is when the request was sent.  A failed scrape
    (connection, HTTP status, unparsable body) is logged and kept in ``errors()``; scraping goes on.
    """

    def __init__(self, url: str, interval_s: float, connect: Callable[[str, int, float], socket.socket]):
        self.url = url
        host, self.port, self.path = check_url(url)
        self.host = host or "127.0.0.1"
        if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
            raise MetricsSpecError(f"scrape interval {interval_s!r} s is not positive")
        self.interval_s = float(interval_s)
        self.timeout_s = min(10.0, max(1.0, self.interval_s))
        self._connect = connect
        self._lock = threading.Lock()
        self._scrapes: list[tuple[float, list[dict]]] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise AppMetricsError(f"scraper of {self.url} was already started")
        self._thread = threading.Thread(target=self._loop, name=f"scrape-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops scraping and waits for a scrape under way (at most its timeout); idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def scrapes(self) -> list[tuple[float, list[dict]]]:
        with self._lock:
            return list(self._scrapes)

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    def _loop(self) -> None:
        t0 = time.monotonic()
        k = 0
        while not self._stop.is_set():
            self.scrape_once()
            k = max(k + 1, math.floor((time.monotonic() - t0) / self.interval_s) + 1)
            if self._stop.wait(max(0.0, t0 + k * self.interval_s - time.monotonic())):
                break

    def scrape_once(self) -> bool:
        """One scrape now; True when it was kept."""
        t = time.time()
        try:
            samples = parse_prometheus(self._get())
        except (OSError, ValueError, RoughnetError) as e:
            msg = f"t={t:.3f}: scraping {self.url}: {e}"
            log.warning("%s", msg)
            with self._lock:
                self._errors.append(msg)
            return False
        with self._lock:
            self._scrapes.append((t, samples))
        return True

    def _get(self) -> str:
        sock = self._connect(self.host, self.port, self.timeout_s)
        try:
            sock.settimeout(self.timeout_s)
            host = f"[{self.host}]" if ":" in self.host else self.host
            sock.sendall(f"GET {self.path} HTTP/1.0\r\nHost: {host}:{self.port}\r\n"
                         "Accept: text/plain;version=0.0.4\r\nConnection: close\r\n\r\n".encode("ascii"))
            chunks, size = [], 0
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_SCRAPE_BYTES:
                    raise AppMetricsError(f"response longer than {MAX_SCRAPE_BYTES} bytes")
        finally:
            sock.close()
        head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
        if not sep:
            raise AppMetricsError("response has no end of headers")
        lines = head.decode("iso-8859-1").split("\r\n")
        status = lines[0].split(None, 2)
        if len(status) < 2 or not status[0].startswith("HTTP/") or status[1] != "200":
            raise AppMetricsError(f"HTTP status line {lines[0]!r}; expected 200")
        headers = {k.strip().lower(): v.strip().lower() for k, _, v in (h.partition(":") for h in lines[1:])}
        if headers.get("transfer-encoding", "identity") != "identity" or \
                headers.get("content-encoding", "identity") != "identity":
            raise AppMetricsError(f"encoded response ({headers}); expected a plain HTTP/1.0 body")
        return body.decode("utf-8", errors="replace")
