"""Faults from events and recovery per fault (roughnet.timeline.recovery) on synthetic traces."""

import numpy as np
import pytest

from roughnet.timeline import recovery as rec
from roughnet.timeline import series
from roughnet.timeline.traces import Rx, Tx

S = 1_000_000_000
MS = 1_000_000
T0 = 7_000 * S
RATE = 100  # msg/s
STEP = S // RATE


def at(s: float) -> int:
    return T0 + round(s * S)


def flow(seconds=30.0, latency_ms=15.0, start_s=0.0, fate=None):
    """A 100 msg/s stream; ``fate(seq, sent_s)`` -> list of receive times in s (default: sent + latency)."""
    seq = np.arange(int(seconds * RATE))
    sent = T0 + int(start_s * S) + seq * STEP
    r_seq, r_act, r_ns = [], [], []
    for q, t in zip(seq, sent, strict=True):
        sent_s = (t - T0) / S
        times = fate(int(q), sent_s) if fate else None
        for r in ([sent_s + latency_ms / 1e3] if times is None else times):
            r_seq.append(q)
            r_act.append(t)
            r_ns.append(at(r))
    order = np.argsort(r_ns, kind="stable")
    rx = Rx.from_arrays(np.array(r_seq)[order], np.array(r_act)[order], np.array(r_ns)[order])
    return Tx.from_arrays(seq, sent), rx


def test_link_down_udp_like_outage_loss_and_a_broken_promise():
    tx, rx = flow(fate=lambda q, s: [] if 10.0 <= s < 15.0 else None)
    r = rec.recovery(tx, rx, T0, at(10), at(15), promise={"name": "no loss", "no_loss": True}, interval_ns=S)
    assert tuple(r) == rec.RECOVERY_KEYS
    assert (r["fault_start_s"], r["fault_end_s"]) == (10.0, 15.0)
    # the message sent at 9.99 was past the link: it arrives at 10.005, during the fault
    assert r["last_before_s"] == 10.005 and r["first_after_s"] == 15.015
    assert r["outage_s"] == pytest.approx(5.01)
    assert r["pre_rate_msgs_s"] == 100.0
    assert r["recover_s"] == 0.0  # the first intervals after the link came back were at full rate
    assert (r["lost"], r["duplicated"], r["reordered"], r["backlog"]) == (500, 0, 0, 0)
    assert r["promise"] == "no loss" and r["verdict"] == "broken"
    assert r["evidence"].startswith("500 lost (seq 1000 sent 10.000 s, 1001 sent 10.010 s, 1002 sent 10.020 s, …)")
    assert "0 duplicated" in r["evidence"] and r["evidence"].endswith("no loss: broken")


def broker_restart(q, s):
    """Broker restarting from 10 s, ready at 12 s; the client reconnects at 13 s and sends what it held
    (sent 10.00 .. 12.99) in a burst over 13.000 .. 13.003 s; seq 999 (sent 9.99, received 10.005) is
    delivered again at 13.0 (its ack was lost with the broker)."""
    if q == 999:
        return [10.005, 13.0]
    if 10.0 <= s < 13.0:
        return [13.0 + (s - 10.0) / 1000]
    return None


def test_broker_restart_with_backlog_duplicate_and_recovery_time():
    tx, rx = flow(fate=broker_restart)
    r = rec.recovery(tx, rx, T0, at(10), at(12), promise={"name": "QoS 1", "no_loss": True, "no_duplicates": False})
    assert r["last_before_s"] == 10.005 and r["first_after_s"] == 13.0
    assert r["outage_s"] == pytest.approx(2.995)
    assert r["recover_s"] == 1.0  # [12, 13) empty, [13, 14) and [14, 15) at or above 90 msg/s
    assert (r["lost"], r["duplicated"]) == (0, 1)
    assert r["backlog"] == 200  # sent 10.00 .. 11.99, arrived after the broker was ready
    assert r["reordered"] == 0
    assert r["verdict"] == "kept"
    assert "1 duplicated (seq 999 sent 9.990 s)" in r["evidence"]
    strict = rec.recovery(tx, rx, T0, at(10), at(12), promise={"name": "QoS 2", "no_duplicates": True})
    assert strict["verdict"] == "broken"


def test_messages_in_the_broker_when_it_died_count_as_lost():
    # seqs 995..999 (sent 9.95 .. 9.99 s) were in the broker at the kill and never delivered
    tx, rx = flow(latency_ms=100, fate=lambda q, s: [] if 995 <= q <= 999 or 10.0 <= s < 10.5 else None)
    r = rec.recovery(tx, rx, T0, at(10), at(10.5), promise={"name": "p", "no_loss": True})
    assert r["lost"] == 55 and r["verdict"] == "broken"
    assert "seq 995 sent 9.950 s" in r["evidence"]


def test_a_fault_that_changed_nothing_recovers_at_once():
    tx, rx = flow()
    r = rec.recovery(tx, rx, T0, at(10), at(15), promise={"name": "p", "no_loss": True, "no_duplicates": True})
    assert r["recover_s"] == 0.0 and r["lost"] == 0 and r["verdict"] == "kept"
    assert r["outage_s"] == pytest.approx(0.01)  # the ordinary gap between two messages
    assert r["evidence"] == "0 lost; 0 duplicated; p: kept"
    r = rec.recovery(tx, rx, T0, at(10), at(15))
    assert r["promise"] is None and r["verdict"] is None and r["evidence"] is None


def test_half_rate_after_the_fault_never_recovers():
    tx, rx = flow(fate=lambda q, s: [] if s >= 10.0 and (s >= 15.0 and q % 2 or s < 15.0) else None)
    r = rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S)
    assert r["recover_s"] is None
    assert r["first_after_s"] == 15.015
    assert r["lost"] == 500 + 750  # everything during the fault, half of what followed, to the run's end
    assert r["evidence"].startswith("1250 lost")


def test_recovery_needs_two_good_intervals_in_a_row():
    # after the fault: [15,16) full, [16,17) empty, then full again from 17 s
    tx, rx = flow(fate=lambda q, s: [] if 10.0 <= s < 15.0 or 16.0 <= s < 17.0 else None)
    r = rec.recovery(tx, rx, T0, at(10), at(15))
    assert r["recover_s"] == 2.0 - 0.0  # [17, 18) and [18, 19) are the first pair (the 16 s gap shifts by 15 ms)
    assert r["lost"] == 600


def test_a_sender_that_stops_soon_after_the_fault_is_judged_on_the_intervals_it_had():
    # the stream ends 1.5 s after the link came back: one whole interval, at full rate, is the recovery
    tx, rx = flow(seconds=16.5, fate=lambda q, s: [] if 10.0 <= s < 15.0 else None)
    r = rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S)
    assert r["recover_s"] == 0.0 and r["lost"] == 500
    # half rate in that one interval: not recovered
    tx, rx = flow(seconds=16.5, fate=lambda q, s: [] if 10.0 <= s < 15.0 or (s >= 15.0 and q % 2) else None)
    assert rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S)["recover_s"] is None
    # ended before a whole interval after the fault: nothing to judge
    tx, rx = flow(seconds=15.5, fate=lambda q, s: [] if 10.0 <= s < 15.0 else None)
    assert rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S)["recover_s"] is None


def test_a_backlog_before_the_fault_does_not_raise_the_rate_to_recover_to():
    # an earlier outage 1-4.5 s whose held messages all arrive at 4.5 s (200 of them sent before the
    # 5 s window 3-8 s that measures the rate), then the fault at 8-9 s
    def fate(q, s):
        if 1.0 <= s < 4.5:
            return [4.5]
        return [] if 8.0 <= s < 9.0 else None
    tx, rx = flow(seconds=20, fate=fate)
    r = rec.recovery(tx, rx, T0, at(8), at(9), interval_ns=S)
    assert r["pre_rate_msgs_s"] == 100.0  # not (500 + 200) / 5 s = 140
    assert r["recover_s"] == 0.0


def test_recovery_is_judged_before_the_next_fault():
    # back at full rate for 1.5 s after the first fault, then the next one begins at 16.5 s
    tx, rx = flow(fate=lambda q, s: [] if 10.0 <= s < 15.0 or 16.5 <= s < 20.0 else None)
    # without the horizon [16, 17) is half empty and the stream is back only after the next fault
    assert rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S)["recover_s"] == 5.0
    r = rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S, horizon_ns=at(16.5))
    assert r["recover_s"] == 0.0


def test_deliveries_just_after_the_fault_began_do_not_end_the_outage():
    # the isolation took 12 ms to take effect: messages sent at 10.000 and 10.010 still arrive (10.005,
    # 10.011), then nothing until the backlog at 17.0 (broker-outage's Zenoh run: an outage of 10 ms before)
    def fate(q, s):
        if 10.0 <= s < 10.012:
            return [s + 0.001]
        return [17.0] if 10.012 <= s < 17.0 else None
    tx, rx = flow(seconds=25, fate=fate)
    r = rec.recovery(tx, rx, T0, at(10), at(15), interval_ns=S)
    assert r["last_before_s"] == 10.011 and r["first_after_s"] == 17.0
    assert r["outage_s"] == pytest.approx(6.989)


def test_reordering_during_the_fault():
    # around 12 s, seqs 1200 and 1201 swap; the fault is a link "set" that changed nothing else
    def fate(q, s):
        return {1200: [12.03], 1201: [12.02]}.get(q)

    tx, rx = flow(fate=fate)
    assert rec.recovery(tx, rx, T0, at(10), at(15))["reordered"] == 1
    assert rec.recovery(tx, rx, T0, at(20), at(25))["reordered"] == 0


def test_a_flow_that_started_during_the_fault_has_nothing_to_recover_to():
    tx, rx = flow(seconds=10, start_s=12.0)
    r = rec.recovery(tx, rx, T0, at(10), at(15), promise={"name": "p", "no_loss": True})
    assert r["pre_rate_msgs_s"] is None and r["recover_s"] is None
    assert r["last_before_s"] is None and r["outage_s"] is None and r["first_after_s"] == 12.015
    assert r["lost"] == 0 and r["verdict"] == "kept"


def test_a_flow_that_ended_before_the_fault_is_not_judged():
    tx, rx = flow(seconds=5)
    r = rec.recovery(tx, rx, T0, at(10), at(15), promise={"name": "p", "no_loss": True})
    assert r["first_after_s"] is None and r["outage_s"] is None and r["last_before_s"] == 5.005
    assert r["verdict"] is None and r["lost"] == 0


def test_empty_traces_and_a_prepared_flow():
    r = rec.recovery(Tx.empty(), Rx.empty(), T0, at(1), at(2))
    assert r["lost"] == 0 and r["recover_s"] is None and r["first_after_s"] is None
    tx, rx = flow(fate=broker_restart)
    f = series.prepare(tx, rx)
    assert rec.recovery(f, None, T0, at(10), at(12)) == rec.recovery(tx, rx, T0, at(10), at(12))


# ------------------------------------------------------------------ fault windows


def ev(index, kind, action, started, took=None, ends=None, error=None, target="t"):
    return {"index": index, "at_s": started, "kind": kind, "target": target, "action": action, "detail": None,
            "started_s": started, "took_effect_s": started + 0.001 if took is None else took, "ends": ends,
            "error": error}  # fmt: skip


def test_fault_windows_pair_events():
    events = [
        ev(0, "service", "kill", 10.0, target="mosquitto"),
        ev(1, "service", "start", 15.0, took=16.5, ends=0, target="mosquitto"),
        ev(2, "host", "isolate", 30.0, target="host sub"),
        ev(3, "link", "set", 20.0, target="link 0"),
        ev(4, "service", "restart", 40.0, took=43.0),
        ev(5, "link", "down", 44.0),
        ev(6, "link", "up", 45.0, ends=5, error="ConnectionRefusedError: wire gone"),
        ev(7, "agent", "kill", 46.0),
        ev(8, "service", "pause", 47.0, error="boom"),
        ev(9, "link", "set", 22.0, ends=3, target="link 0"),
    ]
    got = {f["event"]: (f["start_s"], f["end_s"], f["ended_by"]) for f in rec.fault_windows(events, 50.0)}
    assert got == {
        0: (10.0, 16.5, 1),  # from the kill to the broker ready again
        2: (30.0, 50.0, None),  # never rejoined: to the run's end
        3: (20.0, 22.001, 9),
        4: (40.0, 43.0, None),  # a restart is its own end
        5: (44.0, 50.0, None),  # the "up" failed: still down
        7: (46.0, 50.0, None),
    }
    faults = rec.fault_windows(events, 50.0)
    assert [f["event"] for f in faults] == [0, 3, 2, 4, 5, 7]  # by start
    assert faults[0]["target"] == "mosquitto" and faults[0]["action"] == "kill"
    assert rec.fault_windows(events)[1]["end_s"] == 22.001
    assert rec.fault_windows(events)[2]["end_s"] is None


def test_events_never_carried_out_make_no_fault():
    cancelled = {**ev(0, "link", "down", 5.0), "started_s": None, "took_effect_s": None,
                 "error": "not carried out: the run had ended"}  # fmt: skip
    assert rec.fault_windows([cancelled, ev(1, "link", "up", 6.0, ends=0)], 10.0) == []
    assert rec.fault_windows([], 10.0) == []
