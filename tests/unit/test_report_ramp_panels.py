"""S4's ramp plot: one panel per send interval, both protocols in each (report.shaping + report.plots)."""

from __future__ import annotations

from roughnet.report import plots, shaping

S4_AXES = {"protocol": ["zmq", "dds"], "interval": ["10 ms", "25 ms", "50 ms"]}
S4_HINTS = {"lines": "protocol", "panels": "interval"}


def _ramp_runs(intervals: list[str], protocols: list[str]) -> list[dict]:
    runs, index = [], 0
    for proto in protocols:
        for iv in intervals:
            slope = 3.0 if proto == "dds" else 2.0
            points = [[1024.0 * k, 100.0 + slope * k] for k in range(1, 41)]
            runs.append({"index": index, "run_id": f"r{index:011d}", "pattern": "ramp", "status": "ok",
                         "validity": "valid", "params": {"protocol": proto, "interval": iv}, "points": points})
            index += 1
    return runs


def test_s4_sweep_gives_one_panel_per_interval_with_both_protocols():
    runs = _ramp_runs(["25 ms", "50 ms", "10 ms"], ["zmq", "dds"])
    roles = shaping.choose_roles(S4_AXES, S4_HINTS)
    panels = shaping.ramp_panels(runs, roles)
    # ordered numerically by interval, whatever the run order
    assert [title for title, _ in panels] == ["interval=10 ms", "interval=25 ms", "interval=50 ms"]
    for _, series in panels:
        assert sorted(s.label for s in series) == ["protocol=dds", "protocol=zmq"]
    fig = plots.ramp_figure(panels)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3
    for ax, (title, _) in zip(visible, panels, strict=True):
        assert ax.get_title() == title
        assert len(ax.get_lines()) == 2
    # the same protocol has the same colour in every panel
    colours = {}
    for ax in visible:
        for line in ax.get_lines():
            colours.setdefault(line.get_label(), set()).add(line.get_color())
    assert all(len(c) == 1 for c in colours.values()) and len(colours) == 2
    assert plots.ramp_png(panels).startswith(b"\x89PNG")


def test_ramp_without_panel_key_groups_by_x_then_by_nothing():
    runs = _ramp_runs(["10 ms", "50 ms"], ["zmq"])
    by_x = shaping.ramp_panels(runs, shaping.choose_roles({"interval": ["10 ms", "50 ms"]}))
    assert [t for t, _ in by_x] == ["interval=10 ms", "interval=50 ms"]
    single = shaping.ramp_panels(runs[:1], shaping.choose_roles({}))
    assert [(t, len(s)) for t, s in single] == [("", 1)]
    assert len([ax for ax in plots.ramp_figure(single).axes if ax.get_visible()]) == 1
