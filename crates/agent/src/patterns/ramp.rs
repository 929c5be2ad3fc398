//! The ramp pattern: a ping whose message grows by `step_bytes` each iteration
//! (counted iteration k sends `payload_bytes + k * step_bytes`; warm-up requests
//! use the first size), open loop at `interval_ns` or closed loop.  The result
//! adds `points`: `[size_bytes, rtt_us]` per reply, for size-vs-latency plots.
//! The exchange itself is `ping`'s; this module only turns the growth on.

use super::{ping, PatternError};
use crate::config::Config;
use crate::drivers::Driver;

pub fn run(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    ping::ping(cfg, driver, true)
}

/// The sizes a ramp sends, counted iterations only (for planning and tests).
pub fn sizes(cfg: &Config) -> impl Iterator<Item = usize> + '_ {
    (0..cfg.messages.unwrap_or(0)).map(|k| cfg.size_of_iteration(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_grow_by_the_step_up_to_the_last() {
        let cfg = Config::parse(
            r#"{"v":1,"role":"pinger","protocol":"udp","pattern":"ramp","peers":["127.0.0.1:9"],
                "payload_bytes":100,"messages":5,"step_bytes":50,"warmup":3}"#,
        )
        .unwrap();
        let s: Vec<usize> = sizes(&cfg).collect();
        assert_eq!(s, vec![100, 150, 200, 250, 300]);
        assert_eq!(cfg.max_message_bytes(), 300);
    }
}
