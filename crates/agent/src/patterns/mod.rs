//! Workload patterns: what the agent does with a driver's endpoints.
//!
//! Each pattern is written against the traits in `crate::drivers` only, so every
//! protocol gets every pattern.  Patterns own the message header, schedules,
//! sequence accounting, histograms and the result line; drivers own the wire.
//!
//! | pattern | roles | module |
//! |---|---|---|
//! | stream | sender, receiver | `stream` (open loop at a rate, or as fast as possible) |
//! | ping | pinger, ponger | `ping` (request/reply round trips) |
//! | ramp | pinger, ponger | `ramp` (ping whose size grows each iteration) |
//! | bulk | sender, receiver | `bulk` (maximum throughput) |
//! | sync | syncer (both sides) | `sync` (two stores of bundles reconcile) |

use thiserror::Error;

use crate::config::{Config, Pattern, Role};
use crate::drivers::{Driver, DriverError};
use crate::signals::POLL_SLICE_NS;

pub mod bulk;
pub mod ping;
pub mod ramp;
pub mod stream;
pub mod sync;

#[derive(Debug, Error)]
pub enum PatternError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// Why a role stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Receiver: every expected message arrived.  Sender: sent everything.
    Complete,
    /// Receiver: `linger_ms` after an end marker (or the senders closed).
    EndMarker,
    Timeout,
    Signal,
    /// The driver failed mid-run (a broker closed the connection, a peer reset it): the result keeps
    /// everything counted until then and says why under `error` (issue 26).
    Error,
}

impl EndReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            EndReason::Complete => "complete",
            EndReason::EndMarker => "end_marker",
            EndReason::Timeout => "timeout",
            EndReason::Signal => "signal",
            EndReason::Error => "error",
        }
    }
}

/// What a result line says of a failure that ended a role early: `{"kind", "message"}` (kinds as the
/// error line's: "protocol" or "io").
pub fn error_json(e: &PatternError) -> serde_json::Value {
    serde_json::json!({"kind": error_kind(e), "message": e.to_string()})
}

/// The kind of an error line for a failed role: "protocol" or "io".
pub fn error_kind(e: &PatternError) -> &'static str {
    match e {
        PatternError::Protocol(_)
        | PatternError::Driver(DriverError::Protocol { .. } | DriverError::TooLarge { .. }) => "protocol",
        PatternError::Driver(_) => "io",
    }
}

/// Run the role `cfg.role` of pattern `cfg.pattern` with `driver`; prints
/// `ready` (listening roles), interval lines and the result line.
pub fn run(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    match (cfg.pattern, cfg.role) {
        (Pattern::Stream, Role::Sender) => stream::send(cfg, driver),
        (Pattern::Stream, Role::Receiver) => stream::receive(cfg, driver),
        (Pattern::Bulk, Role::Sender) => bulk::send(cfg, driver),
        (Pattern::Bulk, Role::Receiver) => bulk::receive(cfg, driver),
        (Pattern::Ping, Role::Pinger) => ping::ping(cfg, driver, false),
        (Pattern::Ramp, Role::Pinger) => ramp::run(cfg, driver),
        (Pattern::Ping | Pattern::Ramp, Role::Ponger) => ping::pong(cfg, driver),
        (Pattern::Sync, _) => sync::run(cfg, driver),
        (p, r) => Err(PatternError::Protocol(format!(
            "role {} does not belong to pattern {}",
            r.as_str(),
            p.as_str()
        ))),
    }
}

/// A deadline for the next blocking call: no further than one poll slice (so
/// signals are seen) and no later than any of `limits`.
#[inline]
pub(crate) fn next_deadline(now_ns: u64, limits: &[u64]) -> u64 {
    limits
        .iter()
        .copied()
        .fold(now_ns.saturating_add(POLL_SLICE_NS), u64::min)
}

/// Seconds between two instants, and a rate in bit/s for `bytes` over them.
pub(crate) fn span_and_rate(first_ns: Option<u64>, last_ns: Option<u64>, bytes: u64) -> (f64, f64) {
    match (first_ns, last_ns) {
        (Some(a), Some(b)) if b > a => {
            let s = (b - a) as f64 / 1e9;
            (s, (bytes as f64 * 8.0 / s).round())
        }
        _ => (0.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_capped_by_slice_and_limits() {
        assert_eq!(next_deadline(100, &[]), 100 + POLL_SLICE_NS);
        assert_eq!(next_deadline(100, &[u64::MAX, 500]), 500);
        assert_eq!(next_deadline(u64::MAX - 1, &[]), u64::MAX);
    }

    #[test]
    fn rate_over_a_span() {
        let (s, r) = span_and_rate(Some(1_000_000_000), Some(3_000_000_000), 1_000_000);
        assert_eq!(s, 2.0);
        assert_eq!(r, 4_000_000.0);
        assert_eq!(span_and_rate(Some(5), Some(5), 10), (0.0, 0.0));
        assert_eq!(span_and_rate(None, None, 10), (0.0, 0.0));
    }
}
