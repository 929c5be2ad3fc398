"""Packet analysis of one capture: TCP flows and UDP/IP counts, per direction.

Owns the judgements made from headers: a TCP data segment is a
*retransmission* when its sequence range starts below the highest sequence
number already seen in its direction (it overlaps data sent before; keep-alive
probes of one byte below it are not counted); a *duplicate ACK* is a pure ACK
(no data, no SYN/FIN/RST) repeating the previous ACK number and window of its
direction while the other direction has data beyond it outstanding (as
Wireshark defines it); a *zero window* is a segment advertising window 0
(RST excluded). For UDP it counts datagrams and IP fragments.

Every direction of a flow is marked *outbound* when it left through the
captured interface (its source MAC is the interface's, or, without a MAC, its
source address is the interface's): summing outbound directions over the
captures of a link counts each packet once, at the host that sent it, before
the link could drop it. Reading the file is ``capture.pcap``'s job; which
captures exist and what a run's metrics are is ``capture``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .pcap import PROTO_TCP, PROTO_UDP, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, Packet, packets

_MOD = 1 << 32
_HALF = 1 << 31


def _unwrap(seq: int, near: int) -> int:
    """``seq`` (32-bit) as the 64-bit value closest to ``near``."""
    diff = (seq - near) % _MOD
    if diff >= _HALF:
        diff -= _MOD
    return near + diff


@dataclass
class TcpDirection:
    """What one direction (src -> dst) of a TCP connection sent, as seen in one capture."""

    src: str
    sport: int
    dst: str
    dport: int
    outbound: bool = False
    packets: int = 0
    data_segments: int = 0
    data_bytes: int = 0  # payload bytes, retransmissions included
    retrans: int = 0
    retrans_bytes: int = 0
    dup_acks: int = 0
    zero_window: int = 0
    syn: int = 0
    fin: int = 0
    rst: int = 0
    # state (not reported)
    _base: int | None = field(default=None, repr=False)
    _max_end: int = field(default=0, repr=False)  # relative to _base, 64-bit
    _last_ack: int | None = field(default=None, repr=False)  # 32-bit as sent
    _last_win: int | None = field(default=None, repr=False)

    def rel(self, seq: int) -> int:
        if self._base is None:
            self._base = seq
            return 0
        return _unwrap((seq - self._base) % _MOD, self._max_end)

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


@dataclass
class UdpDirection:
    src: str
    dst: str
    outbound: bool = False
    datagrams: int = 0  # first fragments and unfragmented datagrams
    bytes: int = 0  # UDP payload bytes of those datagrams
    packets: int = 0  # IP packets, every fragment counted
    fragments: int = 0  # IP packets that are fragments

    def summary(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CaptureAnalysis:
    """Everything one capture file says, per direction."""

    path: str
    packets: int = 0
    outbound_packets: int = 0
    tcp: dict[tuple[str, int, str, int], TcpDirection] = field(default_factory=dict)
    udp: dict[tuple[str, str], UdpDirection] = field(default_factory=dict)
    other_outbound_fragments: int = 0  # fragments of other protocols (or TCP) sent out

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "packets": self.packets,
            "outbound_packets": self.outbound_packets,
            "tcp": [d.summary() for d in self.tcp.values()],
            "udp": [d.summary() for d in self.udp.values()],
            "other_outbound_fragments": self.other_outbound_fragments,
        }


def _is_outbound(pkt: Packet, own_mac: bytes | None, own_addresses: frozenset[str]) -> bool:
    if own_mac is not None and pkt.src_mac is not None:
        return pkt.src_mac == own_mac
    return pkt.src in own_addresses


def _tcp(state: CaptureAnalysis, pkt: Packet, outbound: bool) -> None:
    key = (pkt.src, pkt.sport or 0, pkt.dst, pkt.dport or 0)
    d = state.tcp.get(key)
    if d is None:
        d = state.tcp[key] = TcpDirection(pkt.src, pkt.sport or 0, pkt.dst, pkt.dport or 0, outbound=outbound)
    rev = state.tcp.get((pkt.dst, pkt.dport or 0, pkt.src, pkt.sport or 0))
    d.packets += 1
    flags = pkt.flags
    assert pkt.seq is not None and pkt.ack is not None and pkt.window is not None
    rel = d.rel(pkt.seq)
    length = pkt.payload_len
    if flags & TCP_SYN:
        d.syn += 1
    if flags & TCP_FIN:
        d.fin += 1
    if flags & TCP_RST:
        d.rst += 1
    if pkt.window == 0 and not flags & TCP_RST:
        d.zero_window += 1
    if length > 0:
        d.data_segments += 1
        d.data_bytes += length
        keepalive = length <= 1 and rel == d._max_end - 1
        if rel < d._max_end and not keepalive:
            d.retrans += 1
            d.retrans_bytes += length
    elif flags & TCP_ACK and not flags & (TCP_SYN | TCP_FIN | TCP_RST):
        if (d._last_ack is not None and pkt.ack == d._last_ack and pkt.window == d._last_win
                and rev is not None and rev._base is not None):
            ack_rel = _unwrap((pkt.ack - rev._base) % _MOD, rev._max_end)
            if rev._max_end > ack_rel:
                d.dup_acks += 1
    end = rel + length + (1 if flags & TCP_SYN else 0) + (1 if flags & TCP_FIN else 0)
    if end > d._max_end:
        d._max_end = end
    if flags & TCP_ACK:
        d._last_ack = pkt.ack
        d._last_win = pkt.window


def _udp_or_fragment(state: CaptureAnalysis, pkt: Packet, outbound: bool) -> None:
    if pkt.proto != PROTO_UDP:
        if pkt.fragment and outbound:
            state.other_outbound_fragments += 1
        return
    key = (pkt.src, pkt.dst)
    d = state.udp.get(key)
    if d is None:
        d = state.udp[key] = UdpDirection(pkt.src, pkt.dst, outbound=outbound)
    d.packets += 1
    if pkt.fragment:
        d.fragments += 1
    if pkt.first_fragment:
        d.datagrams += 1
        d.bytes += pkt.payload_len


def analyse_packets(
    pkts: Iterable[Packet], own_mac: bytes | None = None, own_addresses: Iterable[str] = (), path: str = ""
) -> CaptureAnalysis:
    """Analyse decoded packets (in capture order) seen on one interface."""
    addrs = frozenset(own_addresses)
    state = CaptureAnalysis(path=path)
    for pkt in pkts:
        state.packets += 1
        outbound = _is_outbound(pkt, own_mac, addrs)
        if outbound:
            state.outbound_packets += 1
        if pkt.proto == PROTO_TCP and pkt.first_fragment and pkt.seq is not None:
            _tcp(state, pkt, outbound)
        else:
            _udp_or_fragment(state, pkt, outbound)
    return state


def analyse_file(path: Path | str, own_mac: bytes | None = None, own_addresses: Iterable[str] = ()) -> CaptureAnalysis:
    """Analyse one pcap file captured on an interface with MAC ``own_mac`` / addresses ``own_addresses``."""
    return analyse_packets(packets(path), own_mac, own_addresses, str(path))


@dataclass
class Totals:
    """Outbound counts summed over captures (each packet counted once, at its sender)."""

    packets: int = 0
    tcp_flows: int = 0  # outbound directions that carried data
    tcp_data_segments: int = 0
    tcp_data_bytes: int = 0
    tcp_retrans: int = 0
    tcp_retrans_bytes: int = 0
    dup_acks: int = 0
    zero_window: int = 0
    udp_datagrams: int = 0
    udp_packets: int = 0
    ip_fragments: int = 0

    def add(self, a: CaptureAnalysis, sources: frozenset[str] | None = None) -> None:
        """Add ``a``'s outbound directions (only those from ``sources`` addresses when given)."""
        def mine(src: str) -> bool:
            return sources is None or src in sources

        if sources is None:
            self.packets += a.outbound_packets
            self.ip_fragments += a.other_outbound_fragments
        for d in a.tcp.values():
            if not d.outbound or not mine(d.src):
                continue
            if sources is not None:
                self.packets += d.packets
            self.tcp_flows += 1 if d.data_segments else 0
            self.tcp_data_segments += d.data_segments
            self.tcp_data_bytes += d.data_bytes
            self.tcp_retrans += d.retrans
            self.tcp_retrans_bytes += d.retrans_bytes
            self.dup_acks += d.dup_acks
            self.zero_window += d.zero_window
        for u in a.udp.values():
            if not u.outbound or not mine(u.src):
                continue
            if sources is not None:
                self.packets += u.packets
            self.udp_datagrams += u.datagrams
            self.udp_packets += u.packets
            self.ip_fragments += u.fragments

    @property
    def data_packets(self) -> int:
        """Packets that carried application data: TCP data segments and UDP packets (fragments counted)."""
        return self.tcp_data_segments + self.udp_packets
