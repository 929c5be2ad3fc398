"""Counters sampled around a run: per-namespace TCP and UDP counters and the machine's CPU.

TCP and UDP counters come from ``/proc/net/snmp`` and ``/proc/net/netstat``
read inside each host's namespace (they are per network namespace).  Machine CPU
comes from ``/proc/stat`` (machine-wide, sampled in a thread so that a short
saturation is seen, not only the run's average).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

#: TCP counters kept (names as in /proc/net/snmp "Tcp:" and /proc/net/netstat "TcpExt:").
TCP_KEYS = ("RetransSegs", "OutSegs", "InSegs", "InErrs", "OutRsts")
TCPEXT_KEYS = ("TCPLostRetransmit", "TCPFastRetrans", "TCPSlowStartRetrans", "TCPTimeouts", "TCPSACKReorder")
#: UDP counters kept ("Udp:" in /proc/net/snmp), stored as ``Udp<name>``.  ``InErrors`` includes
#: ``RcvbufErrors`` (datagrams a full socket receive buffer dropped: the host's loss, not the link's).
UDP_KEYS = ("InDatagrams", "NoPorts", "InErrors", "OutDatagrams", "RcvbufErrors", "SndbufErrors")


def parse_proc_table(text: str) -> dict[str, dict[str, int]]:
    """Parse /proc/net/snmp or /proc/net/netstat: pairs of header and value lines per protocol."""
    out: dict[str, dict[str, int]] = {}
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for head, vals in zip(lines[0::2], lines[1::2]):
        hp, _, hnames = head.partition(":")
        vp, _, vnums = vals.partition(":")
        if hp != vp:
            continue
        row: dict[str, int] = {}
        for k, v in zip(hnames.split(), vnums.split()):
            try:
                row[k] = int(v)
            except ValueError:
                continue
        out[hp] = row
    return out


def tcp_counters(topo, host: str) -> dict[str, int]:
    """The kept TCP counters of one host's namespace, and its UDP ones (``Udp<name>``).

    An environment that counts by itself (the ns3 backend's simulated nodes) answers with its
    ``tcp_counters(host)``, under the same names."""
    own = getattr(topo, "tcp_counters", None)
    if own is not None:
        return own(host)
    counters: dict[str, int] = {}
    reader = getattr(topo, "proc_net_counters", None)  # the namespace backend reads them without a process
    if reader is not None:
        text = reader(host)
    else:
        text = topo.run(host, ["cat", "/proc/net/snmp", "/proc/net/netstat"], capture_output=True, text=True).stdout
    tables = parse_proc_table(text)
    for k in TCP_KEYS:
        counters[k] = tables.get("Tcp", {}).get(k, 0)
    for k in TCPEXT_KEYS:
        counters[k] = tables.get("TcpExt", {}).get(k, 0)
    for k in UDP_KEYS:
        counters["Udp" + k] = tables.get("Udp", {}).get(k, 0)
    return counters


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


def read_cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from the first line of /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


@dataclass
class CpuSampler:
    """Samples machine CPU utilisation every ``period_s`` in a background thread."""

    period_s: float = 0.5
    samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _first: tuple[int, int] | None = None
    _last: tuple[int, int] | None = None

    def start(self) -> None:
        self._first = read_cpu_times()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        prev = self._first
        while not self._stop.wait(self.period_s):
            cur = read_cpu_times()
            if prev is not None and cur[1] > prev[1]:
                self.samples.append((cur[0] - prev[0]) / (cur[1] - prev[1]))
            prev = cur

    def stop(self) -> dict[str, float | None]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._last = read_cpu_times()
        mean = None
        if self._first and self._last[1] > self._first[1]:
            mean = (self._last[0] - self._first[0]) / (self._last[1] - self._first[1])
        return {
            "mean": mean,
            "max": max(self.samples) if self.samples else mean,
            "saturated_fraction": (
                sum(1 for s in self.samples if s >= 0.95) / len(self.samples) if self.samples else 0.0
            ),
        }


def wall_time() -> float:
    return time.time()
