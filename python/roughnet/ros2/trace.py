"""Per-message trace files of the ROS 2 endpoint, in roughnet-agent's format (docs/agent-protocol.md, "Traces").

No header, fixed-size records of little-endian u64: a sender writes (seq, intended_ns, actual_ns) per
counted message once published, a receiver (seq, intended_ns, actual_ns, recv_ns) per arrival of a counted
data message (duplicates and reordered arrivals included).  Records go through a 64 KiB buffer flushed at
least once a second and at the end.  A write error does not end the run: tracing stops and the result has
``trace_error`` beside ``trace_records``.
"""

from __future__ import annotations

import struct
import sys
import time

BUFFER_BYTES = 64 * 1024
FLUSH_EVERY_NS = 1_000_000_000
TX = struct.Struct("<QQQ")
RX = struct.Struct("<QQQQ")


class Trace:
    """One trace file, created (or truncated) when made: OSError when it cannot be."""

    def __init__(self, path: str, record: struct.Struct) -> None:
        self.path, self.record = path, record
        self.f = open(path, "wb")  # noqa: SIM115 (kept open for the run, closed by close())
        self.buf = bytearray()
        self.records = 0
        self.error: str | None = None
        self.flushed_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def add(self, *fields: int) -> None:
        if self.error is not None:
            return
        self.buf += self.record.pack(*fields)
        self.records += 1
        if len(self.buf) >= BUFFER_BYTES:
            self.flush()

    def tick(self, now_ns: int) -> None:
        """Flush when the last flush is a second old."""
        if self.buf and now_ns - self.flushed_ns >= FLUSH_EVERY_NS:
            self.flush(now_ns)

    def flush(self, now_ns: int | None = None) -> None:
        self.flushed_ns = now_ns if now_ns is not None else time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if self.error is not None or not self.buf:
            return
        try:
            self.f.write(self.buf)
            self.f.flush()
        except OSError as e:
            self.error = f"writing {self.path}: {e}"
            self.records -= len(self.buf) // self.record.size
            sys.stderr.write(f"roughnet.ros2.endpoint: trace stopped: {self.error}\n")
        self.buf.clear()

    def close(self) -> dict:
        """Flush and close; the result fields (``trace_records``, and ``trace_error`` after a write error)."""
        self.flush()
        try:
            self.f.close()
        except OSError as e:
            self.error = self.error or f"closing {self.path}: {e}"
        return {"trace_records": self.records, **({"trace_error": self.error} if self.error else {})}
