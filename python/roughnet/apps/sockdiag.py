"""Per-process TCP socket state from the kernel (NETLINK_SOCK_DIAG), without instrumenting the process.

Owns reading what `ss -ti` reads: a SOCK_DIAG_BY_FAMILY dump of every TCP socket of one network namespace
with its ``struct tcp_info`` (linux/tcp.h), the kernel's destroy broadcasts (the final tcp_info of each socket
as it is freed), the mapping of sockets to processes (socket inodes among /proc/<pid>/fd of a process tree)
and ``SocketSampler``, the thread that samples the sockets of watched processes every interval and keeps, per
watched name, its connections, a per-sample series and totals. The netlink sockets are created by a throwaway
thread that joined the namespace (``topo.inns.in_netns``); a netlink socket stays bound to the namespace it was
created in, so no thread of this process ever stays in another namespace. Nothing here prints.

Limits: a socket is attributed to a process once its inode is seen among the process tree's fds in a sample,
so a connection opened and closed within one interval is missed (the destroy broadcast carries no inode).
Once attributed, a socket is followed by its cookie through orphaned states (FIN_WAIT after close) to its end.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TopologyError
from ..topo.inns import in_netns
from ..topo.ledger import process_start_time

log = logging.getLogger(__name__)

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
INET_DIAG_INFO = 2  # attribute type; requested with bit (INET_DIAG_INFO - 1) of idiag_ext
#: linux/sock_diag.h multicast groups; bound as bit (group - 1) of nl_groups.
SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY = 1, 3
_NLMSGHDR = struct.Struct("=IHHII")
#: struct inet_diag_msg: family, state, timer, retrans, sockid (sport, dport big endian, src[16], dst[16], if,
#: cookie[2]), expires, rqueue, wqueue, uid, inode.
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sIII5I")
TCP_STATES = ("UNKNOWN", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE",
              "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV", "BOUND_INACTIVE")

#: struct tcp_info in kernel order (size:name); byte 6 holds snd_wscale:4 | rcv_wscale:4, byte 7
#: delivery_rate_app_limited:1 | fastopen_client_fail:2. 6.18 returns all 280 bytes (up to the AccECN counters).
_TCP_INFO_SPEC = """B:state B:ca_state B:retransmits B:probes B:backoff B:options B:_wscale B:_flags I:rto I:ato
I:snd_mss I:rcv_mss I:unacked I:sacked I:lost I:retrans I:fackets I:last_data_sent I:last_ack_sent
I:last_data_recv I:last_ack_recv I:pmtu I:rcv_ssthresh I:rtt I:rttvar I:snd_ssthresh I:snd_cwnd I:advmss
I:reordering I:rcv_rtt I:rcv_space I:total_retrans Q:pacing_rate Q:max_pacing_rate Q:bytes_acked
Q:bytes_received I:segs_out I:segs_in I:notsent_bytes I:min_rtt I:data_segs_in I:data_segs_out
Q:delivery_rate Q:busy_time Q:rwnd_limited Q:sndbuf_limited I:delivered I:delivered_ce Q:bytes_sent
Q:bytes_retrans I:dsack_dups I:reord_seen I:rcv_ooopack I:snd_wnd I:rcv_wnd I:rehash H:total_rto
H:total_rto_recoveries I:total_rto_time I:received_ce I:delivered_e1_bytes I:delivered_e0_bytes
I:delivered_ce_bytes I:received_e1_bytes I:received_e0_bytes I:received_ce_bytes H:accecn_fail_mode
H:accecn_opt_seen"""


def _layout(spec: str) -> list[tuple[str, str, int]]:
    out, off = [], 0
    for item in spec.split():
        fmt, name = item.split(":")
        size = struct.calcsize(fmt)
        off = (off + size - 1) // size * size  # natural alignment, as the C struct
        out.append((name, fmt, off))
        off += size
    return out


TCP_INFO_FIELDS = _layout(_TCP_INFO_SPEC)
_ENDS = [off + struct.calcsize(fmt) for _name, fmt, off in TCP_INFO_FIELDS]
_PREFIX: dict[int, tuple[struct.Struct, list[str]]] = {}  # fields that fit -> one Struct for all of them


def _prefix(n: int) -> tuple[struct.Struct, list[str]]:
    if n not in _PREFIX:
        fmt, at = "=", 0
        for _name, f, off in TCP_INFO_FIELDS[:n]:
            fmt, at = fmt + "x" * (off - at) + f, off + struct.calcsize(f)
        _PREFIX[n] = struct.Struct(fmt), [name for name, _f, _o in TCP_INFO_FIELDS[:n]]
    return _PREFIX[n]


@dataclass
class TcpSocket:
    cookie: int
    inode: int
    state: str
    src: str
    sport: int
    dst: str
    dport: int
    info: dict[str, int] = field(default_factory=dict)


def parse_tcp_info(raw: bytes) -> dict[str, int]:
    """``struct tcp_info`` as a dict (keys without ``tcpi_``), only the fields ``raw`` is long enough for."""
    st, names = _prefix(bisect.bisect_right(_ENDS, len(raw)))
    info = dict(zip(names, st.unpack_from(raw)))
    if "_wscale" in info:
        w = info.pop("_wscale")
        info["snd_wscale"], info["rcv_wscale"] = w & 0xF, w >> 4
    if "_flags" in info:
        f = info.pop("_flags")
        info["delivery_rate_app_limited"], info["fastopen_client_fail"] = f & 1, (f >> 1) & 3
    return info


def _parse(data: bytes) -> tuple[list[TcpSocket], bool]:
    """The sockets in one recv() buffer, and whether it ended the dump (NLMSG_DONE); a kernel error raises."""
    socks: list[TcpSocket] = []
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > len(data):
            raise TopologyError(f"sock_diag: truncated netlink message ({length} bytes at offset {off})")
        body = data[off + _NLMSGHDR.size:off + length]
        off += (length + 3) & ~3
        if mtype == NLMSG_DONE:
            code = struct.unpack_from("=i", body)[0] if len(body) >= 4 else 0
            if code < 0:
                raise TopologyError(f"sock_diag dump failed: {os.strerror(-code)}")
            return socks, True
        if mtype == NLMSG_ERROR and struct.unpack_from("=i", body)[0] != 0:  # error 0: an acknowledgement
            code = -struct.unpack_from("=i", body)[0]
            raise TopologyError(f"sock_diag request refused: {os.strerror(code)} (errno {code})")
        if mtype != SOCK_DIAG_BY_FAMILY or len(body) < _DIAG_MSG.size:
            continue
        (fam, state, _t, _r, sport, dport, src, dst, _if, ck0, ck1, _exp, _rq, _wq, _uid,
         inode) = _DIAG_MSG.unpack_from(body)
        info: dict[str, int] = {}
        a = _DIAG_MSG.size
        while a + 4 <= len(body):  # struct nlattr: len, type; 4-byte aligned
            alen, atype = struct.unpack_from("=HH", body, a)
            if alen < 4:
                break
            if atype & 0x3FFF == INET_DIAG_INFO:
                info = parse_tcp_info(body[a + 4:a + alen])
            a += (alen + 3) & ~3
        n = 4 if fam == socket.AF_INET else 16
        socks.append(TcpSocket(ck0 | ck1 << 32, inode, TCP_STATES[state] if state < len(TCP_STATES) else str(state),
                               socket.inet_ntop(fam, src[:n]), int.from_bytes(sport, "big"),
                               socket.inet_ntop(fam, dst[:n]), int.from_bytes(dport, "big"), info))
    return socks, False


def parse_diag_messages(data: bytes) -> list[TcpSocket]:
    """The TCP sockets in one recv() buffer of netlink messages (stops at NLMSG_DONE; an error raises
    TopologyError; NLMSG_ERROR 0, an acknowledgement, is skipped)."""
    return _parse(data)[0]


def open_diag_socket(ns: str | None) -> socket.socket:
    """A NETLINK_SOCK_DIAG socket of namespace ``ns`` (/run/netns/<ns>; None: this thread's namespace), with a
    5 s timeout (a dump never waits longer for the kernel)."""
    def make() -> socket.socket:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    try:
        nl = make() if ns is None else in_netns(ns, make)
    except OSError as e:
        raise TopologyError(f"opening a sock_diag socket in namespace {ns or '(current)'} failed: {e}") from e
    nl.settimeout(5.0)
    return nl


_seq = itertools.count(1)


def dump_tcp(nl: socket.socket) -> list[TcpSocket]:
    """Every TCP socket (IPv4 and IPv6, all states) of the socket's namespace, with tcp_info where it has one."""
    out: list[TcpSocket] = []
    for family in (socket.AF_INET, socket.AF_INET6):
        req = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, 0xFFFFFFFF)
        nl.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP,
                               next(_seq) & 0xFFFFFFFF, 0) + req)
        done = False
        while not done:
            try:
                socks, done = _parse(nl.recv(65536))
            except TopologyError:
                if family == socket.AF_INET6:  # a kernel without IPv6 (no inet6 diag handler)
                    log.debug("no IPv6 sock_diag in this namespace", exc_info=True)
                    break
                raise
            out.extend(socks)
    return out


def _ls(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:  # the process (or thread) is gone
        return []


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (/proc/<pid>/task/*/children, recursively); [] if ``pid`` is gone."""
    order, todo = [], [pid] if os.path.exists(f"/proc/{pid}") else []
    while todo:
        p = todo.pop()
        if p not in order:
            order.append(p)
            for tid in _ls(f"/proc/{p}/task"):
                try:
                    todo += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
                except OSError:
                    continue
    return order


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Inodes of the ``socket:[N]`` links among /proc/<pid>/fd; vanished processes and fds are skipped."""
    inodes: set[int] = set()
    for pid in pids:
        for fd in _ls(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


class DestroyListener:
    """Final tcp_info of TCP sockets as the kernel destroys them: a NETLINK_SOCK_DIAG socket in the namespace
    bound to the multicast groups SKNLGRP_INET_TCP_DESTROY and SKNLGRP_INET6_TCP_DESTROY (linux/sock_diag.h).

    Verified on 6.18: every broadcast carries INET_DIAG_INFO (the whole 280-byte tcp_info; state CLOSE, also
    for a socket freed on its way to TIME_WAIT, whose TIME_WAIT remnant keeps the cookie) and the addresses,
    but no inode (0) and no uid. The kernel sends them from a work queue, shortly after the close. A full
    receive buffer loses broadcasts (ENOBUFS, counted in ``dropped``). ``keep=False`` (the sampler's): sockets
    handed out by ``take`` are not kept for ``stop``, so a busy namespace does not grow this without bound."""

    def __init__(self, ns: str | None, keep: bool = True):
        self.ns, self.keep, self.dropped = ns, keep, 0
        self._nl: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._new: dict[int, TcpSocket] = {}
        self._kept: dict[int, TcpSocket] = {}

    def start(self) -> None:
        nl = open_diag_socket(self.ns)
        try:
            try:
                nl.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE (root): bursts of closes
            except OSError:
                nl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            nl.bind((0, 1 << (SKNLGRP_INET_TCP_DESTROY - 1) | 1 << (SKNLGRP_INET6_TCP_DESTROY - 1)))
        except OSError as e:
            nl.close()
            raise TopologyError(f"listening to TCP socket destroys in namespace {self.ns or '(current)'}: {e}") from e
        nl.settimeout(0.1)
        self._nl = nl
        self._thread = threading.Thread(target=self._loop, name=f"sockdiag-destroy-{self.ns}", daemon=True)
        self._thread.start()

    def _read(self, nl: socket.socket) -> None:
        try:
            socks = parse_diag_messages(nl.recv(65536))
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            self.dropped += 1
            log.warning("sock_diag destroy broadcasts lost in namespace %s (receive buffer full)", self.ns)
            return
        with self._lock:
            self._new.update((s.cookie, s) for s in socks)

    def _loop(self) -> None:
        assert self._nl is not None
        while not self._stop.is_set():
            try:
                self._read(self._nl)
            except TimeoutError:
                continue
            except (OSError, TopologyError):
                log.exception("sock_diag destroy listener in namespace %s failed", self.ns)
                return

    def take(self) -> dict[int, TcpSocket]:
        """The sockets destroyed since the last ``take`` (cookie -> last state)."""
        with self._lock:
            got, self._new = self._new, {}
            if self.keep:
                self._kept.update(got)
        return got

    def stop(self) -> dict[int, TcpSocket]:
        """Stops listening, after reading what is already queued; every destroyed socket seen (not taken, when
        ``keep`` is False), cookie -> its last state."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._nl is not None:
            self._nl.setblocking(False)
            try:
                while True:
                    self._read(self._nl)
            except (OSError, TopologyError):  # EAGAIN: nothing queued any more
                pass
            self._nl.close()
            self._nl = None
        with self._lock:
            return {**self._kept, **self._new}


_SUMS = ("total_retrans", "bytes_sent", "bytes_acked", "bytes_received")
_FINAL = {"rtt_us": "rtt", "rttvar_us": "rttvar", "min_rtt_us": "min_rtt",
          **{k: k for k in ("total_retrans", "bytes_sent", "bytes_acked", "bytes_received", "bytes_retrans",
                            "segs_out", "segs_in", "snd_cwnd", "lost")}}


@dataclass
class _Conn:
    sock: TcpSocket
    names: set[str]
    first_ns: int
    listen: bool
    last_ns: int = 0
    samples: int = 0
    closed: bool = False
    final: bool = False  # its final state came from a destroy broadcast
    rtts: list[int] = field(default_factory=lambda: [0, 0])  # sum and count of sampled rtt > 0
    prev: dict[str, int] = field(default_factory=dict)

    def update(self, s: TcpSocket, now: int, inc: dict[str, int] | None) -> dict[str, int]:
        """Takes ``s`` as the latest state; the increases of the counters of _SUMS (added to ``inc``)."""
        inc = dict(inc or dict.fromkeys(_SUMS, 0))
        for k in _SUMS:
            v = s.info.get(k, 0)
            inc[k] += max(0, v - self.prev.get(k, 0))
            self.prev[k] = max(v, self.prev.get(k, 0))
        if s.info.get("rtt", 0) > 0 and s.state != "CLOSE":  # a destroyed socket's rtt is its last sample's
            self.rtts = [self.rtts[0] + s.info["rtt"], self.rtts[1] + 1]
        self.sock, self.last_ns, self.samples = s, now, self.samples + 1
        return inc


def is_loopback(s: TcpSocket) -> bool:
    """A connection that never leaves its host (to 127.0.0.0/8 or ::1, IPv4-mapped or not)."""
    dst = s.dst.removeprefix("::ffff:")
    return dst.startswith("127.") or dst == "::1"


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


class SocketSampler:
    """Samples, every ``interval_s``, the TCP sockets of watched processes in ONE network namespace (a thread).
    A socket (cookie) belongs to a watched name once its inode is seen among that process tree's fds in some
    sample; it stays theirs until the end (its final state comes from the DestroyListener when it closes
    between samples, else from its last sample). LISTEN sockets are not connections (counted separately).
    A watched pid whose start time changed (reused) is no longer followed.  With ``skip_loopback`` (the
    default) connections that never leave the host (a client library's wake-up socketpair over 127.0.0.1, a
    local sidecar) are not followed, only counted (``totals()["loopback"]``): what is measured is the
    network's effect, and their microsecond RTTs would pull a process's mean RTT down."""

    def __init__(self, ns: str | None, interval_s: float, clock: Callable[[], int] = time.monotonic_ns,
                 skip_loopback: bool = True):
        self.ns, self.interval_s, self.clock = ns, interval_s, clock
        self.skip_loopback = skip_loopback
        self._loopback: dict[str, set[int]] = {}  # name -> cookies of its loopback connections (not followed)
        self._lock = threading.Lock()  # the state below
        self._sample_lock = threading.Lock()  # one dump at a time on the netlink socket
        self._roots: dict[str, list[tuple[int, int | None]]] = {}  # name -> (pid, start time)
        self._conns: dict[int, _Conn] = {}
        self._open: set[int] = set()
        self._series: dict[str, list[dict]] = {}
        self._nl: socket.socket | None = None
        self._listener: DestroyListener | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._done = False  # stopped: no more samples
        self._samples, self._cpu_s, self._wall_s = 0, 0.0, 0.0

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self._roots.setdefault(name, []).append((pid, process_start_time(pid)))
            self._series.setdefault(name, [])

    def unwatch(self, name: str) -> None:
        with self._lock:
            self._roots.pop(name, None)

    def start(self) -> None:
        self._nl = open_diag_socket(self.ns)
        self._listener = DestroyListener(self.ns, keep=False)
        try:
            self._listener.start()
        except TopologyError:
            self._nl.close()
            raise
        self._thread = threading.Thread(target=self._loop, name=f"sockdiag-{self.ns}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        nxt = time.monotonic()
        while True:
            try:
                self.sample_now()
            except Exception:  # noqa: BLE001 - keep sampling; the failure is logged
                log.exception("sampling TCP sockets in namespace %s failed", self.ns)
            nxt = max(nxt + self.interval_s, time.monotonic())  # a fixed grid; a late sample skips ahead
            if self._stop.wait(nxt - time.monotonic()):
                return

    def sample_now(self) -> None:
        with self._sample_lock:
            if self._done:
                return
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            if self._nl is None:
                self._nl = open_diag_socket(self.ns)
            with self._lock:
                roots = {n: list(r) for n, r in self._roots.items()}
            by_inode: dict[int, list[str]] = {}
            for name, pids in roots.items():
                live = [p for p, st in pids if st is not None and process_start_time(p) == st]  # not reused
                for ino in socket_inodes(p for root in live for p in process_tree(root)):
                    by_inode.setdefault(ino, []).append(name)
            socks = dump_tcp(self._nl)
            destroyed = self._listener.take() if self._listener is not None else {}
            with self._lock:
                self._ingest(self.clock(), socks, by_inode, destroyed)
            self._samples += 1
            self._cpu_s += time.thread_time() - cpu0
            self._wall_s += time.perf_counter() - wall0

    def _ingest(self, now: int, socks: list[TcpSocket] | None, by_inode: dict[int, list[str]],
                destroyed: dict[int, TcpSocket]) -> None:
        """One sample; ``socks`` None: only late destroy broadcasts, added to each name's last row."""
        inc: dict[int, dict[str, int]] = {}  # cookie -> its counters' increases in this sample
        present: set[int] = set()
        for s in socks or ():
            c = self._conns.get(s.cookie)
            names = by_inode.get(s.inode, []) if s.inode else []
            if c is None and names and self.skip_loopback and s.state != "LISTEN" and is_loopback(s):
                for n in names:
                    self._loopback.setdefault(n, set()).add(s.cookie)
                continue
            if c is None and names and s.info:
                c = self._conns[s.cookie] = _Conn(s, set(), now, s.state == "LISTEN")
                self._open.add(s.cookie)
            if c is None or c.closed:
                continue
            c.names.update(names)
            if s.info:  # else the TIME_WAIT remnant under the same cookie: the socket itself is gone
                present.add(s.cookie)
                inc[s.cookie] = c.update(s, now, None)
        for cookie in [ck for ck in destroyed if ck in self._conns and not self._conns[ck].final]:
            c, d = self._conns[cookie], destroyed[cookie]
            if d.info:
                d.inode = d.inode or c.sock.inode
                inc[cookie] = c.update(d, now, inc.get(cookie))
                c.closed = c.final = True
                present.discard(cookie)
        for cookie in list(self._open):
            if self._conns[cookie].closed or (socks is not None and cookie not in present):
                self._conns[cookie].closed = True  # gone, no broadcast yet: its last sample stays its final state
                self._open.discard(cookie)
        # each socket's names once (not every socket for every name: 50 processes x 250 sockets was 62,500 checks
        # a sample, bench/apps_bench.py)
        inc_of: dict[str, list[dict[str, int]]] = {}
        for ck, v in inc.items():
            c = self._conns[ck]
            if not c.listen:
                for n in c.names:
                    inc_of.setdefault(n, []).append(v)
        live_of: dict[str, list[dict[str, int]]] = {}
        for ck in present:
            c = self._conns[ck]
            if not c.listen and c.sock.state != "CLOSE":  # CLOSE: reset, its fd not closed yet
                for n in c.names:
                    live_of.setdefault(n, []).append(c.sock.info)
        for name, rows in self._series.items():
            mine = inc_of.get(name, [])
            up = {k: sum(v[k] for v in mine) for k in _SUMS}
            if socks is None:
                for k, v in (up.items() if rows else ()):
                    rows[-1]["retrans" if k == "total_retrans" else k] += v
                continue
            live = live_of.get(name, [])
            if live or any(up.values()):
                rtts = [i for i in live if i.get("rtt", 0) > 0]
                rows.append({"t_ns": now, "connections": len(live), "rtt_us": _mean([i["rtt"] for i in rtts]),
                             "rttvar_us": _mean([i["rttvar"] for i in rtts]),
                             "snd_cwnd": _mean([i.get("snd_cwnd", 0) for i in live]), "retrans": up["total_retrans"],
                             "bytes_sent": up["bytes_sent"], "bytes_acked": up["bytes_acked"],
                             "bytes_received": up["bytes_received"],
                             "delivery_rate_bps": sum(i.get("delivery_rate", 0) * 8 for i in live)})

    def stop(self) -> None:
        """A final sample, then the destroy broadcasts of sockets it found closed (they follow the close by a
        work queue's delay: waited for up to 0.25 s); stops the thread and the listener. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.sample_now()
        finally:
            if self._listener is not None:
                deadline = time.monotonic() + 0.25
                while True:
                    with self._lock:
                        self._ingest(self.clock(), None, {}, self._listener.take())
                        waiting = any(c.closed and not c.final for c in self._conns.values())
                    if not waiting or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                self._listener.stop()
                with self._lock:
                    self._ingest(self.clock(), None, {}, self._listener.take())
            with self._sample_lock:
                self._done = True
                if self._nl is not None:
                    self._nl.close()
                    self._nl = None

    def connections(self, name: str) -> list[dict]:
        """Per connection of ``name`` (not LISTEN sockets): addresses, state, times, its final tcp_info figures;
        ``rtt_us_mean`` is the mean of its sampled rtt."""
        with self._lock:
            out = []
            for c in (c for c in self._conns.values() if name in c.names and not c.listen):
                s, i = c.sock, c.sock.info
                out.append({"src": s.src, "sport": s.sport, "dst": s.dst, "dport": s.dport, "cookie": s.cookie,
                            "state": s.state, "first_ns": c.first_ns, "last_ns": c.last_ns, "closed": c.closed,
                            "samples": c.samples, **{k: i.get(f, 0) for k, f in _FINAL.items()},
                            "delivery_rate_bps": i.get("delivery_rate", 0) * 8,
                            "rtt_us_mean": c.rtts[0] / c.rtts[1] if c.rtts[1] else None})
            return out

    def series(self, name: str) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self._series.get(name, [])]

    def totals(self, name: str) -> dict:
        conns, rows = self.connections(name), self.series(name)
        with self._lock:
            listen = sum(1 for c in self._conns.values() if name in c.names and c.listen)
            loopback = len(self._loopback.get(name, ()))
        rtts = [r["rtt_us"] for r in rows if r["rtt_us"] is not None]
        mins = [c["min_rtt_us"] for c in conns if c["min_rtt_us"] > 0]
        return {"connections": len(conns), "listen_sockets": listen, "loopback": loopback, "samples": len(rows),
                "rtt_us_mean": _mean(rtts), "rtt_us_last": rtts[-1] if rtts else None,
                "min_rtt_us": min(mins) if mins else None,
                **{k: sum(c[k] for c in conns)
                   for k in ("total_retrans", "bytes_sent", "bytes_acked", "bytes_received", "bytes_retrans")}}

    def cost(self) -> dict:
        """Samples taken and the time they took: CPU (this process's sampling threads) and wall seconds."""
        n = self._samples
        return {"samples": n, "cpu_s": self._cpu_s, "wall_s": self._wall_s,
                "cpu_s_per_sample": self._cpu_s / n if n else None,
                "wall_s_per_sample": self._wall_s / n if n else None,
                "destroy_broadcasts_lost": self._listener.dropped if self._listener is not None else 0}
