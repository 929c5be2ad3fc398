"""Shared test fixtures: the ``root`` marker/fixture and helpers for namespace tests.

``@pytest.mark.root`` (or the ``root`` fixture) skips a test, with the reason
ROOT_REASON, unless we are root and ``ip netns add`` works.  The check creates
and deletes one scratch namespace ``rn-t<pid>-chk`` once per session.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from functools import lru_cache

import pytest

ROOT_REASON = "needs root and network namespaces (run as root)"


@lru_cache(maxsize=1)
def netns_usable() -> bool:
    if os.geteuid() != 0:
        return False
    name = f"rn-t{os.getpid()}-chk"
    try:
        add = subprocess.run(["ip", "netns", "add", name], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if add.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10, check=False)
    return True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") is not None and not netns_usable():
        pytest.skip(ROOT_REASON)


@pytest.fixture
def root() -> None:
    """Skip (with ROOT_REASON) unless root and network namespaces are usable."""
    if not netns_usable():
        pytest.skip(ROOT_REASON)


# From a random start: tests/integration/conftest.py may load this file a second time (a second counter), and
# two counters from 1 in one process gave test_clean two runs of one token.
_run_ids = itertools.count(1 + int.from_bytes(os.urandom(2), "big") % 0xF00)


def unique_run_id() -> str:
    """A 12-hex-char run id unique to this test process (token = first 8 chars)."""
    return f"{os.getpid() & 0xFFFFF:05x}{next(_run_ids) & 0xFFF:03x}abcd"


@pytest.fixture
def make_run() -> Callable[..., object]:
    """Build a ``runspec.Run`` from host names and links (Link objects or host tuples)."""
    from roughnet.runspec import Host, Link, Run, Workload

    def make(hosts, links, run_id: str | None = None, **workload):
        lk = tuple(x if isinstance(x, Link) else Link(index=i, hosts=tuple(x)) for i, x in enumerate(links))
        w = dict(pattern="stream", protocol="udp", sender=hosts[0], receivers=(hosts[-1],), payload_bytes=100)
        w.update(workload)
        rid = run_id or unique_run_id()
        return Run(scenario="test", sweep_id="test-00000000", run_id=rid, index=0, params={}, seed=1, repeat=0,
                   hosts=tuple(Host(h) for h in hosts), links=lk, workload=Workload(**w))

    return make


#: ICMP echo with a raw socket (the machine has no `ping`); prints replies received, exit 0 if any.
PING_SCRIPT = r"""
import os, socket, struct, sys, time
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
dst, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident, ok = os.getpid() & 0xFFFF, 0
for seq in range(n):
    body = struct.pack("!HH", ident, seq) + b"roughnet"
    s.sendto(struct.pack("!BBH", 8, 0, csum(struct.pack("!BBH", 8, 0, 0) + body)) + body, (dst, 0))
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data, _ = s.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 15) * 4:]
        if icmp[0] == 0 and struct.unpack("!HH", icmp[4:8]) == (ident, seq):
            ok += 1
            break
print(ok)
sys.exit(0 if ok else 1)
"""


def ping_in_ns(ns: str, dst: str, count: int = 1) -> int:
    """Echo replies ``dst`` sent back to a pinger inside namespace ``ns``."""
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PING_SCRIPT, dst, str(count)],
                         capture_output=True, text=True, timeout=10 + 2 * count, check=False)
    return int(out.stdout.strip() or 0)


@pytest.fixture
def ping() -> Callable[..., int]:
    """``ping(topo, src_host, dst_host, count=1)``: echo replies received."""

    def _ping(topo, src: str, dst: str, count: int = 1) -> int:
        return ping_in_ns(topo.ns(src), topo.address(dst, src), count)

    return _ping


def root_ns_snapshot() -> dict[str, object]:
    """The root namespace's links, addresses, routes, rules, nftables ruleset and qdiscs."""
    cmds = {
        "link": ["ip", "-j", "link"],
        "addr": ["ip", "-j", "addr"],
        "route": ["ip", "-j", "route", "show", "table", "all"],
        "rule": ["ip", "-j", "rule"],
        "nft": ["nft", "-j", "list", "ruleset"],
        "qdisc": ["tc", "-j", "qdisc"],
    }
    snap: dict[str, object] = {}
    for key, argv in cmds.items():
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout
        snap[key] = _strip_timers(json.loads(out)) if out.strip() else None
    return snap


_TIMERS = {"valid_life_time", "preferred_life_time", "expires"}


def _strip_timers(obj: object) -> object:
    """Drop fields that count down by themselves (address lifetimes, route expiry)."""
    if isinstance(obj, dict):
        return {k: _strip_timers(v) for k, v in obj.items() if k not in _TIMERS}
    if isinstance(obj, list):
        return [_strip_timers(v) for v in obj]
    return obj


# ----------------------------------------------------------------------------- scenario TOML pieces
# Shared by the spec tests (tests/unit) and the runs through the CLI (tests/integration): the host
# tables and the plain stream workload every small scenario starts from, written out once.


def toml_hosts(*names: str) -> str:
    """Scenario TOML: one ``[[host]]`` table per name, in order, no blank lines between."""
    return "".join(f'[[host]]\nname = "{name}"\n' for name in names)


def toml_stream(protocol: str, to: str = '"b"', payload: str = "1 KiB", messages: int | str = 100,
                rate: str | None = None) -> str:
    """Scenario TOML: a ``[workload]`` stream from host a to ``to`` (a TOML value: '"b"', '["b", "c"]'),
    ``messages`` messages (a number, or a placeholder to fill in later) at ``rate`` when given."""
    lines = ["[workload]", 'pattern = "stream"', f'protocol = "{protocol}"', 'from = "a"', f"to = {to}",
             f'payload = "{payload}"', f"messages = {messages}"]
    if rate is not None:
        lines.append(f'rate = "{rate}"')
    return "\n".join(lines) + "\n"
