"""The ns3 backend without ns-3: what preflight refuses (naming the key), the result lines it makes
from raw counts, and the CLI's refusal (exit 2, nothing created).  Nothing here imports ns-3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from specutil import plan_text

from roughnet.backends import BACKENDS, backend_for
from roughnet.backends.ns3 import preflight, results
from roughnet.errors import PreflightError

HOSTS = '[[host]]\nname = "a"\n[[host]]\nname = "b"\n[[host]]\nname = "c"\n'


def scenario(link: str = 'rate = "10 Mbit/s"\ndelay = "2 ms"', workload: str = "", between: str = '["a", "b"]',
             protocol: str = "udp", pattern: str = "stream", rate: str = 'rate = "100 msg/s"',
             extra: str = "") -> str:
    return (f'[scenario]\nname = "ns3-case"\nseed = 1\n{HOSTS}\n[[link]]\nbetween = {between}\n{link}\n'
            f'[workload]\npattern = "{pattern}"\nprotocol = "{protocol}"\nfrom = "a"\nto = ["b"]\n'
            f'payload = "1 KiB"\nduration = "1 s"\n{rate}\n{workload}\n{extra}')


def reasons(text: str) -> list[str]:
    (run,) = plan_text(text).runs
    return preflight.refusals(run)


def test_udp_stream_and_tcp_bulk_on_both_channel_kinds_pass():
    assert reasons(scenario()) == []
    assert reasons(scenario(between='["a", "b", "c"]', link='rate = "5 Mbit/s"\ndelay = "2 ms"\nloss = "1%"')) == []
    tcp = scenario(protocol="tcp", pattern="bulk", rate="",
                   workload='[workload.tcp]\nmss = "1436 B"\nsend_buffer = "128 KiB"\nsend_size = "1436 B"\n'
                            'congestion = "cubic"')
    assert reasons(tcp) == []
    ge = scenario(link='rate = "10 Mbit/s"\nloss_model = { model = "gilbert_elliott", p = "1%", r = "25%" }')
    assert reasons(ge) == []


@pytest.mark.parametrize("protocol", ["dds", "zenoh", "zmq"])
def test_protocols_ns3_cannot_run_are_named(protocol):
    got = reasons(scenario(protocol=protocol))
    assert any(f"protocol {protocol!r}" in r for r in got), got


@pytest.mark.parametrize(("link", "key"), [
    ('rate = "10 Mbit/s"\ndelay = "5 ms"\njitter = "1 ms"', "jitter"),
    ('rate = "10 Mbit/s"\nduplicate = "1%"', "duplicate"),
    ('rate = "10 Mbit/s"\ncorrupt = "1%"', "corrupt"),
    ('rate = "10 Mbit/s"\nloss_model = { model = "markov4", p13 = "1%" }', "loss_model 'markov4'"),
    ('delay = "2 ms"', "rate (forward) is unset"),
    ('rate = "10 Mbit/s"\ndelay = "2 ms"\n[link.forward]\ndelay = "5 ms"', "delay differs by direction"),
    ('rate = "10 Mbit/s"\ncapture = true', "capture"),
])
def test_link_keys_ns3_cannot_express_are_named(link, key):
    got = reasons(scenario(link=link))
    assert any(key in r for r in got), got


def test_gilbert_elliott_on_a_shared_segment_is_refused():
    ge = 'rate = "10 Mbit/s"\nloss_model = { model = "gilbert_elliott", p = "1%", r = "25%" }'
    assert any("loss_model on a shared segment" in r for r in reasons(scenario(between='["a", "b", "c"]', link=ge)))


def test_csma_pair_passes_and_needs_one_rate():
    assert reasons(scenario(link='rate = "5 Mbit/s"\ndelay = "2 ms"\nmedium = "csma"\nqueue = "100 packets"')) == []
    got = reasons(scenario(link='rate = "10 Mbit/s"\nmedium = "csma"\n[link.forward]\nrate = "5 Mbit/s"'))
    assert any("rate differs by direction" in r and "medium" in r for r in got), got


def test_shared_segment_needs_equal_directions():
    got = reasons(scenario(between='["a", "b", "c"]', link='rate = "10 Mbit/s"\n[link.forward]\nrate = "5 Mbit/s"'))
    assert any("rate differs by direction" in r and "CSMA" in r for r in got), got


def test_workload_shapes_it_cannot_play_are_named():
    # udp bulk and streams without a rate pass: the simulated sender keeps its queue full (apps.cc saturate)
    assert reasons(scenario(pattern="bulk", rate="")) == []
    assert reasons(scenario(rate="")) == []
    assert any("pattern 'stream'" in r for r in reasons(scenario(protocol="tcp")))  # tcp: bulk only
    fan_out = scenario(protocol="tcp", pattern="bulk", rate="").replace('to = ["b"]', 'to = ["b", "c"]')
    assert any("one receiver" in r for r in reasons(fan_out.replace('["a", "b"]', '["a", "b", "c"]')))
    got = reasons(scenario(protocol="tcp", pattern="bulk", rate="", workload='[workload.tcp]\ncongestion = "cdg"'))
    assert any("congestion = 'cdg'" in r for r in got), got


def test_check_raises_naming_the_run_and_the_key():
    with pytest.raises(PreflightError, match=r"run 0 \(single run\): cannot run on the ns3 backend: .*jitter"):
        preflight.check(plan_text(scenario(link='rate = "1 Mbit/s"\ndelay = "9 ms"\njitter = "1 ms"')))


def test_backend_is_listed_and_takes_no_kubernetes_options():
    assert "ns3" in BACKENDS
    assert backend_for("ns3", kubeconfig=None).name == "ns3"
    with pytest.raises(PreflightError, match="--image: only for --backend kubernetes"):
        backend_for("ns3", image="x")


# ---- result lines from raw counts ---------------------------------------------------------------------------


def test_latency_object_as_the_agent_makes_it():
    values = [5_000_000 + 1000 * i for i in range(1000)]  # 5.000 ms .. 5.999 ms
    lat = results.latency_object(values)
    assert lat["count"] == 1000
    assert lat["min_us"] == pytest.approx(5000, rel=1e-3)
    assert lat["max_us"] == pytest.approx(5999, rel=1e-3)
    assert lat["p50_us"] == pytest.approx(5499, rel=2e-3)
    back = HdrHistogram.decode(lat["hdr"])
    assert back.get_total_count() == 1000
    assert back.get_value_at_percentile(99) == pytest.approx(5_989_000, rel=2e-3)
    empty = results.latency_object([])
    assert empty["count"] == 0 and empty["p50_us"] is None and empty["hdr"].startswith("HISTF")


def test_stream_receiver_counts_loss_against_expected():
    r = results.stream_receiver({
        "expected": 10, "received": 8, "duplicates": 1, "reordered": 0, "warmup_received": 0, "bytes": 8 * 1024,
        "bad": 0, "highest": 9, "first_ns": 0, "last_ns": 1_000_000_000, "end_reason": "end_marker",
        "complete": False, "lat_intended": [1_000_000] * 8, "lat_actual": [1_000_000] * 8})
    assert (r["expected"], r["received"], r["lost"], r["duplicates"]) == (10, 8, 2, 1)
    assert r["throughput_bps"] == pytest.approx(8 * 1024 * 8)
    assert r["type"] == "result" and r["role"] == "receiver" and r["protocol"] == "udp"
    unknown = results.stream_receiver({**{k: 0 for k in ("received", "duplicates", "reordered", "warmup_received",
                                                         "bytes", "bad", "first_ns", "last_ns")},
                                       "expected": -1, "highest": -1, "end_reason": "timeout", "complete": False,
                                       "lat_intended": [], "lat_actual": []})
    assert unknown["expected"] is None and unknown["lost"] == 0 and unknown["throughput_bps"] is None


# ---- the command line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "named"), [
    (scenario(protocol="dds"), "protocol 'dds'"),
    (scenario(link='rate = "10 Mbit/s"\ndelay = "5 ms"\njitter = "1 ms"'), "jitter (forward)"),
])
def test_cli_refuses_what_ns3_cannot_express_and_creates_nothing(tmp_path: Path, text: str, named: str):
    path = tmp_path / "case.toml"
    path.write_text(text)
    results_dir = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "roughnet.cli", "run", str(path), "--backend", "ns3", "--results",
                          str(results_dir), "--no-report"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert named in out.stderr and "ns3" in out.stderr
    assert not results_dir.exists()


def test_cli_refuses_an_unknown_backend_in_a_list_and_creates_nothing(tmp_path: Path):
    path = tmp_path / "udp.toml"
    path.write_text(scenario())
    results_dir = tmp_path / "results"
    for value, said in (("namespace,ns4", "unknown backend 'ns4'"), ("ns3,ns3", "named twice")):
        out = subprocess.run([sys.executable, "-m", "roughnet.cli", "run", str(path), "--backend", value, "--results",
                              str(results_dir), "--no-report"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stdout + out.stderr
        assert said in out.stderr
    assert not results_dir.exists()


@pytest.mark.root  # the namespace backend's preflight comes first and needs root
def test_cli_side_by_side_checks_every_backend_before_running_any(tmp_path: Path):
    """namespace could run a DDS stream; ns3 cannot: nothing runs, exit 2 naming the protocol."""
    path = tmp_path / "dds.toml"
    path.write_text(scenario(protocol="dds"))
    results_dir = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "roughnet.cli", "run", str(path), "--backend", "namespace,ns3",
                          "--results", str(results_dir), "--no-report"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "protocol 'dds'" in out.stderr
    assert not results_dir.exists()


def test_doctor_reports_ns3_from_the_package_metadata():
    from importlib import metadata

    from roughnet.doctor import checks

    (check,) = [c for c in checks() if c.name == "ns-3"]
    try:
        installed = metadata.version("ns3")
    except metadata.PackageNotFoundError:
        installed = None
    assert check.ok == (installed is not None) and not check.required
    assert (installed or "make") in check.detail


def test_senders_that_did_not_finish_say_timeout():
    base = {"sent": 3, "warmup_sent": 0, "bytes": 3072, "send_errors": 0, "first_ns": 0, "last_ns": 2_000_000_000}
    assert results.stream_sender(base | {"finished": True}, 1)["end_reason"] == "complete"
    assert results.stream_sender(base | {"finished": False}, 1)["end_reason"] == "timeout"
    bulk = {"sent": 1, "bytes": 1024, "send_errors": 0, "first_ns": 0, "last_ns": 1}
    assert results.bulk_sender(bulk | {"closed": False}, 1)["end_reason"] == "timeout"


def test_hosts_positions_are_refused_not_ignored():
    """A radio segment whose per-pair links come from the hosts' positions: ns-3's CSMA has no such model."""
    text = ('[scenario]\nname = "ns3-pos"\nseed = 1\n'
            '[[host]]\nname = "a"\nposition = ["0 m", "0 m"]\n[[host]]\nname = "b"\nposition = ["50 m", "0 m"]\n'
            '[[host]]\nname = "c"\nposition = ["900 m", "0 m"]\n'
            '[[link]]\nbetween = ["a", "b", "c"]\nprofile = "v2v-80211p"\nrate = "6 Mbit/s"\n'
            '[workload]\npattern = "stream"\nprotocol = "udp"\nfrom = "a"\nto = ["b", "c"]\npayload = "300 B"\n'
            'messages = 10\nrate = "10 msg/s"\n')
    got = reasons(text)
    assert any("positions" in r for r in got), got
