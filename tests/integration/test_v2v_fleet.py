"""Vehicle fleets (issue 16): scenarios/v2v-fleet-ci.toml, six cars of the shipped SUMO trace and a roadside
unit on one 802.11p segment, every car publishing 300 B at 10 Hz to every other host over UDP broadcast for
20 s (`from = "c*"`, `to = "*"`, `[workload.udp] broadcast = true`: one datagram per message on the medium,
each receiver's copy drawn at its own distance). Every message's sender-receiver distance at its send time is stored (results
table `distance`, per-message parquet), and delivery follows the model's range curve: within 100 m nearly
everything arrives, delivery falls with distance, and beyond the model's range (PER > 0.9999 for a 342-byte
frame from 420 m on: wire-core loss.rs, the defaults) nothing does. The report has the fleet section.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from roughnet.binaries import find_binary
from roughnet.cli import app
from roughnet.mobility.distance import position_at
from roughnet.mobility.fcd import read_fcd
from roughnet.results import Store

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "v2v-fleet-ci.toml"
WIRE = find_binary("roughnet-wire")
AGENT = find_binary("roughnet-agent")
#: Beyond this distance the 802.11p model (defaults, 300 B payload) delivers nothing (PER 0.9999 at 420 m).
RANGE_M = 450.0
#: Every car sends for this long after t0 (the scenario's `duration`).
SEND_S = 20.0


def ratio(rows: list[dict], lo: float, hi: float) -> tuple[float, int]:
    sel = [r for r in rows if lo <= r["distance_m"] < hi]
    sent = sum(r["sent"] for r in sel)
    return (sum(r["delivered"] for r in sel) / sent if sent else float("nan")), sent


@pytest.mark.root
@pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)")
@pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")
def test_all_to_all_fleet_delivery_follows_distance(tmp_path: Path) -> None:
    results = tmp_path / "res"
    out = CliRunner().invoke(app, ["run", str(SCENARIO), "--results", str(results)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    with Store(results, read_only=True) as store:
        sweep = store.sweeps()[-1]["sweep_id"]
        [run] = store.runs(sweep)
        assert run["status"] == "ok", run["failure_reason"]
        reasons = run["validity_reasons"]
        assert not [r for r in reasons if "distances" in r or "incomplete" in r], reasons
        rows = store.distance(sweep)
        flows = store.flows(sweep)
        folder = store.run_dir(sweep, run["run_id"])
        report = Path(out.output.split("report: ")[-1].split()[0])

    # One flow per car and every other host: 6 cars x 6 receivers.
    assert len(flows) == 36 and {f["sender"] for f in flows} == {"c0", "c1", "c2", "c4", "c5", "c6"}
    assert {(r["sender"], r["receiver"]) for r in rows} == {(f["sender"], f["receiver"]) for f in flows}
    assert all(r["sender"] != r["receiver"] for r in rows)
    # Every sent message is in a row: 20 s at 10 msg/s per flow (nothing lost from the senders' traces).
    assert sum(r["sent"] for r in rows) == 36 * 200
    # Broadcast: the hosts put one frame per message (and end marker) on the medium, 6 x (200 + 5), not one
    # per receiver (36 x 205 = 7380); the medium hands each frame to the other 6 hosts.
    medium = run["link_counters"]["0"]["forward"]
    assert 6 * 205 <= medium["tx_packets"] < 6 * 205 + 60, medium

    near, n_near = ratio(rows, 0, 100)
    mid, n_mid = ratio(rows, 100, 300)
    edge, n_edge = ratio(rows, 300, RANGE_M)
    far, n_far = ratio(rows, RANGE_M, 1e9)
    assert n_near > 300 and n_mid > 300 and n_edge > 100 and n_far > 1000, (n_near, n_mid, n_edge, n_far)
    assert near >= 0.98, near                      # within 100 m nearly everything arrives
    assert far == 0.0, far                         # beyond the model's range nothing does
    assert near >= mid - 0.02 and mid >= edge and edge > far, (near, mid, edge, far)  # it falls with distance
    assert edge < 0.9, edge                        # the edge of the range loses a real share

    # Each message knows its distance: the parquet has one row per message sent, and for a car and the fixed
    # roadside unit the distance is the vehicle's FCD position (at the wire's time of the send) against the unit's.
    table = pq.read_table(folder / "distance-cam.parquet").to_pydict()
    assert len(table["seq"]) == 36 * 200
    fixed = np.array(table["receiver"]) == "rsu1"
    car = np.array(table["sender"]) == "c4"
    sel = fixed & car
    # Where t0 is on the wire's clock: after the wire was ready (the runner starts the agents only then) and early
    # enough that the 20 s of sending after t0 fit in the wire's uptime (read after the run); both stamps are
    # CLOCK_MONOTONIC, so the stored offset is their difference. Not statistical: causal order. Seen: 0.62, 0.30 s
    # (ready to t0: the receivers' start), uptime 24.6, 24.3 s (2 runs). A wrong offset would also misplace the message
    # distances below against the wire's own loss decisions (nothing beyond 450 m arrives: checked below).
    wire = run["link_counters"]["0"]
    offset = wire["t0_after_ready_s"]
    record = json.loads((folder / "record.json").read_text())
    assert offset == round((record["t0_ns"] - wire["ready_mono_ns"]) / 1e9, 6), (offset, record["t0_ns"], wire)
    assert 0 < offset <= wire["uptime_s"] - SEND_S, (offset, wire["uptime_s"])
    pts = read_fcd(ROOT / "scenarios" / "sumo" / "town.fcd.xml")["4"]
    t_ns = (np.array(table["sent_s"])[sel] + offset) * 1e9
    want = np.hypot(*(position_at(pts, t_ns) - np.array([200.0, 100.0])).T)
    assert np.allclose(np.array(table["distance_m"])[sel], want, atol=0.01)
    lat = np.array([v if v is not None else np.nan for v in table["latency_us"]])
    d = np.array(table["distance_m"])
    assert np.isnan(lat[d > RANGE_M]).all() and (lat[d < 100] > 0).mean() > 0.98

    page = report.read_text()
    assert "Vehicle fleet: delivery by distance" in page
    for name in ("fleet_pdr_distance", "fleet_latency_distance", "fleet_pairs_0", "fleet_map_0"):
        assert (report.parent / f"{name}.png").stat().st_size > 5000, name


@pytest.mark.root
@pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)")
@pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")
def test_fleet_over_dds_starts_with_readers_out_of_range(tmp_path: Path) -> None:
    """The same fleet over DDS (best effort): the highway cars (c0, c6) are out of range of the town at the
    start, so their writers never match the town's readers. A DDS sender goes ahead 5 s after it started
    with the readers matched so far (crates/agent dds.rs, MATCH_GRACE_NS); before, it waited for every
    reader and the run failed at the timeout. Delivery then follows distance as far as discovery allows."""
    text = SCENARIO.read_text().replace('protocol = "udp"', 'protocol = "dds"')
    text = text.replace("[workload.udp]\nbroadcast = true", '[workload.dds]\nreliability = "best_effort"')
    text = text.replace('fcd = "sumo/', f'fcd = "{SCENARIO.parent}/sumo/')
    assert 'protocol = "dds"' in text and "[workload.dds]" in text and "[workload.udp]" not in text
    path = tmp_path / "v2v-fleet-ci-dds.toml"
    path.write_text(text)
    results = tmp_path / "res"
    out = CliRunner().invoke(app, ["run", str(path), "--results", str(results)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    with Store(results, read_only=True) as store:
        sweep = store.sweeps()[-1]["sweep_id"]
        [run] = store.runs(sweep)
        assert run["status"] == "ok", run["failure_reason"]
        rows = store.distance(sweep)
        flows = store.flows(sweep)
    assert len(flows) == 36
    assert {(r["sender"], r["receiver"]) for r in rows} == {(f["sender"], f["receiver"]) for f in flows}
    # Every sender sent (a sender waiting for the unmatched readers would have sent nothing).
    sent = {}
    for r in rows:
        sent[r["sender"]] = sent.get(r["sender"], 0) + r["sent"]
    assert set(sent) == {"c0", "c1", "c2", "c4", "c5", "c6"} and min(sent.values()) > 6 * 100, sent
    # The highway pair, under 100 m apart all along, matched and delivered; beyond the range nothing arrives.
    pair = {f["sender"]: f["metrics"]["received"] for f in flows if {f["sender"], f["receiver"]} == {"c0", "c6"}}
    assert pair.get("c0", 0) > 100 and pair.get("c6", 0) > 100, pair
    near, n_near = ratio(rows, 0, 100)
    far, n_far = ratio(rows, RANGE_M, 1e9)
    assert n_near > 300 and n_far > 1000, (n_near, n_far)
    assert near >= 0.8, near
    assert far == 0.0, far
