//! Per-message trace files of the stream pattern (`trace_path`, docs/agent-protocol.md, "Traces").
//!
//! A sender writes one 24-byte record per counted message (seq, intended_ns, actual_ns), a
//! receiver one 32-byte record per arrival of a counted data message (the same three and
//! recv_ns), all u64 little-endian, no header.  Records go through a `BufWriter` (no
//! allocation per record) that is flushed at least every `FLUSH_EVERY_NS` and at the end,
//! so an agent killed by SIGKILL loses at most about its last second.
//!
//! The file itself is created when the configuration is checked (`Config::parse`), so one
//! that cannot be created is a `config` error before anything starts; this module writes to
//! it.  A write error does not end the run: tracing stops, a warning is logged, and the
//! result line says so (`trace_error`).

use std::fs::File;
use std::io::{BufWriter, Write};

/// Bytes of a sender record: seq, intended_ns, actual_ns.
pub const TX_RECORD_LEN: usize = 24;
/// Bytes of a receiver record: seq, intended_ns, actual_ns, recv_ns.
pub const RX_RECORD_LEN: usize = 32;
/// Longest time a written record may stay in the buffer (the report interval's default).
pub const FLUSH_EVERY_NS: u64 = 1_000_000_000;
/// Buffer size: 64 KiB holds 2730 sender or 2048 receiver records between flushes.
const BUFFER_BYTES: usize = 64 * 1024;

/// The sender record of one message.
#[inline]
pub fn tx_record(seq: u64, intended_ns: u64, actual_ns: u64) -> [u8; TX_RECORD_LEN] {
    let mut r = [0u8; TX_RECORD_LEN];
    r[0..8].copy_from_slice(&seq.to_le_bytes());
    r[8..16].copy_from_slice(&intended_ns.to_le_bytes());
    r[16..24].copy_from_slice(&actual_ns.to_le_bytes());
    r
}

/// The receiver record of one arrival.
#[inline]
pub fn rx_record(seq: u64, intended_ns: u64, actual_ns: u64, recv_ns: u64) -> [u8; RX_RECORD_LEN] {
    let mut r = [0u8; RX_RECORD_LEN];
    r[0..24].copy_from_slice(&tx_record(seq, intended_ns, actual_ns));
    r[24..32].copy_from_slice(&recv_ns.to_le_bytes());
    r
}

/// A trace being written: records in, flushed on time.
pub struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    /// Records accepted (handed to the buffer) so far.
    records: u64,
    /// Records accepted since the last flush.
    pending: u64,
    next_flush_ns: u64,
    error: Option<String>,
}

impl<'a> TraceWriter<&'a File> {
    /// A writer on the file the configuration created (`Config::trace_file`), or None.
    pub fn from_file(file: Option<&'a File>, now_ns: u64) -> Option<Self> {
        file.map(|f| TraceWriter::new(f, now_ns))
    }
}

impl<W: Write> TraceWriter<W> {
    pub fn new(out: W, now_ns: u64) -> Self {
        TraceWriter {
            out: BufWriter::with_capacity(BUFFER_BYTES, out),
            records: 0,
            pending: 0,
            next_flush_ns: now_ns.saturating_add(FLUSH_EVERY_NS),
            error: None,
        }
    }

    /// Append one record (a `tx_record` or an `rx_record`).
    #[inline]
    pub fn write(&mut self, record: &[u8]) {
        if self.error.is_some() {
            return;
        }
        match self.out.write_all(record) {
            Ok(()) => {
                self.records += 1;
                self.pending += 1;
            }
            Err(e) => self.fail(e),
        }
    }

    /// Flush if the last flush is `FLUSH_EVERY_NS` old at `now_ns`.
    #[inline]
    pub fn tick(&mut self, now_ns: u64) {
        if now_ns >= self.next_flush_ns {
            self.flush(now_ns);
        }
    }

    /// Before a sleep until `until_ns`: flush now if a flush falls due during it, so
    /// records do not wait in the buffer through a long gap between messages.
    #[inline]
    pub fn before_sleep(&mut self, now_ns: u64, until_ns: u64) {
        if self.pending > 0 && until_ns >= self.next_flush_ns {
            self.flush(now_ns);
        } else {
            self.tick(now_ns);
        }
    }

    /// When the next flush is due (loops may wake up for it).
    #[inline]
    pub fn next_flush_ns(&self) -> u64 {
        self.next_flush_ns
    }

    /// Write out what the buffer holds (nothing to do when no record came since the last flush).
    pub fn flush(&mut self, now_ns: u64) {
        self.next_flush_ns = now_ns.saturating_add(FLUSH_EVERY_NS);
        if self.pending > 0 {
            self.flush_out();
        }
    }

    fn flush_out(&mut self) {
        if self.error.is_some() {
            return;
        }
        match self.out.flush() {
            Ok(()) => self.pending = 0,
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        tracing::warn!("writing the trace file: {e}; tracing stops");
        self.error = Some(e.to_string());
    }

    /// The final flush; then the result fields: `trace_records` (records written), and
    /// `trace_error` when writing failed (the records after the failure are missing).
    pub fn finish(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.flush_out();
        let mut m = serde_json::Map::new();
        m.insert("trace_records".into(), self.records.into());
        if let Some(e) = &self.error {
            m.insert("trace_error".into(), e.clone().into());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    /// A sink that records what reached it (i.e. what was flushed) and can be made to fail.
    #[derive(Clone, Default)]
    struct Sink {
        data: Arc<Mutex<Vec<u8>>>,
        broken: Arc<Mutex<bool>>,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if *self.broken.lock().unwrap() {
                return Err(io::Error::other("disk full"));
            }
            self.data.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn records_are_little_endian_u64s() {
        let r = rx_record(7, 0x0102_0304_0506_0708, 9, 10);
        assert_eq!(r.len(), RX_RECORD_LEN);
        assert_eq!(u64::from_le_bytes(r[0..8].try_into().unwrap()), 7);
        assert_eq!(r[8], 0x08);
        assert_eq!(u64::from_le_bytes(r[16..24].try_into().unwrap()), 9);
        assert_eq!(u64::from_le_bytes(r[24..32].try_into().unwrap()), 10);
        assert_eq!(&tx_record(7, 0x0102_0304_0506_0708, 9)[..], &r[..24]);
    }

    #[test]
    fn the_buffer_is_flushed_each_second_before_a_long_sleep_and_at_the_end() {
        let sink = Sink::default();
        let mut w = TraceWriter::new(sink.clone(), 0);
        w.write(&tx_record(0, 1, 2));
        w.tick(FLUSH_EVERY_NS - 1);
        assert!(sink.data.lock().unwrap().is_empty(), "not due yet");
        w.tick(FLUSH_EVERY_NS);
        assert_eq!(sink.data.lock().unwrap().len(), TX_RECORD_LEN);
        // The next flush is due a second after the last one.
        assert_eq!(w.next_flush_ns(), 2 * FLUSH_EVERY_NS);
        w.write(&tx_record(1, 1, 2));
        w.before_sleep(FLUSH_EVERY_NS + 5, FLUSH_EVERY_NS + 10);
        assert_eq!(
            sink.data.lock().unwrap().len(),
            TX_RECORD_LEN,
            "short sleep"
        );
        w.before_sleep(FLUSH_EVERY_NS + 5, 5 * FLUSH_EVERY_NS);
        assert_eq!(
            sink.data.lock().unwrap().len(),
            2 * TX_RECORD_LEN,
            "long sleep"
        );
        w.write(&tx_record(2, 1, 2));
        let m = w.finish();
        assert_eq!(m["trace_records"], 3);
        assert!(!m.contains_key("trace_error"));
        let data = sink.data.lock().unwrap();
        assert_eq!(data.len(), 3 * TX_RECORD_LEN);
        assert_eq!(u64::from_le_bytes(data[48..56].try_into().unwrap()), 2);
    }

    #[test]
    fn a_write_error_stops_tracing_and_is_reported() {
        let sink = Sink::default();
        let mut w = TraceWriter::new(sink.clone(), 0);
        w.write(&rx_record(0, 1, 2, 3));
        *sink.broken.lock().unwrap() = true;
        w.flush(1);
        w.write(&rx_record(1, 1, 2, 3));
        let m = w.finish();
        assert_eq!(m["trace_records"], 1);
        assert!(m["trace_error"].as_str().unwrap().contains("disk full"));
    }
}
