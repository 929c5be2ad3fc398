"""The report's interactive section in a real browser (issue 29): headless Chromium (Debian's package) opens the
HTML report of a stored sweep (SEEDS S0 at notebook size, examples/data/v2v-loss: 12 real runs) from disk, as a
user double-clicking index.html does, and the test uses it with the real mouse: the page loads without a console
error or a failed load, the plot has a marker per run, hovering one shows that run (its id, parameters, verdict,
value) with a link to its artifacts, a legend click hides a series, another x axis redraws it, a drag zooms, and
the latency percentiles have a line per run. Without JavaScript the PNG figures stay (checked in the HTML).
No root needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from browser import CHROMIUM, Browser

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it)")

REPO = Path(__file__).resolve().parents[2]
ROUGHNET = [sys.executable, "-m", "roughnet.cli"]
RUNS = 12

POINTS = "document.querySelectorAll('#rn-explore svg.rn-plot:not(.rn-pct) circle.pt').length"
#: The centre of marker i, and the run of the marker on top at that point (markers can overlap): what the mouse hovers.
CENTER = """(() => {{ const c = document.querySelectorAll('#rn-explore svg.rn-plot:not(.rn-pct) circle.pt')[{i}];
  c.scrollIntoView({{block: 'center'}}); const b = c.getBoundingClientRect();
  const x = b.x + b.width / 2, y = b.y + b.height / 2;
  return [x, y, document.elementFromPoint(x, y).dataset.run]; }})()"""
#: Choose a value in one of the section's controls as a user does (the change event redraws).
SET = "(() => {{ const s = document.getElementById('{id}'); s.value = '{value}'; s.dispatchEvent(new Event('change')); }})();"
TIP = """(() => { const t = document.querySelector('.rn-tip'); const a = t.querySelector('a');
  return [getComputedStyle(t).display, t.textContent, a ? a.href : null]; })()"""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    res = root / "res"
    for cmd in (["import", str(REPO / "examples" / "data" / "v2v-loss")], ["report", "v2v-loss"]):
        out = subprocess.run([*ROUGHNET, *cmd, "--results", str(res)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out
    (page,) = list((res / "reports").glob("*/index.html"))
    return page


def test_the_page_is_self_contained_and_keeps_its_pngs(report: Path) -> None:
    text = report.read_text()
    assert text.count('src="data:image/png;base64,') >= 2  # the figures, readable without JavaScript
    assert "<noscript>" in text and 'id="rn-data"' in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text  # no CDN
    data = json.loads(text.split('<script type="application/json" id="rn-data">')[1].split("</script>")[0])
    assert len(data["runs"]) == RUNS and {p["name"] for p in data["params"]} == {"protocol", "loss", "payload"}


def test_the_report_in_a_browser_hover_legend_axis_zoom(report: Path, tmp_path: Path) -> None:
    with Browser(tmp_path / "profile") as b:
        b.open(report.as_uri())
        assert b.evaluate("document.readyState") == "complete"
        assert b.evaluate("typeof window.rnExplore") == "object", b.problems()
        # a marker per run: every run of the sweep has the first metric (latency p50)
        assert b.evaluate("window.rnExplore.state.metric") == "lat_p50_us"
        assert b.evaluate(POINTS) == RUNS
        # hovering a marker with the mouse shows its run, with the link to its artifacts
        x, y, run_id = b.evaluate(CENTER.format(i=5))
        b.mouse("mouseMoved", x, y)
        display, text, href = b.evaluate(TIP)
        assert display == "block" and f"run {run_id}" in text, text
        assert "protocol=" in text and "loss=" in text and ("valid" in text or "suspect" in text), text
        assert "latency p50: " in text, text
        assert href is not None and Path(unquote(urlparse(href).path)).is_dir(), href
        assert Path(unquote(urlparse(href).path)).name == run_id
        b.mouse("mouseMoved", 5, 5)  # away: the box goes
        assert b.evaluate(TIP)[0] == "none"
        # the legend: with a series per protocol, hiding one (its 4 runs) leaves 8 markers
        b.evaluate(SET.format(id="rn-x", value="loss") + SET.format(id="rn-series", value="protocol"))
        assert b.evaluate("[window.rnExplore.state.x, window.rnExplore.state.lines]") == ["loss", "protocol"]
        assert b.evaluate(POINTS) == RUNS
        b.evaluate("document.querySelector('#rn-explore svg.rn-plot:not(.rn-pct) g.rn-legend').dispatchEvent("
                   "new MouseEvent('click', {bubbles: true}))")
        assert b.evaluate(POINTS) == RUNS - 4
        # another x axis from the control: protocol on x, series by loss
        b.evaluate(SET.format(id="rn-x", value="protocol") + SET.format(id="rn-series", value="loss"))
        assert b.evaluate("window.rnExplore.state.x") == "protocol" and b.evaluate(POINTS) == RUNS
        labels = b.evaluate("[...document.querySelectorAll('#rn-explore svg.rn-plot:not(.rn-pct) .rn-grid text')]"
                            ".map(t => t.textContent)")
        assert {"zenoh", "mqtt", "kafka"} <= set(labels), labels
        # a drag across part of the plot zooms into that x range; a double-click returns
        plot = b.evaluate("(() => { const r = document.querySelector('#rn-explore svg.rn-plot:not(.rn-pct) "
                          ".rn-bg').getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()")
        px, py, pw, ph = plot
        b.mouse("mousePressed", px + 0.05 * pw, py + ph / 2)
        b.mouse("mouseMoved", px + 0.45 * pw, py + ph / 2)
        b.mouse("mouseReleased", px + 0.45 * pw, py + ph / 2)
        zoom = b.evaluate("window.rnExplore.state.zoom")
        assert zoom is not None and zoom[0] < zoom[1], zoom
        # the latency percentiles: a line per run, on log scales
        assert b.evaluate("document.querySelectorAll('#rn-explore svg.rn-pct path.rn-line').length") == RUNS
        assert b.problems() == []


def test_compare_overlays_the_two_sweeps_in_one_plot(tmp_path: Path) -> None:
    """`roughnet compare` writes index.html with both sides' runs in one plot, one series per sweep (here the zenoh
    and the MQTT runs of the stored sweep as A and B): 4 + 4 markers, two legend entries, and hovering a marker
    names its side."""
    res, out = tmp_path / "res", tmp_path / "cmp"
    for cmd in (["import", str(REPO / "examples" / "data" / "v2v-loss")],
                ["compare", "v2v-loss", "v2v-loss", "--where-a", "protocol=zenoh", "--where-b", "protocol=mqtt",
                 "--ignore", "protocol", "--out", str(out)]):
        done = subprocess.run([*ROUGHNET, *cmd, "--results", str(res)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done
    with Browser(tmp_path / "profile") as b:
        b.open((out / "index.html").as_uri())
        assert b.evaluate("window.rnExplore.state.lines") == "sweep"
        assert b.evaluate(POINTS) == 8
        legend = b.evaluate("[...document.querySelectorAll('#rn-explore svg.rn-plot:not(.rn-pct) g.rn-legend')]"
                            ".map(g => g.textContent)")
        assert [x.split(":")[0] for x in legend] == ["sweep=A", "sweep=B"], legend
        x, y, run_id = b.evaluate(CENTER.format(i=0))
        b.mouse("mouseMoved", x, y)
        display, text, href = b.evaluate(TIP)
        assert display == "block" and run_id.split(":")[0] in ("A", "B") and f"run {run_id}" in text, text
        assert href is not None and Path(unquote(urlparse(href).path)).name == run_id.split(":")[1]
        assert b.problems() == []
