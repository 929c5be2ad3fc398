"""An agent built without some drivers (issue 31: `make demo` builds tcp and udp only): preflight refuses a
scenario whose protocol it lacks (exit 2, naming the protocol and `make build`, nothing created) and
`roughnet doctor` lists the drivers it has.  The agent here is a script printing a version line: no root,
no namespaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from specutil import plan_text

from roughnet import binaries
from roughnet.errors import PreflightError

MINIMAL = {"v": 1, "type": "version", "agent": "0.1.0", "build": "minimal",
           "missing": ["mqtt", "kafka", "nats", "zenoh", "zmq", "dds"],
           "patterns": ["stream", "ping", "ramp", "bulk", "sync"], "protocols": ["tcp", "udp"]}
FULL = {**MINIMAL, "build": "full", "missing": [], "protocols": list(binaries.AGENT_DRIVERS)}


def fake_agent(folder: Path, version: dict) -> Path:
    """An executable that answers `version` with ``version`` and fails anything else (it must not be run)."""
    path = folder / "roughnet-agent"
    path.write_text("#!/bin/sh\n"
                    f"[ \"$1\" = version ] && {{ echo '{json.dumps(version)}'; exit 0; }}\n"
                    "echo 'fake agent: only version' >&2; exit 99\n")
    path.chmod(0o755)
    return path


def scenario(protocols: list[str], extra: str = "") -> str:
    return ('[scenario]\nname = "drivers"\nseed = 1\n[[host]]\nname = "a"\n[[host]]\nname = "b"\n'
            '[[link]]\nbetween = ["a", "b"]\nrate = "10 Mbit/s"\n'
            '[workload]\npattern = "stream"\nprotocol = "${protocol}"\nfrom = "a"\nto = ["b"]\n'
            'messages = 10\nrate = "100 msg/s"\npayload = "256 B"\n'
            f'[sweep]\nprotocol = {json.dumps(protocols)}\n{extra}')


class NoProbe:
    """A backend whose probe must not be reached (a refusal of the agent comes first)."""

    name = "namespace"

    def probe(self):
        raise AssertionError("probe reached: the missing driver was not refused first")


def test_message_names_each_missing_protocol_its_runs_and_the_make_target():
    msg = binaries.lacking_drivers_message("/x/bin/roughnet-agent", MINIMAL,
                                           {"tcp": [0], "zenoh": [1, 3], "dds": [2]})
    assert msg is not None
    assert "without the zenoh and dds drivers" in msg, msg
    assert "protocol 'zenoh': runs 1, 3" in msg and "protocol 'dds': run 2" in msg, msg
    assert "`make build`" in msg and "a minimal build" in msg and "drivers: tcp, udp" in msg, msg
    assert "'tcp'" not in msg  # tcp is built
    assert binaries.lacking_drivers_message("/x", MINIMAL, {"tcp": [0], "udp": [1]}) is None
    assert binaries.lacking_drivers_message("/x", FULL, {p: [0] for p in binaries.AGENT_DRIVERS}) is None
    kafka = binaries.lacking_drivers_message("/x", MINIMAL, {"kafka": [0]})
    assert "`make build`" in kafka and "`make setup`" in kafka, kafka  # the broker's jars too


def test_an_agent_without_the_missing_field_is_taken_at_its_protocols():
    old = {k: v for k, v in FULL.items() if k not in ("build", "missing")}
    assert binaries.agent_drivers(old) == (list(binaries.AGENT_DRIVERS), [])
    assert binaries.lacking_drivers_message("/x", old, {"zenoh": [0]}) is None


def test_preflight_refuses_a_protocol_the_agent_lacks_before_probing(tmp_path, monkeypatch):
    from roughnet.run import preflight

    monkeypatch.setenv("ROUGHNET_AGENT", str(fake_agent(tmp_path, MINIMAL)))
    binaries.agent_version.cache_clear()
    sweep = plan_text(scenario(["udp", "dds"]))
    with pytest.raises(PreflightError) as info:
        preflight(sweep, NoProbe())
    msg = str(info.value)
    assert "without the dds driver" in msg and "protocol 'dds': run 1" in msg and "`make build`" in msg, msg
    assert info.value.exit_code == 2


def test_preflight_counts_every_workload_of_a_run(tmp_path, monkeypatch):
    from roughnet.run import preflight

    monkeypatch.setenv("ROUGHNET_AGENT", str(fake_agent(tmp_path, MINIMAL)))
    binaries.agent_version.cache_clear()
    text = ('[scenario]\nname = "two"\nseed = 1\n[[host]]\nname = "a"\n[[host]]\nname = "b"\n'
            '[[link]]\nbetween = ["a", "b"]\nrate = "10 Mbit/s"\n'
            '[[workload]]\nname = "w1"\npattern = "stream"\nprotocol = "udp"\nfrom = "a"\nto = "b"\n'
            'duration = "1 s"\nrate = "10 msg/s"\npayload = "256 B"\n'
            '[[workload]]\nname = "w2"\npattern = "stream"\nprotocol = "zmq"\nfrom = "a"\nto = "b"\n'
            'duration = "1 s"\nrate = "10 msg/s"\npayload = "256 B"\n')
    with pytest.raises(PreflightError, match="without the zmq driver"):
        preflight(plan_text(text), NoProbe())


def cli(args: list[str], agent: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ROUGHNET_AGENT=str(agent), ROUGHNET_RESULTS=str(cwd / "env-results"))
    return subprocess.run([sys.executable, "-m", "roughnet.cli", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def test_cli_run_exits_2_naming_protocol_and_make_target_and_creates_nothing(tmp_path):
    agent = fake_agent(tmp_path, MINIMAL)
    path = tmp_path / "zenoh.toml"
    path.write_text(scenario(["tcp", "zenoh"]))
    results_dir = tmp_path / "results"
    ledgers = set(Path("/run/roughnet/ledger").glob("*")) if Path("/run/roughnet/ledger").is_dir() else set()
    out = cli(["run", str(path), "--results", str(results_dir), "--no-report"], agent, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    text = " ".join((out.stdout + out.stderr).split())  # rich wraps long lines
    assert "zenoh" in text and "make build" in text, text
    assert not results_dir.exists() and not (tmp_path / "env-results").exists()
    after = set(Path("/run/roughnet/ledger").glob("*")) if Path("/run/roughnet/ledger").is_dir() else set()
    assert not {p for p in after - ledgers if str(os.getpid()) in p.name}  # no probe of ours left a ledger


def test_doctor_lists_the_agents_drivers_and_what_adds_the_rest(tmp_path, monkeypatch):
    from roughnet.doctor import checks

    monkeypatch.setenv("ROUGHNET_AGENT", str(fake_agent(tmp_path, MINIMAL)))
    binaries.agent_version.cache_clear()
    by_name = {c.name: c for c in checks()}
    drivers = by_name["agent drivers"]
    assert drivers.detail.startswith("tcp, udp;"), drivers.detail
    assert "without mqtt, kafka, nats, zenoh, zmq, dds" in drivers.detail and "`make build`" in drivers.detail
    assert not drivers.ok and not drivers.required  # a warning: the quick start runs without them
    assert "minimal build" in by_name["roughnet-agent"].detail

    full = tmp_path / "full"
    full.mkdir()
    monkeypatch.setenv("ROUGHNET_AGENT", str(fake_agent(full, FULL)))
    binaries.agent_version.cache_clear()
    drivers = {c.name: c for c in checks()}["agent drivers"]
    assert drivers.ok and drivers.detail == ", ".join(binaries.AGENT_DRIVERS), drivers.detail
    binaries.agent_version.cache_clear()
