#!/usr/bin/env python3
"""Which I/O back end should roughnet-wire use? Measures three minimal zero-impairment L2 relays written in C
(this folder) against each other and against a plain veth, in one run, interleaved over rounds:

- ``plain``: A and B joined by one veth (the reference: no relay);
- ``afpacket``: A <-veth-> L <-veth-> B, relay_afpacket in L (recvmmsg/sendmmsg, 64 per call; roughnet-wire's way);
- ``tap``: relay_tap in L owns two TAP devices, moved into A and B as their interfaces (no veth at all);
- ``xdp-drv`` / ``xdp-skb``: as afpacket, relay_xdp in L with AF_XDP sockets, XDP program in native (driver)
  mode or generic (SKB) mode.

Per back end and round: iperf3 TCP throughput A -> B (one stream, ``--seconds`` s after 1 s omitted), the
relay's CPU seconds per GB forwarded (its utime + stime over the iperf run / bytes received by iperf3), the
whole machine's busy CPU seconds per GB over the same interval (endpoints and softirq work included; other
processes on the machine add noise), and sockperf UDP ping-pong (64 B, --full-rtt) p50 / p99 round trip.
Prints a table of medians and ratios to plain veth and to afpacket, and optionally writes everything as JSON.

Namespaces: rn-bk<pid>-a, rn-bk<pid>-b and the relay's rn-bk<pid>-l, rebuilt for every measurement; veths and
TAPs exist only inside them (nothing in the root namespace); offloads tso, gso, gro, tx, rx off as roughnet's
topology does. Everything created (namespaces, processes by PID) is removed on exit, on error and on SIGTERM.

Usage (root): python3 bench/backends/run.py [--rounds 3] [--seconds 5] [--backends plain,afpacket,tap,xdp-drv,xdp-skb]
                                           [--json out.json] [--keep-build DIR]
Build needs gcc, libxdp-dev and libbpf-dev (see README.md); iperf3, sockperf, ethtool, iproute2 to run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADDR_A, ADDR_B, PREFIX = "198.18.202.1", "198.18.202.2", 24
OFFLOADS = ["tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off"]
TCP_MEM = "4096 131072 67108864"  # the same per-namespace TCP buffers as bench/wire_bench.py
ALL_BACKENDS = ["plain", "afpacket", "tap", "xdp-drv", "xdp-skb", "tap-mq2"]
DEFAULT_BACKENDS = ALL_BACKENDS[:5]  # tap-mq2 (IFF_MULTI_QUEUE, 2 fds per TAP, one thread) only on request
SOURCES = {"afpacket": ("relay_afpacket.c", []), "tap": ("relay_tap.c", []), "xdp": ("relay_xdp.c", ["-lxdp", "-lbpf"])}


class BenchError(RuntimeError):
    pass


def run(argv: list[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise BenchError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return out


def nsx(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def build(outdir: Path) -> dict[str, Path]:
    bins = {}
    for name, (src, libs) in SOURCES.items():
        exe = outdir / f"relay_{name}"
        run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(HERE / src), *libs], timeout=120)
        bins[name] = exe
    return bins


def cpu_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (all CPUs: total minus idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def softirq_s() -> float:
    """Softirq CPU seconds of the whole machine so far (the /proc/stat column; without IRQ time accounting,
    softirq work run on return from a syscall is charged to that process instead)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return fields[6] / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Topo:
    """Hosts A and B (and the relay's namespace L) for one back end; owns what it creates, by name and PID."""

    def __init__(self, backend: str, bins: dict[str, Path], tap_qlen: int = 10000, realtime: int = 0):
        self.tap_qlen, self.realtime = tap_qlen, realtime
        base = f"rn-bk{os.getpid()}"
        self.ns_a, self.ns_b, self.ns_l = f"{base}-a", f"{base}-b", f"{base}-l"
        self.backend, self.bins = backend, bins
        self.created: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.relay: subprocess.Popen | None = None
        self.ready: dict = {}
        self.stats: dict | None = None
        self.relay_stderr = ""

    def _ns(self, ns: str) -> None:
        run(["ip", "netns", "add", ns])
        self.created.append(ns)
        run(nsx(ns, ["ip", "link", "set", "lo", "up"]))
        for key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
            run(nsx(ns, ["sysctl", "-q", "-w", f"{key}={TCP_MEM}"]))

    def _veth(self, ns1: str, if1: str, ns2: str, if2: str) -> None:
        run(nsx(ns1, ["ip", "link", "add", if1, "type", "veth", "peer", "name", if2, "netns", ns2]))
        for ns, ifname in ((ns1, if1), (ns2, if2)):
            run(nsx(ns, ["ethtool", "-K", ifname, *OFFLOADS]))
            run(nsx(ns, ["ip", "link", "set", ifname, "up"]))

    def _start_relay(self, argv: list[str]) -> None:
        if self.realtime:
            argv = ["chrt", "-f", str(self.realtime), *argv]
        self.relay = subprocess.Popen(nsx(self.ns_l, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(self.relay)
        line = self.relay.stdout.readline()
        obj = json.loads(line) if line.strip() else {}
        if obj.get("type") != "ready":
            self.relay.wait(timeout=5)
            raise BenchError(f"{argv[0]} did not start (exit {self.relay.returncode}): {line} "
                             f"{self.relay.stderr.read()[-800:]}")
        self.ready = obj

    def __enter__(self) -> "Topo":
        try:
            self._ns(self.ns_a)
            self._ns(self.ns_b)
            ifa, ifb = "rnwa", "rnwb"
            if self.backend == "plain":
                self._veth(self.ns_a, ifa, self.ns_b, ifb)
            elif self.backend in ("tap", "tap-mq2"):
                self._ns(self.ns_l)
                ifa, ifb = "rnta", "rntb"
                queues = ["--queues", "2"] if self.backend == "tap-mq2" else []
                self._start_relay([str(self.bins["tap"]), ifa, ifb, *queues])
                for ns, ifname in ((self.ns_a, ifa), (self.ns_b, ifb)):
                    run(nsx(self.ns_l, ["ip", "link", "set", ifname, "netns", ns]))
                    # TAP without a vnet header offers few offloads; turn off whatever it has (ethtool returns
                    # non-zero when some cannot change: not an error here).
                    r = run(nsx(ns, ["ethtool", "-K", ifname, *OFFLOADS]), check=False)
                    self.ready.setdefault("ethtool", []).append(r.stderr.strip()[-200:])
                    # The TAP's queue towards the relay holds txqueuelen frames (default 1000) and drops past that;
                    # the AF_PACKET relay's socket buffer holds about 11000 1.5 KB frames (16 MiB): match it.
                    run(nsx(ns, ["ip", "link", "set", ifname, "txqueuelen", str(self.tap_qlen), "up"]))
            else:
                self._ns(self.ns_l)
                self._veth(self.ns_a, ifa, self.ns_l, "rnla")
                self._veth(self.ns_l, "rnlb", self.ns_b, ifb)
                if self.backend == "afpacket":
                    self._start_relay([str(self.bins["afpacket"]), "rnla", "rnlb"])
                else:
                    mode = self.backend.split("-")[1]
                    self._start_relay([str(self.bins["xdp"]), "rnla", "rnlb", "--mode", mode])
            run(nsx(self.ns_a, ["ip", "addr", "add", f"{ADDR_A}/{PREFIX}", "dev", ifa]))
            run(nsx(self.ns_b, ["ip", "addr", "add", f"{ADDR_B}/{PREFIX}", "dev", ifb]))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stop_relay(self) -> None:
        if self.relay is None or self.relay.poll() is not None:
            return
        self.relay.send_signal(signal.SIGTERM)
        try:
            out, err = self.relay.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.relay.kill()
            out, err = self.relay.communicate()
        self.relay_stderr = err
        for line in out.splitlines():
            obj = json.loads(line)
            if obj.get("type") == "stats":
                self.stats = obj

    def close(self) -> None:
        self.stop_relay()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=20)
        self.created.clear()

    def link_drops(self) -> int:
        """Frames every interface of A, B and L dropped so far (tx + rx; a TAP's full queue towards the relay and
        a veth whose peer's backlog was full show here)."""
        total = 0
        for ns in self.created:
            for link in json.loads(run(nsx(ns, ["ip", "-s", "-j", "link", "show"])).stdout):
                st = link.get("stats64", {})
                total += st.get("tx", {}).get("dropped", 0) + st.get("rx", {}).get("dropped", 0)
        return total

    def popen(self, ns: str, argv: list[str]) -> subprocess.Popen:
        p = subprocess.Popen(nsx(ns, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    @staticmethod
    def stop(p: subprocess.Popen) -> None:
        if p.poll() is None:
            p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


TCP_COUNTERS = {"a": ["TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPDSACKRecv", "TcpExtTCPSpuriousRTOs",
                       "TcpExtTCPSACKReorder", "TcpExtTCPRenoReorder", "TcpExtTCPTSReorder"],
                 "b": ["TcpExtTCPOFOQueue", "TcpExtTCPDSACKOldSent", "TcpInSegs"]}


def tcp_counters(t: Topo) -> dict:
    """The hosts' TCP counters (fresh namespaces: absolute = this run): were retransmissions real losses
    (DSACKs received say they were spurious), did frames arrive out of order?"""
    out = {}
    for side, ns in (("a", t.ns_a), ("b", t.ns_b)):
        k = json.loads(run(nsx(ns, ["nstat", "-az", "--json"])).stdout)["kernel"]
        out.update({f"{side}.{c}": k.get(c) for c in TCP_COUNTERS[side]})
    return out


def measure_tcp(t: Topo, seconds: float, rate_mbps: int = 0) -> dict:
    children0 = children_cpu_s()
    srv = t.popen(t.ns_b, ["iperf3", "-s", "-1", "-B", ADDR_B])
    try:
        time.sleep(0.5)
        pid = t.relay.pid if t.relay else None
        relay0 = proc_cpu_s(pid) if pid else 0.0
        busy0, t0, sn0, si0 = cpu_busy_s(), time.monotonic(), softnet_drops(), softirq_s()
        rate = ["-b", f"{rate_mbps}M"] if rate_mbps else []
        r = run(nsx(t.ns_a, ["iperf3", "-c", ADDR_B, "-t", str(seconds), "-O", "1", "-J", *rate]),
                timeout=seconds + 60, check=False)
        wall = time.monotonic() - t0
        busy, softirq = cpu_busy_s() - busy0, softirq_s() - si0
        relay = (proc_cpu_s(pid) - relay0) if pid else 0.0
        Topo.stop(srv)  # iperf3 -s -1 exits after its one test; reaped here so that its CPU time is counted
        endpoints = children_cpu_s() - children0
        try:
            res = json.loads(r.stdout)
        except json.JSONDecodeError as exc:
            raise BenchError(f"iperf3 printed no JSON: {r.stdout[-300:]} {r.stderr[-300:]}") from exc
        if "error" in res:
            raise BenchError(f"iperf3: {res['error']}")
        end = res["end"]["sum_received"]
        # iperf's bytes exclude the omitted first second; its CPU window includes it: scale the bytes to the
        # wall time measured here so that CPU/GB compares like with like.
        gb = end["bits_per_second"] * wall / 8e9
        return {"bps": end["bits_per_second"], "link_drops": t.link_drops(), "backlog_drops": softnet_drops() - sn0,
                "tcp": tcp_counters(t),
                "retransmits": res["end"]["sum_sent"].get("retransmits"),
                "relay_cpu_s": relay, "endpoints_cpu_s": endpoints, "softirq_s": softirq,
                "path_s_per_gb": (relay + endpoints + softirq) / gb if gb else None,
                "relay_cores": relay / wall, "machine_busy_s": busy, "wall_s": wall,
                "relay_s_per_gb": relay / gb if gb else None, "machine_s_per_gb": busy / gb if gb else None}
    finally:
        Topo.stop(srv)


def measure_udp(t: Topo, seconds: float, size: int) -> dict:
    """Small frames: iperf3 UDP with ``size``-byte payloads as fast as one sender goes (-b 0); the relay's
    packet rate, not its byte rate, is then what is tested (messaging protocols send many small messages)."""
    srv = t.popen(t.ns_b, ["iperf3", "-s", "-1", "-B", ADDR_B])
    try:
        time.sleep(0.5)
        pid = t.relay.pid if t.relay else None
        relay0 = proc_cpu_s(pid) if pid else 0.0
        t0 = time.monotonic()
        r = run(nsx(t.ns_a, ["iperf3", "-c", ADDR_B, "-u", "-l", str(size), "-b", "0", "-t", str(seconds), "-J"]),
                timeout=seconds + 60, check=False)
        wall = time.monotonic() - t0
        relay = (proc_cpu_s(pid) - relay0) if pid else 0.0
        try:
            res = json.loads(r.stdout)
        except json.JSONDecodeError as exc:
            raise BenchError(f"iperf3 -u printed no JSON: {r.stdout[-300:]} {r.stderr[-300:]}") from exc
        if "error" in res:
            raise BenchError(f"iperf3 -u: {res['error']}")
        s = res["end"]["sum"]
        received = s["packets"] - s["lost_packets"]
        return {"sent_pps": s["packets"] / seconds, "received_pps": received / seconds,
                "lost_fraction": s["lost_packets"] / s["packets"] if s["packets"] else None,
                "relay_us_per_frame": 1e6 * relay / received if received and pid else None, "wall_s": wall}
    finally:
        Topo.stop(srv)


def measure_rtt(t: Topo, seconds: float) -> dict:
    srv = t.popen(t.ns_b, ["sockperf", "server", "-i", ADDR_B, "-p", "11111"])
    try:
        time.sleep(0.5)
        r = run(nsx(t.ns_a, ["sockperf", "ping-pong", "-i", ADDR_B, "-p", "11111", "-t", str(int(seconds)),
                             "-m", "64", "--full-rtt"]), timeout=seconds + 60, check=False)
        pct = {m.group(1): float(m.group(2)) for m in re.finditer(r"percentile (\d+\.\d+) =\s+([\d.]+)", r.stdout)}
        if "50.000" not in pct:
            raise BenchError(f"sockperf printed no percentiles: {r.stdout[-400:]} {r.stderr[-300:]}")
        return {"p50_us": pct["50.000"], "p99_us": pct["99.000"]}
    finally:
        Topo.stop(srv)


def softnet_drops() -> int:
    """Frames dropped because a CPU's input backlog was full (net.core.netdev_max_backlog), all CPUs, whole
    machine (other processes' traffic counts too; on loopback and veth namespaces that is rare)."""
    return sum(int(line.split()[1], 16) for line in Path("/proc/net/softnet_stat").read_text().splitlines())


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def med(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(results: dict[str, list[dict]]) -> str:
    keys = ("bps", "p50_us", "p99_us", "relay_s_per_gb", "path_s_per_gb", "relay_cores")
    m = {b: {k: med([r[k] for r in rs]) for k in keys} for b, rs in results.items() if rs}
    for b, v in m.items():
        rs = results[b]
        segs = sum(r["tcp"]["b.TcpInSegs"] or 0 for r in rs)
        v["ofo_per_10k"] = 1e4 * sum(r["tcp"]["b.TcpExtTCPOFOQueue"] or 0 for r in rs) / segs if segs else None
        v["rtx"] = sum(r["tcp"]["a.TcpRetransSegs"] or 0 for r in rs)
        v["spurious"] = sum(r["tcp"]["a.TcpExtTCPDSACKRecv"] or 0 for r in rs)
        fx = [r["fixed"] for r in rs if r.get("fixed")]
        v["fx_relay"] = med([f["relay_s_per_gb"] for f in fx]) if fx else None
        v["fx_path"] = med([f["path_s_per_gb"] for f in fx]) if fx else None
        ud = [r["udp"] for r in rs if r.get("udp")]
        v["udp_kpps"] = med([u["received_pps"] / 1e3 for u in ud]) if ud else None
        v["udp_loss"] = med([u["lost_fraction"] for u in ud]) if ud else None
        v["udp_us"] = med([u["relay_us_per_frame"] for u in ud]) if ud else None
    plain, afp = m.get("plain", {}), m.get("afpacket", {})
    nan = float("nan")
    lines = [f"{'back end':9s} {'TCP Gbit/s':>10s} {'/plain':>6s} {'/afpkt':>6s} {'rounds (Gbit/s)':>16s} "
             f"{'RTT p50':>8s} {'+plain':>7s} {'p99':>8s} {'relay s/GB':>10s} {'cores':>5s} {'path s/GB':>9s} "
             f"{'OFO/10k':>7s} {'rtx(DSACKed)':>12s} {'fixed: relay':>12s} {'path s/GB':>9s} "
             f"{'UDP kpps':>8s} {'loss':>6s} {'us/frame':>8s}"]
    for b, v in m.items():
        rounds = "/".join(f"{r['bps'] / 1e9:.2f}" for r in results[b])
        ratio_p = v["bps"] / plain["bps"] if plain.get("bps") else nan
        ratio_a = v["bps"] / afp["bps"] if afp.get("bps") else nan
        added = v["p50_us"] - plain["p50_us"] if plain.get("p50_us") is not None else nan
        rel = f"{v['relay_s_per_gb']:.3f}" if v["relay_s_per_gb"] and b != "plain" else "-"
        cores = f"{v['relay_cores']:.2f}" if b != "plain" else "-"
        ofo = f"{v['ofo_per_10k']:.1f}" if v["ofo_per_10k"] is not None else "-"
        fx_relay = f"{v['fx_relay']:.3f}" if v["fx_relay"] and b != "plain" else "-"
        fx_path = f"{v['fx_path']:.3f}" if v["fx_path"] else "-"
        udp_kpps = f"{v['udp_kpps']:.0f}" if v["udp_kpps"] is not None else "-"
        udp_loss = f"{v['udp_loss']:.3f}" if v["udp_loss"] is not None else "-"
        udp_us = f"{v['udp_us']:.2f}" if v["udp_us"] and b != "plain" else "-"
        lines.append(f"{b:9s} {v['bps'] / 1e9:10.2f} {ratio_p:6.2f} {ratio_a:6.2f} {rounds:>16s} "
                     f"{v['p50_us']:7.1f}u {added:+6.1f}u {v['p99_us']:7.1f}u {rel:>10s} {cores:>5s} "
                     f"{v['path_s_per_gb']:9.3f} {ofo:>7s} {v['rtx']:>6d}({v['spurious']}) "
                     f"{fx_relay:>12s} {fx_path:>9s} "
                     f"{udp_kpps:>8s} {udp_loss:>6s} {udp_us:>8s}")
    lines.append("medians over rounds; RTT = sockperf ping-pong 64 B full round trip; s/GB = CPU seconds per GB "
                 "received by iperf3 at full speed and, under 'fixed', with TCP paced by iperf3 -b (relay process; "
                 "path = relay + both iperf3 processes + the machine's "
                 "softirq time, which other load on the machine inflates a little); OFO/10k = "
                 "segments B queued out of order per 10k received; rtx(DSACKed) = A's retransmissions, summed over "
                 "rounds (those the receiver reported as duplicates were spurious: reordering, not loss); "
                 "UDP = iperf3 -u "
                 "small payloads at full speed: packets received per second, lost fraction, relay CPU us per frame")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--backends", default=",".join(DEFAULT_BACKENDS), help=f"some of {','.join(ALL_BACKENDS)}")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fixed-mbps", type=int, default=1000,
                    help="also measure CPU per GB with TCP paced at this rate (iperf3 -b; 0 = skip)")
    ap.add_argument("--udp-bytes", type=int, default=64,
                    help="also measure the packet rate with iperf3 UDP of this payload size at full speed (0 = skip)")
    ap.add_argument("--realtime", type=int, default=10,
                    help="run each relay under SCHED_FIFO at this priority, as roughnet-wire does by default "
                         "(0 = ordinary scheduling)")
    ap.add_argument("--tap-txqueuelen", type=int, default=10000,
                    help="queue of each TAP towards the relay, in frames (kernel default 1000)")
    ap.add_argument("--keep-build", type=Path, help="build the relays into this folder (default: a temporary one)")
    args = ap.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in ALL_BACKENDS]
    if unknown:
        print(f"unknown back end(s) {unknown}: expected some of {ALL_BACKENDS}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("needs root (network namespaces, XDP): run as root", file=sys.stderr)
        return 2
    missing = [tool for tool in ("gcc", "iperf3", "sockperf", "ethtool", "ip") if not shutil.which(tool)]
    if missing:
        print(f"missing tools {missing}: see bench/backends/README.md", file=sys.stderr)
        return 2

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    tmp = tempfile.TemporaryDirectory(prefix="rn-bk-")
    outdir = args.keep_build or Path(tmp.name)
    outdir.mkdir(parents=True, exist_ok=True)
    bins = build(outdir)
    meta = {"load_start": loadavg(), "realtime": args.realtime, "tap_txqueuelen": args.tap_txqueuelen,
            "kernel": os.uname().release, "rounds": args.rounds, "seconds": args.seconds,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(f"load average at start: {meta['load_start']}; kernel {meta['kernel']}; relays under "
          f"{'SCHED_FIFO ' + str(args.realtime) if args.realtime else 'ordinary scheduling'}", flush=True)
    results: dict[str, list[dict]] = {b: [] for b in backends}
    ready: dict[str, dict] = {}
    failures: dict[str, str] = {}
    try:
        for rnd in range(args.rounds):
            order = backends[rnd % len(backends):] + backends[:rnd % len(backends)]  # rotate the order
            for b in order:
                if b in failures:
                    continue
                try:
                    with Topo(b, bins, args.tap_txqueuelen, args.realtime) as t:
                        tcp = measure_tcp(t, args.seconds)
                        rtt = measure_rtt(t, args.seconds)
                        fixed = measure_tcp(t, args.seconds, args.fixed_mbps) if args.fixed_mbps else None
                        udp = measure_udp(t, args.seconds, args.udp_bytes) if args.udp_bytes else None
                        t.stop_relay()
                        rec = {**tcp, **rtt, "fixed": fixed, "udp": udp, "round": rnd, "load": loadavg(),
                               "relay_stats": t.stats}
                        ready[b] = t.ready
                except BenchError as exc:
                    failures[b] = str(exc)
                    print(f"[{rnd}] {b}: FAILED {exc}", flush=True)
                    continue
                results[b].append(rec)
                drops = sum(t.stats[d]["drops"] + t.stats[d]["kernel_drops"] for d in ("a_to_b", "b_to_a")) \
                    if t.stats else 0
                print(f"[{rnd}] {b:9s} TCP {rec['bps'] / 1e9:6.2f} Gbit/s  relay {rec['relay_cores']:.2f} cores "
                      f"{rec['relay_s_per_gb'] or 0:.3f} s/GB  path {rec['path_s_per_gb']:.3f} s/GB  "
                      f"RTT p50 {rec['p50_us']:.1f} p99 {rec['p99_us']:.1f} us  relay+socket drops {drops} link drops "
                      f"{rec['link_drops']} backlog drops {rec['backlog_drops']} TCP retransmits {rec['retransmits']}  "
                      + (f"at {args.fixed_mbps} Mbit/s: {fixed['bps'] / 1e6:.0f} Mbit/s relay "
                         f"{fixed['relay_s_per_gb'] or 0:.3f} path {fixed['path_s_per_gb']:.3f} s/GB  "
                         if fixed else "")
                      + (f"UDP {args.udp_bytes} B: sent {udp['sent_pps'] / 1e3:.0f}k/s received "
                         f"{udp['received_pps'] / 1e3:.0f}k/s relay {udp['relay_us_per_frame'] or 0:.2f} us/frame  "
                         if udp else "")
                      + f"load {rec['load']}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: namespaces and processes removed", file=sys.stderr)
        return 130
    finally:
        tmp.cleanup()
    meta["load_end"] = loadavg()
    print()
    for b, r in ready.items():
        if b.startswith("xdp"):
            print(f"{b}: XDP mode {r.get('xdp_mode')}, zero-copy {r.get('zerocopy')} (false = copy mode)")
    print(table(results))
    print(f"load average at start {meta['load_start']}, at end {meta['load_end']}")
    for b, msg in failures.items():
        print(f"{b}: FAILED: {msg}")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "ready": ready, "results": results, "failures": failures},
                                        indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
