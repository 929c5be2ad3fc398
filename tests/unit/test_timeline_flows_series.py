"""Many flows' series at once (timeline.series.flows_series) are each flow's own series (flow_series), row for row."""

from __future__ import annotations

import numpy as np

from roughnet.timeline import series
from roughnet.timeline.traces import Rx, Tx

S = 1_000_000_000


def _flow(rng, t0: int) -> series.Flow:
    n = int(rng.integers(0, 150))
    seq = np.arange(n)
    sent = t0 - S // 2 + np.sort(rng.integers(0, 8 * S, n))  # some before t0, some after the end
    got = rng.random(n) < rng.uniform(0.0, 1.0)
    recv = sent[got] + rng.integers(50_000, 1_500_000_000, int(got.sum()))
    dup = rng.random(int(got.sum())) < 0.1
    order = rng.permutation(int(got.sum()) + int(dup.sum()))  # arrivals out of order, duplicates
    rx = Rx.from_arrays(np.concatenate([seq[got], seq[got][dup]])[order],
                        np.concatenate([sent[got], sent[got][dup]])[order],
                        np.concatenate([recv, recv[dup] + 7])[order])  # fmt: skip
    keep = max(0, n - int(rng.integers(0, 3)))  # the sender's trace lost its last messages
    tx = Tx.from_arrays(seq[:keep], sent[:keep])
    return series.prepare(tx, rx)


def test_flows_series_equals_flow_series_flow_by_flow() -> None:
    rng = np.random.default_rng(11)
    t0 = 100 * S
    flows = [_flow(rng, t0) for _ in range(60)]
    payloads = [int(p) for p in rng.integers(1, 2000, len(flows))]
    prefix = [{"workload": "w", "sender": f"s{k}", "receiver": "r"} for k in range(len(flows))]
    for end, interval in ((t0 + 6 * S + 123, S), (t0 + 5 * S, S // 3), (t0 + 2, S)):
        got = series.flows_series(flows, t0, end, interval, payloads, prefix=prefix)
        for k, f in enumerate(flows):
            ref = [{**prefix[k], **r} for r in series.flow_series(f, None, t0, end, interval, payloads[k])]
            assert got[k] == ref
            assert [list(r) for r in got[k]] == [list(r) for r in ref]  # the keys' order too
    assert any(r["lat_p50_us"] is None for rows in got for r in rows)
    assert series.flows_series(flows, t0, t0, S, payloads) == [[] for _ in flows]
    assert series.flows_series([], t0, t0 + S, S, []) == []


def test_member_is_isin_against_a_sorted_unique_array() -> None:
    from roughnet.timeline.series import _member

    rng = np.random.default_rng(5)
    for n, m in ((0, 5), (5, 0), (0, 0), (50, 30), (300, 200)):
        values = rng.integers(-5, 100, n)
        ref = np.unique(rng.integers(-5, 100, m))
        assert _member(values, ref).tolist() == np.isin(values, ref).tolist()
