"""The resolved description of one run: the contract between the stages.

``spec`` parses and validates a scenario file; ``plan`` expands its sweep into a
list of ``Run`` objects defined here.  Every later stage (topology, link
engines, runner, results, report) receives these objects and never looks at
the scenario file again.  Everything here is already validated and carries
its unit in its name (``rate_bps``, ``delay_ns``, ``loss`` as a fraction), so
later stages do no parsing.

This module owns only the data shapes; it has no behaviour beyond small
helpers and (de)serialisation to plain dicts (for the results store).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: Engines a link may ask for.  ``auto`` is resolved by links.choose at preflight.
ENGINES = ("auto", "kernel", "netem", "wire")
#: [scenario] agents: how a run's flows map to agent processes (run.hostagent.agents_mode).
AGENT_MODES = ("auto", "host", "flow")
PATTERNS = ("stream", "ping", "ramp", "bulk", "sync")
PROTOCOLS = ("tcp", "udp", "zenoh", "zmq", "dds", "mqtt", "kafka", "nats", "ros2")
#: Managed services (brokers, routers) a scenario may declare in [[service]].
SERVICE_KINDS = ("mosquitto", "kafka", "nats", "zenoh-router")
#: How a link carries the hosts' traffic: plain routed, or a VXLAN overlay on top (docs/scenario-format.md).
OVERLAYS = ("none", "vxlan")
#: A link's medium: "plain" (each direction its own serialiser) or "csma" (ns-3's CSMA channel: one
#: transmitter at a time, busy for a frame's serialisation plus the propagation delay, backoff).
MEDIA = ("plain", "csma")
#: Bytes VXLAN adds to every frame: outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8 (RFC 7348).
VXLAN_OVERHEAD_BYTES = 50
#: Which service kind a protocol's agents connect to (zenoh only in client mode).
PROTOCOL_SERVICE = {"mqtt": "mosquitto", "kafka": "kafka", "nats": "nats", "zenoh": "zenoh-router"}


@dataclass(frozen=True)
class Direction:
    """Impairments applied to traffic in one direction of a link.

    For a two-host link ``forward`` is hosts[0] -> hosts[1] and ``reverse`` is
    hosts[1] -> hosts[0].  For a shared segment (more than two hosts)
    ``forward`` applies to every host's traffic into the segment (uplink) and
    ``reverse`` to traffic from the segment to every host (downlink).
    """

    rate_bps: int | None = None  # None: no rate limit
    delay_ns: int = 0
    jitter_ns: int = 0
    loss: float = 0.0  # random (Bernoulli) loss, a fraction in [0, 1]
    queue_packets: int | None = None  # drop-tail limit; None: engine default sized from rate
    queue_bytes: int | None = None
    # --- beyond rate/delay/loss: what the userspace emulator (wire) adds; defaults mean "off" ---
    jitter_dist: str = "uniform"  # uniform | normal | pareto | paretonormal
    jitter_correlation: float = 0.0  # fraction in [0, 1]
    allow_reorder: bool = False  # jitter may reorder frames (netem's behaviour); off: departures keep order
    reorder: float = 0.0  # fraction of frames sent at once, ahead of the queue (netem "reorder")
    reorder_gap: int = 0
    loss_model: dict[str, Any] | None = None  # a non-Bernoulli loss model, wire-core's LossModel JSON
    duplicate: float = 0.0  # fraction
    corrupt: float = 0.0  # fraction (one bit flipped; the receiver's checksum drops the frame)
    overhead_bytes: int = 0  # per-frame overhead counted by the rate (serialisation delay)
    capacity_trace: str | None = None  # a Mahimahi trace file (absolute path) serialising instead of rate_bps

    def needs(self) -> frozenset[str]:
        """Capabilities an engine must have to apply this direction."""
        caps: set[str] = set()
        if self.rate_bps is not None:
            caps.add("rate")
        if self.delay_ns:
            caps.add("delay")
        if self.jitter_ns:
            caps.add("jitter")
        if self.loss:
            caps.add("loss")
        if self.queue_packets is not None or self.queue_bytes is not None:
            caps.add("queue")
        if self.jitter_ns and (self.jitter_dist != "uniform" or self.jitter_correlation):
            caps.add("jitter_shape")
        if self.allow_reorder or self.reorder:
            caps.add("reorder")
        if self.loss_model is not None:
            caps.add("loss_model")
        if self.duplicate:
            caps.add("duplicate")
        if self.corrupt:
            caps.add("corrupt")
        if self.overhead_bytes:
            caps.add("overhead")
        if self.capacity_trace is not None:
            caps.add("capacity_trace")
        return frozenset(caps)

    @property
    def is_clean(self) -> bool:
        return not self.needs()


@dataclass(frozen=True)
class Link:
    """A link among two hosts (a veth pair) or more (a shared segment, a bridge)."""

    index: int  # position in the scenario's [[link]] list; also selects its subnet
    hosts: tuple[str, ...]
    mtu: int = 1500
    engine: str = "auto"
    forward: Direction = field(default_factory=Direction)
    reverse: Direction = field(default_factory=Direction)
    capture: bool = False
    # --- wire-only link features (wire-core's LinkConfig JSON shapes); defaults mean "off" ---
    profile: str | None = None  # a named wire profile the directions started from (recorded for reports)
    half_duplex: dict[str, Any] | None = None  # wire-core HalfDuplex JSON
    medium: str = "plain"  # one of MEDIA; "csma": wire-core's Csma medium (ns-3's defaults)
    wire_threads: int = 1  # roughnet-wire --threads: 2 = one forwarding thread per direction (a pair only)
    schedule: tuple[dict[str, Any], ...] = ()  # wire-core ScheduledChange JSON objects
    distance_trace: tuple[dict[str, Any], ...] = ()  # wire-core DistancePoint JSON objects
    positions: tuple[tuple[dict[str, Any], ...], ...] = ()  # per host in `hosts` order, wire-core PositionPoint JSON
    # --- overlay network on top of the link (topo.overlay); "none": hosts use the link's own addresses ---
    overlay: str = "none"  # one of OVERLAYS
    overlay_mtu: int | None = None  # MTU of the overlay device; None: mtu - VXLAN_OVERHEAD_BYTES

    @property
    def shared(self) -> bool:
        return len(self.hosts) > 2

    @property
    def overlay_device_mtu(self) -> int | None:
        """MTU of the overlay device (None without an overlay)."""
        if self.overlay == "none":
            return None
        return self.overlay_mtu if self.overlay_mtu is not None else self.mtu - VXLAN_OVERHEAD_BYTES

    def needs(self) -> frozenset[str]:
        caps = set(self.forward.needs() | self.reverse.needs())
        if self.profile is not None:
            caps.add("profile")
        if self.half_duplex is not None:
            caps.add("half_duplex")
        if self.medium == "csma":
            caps.add("csma")
        if self.wire_threads == 2:
            caps.add("wire_threads")
        if self.schedule:
            caps.add("schedule")
        if self.distance_trace:
            caps.add("distance_trace")
        if self.positions:
            caps.add("positions")
        return frozenset(caps)


@dataclass(frozen=True)
class Host:
    name: str  # ^[a-z][a-z0-9]{0,7}$, unique in the scenario
    node: str | None = None  # Kubernetes backend: the node its pod runs on (None: the backend's spread rule)


@dataclass(frozen=True)
class Service:
    """A managed service (docs/protocols.md): started in ``host``'s namespace before the agents."""

    kind: str  # one of SERVICE_KINDS
    host: str
    reuse: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # kind-specific settings, base units

    def __hash__(self) -> int:
        return hash((self.kind, self.host, self.reuse))


@dataclass(frozen=True)
class Workload:
    """What the agents do.  Units are in the names; None means "not set"."""

    pattern: str  # stream | ping | ramp | bulk
    protocol: str  # tcp | udp (more protocols in later issues)
    sender: str  # host name ("from" in the file)
    receivers: tuple[str, ...]  # host names ("to" in the file)
    payload_bytes: int  # application message size, header included (>= 32)
    messages: int | None = None  # stream/ping/ramp: messages (iterations) to send
    duration_ns: int | None = None  # stream/bulk: or send for this long
    rate_msgs_per_s: float | None = None  # stream: None = as fast as possible
    interval_ns: int | None = None  # ping/ramp: time between requests
    reply_timeout_ns: int | None = None  # ping/ramp: the pinger's wait for replies (None: the agent's 1 s)
    step_bytes: int | None = None  # ramp: message grows by this each iteration
    warmup: int = 0  # messages sent first and not counted
    timeout_ns: int = 60_000_000_000  # the whole run, after which receivers are stopped
    options: dict[str, Any] = field(default_factory=dict)  # protocol knobs, already in base units
    # sync only (payload_bytes is then each bundle's manifest): {"bundles": N per side, "overlap": fraction,
    # "bundle_payload_bytes": int, "window": bundles in flight}; None for the other patterns
    sync: dict[str, Any] | None = None
    # --- run timelines (docs/timelines.md); defaults: the single workload of a run without a timeline ---
    name: str = "w1"  # [[workload]] name (default w1, w2, ... in file order)
    also_from: tuple[str, ...] = ()  # further senders when `from` lists several (every one sends)
    start_ns: int = 0  # senders start this long after t0
    background: bool = False  # measured, but not the run's headline metrics and verdict

    def __hash__(self) -> int:  # options is a dict; hash on the rest
        return hash((self.pattern, self.protocol, self.sender, self.receivers, self.payload_bytes, self.name))

    @property
    def senders(self) -> tuple[str, ...]:
        return (self.sender, *self.also_from)


@dataclass(frozen=True)
class Event:
    """One ``[[event]]`` of a run's timeline, resolved (an entry with ``for`` becomes two: the second ``ends`` it)."""

    index: int  # position on the timeline (events sorted by time, file order among equal times)
    at_ns: int  # after t0
    kind: str  # link | host | service | agent | process
    action: str  # down | up | set | isolate | rejoin | kill | stop | start | pause | resume | restart
    target: str  # "link 0", "host sub", "mosquitto", "agent w1@sub": what tables and plots show
    link: int | None = None
    host: str | None = None
    service: str | None = None  # a service kind
    workload: str | None = None
    change: dict[str, Any] | None = None  # link actions: wire-core ScheduledChange JSON (its at_ns unused)
    ends: int | None = None  # index of the earlier event whose fault this one ends
    process: str | None = None  # process actions: the [[process]] name

    def __hash__(self) -> int:
        return hash((self.index, self.at_ns, self.action, self.target))


@dataclass(frozen=True)
class Process:
    """One ``[[process]]``: a user's program (a command or an OCI image) on a host (docs/applications.md)."""

    name: str
    host: str
    command: tuple[str, ...] = ()  # argv; empty for an image
    image: str | None = None  # the image archive or layout directory, relative to ``base``
    image_ref: str | None = None  # kubernetes backend: an image the cluster pulls (``entrypoint`` then given)
    args: tuple[str, ...] | None = None  # image: replaces CMD
    entrypoint: tuple[str, ...] | None = None  # image: replaces ENTRYPOINT
    workdir: str | None = None  # image: working directory inside
    env: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # relative to ``base``, copied into the working folder
    base: str = ""  # the scenario file's folder (not part of the run id)
    digests: dict[str, str] = field(default_factory=dict)  # file or image -> sha256 of its content (in the run id)
    user: str | None = None  # None: SUDO_UID's user, else nobody
    start_ns: int = 0  # after t0 (or after ``after`` is ready)
    after: str | None = None  # a process name or a service kind
    ready: dict[str, Any] = field(default_factory=dict)  # {} | {"tcp": port} | {"log": regex} | {"delay_ns": n}
    ready_timeout_ns: int = 30_000_000_000
    stop_ns: int | None = None  # after t0; None: the run's end
    stop_signal: str = "SIGTERM"
    grace_ns: int = 5_000_000_000
    expect: dict[str, Any] | None = None  # {"exit": n} | {"running": True} | {"signal": "SIGINT"}; None: default
    metrics: dict[str, Any] | None = None  # {"json_lines": "stdout"|file, "latency": key, "unit": ..} | ...

    def __hash__(self) -> int:
        return hash((self.name, self.host, self.command, self.image, self.image_ref))

    @property
    def in_container(self) -> bool:
        """It runs an image (an archive here, or one the cluster pulls), not a command."""
        return self.image is not None or self.image_ref is not None

    def path(self, relative: str) -> str:
        """A file named in the scenario (``files``, ``image``) as an absolute path."""
        import os.path

        return os.path.join(self.base, relative)


@dataclass(frozen=True)
class Run:
    """One run of a sweep: a fully resolved scenario."""

    scenario: str  # scenario name
    sweep_id: str  # "<name>-<8 hex>": stable for the same scenario content
    run_id: str  # 12 hex chars: stable hash of everything resolved below
    index: int  # position in the sweep (0-based)
    params: dict[str, Any]  # the swept values of this run, as written in the file ({"loss": "5%"})
    seed: int
    repeat: int  # repetition number, 0-based (scenario.repeat > 1)
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    workload: Workload | None  # None: a run of [[process]] entries only (docs/applications.md)
    engine: str = "auto"  # scenario-wide default; each Link carries its own resolved choice
    services: tuple[Service, ...] = ()  # only the services this run's protocol uses
    workloads: tuple[Workload, ...] = ()  # [[workload]] entries after the first (``workload``)
    events: tuple[Event, ...] = ()  # [[event]] entries, in time order
    series_interval_ns: int = 1_000_000_000  # runs with a timeline: one interval of the time series
    processes: tuple[Process, ...] = ()  # [[process]] entries: the user's own programs (docs/applications.md)
    timeout_ns: int | None = None  # runs without a workload: [scenario] timeout (else the workload's timeout_ns)
    agents: str = "auto"  # [scenario] agents: "host" (one agent process per host), "flow" (one per flow), "auto"

    def __hash__(self) -> int:
        return hash(self.run_id)

    @property
    def all_workloads(self) -> tuple[Workload, ...]:
        return (self.workload, *self.workloads) if self.workload is not None else ()

    @property
    def has_timeline(self) -> bool:
        """Runs with several workloads or senders, a delayed start or events take the timeline runner."""
        if self.workload is None:
            return False  # a run of processes only: its events are the runner's (run.runner.measure_processes)
        return bool(self.workloads or self.events or self.workload.also_from or self.workload.start_ns)

    @property
    def run_timeout_ns(self) -> int:
        """The time limit of the run (the scenario's timeout)."""
        return self.workload.timeout_ns if self.workload is not None else (self.timeout_ns or 60_000_000_000)

    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Sweep:
    """A scenario expanded: what ``roughnet show`` prints and ``roughnet run`` executes."""

    scenario: str
    sweep_id: str
    source: str  # path of the scenario file as given
    axes: dict[str, list[Any]]  # swept key -> values, in file order
    runs: tuple[Run, ...]
    report: dict[str, Any] = field(default_factory=dict)  # [report] hints, validated
    description: str = ""
    files: dict[str, str] = field(default_factory=dict)  # axis -> the schedule file its entries came from
