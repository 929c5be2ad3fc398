"""Synthetic timeline run records (docs/timelines.md, "The record") for the store and report tests.

A run of two workloads: ``control`` (MQTT stream, senders pub1 and pub2 to sub, QoS 1) and
``bulk`` (TCP, pub1 to sub, background, from 5 s), 20 one-second intervals; the broker is killed
at 10 s and started again at 15 s (``for``), and an isolate at 18 s failed.  ``broken=True``
makes the control flows lose messages under a no-loss promise.  Imported as ``from synthtimeline
import ...`` (tests/unit is on the path).
"""

from __future__ import annotations

from typing import Any

INTERVALS = 20
RATE = 100  # msg/s per control flow
PAYLOAD = 256


class Sweep:
    """What ``Store.begin_sweep`` reads of a ``runspec.Sweep``."""

    def __init__(self, sweep_id: str, runs: int, axes: dict[str, list[Any]] | None = None) -> None:
        self.sweep_id, self.scenario = sweep_id, sweep_id.rsplit("-", 1)[0]
        self.source, self.description = f"scenarios/{self.scenario}.toml", "synthetic timeline"
        self.axes, self.report, self.runs = axes or {}, {}, tuple(range(runs))


def _series(workload: str, sender: str, receiver: str, rate: int, payload: int, start: int,
            outage: tuple[int, int] | None, lost_in_outage: bool) -> list[dict[str, Any]]:
    rows = []
    for i in range(INTERVALS):
        sent = rate if i >= start else 0
        down = outage is not None and outage[0] <= i < outage[1]
        delivered = 0 if down else sent
        if outage is not None and i == outage[1] and not lost_in_outage:
            delivered += rate * (outage[1] - outage[0])  # the backlog arrives
        rows.append({
            "workload": workload, "sender": sender, "receiver": receiver, "t_s": float(i), "interval_s": 1.0,
            "sent": sent, "delivered": delivered, "bytes": delivered * payload,
            "throughput_bps": float(delivered * payload * 8), "lost": sent if down and lost_in_outage else 0,
            "duplicates": 3 if outage is not None and i == outage[1] else 0, "reordered": 0,
            "lat_p50_us": 800.0 + i if delivered else None, "lat_p90_us": 900.0 + i if delivered else None,
            "lat_p99_us": 1500.0 + 10 * i if delivered else None, "lat_max_us": 2000.0 + 10 * i if delivered else None,
        })  # fmt: skip
    return rows


def _metrics(sent: int, received: int, lat: float, bps: float) -> dict[str, Any]:
    lost = sent - received
    return {"sent": sent, "received": received, "lost": lost, "duplicates": 3, "reordered": 0,
            "loss_ratio": lost / sent if sent else 0.0, "throughput_bps": bps, "bytes": received * PAYLOAD,
            "lat_p50_us": lat, "lat_p90_us": lat * 1.2, "lat_p99_us": lat * 2, "lat_max_us": lat * 3}  # fmt: skip


def record(sweep_id: str, run_id: str, index: int = 0, *, broken: bool = False, params: dict | None = None,
           single: bool = False) -> dict[str, Any]:
    """A stored-ready record of a timeline run (``single``: only the control workload, one sender)."""
    senders = ["pub1"] if single else ["pub1", "pub2"]
    series, flows, recovery = [], [], []
    for s in senders:
        series += _series("control", s, "sub", RATE, PAYLOAD, 0, (10, 15), broken)
        sent = RATE * INTERVALS
        received = sent - (500 if broken else 0)
        flows.append({"workload": "control", "sender": s, "receiver": "sub",
                      "metrics": {**_metrics(sent, received, 850.0, 204800.0), "end_reason": "end_marker"}})
        recovery.append({
            "event": 0, "workload": "control", "sender": s, "receiver": "sub", "fault_start_s": 10.001,
            "fault_end_s": 15.3, "last_before_s": 9.998, "first_after_s": 15.31, "outage_s": 5.312,
            "recover_s": 1.0, "lost": 500 if broken else 0, "duplicated": 3, "reordered": 0,
            "backlog": 0 if broken else 500, "pre_rate_msgs_s": 100.0, "promise": "MQTT QoS 1",
            "verdict": "broken" if broken else "kept",
            "evidence": ("500 lost (seq 1000 sent 10.001 s, …); 3 duplicated; MQTT QoS 1: broken" if broken
                         else "0 lost; 3 duplicated (seq 999 sent 9.990 s); MQTT QoS 1: kept"),
        })  # fmt: skip
    workloads = [{"name": "control", "protocol": "mqtt", "pattern": "stream", "senders": senders,
                  "receivers": ["sub"], "start_s": 0.0, "background": False,
                  "metrics": _metrics(RATE * INTERVALS * len(senders), RATE * INTERVALS * len(senders)
                                      - (500 * len(senders) if broken else 0), 850.0, 409600.0),
                  "validity": "valid", "validity_reasons": []}]  # fmt: skip
    if not single:
        series += _series("bulk", "pub1", "sub", 40, 65536, 5, None, False)
        flows.append({"workload": "bulk", "sender": "pub1", "receiver": "sub",
                      "metrics": {**_metrics(600, 600, 4000.0, 2.1e7), "end_reason": "end_marker", "mystery": 7}})
        workloads.append({"name": "bulk", "protocol": "tcp", "pattern": "bulk", "senders": ["pub1"],
                          "receivers": ["sub"], "start_s": 5.0, "background": True,
                          "metrics": {"throughput_bps": 2.1e7, "bytes": 600 * 65536, "sent": 600},
                          "validity": "suspect", "validity_reasons": ["sender late 3 % of the time"]})  # fmt: skip
    events = [
        {"index": 0, "at_s": 10.0, "kind": "service", "target": "mosquitto", "action": "kill", "detail": "SIGKILL",
         "started_s": 10.001, "took_effect_s": 10.002, "ends": None, "error": None},
        {"index": 1, "at_s": 15.0, "kind": "service", "target": "mosquitto", "action": "start",
         "detail": "started again, ready", "started_s": 15.0, "took_effect_s": 15.3, "ends": 0, "error": None},
        {"index": 2, "at_s": 18.0, "kind": "host", "target": "sub", "action": "isolate", "detail": None,
         "started_s": 18.0, "took_effect_s": 18.01, "ends": None, "error": "RuntimeError: nft <failed>"},
    ]  # fmt: skip
    head = workloads[0]
    return {
        "sweep_id": sweep_id, "run_id": run_id, "index": index, "scenario": sweep_id.rsplit("-", 1)[0],
        "params": params or {}, "repeat": 0, "seed": 1, "status": "ok", "started_at": "2026-11-22T10:00:00+00:00",
        "duration_s": 25.0, "engine": "wire", "pattern": "stream", "protocol": "mqtt",
        "validity": "invalid" if broken else "valid",
        "validity_reasons": ["control: 500 messages lost"] if broken else [],
        "versions": {"roughnet": "0.1.0"}, "metrics": dict(head["metrics"]),
        "receivers": [{"host": "sub", "metrics": dict(flows[0]["metrics"])}], "histograms": [],
        "workloads": workloads, "flows": flows, "series": series, "events": events, "recovery": recovery,
        "t0_ns": 123456789,
    }  # fmt: skip
