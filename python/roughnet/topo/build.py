"""Topology: a run's hosts as namespaces, its links as veth pairs and bridges.

Owns creating and removing a run's namespaces, veth pairs, bridges, addresses,
routes, MTUs, offload settings and per-namespace sysctls (overlay devices on
top of links are ``topo.overlay``'s, called from here), and starting
processes inside them (recorded in the ledger).  Names and addresses come from
``topo.naming``; every object is written to the ``Ledger`` before it is
created.  Impairments are not applied here (that is ``links``); the topology
only knows which links must be built "relayed" (a namespace in the middle for
the userspace emulator: between two hosts, or, for a shared segment, the
segment namespace holding one veth end per host and no bridge).

Nothing here touches the root namespace: namespaces are created with
``ip netns add``, and every other command runs inside one of them
(``ip -n NS ...`` / ``ip netns exec NS ...``); a veth pair is created inside
one run namespace with its peer placed directly into another.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RoughnetError, TopologyError
from ..runspec import Link, Run
from . import inns, naming, overlay
from .ledger import Ledger, process_start_time, remove_other
from .system import delete_ns, ns_exec, ns_exists, pids_in_namespaces, run_all, run_cmd, stop_processes

log = logging.getLogger(__name__)

#: sysctls set inside every namespace roughnet creates (never in the root namespace).
#: IPv6 off keeps stray traffic (DAD, router solicitations, MLD) out of measurements;
#: ip_forward lets hosts route multi-hop paths; rp_filter off so asymmetric
#: shortest paths are not dropped.  The "default" keys apply to interfaces
#: created later, so these are set before any veth exists.
NS_SYSCTLS = (
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.ip_forward=1",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
)

#: How long teardown waits after SIGTERM before SIGKILL: roughnet-wire keeps sending the frames it holds
#: for up to 2 s after SIGTERM (docs/wire.md, "Stopping: the drain"); other processes exit at once and
#: are not slowed by this.
TEARDOWN_GRACE_S = 3.0

ROLE_A, ROLE_B = "a", "b"  # host ends of a two-host link (hosts[0], hosts[1])
ROLE_MEMBER, ROLE_PORT = "member", "port"  # shared segment: host end, bridge port
ROLE_RELAY_A, ROLE_RELAY_B = "relay-a", "relay-b"  # relayed link: ends in the link namespace
ROLE_OVERLAY = "overlay"  # a host's VXLAN device on a link with an overlay (topo.overlay)


@dataclass(frozen=True)
class IfaceInfo:
    """One interface roughnet creates.

    ``host`` is the host whose interface this is (``member``, ``a``, ``b``) or
    which the interface leads to (``port``, ``relay-a``, ``relay-b``);
    ``position`` is that host's position in the link's host list; ``address``
    is set for host ends only.
    """

    ns: str
    ifname: str
    link: int
    role: str
    host: str
    position: int
    address: str | None = None


_FAILED_LINE = re.compile(r"Command failed -:(\d+)")


def _ip_batch(ns: str, cmds: Sequence[tuple[list[str], str]]) -> None:
    """``ip -n ns -batch -`` over ``cmds`` ((args, what) in order); stops at the first failing line and raises
    TopologyError naming its ``what``."""
    if not cmds:
        return
    text = "".join(" ".join(args) + "\n" for args, _ in cmds)
    proc = run_cmd(["ip", "-n", ns, "-batch", "-"], f"running {len(cmds)} ip commands in {ns}", input=text,
                   check=False)
    if proc.returncode == 0:
        return
    err = (proc.stderr or proc.stdout).strip()
    m = _FAILED_LINE.search(err)
    args, what = cmds[int(m.group(1)) - 1] if m and 0 < int(m.group(1)) <= len(cmds) else cmds[0]
    msg = "; ".join(ln for ln in err.splitlines() if not _FAILED_LINE.search(ln)) or "(no message)"
    if not m:
        what = f"running {len(cmds)} ip commands in {ns} (from {what!r})"
    raise TopologyError(f"{what} failed: `ip -n {ns} {' '.join(args)}`: {msg}")


class Topology:
    """Build, use and remove the namespaces and links of one run."""

    #: A host's datagrams to a neighbour leave from its address on their link (``address``), so a host agent
    #: may tell UDP flows apart by source address (run.hostagent.share_udp_sockets).
    shares_udp_sockets = True
    #: ``popen`` may be called from several threads at once (run.hostagent starts a hundred host agents so).
    concurrent_popen = True

    def __init__(self, run: Run, ledger: Ledger, engines: Mapping[int, str] | None = None):
        self.spec = run
        self.ledger = ledger
        self.token = ledger.token
        self.engines = dict(engines or {})
        self._hosts = run.host_names()
        self._links: list[Link] = sorted(run.links, key=lambda lk: lk.index)
        naming.check_names(self.token, self._hosts, self._links)
        self._ifaces = self._plan_interfaces()
        self._routes = naming.plan_routes(self._hosts, self._links)
        self._paths = naming.Paths(self._hosts, self._links)
        self._children: dict[int, subprocess.Popen] = {}
        self._built = False
        #: `ip` commands waiting to run as one `ip -n NS -batch -` per namespace (see _flush).
        self._queued: dict[str, list[tuple[list[str], str]]] = {}
        #: ethtool calls and namespaces whose sysctls are to be set, waiting to run (see _flush).
        self._ethtool: list[tuple[str, str]] = []
        self._sysctls: list[str] = []
        #: veth pairs to make (recorded in the ledger already), made together after every link is planned.
        self._creates: list[Callable[[], object]] = []
        self._veths: list[dict[str, Any]] = []
        #: MACs roughnet chose for interfaces it made ((ns, ifname) -> MAC).
        self._macs: dict[tuple[str, str], str] = {}
        self.teardown_errors: list[str] = []

    # ---- names and plan (no I/O) -------------------------------------------------

    def relayed(self, index: int) -> bool:
        return self.engines.get(index) == "wire"

    def ns(self, host: str) -> str:
        """Namespace name of ``host``."""
        if host not in self._hosts:
            raise TopologyError(f"unknown host {host!r}; expected one of {self._hosts}")
        return naming.host_ns(self.token, host)

    def link(self, index: int) -> Link:
        for link in self._links:
            if link.index == index:
                return link
        raise TopologyError(f"unknown link {index}; expected one of {[lk.index for lk in self._links]}")

    def segment_ns(self, index: int) -> str:
        """Namespace of shared segment ``index`` (its bridge, or its relay when the engine is wire)."""
        if not self.link(index).shared:
            raise TopologyError(f"link {index} joins two hosts; only links of 3+ hosts have a segment namespace")
        return naming.segment_ns(self.token, index)

    def link_ns(self, index: int) -> str:
        """Namespace where relayed link ``index``'s roughnet-wire runs.

        Between the two ends of a two-host link: ``rn-<token>-l<i>``; for a
        relayed shared segment: the segment namespace ``rn-<token>-s<i>``.
        """
        link = self.link(index)
        if not self.relayed(index):
            raise TopologyError(f"link {index} is not relayed (its engine is {self.engines.get(index)!r}, not \"wire\")")
        if link.shared:
            return naming.segment_ns(self.token, index)
        return naming.link_ns(self.token, index)

    def relay_ifaces(self, index: int) -> tuple[str, str]:
        """(interface towards hosts[0], interface towards hosts[1]) inside ``link_ns(index)``."""
        self.link_ns(index)
        if self.link(index).shared:
            raise TopologyError(f"link {index} is a shared segment of {len(self.link(index).hosts)} hosts; "
                                f"expected relay_ports() for it (relay_ifaces is for two-host links)")
        return naming.relay_ifnames(index)

    def relay_ports(self, index: int) -> list[tuple[str, str]]:
        """(port interface in ``link_ns(index)``, MAC of the host behind it), in host order.

        For a relayed shared segment; reads the MACs, so only after ``build()``.
        """
        link = self.link(index)
        self.link_ns(index)
        if not link.shared:
            raise TopologyError(f"link {index} joins two hosts; expected relay_ifaces() for it")
        out = []
        for pos, host in enumerate(link.hosts):
            out.append((naming.port_ifname(index, pos), self._mac(self.ns(host), naming.host_ifname(link, host))))
        return out

    def namespaces(self) -> list[str]:
        """Every namespace of this topology, in creation order."""
        out = [self.ns(h) for h in self._hosts]
        for link in self._links:
            if link.shared:
                out.append(naming.segment_ns(self.token, link.index))
            elif self.relayed(link.index):
                out.append(naming.link_ns(self.token, link.index))
        return out

    def address(self, host: str, seen_from: str) -> str:
        """IPv4 address of ``host`` that ``seen_from`` should use to reach it."""
        for h in (host, seen_from):
            if h not in self._hosts:
                raise TopologyError(f"unknown host {h!r}; expected one of {self._hosts}")
        return str(naming.address_seen_from(host, seen_from, self._hosts, self._links, self._paths))

    def interfaces(self) -> list[IfaceInfo]:
        """Every interface of the topology with its namespace, link and role."""
        return list(self._ifaces)

    def routes(self) -> list[naming.Route]:
        return list(self._routes)

    def _plan_interfaces(self) -> list[IfaceInfo]:
        out: list[IfaceInfo] = []
        for link in self._links:
            i = link.index
            for pos, host in enumerate(link.hosts):
                addr = str(naming.host_address(i, pos))
                ifname = naming.host_ifname(link, host)
                hns = naming.host_ns(self.token, host)
                if link.shared:
                    out.append(IfaceInfo(hns, ifname, i, ROLE_MEMBER, host, pos, addr))
                    out.append(IfaceInfo(naming.segment_ns(self.token, i), naming.port_ifname(i, pos), i,
                                         ROLE_PORT, host, pos))
                else:
                    out.append(IfaceInfo(hns, ifname, i, ROLE_A if pos == 0 else ROLE_B, host, pos, addr))
            if not link.shared and self.relayed(i):
                lns = naming.link_ns(self.token, i)
                ra, rb = naming.relay_ifnames(i)
                out.append(IfaceInfo(lns, ra, i, ROLE_RELAY_A, link.hosts[0], 0))
                out.append(IfaceInfo(lns, rb, i, ROLE_RELAY_B, link.hosts[1], 1))
            if naming.has_overlay(link):
                for pos, host in enumerate(link.hosts):
                    out.append(IfaceInfo(naming.host_ns(self.token, host), naming.overlay_ifname(i), i,
                                         ROLE_OVERLAY, host, pos, str(naming.overlay_address(i, pos))))
        return out

    # ---- build ---------------------------------------------------------------------

    def build(self) -> None:
        """Create everything; on any failure remove what was made and raise TopologyError."""
        if self._built:
            raise TopologyError("this topology is already built; expected build() once per Topology")
        self._built = True
        try:
            self._add_namespaces(self.namespaces())
            self._set_sysctls()  # before any interface exists: the "default" keys apply to later ones
            for link in self._links:
                if link.shared and self.relayed(link.index):
                    self._add_relayed_segment(link)
                elif link.shared:
                    self._add_segment(link)
                elif self.relayed(link.index):
                    self._add_relayed(link)
                else:
                    self._add_pair(link)
            creates, self._creates = self._creates, []
            self.ledger.add_many(self._veths)  # recorded before any is made
            run_all(creates)  # the veth pairs
            for link in self._links:
                if naming.has_overlay(link):
                    overlay.add_devices(self, link)
            self._flush()  # offloads, interfaces up, bridge ports
            for link in self._links:
                if naming.has_overlay(link):
                    overlay.add_forwarding(self, link)
            for iface in self._ifaces:
                if iface.address is not None:
                    self._ip_later(iface.ns, ["addr", "add", f"{iface.address}/24", "dev", iface.ifname],
                                   f"adding address {iface.address} to {iface.ifname}")
            self._add_static_neighbours()
            for r in self._routes:
                hns = self.ns(r.host)
                self._ip_later(hns, ["route", "add", str(r.dest), "via", str(r.gateway), "dev", r.ifname],
                               f"adding route to {r.dest} via {r.gateway} in {hns}")
            self._flush()  # addresses, neighbours, routes
        except BaseException as e:  # also Ctrl-C: leave nothing behind
            log.debug("build failed (%s); tearing down", e)
            self.teardown()
            if isinstance(e, RoughnetError) or not isinstance(e, Exception):
                raise
            raise TopologyError(f"building the topology of run {self.spec.run_id} failed: {e}") from e
        log.info("topology %s built: %d namespaces, %d interfaces", self.token, len(self.namespaces()),
                 len(self._ifaces))

    def _ip(self, ns: str, args: Sequence[str], what: str) -> None:
        run_cmd(["ip", "-n", ns, *args], what)

    def _ip_later(self, ns: str, args: Sequence[str], what: str) -> None:
        """Queue ``ip -n ns args``: it runs at the next ``_flush``, after what was queued before it in ``ns``."""
        self._queued.setdefault(ns, []).append(([str(a) for a in args], what))

    def _flush(self) -> None:
        """Run what is queued: the namespaces' sysctls first (the "default" keys must hold before a
        namespace's interfaces are made), then one ``ip -batch`` per namespace (in queue order) and the
        offloads of each namespace's interfaces (``topo.inns``, no process), a few at a time; the first
        failure raises TopologyError naming what failed."""
        self._set_sysctls()
        queued, self._queued = self._queued, {}
        ethtool, self._ethtool = self._ethtool, []
        offloads: dict[str, list[str]] = {}
        for ns, ifname in ethtool:
            offloads.setdefault(ns, []).append(ifname)
        jobs: list[Callable[[], object]] = [lambda ns=ns, cmds=cmds: _ip_batch(ns, cmds)
                                            for ns, cmds in queued.items()]
        jobs += [lambda ns=ns, names=names: inns.in_netns(ns, lambda: inns.offloads_off(names))
                 for ns, names in offloads.items()]
        run_all(jobs)

    def _set_sysctls(self) -> None:
        """NS_SYSCTLS in the namespaces made since the last call (``topo.inns``: no process)."""
        sysctls, self._sysctls = self._sysctls, []
        run_all([lambda ns=ns: inns.in_netns(ns, lambda: inns.write_sysctls(NS_SYSCTLS)) for ns in sysctls])

    def _mac(self, ns: str, ifname: str) -> str:
        if (ns, ifname) in self._macs:
            return self._macs[(ns, ifname)]
        out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", ifname], capture_output=True,
                             text=True, check=False)
        try:
            return json.loads(out.stdout)[0]["address"]
        except (ValueError, LookupError) as e:
            raise TopologyError(f"reading the MAC address of {ns}/{ifname} failed: {out.stderr.strip()}") from e

    def _add_static_neighbours(self) -> None:
        """Permanent ARP entries between the hosts of every link.

        Without them the first packets of a run wait for ARP, and an impaired
        link can drop the ARP request or reply: the kernel then retries only
        after about a second, and a run measures that second instead of the
        link.  Real links resolve once and keep the entry; so do we, up front.
        """
        by_link: dict[tuple[int, bool], list[IfaceInfo]] = {}  # (link, overlay?) -> its addressed ends
        for iface in self._ifaces:
            if iface.address is not None:
                by_link.setdefault((iface.link, iface.role == ROLE_OVERLAY), []).append(iface)
        for members in by_link.values():
            macs = {m.ifname + "@" + m.ns: self._mac(m.ns, m.ifname) for m in members}
            for me in members:
                for peer in members:
                    if peer is me:
                        continue
                    self._ip_later(me.ns, ["neigh", "replace", peer.address, "lladdr",
                                           macs[peer.ifname + "@" + peer.ns], "dev", me.ifname, "nud", "permanent"],
                                   f"adding a static neighbour {peer.address} on {me.ns}/{me.ifname}")

    def _add_namespaces(self, names: Sequence[str]) -> None:
        """Every namespace of the topology (each recorded in the ledger first); sysctls and lo at the next
        ``_flush``. The first is made alone: `ip netns add` prepares /run/netns (a shared mount) when it is
        not yet, and two doing that at once would stack two mounts."""
        for ns in names:
            if ns_exists(ns):
                raise TopologyError(f"namespace {ns} already exists; expected it absent (another run with the "
                                    f"same token, or leftovers: run `roughnet clean`)")
        jobs = []
        self.ledger.add_many([{"kind": "netns", "name": ns} for ns in names])
        for ns in names:
            jobs.append(lambda ns=ns: run_cmd(["ip", "netns", "add", ns], f"creating namespace {ns}"))
            self._sysctls.append(ns)
            self._ip_later(ns, ["link", "set", "dev", "lo", "up"], f"bringing up lo in {ns}")
        if jobs:
            jobs[0]()
            run_all(jobs[1:])

    def _add_veth(self, ns_a: str, if_a: str, ns_b: str, if_b: str, link: Link, pos: int) -> None:
        """A veth pair made inside ``ns_a`` with its peer placed directly in ``ns_b``, with the link's MTU and
        MACs of roughnet's choosing (``naming.veth_mac``: no two in a run alike, and known without asking);
        offloads off and up at the next ``_flush``."""
        self._veths.append({"kind": "veth", "ns": ns_a, "name": if_a, "peer_ns": ns_b, "peer": if_b,
                            "link": link.index})
        mac_a, mac_b = naming.veth_mac(link.index, pos, 0), naming.veth_mac(link.index, pos, 1)
        argv = ["link", "add", if_a, "mtu", str(link.mtu), "address", mac_a, "type", "veth",
                "peer", "name", if_b, "mtu", str(link.mtu), "address", mac_b, "netns", ns_b]
        self._creates.append(lambda: self._ip(ns_a, argv, f"creating veth {ns_a}/{if_a} <-> {ns_b}/{if_b} with MTU {link.mtu}"))
        self._macs[(ns_a, if_a)], self._macs[(ns_b, if_b)] = mac_a, mac_b
        for ns, ifname in ((ns_a, if_a), (ns_b, if_b)):
            self._ethtool.append((ns, ifname))
            self._ip_later(ns, ["link", "set", "dev", ifname, "up"], f"bringing up {ns}/{ifname}")

    def _prepare_iface(self, ns: str, ifname: str, mtu: int) -> None:
        """MTU now; offloads off and up at the next ``_flush``."""
        self._ip(ns, ["link", "set", "dev", ifname, "mtu", str(mtu)], f"setting MTU {mtu} on {ns}/{ifname}")
        self._ethtool.append((ns, ifname))
        self._ip_later(ns, ["link", "set", "dev", ifname, "up"], f"bringing up {ns}/{ifname}")

    def _add_pair(self, link: Link) -> None:
        a, b = link.hosts
        self._add_veth(self.ns(a), naming.host_ifname(link, a), self.ns(b), naming.host_ifname(link, b), link, 0)

    def _add_relayed(self, link: Link) -> None:
        a, b = link.hosts
        lns = naming.link_ns(self.token, link.index)
        ra, rb = naming.relay_ifnames(link.index)
        self._add_veth(self.ns(a), naming.host_ifname(link, a), lns, ra, link, 0)
        self._add_veth(self.ns(b), naming.host_ifname(link, b), lns, rb, link, 1)
        for ifname in (ra, rb):
            # A relay reads every frame with AF_PACKET; promiscuous mode keeps it
            # independent of destination MACs.
            self._ip_later(lns, ["link", "set", "dev", ifname, "promisc", "on"], f"promiscuous mode on {lns}/{ifname}")

    def _add_segment(self, link: Link) -> None:
        sns = naming.segment_ns(self.token, link.index)
        br = naming.bridge_name(link.index)
        self.ledger.add("bridge", ns=sns, name=br, link=link.index)
        # No STP (a single bridge has no loops) and no forward delay: ports forward at once.
        self._ip(sns, ["link", "add", br, "mtu", str(link.mtu), "type", "bridge", "stp_state", "0",
                       "forward_delay", "0", "mcast_snooping", "0"], f"creating bridge {sns}/{br}")
        for pos, host in enumerate(link.hosts):
            port = naming.port_ifname(link.index, pos)
            self._add_veth(self.ns(host), naming.host_ifname(link, host), sns, port, link, pos)
            self._ip_later(sns, ["link", "set", "dev", port, "master", br], f"attaching {port} to bridge {sns}/{br}")
        self._ip_later(sns, ["link", "set", "dev", br, "up"], f"bringing up bridge {sns}/{br}")

    def _add_relayed_segment(self, link: Link) -> None:
        """A shared segment for the wire: one veth per host into the segment namespace, no bridge.

        roughnet-wire attaches to every port and forwards among them itself
        (unicast by destination MAC, broadcast and multicast to every other port).
        """
        sns = naming.segment_ns(self.token, link.index)
        for pos, host in enumerate(link.hosts):
            port = naming.port_ifname(link.index, pos)
            self._add_veth(self.ns(host), naming.host_ifname(link, host), sns, port, link, pos)
            self._ip_later(sns, ["link", "set", "dev", port, "promisc", "on"], f"promiscuous mode on {sns}/{port}")

    # ---- processes -----------------------------------------------------------------

    def _own_ns(self, ns: str) -> str:
        if ns not in self.namespaces():
            raise TopologyError(f"namespace {ns!r} is not part of this topology; expected one of {self.namespaces()}")
        return ns

    def popen_ns(self, ns: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen:
        """Start ``argv`` inside namespace ``ns`` of this topology; record pid and start time."""
        self._own_ns(ns)
        if not ns_exists(ns):
            raise TopologyError(f"namespace {ns} does not exist; expected build() before starting processes")
        # `ip netns exec` enters the namespace and execs argv: the pid is argv's own.
        proc = subprocess.Popen(ns_exec(ns, [str(a) for a in argv]), **kw)
        self._children[proc.pid] = proc
        self.ledger.add("process", pid=proc.pid, start_time=process_start_time(proc.pid), ns=ns,
                        argv0=str(argv[0]))
        log.debug("started %s in %s: pid %d", argv[0], ns, proc.pid)
        return proc

    def popen(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen:
        """Start ``argv`` inside the namespace of ``host``; recorded in the ledger right after start."""
        return self.popen_ns(self.ns(host), argv, **kw)

    def run_ns(self, ns: str, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` to completion inside namespace ``ns`` (subprocess.run semantics, 60 s timeout)."""
        self._own_ns(ns)
        kw.setdefault("timeout", 60)
        kw.setdefault("check", False)
        return subprocess.run(ns_exec(ns, [str(a) for a in argv]), **kw)

    def proc_net_counters(self, host: str) -> str:
        """/proc/net/snmp and /proc/net/netstat of ``host``'s namespace, as `cat` would print them (read by a
        thread in the namespace: /proc/thread-self/net is the reading thread's)."""
        ns = self._own_ns(self.ns(host))

        def read() -> str:
            parts = []
            for name in ("snmp", "netstat"):
                with open(f"/proc/thread-self/net/{name}") as f:
                    parts.append(f.read())
            return "".join(parts)
        return inns.in_netns(ns, read)

    def run(self, host: str, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` to completion inside the namespace of ``host``."""
        return self.run_ns(self.ns(host), argv, **kw)

    # ---- teardown ------------------------------------------------------------------

    def teardown(self) -> None:
        """Stop our processes, delete our namespaces (with their veths), remove the ledger file.

        Idempotent and never raises: problems are logged and kept in
        ``teardown_errors``, and the ledger file then stays for `roughnet clean`.
        """
        errors: list[str] = []
        try:
            entries = self.ledger.entries()
        except RoughnetError as e:
            errors.append(str(e))
            entries = []
        procs = [(int(e["pid"]), e.get("start_time")) for e in entries if e.get("kind") == "process"]
        procs += [(pid, proc_st) for pid, proc_st in ((c.pid, process_start_time(c.pid)) for c in
                                                       self._children.values()) if (pid, proc_st) not in procs]
        # Only what the ledger says we made: a namespace that was already there when
        # build() failed on it is not ours.
        all_ns = list(dict.fromkeys(
            e["name"] for e in entries if e.get("kind") == "netns" and isinstance(e.get("name"), str)))
        try:
            stop_processes(procs, grace_s=TEARDOWN_GRACE_S, children=self._children)
            # Anything else still inside our namespaces (a child of an agent, a command
            # whose caller was interrupted) is ours too: it lives in a namespace we made.
            strays = [(pid, process_start_time(pid)) for pids in pids_in_namespaces(all_ns).values() for pid in pids]
            if strays:
                log.warning("stopping %d stray process(es) in namespaces of run %s", len(strays), self.token)
                stop_processes(strays, children=self._children)
        except Exception as e:  # noqa: BLE001 - teardown must go on
            errors.append(f"stopping processes: {e}")
        for child in self._children.values():
            if child.poll() is None:
                errors.append(f"process {child.pid} did not exit")
        _, other_errors = remove_other(entries)  # containers, working folders, /etc/netns files
        errors.extend(other_errors)
        ours = []
        for ns in reversed(all_ns):
            if not ns.startswith(f"{naming.NS_PREFIX}{self.token}"):
                log.warning("ledger names namespace %r outside this run's prefix; left alone", ns)
                continue
            ours.append(ns)

        def delete(ns: str) -> None:
            try:
                delete_ns(ns)
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))
        run_all([lambda ns=ns: delete(ns) for ns in ours])
        if errors:
            self.teardown_errors.extend(errors)
            for msg in errors:
                log.error("teardown of run %s: %s", self.token, msg)
            return
        try:
            self.ledger.remove_file()
        except RoughnetError as e:
            self.teardown_errors.append(str(e))
            log.error("%s", e)
