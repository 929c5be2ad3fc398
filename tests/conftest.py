"""Shared test fixtures: the ``root`` marker/fixture and helpers for namespace tests.

``@pytest.mark.root`` (or the ``root`` fixture) skips a test, with the reason
ROOT_REASON, unless we are root and ``ip netns add`` works.  The check creates
and deletes one scratch namespace ``rn-t<pid>-chk`` once per session.

As root (CI's ``make test``) every skip is a failure, except a reason in SKIP_OK_AS_ROOT (what ``make``
cannot install) or with ROUGHNET_TESTS_ALLOW_SKIPS=1 (a partial setup): see "no silent skips as root".
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


# ----------------------------------------------------------------------------- no silent skips as root
# CI runs `bash .ci/run` = `make test` as root, after `make` installed and built everything the tests use
# (system packages, the agent with every driver, the wire, the ROS 2 wheels, ns-3, SUMO, the Kafka jars, the
# local cluster). There a skipped test is a test that did not run while the suite passed: "needs root", "not
# built (make build)", "not installed (make extras)" would let CI go green with the integration suite skipped.
# So, as root, a skip is a failure, with the skip's own reason; only what `make` cannot provide stays a skip
# (SKIP_OK_AS_ROOT). A developer running part of the suite as root on a machine `make` has not set up (no
# cluster, no extras) sets ROUGHNET_TESTS_ALLOW_SKIPS=1 to get the plain skips back; CI never sets it.

#: The environment variable that keeps skips skips as root (for partial setups; never set in CI).
ALLOW_SKIPS_ENV = "ROUGHNET_TESTS_ALLOW_SKIPS"

#: Skip reasons (their beginning) that stay skips as root: what no `make` target can install.
SKIP_OK_AS_ROOT = (
    # a kernel module: the machine's kernel has sch_netem or not (Debian's has it; some container hosts do not)
    "the netem engine needs sch_netem",
    # the kernel's IPsec ESP with AES-GCM (flannel's ipsec backend): one of the two flannel-ipsec tests runs
    "this kernel has no ESP with AES-GCM",
    "this kernel has ESP with AES-GCM",
)


def skips_are_failures() -> bool:
    """As root (the `make test` of CI), unless ALLOW_SKIPS_ENV is set to a non-empty value other than 0."""
    return os.geteuid() == 0 and os.environ.get(ALLOW_SKIPS_ENV, "") in ("", "0")


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    return text.removeprefix("Skipped: ")


def _fail_the_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = _skip_reason(report)
    if any(reason.startswith(ok) for ok in SKIP_OK_AS_ROOT):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped as root: {reason}\n"
                       f"As root (CI's `make test`) a skip is a failure: `make test` installs and builds what the "
                       f"tests need, so a skip means the suite did not test it. Run `make test` (or the `make` "
                       f"target the reason names), or set {ALLOW_SKIPS_ENV}=1 to allow skips on a partial setup.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    # an expected failure that failed is reported as skipped with `wasxfail`: that is not a skip
    if report.skipped and not hasattr(report, "wasxfail") and skips_are_failures():
        _fail_the_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    report = outcome.get_result()
    # a module skipped whole (pytest.importorskip at import: a Python package `make` installs)
    if report.skipped and skips_are_failures():
        _fail_the_skip(report)


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


# ----------------------------------------------------------------------------- statistical bounds
#: Chance, per assertion, that a bound from binomial_bounds fails on a correct run (each tail half of it): about
#: what 4.5 standard deviations of a normal give (6.8e-6 both sides), but from the exact binomial distribution,
#: which is skewed at small counts.
BOUND_P = 1e-5


def binomial_bounds(n: int, p: float, chance: float = BOUND_P) -> tuple[int, int]:
    """(lo, hi): a Binomial(n, p) count (e.g. messages lost of ``n`` at random loss ``p``, each frame dropped
    independently) is below lo with probability <= chance / 2 and above hi with probability <= chance / 2."""
    from math import exp, lgamma, log

    def pmf(k: int) -> float:
        if p in (0.0, 1.0):
            return float(k == round(n * p))
        return exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(p) + (n - k) * log(1 - p))

    assert 0 <= p <= 1, p
    lo, below = 0, 0.0
    while lo < n and below + pmf(lo) <= chance / 2:
        below += pmf(lo)
        lo += 1
    hi, above = n, 0.0
    while hi > 0 and above + pmf(hi) <= chance / 2:
        above += pmf(hi)
        hi -= 1
    return lo, hi
