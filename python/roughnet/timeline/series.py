"""Per-interval series and a summary of one flow from its traces; flows summed into a workload's series.

A *flow* is one sender and one receiver of a workload (docs/timelines.md).  Definitions, shared
with ``recovery`` and the agent's own accounting (crates/agent/src/accounting.rs):

- *sent*: the messages of the sender's trace, plus any sequence number the receiver got that the
  sender's trace lacks (a sender killed by SIGKILL loses up to its last second of trace; the
  receiver's record carries the send time too).  A message's send time is its ``actual_ns``.
- *arrivals* are taken in the order of their receive time (the file's order for equal times); a
  *first arrival* is the first arrival of its seq; a *duplicate* is any later arrival of a seq
  already received; a *reordered* arrival is a first arrival whose seq is below the highest seq
  received before it.
- *lost*: a message sent and never received (no arrival at all in the receiver's trace, whenever
  it came).  So a message still in flight when the run ended counts as lost, and in a series it
  counts as lost in the interval in which it was *sent*, like every loss.
- *latency*: ``recv_ns - actual_ns`` of first arrivals (from the actual send time, the receiver's
  record's own copy), in µs; percentiles are *nearest rank* (the smallest latency with at least
  q of the arrivals at or below it: always a latency some message had), None without arrivals.
- *bytes*: first arrivals × the workload's payload size (duplicates carry no new data).

``flow_series`` puts sends (sent, lost) into intervals by send time and arrivals (delivered, bytes,
latency, duplicates, reordered) by receive time, over every interval from t0 to the run's end,
empty ones included so that an outage shows as zeros.  Things outside [t0, end) fall in no row;
``flow_summary`` counts over the same window, so the rows of a flow add up to its summary.
Everything is vectorised (sorts, ``searchsorted``, ``bincount``): 10**6 messages take well under
a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from roughnet.timeline.traces import Rx, Tx

__all__ = ["LATENCY_KEYS", "PERCENTILES", "SERIES_KEYS", "Flow", "flow_series", "flow_summary", "flows_series",
           "prepare", "workload_series"]  # fmt: skip

#: Latency percentiles of a row, as (key, q in thousandths) (integer ranks: no float rounding at the edges).
PERCENTILES: tuple[tuple[str, int], ...] = (("lat_p50_us", 500), ("lat_p90_us", 900), ("lat_p99_us", 990))
#: The latency keys of a row or summary, ``lat_max_us`` last.
LATENCY_KEYS: tuple[str, ...] = (*(k for k, _ in PERCENTILES), "lat_max_us")
#: The keys of a series row, in order (docs/timelines.md, ``series``; the caller adds workload, sender, receiver).
SERIES_KEYS: tuple[str, ...] = ("t_s", "interval_s", "sent", "delivered", "bytes", "throughput_bps", "lost",
                                "duplicates", "reordered", *LATENCY_KEYS)  # fmt: skip


@dataclass(frozen=True)
class Flow:
    """One flow's traces arranged for counting (``prepare``).

    ``sent_*``: every message known sent (one per seq), in send order; ``sent_lost`` true for those
    never received.  ``recv_*``: every arrival in receive order, with ``first`` (first arrival of
    its seq), ``dup`` (not first) and ``reordered`` masks; ``lat_ns`` = recv_ns - actual_ns."""

    sent_seq: np.ndarray
    sent_ns: np.ndarray
    sent_lost: np.ndarray
    recv_seq: np.ndarray
    recv_ns: np.ndarray
    recv_actual_ns: np.ndarray
    first: np.ndarray
    dup: np.ndarray
    reordered: np.ndarray

    @property
    def lat_ns(self) -> np.ndarray:
        return self.recv_ns - self.recv_actual_ns


def prepare(tx: Tx, rx: Rx) -> Flow:
    """Sort and classify a flow's messages and arrivals once (see the module's definitions)."""
    order = np.argsort(rx.recv_ns, kind="stable")
    r_seq, r_ns, r_act = rx.seq[order], rx.recv_ns[order], rx.actual_ns[order]
    got, first_idx = np.unique(r_seq, return_index=True)  # the first occurrence of each seq, in receive order
    first = np.zeros(r_seq.size, dtype=bool)
    first[first_idx] = True
    prev_max = np.empty_like(r_seq)
    if r_seq.size:
        prev_max[0] = np.iinfo(np.int64).min
        prev_max[1:] = np.maximum.accumulate(r_seq)[:-1]
    reordered = first & (r_seq < prev_max)

    t_seq, t_idx = np.unique(tx.seq, return_index=True)
    t_ns = tx.actual_ns[t_idx]
    only_rx = ~_member(got, t_seq)  # received, but the sender's trace lost them
    s_seq = np.concatenate([t_seq, got[only_rx]])
    s_ns = np.concatenate([t_ns, r_act[first_idx][only_rx]])
    by_time = np.argsort(s_ns, kind="stable")
    s_seq, s_ns = s_seq[by_time], s_ns[by_time]
    lost = ~_member(s_seq, got)
    return Flow(s_seq, s_ns, lost, r_seq, r_ns, r_act, first, ~first, reordered)


def _member(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """``np.isin(values, sorted_unique)`` for a sorted array of distinct values (``np.unique``'s), by binary search:
    the same answer without isin's overhead (prepare runs once per flow: 10,000 times at 100 cars)."""
    if not sorted_unique.size:
        return np.zeros(values.shape, dtype=bool)
    idx = np.searchsorted(sorted_unique, values)
    np.minimum(idx, sorted_unique.size - 1, out=idx)
    return sorted_unique[idx] == values


def _nearest_rank(counts: np.ndarray, permille: int) -> np.ndarray:
    """0-based rank of the q-quantile (q = permille/1000) in each group of ``counts`` sorted values."""
    k = (counts * permille + 999) // 1000 - 1
    return np.clip(k, 0, None)


def _latency_by_bin(bins: np.ndarray, lat_ns: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per bin (0..n-1): nearest-rank percentiles and max of ``lat_ns`` in µs, NaN where a bin is empty."""
    counts = np.bincount(bins, minlength=n)
    order = np.lexsort((lat_ns, bins))
    sorted_us = lat_ns[order] / 1e3
    starts = np.cumsum(counts) - counts
    has = counts > 0
    out: dict[str, np.ndarray] = {}
    for key, permille in PERCENTILES:
        v = np.full(n, np.nan)
        v[has] = sorted_us[starts[has] + _nearest_rank(counts[has], permille)]
        out[key] = v
    v = np.full(n, np.nan)
    v[has] = sorted_us[starts[has] + counts[has] - 1]
    out["lat_max_us"] = v
    return out


def _us(v: float) -> float | None:
    return None if math.isnan(v) else round(float(v), 3)


def _flow(tx_or_flow: Tx | Flow, rx: Rx | None) -> Flow:
    if isinstance(tx_or_flow, Flow):
        return tx_or_flow
    if rx is None:
        raise TypeError("a Tx needs its Rx")
    return prepare(tx_or_flow, rx)


def flow_series(tx: Tx | Flow, rx: Rx | None, t0_ns: int, end_ns: int, interval_ns: int,
                payload_bytes: int) -> list[dict[str, Any]]:
    """One row per interval of ``interval_ns`` from ``t0_ns`` to ``end_ns`` (the last one may be shorter).

    Keys (``SERIES_KEYS``): ``t_s`` (start of the interval after t0), ``interval_s`` (its length),
    ``sent`` and ``lost`` (messages sent in the interval; those of them never received),
    ``delivered``, ``bytes``, ``throughput_bps`` (first arrivals received in the interval; bytes ×
    8 / interval_s), ``duplicates``, ``reordered`` (arrivals received in the interval) and the
    latency of its first arrivals (``lat_p50_us`` .. ``lat_max_us``, None when nothing arrived).
    ``tx`` may be a ``Flow`` from ``prepare`` (then ``rx`` is ignored), to share the sorting."""
    if interval_ns <= 0:
        raise ValueError(f"flow_series: interval_ns is {interval_ns}; expected > 0")
    f = _flow(tx, rx)
    span = int(end_ns) - int(t0_ns)
    if span <= 0:
        return []
    n = -(-span // interval_ns)

    def bins_of(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inside = (t >= t0_ns) & (t < end_ns)
        return inside, (t[inside] - t0_ns) // interval_ns

    s_in, s_bin = bins_of(f.sent_ns)
    sent = np.bincount(s_bin, minlength=n)
    lost = np.bincount(s_bin, weights=f.sent_lost[s_in], minlength=n).astype(np.int64)
    r_in, r_bin = bins_of(f.recv_ns)
    first_in = f.first[r_in]
    delivered = np.bincount(r_bin[first_in], minlength=n)
    dups = np.bincount(r_bin, weights=f.dup[r_in], minlength=n).astype(np.int64)
    reord = np.bincount(r_bin, weights=f.reordered[r_in], minlength=n).astype(np.int64)
    lat = _latency_by_bin(r_bin[first_in], f.lat_ns[r_in][first_in], n)

    rows = []
    for i in range(n):
        start = i * interval_ns
        length_s = min(interval_ns, span - start) / 1e9
        nbytes = int(delivered[i]) * int(payload_bytes)
        row: dict[str, Any] = {
            "t_s": round(start / 1e9, 9), "interval_s": round(length_s, 9), "sent": int(sent[i]),
            "delivered": int(delivered[i]), "bytes": nbytes, "throughput_bps": round(nbytes * 8 / length_s, 3),
            "lost": int(lost[i]), "duplicates": int(dups[i]), "reordered": int(reord[i]),
        }  # fmt: skip
        for key in LATENCY_KEYS:
            row[key] = _us(lat[key][i])
        rows.append(row)
    return rows


def flows_series(flows: Sequence[Flow], t0_ns: int, end_ns: int, interval_ns: int, payload_bytes: Sequence[int],
                 prefix: Sequence[Mapping[str, Any]] | None = None) -> list[list[dict[str, Any]]]:
    """``flow_series`` of many prepared flows at once (one set of arrays, the bins of flow ``k`` numbered from
    ``k * n``): for each flow, the rows ``flow_series(flow, None, t0_ns, end_ns, interval_ns, payload)`` gives,
    each row led by the keys of ``prefix[k]`` when given (workload, sender, receiver)."""
    if interval_ns <= 0:
        raise ValueError(f"flows_series: interval_ns is {interval_ns}; expected > 0")
    span = int(end_ns) - int(t0_ns)
    if span <= 0 or not flows:
        return [[] for _ in flows]
    n = -(-span // interval_ns)
    nf = len(flows)
    cells = nf * n

    def cat(name: str, dtype=None) -> np.ndarray:
        parts = [getattr(f, name) for f in flows]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    def keys_of(t: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
        fid = np.repeat(np.arange(nf, dtype=np.int64), sizes)
        inside = (t >= t0_ns) & (t < end_ns)
        return inside, fid[inside] * n + (t[inside] - t0_ns) // interval_ns

    s_in, s_key = keys_of(cat("sent_ns"), [f.sent_ns.size for f in flows])
    sent = np.bincount(s_key, minlength=cells)
    lost = np.bincount(s_key, weights=cat("sent_lost")[s_in], minlength=cells).astype(np.int64)
    r_ns = cat("recv_ns")
    r_in, r_key = keys_of(r_ns, [f.recv_ns.size for f in flows])
    first_in = cat("first")[r_in]
    delivered = np.bincount(r_key[first_in], minlength=cells)
    dups = np.bincount(r_key, weights=cat("dup")[r_in], minlength=cells).astype(np.int64)
    reord = np.bincount(r_key, weights=cat("reordered")[r_in], minlength=cells).astype(np.int64)
    lat_ns = (r_ns - cat("recv_actual_ns"))[r_in][first_in]
    lat = _latency_by_bin(r_key[first_in], lat_ns, cells)

    head = []
    for i in range(n):
        start = i * interval_ns
        length_s = min(interval_ns, span - start) / 1e9
        head.append((round(start / 1e9, 9), round(length_s, 9), length_s))
    sent_l, lost_l, dlv_l = sent.tolist(), lost.tolist(), delivered.tolist()
    dup_l, reord_l = dups.tolist(), reord.tolist()
    lat_l = [[None if v != v else round(v, 3) for v in lat[key].tolist()] for key in LATENCY_KEYS]
    out: list[list[dict[str, Any]]] = []
    for k in range(nf):
        payload = int(payload_bytes[k])
        lead = dict(prefix[k]) if prefix is not None else {}
        rows = []
        for i, (t_s, interval_s, length_s) in enumerate(head):
            c = k * n + i
            nbytes = dlv_l[c] * payload
            row: dict[str, Any] = {
                **lead, "t_s": t_s, "interval_s": interval_s, "sent": sent_l[c], "delivered": dlv_l[c],
                "bytes": nbytes, "throughput_bps": round(nbytes * 8 / length_s, 3), "lost": lost_l[c],
                "duplicates": dup_l[c], "reordered": reord_l[c],
            }  # fmt: skip
            for key, values in zip(LATENCY_KEYS, lat_l, strict=True):
                row[key] = values[c]
            rows.append(row)
        out.append(rows)
    return out


def flow_summary(tx: Tx | Flow, rx: Rx | None, t0_ns: int, end_ns: int,
                 payload_bytes: int | None = None) -> dict[str, Any]:
    """A flow's totals over [t0, end): what its series rows add up to.

    ``sent`` (messages sent in the window), ``received`` (distinct seqs first received in it),
    ``lost`` (of those sent, never received), ``duplicates``, ``reordered`` (arrivals in the
    window), ``throughput_bps`` as the agent computes it (bytes of first arrivals × 8 over the span
    from the first to the last of them; 0.0 with fewer than two; None without ``payload_bytes``)
    and the latency percentiles of all first arrivals (None without any)."""
    f = _flow(tx, rx)
    s_in = (f.sent_ns >= t0_ns) & (f.sent_ns < end_ns)
    r_in = (f.recv_ns >= t0_ns) & (f.recv_ns < end_ns)
    first = r_in & f.first
    received = int(first.sum())
    out: dict[str, Any] = {
        "sent": int(s_in.sum()), "received": received, "lost": int((s_in & f.sent_lost).sum()),
        "duplicates": int((r_in & f.dup).sum()), "reordered": int((r_in & f.reordered).sum()),
    }  # fmt: skip
    if payload_bytes is None:
        out["throughput_bps"] = None
    else:
        times = f.recv_ns[first]
        span_s = (int(times[-1]) - int(times[0])) / 1e9 if received >= 2 else 0.0
        out["throughput_bps"] = round(received * int(payload_bytes) * 8 / span_s, 3) if span_s > 0 else 0.0
    lat = _latency_by_bin(np.zeros(received, dtype=np.int64), f.lat_ns[first], 1)
    for key in LATENCY_KEYS:
        out[key] = _us(lat[key][0])
    return out


_SUMMED = ("sent", "delivered", "bytes", "throughput_bps", "lost", "duplicates", "reordered")


def workload_series(rows_by_flow: Mapping[Any, Sequence[Mapping[str, Any]]] | Sequence[Sequence[Mapping[str, Any]]]
                    ) -> list[dict[str, Any]]:
    """One series for a workload from its flows' series (rows matched by ``t_s``; the same t0 and interval).

    Counts, bytes and throughput are summed over flows (a many-to-one workload delivers the sum);
    each latency key is the *worst flow's* value in that interval (the maximum over flows that had
    arrivals, None when none had), like ``collect.aggregate`` takes the worst receiver: exact
    percentiles of the merged arrivals would need the raw traces, and the worst flow is what a
    fault makes visible.  Rows carry ``flows``: how many flows had a row at that time."""
    groups = rows_by_flow.values() if isinstance(rows_by_flow, Mapping) else rows_by_flow
    merged: dict[float, dict[str, Any]] = {}
    for rows in groups:
        for r in rows:
            m = merged.get(r["t_s"])
            if m is None:
                m = merged[r["t_s"]] = {"t_s": r["t_s"], "interval_s": r["interval_s"], "flows": 0,
                                        **{k: 0 for k in _SUMMED}, **{k: None for k in LATENCY_KEYS}}  # fmt: skip
            m["flows"] += 1
            for k in _SUMMED:
                v = r.get(k)
                if v is not None:
                    m[k] += v
            for k in LATENCY_KEYS:
                v = r.get(k)
                if v is not None and (m[k] is None or v > m[k]):
                    m[k] = v
    out = [merged[t] for t in sorted(merged)]
    for m in out:
        m["throughput_bps"] = round(m["throughput_bps"], 3)
    return out
