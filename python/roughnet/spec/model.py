"""The scenario file format (v1) as pydantic models: one model per TOML table.

This module owns the shape of a scenario file: which tables and keys exist,
their kinds (``spec.kinds``), defaults and descriptions (the descriptions are
the generated reference, docs/scenario-reference.md).  Every model forbids
unknown keys.  The protocol knob tables are ``spec.knobs``', the [[service]]
tables ``spec.services``'.  Values are stored as written, placeholders unresolved; checks
that involve several keys live in ``spec.checks`` and the conversion into
``runspec`` types in ``spec.resolve``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .. import runspec
from . import kinds
from .knobs import (
    KNOB_TABLES,
    DdsKnobs,
    KafkaKnobs,
    MqttKnobs,
    NatsKnobs,
    Ros2Knobs,
    TcpKnobs,
    UdpKnobs,
    ZenohKnobs,
    ZmqKnobs,
)
from .positions import POSITION, VEHICLE, MobilityTable, PathPointTable
from .processes import PROCESS_NAME, ExpectTable, MetricsTable, ProcessTable, ReadyTable
from .receivers import TO
from .services import SERVICE_TABLES, AnyService
from .syncspec import SyncTable
from .table import HOST, HOST_NAME, Table, field
from .wire import (
    CORRELATION,
    DIRECTION_CHOICE,
    JITTER_DISTRIBUTION,
    OVERHEAD,
    PROFILE,
    REORDER_GAP,
    TRUE,
    AnyLossModel,
    DistanceTable,
    HalfDuplexTable,
    LOSS_MODEL_TABLES,
)

__all__ = ["HOST_NAME", "KNOB_TABLES", "REPORT_METRICS", "Scenario", "model_tables"]

SCENARIO_NAME = r"^[a-z0-9][a-z0-9-]{0,39}$"
SWEEP_KEY = r"^[a-z_][a-z0-9_]*$"

#: Metric names accepted in ``[report] metrics`` (the report maps them to stored columns).
REPORT_METRICS = (
    "throughput",
    "loss",
    "lost",
    "duplicates",
    "reordered",
    "latency_min",
    "latency_mean",
    "latency_p50",
    "latency_p90",
    "latency_p99",
    "latency_p999",
    "latency_p9999",
    "latency_p999999",
    "latency_max",
    "latency_actual_p50",
    "latency_actual_p99",
    "rtt_min",
    "rtt_mean",
    "rtt_p50",
    "rtt_p90",
    "rtt_p99",
    "rtt_p999",
    "rtt_p9999",
    "rtt_p999999",
    "rtt_max",
    "link_drops",
    "tcp_retransmits",
    "cpu",
    "goodput",
    "goodput_fraction",
    "bundles_from_to",
    "bundles_to_from",
    "overhead",
    "time_to_full_sync",
    "sender_held",
    "sender_late",
    "udp_rcvbuf_drops",
)

_SCENARIO_NAME = kinds.name(SCENARIO_NAME, "a name of lowercase letters, digits and '-' (at most 40 characters, "
                            "not starting with '-'), like \"quickstart\"", placeholders=False)  # fmt: skip
_HOST = HOST
#: A Kubernetes node name (a DNS subdomain, RFC 1123).
_NODE = kinds.name(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
                   'a Kubernetes node name: lowercase letters, digits, "-" and ".", like "node1"')
_ENGINE = kinds.choice(runspec.ENGINES)
_Table = Table
_f = field


class ScenarioTable(_Table):
    """``[scenario]``: what the scenario is called and how each run is executed."""

    name: _SCENARIO_NAME.type() = _f("Scenario name: " + _SCENARIO_NAME.expected + ".")
    description: kinds.text(placeholders=False).type() = _f("Free text shown in `roughnet show` and the report.", "")
    seed: kinds.integer(0, None, "an integer >= 0", placeholders=False).type() = _f(
        "Base seed; run `r` of a repeated point gets seed + r.", 1)
    engine: kinds.choice(runspec.ENGINES, placeholders=False).type() = _f(
        "Default link engine for every link: " + _ENGINE.expected + ". `auto` picks the first engine "
        "this machine has that can do everything the link asks.", "auto")
    timeout: kinds.duration(placeholders=False).type() = _f(
        "Time limit of one run; receivers are stopped and report what they have: " + kinds.DURATION + ".",
        "60 s")
    repeat: kinds.integer(1, 1000, "an integer from 1 to 1000", placeholders=False).type() = _f(
        "Repetitions of every parameter point (an integer from 1 to 1000).", 1)
    agents: kinds.choice(runspec.AGENT_MODES, placeholders=False).type() = _f(
        "How a run's flows map to roughnet-agent processes: `host` (one process per host carrying every flow of "
        "that host: one session, participant or client per protocol as a real application has; docs/timelines.md, "
        "\"Agents per host\"), `flow` (one process per flow and role: each flow isolated from the others), `auto` "
        "(`host` for a run with a workload of several senders, else `flow`).", "auto")
    series_interval: kinds.duration(placeholders=False).type() = _f(
        "Runs with a timeline (docs/timelines.md): the length of one interval of the time-resolved metrics, "
        + kinds.DURATION + ", at least 10 ms. Unset: 1 s.", None)


class HostTable(_Table):
    """``[[host]]``: one network namespace."""

    name: _HOST.type() = _f("Host name (goes into interface names, so it is short): " + _HOST.expected + ".")
    node: _NODE.type() = _f(
        "Kubernetes backend only: the cluster node this host's pod runs on (" + _NODE.expected + "). Unset: "
        "hosts go round robin, in file order, over the Ready nodes that take pods, sorted by name.", None)
    position: POSITION.type() = _f(
        "Where the host is, for the links whose loss follows distance (`ieee80211p`): " + POSITION.expected + ". "
        "On such a link every pair of hosts then has its own distance (a shared segment: per pair and per "
        "frame). Every host of the link has one, or none does; not together with `[[host.path]]`.", None)
    path: list[PathPointTable] | None = Field(
        None, description="Where the host is over time (`[[host.path]]` entries: `at`, `position`), instead of a "
        "fixed `position`.")
    path_trace: kinds.text("a path to a CSV file of 'time_s,x_m,y_m' lines").type() = _f(
        "Where the host is over time, from a file: a CSV file of `time_s,x_m,y_m` lines, relative to the scenario "
        "file (linear between lines, held before the first and after the last). Instead of `position` or "
        "`[[host.path]]`.", None)
    vehicle: VEHICLE.type() = _f(
        "Where the host is over time: the id of a vehicle of the `[mobility] fcd` file (SUMO floating-car "
        "data), like \"veh3\"; the host is where the vehicle is at every time step (held where it was last seen "
        "while absent). Instead of `position`, `[[host.path]]` or `path_trace`.", None)


class DirectionTable(_Table):
    """Impairments of one direction (``[link.forward]`` / ``[link.reverse]``); unset keys come from the link."""

    rate: kinds.rate().type() = _f("Rate limit: " + kinds.RATE + "; above 0. Unset: no limit.", None)
    delay: kinds.duration().type() = _f("One-way delay: " + kinds.DURATION + ". Unset: 0.", None)
    jitter: kinds.duration().type() = _f(
        "Delay variation: " + kinds.DURATION + "; above 0 it needs a delay at least as large.", None)
    loss: kinds.percent().type() = _f("Random (Bernoulli) loss: " + kinds.PERCENT + ". Unset: 0%.", None)
    queue: kinds.queue().type() = _f(
        "Drop-tail queue limit: " + kinds.QUEUE + ". Unset: the engine sizes it from the rate.", None)
    # --- what the userspace emulator (wire) adds; docs/scenario-format.md "Beyond netem" ---
    jitter_distribution: JITTER_DISTRIBUTION.type() = _f(
        "Shape of the jitter: " + JITTER_DISTRIBUTION.expected + " (`jitter` is the half-width of uniform, the "
        "standard deviation of the others). Needs `jitter`. Unset: uniform.", None)
    jitter_correlation: CORRELATION.type() = _f(
        "Correlation of successive jitter draws (netem's): " + CORRELATION.expected + ". Needs `jitter`.", None)
    reorder_by_jitter: kinds.boolean().type() = _f(
        "Let jitter reorder frames (netem's behaviour). Unset or false: a frame never leaves before the one "
        "sent before it, jitter only stretches gaps. Needs `jitter`.", None)
    reorder: kinds.percent().type() = _f(
        "Fraction of frames sent at once, without the delay, ahead of the others (netem's `reorder`): "
        + kinds.PERCENT + ". Needs a delay above 0.", None)
    reorder_gap: REORDER_GAP.type() = _f(
        "Only every n-th frame may be reordered (netem's `gap`): " + REORDER_GAP.expected + ". Needs `reorder`.",
        None)
    loss_model: AnyLossModel | None = Field(
        None, description="A loss model other than random loss, an inline table chosen by `model` (see the "
        "`loss_model` tables below); not together with `loss`.")
    duplicate: kinds.percent().type() = _f("Fraction of frames sent twice: " + kinds.PERCENT + ".", None)
    corrupt: kinds.percent().type() = _f(
        "Fraction of frames with one bit flipped after the Ethernet header; the receiver's checksum drops "
        "them, as on a real link: " + kinds.PERCENT + ".", None)
    overhead: OVERHEAD.type() = _f(
        "Bytes added to every frame when computing its serialisation time at `rate` (24 B for Ethernet: "
        "preamble, SFD, FCS, inter-frame gap): " + OVERHEAD.expected + ". Needs `rate`.", None)
    capacity_trace: kinds.text("a path to a Mahimahi trace (one ms per line)").type() = _f(
        "Capacity over time from a measured trace instead of `rate`: a Mahimahi file (one whole ms per line, each "
        "a delivery opportunity of 1500 bytes; the trace repeats), relative to the scenario file; `roughnet trace "
        "import` makes one from a Mahimahi file or a per-second CSV. Not together with `rate`, half duplex or "
        "CSMA; not in a schedule entry.", None)


#: The impairment keys a link and its direction tables share (see spec.resolve.direction).
DIRECTION_KEYS = tuple(DirectionTable.model_fields)


class ScheduleTable(DirectionTable):
    """``[[link.schedule]]``: from `at` on, the keys given replace their current values; the others keep theirs."""

    at: kinds.duration().type() = _f("Time after the start of the run: " + kinds.DURATION + ".")
    direction: DIRECTION_CHOICE.type() = _f(
        "Which direction the impairment keys of this entry change: " + DIRECTION_CHOICE.expected + ".", "both")
    down: TRUE.type() = _f("`down = true` takes the link down (both directions; frames in flight are lost).", None)
    up: TRUE.type() = _f("`up = true` brings the link back up.", None)


class LinkTable(DirectionTable):
    """``[[link]]``: a veth pair (two hosts) or a shared segment (more than two)."""

    between: kinds.name_list(_HOST, 2, "a list of at least 2 distinct host names").type() = _f(
        "Hosts on this link: 2 make a veth pair, more a shared segment (a bridge, or one roughnet-wire).")
    mtu: kinds.integer(576, 65535, "an integer from 576 to 65535 (bytes)").type() = _f(
        "MTU in bytes (a plain integer: the unit is implied by the key), 576 to 65535.", 1500)
    engine: _ENGINE.type() = _f("Link engine for this link: " + _ENGINE.expected + ". Unset: [scenario] engine.", None)
    capture: kinds.boolean().type() = _f("Record a packet capture of this link.", False)
    forward: DirectionTable | None = Field(
        None, description="Overrides for traffic from between[0] to between[1] (a shared segment: into the segment).")
    reverse: DirectionTable | None = Field(
        None, description="Overrides for the other direction (a shared segment: from the segment to every host).")
    profile: PROFILE.type() = _f(
        "A named link profile of the wire engine (docs/profiles.md: each number with its source): " + PROFILE.expected + ". The keys "
        "given on the link and its direction tables override the profile's values.", None)
    half_duplex: HalfDuplexTable | None = Field(
        None, description="Make the link a half-duplex shared medium (an inline table, see `half_duplex` below).")
    medium: kinds.choice(runspec.MEDIA).type() = _f(
        'The medium the hosts share: "plain" (each direction of a pair, or each port of a segment, has its '
        'own serialiser) or "csma" (ns-3\'s CSMA channel: one transmitter at a time, the channel busy for a '
        "frame's serialisation plus the propagation delay `delay`, a sender that finds it busy backs off "
        "(binary exponential, 1 us slots, ns-3's defaults); the wire engine, and the ns3 backend's CSMA "
        'channel). Not with `half_duplex`. Unset: "plain".', None)
    wire_threads: kinds.integer(1, 2, "1 or 2").type() = _f(
        "Forwarding threads of the wire engine on this link: 1 (one loop for both directions) or 2 (one thread "
        "per direction). 2 carries more bulk traffic when the wire is the bottleneck (TCP at zero impairment "
        "about 1.8x on 2 cores) but adds to the round trip at zero delay (about 20 us on an idle 2-vCPU VM: "
        "the thread of the reply has to wake up; docs/wire.md); a pair only, not with "
        "`half_duplex` or `medium = \"csma\"`, which couple the directions. Setting 2 selects the wire engine. "
        "Unset: 1.", None)
    schedule: list[ScheduleTable] | None = Field(
        None, description="Changes over time (`[[link.schedule]]` entries, see below), in time order.")
    distance_trace: kinds.text("a path to a CSV file of 'time_s,metres' lines").type() = _f(
        "Distance between the ends over time, for the `ieee80211p` loss model: a CSV file of `time_s,metres` "
        "lines, relative to the scenario file. Not together with `[[link.distance]]`.", None)
    distance: list[DistanceTable] | None = Field(
        None, description="Distance between the ends over time, inline (`[[link.distance]]` entries: `at`, "
        "`distance`); not together with `distance_trace`.")
    overlay: kinds.choice(runspec.OVERLAYS).type() = _f(
        'How the hosts reach each other over this link: "none" (plain routed, like Flannel host-gw or '
        'kube-router) or "vxlan" (a VXLAN overlay on top, like Flannel VXLAN: each host gets a VXLAN device '
        "with an address in the overlay subnet 198.19.<128+i>.0/24, and agents use those addresses). "
        'Unset: "none".', None)
    overlay_mtu: kinds.integer(576, 65535, "an integer from 576 to 65535 (bytes)").type() = _f(
        "MTU of the overlay device in bytes, at most `mtu` - 50 (the VXLAN headers). Needs an overlay. "
        "Unset: `mtu` - 50.", None)


#: A workload's name (``[[workload]] name``).
WORKLOAD_NAME = kinds.name(r"^[a-z][a-z0-9_-]{0,15}$", "a name of lowercase letters, digits, '_' and '-' (at most "
                           "16 characters, starting with a letter), like \"control\"")
#: ``from``: one sending host or a list of them.
FROM = kinds.name_list(HOST, 1, "a host name or a list of host names", single=True)
#: What an ``[[event]]`` does (docs/timelines.md).
EVENT_ACTIONS = ("down", "up", "set", "isolate", "rejoin", "kill", "stop", "start", "pause", "resume", "restart")
_EVENT_ACTION = kinds.choice(EVENT_ACTIONS, placeholders=False)


class EventTable(DirectionTable):
    """``[[event]]``: at `at` after the run's start, one action on a link, a host, a service or an agent."""

    at: kinds.duration().type() = _f("Time after the run's start (t0: when the first senders start): "
                                     + kinds.DURATION + ".")
    action: _EVENT_ACTION.type() = _f(
        "What happens: link (`link`): down, up, set (the impairment keys given, as in [[link.schedule]]); "
        "host (`host`): isolate (cut off from every link), rejoin; service (`service`): kill (SIGKILL), "
        "stop (SIGTERM), start, pause (SIGSTOP), resume (SIGCONT), restart (stop and start); agent "
        "(`workload` and `host`): kill (SIGKILL).")
    for_: kinds.duration().type() = Field(
        None, alias="for", description="Undo the action after this long (down -> up, isolate -> rejoin, kill or "
        "stop -> start, pause -> resume): " + kinds.DURATION + ".")
    link: kinds.integer(0, 511, "a link's position in the [[link]] list, from 0").type() = _f(
        "The link of a link action: its position in the [[link]] list (the first is 0).", None)
    host: HOST.type() = _f("The host of a host action, or of an agent action (with `workload`).", None)
    service: kinds.choice(runspec.SERVICE_KINDS).type() = _f(
        "The service of a service action: a [[service]] kind of the scenario.", None)
    workload: WORKLOAD_NAME.type() = _f("The workload whose agent on `host` an agent action kills.", None)
    process: PROCESS_NAME.type() = _f(
        "The [[process]] of a process action (the service actions: kill, stop, start, pause, resume, restart; "
        "stop sends its `stop_signal`).", None)
    direction: DIRECTION_CHOICE.type() = _f(
        "Link actions: the direction a down, up or set applies to: " + DIRECTION_CHOICE.expected + ".", "both")


class WorkloadTable(_Table):
    """``[workload]``: what the agents send, from which host to which."""

    name: WORKLOAD_NAME.type() = _f(
        "Several workloads (`[[workload]]`): the workload's name, used by events and in results ("
        + WORKLOAD_NAME.expected + "). Unset: w1, w2, ... in file order.", None)
    pattern: kinds.choice(runspec.PATTERNS).type() = _f(
        "stream: open-loop messages (N or for a duration); ping: request/reply round trips; ramp: ping "
        "whose size grows by `step`; bulk: as fast as possible for a duration.")
    protocol: kinds.choice(runspec.PROTOCOLS).type() = _f("Protocol the agents speak.")
    from_: FROM.type() = Field(..., alias="from", description="Sending host (the pinger for ping and ramp); a "
                               "stream or bulk workload may list several: every one of them sends.")
    start: kinds.duration().type() = _f(
        "Time after the run's start (t0) at which this workload's senders start: " + kinds.DURATION
        + ". Unset: at t0.", None)
    background: kinds.boolean().type() = _f(
        "Background traffic (for example a bulk transfer sharing the link): measured and stored, but the "
        "run's headline metrics and verdict are those of the other workloads.", None)
    to: TO.type() = _f(
        "Receiving host(s), not including `from` (with several senders, each sends to those other than itself); "
        "ping and ramp take exactly one. Names in `from` and `to` may be patterns: `car*` or `*` (every host). Also `{ first = n, of = [...] "
        "}`: the first n hosts of the list (n may be a placeholder, like ${schedule.subscribers}).")
    payload: kinds.size().type() = _f(
        "Message size at the application level, the 32-byte header included: " + kinds.SIZE + "; at least "
        "32 B; UDP at most 65507 B (ramp: the final size too).")
    messages: kinds.integer(1, None, "an integer >= 1").type() = _f(
        "Messages to send (stream), requests (ping), iterations (ramp). Not for bulk.", None)
    duration: kinds.duration().type() = _f("Send for this long (stream, bulk): " + kinds.DURATION + ".", None)
    rate: kinds.msg_rate().type() = _f(
        "Stream: open-loop schedule, " + kinds.MSG_RATE + ". Unset: max. Bulk accepts only \"max\" (so one "
        "sweep can set it for streams and bulk alike).", None)
    interval: kinds.duration().type() = _f(
        "Ping, ramp: time between requests (" + kinds.DURATION + "). Unset (ping): next after the reply.", None)
    reply_timeout: kinds.duration().type() = _f(
        "Ping, ramp: how long the pinger waits for the replies to a request (" + kinds.DURATION + ", whole "
        "milliseconds, at least 1 ms, at most the run's timeout). Closed loop (no `interval`): a request whose "
        "reply is lost holds the next request back this long, so on a lossy link it sets how many requests "
        "a run sends per second and how long it lasts; a reply that comes later still counts when it arrives "
        "before the run ends. Both loops: after the last request the pinger waits this long for the replies "
        "still on their way, then sends its end marker; replies later than that are counted as lost. Raise "
        "it when round trips can be longer than 1 s (a slow link, a broker's retransmissions). Default: 1 s.",
        None)
    step: kinds.size().type() = _f("Ramp only: the message grows by this each iteration (" + kinds.SIZE + ").", None)
    warmup: kinds.integer(0, None, "an integer >= 0").type() = _f("Messages sent first and not counted.", 0)
    tcp: TcpKnobs | None = Field(None, description="TCP knobs; only with protocol = \"tcp\", or a swept protocol "
                                 "that is \"tcp\" in some run (the other runs ignore them).")
    udp: UdpKnobs | None = Field(None, description="UDP knobs; only with protocol = \"udp\", or a swept protocol "
                                 "that is \"udp\" in some run (the other runs ignore them).")
    zenoh: ZenohKnobs | None = Field(None, description="Zenoh knobs; only with protocol = \"zenoh\" (or swept).")
    zmq: ZmqKnobs | None = Field(None, description="ZeroMQ knobs; only with protocol = \"zmq\" (or swept).")
    dds: DdsKnobs | None = Field(None, description="DDS knobs; only with protocol = \"dds\" (or swept).")
    mqtt: MqttKnobs | None = Field(None, description="MQTT knobs; only with protocol = \"mqtt\" (or swept).")
    kafka: KafkaKnobs | None = Field(None, description="Kafka knobs; only with protocol = \"kafka\" (or swept).")
    nats: NatsKnobs | None = Field(None, description="NATS knobs; only with protocol = \"nats\" (or "
                                   "swept).")  # fmt: skip
    ros2: Ros2Knobs | None = Field(None, description="ROS 2 knobs; only with protocol = \"ros2\" (or swept).")
    sync: SyncTable | None = Field(None, description="Pattern sync only: the bundle stores (for sync, `payload` is "
                                   "each bundle's manifest and `duration` the fixed window).")  # fmt: skip


_SWEEP_KEY = kinds.name(SWEEP_KEY, "a sweep key (lowercase letters, digits and '_')", placeholders=False)
_REPORT_METRIC = kinds.choice(REPORT_METRICS, placeholders=False)


class ReportTable(_Table):
    """``[report]``: hints for `roughnet report` (each axis names a [sweep] key)."""

    x: _SWEEP_KEY.type() = _f("Sweep key on the x axis (default: the first).", None)
    lines: _SWEEP_KEY.type() = _f("Sweep key drawn as one line per value (default: the second).", None)
    panels: _SWEEP_KEY.type() = _f("Sweep key drawn as one panel per value (default: the third).", None)
    metrics: kinds.name_list(_REPORT_METRIC, 1, "a list of metric names").type() = _f(
        "Metrics to plot (the names under \"Report metrics\" in docs/scenario-reference.md). Default: chosen by pattern.", None)
    title: kinds.text(placeholders=False).type() = _f("Report title (default: the scenario name).", None)


_SWEEP_SCALAR = {"type": ["string", "number"]}
_SWEEP_FIELD = {"type": ["string", "number", "boolean"]}
_SWEEP_FILE = {"type": "object", "required": ["file"], "additionalProperties": False,
               "properties": {"file": {"type": "string", "description": "a schedule CSV, relative to the scenario "
                                                                        "file: one run per row (spec.schedule)"},
                              "ignore": {"type": "array", "items": {"type": "string"},
                                         "description": "columns of the file this scenario does not use"}}}
_SWEEP_TABLE = {"type": "object", "minProperties": 1, "propertyNames": {"pattern": SWEEP_KEY},
                "additionalProperties": _SWEEP_FIELD,
                "description": "one entry of a table axis; `name` (a string) labels it in reports"}  # fmt: skip
_EXCLUDE_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": {"type": "object", "minProperties": 1, "additionalProperties": _SWEEP_SCALAR},
    "description": "Combinations to skip; each table maps axis names to one of their values "
    "(for a table axis: an entry's `name`, or its \"k=v, k=v\" label when entries have no name); a run is "
    "skipped when it matches every key of some entry. `exclude` is therefore not an axis name.",
}


class Scenario(_Table):
    """A scenario file (format v1), validated, placeholders unresolved."""

    model_config = ConfigDict(extra="forbid", strict=True, title="roughnet scenario (format v1)")

    scenario: ScenarioTable = Field(description="Name, seed, default engine, timeout and repetitions.")
    host: list[HostTable] = Field(min_length=2, description="Hosts (network namespaces); at least 2.")
    link: list[LinkTable] = Field(min_length=1, description="Links among hosts; at least 1.")
    workload: WorkloadTable | None = Field(
        None, description="What the agents do. May be left out when the scenario has `[[process]]` entries "
        "(the user's own programs are then the run: docs/applications.md).")
    sweep: dict[str, Any] = Field(
        default_factory=dict,
        description="Parameter axes: key = non-empty list of values (strings or numbers), used as ${key} in "
        "[[host]], [[link]], [workload] and [[service]]; or a list of inline tables with the same keys (a table "
        "axis: its "
        "fields change together, used as ${key.field}). Runs are the cartesian product in file order (last key "
        "fastest), less the combinations [[sweep.exclude]] lists. A table axis may also come from a CSV file: "
        "key = { file = \"schedule.csv\" } makes one entry per row, named \"row <n>\" (docs/scenario-format.md).",
        json_schema_extra={"propertyNames": {"pattern": SWEEP_KEY},
                           "properties": {"exclude": _EXCLUDE_SCHEMA},
                           "additionalProperties": {"anyOf": [
                               {"type": "array", "minItems": 1,
                                "anyOf": [{"items": _SWEEP_SCALAR}, {"items": _SWEEP_TABLE}]},
                               _SWEEP_FILE]}},
    )  # fmt: skip
    workloads: list[WorkloadTable] | None = Field(
        None, description="Set from `[[workload]]` (the entries after the first): write `[[workload]]` tables, "
        "not this key.")
    event: list[EventTable] | None = Field(
        None, description="Events on the run's timeline (`[[event]]` entries, docs/timelines.md).")
    service: list[AnyService] = Field(
        default_factory=list,
        description="Managed services (brokers, routers), at most one per kind; each must be used by some run "
        "(mqtt: mosquitto, kafka: kafka, nats: nats, zenoh with mode = \"client\": zenoh-router).")
    process: list[ProcessTable] | None = Field(
        None, description="The user's own programs on the scenario's hosts (`[[process]]` entries, "
        "docs/applications.md).")
    report: ReportTable | None = Field(None, description="Hints for the report.")
    mobility: MobilityTable | None = Field(
        None, description="Vehicle mobility for hosts with `vehicle = \"...\"`: a SUMO floating-car-data file.")
    #: Axis -> schedule file of the axes read from a file (spec.schedule; set by spec.load).
    _file_axes: dict[str, str] = PrivateAttr(default_factory=dict)
    #: The file wrote its workloads as [[workload]] tables (spec.load.check_data): problems found later name
    #: them workload[0], workload[1], ... as the file does (spec.load.listed_path).
    _listed_workloads: bool = PrivateAttr(default=False)


def model_tables() -> list[tuple[str, type[BaseModel]]]:
    """(TOML header, model) of every table, for the generated reference."""
    return [
        ("[scenario]", ScenarioTable),
        ("[[host]]", HostTable),
        ("[[host.path]]", PathPointTable),
        ("[mobility]", MobilityTable),
        ("[[link]]", LinkTable),
        ("[link.forward] / [link.reverse]", DirectionTable),
        *((f'loss_model = {{ model = "{name}", ... }}', table) for name, table in LOSS_MODEL_TABLES.items()),
        ("half_duplex = { ... }", HalfDuplexTable),
        ("[[link.schedule]]", ScheduleTable),
        ("[[link.distance]]", DistanceTable),
        ("[workload]", WorkloadTable),
        ("[[event]]", EventTable),
        ("[[process]]", ProcessTable),
        ("ready = { ... }", ReadyTable),
        ("expect = { ... }", ExpectTable),
        ("metrics = { ... }", MetricsTable),
        *((f"[workload.{proto}]", table) for proto, table in KNOB_TABLES.items()),
        ("[workload.sync]", SyncTable),
        *((f'[[service]] kind = "{kind}"', table) for kind, table in SERVICE_TABLES.items()),
        ("[report]", ReportTable),
    ]
