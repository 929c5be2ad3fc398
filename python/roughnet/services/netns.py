"""Sockets opened inside a run's network namespace, from this process.

Owns one trick: a short-lived helper thread enters the namespace with
``setns(2)`` (which changes only the calling thread's network namespace),
creates a socket there, and ends.  A socket stays in the namespace it was
created in, so the probes in ``services.probes`` then use it from any thread
with plain Python code: no subprocess and no ``python -c`` per probe.  The root
namespace is never changed: the main thread never calls setns, and the helper
thread dies right after.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import threading
from pathlib import Path

from ..errors import ServiceError

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def socket_in_ns(ns: str | None, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A new socket created inside network namespace ``ns`` (None: this process's own namespace)."""
    if ns is None:
        return socket.socket(family, kind)
    path = NETNS_DIR / ns
    out: dict[str, object] = {}

    def work() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            out["sock"] = socket.socket(family, kind)
        except OSError as e:
            out["error"] = e

    t = threading.Thread(target=work, name=f"setns-{ns}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise ServiceError(f"cannot open a socket in namespace {ns} ({path}): {out['error']}; "
                           f"expected an existing roughnet namespace and root privileges")
    sock = out["sock"]
    assert isinstance(sock, socket.socket)
    return sock


def connect_in_ns(ns: str | None, host: str, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to ``host:port`` made from inside ``ns``; the socket keeps ``timeout_s``.

    ``ns`` may also be a place that connects by itself (an object with ``connect(host, port,
    timeout_s)``: a pod of the Kubernetes backend, ``backends.kubernetes.process.PodConnector``).
    """
    if ns is not None and not isinstance(ns, str):
        return ns.connect(host, port, timeout_s)
    sock = socket_in_ns(ns)
    sock.settimeout(timeout_s)
    try:
        sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
