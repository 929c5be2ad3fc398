"""The QoS of the ``ros2`` endpoint's topics, from the knobs (docs/protocols.md, ``[workload.ros2]``).

A run names one of rclpy's profiles (``profile``: ``default``, ``sensor_data``, ``services_default``,
the profiles ROS users pick by name) and refines it key by key (``reliability``, ``history_depth``,
``durability``), as rclpy code does.  Plain data here (no rclpy import), so the spec checks the
knobs without ROS installed; ``to_rclpy`` builds the ``QoSProfile``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: rclpy's profiles (rclpy.qos.qos_profile_*, from rmw's qos_profiles.h): reliable?, depth (0 = keep all),
#: transient local?
PROFILES: dict[str, tuple[bool, int, bool]] = {
    "default": (True, 10, False),  # rmw_qos_profile_default: reliable, keep last 10, volatile
    "sensor_data": (False, 5, False),  # rmw_qos_profile_sensor_data: best effort, keep last 5, volatile
    "services_default": (True, 10, False),  # rmw_qos_profile_services_default: reliable, keep last 10, volatile
}
DEFAULT_PROFILE = "default"
RELIABILITY = ("reliable", "best_effort")
DURABILITY = ("volatile", "transient_local")
#: Depth bound: Fast DDS preallocates the history (``depth`` samples of the type's size) per writer.
DEPTH_MAX = 1_000_000
KNOBS = ("profile", "reliability", "history_depth", "durability", "request_reply")
#: ``request_reply``: ping and ramp over topics (the default; the dds driver's shape) or as a ROS 2 service
#: (roughnet_msgs/srv/Bytes, roughnet.ros2.typegen).
REQUEST_REPLY = ("topics", "service")


class QosError(ValueError):
    """A knob with no meaning: names the knob, the value and what was expected."""


@dataclass(frozen=True)
class Qos:
    reliable: bool
    depth: int  # 0 = keep all
    transient_local: bool

    def describe(self) -> dict[str, Any]:
        return {"reliability": "reliable" if self.reliable else "best_effort",
                "history": "keep_all" if self.depth == 0 else f"keep_last {self.depth}",
                "durability": "transient_local" if self.transient_local else "volatile"}  # fmt: skip


def from_options(options: dict[str, Any]) -> Qos:
    """The QoS the options name; raises QosError naming the first bad knob."""
    unknown = sorted(set(options) - set(KNOBS))
    if unknown:
        raise QosError(f"options.{unknown[0]}: not a knob of protocol \"ros2\"; expected one of: {', '.join(KNOBS)}")
    profile = options.get("profile", DEFAULT_PROFILE)
    if profile not in PROFILES:
        raise QosError(f"options.profile: {profile!r} is not a ROS 2 QoS profile; expected one of: "
                       + ", ".join(f'"{p}"' for p in PROFILES))
    reliable, depth, transient = PROFILES[profile]
    rel = options.get("reliability")
    if rel is not None:
        if rel not in RELIABILITY:
            raise QosError(f"options.reliability: {rel!r}; expected \"reliable\" or \"best_effort\"")
        reliable = rel == "reliable"
    d = options.get("history_depth")
    if d is not None:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= DEPTH_MAX:
            raise QosError(f"options.history_depth: {d!r}; expected an integer from 0 (keep all) to {DEPTH_MAX}")
        depth = d
    dur = options.get("durability")
    if dur is not None:
        if dur not in DURABILITY:
            raise QosError(f"options.durability: {dur!r}; expected \"volatile\" or \"transient_local\"")
        transient = dur == "transient_local"
    rr = options.get("request_reply")
    if rr is not None and rr not in REQUEST_REPLY:
        raise QosError(f"options.request_reply: {rr!r}; expected \"topics\" or \"service\"")
    return Qos(reliable, depth, transient)


def to_rclpy(q: Qos):  # -> rclpy.qos.QoSProfile
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if q.depth == 0 else HistoryPolicy.KEEP_LAST,
        depth=max(q.depth, 1),
        reliability=ReliabilityPolicy.RELIABLE if q.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if q.transient_local else DurabilityPolicy.VOLATILE,
    )
