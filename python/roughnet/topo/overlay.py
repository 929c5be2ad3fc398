"""Overlay networks on top of a run's links: the kernel's VXLAN devices, as Flannel VXLAN builds them.

Owns creating the overlay of one link (``Link.overlay == "vxlan"``): in every host
of the link a VXLAN device ``rnv<i>`` (VNI ``VNI_BASE + i``, UDP port 4789, bound to
the host's underlay address and interface, MAC learning off), its MTU (the link's
MTU less the 50 bytes of VXLAN headers unless the scenario sets ``overlay_mtu``),
and the forwarding entries a CNI would program: an all-zeros entry per peer (head-end
replication of broadcast and multicast to every peer: DDS discovery works over it)
and one entry per peer's device MAC (unicast goes straight to its host).  Addresses,
static neighbours and routes on the overlay are ``topo.build``'s (from ``naming``).

Everything happens inside the hosts' namespaces and goes away with them; the
underlay interface below carries the encapsulated frames, so the link engine's
impairments (rate, loss, delay) apply to them, headers included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..runspec import Link
from . import naming
from .system import ns_exec, run_cmd

if TYPE_CHECKING:  # pragma: no cover
    from .build import Topology

#: The all-zeros MAC: a default forwarding entry (flooding destination) of a VXLAN device.
FLOOD_MAC = "00:00:00:00:00:00"


def vxlan_argv(link: Link, host: str) -> list[str]:
    """``ip link add`` arguments of the VXLAN device of ``host`` on ``link`` (no I/O)."""
    pos = link.hosts.index(host)
    return ["link", "add", naming.overlay_ifname(link.index), "type", "vxlan",
            "id", str(naming.VNI_BASE + link.index),
            "local", str(naming.host_address(link.index, pos)),
            "dev", naming.host_ifname(link, host),
            "dstport", str(naming.VXLAN_PORT),
            "nolearning"]  # fmt: skip


def add_devices(topo: Topology, link: Link) -> None:
    """The VXLAN device in every host of ``link`` (MTU, offloads off, up); recorded in the ledger."""
    mtu = link.overlay_device_mtu
    assert mtu is not None, "add_devices is for links with an overlay"
    name = naming.overlay_ifname(link.index)
    for host in link.hosts:
        ns = topo.ns(host)
        topo.ledger.add("vxlan", ns=ns, name=name, link=link.index)
        topo._ip(ns, vxlan_argv(link, host), f"creating VXLAN device {ns}/{name}")
        topo._prepare_iface(ns, name, mtu)


def add_forwarding(topo: Topology, link: Link) -> None:
    """Forwarding entries of every host's VXLAN device: flood to each peer, each peer's MAC to its host."""
    name = naming.overlay_ifname(link.index)
    macs = {host: topo._mac(topo.ns(host), name) for host in link.hosts}
    for host in link.hosts:
        ns = topo.ns(host)
        for pos, peer in enumerate(link.hosts):
            if peer == host:
                continue
            dst = str(naming.host_address(link.index, pos))
            for mac in (FLOOD_MAC, macs[peer]):
                run_cmd(ns_exec(ns, ["bridge", "fdb", "append", mac, "dev", name, "dst", dst]),
                        f"adding forwarding entry {mac} -> {dst} on {ns}/{name}")
