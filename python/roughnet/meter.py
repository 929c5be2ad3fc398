"""``roughnet profiles check``: a link profile measured by independent meters against the figures it cites.

Owns the check of one profile: a two-host topology joined by roughnet-wire with the
profile (host ``meta`` is side A, the client end; ``metb`` side B), ``ping`` for the
round trip's percentiles and loss, ``iperf3`` (UDP, offered at 1.2 times the profile's rate)
driving the rates, read from the receiving interface's byte counter (what the link delivered,
before iperf3's socket drops any of it on a busy machine), each figure compared with what the profile's source cites
(``spec/profiles.toml``, ``[[profile.meter]]``) within the tolerance written beside it.
Neither meter is roughnet's: what they see is what any program on that link would see.
``calibrate`` is the other check (configured against realised, through roughnet's agent).

The probing is sized from the profile: pings no faster than a quarter of the slower
direction's capacity (so the meter does not queue behind itself on an HF link), at most 5
a second; iperf3 for 4 s, its first second (the first frame's delay, the queue filling)
and its last (the sender stopping) left out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import LinkError, RoughnetError
from .run.runner import Interrupted
from .runspec import Host, Link, Run, Workload
from .spec import profiles as table
from .spec.capacity import percentile

log = logging.getLogger(__name__)

A, B = "meta", "metb"
#: ping's default 56-byte payload: 84-byte IPv4 packet, 98-byte Ethernet frame.
PING_FRAME = 98
#: iperf3's UDP datagrams: 1400 bytes of payload in a 1442-byte Ethernet frame (IPv4 20, UDP 8, Ethernet 14).
IPERF_PAYLOAD = 1400
IPERF_FRAME = IPERF_PAYLOAD + 42
IPERF_SECONDS = 4
IPERF_PORT = 5299
_TIME = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")
PING_FIGURES = ("rtt_p50_ms", "rtt_p90_ms", "rtt_p99_ms", "loss", "loss_oneway")


class UnknownProfile(RoughnetError):
    """A profile name the table does not have (exit 2: bad input)."""

    exit_code = 2


@dataclass
class Reading:
    profile: str
    figure: str
    cited: float
    measured: float | None
    tolerance: float
    plus: float
    unit: str
    why: str
    meter: str

    @property
    def ok(self) -> bool | None:
        return None if self.measured is None else abs(self.measured - self.expected) <= self.tolerance

    @property
    def expected(self) -> float:
        """The cited figure plus what the meter's own probes add (ping's frames serialised on a slow link)."""
        return self.cited + self.plus

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "expected": self.expected, "ok": self.ok}


def resolve(names: list[str], every: bool) -> list[table.Profile]:
    """The profiles named (or all), in the table's order; an unknown name lists the known ones."""
    if every:
        return list(table.table())
    if not names:
        raise UnknownProfile("no profile named; expected NAME ... or --all (profiles: "
                             + ", ".join(table.names()) + ")")
    out = []
    for n in names:
        p = table.get(n)
        if p is None:
            raise UnknownProfile(f"unknown profile {n!r}; expected one of {', '.join(table.names())}")
        out.append(p)
    return out


def ping_plan(p: table.Profile, count: int | None) -> tuple[int, float]:
    """(count, interval s): at most 5 a second, each direction loaded at most a quarter (half duplex: both)."""
    cfg = p.link_config()
    rates = [d.get("rate_bps") for d in (cfg.get("a_to_b", {}), cfg.get("b_to_a", {})) if d.get("rate_bps")]
    busy_s = PING_FRAME * 8 / min(rates) if rates else 0.0
    if cfg.get("half_duplex") is not None:
        busy_s = 2 * busy_s + 2 * cfg["half_duplex"].get("turnaround_ns", 0) / 1e9
    interval = max(0.2, 4 * busy_s)
    if count is None:
        count = 300 if interval <= 0.2 else max(3, int(60 / interval))
    return count, interval


def parse_ping(text: str, count: int) -> dict[str, Any]:
    rtts = {int(m.group(1)): float(m.group(2)) for m in _TIME.finditer(text)}
    vals = list(rtts.values())
    loss = 1 - len(vals) / count if count else None
    out: dict[str, Any] = {"sent": count, "received": len(vals), "loss": loss,
                           # both directions alike: one way is what survives one of the two crossings
                           "loss_oneway": None if loss is None else 1 - math.sqrt(1 - loss)}
    for q in (50, 90, 99):
        out[f"rtt_p{q}_ms"] = percentile(vals, q / 100) if vals else None
    return out


def parse_iperf_server(text: str) -> float | None:
    """Link rate realised (Mbit/s of Ethernet frames) from iperf3's server JSON, first and last second left out."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    ivs = [iv["sum"] for iv in doc.get("intervals", []) if iv.get("sum", {}).get("seconds", 0) > 0.5]
    ivs = ivs[1:-1] if len(ivs) > 3 else ivs
    if not ivs:
        return None
    bits = sum(iv["bits_per_second"] * iv["seconds"] for iv in ivs)
    secs = sum(iv["seconds"] for iv in ivs)
    return bits / secs * IPERF_FRAME / IPERF_PAYLOAD / 1e6


def parse_iperf_sent(text: str) -> float | None:
    """The rate iperf3's UDP client offered (Mbit/s of frames), from its JSON."""
    try:
        bps = json.loads(text)["end"]["sum"]["bits_per_second"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None
    return bps * IPERF_FRAME / IPERF_PAYLOAD / 1e6


class InstrumentLimit(Exception):
    """The meter itself cannot reach the figure on this machine (a reading of None, with this reason)."""


def _run(profile: str) -> Run:
    lk = Link(index=0, hosts=(A, B), profile=profile, engine="wire")
    wl = Workload(pattern="stream", protocol="udp", sender=A, receivers=(B,), payload_bytes=64)
    rid = secrets.token_hex(6)
    return Run(scenario="meter", sweep_id="meter-00000000", run_id=rid, index=0, params={}, seed=1, repeat=0,
               hosts=(Host(A), Host(B)), links=(lk,), workload=wl)


def _wait(proc: subprocess.Popen, deadline_s: float, stop: threading.Event | None) -> tuple[str, str]:
    """``proc``'s output once it ends; killed at the deadline or when ``stop`` is set (then Interrupted)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            return proc.communicate(timeout=0.25)
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                proc.kill()
                proc.communicate()
                raise Interrupted("stopped")
            if time.monotonic() > end:
                proc.kill()
                proc.communicate()
                raise LinkError(f"{proc.args[-1] if proc.args else 'a meter'} did not end within {deadline_s:.0f} s")


def _ping(topo: Any, count: int, interval: float, max_rtt_s: float,
          stop: threading.Event | None = None) -> tuple[dict[str, Any], str]:
    dst = topo.address(B, A)
    argv = ["ping", "-n", "-c", str(count), "-i", f"{interval:g}", "-W", f"{max(2.0, 3 * max_rtt_s):.0f}", dst]
    proc = topo.popen(A, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = _wait(proc, count * interval + 6 * max_rtt_s + 30, stop)
    if proc.returncode not in (0, 1):  # 1: some replies missing (loss is a figure, not a failure)
        raise LinkError(f"ping exited {proc.returncode}: {(err or out)[-300:]}")
    return parse_ping(out, count), " ".join(argv)


def rx_bytes(net_dev: str, ifname: str) -> int | None:
    """Received bytes of ``ifname`` from the text of a /proc/<pid>/net/dev."""
    for line in net_dev.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name.strip() == ifname:
            return int(rest.split()[0])
    return None


def steady_rate(samples: list[tuple[float, int]], edge_s: float = 1.0) -> float | None:
    """Mbit/s over the steady part of a stream, from (monotonic seconds, byte counter) samples: the stream is
    from when 2 % of the bytes counted had arrived to when 98 % had (iperf3's control exchanges, a few kB
    before and after, fall outside), less ``edge_s`` at each end (the queue filling, the sender stopping)."""
    if len(samples) < 2 or samples[-1][1] <= samples[0][1]:
        return None
    b0, total = samples[0][1], samples[-1][1] - samples[0][1]
    t_first = next(t for t, b in samples if b - b0 >= 0.02 * total)
    t_last = next(t for t, b in samples if b - b0 >= 0.98 * total)
    inside = [s for s in samples if t_first + edge_s <= s[0] <= t_last - edge_s]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < 0.5:
        return None
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return (c1 - c0) * 8 / (t1 - t0) / 1e6


class _RxCounter:
    """Samples the receiving interface's byte counter (the kernel's count of the frames the link delivered,
    before any socket) every 20 ms from /proc/<pid>/net/dev of a process in the receiving namespace."""

    def __init__(self, pid: int, ifname: str) -> None:
        self.path, self.ifname = f"/proc/{pid}/net/dev", ifname
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rx-counter", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            try:
                with open(self.path) as f:
                    text = f.read()
            except OSError:
                return
            after = time.monotonic()
            n = rx_bytes(text, self.ifname)
            # stamped at the read's midpoint; a read the scheduler held up for over a millisecond is left out
            if n is not None and after - before < 0.001:
                self.samples.append(((before + after) / 2, n))
            self._stop.wait(0.02)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _udp_rcvbuf_errors(topo: Any, host: str) -> int | None:
    """Datagrams ``host``'s UDP sockets dropped for a full receive buffer so far (its namespace's counter)."""
    m = re.search(r"^Udp: (.*)\nUdp: (.*)$", topo.proc_net_counters(host), re.M)
    value = dict(zip(m.group(1).split(), m.group(2).split())).get("RcvbufErrors") if m else None
    return int(value) if value is not None else None


def _iperf(topo: Any, src: str, dst: str, mbps: float, stop: threading.Event | None = None) -> tuple[float | None, str]:
    """The link's rate from ``src`` to ``dst`` under iperf3's UDP offer at 1.2 x ``mbps``: the receiving
    interface's counter over the steady seconds (iperf3's own figure, which also loses what its socket dropped
    on a busy machine, is quoted beside it)."""
    addr = topo.address(dst, src)
    ifname = next(i.ifname for i in topo.interfaces() if i.link == 0 and i.host == dst and i.address)
    srv = topo.popen(dst, ["iperf3", "-s", "-1", "-J", "-B", addr, "-p", str(IPERF_PORT)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    argv = ["iperf3", "-c", addr, "-p", str(IPERF_PORT), "-u", "-l", str(IPERF_PAYLOAD),
            "-b", f"{1.2 * mbps * IPERF_PAYLOAD / IPERF_FRAME:.3f}M", "-t", str(IPERF_SECONDS), "-J"]
    counter = _RxCounter(srv.pid, ifname)
    try:
        time.sleep(0.3)
        drops0 = _udp_rcvbuf_errors(topo, dst)
        counter.start()
        for _ in range(20):
            cli = topo.popen(src, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            cout, cerr = _wait(cli, IPERF_SECONDS + 60, stop)
            if cli.returncode == 0 or "Connection refused" not in (cerr + cout) or srv.poll() is not None:
                break
            time.sleep(0.2)
        if cli.returncode != 0:
            raise LinkError(f"iperf3 client exited {cli.returncode}: {(cerr or cout)[-300:]}")
        out, _ = _wait(srv, 30, stop)
        counter.stop()
        drops1 = _udp_rcvbuf_errors(topo, dst)
    finally:
        counter.stop()
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    how = " ".join(argv)
    sent = parse_iperf_sent(cout)
    if sent is not None and sent < 1.05 * mbps:
        # The sender could not offer more than the link carries: the meter's limit on this machine, not the link's.
        raise InstrumentLimit(f"{how}: iperf3 sent only {sent:.1f} Mbit/s of frames, not the 5 % above the {mbps:g} "
                              "Mbit/s to be measured that fills the link (this machine's limit for iperf3)")
    link = steady_rate(counter.samples)
    app = parse_iperf_server(out)
    if link is None:
        return None, f"{how}: too few bytes on {ifname} for a steady rate (iperf3: {app} Mbit/s)"
    dropped = (drops1 - drops0) if drops0 is not None and drops1 is not None else None
    return link, (f"{how}; {ifname}'s received bytes over the steady seconds (iperf3 itself: "
                  f"{app if app is None else round(app, 1)} Mbit/s"
                  + (f", its socket dropping {dropped} datagrams the link delivered" if dropped else "") + ")")


RATE_FIGURES = ("up_mbps", "down_mbps")
#: Rates up to this many Mbit/s are measured side by side (a few thousand frames a second each, a few per cent
#: of a core through the wires and iperf3 together); faster ones one at a time, as a rate measured beside other
#: busy links would measure the CPU they share.
LIGHT_MBPS = 30.0


def _unlimited(engine: Any, link: Link, side: str, measure: Callable[[], float | None]) -> float | None:
    """``measure()`` with ``side``'s rate taken off the running wire (its control socket), then put back."""
    wp = engine.process(link)
    config = {k: v for k, v in wp.config.items() if k != "schedule"}
    free = {**config, side: {**config[side], "rate_bps": None}}
    wp.request({"cmd": "set", "config": free})
    try:
        return measure()
    finally:
        wp.request({"cmd": "set", "config": config})


def check(p: table.Profile, count: int | None = None, stop: threading.Event | None = None,
          figures: set[str] | None = None) -> list[Reading]:
    """Measure ``p``'s meter figures (or those of them in ``figures``) over a wire link with the profile; one
    Reading per figure measured.  ``stop`` ends the meters early (Interrupted)."""
    from .links.wire import WireEngine
    from .topo import Ledger, Topology

    if not p.meter:
        return []
    run = _run(p.name)
    engine = WireEngine()
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id), engines={0: "wire"})
    cfg = p.link_config()
    rtt_s = sum(d.get("delay_ns", 0) + 3 * d.get("jitter_ns", 0) for d in (cfg.get("a_to_b", {}),
                                                                          cfg.get("b_to_a", {}))) / 1e9
    wanted = [m for m in p.meter if figures is None or m.figure in figures]
    figures = {m.figure for m in wanted}
    if not figures:
        return []
    got: dict[str, tuple[float | None, str]] = {}
    try:
        topo.build()
        engine.apply(topo, run.links[0])
        if figures & set(PING_FIGURES):
            n, interval = ping_plan(p, count)
            res, how = _ping(topo, n, interval, rtt_s + 1, stop)
            for f in PING_FIGURES:
                got[f] = (res[f], f"{how} ({res['received']} of {res['sent']} replies)")
        for f, (src, dst), side in (("up_mbps", (A, B), "a_to_b"), ("down_mbps", (B, A), "b_to_a")):
            if f not in figures:
                continue
            m = next(m for m in p.meter if m.figure == f)
            try:
                got[f] = _iperf(topo, src, dst, m.cited, stop)
                short = got[f][0] is not None and got[f][0] < m.cited + m.plus - m.tolerance
                if short:  # the link's rate, or this machine? the same offer through the wire without the rate
                    ref = _unlimited(engine, run.links[0], side, lambda: _iperf(topo, src, dst, m.cited, stop)[0])
                    if ref is not None and ref < m.cited + m.plus - m.tolerance:
                        raise InstrumentLimit(f"{got[f][1]}: {got[f][0]:.1f} Mbit/s, and with the rate taken off "
                                              f"the link the same offer reached only {ref:.1f} Mbit/s (this machine's "
                                              "limit for iperf3 through the userspace wire, not the profile's)")
                    # the machine can: a passing stall of it, or the link? Once more with the rate; this one counts
                    again = _iperf(topo, src, dst, m.cited, stop)
                    got[f] = (again[0], f"{again[1]} (measured twice: {got[f][0]:.1f} Mbit/s the first time, "
                                        f"{ref if ref is None else round(ref, 1)} Mbit/s without the rate)")
            except InstrumentLimit as e:
                got[f] = (None, f"not measurable here: {e}")
    finally:
        from .run.runner import teardown_shielded

        teardown_shielded(topo)
    return [Reading(p.name, m.figure, m.cited, None if (v := got.get(m.figure, (None, ""))[0]) is None else round(v, 4),
                    m.tolerance, m.plus, m.unit, m.why, got.get(m.figure, (None, "not measured"))[1]) for m in wanted]


def check_many(profiles: list[table.Profile], count: int | None = None, parallel: bool = True,
               progress: Callable[[str, str], None] | None = None) -> list[Reading]:
    """Every profile checked; readings in the order given, each profile's in its table's order.

    Side by side (``parallel``): first every profile's pings at once, each in its own namespaces and
    wire (pings are light and mostly wait), then the iperf3 rates on a fresh link per profile: those of
    LIGHT_MBPS or less side by side, then the faster one profile at a time, beside nothing but the HF
    links' pings (a ping every few seconds: a fast rate measured beside busy wires would measure the CPU
    they share).
    Ctrl-C stops every meter and tears every link down, then the interrupt goes on."""
    say = progress or (lambda name, what: None)
    todo = [p for p in profiles if p.meter]
    got: dict[tuple[str, str], Reading] = {}
    if not parallel:
        for p in todo:
            say(p.name, "started")
            got.update({(r.profile, r.figure): r for r in check(p, count)})
            say(p.name, "done")
        return [got[(p.name, m.figure)] for p in todo for m in p.meter]
    stop = threading.Event()
    errors: list[BaseException] = []
    pings = [p for p in todo if any(m.figure in PING_FIGURES for m in p.meter)]
    # Links slower than this carry a ping every few seconds: their wires idle while the rates are measured.
    slow = {p.name for p in pings if ping_plan(p, count)[1] > 1.0}

    def beside(p: table.Profile, wanted: tuple[str, ...], done: str) -> None:
        """``check`` on a thread of its own: an error stops every meter and is re-raised on the main thread."""
        try:
            for r in check(p, count, stop, set(wanted)):
                got[(r.profile, r.figure)] = r
            say(p.name, done)
        except BaseException as e:  # noqa: BLE001 (re-raised on the main thread below)
            errors.append(e)
            stop.set()

    threads = {p.name: threading.Thread(target=beside, args=(p, PING_FIGURES, "pings done"), name=f"meter-{p.name}")
               for p in pings}

    def wait(names: set[str]) -> None:
        for name in names:
            while threads[name].is_alive():
                threads[name].join(0.2)
        real = [e for e in errors if not isinstance(e, Interrupted)]
        if real:
            raise real[0]

    try:
        for p in pings:
            say(p.name, "pinging")
            threads[p.name].start()
        wait(set(threads) - slow)  # the busy pings end first; the slow links' go on beside the rates
        rated = [p for p in todo if any(m.figure in RATE_FIGURES for m in p.meter)]
        light = [p for p in rated if max(m.cited for m in p.meter if m.figure in RATE_FIGURES) <= LIGHT_MBPS]
        for p in light:
            say(p.name, "iperf3")
            threads[f"{p.name} rates"] = threading.Thread(target=beside, args=(p, RATE_FIGURES, "rates done"),
                                                          name=f"rates-{p.name}")
            threads[f"{p.name} rates"].start()
        wait({f"{p.name} rates" for p in light})
        for p in rated:
            if p not in light:
                say(p.name, "iperf3")
                for r in check(p, count, stop, set(RATE_FIGURES)):
                    got[(r.profile, r.figure)] = r
        wait(slow)
    except BaseException:
        stop.set()  # Ctrl-C: every meter is killed, every topology torn down, then the interrupt goes on
        for t in threads.values():
            if t.is_alive():
                t.join()
        raise
    return [got[(p.name, m.figure)] for p in todo for m in p.meter]
