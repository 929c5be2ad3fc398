"""Reading the stream agents' trace files (docs/timelines.md, "Agent traces") into numpy arrays.

A sender writes one 24-byte record per counted message (seq, intended_ns, actual_ns), a receiver
one 32-byte record per arrival (seq, intended_ns, actual_ns, recv_ns), all u64 little-endian
CLOCK_MONOTONIC nanoseconds.  Reading never fails: an agent killed by SIGKILL leaves a file cut
anywhere (its last buffer lost, possibly a partial record), a flow whose agent never started leaves
no file at all; both read as what is complete (a missing or unreadable file as empty arrays, with
a warning in the log).  Arrays are int64 (nanosecond times of this clock stay far below 2**63),
so differences are plain signed arithmetic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["RX_RECORD", "TX_RECORD", "Rx", "Tx", "read_rx", "read_tx"]

log = logging.getLogger(__name__)

#: Bytes of one sender record: seq, intended_ns, actual_ns.
TX_RECORD = 24
#: Bytes of one receiver record: seq, intended_ns, actual_ns, recv_ns.
RX_RECORD = 32


def _i64(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(-1))


@dataclass(frozen=True)
class Tx:
    """A sender's trace: one entry per counted message, in the order they were sent."""

    seq: np.ndarray
    intended_ns: np.ndarray
    actual_ns: np.ndarray

    def __len__(self) -> int:
        return int(self.seq.size)

    @classmethod
    def empty(cls) -> Tx:
        return cls.from_arrays([], [])

    @classmethod
    def from_arrays(cls, seq, actual_ns, intended_ns=None) -> Tx:
        """A trace from sequences (tests, synthetic flows); ``intended_ns`` defaults to ``actual_ns``."""
        seq, actual = _i64(seq), _i64(actual_ns)
        intended = actual.copy() if intended_ns is None else _i64(intended_ns)
        if not seq.size == actual.size == intended.size:
            raise ValueError(f"Tx: {seq.size} seqs, {actual.size} actual and {intended.size} intended times")
        return cls(seq, intended, actual)

    def to_bytes(self) -> bytes:
        """The file the agent would have written (for tests)."""
        return np.stack([self.seq, self.intended_ns, self.actual_ns], axis=1).astype("<u8").tobytes()


@dataclass(frozen=True)
class Rx:
    """A receiver's trace: one entry per arrival (duplicates and reordered ones included), in arrival order."""

    seq: np.ndarray
    intended_ns: np.ndarray
    actual_ns: np.ndarray
    recv_ns: np.ndarray

    def __len__(self) -> int:
        return int(self.seq.size)

    @classmethod
    def empty(cls) -> Rx:
        return cls.from_arrays([], [], [])

    @classmethod
    def from_arrays(cls, seq, actual_ns, recv_ns, intended_ns=None) -> Rx:
        """A trace from sequences (tests, synthetic flows); ``intended_ns`` defaults to ``actual_ns``."""
        seq, actual, recv = _i64(seq), _i64(actual_ns), _i64(recv_ns)
        intended = actual.copy() if intended_ns is None else _i64(intended_ns)
        if not seq.size == actual.size == recv.size == intended.size:
            raise ValueError(f"Rx: {seq.size} seqs, {actual.size} actual, {recv.size} recv "
                             f"and {intended.size} intended times")  # fmt: skip
        return cls(seq, intended, actual, recv)

    def to_bytes(self) -> bytes:
        """The file the agent would have written (for tests)."""
        cols = [self.seq, self.intended_ns, self.actual_ns, self.recv_ns]
        return np.stack(cols, axis=1).astype("<u8").tobytes()


def _read_records(path: Path | str, size: int, fields: int) -> np.ndarray:
    """The complete records of a trace file as an (n, fields) int64 array; (0, fields) when unreadable."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        log.debug("trace %s: no file", path)
        return np.zeros((0, fields), dtype=np.int64)
    except OSError as e:
        log.warning("trace %s: cannot read (%s); taken as empty", path, e)
        return np.zeros((0, fields), dtype=np.int64)
    whole = len(data) // size * size
    if whole != len(data):
        log.warning("trace %s: %d trailing bytes of a partial record ignored", path, len(data) - whole)
    arr = np.frombuffer(data, dtype="<u8", count=whole // 8).reshape(-1, fields)
    return arr.astype(np.int64)


def read_tx(path: Path | str) -> Tx:
    """A sender's trace file (``trace-<workload>-<sender>.tx``): complete records only, never an exception."""
    a = _read_records(path, TX_RECORD, 3)
    return Tx(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy())


def read_rx(path: Path | str) -> Rx:
    """A receiver's trace file (``trace-<workload>-<sender>-<receiver>.rx``): complete records only, never an exception."""
    a = _read_records(path, RX_RECORD, 4)
    return Rx(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), a[:, 3].copy())
