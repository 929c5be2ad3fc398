"""Reading classic pcap files and decoding their IPv4 / TCP / UDP headers.

Owns the file format (the classic libpcap format tcpdump writes with ``-w``:
a 24-byte global header, then a 16-byte record header before each packet; both
byte orders, microsecond and nanosecond magic) and the header decoding of the
link types tcpdump produces on Linux (Ethernet, Linux cooked v1/v2, raw IP,
BSD loopback). It decodes only what the packet analysis needs and keeps no
state across packets; judging flows is ``capture.analysis``'s job. pcapng is
refused with a message saying so (tcpdump writes classic pcap unless asked).

Captures are headers only (snap length 128), so lengths come from the IP
header's total length, never from the captured length.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import RoughnetError

# Global header magics as read little-endian: (byte order, timestamp unit in ns).
_MAGICS = {
    0xA1B2C3D4: ("<", 1000),
    0xD4C3B2A1: (">", 1000),
    0xA1B23C4D: ("<", 1),
    0x4D3CB2A1: (">", 1),
}
_PCAPNG_MAGIC = 0x0A0D0D0A

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL2 = 276
LINKTYPES = (LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_LINUX_SLL2)

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_VLAN = 0x8100
PROTO_TCP = 6
PROTO_UDP = 17

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10


class PcapError(RoughnetError):
    """A capture file is not a readable classic pcap file."""


@dataclass(frozen=True)
class Record:
    """One packet record as stored: timestamp, lengths and the captured bytes."""

    ts_ns: int
    caplen: int
    wirelen: int
    data: bytes


@dataclass(frozen=True)
class Packet:
    """The decoded headers of one IPv4 packet.

    ``src_mac`` is the Ethernet source (None for link types without one).
    ``payload_len`` is the transport payload length from the IP header (for a
    fragment that is not the first, the fragment's IP payload). TCP fields are
    None for non-TCP packets and for fragments without a transport header.
    """

    ts_ns: int
    src_mac: bytes | None
    src: str
    dst: str
    proto: int
    ip_len: int
    fragment: bool  # more-fragments set or a non-zero offset
    first_fragment: bool  # carries the transport header (offset 0)
    sport: int | None = None
    dport: int | None = None
    payload_len: int = 0
    seq: int | None = None
    ack: int | None = None
    flags: int = 0
    window: int | None = None


@dataclass(frozen=True)
class PcapFile:
    linktype: int
    snaplen: int
    records: list[Record]


def read_pcap(path: Path | str) -> PcapFile:
    """Every record of a classic pcap file. A file cut short (tcpdump killed) keeps its whole records."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise PcapError(f"reading capture {path} failed: {e}; expected a pcap file written by tcpdump -w") from e
    if len(raw) < 24:
        raise PcapError(f"capture {path} is {len(raw)} bytes; expected at least the 24-byte pcap header")
    (magic,) = struct.unpack_from("<I", raw, 0)
    if magic == _PCAPNG_MAGIC:
        raise PcapError(f"capture {path} is pcapng; expected classic pcap (tcpdump -w writes it by default)")
    if magic not in _MAGICS:
        raise PcapError(f"capture {path} starts with 0x{magic:08x}; expected a pcap magic (0xa1b2c3d4 or 0xa1b23c4d)")
    order, unit_ns = _MAGICS[magic]
    _vmaj, _vmin, _zone, _sigfigs, snaplen, linktype = struct.unpack_from(order + "HHiIII", raw, 4)
    linktype &= 0x0FFFFFFF  # upper bits: FCS length flags
    if linktype not in LINKTYPES:
        raise PcapError(f"capture {path} has link type {linktype}; expected one of {LINKTYPES} "
                        f"(Ethernet, Linux cooked, raw IP, loopback)")
    records: list[Record] = []
    off = 24
    hdr = struct.Struct(order + "IIII")
    while off + 16 <= len(raw):
        sec, frac, caplen, wirelen = hdr.unpack_from(raw, off)
        off += 16
        if off + caplen > len(raw):
            break  # truncated last record
        records.append(Record(sec * 1_000_000_000 + frac * unit_ns, caplen, wirelen, raw[off:off + caplen]))
        off += caplen
    return PcapFile(linktype, snaplen, records)


def _ip_offset(linktype: int, data: bytes) -> tuple[int, bytes | None] | None:
    """(offset of the IPv4 header, source MAC) or None when the frame is not IPv4."""
    if linktype == LINKTYPE_ETHERNET:
        if len(data) < 14:
            return None
        off, etype = 12, struct.unpack_from("!H", data, 12)[0]
        while etype == ETHERTYPE_VLAN and len(data) >= off + 6:
            off += 4
            etype = struct.unpack_from("!H", data, off)[0]
        return (off + 2, bytes(data[6:12])) if etype == ETHERTYPE_IPV4 else None
    if linktype == LINKTYPE_LINUX_SLL:
        if len(data) < 16 or struct.unpack_from("!H", data, 14)[0] != ETHERTYPE_IPV4:
            return None
        halen = struct.unpack_from("!H", data, 4)[0]
        return 16, bytes(data[6:6 + min(halen, 8)]) if halen == 6 else None
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(data) < 20 or struct.unpack_from("!H", data, 0)[0] != ETHERTYPE_IPV4:
            return None
        halen = data[11]
        return 20, bytes(data[12:18]) if halen == 6 else None
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4):
        return (0, None) if data and data[0] >> 4 == 4 else None
    if linktype == LINKTYPE_NULL:
        if len(data) < 4:
            return None
        family = struct.unpack_from("=I", data, 0)[0]
        return (4, None) if family == 2 else None
    return None


def decode(linktype: int, rec: Record) -> Packet | None:
    """The IPv4 / TCP / UDP headers of one record, or None if it is not (readable) IPv4."""
    found = _ip_offset(linktype, rec.data)
    if found is None:
        return None
    off, mac = found
    d = rec.data
    if len(d) < off + 20 or d[off] >> 4 != 4:
        return None
    ihl = (d[off] & 0x0F) * 4
    ip_len, frag_field = struct.unpack_from("!HxxH", d, off + 2)
    proto = d[off + 9]
    src = ".".join(str(b) for b in d[off + 12:off + 16])
    dst = ".".join(str(b) for b in d[off + 16:off + 20])
    more = bool(frag_field & 0x2000)
    frag_off = frag_field & 0x1FFF
    fragment = more or frag_off != 0
    first = frag_off == 0
    base = dict(ts_ns=rec.ts_ns, src_mac=mac, src=src, dst=dst, proto=proto, ip_len=ip_len, fragment=fragment,
                first_fragment=first)
    t = off + ihl
    if not first:
        return Packet(**base, payload_len=max(0, ip_len - ihl))
    if proto == PROTO_TCP and len(d) >= t + 20:
        sport, dport, seq, ack, doff_flags, window = struct.unpack_from("!HHIIHH", d, t)
        doff = (doff_flags >> 12) * 4
        return Packet(**base, sport=sport, dport=dport, payload_len=max(0, ip_len - ihl - doff), seq=seq, ack=ack,
                      flags=doff_flags & 0x3F, window=window)
    if proto == PROTO_UDP and len(d) >= t + 8:
        sport, dport, ulen = struct.unpack_from("!HHH", d, t)
        return Packet(**base, sport=sport, dport=dport, payload_len=max(0, ulen - 8))
    return Packet(**base, payload_len=max(0, ip_len - ihl))


def packets(path: Path | str) -> Iterator[Packet]:
    """The decoded IPv4 packets of a capture, in file order (non-IPv4 frames skipped)."""
    pf = read_pcap(path)
    for rec in pf.records:
        pkt = decode(pf.linktype, rec)
        if pkt is not None:
            yield pkt
