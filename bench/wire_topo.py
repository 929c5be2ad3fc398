"""A throwaway topology for exercising roughnet-wire on its own: hosts A and B in their own namespaces,
joined through a link namespace L where roughnet-wire forwards between its two veth ends; or, for
comparison, A and B joined by one plain veth. Used by bench/wire_bench.py and tests/integration/test_wire*.py.

It owns only what it creates (namespaces named ``rn-tw<pid>-<tag>-{a,l,b}``), removes them on exit, and never
touches the root namespace (veths are created inside the namespaces). Addresses: 198.18.200.1/24 on A,
198.18.200.2/24 on B. Offloads are off on every veth (no GSO super-frames; checksums filled by the stack).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ADDR_A = "198.18.200.1"
ADDR_B = "198.18.200.2"
PREFIX = 24
OFFLOADS = ["tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off"]


def _run(argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
    return out


def netns_argv(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


class Topo:
    """Namespaces A, (L,) B. ``wired=True``: A <-> L <-> B with roughnet-wire in L; else A <-> B directly."""

    def __init__(self, tag: str, wired: bool = True):
        base = f"rn-tw{os.getpid()}-{tag}"
        self.ns_a, self.ns_l, self.ns_b = f"{base}-a", f"{base}-l", f"{base}-b"
        self.wired = wired
        self.created: list[str] = []
        self.wire: subprocess.Popen | None = None
        self.ready: dict | None = None
        self.control_path: Path | None = None

    # -- topology --------------------------------------------------------------------------------------

    def _add_ns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self.created.append(ns)
        _run(netns_argv(ns, ["ip", "link", "set", "lo", "up"]))

    def _veth(self, ns1: str, if1: str, ns2: str, if2: str) -> None:
        # Created inside ns1, the peer moved straight to ns2: nothing ever appears in the root namespace.
        _run(netns_argv(ns1, ["ip", "link", "add", if1, "type", "veth", "peer", "name", if2, "netns", ns2]))
        for ns, ifname in ((ns1, if1), (ns2, if2)):
            _run(netns_argv(ns, ["ethtool", "-K", ifname, *OFFLOADS]))
            _run(netns_argv(ns, ["ip", "link", "set", ifname, "up"]))

    def __enter__(self) -> "Topo":
        try:
            self._add_ns(self.ns_a)
            self._add_ns(self.ns_b)
            if self.wired:
                self._add_ns(self.ns_l)
                self._veth(self.ns_a, "rnwa", self.ns_l, "rnla")
                self._veth(self.ns_l, "rnlb", self.ns_b, "rnwb")
            else:
                self._veth(self.ns_a, "rnwa", self.ns_b, "rnwb")
            _run(netns_argv(self.ns_a, ["ip", "addr", "add", f"{ADDR_A}/{PREFIX}", "dev", "rnwa"]))
            _run(netns_argv(self.ns_b, ["ip", "addr", "add", f"{ADDR_B}/{PREFIX}", "dev", "rnwb"]))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.wire is not None and self.wire.poll() is None:
            self.stop_wire()
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=20)
        self.created.clear()

    def mac(self, ns: str, ifname: str) -> str:
        out = _run(netns_argv(ns, ["ip", "-j", "link", "show", ifname]))
        return json.loads(out.stdout)[0]["address"]

    def quiet(self) -> None:
        """Make the hosts send nothing on their own: IPv6 off (no ND, MLD, router solicitations) and static
        ARP entries, so the wire sees exactly the frames a test sends (needed for determinism checks)."""
        for ns in (self.ns_a, self.ns_b) + ((self.ns_l,) if self.wired else ()):
            for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
                _run(netns_argv(ns, ["sysctl", "-q", "-w", f"{key}=1"]))
        mac_a, mac_b = self.mac(self.ns_a, "rnwa"), self.mac(self.ns_b, "rnwb")
        _run(netns_argv(self.ns_a, ["ip", "neigh", "replace", ADDR_B, "lladdr", mac_b, "dev", "rnwa", "nud", "permanent"]))
        _run(netns_argv(self.ns_b, ["ip", "neigh", "replace", ADDR_A, "lladdr", mac_a, "dev", "rnwb", "nud", "permanent"]))

    # -- processes -------------------------------------------------------------------------------------

    def popen(self, ns: str, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(netns_argv(ns, argv), **kw)

    def run(self, ns: str, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(netns_argv(ns, argv), capture_output=True, text=True, timeout=timeout, check=False)

    # -- the wire --------------------------------------------------------------------------------------

    def start_wire(self, binary: Path, config: dict, seed: int, workdir: Path, extra: list[str] | None = None,
                   control: bool = True, timeout: float = 10) -> dict:
        """Start roughnet-wire in L between rnla (side A) and rnlb (side B); returns its ready line."""
        assert self.wired, "start_wire needs the wired topology"
        cfg_path = workdir / f"wire-{self.ns_l}.json"
        cfg_path.write_text(json.dumps(config))
        argv = [str(binary), "--if-a", "rnla", "--if-b", "rnlb", "--config", str(cfg_path), "--seed", str(seed)]
        if control:
            self.control_path = workdir / f"wire-{os.getpid()}.sock"
            argv += ["--control", str(self.control_path)]
        argv += extra or []
        self.wire = self.popen(self.ns_l, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.wire.stdout.readline()
            if not line:
                break
            obj = json.loads(line)
            if obj.get("type") == "ready":
                self.ready = obj
                return obj
            if obj.get("type") == "error":
                break
        self.wire.wait(timeout=5)
        raise RuntimeError(f"roughnet-wire did not become ready (exit {self.wire.returncode}): "
                           f"{self.wire.stdout.read()} {self.wire.stderr.read()[-800:]}")

    def control(self, cmd: dict, timeout: float = 10) -> dict:
        """One command on the control socket, its one-line reply."""
        assert self.control_path is not None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.control_path))
            s.sendall((json.dumps(cmd) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        return json.loads(buf)

    def stop_wire(self, timeout: float = 10) -> dict | None:
        """SIGTERM the wire (our own child, by pid) and return its final stats line."""
        assert self.wire is not None
        self.wire.send_signal(signal.SIGTERM)
        try:
            out, err = self.wire.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.wire.kill()
            out, err = self.wire.communicate()
        self.wire_stderr = err
        for line in out.splitlines():
            obj = json.loads(line)
            if obj.get("type") == "stats":
                return obj
        return None
