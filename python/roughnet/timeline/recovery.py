"""Faults from a run's events, and what each fault did to a flow: outage, recovery, loss, promise kept.

``fault_windows`` pairs the run's event records (docs/timelines.md, ``events``) into faults: an
*interrupting* action (``INTERRUPTING``: link down or set, host isolate, service kill, stop, pause or
restart, agent kill; not an event that itself ``ends`` another, such as a ``set`` undoing an earlier
one) lasts until the later event whose ``ends`` names it has taken effect, or the run's end; a
restart is its own end (the fault lasts from when it began until the service was ready again).  A
fault starts when its event was *begun* (``started_s``: a broker told to stop may close its
connections at once; kill, down and isolate take effect within milliseconds of it) and ends when
the ending event had *taken effect* (``took_effect_s``: for a start, the service ready again).  An
event that failed (``error``) or never ran makes no fault; a failed ending event ends nothing (the
fault lasts to the run's end).

``recovery`` measures one fault on one flow (definitions of sent, arrivals, first arrivals,
duplicates, reordered and lost as in ``series``), every time in seconds after t0:

- ``last_before_s``, ``first_after_s``: the ends of the longest silence the application saw that
  overlaps the fault: of the gaps between consecutive arrivals (any arrival, duplicates included)
  that begin before the fault's end and end after its start, the longest.  So messages still in
  flight when the fault began, or sent in the moment before it took effect (an nftables table
  takes ~10 ms to load), and delivered during it are the beginning of the silence, not its end.
  ``outage_s`` = first_after - last_before: None when nothing arrived after the fault's start
  (``last_before_s`` is then the flow's last arrival) or nothing before it.
- ``pre_rate_msgs_s``: first arrivals per second over the ``pre_window_ns`` (5 s) before the fault,
  or from the flow's first send when that is later, at most the messages sent in that window per
  second (a backlog delivered there after an earlier fault would set a rate the sender never had).  None when that window is empty or delivered
  nothing (a flow that started during the fault): then there is nothing to recover to.
- ``recover_s``: the fault's end is followed by intervals of ``interval_ns`` (aligned to the
  fault's end); recovery is the start of the first interval from which ``hold`` (2) consecutive
  intervals (fewer when the sender stopped, or ``horizon_ns`` (the next fault) came, sooner: the whole
  intervals it had, at least one) each
  delivered at least ``threshold`` (90 %) of the pre-fault rate, in seconds after
  the fault's end: 0 when the rate never dropped (or came back at once), None when it never came
  back while the sender was still sending (only intervals ending by the flow's last send count,
  since after it the rate falls by itself).
- the fault's *window*: from the first message still in flight when the fault began (sent after
  the latest-sent message that had arrived before it; the fault's start when it is earlier) to the
  end of the intervals that confirmed recovery, or the run's end when it did not recover.
  ``lost``: messages sent in the window never received; ``duplicated``, ``reordered``: arrivals
  received from the fault's start to the window's end (a redelivery of a message received before
  the fault counts: that is where QoS 1 duplicates come from).
- ``backlog``: messages sent before the fault's end whose first arrival came after it.
- ``promise`` (the name of what the protocol promises with these settings, or None), ``verdict``
  (``broken`` when a promised ``no_loss`` or ``no_duplicates`` failed in the window, ``kept``
  otherwise; None without a promise or when the flow sent and received nothing in the window) and
  ``evidence`` (counts and the first few seqs lost and duplicated with their send times; None
  without a promise and with nothing lost or duplicated).

Overlapping faults are measured each on its own (a second fault inside the first one's window
counts in both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from roughnet.timeline.series import Flow, prepare
from roughnet.timeline.traces import Rx, Tx

__all__ = ["EVIDENCE_SEQS", "HOLD_INTERVALS", "INTERRUPTING", "PRE_WINDOW_NS", "RECOVERY_KEYS", "THRESHOLD",
           "fault_windows", "recovery"]  # fmt: skip

#: (kind, action) pairs that begin a fault.
INTERRUPTING: frozenset[tuple[str, str]] = frozenset({
    ("link", "down"), ("link", "set"), ("host", "isolate"), ("service", "kill"), ("service", "stop"),
    ("service", "pause"), ("service", "restart"), ("agent", "kill"),
})  # fmt: skip
#: The pre-fault rate is measured over at most this long before the fault.
PRE_WINDOW_NS = 5_000_000_000
#: Recovered: at least this fraction of the pre-fault rate ...
THRESHOLD = 0.9
#: ... in this many consecutive intervals.
HOLD_INTERVALS = 2
#: Seqs named in an evidence string, per kind.
EVIDENCE_SEQS = 3
#: The keys ``recovery`` returns, in order (the record adds event, workload, sender, receiver).
RECOVERY_KEYS = ("fault_start_s", "fault_end_s", "last_before_s", "first_after_s", "outage_s", "recover_s", "lost",
                 "duplicated", "reordered", "backlog", "pre_rate_msgs_s", "promise", "verdict", "evidence")

_NEVER = np.iinfo(np.int64).max


def _ok(e: Mapping[str, Any]) -> bool:
    return not e.get("error") and e.get("took_effect_s") is not None


def fault_windows(events: Iterable[Mapping[str, Any]], run_end_s: float | None = None) -> list[dict[str, Any]]:
    """Faults from event records: ``{event, kind, target, action, start_s, end_s, ended_by}``, by start.

    ``event``: the index of the interrupting event; ``ended_by``: the index of the event that ended
    it (None for a restart, or when the run's end did); ``end_s``: ``run_end_s`` (seconds after t0)
    for a fault nothing ended (None when it is not given).  Pairing rules in the module's docstring."""
    evs = sorted(events, key=lambda e: e["index"])
    faults = []
    for e in evs:
        if (e.get("kind"), e.get("action")) not in INTERRUPTING or e.get("ends") is not None or not _ok(e):
            continue  # (a "set" that ends an earlier one is the undo of a ``for``, not a fault)
        start = e.get("started_s")
        start = e["took_effect_s"] if start is None else start
        if e["action"] == "restart":
            end, by = e["took_effect_s"], None
        else:
            ender = next((x for x in evs if x.get("ends") == e["index"] and x["index"] > e["index"] and _ok(x)), None)
            end, by = (ender["took_effect_s"], ender["index"]) if ender is not None else (run_end_s, None)
        if end is not None:
            end = max(end, start)
        faults.append({"event": e["index"], "kind": e.get("kind"), "target": e.get("target"), "action": e["action"],
                       "start_s": start, "end_s": end, "ended_by": by})  # fmt: skip
    faults.sort(key=lambda f: (f["start_s"], f["event"]))
    return faults


def _rel(t_ns: int | None, t0_ns: int) -> float | None:
    return None if t_ns is None else round((int(t_ns) - int(t0_ns)) / 1e9, 6)


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def recovery(tx: Tx | Flow, rx: Rx | None, t0_ns: int, fault_start_ns: int, fault_end_ns: int,
             promise: Mapping[str, Any] | None = None, interval_ns: int = 1_000_000_000, *,
             pre_window_ns: int = PRE_WINDOW_NS, threshold: float = THRESHOLD,
             hold: int = HOLD_INTERVALS, horizon_ns: int | None = None) -> dict[str, Any]:
    """What one fault did to one flow: the ``RECOVERY_KEYS`` (definitions in the module's docstring).

    ``tx`` may be a ``Flow`` from ``series.prepare`` (then ``rx`` is ignored), so that several faults
    of one flow share the sorting.  ``promise``: None or ``{"name": .., "no_loss": bool,
    "no_duplicates": bool}`` (``run.timeline.promise_of``)."""
    if interval_ns <= 0 or hold < 1:
        raise ValueError(f"recovery: interval_ns {interval_ns}, hold {hold}; expected both > 0")
    f = tx if isinstance(tx, Flow) else prepare(tx, rx if rx is not None else Rx.empty())
    fs, fe = int(fault_start_ns), max(int(fault_end_ns), int(fault_start_ns))
    r_ns, r_act, first = f.recv_ns, f.recv_actual_ns, f.first

    # the outage the application saw: the longest gap between arrivals that overlaps [fs, fe]
    n = int(r_ns.size)
    i0 = int(np.searchsorted(r_ns, fs, side="right")) - 1  # the last arrival at or before the start (-1: none)
    i1 = int(np.searchsorted(r_ns, fe, side="left"))  # the first arrival at or after the end (n: none)
    first_after = last_before = None
    if n == 0:
        pass
    elif i0 < 0:  # nothing before the fault (a flow that started during it): only where deliveries began
        first_after = int(r_ns[0])
    elif i1 >= n:  # nothing after the fault's end: silent from the last arrival on, never back
        last_before = int(r_ns[n - 1])
    else:  # gaps (r[i], r[i + 1]) for i0 <= i < i1: each begins before the end and ends after the start
        gaps = np.diff(r_ns[i0:i1 + 1])
        k = int(np.argmax(gaps))
        last_before, first_after = int(r_ns[i0 + k]), int(r_ns[i0 + k + 1])
    outage = None
    if first_after is not None and last_before is not None:
        outage = max(0.0, round((first_after - last_before) / 1e9, 6))

    # the pre-fault rate and the return to it
    first_ns = r_ns[first]
    pre_from = max(fs - int(pre_window_ns), int(f.sent_ns[0]) if f.sent_ns.size else fs)
    pre_rate = None
    if pre_from < fs:
        n_pre = _count((first_ns >= pre_from) & (first_ns < fs))
        # a backlog delivered in the window (the end of an earlier fault) is no rate to recover to: at most
        # what was sent in it
        n_pre = min(n_pre, _count((f.sent_ns >= pre_from) & (f.sent_ns < fs)))
        pre_rate = n_pre / ((fs - pre_from) / 1e9) if n_pre else None
    recover_ns = None
    if pre_rate is not None and f.sent_ns.size:
        last = int(f.sent_ns[-1]) if horizon_ns is None else min(int(f.sent_ns[-1]), int(horizon_ns))
        k_max = (last - fe) // interval_ns  # whole intervals ending by the last send (or the next fault)
        need = min(hold, k_max)  # a sender that stopped sooner: every whole interval it had (at least one)
        if need >= 1:
            b = (first_ns[(first_ns >= fe) & (first_ns < fe + k_max * interval_ns)] - fe) // interval_ns
            counts = np.bincount(b, minlength=k_max)
            good = counts >= threshold * pre_rate * interval_ns / 1e9
            held = np.convolve(good.astype(np.int64), np.ones(need, dtype=np.int64), mode="valid") == need
            if held.any():
                recover_ns = int(np.argmax(held)) * interval_ns
        hold = max(need, 1)

    # the fault's window: loss, duplicates, reordering, backlog
    arrived_before = r_ns < fs
    from_ns = min(fs, int(r_act[arrived_before].max()) + 1) if arrived_before.any() else fs
    until_ns = fe + recover_ns + hold * interval_ns if recover_ns is not None else _NEVER
    in_window = (f.sent_ns >= from_ns) & (f.sent_ns < until_ns)
    lost_mask = in_window & f.sent_lost
    r_window = (r_ns >= fs) & (r_ns < until_ns)
    dup_mask = r_window & f.dup
    lost, duplicated = _count(lost_mask), _count(dup_mask)
    backlog = _count(first & (r_act < fe) & (r_ns >= fe))

    verdict = None
    name = None
    if promise:
        name = promise.get("name")
        judged = bool(promise.get("no_loss")) or bool(promise.get("no_duplicates"))
        active = bool(in_window.any() or r_window.any())
        if judged and active:
            broken = (promise.get("no_loss") and lost) or (promise.get("no_duplicates") and duplicated)
            verdict = "broken" if broken else "kept"
    evidence = None
    if promise or lost or duplicated:
        evidence = _evidence(f, lost_mask, dup_mask, t0_ns, name, verdict)
    return {
        "fault_start_s": _rel(fs, t0_ns), "fault_end_s": _rel(fe, t0_ns),
        "last_before_s": _rel(last_before, t0_ns), "first_after_s": _rel(first_after, t0_ns),
        "outage_s": outage, "recover_s": None if recover_ns is None else round(recover_ns / 1e9, 6),
        "lost": lost, "duplicated": duplicated, "reordered": _count(r_window & f.reordered),
        "backlog": backlog, "pre_rate_msgs_s": None if pre_rate is None else round(pre_rate, 3),
        "promise": name, "verdict": verdict, "evidence": evidence,
    }  # fmt: skip


def _evidence(f: Flow, lost_mask: np.ndarray, dup_mask: np.ndarray, t0_ns: int, name: str | None,
              verdict: str | None) -> str:
    """``"2 lost (seq 120 sent 10.012 s, 121 sent 10.022 s); 1 duplicated (seq 98 sent 9.991 s); <name>: kept"``."""

    def some(seqs: np.ndarray, sent: np.ndarray, total: int, what: str) -> str:
        if not total:
            return f"0 {what}"
        shown = ", ".join(f"{int(s)} sent {(int(t) - int(t0_ns)) / 1e9:.3f} s"
                          for s, t in zip(seqs[:EVIDENCE_SEQS], sent[:EVIDENCE_SEQS], strict=True))  # fmt: skip
        more = ", …" if total > EVIDENCE_SEQS else ""
        return f"{total} {what} (seq {shown}{more})"

    d_seq, d_idx = np.unique(f.recv_seq[dup_mask], return_index=True)
    d_sent = f.recv_actual_ns[dup_mask][d_idx]
    by_time = np.argsort(d_sent, kind="stable")
    parts = [some(f.sent_seq[lost_mask], f.sent_ns[lost_mask], _count(lost_mask), "lost"),
             some(d_seq[by_time], d_sent[by_time], _count(dup_mask), "duplicated")]  # fmt: skip
    if name is not None or verdict is not None:
        parts.append(f"{name or 'promise'}: {verdict or 'not judged'}")
    return "; ".join(parts)
