"""Packet capture analysis on real captures (tests/unit/fixtures/capture, made by roughnet itself).

The fixtures come from one run of two hosts over a kernel-engine link dropping 10 % of frames
(meta.json holds the scenario and what the kernel and the link engine counted in the same
run). The analysis must agree with those independent counters; a few edge cases the run
did not produce (sequence wrap, keep-alives, zero windows, pcapng) use packets built here.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from roughnet.capture import Capture, Captures, messages_sent, metrics
from roughnet.capture.analysis import Totals, analyse_file, analyse_packets
from roughnet.capture.pcap import (
    LINKTYPE_ETHERNET,
    TCP_ACK,
    TCP_PSH,
    TCP_RST,
    TCP_SYN,
    PcapError,
    decode,
    packets,
    read_pcap,
)
from roughnet.capture.tcpdump import Tcpdump, command

FIX = Path(__file__).parent / "fixtures" / "capture"
META = json.loads((FIX / "meta.json").read_text())
TCP = META["tcp-loss10"]
UDP = META["udp-8k-frag"]


def _mac_of(path: Path, address: str) -> bytes:
    macs = {p.src_mac for p in packets(path) if p.src == address}
    assert len(macs) == 1, macs
    return macs.pop()


# ------------------------------------------------------------------ the file format


def test_real_capture_is_classic_pcap_with_headers_only():
    pf = read_pcap(FIX / TCP["sender"])
    assert pf.linktype == LINKTYPE_ETHERNET
    assert pf.snaplen == 128
    assert pf.records
    assert all(r.caplen <= 128 for r in pf.records)
    assert any(r.wirelen > 1000 for r in pf.records)  # full-size segments were cut to their headers
    stamps = [r.ts_ns for r in pf.records]
    assert stamps == sorted(stamps)
    # every frame is IPv4 between the two hosts (IPv6 is off in roughnet namespaces)
    decoded = [decode(pf.linktype, r) for r in pf.records]
    assert all(p is not None for p in decoded)
    assert {p.src for p in decoded} == {TCP["sender_address"], TCP["receiver_address"]}


def test_truncated_file_keeps_its_whole_records(tmp_path):
    raw = (FIX / TCP["sender"]).read_bytes()
    whole = len(read_pcap(FIX / TCP["sender"]).records)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(raw[:-10])  # tcpdump killed in the middle of a record
    assert len(read_pcap(cut).records) == whole - 1


@pytest.mark.parametrize("head, needle", [
    (b"\x0a\x0d\x0d\x0a" + bytes(40), "pcapng"),
    (b"GIF89a" + bytes(40), "magic"),
    (b"\xd4\xc3\xb2\xa1", "24-byte"),
])
def test_unreadable_files_are_refused_with_what_was_expected(tmp_path, head, needle):
    p = tmp_path / "bad.pcap"
    p.write_bytes(head)
    with pytest.raises(PcapError, match=needle):
        read_pcap(p)


def test_missing_file_is_a_pcap_error(tmp_path):
    with pytest.raises(PcapError, match="expected a pcap file"):
        read_pcap(tmp_path / "nope.pcap")


# ------------------------------------------------------------------ TCP against the kernel's own counters


def test_tcp_retransmissions_match_the_kernel_counters_of_the_same_run():
    a = analyse_file(FIX / TCP["sender"], _mac_of(FIX / TCP["sender"], TCP["sender_address"]))
    kernel = TCP["tcp_counters"]["a"]
    t = Totals()
    t.add(a)
    assert t.tcp_retrans > 0
    assert t.tcp_retrans == kernel["RetransSegs"]
    # Linux OutSegs leaves retransmissions out: what left the interface is both together
    assert t.packets == kernel["OutSegs"] + kernel["RetransSegs"]
    # every frame the sender put on the link reached the link's loss hook
    assert t.packets == TCP["link_counters"]["forward"]["seen_at_loss_hook"]


def test_tcp_new_data_is_exactly_the_application_stream():
    a = analyse_file(FIX / TCP["sender"], None, [TCP["sender_address"]])
    (d,) = [d for d in a.tcp.values() if d.outbound]
    # each message carries a 4-byte length prefix; the end marker is a bare 32-byte header
    assert d.data_bytes - d.retrans_bytes == TCP["messages_sent"] * (TCP["payload_bytes"] + 4) + 36
    # no new segment carries more than one MSS (1448 with timestamps on an MTU of 1500); messages
    # queued behind a loss may share segments, so the bound is on the whole stream
    assert d.data_segments - d.retrans >= math.ceil((d.data_bytes - d.retrans_bytes) / 1448)
    assert d.data_segments - d.retrans <= TCP["messages_sent"] * math.ceil(8004 / 1448) + 1


def test_duplicate_acks_come_from_the_receiver_and_only_with_loss():
    b = analyse_file(FIX / TCP["receiver"], _mac_of(FIX / TCP["receiver"], TCP["receiver_address"]))
    (acks,) = [d for d in b.tcp.values() if d.outbound]
    assert acks.src == TCP["receiver_address"]
    assert acks.data_segments == 0 and acks.retrans == 0
    assert acks.dup_acks > 0
    assert acks.packets == TCP["tcp_counters"]["b"]["OutSegs"]
    assert acks.zero_window == 0


def test_outbound_by_mac_and_by_address_agree_and_two_files_count_each_packet_once():
    by_mac, by_addr, both = Totals(), Totals(), Totals()
    by_mac.add(analyse_file(FIX / TCP["sender"], _mac_of(FIX / TCP["sender"], TCP["sender_address"])))
    by_addr.add(analyse_file(FIX / TCP["sender"], None, [TCP["sender_address"]]))
    assert by_mac == by_addr
    for key in ("sender", "receiver"):
        both.add(analyse_file(FIX / TCP[key], None, [TCP[f"{key}_address"]]))
    total_frames = len(read_pcap(FIX / TCP["sender"]).records)
    assert both.packets == total_frames  # a's outbound + b's outbound = everything on the link
    assert both.tcp_retrans == by_mac.tcp_retrans


# ------------------------------------------------------------------ UDP and fragments


def test_udp_datagrams_and_fragments():
    a = analyse_file(FIX / UDP["sender"], None, [UDP["sender_address"]])
    t = Totals()
    t.add(a)
    per_message = math.ceil((UDP["payload_bytes"] + 8) / 1480)  # 1480 bytes of IP payload per fragment
    end_markers = t.udp_datagrams - UDP["messages_sent"]
    assert 1 <= end_markers <= 5  # the agent sends up to 5 copies of its end marker
    assert t.ip_fragments == UDP["messages_sent"] * per_message
    assert t.udp_packets == t.ip_fragments + end_markers
    assert t.tcp_data_segments == 0


# ------------------------------------------------------------------ the run's metrics


def _captures(tmp_path: Path, files: list[tuple[str, str, str]]) -> Captures:
    caps = Captures(artifacts=tmp_path, stopped=True)
    for host, name, address in files:
        dump = Tcpdump(ns=f"rn-x-{host}", ifname="rn0-x", path=FIX / name)
        dump.stats = {"captured": 1, "dropped_by_kernel": 0}
        caps.items.append(Capture(0, host, address, None, dump))
    return caps


def test_run_metrics_from_both_ends(tmp_path):
    caps = _captures(tmp_path, [("a", TCP["sender"], TCP["sender_address"]),
                                ("b", TCP["receiver"], TCP["receiver_address"])])
    m = metrics(caps, sender="a", messages=TCP["messages_sent"])
    kernel = TCP["tcp_counters"]
    assert m["pcap_tcp_retrans"] == kernel["a"]["RetransSegs"] + kernel["b"]["RetransSegs"]
    assert m["pcap_dup_acks"] > 0
    assert m["pcap_packets"] == len(read_pcap(FIX / TCP["sender"]).records)
    assert m["pcap_segments_per_message"] == pytest.approx(m["pcap_sender_data_packets"] / TCP["messages_sent"],
                                                           rel=1e-5)
    assert m["pcap_segments_per_message"] > math.ceil(8004 / 1448)  # split, plus retransmissions
    assert 0 < m["pcap_tcp_retrans_ratio"] < 0.5
    saved = json.loads((tmp_path / "capture-analysis.json").read_text())
    assert saved["metrics"] == m
    assert {f["host"] for f in saved["files"]} == {"a", "b"}


def test_run_metrics_without_captures_are_empty_and_bad_files_are_reported(tmp_path):
    assert metrics(Captures()) == {}
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a pcap at all, too short?" * 2)
    caps = Captures(artifacts=tmp_path, stopped=True)
    caps.items.append(Capture(0, "a", "198.18.0.1", None, Tcpdump("ns", "if", bad)))
    caps.items.append(Capture(0, "b", "198.18.0.2", None, Tcpdump("ns", "if", tmp_path / "missing.pcap")))
    m = metrics(caps, sender="a", messages=10)
    assert m["pcap_packets"] == 0
    errors = [f["error"] for f in json.loads((tmp_path / "capture-analysis.json").read_text())["files"]]
    assert any("magic" in e for e in errors) and any("no file" in e for e in errors)


def test_messages_sent_counts_warmup():
    assert messages_sent({"sent": 40, "warmup_sent": 2}) == 42
    assert messages_sent({"sent": 5}) == 5
    assert messages_sent(None) is None
    assert messages_sent({"bytes": 10}) is None


def test_tcpdump_command_keeps_headers_only_and_flushes_every_packet():
    argv = command("rn0-b", Path("/x/capture-0-a.pcap"))
    assert argv[0] == "tcpdump"
    assert argv[argv.index("-s") + 1] == "128"
    assert argv[argv.index("-i") + 1] == "rn0-b"
    assert "--immediate-mode" in argv and "-U" in argv and "-n" in argv


# ------------------------------------------------------------------ edge cases, built packets


MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def _frame(src_mac, src, dst, sport, dport, seq, ack, flags, window, payload_len):
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq, ack, (5 << 12) | flags, window, 0, 0)
    ip_len = 20 + 20 + payload_len
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 0, 0x4000, 64, 6, 0,
                     bytes(int(x) for x in src.split(".")), bytes(int(x) for x in dst.split(".")))
    dst_mac = MAC_B if src_mac == MAC_A else MAC_A
    return dst_mac + src_mac + b"\x08\x00" + ip + tcp


def _write(path: Path, frames: list[bytes], nanos: bool = False, big_endian: bool = False) -> Path:
    order = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 128, 1)]
    for i, f in enumerate(frames):
        out.append(struct.pack(order + "IIII", 1000 + i, 5, len(f), len(f) + 1000) + f)
    path.write_bytes(b"".join(out))
    return path


A, B = "198.18.0.1", "198.18.0.2"


def _data(seq, n=1000):
    return _frame(MAC_A, A, B, 40000, 5201, seq, 1, TCP_ACK | TCP_PSH, 500, n)


def _ack(ack, window=500):
    return _frame(MAC_B, B, A, 5201, 40000, 1, ack, TCP_ACK, window, 0)


@pytest.mark.parametrize("nanos, big_endian", [(False, False), (True, False), (False, True), (True, True)])
def test_sequence_wrap_is_not_a_retransmission_in_every_pcap_flavour(tmp_path, nanos, big_endian):
    start = (1 << 32) - 1500  # the second segment crosses 2^32
    frames = [_frame(MAC_A, A, B, 40000, 5201, start - 1, 0, TCP_SYN, 500, 0),
              _data(start), _data((start + 1000) % (1 << 32)), _data((start + 2000) % (1 << 32)),
              _data((start + 1000) % (1 << 32))]  # the last one is sent again
    p = _write(tmp_path / "w.pcap", frames, nanos, big_endian)
    recs = read_pcap(p).records
    assert recs[0].ts_ns == 1000 * 1_000_000_000 + (5 if nanos else 5000)
    a = analyse_file(p, MAC_A)
    (d,) = [d for d in a.tcp.values() if d.outbound]
    assert (d.data_segments, d.retrans, d.retrans_bytes) == (4, 1, 1000)


def test_duplicate_acks_need_outstanding_data_and_the_same_window(tmp_path):
    frames = [_data(1), _data(1001), _data(2001),
              _ack(1001), _ack(1001), _ack(1001),  # two duplicates: 1001..3001 outstanding
              _ack(1001, window=600),  # a window update is not a duplicate
              _ack(3001), _ack(3001)]  # nothing outstanding any more: not a duplicate
    caps = analyse_packets(packets(_write(tmp_path / "d.pcap", frames)), MAC_B)
    (acks,) = [d for d in caps.tcp.values() if d.outbound]
    assert acks.dup_acks == 2


def test_keepalive_and_zero_window(tmp_path):
    frames = [_data(1), _ack(1001, window=0), _data(1000, n=1),  # a one-byte keep-alive probe below the edge
              _ack(1001, window=0), _frame(MAC_B, B, A, 5201, 40000, 1, 0, TCP_RST, 0, 0)]
    a = analyse_packets(packets(_write(tmp_path / "k.pcap", frames)), None, [A])
    fwd = a.tcp[(A, 40000, B, 5201)]
    rev = a.tcp[(B, 5201, A, 40000)]
    assert fwd.retrans == 0 and fwd.data_segments == 2
    assert rev.zero_window == 2  # the RST's zero window does not count
    assert rev.rst == 1 and not rev.outbound
