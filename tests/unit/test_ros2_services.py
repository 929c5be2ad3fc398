"""ROS 2 services and bad input without a network: the generated roughnet_msgs/srv/Bytes against the dds
driver's wire shape, the ``request_reply`` knob (endpoint and scenario), ROS names that ROS refuses (exit 2
naming ``topic``), and which QoS combinations of the knobs rclpy/rmw_fastrtps accept.

Skips (with the reason) what needs the ROS 2 wheels or the generated type when they are missing (make extras)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roughnet.ros2 import endpoint, launch, qos, typegen, wire

_NO_ROS = pytest.mark.skipif(bool(launch.missing()), reason="the ROS 2 wheels are not installed (make extras)")
_NO_TYPE = pytest.mark.skipif(not typegen.installed(), reason="roughnet_msgs/srv/Bytes is not built (make extras)")
_LARK = pytest.mark.filterwarnings("ignore:module 'sre_(parse|constants)' is deprecated:DeprecationWarning")
PING = {"v": 1, "protocol": "ros2", "pattern": "ping", "role": "ponger", "listen": "198.18.0.2:5201",
        "payload_bytes": 100, "messages": 10, "topic": "roughnet/0123456789ab"}


@_NO_ROS
@_NO_TYPE
@_LARK
@pytest.mark.parametrize("size", [32, 1500, 70_000])
def test_the_service_types_carry_the_message_as_the_dds_drivers_bytes(size: int) -> None:
    """Request and response serialize to encapsulation + one sequence<octet>: what the dds driver writes on rq/rr."""
    from rclpy.serialization import deserialize_message, serialize_message

    Bytes = typegen.load()
    msg = bytes(wire.message(0, 3, 1, 2, size))
    for cls in (Bytes.Request, Bytes.Response):
        raw = serialize_message(cls(data=msg))
        assert raw == b"\x00\x01\x00\x00" + len(msg).to_bytes(4, "little") + msg
        assert bytes(deserialize_message(raw, cls).data) == msg


@_NO_TYPE
def test_the_agents_service_type_names_and_hashes_are_the_generated_ones() -> None:
    """The dds driver's constants (crates/agent/src/drivers/dds/ffi.rs, SERVICE_TYPES) are the built type's DDS
    names and the type hashes rosidl computed for it."""
    src = (Path(__file__).parents[2] / "crates/agent/src/drivers/dds/ffi.rs").read_text()
    srv = typegen.library_dir() / "srv"
    for dds_name, part in ((typegen.REQUEST_TYPE, "Bytes_Request"), (typegen.RESPONSE_TYPE, "Bytes_Response")):
        hashes = json.loads((srv / f"{part}.json").read_text())["type_hashes"]
        (h,) = [x["hash_string"] for x in hashes if x["type_name"] == f"roughnet_msgs/srv/{part}"]
        assert f'"{dds_name}",\n        "{h}",' in src, (dds_name, h)


@pytest.mark.parametrize(("options", "pattern", "words"), [
    ({"request_reply": "rpc"}, "ping", ["options.request_reply", '"service"']),
    ({"request_reply": "service"}, "stream", ["options.request_reply", "ping and ramp"]),
])
def test_request_reply_knob_errors_name_the_key(options: dict, pattern: str, words: list[str]) -> None:
    cfg = dict(PING, options=options, pattern=pattern)
    if pattern == "stream":
        cfg["role"] = "receiver"
    with pytest.raises(endpoint.ConfigError) as e:
        endpoint.check_config(cfg)
    for w in words:
        assert w in str(e.value)


def test_request_reply_service_is_accepted_for_ping_and_ramp() -> None:
    assert endpoint.check_config(dict(PING, options={"request_reply": "service"}))["service"]
    assert not endpoint.check_config(dict(PING))["service"]
    assert qos.from_options({"request_reply": "topics"}) == qos.from_options({})


@_NO_ROS
@_LARK
@pytest.mark.parametrize("topic", ["a/" * 130, "/", "//"])
def test_topics_ros_refuses_exit_2_naming_topic(topic: str) -> None:
    p = subprocess.run([sys.executable, "-m", "roughnet.ros2.endpoint", "run", "--config-json",
                        json.dumps(dict(PING, topic=topic))], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    err = json.loads(p.stdout.splitlines()[-1])
    assert err["kind"] == "config" and err["message"].startswith("topic:"), err


@_NO_ROS
@_LARK
def test_every_qos_combination_of_the_knobs_is_one_rclpy_accepts(tmp_path: Path) -> None:
    """Reliability x durability x depth (0 = keep all, 1, the bound): rmw_fastrtps creates a publisher and a
    subscription for each, so no combination of these knobs is a configuration error (found by trying)."""
    code = f"""
import itertools, os
os.environ["FASTDDS_BUILTIN_TRANSPORTS"] = "UDPv4"
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOG_DIR"] = {str(tmp_path)!r}
import rclpy
from std_msgs.msg import UInt8MultiArray
from roughnet.ros2 import qos
rclpy.init()
n = rclpy.create_node("qos_probe")
ok = 0
for rel, dur, depth in itertools.product(qos.RELIABILITY, qos.DURABILITY, (0, 1, qos.DEPTH_MAX)):
    q = qos.to_rclpy(qos.from_options({{"reliability": rel, "durability": dur, "history_depth": depth}}))
    p = n.create_publisher(UInt8MultiArray, "/qos_probe", q)
    s = n.create_subscription(UInt8MultiArray, "/qos_probe", lambda m: None, q)
    n.destroy_publisher(p)
    n.destroy_subscription(s)
    ok += 1
print(ok)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split()[-1] == "12", p.stdout + p.stderr[-2000:]


SCENARIO = """
[scenario]
name = "r2s"
timeout = "30 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
[workload]
protocol = "{protocol}"
pattern = "ping"
from = "a"
to = "b"
messages = 10
payload = "100 B"
{extra}
"""


@pytest.mark.parametrize(("protocol", "extra", "code", "words"), [
    ("ros2", '[workload.ros2]\nrequest_reply = "rpc"', 2, ["workload.ros2.request_reply"]),
    ("ros2", '[workload.ros2]\nrequest_reply = "service"', 0, []),
    ("dds", '[workload.dds]\nros2 = true\nrequest_reply = "service"', 0, []),
    ("dds", '[workload.dds]\nrequest_reply = "both"', 2, ["workload.dds.request_reply"]),
])
def test_roughnet_validate_checks_request_reply(tmp_path: Path, protocol: str, extra: str, code: int,
                                                words: list[str]) -> None:
    f = tmp_path / "s.toml"
    f.write_text(SCENARIO.format(protocol=protocol, extra=extra))
    p = subprocess.run([sys.executable, "-m", "roughnet.cli", "validate", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == code, p.stdout + p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


class _Call:
    """A service call's future that a fake client answers (or not)."""

    def __init__(self, answered: bool) -> None:
        self.answered = answered

    def done(self) -> bool:
        return self.answered


class _Client:
    """A client whose first ``lost`` calls are never answered (a lost request whose client gave up)."""

    def __init__(self, lost: int) -> None:
        self.lost, self.calls = lost, []

    def call_async(self, req):
        assert wire.parse(bytes(req.data)).flags & wire.FLAG_END
        self.calls.append(_Call(len(self.calls) >= self.lost))
        return self.calls[-1]


class _Node:
    def spin(self, timeout_s: float) -> None:
        pass


class _Bytes:
    class Request:
        def __init__(self, data: bytes) -> None:
            self.data = data


@pytest.mark.parametrize(("lost", "calls"), [(0, 1), (1, 2), (3, 4)])
def test_the_service_pinger_calls_the_end_marker_again_until_answered(monkeypatch, lost: int, calls: int) -> None:
    """A lost end call is not repaired once the pinger is gone (the ponger then waited for its own timeout): the
    pinger calls again every reply timeout until each ponger answers, and no more than that."""
    clock = iter(range(0, 10**12, 10_000_000))  # 10 ms a look at the clock
    monkeypatch.setattr(endpoint, "now_ns", lambda: next(clock))
    lossy, fine = _Client(lost), _Client(0)
    endpoint.end_service_calls(_Node(), [lossy, fine], _Bytes, 7, reply_ns=100_000_000, deadline_ns=60 * 10**9)
    assert len(lossy.calls) == calls and len(fine.calls) == 1


def test_the_service_pinger_gives_up_on_the_end_marker_at_its_deadline(monkeypatch) -> None:
    clock = iter(range(0, 10**12, 10_000_000))
    monkeypatch.setattr(endpoint, "now_ns", lambda: next(clock))
    dead = _Client(10**6)
    endpoint.end_service_calls(_Node(), [dead], _Bytes, 7, reply_ns=100_000_000, deadline_ns=1_000_000_000)
    assert 9 <= len(dead.calls) <= 11  # one call every 100 ms for the second left
