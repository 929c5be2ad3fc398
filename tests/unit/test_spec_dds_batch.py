"""The DDS `batch` knob: scenario value -> agent option, its bounds, and the S2 schedule's batch_size column.

`batch` is Cyclone DDS's writer batching with `General/MaxMessageSize` = batch bytes (docs/protocols.md);
0 B means off.  The agent checks the same bounds (crates/agent/src/drivers/dds.rs, BATCH_MIN/BATCH_MAX).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roughnet.plan import sweep_from_scenario
from roughnet.spec import ScenarioError, load_scenario
from roughnet.spec.knobs import DDS_BATCH_MAX, DDS_BATCH_MIN

from conftest import toml_hosts, toml_stream
from specutil import plan_text

REPO = Path(__file__).resolve().parents[2]

BASE = """\
[scenario]
name = "t"
""" + toml_hosts("a", "b") + """\
[[link]]
between = ["a", "b"]
""" + toml_stream("dds") + "[workload.dds]\n"


def options(knobs: str) -> dict:
    return plan_text(BASE + knobs, "t.toml").runs[0].workload.options


@pytest.mark.parametrize(("value", "bytes_"), [('"8 KiB"', 8192), ('"0 B"', 0), ('"1344 B"', 1344),
                                               ('"65507 B"', 65507), ('"14720 B"', 14720)])
def test_batch_becomes_bytes(value: str, bytes_: int) -> None:
    assert options(f"batch = {value}\n") == {"batch": bytes_}


def test_batch_left_out_is_not_sent() -> None:
    assert options('reliability = "reliable"\n') == {"reliability": "reliable"}


@pytest.mark.parametrize(("value", "words"), [('"1 KiB"', ["below the bounds"]), ('"64 KiB"', ["above the bounds"]),
                                              ("8192", ["expected a size"]), ('"8 Kib"', ["expected a size"])])
def test_batch_out_of_bounds_names_the_knob_and_the_bounds(value: str, words: list[str]) -> None:
    with pytest.raises(ScenarioError) as info:
        options(f"batch = {value}\n")
    first = str(info.value).splitlines()[0]
    assert first.startswith("t.toml: workload.dds.batch: "), first
    for word in [*words, f"{DDS_BATCH_MIN} B to {DDS_BATCH_MAX} B", "0 B (no batching)"]:
        assert word in first, first


def test_bounds_agree_with_the_agent() -> None:
    rust = (REPO / "crates" / "agent" / "src" / "drivers" / "dds.rs").read_text()
    assert int(re.search(r"pub const BATCH_MIN: u64 = (\d+);", rust).group(1)) == DDS_BATCH_MIN
    assert int(re.search(r"pub const BATCH_MAX: u64 = (\d+);", rust).group(1)) == DDS_BATCH_MAX


def test_dds_overlay_schedule_drives_the_batch_knob() -> None:
    # S2: the schedule's batch_size column is the knob (no longer ignored), row by row.
    scenario = load_scenario(REPO / "scenarios" / "dds-overlay.toml")
    sweep = sweep_from_scenario(scenario, str(REPO / "scenarios" / "dds-overlay.toml"))
    csv_rows = [ln.split(",") for ln in (REPO / "scenarios" / "dds-schedule.csv").read_text().splitlines()
                if ln and not ln.startswith("#")][1:]
    want = {f"row {i}": int(cells[4]) for i, cells in enumerate(csv_rows, start=1)}
    got = {r.params["schedule"]: r.workload.options["batch"] for r in sweep.runs}
    assert got == want
    assert any(v > 0 for v in got.values()) and any(v == 0 for v in got.values())
