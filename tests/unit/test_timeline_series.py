"""Trace files and per-interval series of a flow (roughnet.timeline.traces, .series) on synthetic traces."""

import time

import numpy as np
import pytest

from roughnet.timeline import series, traces
from roughnet.timeline.traces import Rx, Tx

S = 1_000_000_000
MS = 1_000_000
T0 = 5_000 * S  # a CLOCK_MONOTONIC-like origin


def stream(rate=100, seconds=10.0, latency_ms=5.0, start_s=0.0, drop=lambda t: False):
    """A steady stream from t0 + start_s: every message arrives latency_ms later unless drop(send time in s)."""
    n = int(rate * seconds)
    seq = np.arange(n)
    sent = T0 + int(start_s * S) + seq * (S // rate)
    keep = np.array([not drop((t - T0) / S) for t in sent], dtype=bool)
    recv = sent + int(latency_ms * MS)
    return Tx.from_arrays(seq, sent), Rx.from_arrays(seq[keep], sent[keep], recv[keep])


# ------------------------------------------------------------------ traces


def test_trace_files_round_trip_and_a_cut_record_is_dropped(tmp_path):
    tx, rx = stream(rate=10, seconds=1.0)
    (tmp_path / "a.tx").write_bytes(tx.to_bytes() + b"\x01" * 10)  # killed mid-write
    (tmp_path / "a.rx").write_bytes(rx.to_bytes() + b"\x02" * 31)
    got_tx, got_rx = traces.read_tx(tmp_path / "a.tx"), traces.read_rx(tmp_path / "a.rx")
    assert len(got_tx) == 10 and len(got_rx) == 10
    assert got_tx.seq.dtype == np.int64
    np.testing.assert_array_equal(got_tx.actual_ns, tx.actual_ns)
    np.testing.assert_array_equal(got_rx.recv_ns, rx.recv_ns)
    assert (tmp_path / "a.tx").stat().st_size == 24 * 10 + 10


def test_record_layout_is_little_endian_u64(tmp_path):
    rec = (7).to_bytes(8, "little") + (100).to_bytes(8, "little") + (103).to_bytes(8, "little") \
        + (109).to_bytes(8, "little")
    (tmp_path / "x.rx").write_bytes(rec)
    rx = traces.read_rx(tmp_path / "x.rx")
    assert (rx.seq[0], rx.intended_ns[0], rx.actual_ns[0], rx.recv_ns[0]) == (7, 100, 103, 109)


def test_missing_empty_and_unreadable_traces_are_empty(tmp_path):
    assert len(traces.read_tx(tmp_path / "nope.tx")) == 0
    assert len(traces.read_rx(tmp_path / "nope.rx")) == 0
    (tmp_path / "short.tx").write_bytes(b"\x00" * 23)
    assert len(traces.read_tx(tmp_path / "short.tx")) == 0
    (tmp_path / "dir.rx").mkdir()
    assert len(traces.read_rx(tmp_path / "dir.rx")) == 0


def test_from_arrays_checks_lengths():
    with pytest.raises(ValueError):
        Tx.from_arrays([1, 2], [10])
    assert list(Rx.from_arrays([1], [10], [20]).intended_ns) == [10]


# ------------------------------------------------------------------ one flow


def test_outage_shows_as_empty_intervals_and_loss_by_send_time():
    tx, rx = stream(latency_ms=15, drop=lambda t: 3.0 <= t < 5.0)
    rows = series.flow_series(tx, rx, T0, T0 + 10 * S, S, 256)
    assert [r["t_s"] for r in rows] == [float(i) for i in range(10)]
    assert tuple(rows[0]) == series.SERIES_KEYS
    assert [r["sent"] for r in rows] == [100] * 10
    assert [r["lost"] for r in rows] == [0, 0, 0, 100, 100, 0, 0, 0, 0, 0]
    # arrivals 15 ms after sending: interval 3 still gets the last one sent in interval 2
    assert [r["delivered"] for r in rows] == [99, 100, 100, 1, 0, 99, 100, 100, 100, 100]
    assert rows[4]["lat_p50_us"] is None and rows[4]["throughput_bps"] == 0.0
    assert rows[1]["lat_p50_us"] == rows[1]["lat_max_us"] == 15000.0
    assert rows[1]["bytes"] == 100 * 256 and rows[1]["throughput_bps"] == 100 * 256 * 8


def test_rows_add_up_to_the_summary_and_the_last_interval_is_short():
    tx, rx = stream(seconds=2.5, drop=lambda t: 1.0 <= t < 1.2)
    end = T0 + 2_500 * MS
    rows = series.flow_series(tx, rx, T0, end, S, 100)
    assert [r["interval_s"] for r in rows] == [1.0, 1.0, 0.5]
    assert rows[2]["throughput_bps"] == rows[2]["bytes"] * 8 / 0.5
    summ = series.flow_summary(tx, rx, T0, end, payload_bytes=100)
    assert summ["sent"] == sum(r["sent"] for r in rows) == 250
    assert summ["lost"] == sum(r["lost"] for r in rows) == 20
    assert summ["received"] == sum(r["delivered"] for r in rows) == 230
    assert summ["lat_p99_us"] == 5000.0
    assert summ["throughput_bps"] == pytest.approx(230 * 800 / (2.495 - 0.005))


def test_duplicates_reordering_and_nearest_rank_percentiles():
    # sent 0..9 at 0..9 ms; arrivals (seq, recv ms): 0,1,3,2 (reordered),2 (dup),4..9, 0 again (dup)
    seq = [0, 1, 3, 2, 2, 4, 5, 6, 7, 8, 9, 0]
    recv_ms = [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    sent_ns = np.arange(10) * MS
    tx = Tx.from_arrays(np.arange(10), T0 + sent_ns)
    rx = Rx.from_arrays(seq, T0 + sent_ns[seq], T0 + np.array(recv_ms) * MS)
    rows = series.flow_series(tx, rx, T0, T0 + 20 * MS, 20 * MS, 10)
    (r,) = rows
    assert (r["sent"], r["delivered"], r["lost"], r["duplicates"], r["reordered"]) == (10, 10, 0, 2, 1)
    # latencies of first arrivals (ms): 1,1,1,3,3,3,3,3,3,3 -> p50 rank 5, p90 rank 9, p99 rank 10
    assert (r["lat_p50_us"], r["lat_p90_us"], r["lat_p99_us"], r["lat_max_us"]) == (3000.0, 3000.0, 3000.0, 3000.0)
    lat = {k: v for k, v in series.flow_summary(tx, rx, T0, T0 + 20 * MS).items() if k.startswith("lat")}
    assert lat == {"lat_p50_us": 3000.0, "lat_p90_us": 3000.0, "lat_p99_us": 3000.0, "lat_max_us": 3000.0}


def test_percentiles_in_one_interval_pick_real_values():
    lat_ms = np.arange(1, 101)  # 100 arrivals, latencies 1..100 ms
    sent = T0 + np.arange(100) * MS
    tx = Tx.from_arrays(np.arange(100), sent)
    rx = Rx.from_arrays(np.arange(100), sent, sent + lat_ms * MS)
    (r,) = series.flow_series(tx, rx, T0, T0 + S, S, 1)
    assert (r["lat_p50_us"], r["lat_p90_us"], r["lat_p99_us"], r["lat_max_us"]) == (50e3, 90e3, 99e3, 100e3)


def test_in_flight_at_the_end_is_lost_and_unknown_sends_come_from_the_receiver():
    tx, rx = stream(rate=10, seconds=1.0, latency_ms=5)
    # the receiver never got seq 9 (in flight when the run ended); the sender's trace lost its last 2 records
    rx9 = Rx(rx.seq[:9], rx.intended_ns[:9], rx.actual_ns[:9], rx.recv_ns[:9])
    tx8 = Tx(tx.seq[:8], tx.intended_ns[:8], tx.actual_ns[:8])
    summ = series.flow_summary(tx8, rx9, T0, T0 + S)
    assert (summ["sent"], summ["received"], summ["lost"]) == (9, 9, 0)  # seq 8 known from the receiver
    summ = series.flow_summary(tx, rx9, T0, T0 + S)
    assert (summ["sent"], summ["received"], summ["lost"]) == (10, 9, 1)
    assert summ["throughput_bps"] is None


def test_empty_traces_and_degenerate_windows():
    rows = series.flow_series(Tx.empty(), Rx.empty(), T0, T0 + 3 * S, S, 100)
    assert len(rows) == 3 and all(r["sent"] == r["delivered"] == 0 and r["lat_p99_us"] is None for r in rows)
    assert series.flow_series(Tx.empty(), Rx.empty(), T0, T0, S, 100) == []
    summ = series.flow_summary(Tx.empty(), Rx.empty(), T0, T0 + S, payload_bytes=10)
    assert summ["sent"] == 0 and summ["throughput_bps"] == 0.0 and summ["lat_max_us"] is None
    with pytest.raises(ValueError):
        series.flow_series(Tx.empty(), Rx.empty(), T0, T0 + S, 0, 100)


def test_a_prepared_flow_gives_the_same_rows():
    tx, rx = stream(seconds=3, drop=lambda t: t > 2.5)
    flow = series.prepare(tx, rx)
    assert series.flow_series(flow, None, T0, T0 + 3 * S, S, 8) == series.flow_series(tx, rx, T0, T0 + 3 * S, S, 8)


# ------------------------------------------------------------------ workloads


def test_workload_series_sums_counts_and_takes_the_worst_latency():
    a = series.flow_series(*stream(seconds=3, latency_ms=5), T0, T0 + 3 * S, S, 100)
    b = series.flow_series(*stream(seconds=2, latency_ms=20, start_s=1.0), T0, T0 + 3 * S, S, 100)
    rows = series.workload_series({("w", "p1"): a, ("w", "p2"): b})
    assert [r["delivered"] for r in rows] == [100, 198, 200]  # b's arrivals at 1.020 .. 3.010 s
    assert [r["sent"] for r in rows] == [100, 200, 200]
    assert [r["lat_p99_us"] for r in rows] == [5000.0, 20000.0, 20000.0]
    assert rows[1]["throughput_bps"] == a[1]["throughput_bps"] + b[1]["throughput_bps"]
    assert rows[0]["flows"] == 2
    assert series.workload_series([a]) == [{**r, "flows": 1} for r in a]


# ------------------------------------------------------------------ speed


def test_a_million_messages():
    n = 1_000_000
    rng = np.random.default_rng(15)
    seq = np.arange(n)
    sent = T0 + seq * 20_000  # 50k msg/s for 20 s
    keep = rng.random(n) > 0.01
    recv = sent + rng.integers(100_000, 5_000_000, n)
    order = np.argsort(recv[keep], kind="stable")
    tx = Tx.from_arrays(seq, sent)
    rx = Rx.from_arrays(seq[keep][order], sent[keep][order], recv[keep][order])
    t = time.perf_counter()
    rows = series.flow_series(tx, rx, T0, T0 + 21 * S, S, 64)
    took_series = time.perf_counter() - t
    t = time.perf_counter()
    summ = series.flow_summary(tx, rx, T0, T0 + 21 * S, 64)
    took_summary = time.perf_counter() - t
    print(f"\n1e6 messages: flow_series {took_series:.3f} s, flow_summary {took_summary:.3f} s")
    assert sum(r["sent"] for r in rows) == n == summ["sent"]
    assert sum(r["lost"] for r in rows) == n - int(keep.sum()) == summ["lost"]
    assert summ["reordered"] > 0 and summ["duplicates"] == 0
