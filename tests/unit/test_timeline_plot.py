"""The timeline plot (roughnet.timeline.plot): panels, workload lines, event lines and fault shading."""

import numpy as np
import pytest

from roughnet.timeline import plot, series
from roughnet.timeline.traces import Rx, Tx

S = 1_000_000_000
MS = 1_000_000
T0 = 100 * S


def rows(seconds=20, rate=100, latency_ms=5, start_s=0.0, gap=(8.0, 12.0)):
    seq = np.arange(int(seconds * rate))
    sent = T0 + int(start_s * S) + seq * (S // rate)
    sent_s = (sent - T0) / S
    keep = ~((sent_s >= gap[0]) & (sent_s < gap[1]))
    tx = Tx.from_arrays(seq, sent)
    rx = Rx.from_arrays(seq[keep], sent[keep], sent[keep] + latency_ms * MS)
    return series.flow_series(tx, rx, T0, T0 + 20 * S, S, 256)


EVENTS = [
    {"index": 0, "at_s": 8.0, "kind": "service", "target": "mosquitto", "action": "kill", "detail": None,
     "started_s": 8.0, "took_effect_s": 8.002, "ends": None, "error": None},
    {"index": 1, "at_s": 12.0, "kind": "service", "target": "mosquitto", "action": "start", "detail": None,
     "started_s": 12.0, "took_effect_s": 12.4, "ends": 0, "error": None},
    {"index": 2, "at_s": 15.0, "kind": "link", "target": "link 0", "action": "down", "detail": None,
     "started_s": None, "took_effect_s": None, "ends": None, "error": "not carried out: the run had ended"},
]  # fmt: skip


def gids(fig, prefix):
    found = []
    for ax in fig.axes:
        for artist in [*ax.lines, *ax.patches, *ax.texts, *ax.collections]:
            g = artist.get_gid()
            if g and g.startswith(prefix):
                found.append((fig.axes.index(ax), g))
    return found


def test_one_panel_per_metric_lines_per_workload_and_events(tmp_path):
    data = {"control": rows(), "bulk": rows(start_s=5.0, latency_ms=50, gap=(0, 0))}
    fig = plot.timeline_figure(data, EVENTS, title="broker outage", background={"bulk"})
    assert len(fig.axes) == 3
    assert [ax.get_ylabel() for ax in fig.axes] == ["throughput (kbit/s)", "latency p99 (ms)",
                                                    "loss (by send time) (%)"]  # fmt: skip
    assert fig.axes[-1].get_xlabel() == "time after t0 (s)"
    # every panel shares the time axis and has one line per workload, the background one dashed
    assert {ax.get_shared_x_axes().joined(fig.axes[0], ax) for ax in fig.axes} == {True}
    lines = [g for g in gids(fig, "workload-")]
    assert sorted(lines) == sorted((i, f"workload-{w}") for i in range(3) for w in data)
    styles = {ln.get_gid(): ln.get_linestyle() for ln in fig.axes[0].lines if ln.get_gid()}
    assert styles["workload-bulk"] == "--" and styles["workload-control"] == "-"
    # three event lines in every panel (the cancelled one at its planned time, dotted), labels on top
    assert sorted(gids(fig, "event-")) == sorted([(i, f"event-{n}") for i in range(3) for n in range(3)]
                                                 + [(0, f"event-label-{n}") for n in range(3)])  # fmt: skip
    label = next(t for t in fig.axes[0].texts if t.get_gid() == "event-label-0")
    assert label.get_text() == "kill mosquitto"
    assert next(t for t in fig.axes[0].texts if t.get_gid() == "event-label-2").get_text() == "down link 0 (not run)"
    kill = next(ln for ln in fig.axes[1].lines if ln.get_gid() == "event-0")
    assert kill.get_xdata()[0] == pytest.approx(8.0)  # started_s: when the fault began
    # the kill .. start fault is shaded in every panel, from the kill to the broker ready again
    spans = [a for a in fig.axes[2].patches if a.get_gid() == "fault-0"]
    assert len(spans) == 1 and len(gids(fig, "fault-")) == 3
    span = spans[0]  # a Rectangle (matplotlib >= 3.9) or a Polygon
    xs = [span.get_x(), span.get_x() + span.get_width()] if hasattr(span, "get_width") \
        else [x for x, _ in span.get_xy()]
    assert min(xs) == pytest.approx(8.0) and max(xs) == pytest.approx(12.4)

    path = plot.plot_timeline(data, EVENTS, tmp_path / "timeline.png", title="broker outage", background=["bulk"])
    assert path == tmp_path / "timeline.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_other_metrics_and_an_outage_as_a_gap():
    data = {"control": rows()}
    fig = plot.timeline_figure(data, [], metrics=("delivered", "latency_max", "lost"))
    assert len(fig.axes) == 3
    (line,) = [ln for ln in fig.axes[1].lines if ln.get_gid() == "workload-control"]
    y = np.asarray(line.get_ydata(), dtype=float)
    assert np.isnan(y[9]) and np.isnan(y[10]) and not np.isnan(y[0])  # nothing arrived from 8.005 to 12.005 s
    (delivered,) = [ln for ln in fig.axes[0].lines if ln.get_gid() == "workload-control"]
    assert list(delivered.get_ydata())[9:11] == [0.0, 0.0]
    assert gids(fig, "event-") == [] and gids(fig, "fault-") == []


def test_unknown_metric_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown metrics"):
        plot.plot_timeline({"w": rows()}, [], tmp_path / "x.png", metrics=("goodput",))


def test_empty_series_still_draws(tmp_path):
    path = plot.plot_timeline({}, EVENTS[:2], tmp_path / "empty.png", metrics=("throughput",), run_end_s=20.0)
    assert path.read_bytes()[:4] == b"\x89PNG"
