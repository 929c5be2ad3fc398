"""`roughnet profiles check --all`: every link profile measured by ping and iperf3 against the figures it cites.

The meters are not roughnet's: ping's round trips and losses, iperf3's UDP rates, through the
wire with each profile, in namespaces, all profiles side by side (the rate phases one at a
time).  Every tolerance in spec/profiles.toml is the fit's own error plus four standard
deviations of the meter's sampling (300 pings), so a figure off here is a wrong profile, a
wrong wire or a wrong derivation, not chance (about 30 figures at 4 sigma: < 0.2 % per run).
The only allowance is a rate this machine cannot reach through the userspace wire, reported as such
and asserted to be that reason: iperf3 could not offer it, or the same offer with the link's rate taken
off (the wire's control socket) carried no more (the meter's limit, not the link's). A rate short of
its figure while the machine can carry more is measured once more (a passing stall of a 2-core
machine: seen once in a CI simulation, 208 of 347 Mbit/s) and the second measurement is judged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from roughnet.binaries import find_binary
from roughnet.spec import profiles as table

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)"),
    pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)"),
    pytest.mark.skipif(shutil.which("ping") is None or shutil.which("iperf3") is None,
                       reason="ping or iperf3 is not installed (make system-deps)"),
]


def test_every_profile_realises_the_figures_it_cites() -> None:
    out = subprocess.run([sys.executable, "-m", "roughnet.cli", "profiles", "check", "--all", "--json"],
                         capture_output=True, text=True, timeout=900)
    readings = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    expected = {(p.name, m.figure) for p in table.table() for m in p.meter}
    assert {(r["profile"], r["figure"]) for r in readings} == expected, out.stderr[-2000:]
    off = [r for r in readings if r["ok"] is False]
    assert not off, "\n".join(f"{r['profile']} {r['figure']}: cited {r['cited']} + {r['plus']}, measured "
                              f"{r['measured']} (± {r['tolerance']}; {r['meter']})" for r in off)
    unmeasured = [r for r in readings if r["ok"] is None]
    for r in unmeasured:  # only a rate beyond what iperf3 offers, or the wire carries, on this machine
        assert r["figure"] in ("up_mbps", "down_mbps") and r["meter"].startswith("not measurable here"), r
        assert "iperf3 sent only" in r["meter"] or "with the rate taken off the link" in r["meter"], r
    assert len(unmeasured) <= 2, unmeasured
    assert out.returncode == 0, out.stderr[-2000:]
    leftovers = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "meta" not in leftovers and "metb" not in leftovers
