"""Interrupting roughnet anywhere leaves nothing behind and loses no finished run (issue 26; tests/integration/chaos.py
says what one interrupt checks). 20 interrupts here, at seeded random instants of a run with a managed broker, the
wire and an event, one in each twentieth of the run, so preflight, the agents and the end are all hit (30 before
2026-12-07: make test keeps its time); bench/self_chaos.py runs more and prints the table docs/PERFORMANCE.md keeps."""

from __future__ import annotations

import os

import pytest
from chaos import Chaos, summary
from cli_run import needs

pytestmark = pytest.mark.root

INTERRUPTS = int(os.environ.get("ROUGHNET_CHAOS_N", "20"))


@needs("mqtt")
def test_interrupts_anywhere_leave_nothing_and_lose_no_run(tmp_path):
    chaos = Chaos(tmp_path, seed=int(os.environ.get("ROUGHNET_CHAOS_SEED", "1")))
    chaos.reference()
    outcomes = [chaos.iteration(n, INTERRUPTS) for n in range(INTERRUPTS)]
    s = summary(outcomes)
    bad = [o for o in outcomes if o.leaks or o.lost]
    assert not bad, f"{s}\n" + "\n".join(f"{o.signal} at {o.at_s} s ({o.phase}), exit {o.exit_code}: "
                                          f"{o.leaks + o.lost}" for o in bad)
    # the instants spread over the run (one in each fiftieth of it): preflight, the agents and the end all hit
    assert len(s["per_phase"]) >= 3, s
