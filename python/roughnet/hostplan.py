"""One agent process per host (issue 27): which runs get one, and what the flows of one host must agree on.

A host agent (``roughnet-agent host``, run.hostagent) carries every flow of its host, and as a car's application
does, it opens one zenoh session, one DDS participant per domain id, one MQTT client per broker and one NATS
connection per server for all of them (docs/agent-protocol.md, "Host mode"). Such a session, participant or client is configured once, so the
workloads of one host must agree on its knobs. The agent refuses a host object that disagrees, but only once the
run's network exists; ``conflicts`` finds the same disagreements at plan time (``roughnet validate`` and
``roughnet run`` exit 2 before anything is created), from the scenario's own knobs.
"""

from __future__ import annotations

from typing import Any

from . import units
from .runspec import Run, Workload
from .spec.problems import Problem

#: Protocols a host agent carries. Not ros2 (its endpoints are rclpy nodes: one process per flow). The DDS flows
#: of a host agent share one Cyclone participant (Cyclone has one domain per id in a process; a car runs one
#: participant with many readers and writers), at participant index DDS_PARTICIPANT_INDEX_BASE in every host
#: (agents.prepare_specs with host=True); flows whose domain knobs differ are refused (``conflicts``, the agent).
HOST_PROTOCOLS = frozenset({"tcp", "udp", "zenoh", "zmq", "mqtt", "kafka", "nats", "dds"})

SECOND_NS = 1_000_000_000

#: The knobs one host's flows of a protocol share (one session, participant or client), each with the agent's
#: default (None: the agent derives it; two workloads that leave it out agree). The agent's lists:
#: drivers::zenoh session_knobs, drivers::dds domain knobs, drivers::mqtt::host and drivers::nats::host
#: connection_knobs. Per-endpoint knobs (reliability, QoS, priority, jetstream, ...) may differ.
SHARED_KNOBS: dict[str, dict[str, Any]] = {
    "zenoh": {"mode": "peer", "transport": "tcp", "multicast_scouting": False, "open_timeout": None,
              "lease": None, "wait_before_close": None},
    "dds": {"multicast": False, "ros2": False, "batch": 0},
    "nats": {"reconnect": False},
    "mqtt": {"clean_session": True, "keep_alive": 30 * SECOND_NS, "inflight": 100, "tls": False},
}
DURATION_KNOBS = frozenset({"open_timeout", "lease", "wait_before_close", "keep_alive"})
WHAT = {"zenoh": "one zenoh session", "dds": "one DDS participant per domain id", "mqtt": "one MQTT client",
        "nats": "one NATS connection"}


def agents_mode(run: Run) -> str:
    """``host`` (one agent process per host) or ``flow`` (one per flow and role) for a run.

    ``[scenario] agents`` decides when it is set; ``auto`` (the default) takes ``host`` for a timeline run with
    a workload of several senders (many to many: fleets, swarms), where one process per flow would mean
    N x (N + 1) processes, and ``flow`` otherwise (one flow: nothing to share). A run with an ``agent`` event
    stays per flow under ``auto`` (the event kills one flow's agent; in host mode it would end every flow of the
    host). The spec refuses ``host`` with a protocol the agent binary does not speak (ros2)."""
    mode = getattr(run, "agents", "auto")
    if mode != "auto":
        return mode
    if not run.has_timeline or any(e.kind == "agent" for e in run.events):
        return "flow"
    if any(w.protocol not in HOST_PROTOCOLS for w in run.all_workloads):
        return "flow"
    return "host" if any(len(w.senders) > 1 for w in run.all_workloads) else "flow"


def _shares(w: Workload) -> bool:
    """Whether the workload's flows use their host's shared session, participant or client (an MQTT 5 flow or one
    with ``reconnect`` keeps a client of its own: drivers::mqtt::host::shares)."""
    if w.protocol == "mqtt":
        return w.options.get("version", "3.1.1") == "3.1.1" and not w.options.get("reconnect", False)
    return w.protocol in SHARED_KNOBS


def _group(w: Workload) -> Any:
    """What else must match for two workloads to share: DDS's domain id (another id is another participant)."""
    return w.options.get("domain_id", 0) if w.protocol == "dds" else None


def _show(key: str, value: Any) -> str:
    if value is None:
        return "unset (the agent's default)"
    if key in DURATION_KNOBS and isinstance(value, int):
        return units.format_duration_ns(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _path(index: int, w: Workload, key: str) -> str:
    table = "workload" if index == 0 else f"workloads[{index - 1}]"
    return f"{table}.{w.protocol}.{key}"


def conflicts(run: Run) -> list[Problem]:
    """In host mode: a Problem for each knob on which two workloads sharing a host's session, participant or
    client disagree (the later workload's key, naming the earlier workload and the host); [] otherwise."""
    if agents_mode(run) != "host":
        return []
    problems: list[Problem] = []
    first: dict[tuple[str, str, Any], tuple[int, Workload]] = {}  # (host, protocol, group) -> first workload
    seen: set[tuple[int, str]] = set()
    for i, w in enumerate(run.all_workloads):
        if not _shares(w):
            continue
        for host in dict.fromkeys((*w.senders, *w.receivers)):
            key = (host, w.protocol, _group(w))
            if key not in first:
                first[key] = (i, w)
                continue
            j, other = first[key]
            if j == i:
                continue
            for knob, default in SHARED_KNOBS[w.protocol].items():
                a, b = other.options.get(knob, default), w.options.get(knob, default)
                if a != b and (i, knob) not in seen:
                    seen.add((i, knob))
                    problems.append(Problem(
                        _path(i, w, knob),
                        f"differs from workload {other.name!r} ({_show(knob, a)}) on host {host!r}: with one agent "
                        f"per host, {WHAT[w.protocol]} carries both workloads' flows",
                        f"the same {w.protocol} {knob} for every {w.protocol} workload of a host, or "
                        '[scenario] agents = "flow" (a process per flow)', _show(knob, b)))
    return problems
