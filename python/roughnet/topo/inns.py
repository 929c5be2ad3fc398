"""Settings inside a run's network namespace from a thread of this process: sysctls and offloads.

Owns what `ip netns exec NS sysctl -w ...` and `ip netns exec NS ethtool -K IF ...` did, without
starting a process per namespace and per interface (a 100-host run made 300 of them): a
short-lived thread joins the namespace with setns(2) (CLONE_NEWNET moves only the calling
thread), writes /proc/sys/net/... (net sysctls are those of the reading thread's namespace)
and turns offloads off with the SIOCETHTOOL ioctl on a socket it opens there, then ends, so
no thread of this process is ever left in another namespace. Only network namespaces under
/run/netns are joined; nothing here touches the root namespace.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..errors import TopologyError
from .system import NETNS_DIR

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
SIOCETHTOOL = 0x8946
IFNAMSIZ = 16
#: ethtool's ioctl commands and string set (include/uapi/linux/ethtool.h).
ETHTOOL_GSTRINGS, ETHTOOL_GSSET_INFO, ETHTOOL_GFEATURES, ETHTOOL_SFEATURES = 0x1B, 0x37, 0x3A, 0x3B
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
#: Offloads are turned off on every roughnet interface: with TSO/GSO a socket hands the qdisc one 64 KiB
#: "super-packet" that becomes ~44 frames only later, and GRO/LRO merge received frames again, so tbf would
#: meter, and nftables drop, whole bursts of segments at once instead of the frames a real link carries.
#: The kernel features behind `ethtool -K IF tso off gso off gro off lro off`, as ethtool itself picks
#: them: every "tx-tcp*segmentation" (TSO: IPv4, IPv6, ECN, mangle-id, and what newer kernels add),
#: "tx-generic-segmentation" (GSO), "rx-gro", "rx-lro".
OFFLOAD_FEATURES = re.compile(r"tx-tcp.*segmentation|tx-generic-segmentation|rx-gro|rx-lro")

_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(ns: str, fn: Callable[[], T]) -> T:
    """``fn()`` run by a new thread that joined network namespace ``ns`` (/run/netns/<ns>); its result, or
    its exception raised here. The thread ends with ``fn``."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            fd = os.open(NETNS_DIR / ns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise TopologyError(f"joining namespace {ns} failed: {os.strerror(e)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=body, name=f"netns-{ns}")
    t.start()
    t.join()
    if "error" in box:
        err = box["error"]
        if isinstance(err, FileNotFoundError):
            raise TopologyError(f"namespace {ns} does not exist (expected /run/netns/{ns})") from err
        raise err  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def write_sysctls(settings: Sequence[str]) -> None:
    """``key=value`` sysctls written in the calling thread's namespace; keys the kernel does not have are
    skipped, as `sysctl -e` does (IPv6 keys on a kernel without IPv6)."""
    for item in settings:
        key, _, value = item.partition("=")
        path = "/proc/sys/" + key.replace(".", "/")
        try:
            with open(path, "w") as f:
                f.write(value)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise TopologyError(f"setting sysctl {key}={value} failed: {e}") from e


def _ioctl(sock: socket.socket, ifname: str, data: ctypes.Array) -> int:
    """SIOCETHTOOL on ``ifname`` with ``data`` (the command's struct, filled in by the kernel)."""
    ifreq = struct.pack(f"{IFNAMSIZ}sP", ifname.encode(), ctypes.addressof(data)).ljust(40, b"\0")
    return fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq) and 0


def feature_names(sock: socket.socket, ifname: str) -> list[str]:
    """The kernel's feature names (ETH_SS_FEATURES), in bit order."""
    info = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0), 20)
    _ioctl(sock, ifname, info)
    count = struct.unpack_from("I", info.raw, 16)[0]
    strings = ctypes.create_string_buffer(struct.pack("III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count),
                                          12 + count * ETH_GSTRING_LEN)
    _ioctl(sock, ifname, strings)
    raw = strings.raw[12:]
    return [raw[i * ETH_GSTRING_LEN:(i + 1) * ETH_GSTRING_LEN].split(b"\0", 1)[0].decode()
            for i in range(count)]


def _active(sock: socket.socket, ifname: str, blocks: int) -> list[int]:
    """The active feature bits of ``ifname``, 32 a block (ETHTOOL_GFEATURES)."""
    buf = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_GFEATURES, blocks), 8 + 16 * blocks)
    _ioctl(sock, ifname, buf)
    return [struct.unpack_from("IIII", buf.raw, 8 + 16 * i)[2] for i in range(blocks)]


def offloads_off(ifnames: Sequence[str]) -> None:
    """TSO, GSO, GRO and LRO off on each interface, in the calling thread's namespace, as
    `ethtool -K IF tso off gso off gro off lro off` does (OFFLOAD_FEATURES): the request goes in
    one ETHTOOL_SFEATURES, and the features still active afterwards (fixed on) raise TopologyError
    naming them."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        names: list[str] | None = None
        for ifname in ifnames:
            try:
                if names is None:
                    names = feature_names(sock, ifname)
                bits = [i for i, n in enumerate(names) if OFFLOAD_FEATURES.fullmatch(n)]
                blocks = (len(names) + 31) // 32
                valid = [0] * blocks
                for i in bits:
                    valid[i // 32] |= 1 << (i % 32)
                req = ctypes.create_string_buffer(
                    struct.pack("II", ETHTOOL_SFEATURES, blocks)
                    + b"".join(struct.pack("II", v, 0) for v in valid), 8 + 8 * blocks)
                _ioctl(sock, ifname, req)
                active = _active(sock, ifname, blocks)
            except OSError as e:
                raise TopologyError(f"turning offloads off on {ifname} failed: {e.strerror}") from e
            still = [names[i] for i in bits if active[i // 32] >> (i % 32) & 1]
            if still:
                raise TopologyError(f"turning offloads off on {ifname} failed: {', '.join(still)} stay on "
                                    f"(fixed by its driver)")
