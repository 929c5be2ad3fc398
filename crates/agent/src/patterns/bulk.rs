//! The bulk pattern: move as many bytes as possible for N chunks or a duration;
//! throughput over time at both ends.
//!
//! Drivers decide what a chunk is (drivers::BulkSender): TCP writes `send_size`
//! raw bytes (no framing, as iperf3 does) and the receiver ends at EOF; message
//! protocols (UDP) send sequence-numbered messages of `payload_bytes` and the
//! receiver counts loss.  Warm-up does not apply to bulk.

use serde_json::json;

use super::{error_json, next_deadline, span_and_rate, EndReason, PatternError};
use crate::accounting::{Arrival, SeqTracker};
use crate::clock::{cpu_json, now_ns, round6};
use crate::config::Config;
use crate::drivers::{BulkEvent, Driver, DriverError};
use crate::output::{self, Intervals};
use crate::signals::stop_requested;

pub fn send(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    let mut tx = driver.open_bulk_sender(cfg)?;
    let t0 = now_ns();
    let end_at = cfg.duration_ns.map_or(u64::MAX, |d| t0 + d);
    let give_up = cfg.give_up_ns();
    let mut intervals = Intervals::new("sender", t0, cfg.report_interval_ns);
    let (mut seq, mut bytes, mut send_errors) = (0u64, 0u64, 0u64);
    let mut last = t0;
    let mut failure: Option<PatternError> = None; // the driver's error that ended it early (kept in the result)
    let reason = loop {
        if cfg.messages.is_some_and(|m| seq >= m) {
            break EndReason::Complete;
        }
        if stop_requested() {
            break EndReason::Signal;
        }
        let now = now_ns();
        if now >= end_at {
            break EndReason::Complete;
        }
        if now >= give_up {
            break EndReason::Timeout;
        }
        match tx.send_chunk(seq) {
            Ok((n, failed)) => {
                bytes += n as u64;
                send_errors += failed as u64;
                intervals.add(1, n as u64);
            }
            Err(DriverError::Interrupted) => break EndReason::Signal,
            Err(DriverError::GaveUp { .. }) => break EndReason::Timeout,
            Err(e) => {
                failure = Some(e.into());
                break EndReason::Error;
            }
        }
        seq += 1;
        last = now_ns();
        intervals.tick(last);
    };
    if failure.is_none() {
        if let Err(e) = tx.finish(seq) {
            tracing::warn!("ending the bulk transfer: {e}");
        }
    }
    let (duration_s, throughput_bps) = span_and_rate(Some(t0), Some(last), bytes);
    let mut result = json!({
        "role": "sender", "pattern": "bulk", "protocol": driver.name(),
        "sent": seq, "bytes": bytes, "duration_s": round6(duration_s), "throughput_bps": throughput_bps,
        "send_errors": send_errors, "end_reason": reason.as_str(), "cpu": cpu_json(),
    });
    if let Some(e) = &failure {
        result["error"] = error_json(e);
    }
    output::emit("result", result);
    // the partial result is out; the error line and the exit code say the role failed
    failure.map_or(Ok(()), Err)
}

pub fn receive(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    let mut rx = driver.open_bulk_receiver(cfg)?;
    let sequenced = rx.sequenced();
    let mut tracker = SeqTracker::new(0);
    let mut expected = if sequenced { cfg.messages } else { None };
    let start = now_ns();
    let give_up = cfg.give_up_ns();
    let mut intervals = Intervals::new("receiver", start, cfg.report_interval_ns);
    let mut bytes = 0u64;
    let (mut first, mut last) = (None, None);
    let mut end_seen: Option<u64> = None;
    let mut closed = false;
    let mut failure: Option<PatternError> = None; // the driver's error that ended it early (kept in the result)
    output::ready("receiver", &rx.local_addr());
    let reason = loop {
        if stop_requested() {
            break EndReason::Signal;
        }
        if closed {
            break EndReason::EndMarker;
        }
        if expected.is_some_and(|e| tracker.complete(e)) {
            break EndReason::Complete;
        }
        let now = now_ns();
        if now >= give_up {
            break EndReason::Timeout;
        }
        let linger_until = end_seen.map_or(u64::MAX, |t| t.saturating_add(cfg.linger_ns));
        if now >= linger_until {
            break EndReason::EndMarker;
        }
        let deadline = next_deadline(now, &[give_up, linger_until, intervals.next_ns()]);
        let event = match rx.recv_chunk(deadline) {
            Ok(event) => event,
            Err(DriverError::Interrupted) => break EndReason::Signal,
            Err(e) => {
                failure = Some(e.into());
                break EndReason::Error;
            }
        };
        match event {
            BulkEvent::Data { bytes: n, seq } => {
                let rt = now_ns();
                let counted = match seq {
                    Some(s) => {
                        matches!(tracker.record(s, false), Arrival::New | Arrival::Reordered)
                    }
                    None => true,
                };
                if counted {
                    bytes += n as u64;
                    first.get_or_insert(rt);
                    last = Some(rt);
                    intervals.add(1, n as u64);
                }
            }
            BulkEvent::End { total } => {
                end_seen.get_or_insert(now_ns());
                if expected.is_none() {
                    expected = total;
                }
            }
            BulkEvent::Closed => closed = true,
            BulkEvent::Idle => {}
        }
        intervals.tick(now_ns());
    };
    let (duration_s, throughput_bps) = span_and_rate(first, last, bytes);
    let mut result = json!({
        "role": "receiver", "pattern": "bulk", "protocol": driver.name(),
        "bytes": bytes, "duration_s": round6(duration_s), "throughput_bps": throughput_bps,
        "end_reason": reason.as_str(), "cpu": cpu_json(),
    });
    if sequenced {
        result["sent"] = json!(expected);
        result["received"] = json!(tracker.received);
        result["lost"] = json!(tracker.lost(expected));
        result["duplicates"] = json!(tracker.duplicates);
        result["reordered"] = json!(tracker.reordered);
        result["complete"] = json!(expected.is_some_and(|e| tracker.complete(e)));
    } else {
        result["complete"] = json!(closed);
    }
    if let Some(e) = &failure {
        result["error"] = error_json(e);
    }
    output::emit("result", result);
    failure.map_or(Ok(()), Err)
}
