"""tcpdump processes: one per captured interface, started in its namespace, stopped with SIGINT.

Owns the tcpdump command line, waiting for its "listening on" line, stopping
it so that it flushes its file, and reading its closing statistics (packets
captured, dropped by the kernel). Processes are started through
``Topology.popen_ns`` so the ledger records them and teardown ends them if a
run dies before ``stop``. What to capture is decided by ``capture``; reading
the files is ``capture.pcap``'s job.
"""

from __future__ import annotations

import collections
import logging
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RoughnetError

log = logging.getLogger(__name__)

#: Bytes kept of each packet: Ethernet + IPv4 + TCP headers with options fit (14 + 60 + 60 = 134 is the
#: theoretical worst case; options that long do not occur on these links), payloads are not kept.
DEFAULT_SNAPLEN = 128
#: Kernel capture buffer per tcpdump, KiB (-B): room for bursts of a fast link without drops.
BUFFER_KIB = 8192
#: How long tcpdump may take to open its interface and say "listening on".
READY_TIMEOUT_S = 10.0
#: How long tcpdump may take to flush and exit after SIGINT before it is killed.
STOP_TIMEOUT_S = 5.0

_STATS = {
    "captured": re.compile(r"(\d+) packets? captured"),
    "received_by_filter": re.compile(r"(\d+) packets? received by filter"),
    "dropped_by_kernel": re.compile(r"(\d+) packets? dropped by kernel"),
}


class CaptureError(RoughnetError):
    """tcpdump could not be started, did not become ready, or is missing."""


def command(ifname: str, path: Path, snaplen: int = DEFAULT_SNAPLEN) -> list[str]:
    """tcpdump's argument list: no name resolution, packets written as they come.

    ``--immediate-mode`` matters: without it libpcap's TPACKET_V3 ring hands
    packets over in blocks, and packets still in the ring at SIGINT never
    reach the file. ``-Z root`` keeps tcpdump from switching to its own user
    before it opens the output file in a root-owned artifacts folder.
    """
    return ["tcpdump", "-i", ifname, "-w", str(path), "-s", str(snaplen), "-n", "-U", "--immediate-mode",
            "-B", str(BUFFER_KIB), "-Z", "root"]


@dataclass
class Tcpdump:
    """One running (or finished) tcpdump."""

    ns: str
    ifname: str
    path: Path
    proc: subprocess.Popen | None = None
    stderr_lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=50))
    listening: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None
    stats: dict[str, int] = field(default_factory=dict)
    returncode: int | None = None

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.rstrip()
            self.stderr_lines.append(line)
            if "listening on" in line:
                self.listening.set()
            for key, rx in _STATS.items():
                m = rx.search(line)
                if m:
                    self.stats[key] = int(m.group(1))
        self.proc.stderr.close()
        self.listening.set()  # unblock a waiter: the process is gone

    def start(self, topology, snaplen: int = DEFAULT_SNAPLEN, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start in ``ns`` (ledgered by the topology) and wait for "listening on"."""
        try:
            self.proc = topology.popen_ns(self.ns, command(self.ifname, self.path, snaplen),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True)
        except FileNotFoundError as e:
            raise CaptureError("capture = true needs tcpdump; it is not installed (Debian: apt-get install tcpdump)") \
                from e
        self.reader = threading.Thread(target=self._read_stderr, name=f"tcpdump-{self.ifname}", daemon=True)
        self.reader.start()
        deadline = time.monotonic() + timeout_s
        while not self.listening.wait(0.05):
            if time.monotonic() > deadline:
                raise CaptureError(f"tcpdump on {self.ns}/{self.ifname} did not say 'listening on' within "
                                   f"{timeout_s:.0f} s; stderr: {self.tail()}")
        if self.proc.poll() is not None and not any("listening on" in x for x in self.stderr_lines):
            self.proc.wait()
            raise CaptureError(f"tcpdump on {self.ns}/{self.ifname} exited {self.proc.returncode} before "
                               f"capturing; expected it to run until stopped; stderr: {self.tail()}")
        log.debug("tcpdump listening on %s/%s -> %s", self.ns, self.ifname, self.path)

    def tail(self) -> str:
        return " | ".join(self.stderr_lines) or "(nothing)"

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGINT (tcpdump flushes, prints its statistics and exits), SIGKILL if it hangs. Idempotent."""
        proc = self.proc
        if proc is None or self.returncode is not None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("tcpdump on %s/%s ignored SIGINT for %.0f s; killing it", self.ns, self.ifname, timeout_s)
                proc.kill()
                proc.wait(timeout=timeout_s)
        if self.reader is not None:
            self.reader.join(timeout=timeout_s)
        self.returncode = proc.returncode
