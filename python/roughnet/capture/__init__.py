"""Packet captures of a run: which interfaces, tcpdump around the agents, metrics from the pcaps.

Public API (used by ``run.runner``; the data flows forward only):

- ``start(run, topology, artifacts) -> Captures``: for every link with
  ``capture = true``, one tcpdump inside each host namespace of the link on
  that host's interface, writing ``artifacts/capture-<link>-<host>.pcap``
  (headers only, snap length 128). Returns once every tcpdump said
  "listening on". A run without captured links gets an empty ``Captures``.
- ``stop(captures)``: SIGINT every tcpdump (they flush and exit); idempotent,
  safe in ``finally``. Teardown would end them anyway (they are ledgered).
- ``metrics(captures, sender, messages) -> dict``: ``pcap_*`` metrics of the
  run from the files (see ``METRIC_HELP``) and writes
  ``artifacts/capture-analysis.json`` with every flow direction of every file.

Modules: ``tcpdump`` (processes), ``pcap`` (file format, header decoding),
``analysis`` (retransmissions, duplicate ACKs, zero windows, UDP and fragments).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PreflightError
from ..runspec import Run, Sweep
from .analysis import CaptureAnalysis, Totals, analyse_file
from .pcap import PcapError
from .tcpdump import DEFAULT_SNAPLEN, CaptureError, Tcpdump

log = logging.getLogger(__name__)

__all__ = ["METRIC_HELP", "CaptureError", "Captures", "messages_sent", "metrics", "preflight", "private_file", "start", "stop"]

ANALYSIS_FILE = "capture-analysis.json"

#: Metrics ``metrics`` returns (they land in the record's metrics; the results store keeps them in metrics_extra).
METRIC_HELP: dict[str, str] = {
    "pcap_packets": "IPv4 packets sent by the captured hosts on captured links",
    "pcap_tcp_segments": "TCP segments carrying data (retransmissions included)",
    "pcap_tcp_retrans": "TCP data segments whose sequence range had been sent before",
    "pcap_tcp_retrans_ratio": "pcap_tcp_retrans / pcap_tcp_segments",
    "pcap_dup_acks": "duplicate ACKs (pure ACK repeating the previous ACK and window with data outstanding)",
    "pcap_zero_window": "TCP segments advertising a zero receive window",
    "pcap_udp_datagrams": "UDP datagrams",
    "pcap_ip_fragments": "IP packets that are fragments",
    "pcap_sender_data_packets": "packets with application data sent by the workload's sender host",
    "pcap_segments_per_message": "pcap_sender_data_packets / messages the sender sent (warm-up included)",
    "pcap_capture_drops": "packets tcpdump reported as dropped by the kernel (the analysis missed them)",
}


@dataclass
class Capture:
    """One captured interface: which link and host, its tcpdump, and what identifies its own packets."""

    link: int
    host: str
    address: str | None
    mac: bytes | None
    dump: Tcpdump

    @property
    def path(self) -> Path:
        return self.dump.path


@dataclass
class Captures:
    items: list[Capture] = field(default_factory=list)
    artifacts: Path | None = None
    stopped: bool = False

    def __bool__(self) -> bool:
        return bool(self.items)


def _mac(topology, ns: str, ifname: str) -> bytes | None:
    proc = topology.run_ns(ns, ["ip", "-j", "link", "show", "dev", ifname], capture_output=True, text=True)
    try:
        return bytes.fromhex(json.loads(proc.stdout)[0]["address"].replace(":", ""))
    except (ValueError, LookupError, TypeError):
        log.warning("could not read the MAC of %s/%s; outbound packets told apart by address", ns, ifname)
        return None


def planned(run: Run, topology) -> list[tuple[int, str, str, str, str | None]]:
    """(link, host, namespace, interface, address) of every interface to capture (no I/O)."""
    wanted = {lk.index for lk in run.links if lk.capture}
    out = []
    for iface in topology.interfaces():
        if iface.link in wanted and iface.address is not None:
            out.append((iface.link, iface.host, iface.ns, iface.ifname, iface.address))
    return out


def preflight(sweep: Sweep) -> None:
    """Raise PreflightError when a run captures a link and tcpdump is not installed."""
    if any(lk.capture for r in sweep.runs for lk in r.links) and shutil.which("tcpdump") is None:
        raise PreflightError("a link has capture = true but tcpdump is not installed; expected it on PATH "
                             "(Debian: apt-get install tcpdump)")


def private_file(path: Path) -> Path:
    """An empty ``path`` of mode 0600 for tcpdump to write into (it truncates it and keeps its mode): a
    capture holds the run's traffic (payloads, a broker's credentials), so only root reads it (issue 26).
    A file already there (a resumed run retries into the same folder) is replaced; a symlink is removed,
    never followed (O_NOFOLLOW | O_EXCL)."""
    path.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise CaptureError(f"cannot create the capture file {path} ({e.strerror or e}); expected a writable "
                           "artifacts folder") from None
    os.fchmod(fd, 0o600)  # whatever the umask
    os.close(fd)
    return path


def start(run: Run, topology, artifacts: Path, snaplen: int = DEFAULT_SNAPLEN) -> Captures:
    """Start tcpdump on every host interface of every link with ``capture = true``; wait until each listens."""
    plan = planned(run, topology)
    caps = Captures(artifacts=Path(artifacts))
    if not plan:
        return caps
    if shutil.which("tcpdump") is None:
        raise CaptureError("capture = true needs tcpdump; it is not on PATH (Debian: apt-get install tcpdump)")
    try:
        for link, host, ns, ifname, address in plan:
            path = Path(artifacts) / f"capture-{link}-{host}.pcap"
            private_file(path)
            dump = Tcpdump(ns, ifname, path)
            caps.items.append(Capture(link, host, address, _mac(topology, ns, ifname), dump))
            dump.start(topology, snaplen)
    except BaseException:
        stop(caps)
        raise
    log.info("capturing %d interface(s) of run %s", len(caps.items), run.run_id)
    return caps


def stop(captures: Captures) -> None:
    """Stop every tcpdump (SIGINT, then SIGKILL if one hangs). Idempotent."""
    for c in captures.items:
        try:
            c.dump.stop()
        except Exception as e:  # noqa: BLE001 - stop the others; teardown ends what is left
            log.warning("stopping tcpdump on %s/%s: %s", c.dump.ns, c.dump.ifname, e)
    captures.stopped = True


def messages_sent(sender_result: dict[str, Any] | None) -> int | None:
    """Messages a sender (or pinger) result says it sent, warm-up included; None if it says nothing."""
    if not sender_result or sender_result.get("sent") is None:
        return None
    return int(sender_result.get("sent") or 0) + int(sender_result.get("warmup_sent") or 0)


def _ratio(num: int, den: int | None) -> float | None:
    return round(num / den, 6) if den else None


def metrics(captures: Captures, sender: str | None = None, messages: int | None = None) -> dict[str, Any]:
    """The run's ``pcap_*`` metrics from the stopped captures (empty without captures).

    ``sender`` is the workload's sending host and ``messages`` the messages it
    sent (warm-up included); together they give segments per message.
    """
    if not captures:
        return {}
    if not captures.stopped:
        stop(captures)
    total = Totals()
    sender_total = Totals()
    per_file: list[dict[str, Any]] = []
    drops = 0
    for c in captures.items:
        drops += int(c.dump.stats.get("dropped_by_kernel", 0))
        if not c.path.exists():
            per_file.append({"link": c.link, "host": c.host, "path": c.path.name, "error": "no file written",
                             "tcpdump": c.dump.tail()})
            continue
        try:
            a: CaptureAnalysis = analyse_file(c.path, c.mac, [c.address] if c.address else [])
        except PcapError as e:
            log.warning("%s", e)
            per_file.append({"link": c.link, "host": c.host, "path": c.path.name, "error": str(e)})
            continue
        total.add(a)
        if c.host == sender:
            sender_total.add(a)
        entry = {"link": c.link, "host": c.host, "address": c.address, "tcpdump": dict(c.dump.stats)}
        entry.update(a.to_dict())
        entry["path"] = c.path.name
        per_file.append(entry)
    out: dict[str, Any] = {
        "pcap_packets": total.packets,
        "pcap_tcp_segments": total.tcp_data_segments,
        "pcap_tcp_retrans": total.tcp_retrans,
        "pcap_tcp_retrans_ratio": _ratio(total.tcp_retrans, total.tcp_data_segments),
        "pcap_dup_acks": total.dup_acks,
        "pcap_zero_window": total.zero_window,
        "pcap_udp_datagrams": total.udp_datagrams,
        "pcap_ip_fragments": total.ip_fragments,
        "pcap_capture_drops": drops,
    }
    if sender is not None and any(c.host == sender for c in captures.items):
        out["pcap_sender_data_packets"] = sender_total.data_packets
        out["pcap_segments_per_message"] = _ratio(sender_total.data_packets, messages)
    if captures.artifacts is not None:
        try:
            (captures.artifacts / ANALYSIS_FILE).write_text(json.dumps({"files": per_file, "metrics": out}, indent=1))
        except OSError as e:
            log.warning("writing %s failed: %s", ANALYSIS_FILE, e)
    return out
