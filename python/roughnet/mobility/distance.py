"""Every message's sender-receiver distance at its send time, and delivery by distance (issue 16).

A run whose hosts have positions (``[[host]] position``, ``[[host.path]]``, ``path_trace``, ``vehicle``) on a
link whose loss follows distance hands the wire one position trace per port (``Link.positions``: points
``{at_ns, x_m, y_m}`` after the wire's time 0, linear between points, held outside them; wire-core
``positions.rs``). The wire's time 0 is when it starts forwarding, just after its ``ready`` line; the runner
stamps that line with CLOCK_MONOTONIC when its reader thread reads it (``links.wire``: the link's counters'
``ready_mono_ns``): late by that thread's wake-up (not measured; at 30 m/s of relative speed each 100 ms of
lateness is 3 m of distance). An agent's trace gives each message's actual send time
on the same clock. So a message sent at ``actual_ns`` was sent at ``actual_ns - ready_mono_ns`` on the
wire's timeline, and the distance between the two hosts then is the distance the wire drew its loss from
(the wire draws at the frame's entry into the segment, a few microseconds later).

This module owns

- ``message_distances``: per flow, every message sent with its distance, whether it arrived and its latency;
- ``distance_rows``: the record's ``distance`` list (results table ``distance``, docs/results-format.md): per
  flow, send interval and ``BIN_M`` distance bin, messages sent and delivered and the latency of those;
- ``write_messages``: the per-message values as ``distance-<workload>.parquet`` in the run's folder.

Flows whose two hosts share no link with positions, and runs whose wire gave no ready stamp, get no rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["BIN_M", "MessageDistances", "distance_rows", "distance_rows_by_flow", "flows_distances", "group_sums",
           "message_distances", "position_at", "record_distances", "write_messages"]

#: Width of a distance bin of the ``distance`` table (m).
BIN_M = 10.0
#: Latency percentiles of a row (key, q in thousandths; nearest rank, as the time series).
_PERCENTILES = (("lat_p50_us", 500), ("lat_p90_us", 900), ("lat_p99_us", 990))


def position_at(points: tuple[dict[str, Any], ...] | list[dict[str, Any]], rel_ns: np.ndarray) -> np.ndarray:
    """(n, 2) positions at ``rel_ns`` after the wire's time 0: linear between points, held before the first and
    after the last (as wire-core ``position_at``)."""
    at = np.array([p["at_ns"] for p in points], dtype=np.float64)
    x = np.array([p["x_m"] for p in points], dtype=np.float64)
    y = np.array([p["y_m"] for p in points], dtype=np.float64)
    t = np.asarray(rel_ns, dtype=np.float64)
    return np.stack([np.interp(t, at, x), np.interp(t, at, y)], axis=-1)


def pair_link(links, a: str, b: str):
    """The first link with positions that has both hosts, or None."""
    for link in links:
        if link.positions and a in link.hosts and b in link.hosts:
            return link
    return None


def ready_of(link_counters: dict[Any, Any], index: int) -> int | None:
    c = link_counters.get(index, link_counters.get(str(index))) or {}
    v = c.get("ready_mono_ns") if isinstance(c, dict) else None
    return int(v) if isinstance(v, (int, float)) else None


@dataclass(frozen=True)
class MessageDistances:
    """One flow's messages, one entry per message known sent, in send order."""

    workload: str
    sender: str
    receiver: str
    seq: np.ndarray
    sent_ns: np.ndarray  # CLOCK_MONOTONIC
    distance_m: np.ndarray
    delivered: np.ndarray  # bool
    latency_ns: np.ndarray  # first arrival - actual send time; -1 when not delivered


def flow_distances(workload: str, sender: str, receiver: str, flow, link, ready_ns: int) -> MessageDistances:
    """The distances of one flow's messages (``flow``: ``timeline.series.prepare``'s) on ``link``."""
    i, j = link.hosts.index(sender), link.hosts.index(receiver)
    rel = flow.sent_ns - ready_ns
    d = np.hypot(*(position_at(link.positions[i], rel) - position_at(link.positions[j], rel)).T)
    return _with_latency(workload, sender, receiver, flow, d)


def message_distances(run, tl, link_counters: dict[Any, Any], prepared: dict[tuple[str, str, str], Any] | None = None
                      ) -> list[MessageDistances]:
    """Every traced flow of a timeline run (``run.timeline.Timeline``) whose hosts share a link with positions.

    ``prepared``: (workload, sender, receiver) -> ``timeline.series.prepare``'s flow, for the flows the time
    series already read (``run.timeline.analyse``); the others are read here. The positions are interpolated
    once per host for all its flows' messages (``flows_distances``)."""
    from ..timeline import series as series_mod
    from ..timeline import traces

    todo = []
    for f in tl.flows:
        if not f.traced or "trace_path" not in f.specs[-1].config:
            continue
        tx = None
        for a in f.receivers:
            link = pair_link(run.links, f.sender, a.spec.host)
            if link is None:
                continue
            ready = ready_of(link_counters, link.index)
            if ready is None:
                log.warning("link %d has positions but no ready stamp: no distances for %s -> %s", link.index,
                            f.sender, a.spec.host)
                continue
            flow = (prepared or {}).get((f.name, f.sender, a.spec.host))
            if flow is None:
                if tx is None:
                    tx = traces.read_tx(Path(f.specs[-1].config["trace_path"]))
                rx = traces.read_rx(Path(a.spec.config["trace_path"]))
                flow = series_mod.prepare(tx, rx)
            todo.append((f.name, f.sender, a.spec.host, flow, link, ready))
    return flows_distances(todo)


def flows_distances(todo: list[tuple[str, str, str, Any, Any, int]]) -> list[MessageDistances]:
    """``flow_distances`` of many flows ((workload, sender, receiver, flow, link, ready_ns) each) at once: every
    host's positions interpolated once, at the send times of all the messages it sent or was sent (the same
    values, element by element, as one flow at a time)."""
    if not todo:
        return []
    sizes = np.array([t[3].sent_ns.size for t in todo], dtype=np.int64)
    rel = np.concatenate([t[3].sent_ns - t[5] for t in todo]) if sizes.sum() else np.zeros(0, dtype=np.int64)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    links = {t[4].index: t[4] for t in todo}
    xy = {"s": np.empty((rel.size, 2)), "r": np.empty((rel.size, 2))}
    for role, col in (("s", 1), ("r", 2)):
        keys = [(t[4].index, t[4].hosts.index(t[col])) for t in todo]
        by_key: dict[tuple[int, int], list[int]] = {}
        for n, key in enumerate(keys):
            by_key.setdefault(key, []).append(n)
        for (li, hi), ns in by_key.items():
            idx = np.concatenate([np.arange(starts[n], ends[n]) for n in ns])
            xy[role][idx] = position_at(links[li].positions[hi], rel[idx])
    dist = np.hypot(*(xy["s"] - xy["r"]).T)
    out = []
    for n, (workload, sender, receiver, flow, _link, _ready) in enumerate(todo):
        out.append(_with_latency(workload, sender, receiver, flow, dist[starts[n]:ends[n]]))
    return out


def _with_latency(workload: str, sender: str, receiver: str, flow, d: np.ndarray) -> MessageDistances:
    lat = np.full(flow.sent_seq.size, -1, dtype=np.int64)
    first = flow.first
    got_seq, got_lat = flow.recv_seq[first], flow.lat_ns[first]
    if got_seq.size:
        order = np.argsort(got_seq)
        got_seq, got_lat = got_seq[order], got_lat[order]
        idx = np.clip(np.searchsorted(got_seq, flow.sent_seq), 0, got_seq.size - 1)
        hit = got_seq[idx] == flow.sent_seq
        lat[hit] = got_lat[idx[hit]]
    return MessageDistances(workload, sender, receiver, flow.sent_seq, flow.sent_ns, d, ~flow.sent_lost, lat)


def _nearest_rank(sorted_us: np.ndarray, permille: int) -> float:
    k = max(0, (sorted_us.size * permille + 999) // 1000 - 1)
    return float(sorted_us[k])


def group_sums(v: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per group (``counts[g]`` values of float64 ``v`` from ``starts[g]``): the sum exactly as numpy's
    ``v[start:start + count].sum()`` makes it (its pairwise summation: a plain loop below 8 values, eight
    running sums up to 128, halves above), for every group at once. ``np.add.reduceat`` adds in another order
    (its last bits differ: 1.2 % of a 100-car run's latency means rounded to 3 decimals differed)."""
    out = np.zeros(starts.size)
    small = np.flatnonzero(counts < 8)
    for j in range(7):
        t = small[counts[small] > j]
        out[t] += v[starts[t] + j]
    mid = np.flatnonzero((counts >= 8) & (counts <= 128))
    if mid.size:
        s, c = starts[mid], counts[mid]
        lane = np.arange(8)
        r = v[s[:, None] + lane]
        nblk = c - c % 8
        for i in range(8, 128, 8):
            t = np.flatnonzero(i < nblk)
            if not t.size:
                break
            r[t] += v[s[t, None] + i + lane]
        res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
        for j in range(7):
            t = np.flatnonzero(nblk + j < c)
            res[t] += v[s[t] + nblk[t] + j]
        out[mid] = res
    for g in np.flatnonzero(counts > 128):  # (numpy recurses on halves there: the slice's own sum)
        out[g] = v[starts[g]:starts[g] + counts[g]].sum()
    return out


def distance_rows(messages: list[MessageDistances], t0_ns: int, interval_ns: int) -> list[dict[str, Any]]:
    """The record's ``distance`` rows: per flow, send interval (from t0) and ``BIN_M`` distance bin.

    Columnar: every flow's messages in one set of arrays, grouped by (flow, interval, bin) with one stable sort;
    sums by ``group_sums`` over each group's values in the order one flow at a time took them (its messages'
    order for the distance, ascending latency for the latency), so the floats are those of
    ``distance_rows_by_flow``."""
    ms = [m for m in messages if m.seq.size]
    if not ms:
        return []
    sizes = np.array([m.seq.size for m in ms], dtype=np.int64)
    fid = np.repeat(np.arange(len(ms)), sizes)
    sent_ns = np.concatenate([m.sent_ns for m in ms])
    dist = np.concatenate([m.distance_m for m in ms])
    delivered = np.concatenate([m.delivered for m in ms])
    lat_ns = np.concatenate([m.latency_ns for m in ms])
    k = np.floor_divide(sent_ns - t0_ns, interval_ns)
    b = np.floor(dist / BIN_M).astype(np.int64)
    order = np.lexsort((b, k, fid))  # stable: a group's messages in their flow's order
    fs, ks, bs = fid[order], k[order], b[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (fs[1:] != fs[:-1]) | (ks[1:] != ks[:-1]) | (bs[1:] != bs[:-1])
    starts = np.flatnonzero(new)
    count = np.diff(np.append(starts, order.size))
    groups = starts.size
    d_mean = group_sums(dist[order], starts, count) / count
    got = np.add.reduceat(delivered[order].astype(np.int64), starts)
    gid = np.empty(order.size, dtype=np.int64)
    gid[order] = np.cumsum(new) - 1
    ok = delivered & (lat_ns >= 0)
    lg, lv = gid[ok], lat_ns[ok]
    lorder = np.lexsort((lv, lg))
    lat_us = lv[lorder] / 1e3
    n_lat = np.bincount(lg, minlength=groups)
    l_start = np.cumsum(n_lat) - n_lat
    has = n_lat > 0
    lat_mean = np.full(groups, np.nan)
    if lat_us.size:
        lat_mean[has] = group_sums(lat_us, l_start[has], n_lat[has]) / n_lat[has]
    pcts = {}
    for key, permille in _PERCENTILES:
        v = np.full(groups, np.nan)
        v[has] = lat_us[l_start[has] + np.maximum(0, (n_lat[has] * permille + 999) // 1000 - 1)]
        pcts[key] = v.tolist()
    lat_max = np.full(groups, np.nan)
    lat_max[has] = lat_us[l_start[has] + n_lat[has] - 1]
    interval_s = interval_ns / 1e9

    def r3(v: float) -> float | None:
        return None if v != v else round(v, 3)

    rows: list[dict[str, Any]] = []
    cols = zip(fs[starts].tolist(), ks[starts].tolist(), bs[starts].tolist(), d_mean.tolist(), count.tolist(),
               got.tolist(), lat_mean.tolist(), *(pcts[key] for key, _ in _PERCENTILES), lat_max.tolist())
    for f, kk, bb, dm, sent, dlv, mean, p50, p90, p99, mx in cols:
        m = ms[f]
        rows.append({"workload": m.workload, "sender": m.sender, "receiver": m.receiver,
                     "t_s": round(kk * interval_ns / 1e9, 6), "interval_s": interval_s, "d_bin_m": float(bb) * BIN_M,
                     "distance_m": round(dm, 3), "sent": sent, "delivered": dlv, "lat_mean_us": r3(mean),
                     "lat_p50_us": r3(p50), "lat_p90_us": r3(p90), "lat_p99_us": r3(p99),
                     "lat_max_us": r3(mx)})  # fmt: skip
    rows.sort(key=lambda r: (r["workload"], r["sender"], r["receiver"], r["t_s"], r["d_bin_m"]))
    return rows


def distance_rows_by_flow(messages: list[MessageDistances], t0_ns: int, interval_ns: int) -> list[dict[str, Any]]:
    """``distance_rows`` one flow and one group at a time (a dict per group as it is made): the reference the
    columnar version is tested against."""
    rows: list[dict[str, Any]] = []
    for m in messages:
        if not m.seq.size:
            continue
        k = np.floor_divide(m.sent_ns - t0_ns, interval_ns)
        b = np.floor(m.distance_m / BIN_M).astype(np.int64)
        keys = np.stack([k, b], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g, (kk, bb) in enumerate(uniq):
            sel = inverse == g
            got = m.delivered[sel]
            lat_us = np.sort(m.latency_ns[sel][got & (m.latency_ns[sel] >= 0)]) / 1e3
            row = {"workload": m.workload, "sender": m.sender, "receiver": m.receiver,
                   "t_s": round(int(kk) * interval_ns / 1e9, 6), "interval_s": interval_ns / 1e9,
                   "d_bin_m": float(bb) * BIN_M, "distance_m": round(float(m.distance_m[sel].mean()), 3),
                   "sent": int(sel.sum()), "delivered": int(got.sum()),
                   "lat_mean_us": round(float(lat_us.mean()), 3) if lat_us.size else None}  # fmt: skip
            for key, permille in _PERCENTILES:
                row[key] = round(_nearest_rank(lat_us, permille), 3) if lat_us.size else None
            row["lat_max_us"] = round(float(lat_us[-1]), 3) if lat_us.size else None
            rows.append(row)
    rows.sort(key=lambda r: (r["workload"], r["sender"], r["receiver"], r["t_s"], r["d_bin_m"]))
    return rows


def write_messages(messages: list[MessageDistances], t0_ns: int, folder: Path) -> list[Path]:
    """``distance-<workload>.parquet`` per workload in ``folder``: one row per message (sender, receiver, seq,
    sent_s after t0, distance_m, latency_us or null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for w in sorted({m.workload for m in messages}):
        ms = [m for m in messages if m.workload == w]
        lat = np.concatenate([m.latency_ns for m in ms]) / 1e3
        sizes = [m.seq.size for m in ms]
        table = pa.table({
            "sender": pa.array(np.repeat(np.array([m.sender for m in ms], dtype=object), sizes), pa.string()),
            "receiver": pa.array(np.repeat(np.array([m.receiver for m in ms], dtype=object), sizes), pa.string()),
            "seq": pa.array(np.concatenate([m.seq for m in ms]), pa.int64()),
            "sent_s": pa.array(np.concatenate([(m.sent_ns - t0_ns) / 1e9 for m in ms]), pa.float64()),
            "distance_m": pa.array(np.concatenate([m.distance_m for m in ms]), pa.float64()),
            "latency_us": pa.array(lat, pa.float64(), mask=lat < 0),
        })  # fmt: skip
        path = folder / f"distance-{w}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def record_distances(record: dict[str, Any], run, tl, link_counters: dict[Any, Any],
                     prepared: dict[tuple[str, str, str], Any] | None = None) -> None:
    """The record's ``distance`` rows and the per-message parquet files, for a timeline run whose links have
    positions (``run.timeline.fill_record``); nothing for other runs. ``prepared``: as ``message_distances``."""
    if not any(link.positions for link in run.links):
        return
    messages = message_distances(run, tl, link_counters, prepared)
    record["distance"] = distance_rows(messages, tl.t0_ns, run.series_interval_ns)
    for link in run.links:  # where t0 is on each wire's timeline (the report's fleet map places hosts with it)
        ready = ready_of(link_counters, link.index)
        stored = (record.get("link_counters") or {}).get(str(link.index))
        if link.positions and ready is not None and isinstance(stored, dict):
            stored["t0_after_ready_s"] = round((tl.t0_ns - ready) / 1e9, 6)
    traced = [f for f in tl.flows if "trace_path" in f.specs[-1].config]
    if messages and traced:
        write_messages(messages, tl.t0_ns, Path(traced[0].specs[-1].config["trace_path"]).parent)
