"""Every message's sender-receiver distance at its send time (mobility.distance) and the rows of the
`distance` table, from traces made here with known positions; the report's bins (report.fleet)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roughnet.mobility.distance import BIN_M, distance_rows, flow_distances, position_at
from roughnet.report.fleet import by_distance, pdr_png
from roughnet.timeline import series
from roughnet.timeline.traces import Rx, Tx

S = 1_000_000_000


@dataclass
class Link:
    index: int
    hosts: tuple[str, ...]
    positions: tuple


def test_position_is_linear_between_points_and_held_outside() -> None:
    pts = [{"at_ns": 1 * S, "x_m": 0.0, "y_m": 0.0}, {"at_ns": 3 * S, "x_m": 100.0, "y_m": 50.0}]
    got = position_at(pts, np.array([0, 1 * S, 2 * S, 3 * S, 9 * S]))
    assert got.tolist() == [[0, 0], [0, 0], [50, 25], [100, 50], [100, 50]]


def test_each_message_gets_the_distance_at_its_send_time_on_the_wires_timeline() -> None:
    # b drives away from a at 100 m/s from 0 m at the wire's time 0; the wire was ready 5 s before t0.
    ready, t0 = 10 * S, 15 * S
    link = Link(0, ("a", "b"), ([{"at_ns": 0, "x_m": 0.0, "y_m": 0.0}],
                                [{"at_ns": 0, "x_m": 0.0, "y_m": 0.0}, {"at_ns": 20 * S, "x_m": 2000.0, "y_m": 0.0}]))
    seq = np.arange(40)
    sent = t0 + seq * (S // 10)  # 10 msg/s for 4 s: at 500 m ... 890 m
    got = seq < 20  # the first 2 s arrive, 1 ms later
    tx = Tx.from_arrays(seq, sent)
    rx = Rx.from_arrays(seq[got], sent[got], sent[got] + 1_000_000)
    m = flow_distances("cam", "a", "b", series.prepare(tx, rx), link, ready)
    assert np.allclose(m.distance_m, 500 + 10 * seq)
    assert m.delivered.tolist() == got.tolist()
    assert (m.latency_ns[got] == 1_000_000).all() and (m.latency_ns[~got] == -1).all()
    rows = distance_rows([m], t0, S)
    # per second and 10 m bin: each message its own bin (10 m apart)
    assert len(rows) == 40 and all(r["d_bin_m"] == np.floor((500 + 10 * i) / BIN_M) * BIN_M
                                   for i, r in enumerate(rows))  # fmt: skip
    assert [r["t_s"] for r in rows[:11]] == [0.0] * 10 + [1.0]
    assert sum(r["delivered"] for r in rows) == 20 and sum(r["sent"] for r in rows) == 40
    assert rows[0]["lat_p99_us"] == 1000.0 and rows[-1]["lat_mean_us"] is None
    # the report's 50 m bins: 500-549 m all arrived, 700 m and beyond none
    agg = {a["d_m"]: a["ratio"] for a in by_distance(rows)}
    assert agg[500.0] == 1.0 and agg[700.0] == 0.0 and agg[850.0] == 0.0
    assert pdr_png([("udp", rows)])[:8] == b"\x89PNG\r\n\x1a\n"


def test_delivery_by_distance_bin_and_interval_pools_every_pair() -> None:
    """The report's view of a big fleet: per 50 m bin and interval, delivered / sent of all pairs' messages."""
    from roughnet.report.fleet import distance_time, distance_time_png

    def row(s, r, t, d, sent, delivered):
        return {"sender": s, "receiver": r, "t_s": t, "d_bin_m": d, "sent": sent, "delivered": delivered,
                "distance_m": d + 5}

    rows = [row("a", "b", 0.0, 10, 10, 10), row("a", "c", 0.0, 40, 10, 6),  # bin 0 m at 0 s: 16 of 20
            row("b", "c", 0.0, 120, 10, 1),  # bin 100 m at 0 s: 1 of 10
            row("a", "b", 1.0, 20, 10, 5),  # bin 0 m at 1 s: 5 of 10; bin 100 m at 1 s: nothing sent
            row("c", "a", 1.0, 60, 0, 0)]  # bin 50 m: sent nothing at all -> NaN
    bins, times, ratio = distance_time(rows)
    assert bins == [0.0, 50.0, 100.0] and times == [0.0, 1.0]
    assert ratio[0, 0] == 0.8 and ratio[0, 1] == 0.5 and ratio[2, 0] == 0.1
    assert np.isnan(ratio[1]).all() and np.isnan(ratio[2, 1])
    assert distance_time_png("udp", rows)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_fleet_section_adds_the_distance_view_when_it_shows_a_subset_of_pairs(tmp_path) -> None:
    from roughnet.report.fleet import MAX_PAIRS, section

    hosts = [f"c{i}" for i in range(9)]  # 72 pairs > MAX_PAIRS
    rows = [{"run_id": "r1", "sender": s, "receiver": r, "t_s": float(t), "d_bin_m": 10.0 * (i + j),
             "sent": 10, "delivered": 10 - t, "distance_m": 10.0 * (i + j) + 5, "lat_mean_us": 900.0 + i}
            for i, s in enumerate(hosts) for j, r in enumerate(hosts) if s != r for t in range(3)]
    assert len(hosts) * (len(hosts) - 1) > MAX_PAIRS
    html = section([{"run_id": "r1", "protocol": "udp", "index": 0}], rows, tmp_path, lambda png, cap: cap)
    assert (tmp_path / "fleet_bins_0.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"all {len(hosts) * (len(hosts) - 1)} pairs" in html
    small = [r for r in rows if r["sender"] in hosts[:3] and r["receiver"] in hosts[:3]]
    (tmp_path / "fleet_bins_0.png").unlink()
    section([{"run_id": "r1", "protocol": "udp", "index": 0}], small, tmp_path, lambda png, cap: cap)
    assert not (tmp_path / "fleet_bins_0.png").exists()  # every pair shown already


def test_group_sums_are_numpys_own_sums_of_each_slice() -> None:
    from roughnet.mobility.distance import group_sums

    rng = np.random.default_rng(7)
    sizes = np.concatenate([np.arange(1, 300), rng.integers(1, 40, size=500)])
    v = rng.random(int(sizes.sum())) * 1e4 - 10
    starts = np.cumsum(sizes) - sizes
    got = group_sums(v, starts, sizes)
    assert got.tolist() == [v[s:s + n].sum() for s, n in zip(starts.tolist(), sizes.tolist())]


def _random_flows(rng, hosts, ready, t0):
    """Flows between moving hosts with losses, duplicates, reordering and a missing sender trace tail."""
    link = Link(0, tuple(hosts), tuple(
        [{"at_ns": int(t), "x_m": float(x), "y_m": float(y)} for t, x, y in
         zip(np.sort(rng.integers(0, 30 * S, 4)), rng.uniform(-300, 300, 4), rng.uniform(-300, 300, 4))]
        for _ in hosts))  # fmt: skip
    todo = []
    for a in hosts:
        for b in hosts:
            if a == b or rng.random() < 0.2:
                continue
            n = int(rng.integers(0, 200))
            seq = np.arange(n)
            sent = t0 + np.sort(rng.integers(0, 12 * S, n))
            got = rng.random(n) < rng.uniform(0.2, 1.0)
            recv = sent[got] + rng.integers(100_000, 90_000_000, int(got.sum()))
            dup = rng.random(int(got.sum())) < 0.05
            rx = Rx.from_arrays(np.concatenate([seq[got], seq[got][dup]]),
                                np.concatenate([sent[got], sent[got][dup]]),
                                np.concatenate([recv, recv[dup] + 5]))  # fmt: skip
            keep = n - int(rng.integers(0, 3))  # the sender's trace lost its last messages
            tx = Tx.from_arrays(seq[:keep], sent[:keep])
            todo.append(("cam", a, b, series.prepare(tx, rx), link, ready))
    return todo


def test_columnar_distances_and_rows_equal_the_flow_by_flow_ones() -> None:
    from roughnet.mobility.distance import distance_rows_by_flow, flows_distances

    rng = np.random.default_rng(27)
    ready, t0 = 3 * S, 5 * S
    todo = _random_flows(rng, [f"h{i}" for i in range(7)], ready, t0)
    batched = flows_distances(todo)
    single = [flow_distances(*t) for t in todo]
    assert len(batched) == len(single) > 20
    for m, r in zip(batched, single):
        assert (m.sender, m.receiver) == (r.sender, r.receiver)
        assert m.distance_m.tolist() == r.distance_m.tolist()
        assert m.latency_ns.tolist() == r.latency_ns.tolist() and m.delivered.tolist() == r.delivered.tolist()
    for interval in (S, S // 4):
        rows, ref = distance_rows(batched, t0, interval), distance_rows_by_flow(single, t0, interval)
        assert len(rows) == len(ref) > 100
        assert rows == ref  # the same keys, order and floats (None where nothing arrived)
    assert any(r["lat_mean_us"] is None for r in ref) and any(r["delivered"] > 8 for r in ref)
    assert distance_rows([], t0, S) == []
