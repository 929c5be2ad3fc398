"""roughnet.apps.sockdiag parsing on hand-built kernel layouts (struct tcp_info, inet_diag_msg, netlink): no root."""

from __future__ import annotations

import errno
import os
import socket
import struct
import subprocess

import pytest

from roughnet.apps import sockdiag as sd
from roughnet.errors import TopologyError

#: struct tcp_info as linux/tcp.h declares it (6.18: 280 bytes), in order, natural alignment.
_FMT = ("=8B" "24I" "4Q" "6I" "4Q" "2I" "2Q" "6I" "2H" "8I" "2H")
# offsets: 8 u8, rto..total_retrans (24 u32, ends at 104), pacing_rate..bytes_received (4 u64, 104..136),
# segs_out..data_segs_out (6 u32, 136..160), delivery_rate..sndbuf_limited (4 u64, 160..192), delivered,
# delivered_ce (192..200), bytes_sent, bytes_retrans (200..216), dsack_dups..rehash (6 u32, 216..240),
# total_rto, total_rto_recoveries (u16), total_rto_time..received_ce_bytes (8 u32), accecn (2 u16): 280.


def _tcp_info(**kw) -> bytes:
    names = ["state", "ca_state", "retransmits", "probes", "backoff", "options", "_wscale", "_flags",
             "rto", "ato", "snd_mss", "rcv_mss", "unacked", "sacked", "lost", "retrans", "fackets",
             "last_data_sent", "last_ack_sent", "last_data_recv", "last_ack_recv", "pmtu", "rcv_ssthresh", "rtt",
             "rttvar", "snd_ssthresh", "snd_cwnd", "advmss", "reordering", "rcv_rtt", "rcv_space", "total_retrans",
             "pacing_rate", "max_pacing_rate", "bytes_acked", "bytes_received", "segs_out", "segs_in",
             "notsent_bytes", "min_rtt", "data_segs_in", "data_segs_out", "delivery_rate", "busy_time",
             "rwnd_limited", "sndbuf_limited", "delivered", "delivered_ce", "bytes_sent", "bytes_retrans",
             "dsack_dups", "reord_seen", "rcv_ooopack", "snd_wnd", "rcv_wnd", "rehash", "total_rto",
             "total_rto_recoveries", "total_rto_time", "received_ce", "delivered_e1_bytes", "delivered_e0_bytes",
             "delivered_ce_bytes", "received_e1_bytes", "received_e0_bytes", "received_ce_bytes",
             "accecn_fail_mode", "accecn_opt_seen"]
    return struct.pack(_FMT, *[kw.get(n, 0) for n in names])


def test_layout_is_the_kernels():
    assert struct.calcsize(_FMT) == 280
    offs = {name: off for name, _fmt, off in sd.TCP_INFO_FIELDS}
    # A few offsets checked against offsetof() in linux/tcp.h.
    assert (offs["rto"], offs["rtt"], offs["total_retrans"], offs["pacing_rate"]) == (8, 68, 100, 104)
    assert (offs["bytes_acked"], offs["min_rtt"], offs["delivery_rate"], offs["bytes_sent"]) == (120, 148, 160, 200)
    assert (offs["snd_wnd"], offs["total_rto"], offs["total_rto_time"], offs["accecn_opt_seen"]) == (228, 240, 244, 278)


def test_parse_tcp_info_full():
    raw = _tcp_info(state=1, ca_state=4, _wscale=7 | 9 << 4, _flags=1 | 2 << 1, rto=204000, rtt=10250,
                    rttvar=312, snd_cwnd=42, total_retrans=17, bytes_acked=(1 << 40) + 5, bytes_received=99,
                    min_rtt=10001, delivery_rate=1_250_000, bytes_sent=123456789012, bytes_retrans=4344,
                    snd_wnd=65535, lost=3, accecn_opt_seen=2)
    info = sd.parse_tcp_info(raw)
    assert info["state"] == 1 and info["ca_state"] == 4
    assert (info["snd_wscale"], info["rcv_wscale"]) == (7, 9)
    assert (info["delivery_rate_app_limited"], info["fastopen_client_fail"]) == (1, 2)
    assert info["rto"] == 204000 and info["rtt"] == 10250 and info["rttvar"] == 312 and info["snd_cwnd"] == 42
    assert info["total_retrans"] == 17 and info["bytes_acked"] == (1 << 40) + 5 and info["bytes_received"] == 99
    assert info["min_rtt"] == 10001 and info["delivery_rate"] == 1_250_000 and info["lost"] == 3
    assert info["bytes_sent"] == 123456789012 and info["bytes_retrans"] == 4344 and info["snd_wnd"] == 65535
    assert info["accecn_opt_seen"] == 2
    assert not any(k.startswith(("_", "tcpi_")) for k in info)


def test_parse_tcp_info_short_struct_of_an_old_kernel():
    # 4.9's tcp_info ends after delivery_rate (168 bytes): no busy_time, bytes_sent, snd_wnd, ...
    raw = _tcp_info(rtt=500, total_retrans=2, bytes_acked=1000, delivery_rate=77)[:168]
    info = sd.parse_tcp_info(raw)
    assert info["rtt"] == 500 and info["total_retrans"] == 2 and info["bytes_acked"] == 1000
    assert info["delivery_rate"] == 77
    assert "busy_time" not in info and "bytes_sent" not in info and "snd_wnd" not in info
    # 3.x's 104 bytes: up to total_retrans; a field cut in the middle is left out.
    info = sd.parse_tcp_info(_tcp_info(total_retrans=9)[:108])
    assert info["total_retrans"] == 9 and "pacing_rate" not in info
    assert sd.parse_tcp_info(b"") == {}


def _nlmsg(mtype: int, body: bytes, seq: int = 1) -> bytes:
    msg = struct.pack("=IHHII", 16 + len(body), mtype, 2, seq, 0) + body
    return msg + b"\0" * (-len(msg) % 4)


def _attr(atype: int, payload: bytes) -> bytes:
    a = struct.pack("=HH", 4 + len(payload), atype) + payload
    return a + b"\0" * (-len(a) % 4)


def _diag_msg(family, state, src, sport, dst, dport, cookie, inode, attrs=b"") -> bytes:
    def addr(a):
        return socket.inet_pton(family, a).ljust(16, b"\0")
    body = struct.pack("=BBBB", family, state, 0, 0) + struct.pack(">HH", sport, dport) + addr(src) + addr(dst)
    body += struct.pack("=III", 0, cookie & 0xFFFFFFFF, cookie >> 32)
    body += struct.pack("=5I", 0, 0, 0, 0, inode)
    assert len(body) == 72  # sizeof(struct inet_diag_msg)
    return _nlmsg(sd.SOCK_DIAG_BY_FAMILY, body + attrs)


def test_parse_diag_messages_ipv4_ipv6_time_wait_and_done():
    info = _tcp_info(state=1, rtt=2000, bytes_acked=5001)
    data = (_diag_msg(socket.AF_INET, 1, "198.18.0.1", 40000, "198.18.0.2", 5201, (7 << 32) | 3, 4242,
                      _attr(5, b"\x00") + _attr(sd.INET_DIAG_INFO, info) + _attr(4, b"cubic\0"))
            + _diag_msg(socket.AF_INET6, 10, "::", 5201, "::", 0, 9, 77, _attr(sd.INET_DIAG_INFO, info[:104]))
            + _diag_msg(socket.AF_INET, 6, "198.18.0.1", 40001, "198.18.0.2", 5201, 11, 0)
            + _nlmsg(sd.NLMSG_DONE, struct.pack("=i", 0))
            + _diag_msg(socket.AF_INET, 1, "10.0.0.1", 1, "10.0.0.2", 2, 99, 1))  # after DONE: not read
    socks = sd.parse_diag_messages(data)
    assert len(socks) == 3
    a, b, tw = socks
    assert (a.cookie, a.inode, a.state) == ((7 << 32) | 3, 4242, "ESTABLISHED")
    assert (a.src, a.sport, a.dst, a.dport) == ("198.18.0.1", 40000, "198.18.0.2", 5201)
    assert a.info["rtt"] == 2000 and a.info["bytes_acked"] == 5001 and len(a.info) == 70
    assert (b.state, b.src, b.sport, b.inode) == ("LISTEN", "::", 5201, 77)
    assert "pacing_rate" not in b.info and b.info["rtt"] == 2000
    assert (tw.state, tw.inode, tw.info) == ("TIME_WAIT", 0, {})
    assert sd._parse(data)[1] is True
    assert sd._parse(data[:-len(_nlmsg(sd.NLMSG_DONE, b"")) - 4 - 72 - 16])[1] is False  # no DONE yet: more to read


def test_parse_diag_messages_error_and_ack():
    orig = struct.pack("=IHHII", 72, sd.SOCK_DIAG_BY_FAMILY, 0x301, 5, 0)
    with pytest.raises(TopologyError, match=os.strerror(errno.EINVAL)):
        sd.parse_diag_messages(_nlmsg(sd.NLMSG_ERROR, struct.pack("=i", -errno.EINVAL) + orig))
    # An acknowledgement (error 0) is no error.
    assert sd.parse_diag_messages(_nlmsg(sd.NLMSG_ERROR, struct.pack("=i", 0) + orig)) == []
    with pytest.raises(TopologyError, match="dump failed"):
        sd.parse_diag_messages(_nlmsg(sd.NLMSG_DONE, struct.pack("=i", -errno.ENOBUFS)))
    with pytest.raises(TopologyError, match="truncated"):
        sd.parse_diag_messages(_diag_msg(socket.AF_INET, 1, "198.18.0.1", 1, "198.18.0.2", 2, 1, 1)[:-8])


def test_process_tree_and_socket_inodes_of_this_process():
    me = os.getpid()
    child = subprocess.Popen(["sleep", "30"])
    try:
        tree = sd.process_tree(me)
        assert tree[0] == me and child.pid in tree
    finally:
        child.kill()  # our own child, by its Popen
        child.wait()
    assert sd.process_tree(2**22 + 12345) == []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        ino = os.fstat(s.fileno()).st_ino
        assert ino in sd.socket_inodes([me, 2**22 + 12345])


def test_open_diag_socket_names_a_missing_namespace():
    with pytest.raises(TopologyError, match="rn-sdtest-missing"):
        sd.open_diag_socket("rn-sdtest-missing")
