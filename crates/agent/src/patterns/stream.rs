//! The stream pattern: one-way messages, open loop at a rate or as fast as
//! possible, for N messages or a duration; one-way latency at the receiver.
//!
//! The sender stamps each message with its sequence number, intended send time
//! (from the schedule) and actual send time; a late sender sends at once and the
//! lag goes into its `schedule` stats.  The receiver counts by sequence number and
//! records latency from both stamps (coordinated omission corrected and not).
//! With `trace_path` both sides also write a record per message (crate::trace).

use std::fs::File;

use serde_json::json;

use super::{error_json, next_deadline, span_and_rate, EndReason, PatternError};
use crate::accounting::{Arrival, SeqTracker};
use crate::clock::{cpu_json, now_ns, round6, sleep_until_ns};
use crate::config::Config;
use crate::drivers::{Driver, DriverError};
use crate::hist::Latency;
use crate::message::{fill_payload, Header, FLAG_END, FLAG_WARMUP, HEADER_LEN};
use crate::output::{self, Intervals};
use crate::schedule::{Schedule, ScheduleStats};
use crate::signals::stop_requested;
use crate::trace::{rx_record, tx_record, TraceWriter};

pub fn send(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    let mut tx = driver.open_sender(cfg)?;
    let mut buf = vec![0u8; cfg.payload_bytes];
    fill_payload(&mut buf);
    let total = cfg.messages.map(|m| m + cfg.warmup);
    let t0 = now_ns();
    let schedule = Schedule::from_rate(t0, cfg.rate_msgs_per_s);
    let end_at = cfg.duration_ns.map(|d| t0 + d);
    let give_up = cfg.give_up_ns();
    let mut stats = ScheduleStats::default();
    let mut intervals = Intervals::new("sender", t0, cfg.report_interval_ns);
    let mut trace = TraceWriter::from_file(cfg.trace_file.as_deref(), t0);
    let (mut sent, mut warmup_sent, mut bytes, mut send_errors) = (0u64, 0u64, 0u64, 0u64);
    let (mut first, mut last) = (None, None);
    let mut reason = EndReason::Complete;
    let mut failure: Option<PatternError> = None; // the driver's error that ended it early (kept in the result)
    let mut free_at = 0u64; // when the previous send returned
    let mut i = 0u64;
    loop {
        if total.is_some_and(|t| i >= t) {
            break;
        }
        if stop_requested() {
            reason = EndReason::Signal;
            break;
        }
        let intended = schedule.intended_ns(i);
        if let Some(e) = end_at {
            if intended.unwrap_or_else(now_ns) >= e {
                break;
            }
        }
        if let Some(t) = intended {
            if let Some(tr) = trace.as_mut() {
                tr.before_sleep(now_ns(), t);
            }
            sleep_until_ns(t, &stop_requested);
            if stop_requested() {
                reason = EndReason::Signal;
                break;
            }
        }
        let actual = now_ns();
        if actual >= give_up {
            reason = EndReason::Timeout;
            break;
        }
        let warm = i < cfg.warmup;
        let h = Header {
            flags: if warm { FLAG_WARMUP } else { 0 },
            seq: i,
            intended_ns: intended.unwrap_or(actual),
            actual_ns: actual,
        };
        h.encode(&mut buf);
        match tx.send(&buf) {
            Ok(failed) => send_errors += failed as u64,
            Err(DriverError::Interrupted) => {
                reason = EndReason::Signal;
                break;
            }
            Err(DriverError::GaveUp { .. }) => {
                reason = EndReason::Timeout;
                break;
            }
            Err(e) => {
                failure = Some(e.into());
                reason = EndReason::Error;
                break;
            }
        }
        if let Some(t) = intended {
            stats.record(t, actual, free_at);
        }
        // When the send returned: for the schedule's accounting and the trace only (an unpaced stream without
        // a trace reads the clock once per message, issue 17).
        free_at = if intended.is_some() || trace.is_some() { now_ns() } else { actual };
        if warm {
            warmup_sent += 1;
        } else {
            sent += 1;
            bytes += buf.len() as u64;
            first.get_or_insert(actual);
            last = Some(actual);
            if let Some(tr) = trace.as_mut() {
                tr.write(&tx_record(i, h.intended_ns, actual));
            }
        }
        intervals.add(1, buf.len() as u64);
        intervals.tick(actual);
        if let Some(tr) = trace.as_mut() {
            tr.tick(free_at);
        }
        i += 1;
    }
    let mut end = [0u8; HEADER_LEN];
    let now = now_ns();
    Header {
        flags: FLAG_END,
        seq: i,
        intended_ns: now,
        actual_ns: now,
    }
    .encode(&mut end);
    // The end marker, then what the driver waits for (acknowledgements, receivers leaving); not after the
    // connection failed.
    let finishing = now_ns();
    if failure.is_none() {
        if let Err(e) = tx.finish(&end) {
            tracing::warn!("sending the end marker: {e}");
        }
    }
    let finish_s = (now_ns() - finishing) as f64 / 1e9;
    let (duration_s, throughput_bps) = span_and_rate(first, last, bytes);
    let mut result = json!({
        "role": "sender", "pattern": "stream", "protocol": driver.name(), "peers": tx.peers(),
        "sent": sent, "warmup_sent": warmup_sent, "bytes": bytes,
        "duration_s": round6(duration_s), "throughput_bps": throughput_bps,
        "finish_s": round6(finish_s),
        "send_errors": send_errors, "end_reason": reason.as_str(),
        "schedule": stats.to_json(), "cpu": cpu_json(),
    });
    if let Some(e) = &failure {
        result["error"] = error_json(e);
    }
    if let Some(o) = result.as_object_mut() {
        o.extend(tx.extra_results());
        if let Some(tr) = trace.as_mut() {
            o.extend(tr.finish());
        }
    }
    output::emit("result", result);
    // the partial result is out; the error line and the exit code say the role failed
    failure.map_or(Ok(()), Err)
}

/// One stream receiver's accounting, apart from its endpoint: what `receive` does with each
/// message, its timers (intervals, trace flushes, timeout, linger) and its result line.  A host's
/// shared UDP receiver (crate::host) keeps one per flow and feeds each the datagrams of its
/// source; `receive` keeps one for its own endpoint.  Nothing here allocates per message (the
/// sequence bitmap grows only past what `messages` reserved).
pub struct StreamRxState<'a> {
    protocol: &'static str,
    warmup: u64,
    linger_ns: u64,
    give_up: u64,
    tracker: SeqTracker,
    expected: Option<u64>,
    lat_intended: Latency,
    lat_actual: Latency,
    intervals: Intervals,
    trace: Option<TraceWriter<&'a File>>,
    bytes: u64,
    bad: u64,
    first: Option<u64>,
    last: Option<u64>,
    end_seen: Option<u64>,
}

impl<'a> StreamRxState<'a> {
    /// A receiver starting now (its intervals and trace count from here; its timeout from
    /// `cfg.start_ns`); `protocol` is the driver's name, for the result line.
    pub fn new(cfg: &'a Config, protocol: &'static str) -> Self {
        let mut tracker = SeqTracker::new(cfg.warmup);
        if let Some(m) = cfg.messages {
            tracker.reserve(m);
        }
        let start = now_ns();
        StreamRxState {
            protocol,
            warmup: cfg.warmup,
            linger_ns: cfg.linger_ns,
            give_up: cfg.give_up_ns(),
            tracker,
            expected: cfg.messages,
            lat_intended: Latency::new(),
            lat_actual: Latency::new(),
            intervals: Intervals::new("receiver", start, cfg.report_interval_ns),
            trace: TraceWriter::from_file(cfg.trace_file.as_deref(), start),
            bytes: 0,
            bad: 0,
            first: None,
            last: None,
            end_seen: None,
        }
    }

    /// Account one message that arrived at `rt` (CLOCK_MONOTONIC ns).
    #[inline]
    pub fn on_message(&mut self, msg: &[u8], rt: u64) {
        let n = msg.len();
        let h = match Header::decode(msg) {
            Ok(h) => h,
            Err(e) => {
                self.bad += 1;
                tracing::warn!("dropping a message that is not ours: {e}");
                return;
            }
        };
        if h.is_end() {
            self.end_seen.get_or_insert(rt);
            if self.expected.is_none() {
                self.expected = Some(h.seq.saturating_sub(self.warmup));
            }
            return;
        }
        let arrival = self.tracker.record(h.seq, h.is_warmup());
        if matches!(
            arrival,
            Arrival::New | Arrival::Reordered | Arrival::Duplicate
        ) {
            if let Some(tr) = self.trace.as_mut() {
                tr.write(&rx_record(h.seq, h.intended_ns, h.actual_ns, rt));
            }
        }
        match arrival {
            Arrival::New | Arrival::Reordered => {
                self.lat_intended.record(rt as i64 - h.intended_ns as i64);
                self.lat_actual.record(rt as i64 - h.actual_ns as i64);
                self.bytes += n as u64;
                self.first.get_or_insert(rt);
                self.last = Some(rt);
                self.intervals.add(1, n as u64);
            }
            Arrival::OutOfRange => self.bad += 1,
            Arrival::Duplicate | Arrival::Warmup => {}
        }
    }

    /// True once an end marker arrived.
    #[inline]
    pub fn end_marker_seen(&self) -> bool {
        self.end_seen.is_some()
    }

    /// `linger_ms` after the first end marker (u64::MAX before one).
    #[inline]
    fn linger_until(&self) -> u64 {
        self.end_seen
            .map_or(u64::MAX, |t| t.saturating_add(self.linger_ns))
    }

    /// The earliest instant something falls due without a message: an interval line, a trace
    /// flush, the end of the linger, the timeout.  After `tick(now)` (and `end_reason(now)` being
    /// None) it is later than `now`.
    #[inline]
    pub fn next_deadline(&self) -> u64 {
        let flush = self.trace.as_ref().map_or(u64::MAX, |t| t.next_flush_ns());
        self.give_up
            .min(self.linger_until())
            .min(self.intervals.next_ns())
            .min(flush)
    }

    /// Print the interval line and flush the trace if either is due at `now` (prints for the
    /// thread's current flow, output::set_flow).
    #[inline]
    pub fn tick(&mut self, now: u64) {
        self.intervals.tick(now);
        if let Some(tr) = self.trace.as_mut() {
            tr.tick(now);
        }
    }

    /// Why the receiver ends at `now`, if it does: a stop (a signal, or its flow's stop command),
    /// every expected message, its timeout, or the linger after an end marker (at once when the
    /// protocol says every sender has closed).
    #[inline]
    pub fn end_reason(
        &self,
        now: u64,
        stop_requested: bool,
        peers_closed: bool,
    ) -> Option<EndReason> {
        if stop_requested {
            return Some(EndReason::Signal);
        }
        if self.expected.is_some_and(|e| self.tracker.complete(e)) {
            return Some(EndReason::Complete);
        }
        if now >= self.give_up {
            return Some(EndReason::Timeout);
        }
        if self.end_seen.is_some() && (now >= self.linger_until() || peers_closed) {
            return Some(EndReason::EndMarker);
        }
        None
    }

    /// Print the result line (with `failure`, the error that ended it, and the endpoint's
    /// `extra` fields), closing the trace.  Prints for the thread's current flow.
    pub fn finish(
        &mut self,
        reason: EndReason,
        failure: Option<&PatternError>,
        extra: serde_json::Map<String, serde_json::Value>,
    ) {
        let (duration_s, throughput_bps) = span_and_rate(self.first, self.last, self.bytes);
        let expected = self.expected;
        let tracker = &self.tracker;
        let complete = expected.is_some_and(|e| tracker.complete(e));
        let mut result = json!({
            "role": "receiver", "pattern": "stream", "protocol": self.protocol,
            "expected": expected, "received": tracker.received, "lost": tracker.lost(expected),
            "duplicates": tracker.duplicates, "reordered": tracker.reordered,
            "warmup_received": tracker.warmup_received, "bad_messages": self.bad, "bytes": self.bytes,
            "duration_s": round6(duration_s), "throughput_bps": throughput_bps,
            "end_reason": reason.as_str(), "complete": complete,
            "latency_intended": self.lat_intended.to_json(), "latency_actual": self.lat_actual.to_json(),
            "cpu": cpu_json(),
        });
        if let Some(e) = failure {
            result["error"] = error_json(e);
        }
        if let Some(o) = result.as_object_mut() {
            o.extend(extra);
            if let Some(tr) = self.trace.as_mut() {
                o.extend(tr.finish());
            }
        }
        output::emit("result", result);
    }
}

pub fn receive(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    let mut rx = driver.open_receiver(cfg)?;
    let mut buf = vec![
        0u8;
        cfg.max_message_bytes()
            .max(65_536)
            .min(driver.max_message_bytes())
    ];
    let mut st = StreamRxState::new(cfg, driver.name());
    output::ready("receiver", &rx.local_addr());
    // The time as of the last clock read: a message's arrival time serves the checks and the interval clock
    // of the turn after it, so the loop reads the clock once per message (issue 17).
    let mut now = now_ns();
    let mut failure: Option<PatternError> = None; // the driver's error that ended it early (kept in the result)
    let reason = loop {
        // peers_closed matters only after an end marker (and is a call into the driver: dds asks its reader)
        let closed = st.end_marker_seen() && rx.peers_closed();
        if let Some(r) = st.end_reason(now, stop_requested(), closed) {
            break r;
        }
        let deadline = next_deadline(now, &[st.next_deadline()]);
        match rx.recv(&mut buf, deadline) {
            Ok(None) => now = now_ns(),
            Ok(Some(n)) => {
                now = now_ns();
                st.on_message(&buf[..n], now);
            }
            Err(DriverError::Interrupted) => break EndReason::Signal,
            Err(e) => {
                // The connection ended under it (a broker closed it, a peer reset it): keep what arrived.
                failure = Some(e.into());
                break EndReason::Error;
            }
        }
        st.tick(now);
    };
    st.finish(reason, failure.as_ref(), rx.extra_results());
    // the partial result is out; the error line and the exit code say the role failed
    failure.map_or(Ok(()), Err)
}
