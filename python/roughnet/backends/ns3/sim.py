"""One run as an ns-3 simulation: the run's hosts, links and agent configurations in, what the agents
would have printed out.

Owns the translation of a resolved ``runspec.Run`` into ns-3 objects (nodes, point-to-point and CSMA
channels, error models, queues, TCP defaults) and of the agents' configurations (docs/agent-protocol.md,
the very objects ``run.agents.agent_specs`` builds) into the Applications of ``apps.cc``; it runs the
simulation and reads back raw counts.  Turning those into result lines is ``results``'s; what may
be simulated at all is ``preflight``'s.

ns-3 is imported here, lazily (``load``: about 10 s, once per process), and only this module and
``apps.cc`` touch it.  The simulator is a process-wide singleton: one simulation at a time, each
ending with ``Simulator::Destroy``; it runs in slices of simulated time (``run_in_slices``), so a
signal is acted on within one slice.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import AgentError
from ...links.kernel import queue_limit_bytes
from ...topo import naming
from . import preflight

log = logging.getLogger(__name__)

_lock = threading.Lock()
_ns: Any = None

#: IPv4 (20) + TCP (20) header bytes, and the timestamp option both Linux and ns-3 put on every segment (12).
TCP_IP_HEADERS = 40
TCP_TIMESTAMP_OPTION = 12
#: Linux's minimum retransmission timeout (TCP_RTO_MIN, include/net/tcp.h); ns-3's default is 1 s.
LINUX_MIN_RTO_NS = 200_000_000
#: Where this machine's kernel keeps its TCP defaults: ns-3 runs with the same ones where it can.
_PROC_TCP = Path("/proc/sys/net/ipv4")
#: Buffers when the scenario sets none.  Linux autotunes them up to tcp_wmem/tcp_rmem's third field (these
#: figures are the kernel's defaults, used if /proc cannot be read); ns-3 does not autotune (see tcp_model).
DEFAULT_SND_BUF = 4194304
DEFAULT_RCV_BUF = 6291456
#: Neighbour resolution as Linux does it: the ARP request leaves at once (ns-3 waits a random 0-10 ms,
#: ArpL3Protocol::RequestJitter) and up to 101 packets wait for the answer (net.ipv4.neigh.default.unres_qlen;
#: ns-3 keeps 3 and drops the rest, which lost the first datagrams of a stream).
ARP_PENDING_PACKETS = 101
#: ns-3's own default buffer (ns3::TcpSocket::SndBufSize), the least a simulated sender gets.
NS3_BUF = 131072
#: Simulated time between the simulation's returns to Python (where Ctrl-C is acted on): ``run_in_slices``.
SLICE_NS = 20_000_000


def load() -> Any:
    """The ns-3 bindings with roughnet's Applications compiled in (imported and compiled once per process).

    cling writes to the process's stderr while ns-3 loads ("Failed to materialize symbols" about ns-3's
    static initialisers, harmless: every simulation test passes with it); that goes to the log at debug
    level instead of the user's terminal, and into the error when loading fails."""
    global _ns
    with _lock:
        if _ns is None:
            t0 = time.monotonic()
            with tempfile.TemporaryFile() as said:
                saved = os.dup(2)
                os.dup2(said.fileno(), 2)
                failure: Exception | None = None
                try:
                    from ns import ns  # the PyPI package ``ns3``

                    ns.cppyy.cppdef(Path(__file__).with_name("apps.cc").read_text())
                except Exception as e:  # noqa: BLE001 - ImportError, or cppyy's SyntaxError for a compile error
                    failure = e
                finally:
                    os.dup2(saved, 2)
                    os.close(saved)
                said.seek(0)
                text = said.read().decode(errors="replace").strip()
            if failure is not None:
                raise AgentError(f"cannot load ns-3 (the ns3 package, `make` installs it) with roughnet's "
                                 f"applications: {failure}; it said: {text[-1500:] or 'nothing'}") from failure
            if text:
                log.debug("ns-3 said while loading: %s", text)
            _ns = ns
            log.info("ns-3 loaded in %.1f s", time.monotonic() - t0)
        return _ns


def _kernel_value(name: str, field_index: int | None, default: Any) -> Any:
    try:
        text = (_PROC_TCP / name).read_text().split()
        return text[field_index] if field_index is not None else text[0]
    except (OSError, IndexError):
        return default


@dataclass
class TcpModel:
    """The TCP settings a simulation runs with, as recorded in the run's backend_info."""

    congestion: str
    socket_type: str
    segment_bytes: int
    send_buffer: int
    recv_buffer: int
    nodelay: bool
    min_rto_ns: int = LINUX_MIN_RTO_NS

    def describe(self) -> dict[str, Any]:
        return {"congestion": self.congestion, "ns3_socket_type": self.socket_type,
                "segment_bytes": self.segment_bytes, "send_buffer": self.send_buffer,
                "recv_buffer": self.recv_buffer, "nodelay": self.nodelay, "min_rto_ns": self.min_rto_ns,
                "sack": True, "timestamps": True}


def tcp_model(run: Any) -> TcpModel:
    """TCP as the scenario asks, the rest as this machine's kernel has it: its congestion control, a segment
    of the smallest MTU less headers and timestamps, Linux's 200 ms minimum RTO, the receive buffer at
    tcp_rmem's ceiling (Linux autotunes the window up to it) and the send buffer autotuned_send_buffer's.
    ``mss`` is TCP_MAXSEG as Linux takes it: the MSS announced, the timestamp option then out of each
    segment's payload."""
    o = run.workload.options
    mtu = min((lk.mtu for lk in run.links), default=1500)
    mss = min(int(o.get("mss") or mtu - TCP_IP_HEADERS), mtu - TCP_IP_HEADERS)
    cc = o.get("congestion") or _kernel_value("tcp_congestion_control", None, "cubic")
    if cc not in preflight.CONGESTION:
        cc = "cubic"
    return TcpModel(
        congestion=cc, socket_type=preflight.CONGESTION[cc],
        segment_bytes=mss - TCP_TIMESTAMP_OPTION,
        send_buffer=int(o.get("send_buffer") or autotuned_send_buffer(run)),
        recv_buffer=int(o.get("recv_buffer") or _kernel_value("tcp_rmem", 2, DEFAULT_RCV_BUF)),
        nodelay=bool(o.get("nodelay", True)),
    )


def autotuned_send_buffer(run: Any) -> int:
    """A fixed send buffer standing for Linux's autotuned one, which grows to about twice the congestion
    window (net/ipv4/tcp_input.c, tcp_sndbuf_expand); a window needs at most the path's bandwidth-delay
    product plus the bottleneck's queue.  So: twice (slowest rate x round trip over every link + the
    largest queue), at least ns-3's default and at most tcp_wmem's ceiling.  A fixed ceiling instead would
    leave megabytes queued in the socket when a timed bulk ends, which Linux never holds."""
    ceiling = int(_kernel_value("tcp_wmem", 2, DEFAULT_SND_BUF))
    dirs = [(d, lk.mtu) for lk in run.links for d in (lk.forward, lk.reverse)]
    rate = min(d.rate_bps for d, _ in dirs if d.rate_bps)
    rtt_ns = sum(lk.forward.delay_ns + lk.reverse.delay_ns for lk in run.links)
    queue = max(queue_limit_bytes(d, mtu) for d, mtu in dirs)
    need = 2 * (rate / 8 * rtt_ns / 1e9 + queue)
    return int(min(ceiling, max(NS3_BUF, need)))


def queue_size(d: Any, mtu: int) -> str:
    """The device queue as ns-3 writes it: the scenario's packets, else the kernel engine's byte limit
    (``queue_bytes``, or 50 ms at the rate and at least 10 frames: links.kernel)."""
    if d.queue_packets is not None and d.queue_bytes is None:
        return f"{int(d.queue_packets)}p"
    return f"{queue_limit_bytes(d, mtu)}B"


@dataclass
class Raw:
    """What one simulation left: the Applications (read by ``results``) and the counters."""

    apps: list[tuple[Any, dict[str, Any]]]  # (AgentSpec, the fields of the Application that played it)
    node_counters: dict[str, dict[str, int]]
    link_counters: dict[int, dict[str, Any]]
    simulated_s: float
    wall_s: float
    model: dict[str, Any] = field(default_factory=dict)


def _attach_loss(rs: Any, dev: Any, d: Any, combined_loss: float | None, stream: int, filter_own: bool) -> Any:
    """A receive error model on ``dev``: ``d``'s Gilbert-Elliott chain, or random loss (``combined_loss`` when
    given, else ``d.loss``)."""
    m = rs.AttachLoss(dev, filter_own)
    m.rv.SetStream(stream)
    if d.loss_model is not None:  # gilbert_elliott (preflight refused the others)
        m.model = 1
        m.p, m.r, m.h, m.k = (float(d.loss_model[x]) for x in ("p", "r", "h", "k"))
    else:
        m.model = 0
        m.p = float(d.loss if combined_loss is None else combined_loss)
    return m


def simulate(run: Any, specs: list[Any]) -> Raw:
    """Build ``run`` in ns-3, play ``specs`` (receivers first, the sender last), run, read back.

    The simulation stops when every receiver has finished (everything expected arrived, the linger
    after the end marker ran out, every TCP sender closed) or at the workload's timeout, in simulated
    time.
    """
    ns = load()
    with _lock:
        try:
            return _simulate(ns, run, specs)
        finally:
            ns.Simulator.Destroy()


def _simulate(ns: Any, run: Any, specs: list[Any]) -> Raw:
    rs = ns.cppyy.gbl.roughnet_sim
    w = run.workload
    ns.Ipv4AddressGenerator.Reset()
    ns.RngSeedManager.SetSeed(max(1, int(run.seed) % (1 << 31)))
    ns.RngSeedManager.SetRun(1 + int(run.repeat))
    tcp = tcp_model(run)
    ns.Config.SetDefault("ns3::TcpL4Protocol::SocketType", ns.StringValue(tcp.socket_type))
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(tcp.segment_bytes))
    ns.Config.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(tcp.send_buffer))
    ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(tcp.recv_buffer))
    ns.Config.SetDefault("ns3::TcpSocket::TcpNoDelay", ns.BooleanValue(tcp.nodelay))
    ns.Config.SetDefault("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.NanoSeconds(tcp.min_rto_ns)))

    ns.Config.SetDefault("ns3::ArpL3Protocol::RequestJitter",
                         ns.StringValue("ns3::ConstantRandomVariable[Constant=0.0]"))
    ns.Config.SetDefault("ns3::ArpCache::PendingQueueSize", ns.UintegerValue(ARP_PENDING_PACKETS))

    names = run.host_names()
    nodes = ns.NodeContainer()
    nodes.Create(len(names))
    node = {h: nodes.Get(i) for i, h in enumerate(names)}
    ns.InternetStackHelper().Install(nodes)
    counters = {h: rs.NodeCounters() for h in names}
    for h in names:
        rs.WatchNode(node[h], counters[h])

    keep: list[Any] = []  # Python references to everything C++ holds by pointer only
    link_drops: dict[int, dict[str, Any]] = {}
    channels: dict[str, Any] = {}
    stream = 1
    for link in run.links:
        fwd, rev = link.forward, link.reverse
        members = ns.NodeContainer()
        for h in link.hosts:
            members.Add(node[h])
        if not link.shared and link.medium == "csma":
            # A pair on ns-3's CSMA channel (medium = "csma"; SEEDS S1's channel): one transmitter at a
            # time, busy for serialisation + the one-way delay; losses per receiving side as point-to-point.
            helper = ns.CsmaHelper()
            helper.SetChannelAttribute("DataRate", ns.DataRateValue(ns.DataRate(fwd.rate_bps)))
            helper.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(fwd.delay_ns)))
            devs = helper.Install(members)
            queues = [queue_size(fwd, link.mtu), queue_size(rev, link.mtu)]
            models = {}
            for pos, d in ((1, fwd), (0, rev)):
                rs.ConfigureDevice(devs.Get(pos), fwd.rate_bps, link.mtu)
                if d.loss or d.loss_model is not None:
                    models[pos] = _attach_loss(rs, devs.Get(pos), d, None, stream, True)
                    stream += 1
            link_drops[link.index] = {"kind": "csma", "pair": True, "models": models}
            channels[str(link.index)] = {"channel": "csma", "delay_ns": fwd.delay_ns, "rate_bps": fwd.rate_bps,
                                         "mtu": link.mtu, "queue": {"forward": queues[0], "reverse": queues[1]},
                                         "backoff": "ns-3's defaults (1 us slots, ceiling 10, 1000 retries)"}
        elif not link.shared:
            helper = ns.PointToPointHelper()
            helper.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(fwd.delay_ns)))
            devs = helper.Install(members)
            rs.ConfigureDevice(devs.Get(0), fwd.rate_bps, link.mtu)
            rs.ConfigureDevice(devs.Get(1), rev.rate_bps, link.mtu)
            queues = [queue_size(fwd, link.mtu), queue_size(rev, link.mtu)]
            # forward (hosts[0] -> hosts[1]) is lost on hosts[1]'s receiving side, reverse on hosts[0]'s
            models = {}
            for pos, d in ((1, fwd), (0, rev)):
                if d.loss or d.loss_model is not None:
                    models[pos] = _attach_loss(rs, devs.Get(pos), d, None, stream, False)
                    stream += 1
            link_drops[link.index] = {"kind": "point-to-point", "models": models}
            channels[str(link.index)] = {"channel": "point-to-point", "delay_ns": fwd.delay_ns,
                                         "rate_bps": {"forward": fwd.rate_bps, "reverse": rev.rate_bps},
                                         "mtu": link.mtu, "queue": {"forward": queue_size(fwd, link.mtu),
                                                                    "reverse": queue_size(rev, link.mtu)}}
        else:
            # One CSMA medium.  A frame from one host to another passes the sender's forward and the
            # receiver's reverse direction in the scenario's model, so their delays add and their random
            # losses combine; preflight made both directions equal.
            helper = ns.CsmaHelper()
            helper.SetChannelAttribute("DataRate", ns.DataRateValue(ns.DataRate(fwd.rate_bps)))
            delay = fwd.delay_ns + rev.delay_ns
            helper.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(delay)))
            devs = helper.Install(members)
            combined = 1.0 - (1.0 - fwd.loss) * (1.0 - rev.loss)
            models = {}
            queues = [queue_size(fwd, link.mtu)] * len(link.hosts)
            for pos in range(len(link.hosts)):
                rs.ConfigureDevice(devs.Get(pos), fwd.rate_bps, link.mtu)
                if combined:
                    models[pos] = _attach_loss(rs, devs.Get(pos), fwd, combined, stream, True)
                    stream += 1
            link_drops[link.index] = {"kind": "csma", "models": models}
            channels[str(link.index)] = {"channel": "csma", "delay_ns": delay, "rate_bps": fwd.rate_bps,
                                         "mtu": link.mtu, "loss": combined, "queue": queue_size(fwd, link.mtu)}
        addr = ns.Ipv4AddressHelper()
        net = naming.subnet(link.index)
        addr.SetBase(ns.Ipv4Address(str(net.network_address)), ns.Ipv4Mask(str(net.netmask)))
        addr.Assign(devs)
        # The scenario's queue, one drop-tail limit per sending device as the link engines have it: a FIFO
        # queue disc in place of the default one Ipv4AddressHelper installed, over a one-packet device queue
        # that ns-3's flow control keeps fed from it.
        qdrops = [ns.cppyy.gbl.std.vector["uint64_t"](1, 0) for _ in link.hosts]
        for pos, size in enumerate(queues):
            rs.SetQueue(devs.Get(pos), size)
            rs.WatchQueue(devs.Get(pos), qdrops[pos].data())
        keep.extend(qdrops)
        link_drops[link.index]["qdrops"] = qdrops
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()

    done = rs.Done()
    done.pending = len(specs) - 1
    keep.append(done)
    apps: list[tuple[Any, Any]] = []
    for spec in specs:
        # Receivers from t0, the sender 1 ms later: the runner starts it once every receiver is ready.
        start_ns = 0 if spec is not specs[-1] else 1_000_000
        apps.append((spec, _application(rs, node[spec.host], start_ns, spec, done, counters[spec.host])))
    ns.Simulator.Stop(ns.NanoSeconds(int(w.timeout_ns)))
    t0 = time.monotonic()
    run_in_slices(ns, done, int(w.timeout_ns))
    wall = time.monotonic() - t0
    simulated = ns.Simulator.Now().GetNanoSeconds() / 1e9
    return Raw(
        apps=[(spec, read_app(spec, app)) for spec, app in apps],
        node_counters={h: _node_counters(c) for h, c in counters.items()},
        link_counters={i: _link_counters(run, i, d) for i, d in link_drops.items()},
        simulated_s=simulated, wall_s=wall,
        model={"tcp": tcp.describe() if w.protocol == "tcp" else None, "links": channels,
               "routing": "ns3::Ipv4GlobalRouting",
               "queue": "ns3::FifoQueueDisc of the scenario's size over a one-packet device queue",
               "arp": {"request_jitter_ns": 0, "pending_packets": ARP_PENDING_PACKETS}},
    )


def run_in_slices(ns: Any, done: Any, timeout_ns: int, slice_ns: int = SLICE_NS) -> None:
    """``Simulator::Run`` until every receiver is done (``done.pending``) or ``timeout_ns`` of simulated time,
    returning to Python every ``slice_ns`` of simulated time: a signal handler (Ctrl-C, SIGTERM: the CLI's
    ``Interrupted``) runs there, so an interruption ends a long simulation within one slice instead of when
    the whole simulation returns.  The caller's ``finally`` destroys the simulator."""
    while True:
        now = ns.Simulator.Now().GetNanoSeconds()
        if done.pending <= 0 or now >= timeout_ns:
            return
        step = min(slice_ns, timeout_ns - now)
        ns.Simulator.Stop(ns.NanoSeconds(step))
        ns.Simulator.Run()
        if ns.Simulator.Now().GetNanoSeconds() < now + step:  # stopped before the slice's end: finished
            return


def _application(rs: Any, node: Any, start_ns: int, spec: Any, done: Any, counters: Any) -> Any:
    cfg = spec.config
    tcp = cfg["protocol"] == "tcp"

    def inet(hostport: str) -> Any:
        ip, _, port = hostport.rpartition(":")
        return rs.Inet(ip, int(port))

    if spec.role == "receiver":
        if tcp:
            app = rs.NewBulkReceiver(node, start_ns)
            app.senders = 1
            app.counters = counters
        else:
            app = rs.NewStreamReceiver(node, start_ns)
            app.messages = -1 if cfg.get("messages") is None else int(cfg["messages"])
            app.warmup = int(cfg.get("warmup") or 0)
            app.linger_ns = int(cfg.get("linger_ms", 500)) * 1_000_000
        app.listen = inet(cfg["listen"])
        app.done = done
        return app
    if tcp:
        app = rs.NewBulkSender(node, start_ns)
        if len(cfg["peers"]) != 1:
            raise AgentError("the ns3 backend's TCP bulk sender sends to one receiver; expected one peer")
        app.peer = inet(cfg["peers"][0])
        app.send_size = int(cfg["options"].get("send_size") or 131072)
        app.chunks = -1 if cfg.get("messages") is None else int(cfg["messages"])
        app.duration_ns = -1 if cfg.get("duration_ms") is None else int(cfg["duration_ms"]) * 1_000_000
        app.counters = counters
        return app
    app = rs.NewStreamSender(node, start_ns)
    for p in cfg["peers"]:
        app.peers.push_back(inet(p))
    app.payload = int(cfg["payload_bytes"])
    app.messages = -1 if cfg.get("messages") is None else int(cfg["messages"])
    app.duration_ns = -1 if cfg.get("duration_ms") is None else int(cfg["duration_ms"]) * 1_000_000
    # UDP bulk ("as fast as possible"): the sender keeps its sending queue full (apps.cc, ``saturate``)
    app.saturate = cfg["pattern"] == "bulk" or not cfg.get("rate_msgs_per_s")
    app.rate = float(cfg.get("rate_msgs_per_s") or 1.0)
    app.warmup = int(cfg.get("warmup") or 0)
    return app


def _node_counters(c: Any) -> dict[str, int]:
    """A node's counters under the names of the kernel's (run.counters): what collect.tcp_metrics reads."""
    return {"OutSegs": int(c.tcp_out), "InSegs": int(c.tcp_in), "RetransSegs": int(c.tcp_retrans),
            "UdpOutDatagrams": int(c.udp_out), "UdpInDatagrams": int(c.udp_in)}


def _link_counters(run: Any, index: int, d: dict[str, Any]) -> dict[str, Any]:
    """Per direction, what the link dropped (as the link engines count: ``drops_loss``, ``drops_queue``).

    Point-to-point (and a pair on a CSMA channel): forward is what hosts[0] sent (its queue) and hosts[1]
    received (its error model).  A shared CSMA segment: forward holds the sending queues of every host, reverse the losses at every receiver.
    """
    models, qdrops = d["models"], [int(q[0]) for q in d["qdrops"]]

    def lost(positions) -> tuple[int, int]:
        ms = [models[p] for p in positions if p in models]
        return sum(int(m.dropped) for m in ms), sum(int(m.decided) for m in ms)

    out: dict[str, Any] = {"engine": "ns3", "channel": d["kind"]}
    if d["kind"] == "point-to-point" or d.get("pair"):
        for name, tx, rx in (("forward", 0, 1), ("reverse", 1, 0)):
            dropped, decided = lost([rx])
            out[name] = {"drops_loss": dropped, "drops_queue": qdrops[tx], "seen_frames": decided}
    else:
        n = len(qdrops)
        dropped, decided = lost(range(n))
        out["forward"] = {"drops_loss": 0, "drops_queue": sum(qdrops)}
        out["reverse"] = {"drops_loss": dropped, "drops_queue": 0, "seen_frames": decided}
    return out


def version() -> str | None:
    """ns-3's version as its package states it (no import of ns-3)."""
    from importlib import metadata

    try:
        return metadata.version("ns3")
    except metadata.PackageNotFoundError:
        return None



#: The fields of each Application that make its result line (results.*), by (role, protocol).
_FIELDS = {
    ("receiver", "tcp"): ("bytes", "first_ns", "last_ns", "end_reason", "complete"),
    ("receiver", "udp"): ("expected", "received", "duplicates", "reordered", "warmup_received", "bytes", "bad",
                          "highest", "first_ns", "last_ns", "end_reason", "complete"),
    ("sender", "tcp"): ("sent", "bytes", "send_errors", "first_ns", "last_ns", "closed"),
    ("sender", "udp"): ("sent", "warmup_sent", "bytes", "send_errors", "first_ns", "last_ns", "finished"),
}


def read_app(spec: Any, app: Any) -> dict[str, Any]:
    """The Application's counts as plain Python values (read before the simulator is destroyed)."""
    out: dict[str, Any] = {}
    for name in _FIELDS[(spec.role, spec.config["protocol"])]:
        v = getattr(app, name)
        out[name] = str(v) if name == "end_reason" else bool(v) if name in ("complete", "closed", "finished") else int(v)
    if spec.role == "receiver" and spec.config["protocol"] == "udp":
        out["lat_intended"] = list(app.lat_intended)
        out["lat_actual"] = list(app.lat_actual)
    return out
