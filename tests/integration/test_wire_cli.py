"""roughnet-wire's command line without namespaces: bad input exits 2 with a JSON error line naming the
problem, before any socket is opened (needs only the built binary, not root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from roughnet.binaries import find_binary  # noqa: E402

WIRE = find_binary("roughnet-wire")

pytestmark = pytest.mark.skipif(
    WIRE is None,
    reason="roughnet-wire is not built (CARGO_TARGET_DIR=/var/cache/roughnet/target cargo build --release -p roughnet-wire)",
)


def run_wire(*args: str, stdin: str | None = None) -> tuple[int, dict, str]:
    out = subprocess.run([str(WIRE), *args], input=stdin, capture_output=True, text=True, timeout=30, check=False)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    return out.returncode, lines[0], out.stderr


def test_unknown_config_key_is_exit_2_naming_the_key(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"a_to_b": {"delay": "10 ms"}}))
    code, line, err = run_wire("--if-a", "lo", "--if-b", "x", "--config", str(cfg), "--seed", "1")
    assert code == 2
    assert line["type"] == "error" and line["kind"] == "config"
    assert "delay" in line["message"] and str(cfg) in line["message"]
    assert "delay" in err


def test_out_of_range_value_is_exit_2():
    code, line, _ = run_wire("--if-a", "a0", "--if-b", "b0", "--config", "-", "--seed", "1",
                             stdin=json.dumps({"a_to_b": {"loss": {"model": "bernoulli", "p": 1.5}}}))
    assert code == 2 and line["kind"] == "config" and "p" in line["message"]


def test_missing_interface_is_exit_2(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    code, line, _ = run_wire("--if-a", "rnnothere0", "--if-b", "rnnothere1", "--config", str(cfg), "--seed", "1")
    assert code == 2 and "rnnothere0" in line["message"] and "does not exist" in line["message"]


def test_same_interface_twice_and_missing_seed_are_exit_2(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    code, line, _ = run_wire("--if-a", "lo", "--if-b", "lo", "--config", str(cfg), "--seed", "1")
    assert code == 2 and "--if-a and --if-b" in line["message"]
    code, line, _ = run_wire("--if-a", "lo", "--if-b", "x", "--config", str(cfg))
    assert code == 2 and "--seed" in line["message"]


def test_unreadable_config_file_is_exit_2(tmp_path):
    code, line, _ = run_wire("--if-a", "a", "--if-b", "b", "--config", str(tmp_path / "none.json"), "--seed", "1")
    assert code == 2 and "none.json" in line["message"]


def test_unknown_profile_lists_the_known_ones():
    code, line, _ = run_wire("--if-a", "a", "--if-b", "b", "--profile", "moon-link", "--seed", "1")
    assert code == 2 and "moon-link" in line["message"] and "ethernet-1g" in line["message"]


def test_print_profile_is_a_link_config():
    out = subprocess.run([str(WIRE), "--print-profile", "satellite-geo"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    cfg = json.loads(out.stdout)
    assert set(cfg) >= {"a_to_b", "b_to_a"}
    assert cfg["a_to_b"]["delay_ns"] > 100_000_000  # a geostationary hop is over 100 ms one way
    code, line, _ = run_wire("--print-profile", "moon-link")
    assert code == 2 and "moon-link" in line["message"]


def test_two_threads_where_the_directions_are_coupled_is_exit_2():
    # Half duplex (the hf-modem profile) couples the two directions: one loop only.
    code, line, _ = run_wire("--if-a", "a0", "--if-b", "b0", "--profile", "hf-modem", "--seed", "1", "--threads", "2")
    assert code == 2 and line["kind"] == "config" and "--threads 2" in line["message"] and "half_duplex" in line["message"]
    code, line, _ = run_wire("--if-a", "a0", "--if-b", "b0", "--config", "-", "--seed", "1", "--threads", "2",
                             stdin=json.dumps({"csma": {}}))
    assert code == 2 and "csma" in line["message"]
    # A shared segment is one loop.
    code, line, _ = run_wire("--port", "p0", "--port", "p1", "--port", "p2", "--config", "-", "--seed", "1",
                             "--threads", "2", stdin="{}")
    assert code == 2 and "shared segment of 3 ports" in line["message"]
    code, line, _ = run_wire("--if-a", "a0", "--if-b", "b0", "--config", "-", "--seed", "1", "--threads", "3",
                             stdin="{}")
    assert code == 2 and "--threads" in line["message"]
