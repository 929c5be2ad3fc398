"""The ROS 2 endpoint without a network: its message against rclpy's own serialization, its configuration
checks (exit 2 naming the key, before any node exists), its QoS from the knobs, its names against rclpy's
name rules, and the scenario side of protocol ros2 (roughnet validate refuses bad knobs with exit 2).

Skips (with the reason) what needs the ROS 2 wheels when they are not installed (make extras)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roughnet.ros2 import endpoint, launch, qos, wire

_NO_ROS = pytest.mark.skipif(bool(launch.missing()), reason="the ROS 2 wheels are not installed (make extras)")
#: rosidl's parser (imported by the first type support load) imports lark, which imports the deprecated sre_parse and sre_constants.
_LARK = pytest.mark.filterwarnings("ignore:module 'sre_(parse|constants)' is deprecated:DeprecationWarning")


def ROS(f):  # noqa: N802 (a marker)
    return _NO_ROS(_LARK(f))
BASE = {"v": 1, "protocol": "ros2", "pattern": "stream", "role": "receiver", "listen": "198.18.0.2:5201",
        "payload_bytes": 100, "messages": 10, "topic": "roughnet/0123456789ab"}


@ROS
@pytest.mark.parametrize("size", [32, 33, 100, 1500, 70_000])
def test_the_cdr_is_what_rclpy_serializes_for_a_uint8multiarray(size: int) -> None:
    from rclpy.serialization import deserialize_message, serialize_message
    from std_msgs.msg import UInt8MultiArray

    msg = wire.message(wire.FLAG_WARMUP, 7, 11, 12, size)
    m = UInt8MultiArray()
    m.data = bytes(msg)
    assert wire.to_cdr(msg) == serialize_message(m)
    back = deserialize_message(wire.to_cdr(msg), UInt8MultiArray)
    assert bytes(back.data) == bytes(msg) and not back.layout.dim
    data = wire.from_cdr(serialize_message(m))
    assert data is not None and bytes(data) == bytes(msg)
    assert wire.parse(data) == wire.Header(wire.FLAG_WARMUP, 7, 11, 12)


@ROS
def test_someone_elses_array_is_not_ours() -> None:
    from rclpy.serialization import serialize_message
    from std_msgs.msg import MultiArrayDimension, UInt8MultiArray

    m = UInt8MultiArray()
    m.layout.dim = [MultiArrayDimension(label="x", size=3, stride=3)]
    m.data = bytes(wire.message(0, 1, 2, 3, 64))
    assert wire.from_cdr(serialize_message(m)) is None
    m2 = UInt8MultiArray()
    m2.data = b"\x00" * 64  # no magic
    assert wire.parse(wire.from_cdr(serialize_message(m2))) is None


def test_latency_object_percentiles_and_its_histogram() -> None:
    from hdrh.histogram import HdrHistogram

    values = [1_000_000 + 1000 * i for i in range(1000)]  # 1.000 ms .. 1.999 ms
    lat = wire.latency_object(values)
    assert lat["count"] == 1000 and lat["min_us"] == 1000.0 and lat["max_us"] == 1999.0
    assert lat["p50_us"] == 1499.0 and lat["p99_us"] == 1989.0
    h = HdrHistogram.decode(lat["hdr"])
    assert h.get_total_count() == 1000
    assert abs(h.get_value_at_percentile(50) - 1_499_000) <= 1_499_000 * 0.001 + 1
    empty = wire.latency_object([])
    assert empty["count"] == 0 and empty["p50_us"] is None and HdrHistogram.decode(empty["hdr"]).get_total_count() == 0


def test_schedule_splits_held_from_own_lag() -> None:
    s = wire.Schedule()
    s.record(intended_ns=0, actual_ns=5_000_000, prev_return_ns=4_000_000)  # held 4 ms, own 1 ms
    s.record(intended_ns=10_000_000, actual_ns=10_000_000, prev_return_ns=6_000_000)
    r = s.result()
    assert r["behind_max_us"] == 5000.0 and r["own_behind_max_us"] == 1000.0
    assert r["held_fraction"] == 0.5 and r["held_s"] == 0.004 and r["late_fraction"] == 0.5


@pytest.mark.parametrize(("options", "expected"), [
    ({}, qos.Qos(True, 10, False)),
    ({"profile": "sensor_data"}, qos.Qos(False, 5, False)),
    ({"profile": "sensor_data", "reliability": "reliable", "history_depth": 0}, qos.Qos(True, 0, False)),
    ({"profile": "services_default", "durability": "transient_local"}, qos.Qos(True, 10, True)),
])
def test_profiles_refined_key_by_key(options: dict, expected: qos.Qos) -> None:
    assert qos.from_options(options) == expected


@ROS
def test_profiles_are_rclpys() -> None:
    from rclpy import qos as rq

    for name, preset in (("default", rq.qos_profile_system_default), ("sensor_data", rq.qos_profile_sensor_data),
                         ("services_default", rq.qos_profile_services_default)):
        if name == "default":
            preset = rq.QoSPresetProfiles.DEFAULT.value
        ours = qos.to_rclpy(qos.from_options({"profile": name}))
        assert (ours.reliability, ours.history, ours.depth, ours.durability) == \
            (preset.reliability, preset.history, preset.depth, preset.durability), name


@ROS
@pytest.mark.parametrize("topic", ["roughnet/0123456789ab", "roughnet/0123456789ab/host1", "a-b/c.d/9x", "/x//y/"])
def test_every_name_the_endpoint_makes_is_legal_for_rclpy(topic: str) -> None:
    from rclpy.validate_full_topic_name import validate_full_topic_name

    base = endpoint.ros_name(topic)
    for name in (f"{base}/data", f"{base}/ping", f"{base}/ready",
                 f"{base}/pong/{endpoint.addr_token('198.18.0.2:5201')}",
                 f"{base}/pong/{endpoint.addr_token('127.0.0.1:5201')}"):
        assert validate_full_topic_name(name), name
    assert endpoint.ros_name("roughnet/0123ab") == "/roughnet/r0123ab"  # the dds driver's ros2 mode's rule


def run_endpoint(cfg: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roughnet.ros2.endpoint", "run", "--config-json", json.dumps(cfg)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("change", "key"), [
    ({"options": {"depth": 3}}, "options.depth"),
    ({"options": {"profile": "sensors"}}, "options.profile"),
    ({"options": {"reliability": "reliable "}}, "options.reliability"),
    ({"options": {"history_depth": -1}}, "options.history_depth"),
    ({"options": {"durability": "persistent"}}, "options.durability"),
    ({"pattern": "bulk"}, "duration_ms"),
    ({"pattern": "bulk", "messages": None, "duration_ms": 1000, "warmup": 3}, "warmup"),
    ({"pattern": "sync"}, "pattern"),
    ({"role": "pinger"}, "role"),
    ({"listen": "localhost"}, "listen"),
    ({"payload_bytes": 31}, "payload_bytes"),
    ({"broker": "198.18.0.1:1883"}, "broker"),
    ({"trace_path": "/nonexistent-dir/rx.trace"}, "trace_path"),
    ({"trace_path": ""}, "trace_path"),
    ({"pattern": "ping", "role": "ponger", "trace_path": "/tmp/x.trace"}, "trace_path"),
    ({"colour": "red"}, "colour"),
    ({"duration_ms": 1000}, "messages"),
])
def test_bad_configuration_exits_2_naming_the_key_before_any_node(change: dict, key: str) -> None:
    p = run_endpoint(BASE | change)
    assert p.returncode == 2, p.stdout + p.stderr
    line = json.loads(p.stdout.strip().splitlines()[-1])
    assert line["type"] == "error" and line["kind"] == "config" and line["message"].startswith(key + ":"), line
    assert '"ready"' not in p.stdout


@ROS
def test_version_line() -> None:
    p = subprocess.run([sys.executable, "-m", "roughnet.ros2.endpoint", "version"], capture_output=True, text=True,
                       timeout=60, check=True)
    v = json.loads(p.stdout)
    assert v["protocols"] == ["ros2"] and v["message_type"] == "std_msgs/msg/UInt8MultiArray"


SCENARIO = """
[scenario]
name = "r2"
timeout = "30 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
[workload]
protocol = "ros2"
pattern = "{pattern}"
from = "a"
to = "b"
messages = 10
payload = "100 B"
{extra}
"""


@pytest.mark.parametrize(("pattern", "extra", "words"), [
    ("stream", '[workload.ros2]\nqos = "best_effort"', ['workload.ros2.qos: unknown key: not a knob of protocol "ros2"']),
    ("stream", '[workload.ros2]\nprofile = "sensor"', ["workload.ros2.profile", '"sensor_data"']),
    ("stream", '[workload.ros2]\nhistory_depth = -1', ["workload.ros2.history_depth"]),
    ("stream", '[workload.ros2]\ndurability = "persistent"', ["workload.ros2.durability"]),
    ("ping", '[workload.dds]\nreliability = "reliable"', ['workload.dds: [workload.dds] knobs given for protocol "ros2"']),
])
def test_roughnet_validate_refuses_bad_ros2_knobs_with_exit_2(tmp_path: Path, pattern: str, extra: str,
                                                               words: list[str]) -> None:
    f = tmp_path / "s.toml"
    f.write_text(SCENARIO.format(pattern=pattern, extra=extra))
    p = subprocess.run([sys.executable, "-m", "roughnet.cli", "validate", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


def test_roughnet_validate_refuses_sync_for_ros2_and_accepts_ping(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(SCENARIO.format(pattern="sync", extra="[workload.sync]\nbundles = 10").replace("messages = 10\n", ""))
    p = subprocess.run([sys.executable, "-m", "roughnet.cli", "validate", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and 'workload.pattern: protocol "ros2" has no pattern "sync" yet' in p.stderr, p.stderr
    f.write_text(SCENARIO.format(pattern="ping", extra='[workload.ros2]\nprofile = "sensor_data"\nhistory_depth = 0'))
    p = subprocess.run([sys.executable, "-m", "roughnet.cli", "validate", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_doctor_reports_the_ros2_wheels() -> None:
    from importlib import metadata

    from roughnet.doctor import checks

    (check,) = [c for c in checks() if c.name == "ROS 2 (protocol ros2)"]
    installed = []
    for package in ("ros-rclpy", "ros-std-msgs", "ros-rmw-fastrtps-cpp"):
        try:
            installed.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            pass
    assert check.ok == (len(installed) == 3) and not check.required, check
    assert ("rclpy" if check.ok else "make extras") in check.detail



def _longest(kind, letter: str) -> int:
    """The longest name of ``letter`` the spec's name kind ``kind`` accepts."""
    def ok(n: int) -> bool:
        try:
            kind.check(letter * n)
        except ValueError:
            return False
        return True

    return max(n for n in range(1, 300) if ok(n))


def test_no_scenario_can_give_a_ros_name_longer_than_ros_allows():
    """The runner's topics are bounded by the spec's names, so `validate` needs no ROS 2 name-length check:
    the longest (a flow's topic with the longest workload and host names, the ponger reply topic and the
    service of the longest IPv4 address and port) stays within ROS's 255 - 8 characters, as rclpy checks it."""
    from rclpy.validate_full_topic_name import validate_full_topic_name

    from roughnet.spec.model import WORKLOAD_NAME
    from roughnet.spec.table import HOST

    wname = "w" * _longest(WORKLOAD_NAME, "w")
    host = "h" * _longest(HOST, "h")
    assert (len(wname), len(host)) == (16, 8)
    topic = f"roughnet/{'0' * 12}/{wname}/{host}"  # run.timeline.plan_flows: roughnet/<run id>/<workload>/<sender>
    base = endpoint.ros_name(topic)
    longest = [f"{base}/pong/{endpoint.addr_token('198.18.255.255:65535')}",
               endpoint.service_name(base, "198.18.255.255:65535") + "Request"]
    for name in longest:
        assert len(name) <= 255 - 8, name
        validate_full_topic_name(name)
