//! Open-loop send schedules and how far a sender fell behind them.
//!
//! Message `i` is due at `t0 + i / rate` (intended send time).  A sender that is
//! late sends at once (no skipping, no catch-up bursts beyond what lateness
//! implies) and records `actual - intended`; those lags become the `schedule`
//! object of a result line.  Time is an argument everywhere here, so tests can
//! drive it.
//!
//! A lag has two causes, told apart: the previous send had not returned by the
//! intended time (the protocol held the sender back: a blocking reliable
//! publisher, a full TCP window; real behaviour of what is measured), and the
//! rest, from when the sender was free to when it sent (the machine: a late
//! timer, a descheduled thread).  `late_fraction` and `behind_*` count both;
//! `own_*` only the machine's share, `held_*` only the protocol's.

use crate::clock::round6;
use crate::hist::Latency;
use serde_json::{json, Value};

/// A send more than this far behind its intended time counts as late.
pub const LATE_NS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
enum Spacing {
    /// As fast as possible / closed loop: intended time = actual time.
    None,
    /// `rate` messages per second: message i at i * 1e9 / rate (divided last, so
    /// whole-second points are exact and nothing accumulates).
    Rate(f64),
    /// A fixed interval in ns: message i at i * interval (integer arithmetic).
    Interval(u64),
}

#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    t0_ns: u64,
    spacing: Spacing,
}

impl Schedule {
    /// `rate_per_s`: messages per second, or None for as fast as possible.
    pub fn from_rate(t0_ns: u64, rate_per_s: Option<f64>) -> Self {
        Schedule {
            t0_ns,
            spacing: rate_per_s.map_or(Spacing::None, Spacing::Rate),
        }
    }

    /// A fixed interval between sends (ping/ramp), or None for closed loop.
    pub fn from_interval(t0_ns: u64, interval_ns: Option<u64>) -> Self {
        Schedule {
            t0_ns,
            spacing: interval_ns.map_or(Spacing::None, Spacing::Interval),
        }
    }

    pub fn is_open_loop(&self) -> bool {
        !matches!(self.spacing, Spacing::None)
    }

    /// Intended send time of message `i`, or None when there is no schedule.
    #[inline]
    pub fn intended_ns(&self, i: u64) -> Option<u64> {
        match self.spacing {
            Spacing::None => None,
            Spacing::Rate(r) => Some(self.t0_ns + (i as f64 * 1e9 / r).round() as u64),
            Spacing::Interval(ns) => Some(
                self.t0_ns
                    .saturating_add((i as u128 * ns as u128).min(u64::MAX as u128) as u64),
            ),
        }
    }

    pub fn t0_ns(&self) -> u64 {
        self.t0_ns
    }
}

/// Lags of actual behind intended send times.
#[derive(Default)]
pub struct ScheduleStats {
    behind: Latency,
    late: u64,
    sends: u64,
    max_ns: u64,
    /// The share of each lag after the sender was free (its previous send had returned).
    own_late: u64,
    own_max_ns: u64,
    /// The share before: the previous send still blocked at the intended time.
    held: u64,
    held_ns: u64,
}

impl ScheduleStats {
    /// One send: due at `intended_ns`, made at `actual_ns`; `free_ns` is when the
    /// sender's previous send returned (0 before the first).
    #[inline]
    pub fn record(&mut self, intended_ns: u64, actual_ns: u64, free_ns: u64) {
        let lag = actual_ns.saturating_sub(intended_ns);
        let held = free_ns.saturating_sub(intended_ns).min(lag);
        let own = lag - held;
        self.sends += 1;
        self.max_ns = self.max_ns.max(lag);
        if lag > LATE_NS {
            self.late += 1;
        }
        self.own_max_ns = self.own_max_ns.max(own);
        if own > LATE_NS {
            self.own_late += 1;
        }
        if held > LATE_NS {
            self.held += 1;
        }
        self.held_ns += held;
        self.behind.record(lag as i64);
    }

    pub fn to_json(&self) -> Value {
        let frac = |n: u64| {
            if self.sends == 0 {
                0.0
            } else {
                (n as f64 / self.sends as f64 * 1e6).round() / 1e6
            }
        };
        json!({
            "behind_max_us": self.max_ns as f64 / 1000.0,
            "behind_p99_us": self.behind.quantile_ns(0.99) as f64 / 1000.0,
            "late_fraction": frac(self.late),
            "own_behind_max_us": self.own_max_ns as f64 / 1000.0,
            "own_late_fraction": frac(self.own_late),
            "held_fraction": frac(self.held),
            "held_s": round6(self.held_ns as f64 / 1e9),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intended_times_follow_the_rate_without_drift() {
        let s = Schedule::from_rate(1_000, Some(3.0)); // period 333_333_333.3 ns
        assert_eq!(s.intended_ns(0), Some(1_000));
        assert_eq!(s.intended_ns(1), Some(1_000 + 333_333_333));
        assert_eq!(s.intended_ns(3), Some(1_000 + 1_000_000_000)); // no accumulated rounding
        assert_eq!(
            s.intended_ns(3_000_000),
            Some(1_000 + 1_000_000_000_000_000)
        ); // 1e6 s later, exact
        assert!(s.is_open_loop());
    }

    #[test]
    fn as_fast_as_possible_has_no_schedule() {
        let s = Schedule::from_rate(5, None);
        assert_eq!(s.intended_ns(10), None);
        assert!(!Schedule::from_interval(0, None).is_open_loop());
        assert_eq!(
            Schedule::from_interval(10, Some(250)).intended_ns(4),
            Some(1010)
        );
    }

    #[test]
    fn stats_count_late_sends_and_the_worst_lag() {
        let mut st = ScheduleStats::default();
        let s = Schedule::from_rate(0, Some(1000.0)); // every 1 ms
        for i in 0..100u64 {
            let intended = s.intended_ns(i).unwrap();
            let lag = if i % 10 == 0 { 2_000_000 } else { 10_000 }; // every 10th is 2 ms late
            st.record(intended, intended + lag, 0);
        }
        st.record(500, 100, 0); // early sends count as zero lag
        let j = st.to_json();
        assert!((j["late_fraction"].as_f64().unwrap() - 10.0 / 101.0).abs() < 1e-5);
        assert_eq!(j["behind_max_us"].as_f64().unwrap(), 2000.0);
        let p99 = j["behind_p99_us"].as_f64().unwrap();
        assert!((p99 - 2000.0).abs() < 5.0, "p99 {p99}");
        // No send blocked: every lag is the sender's own.
        assert_eq!(j["own_late_fraction"], j["late_fraction"]);
        assert_eq!(j["held_fraction"].as_f64().unwrap(), 0.0);
    }

    #[test]
    fn a_lag_behind_a_blocked_send_is_held_not_own() {
        let mut st = ScheduleStats::default();
        // Due at 10 ms; the previous send returned at 15 ms; sent at 15.2 ms: 5 ms held, 0.2 ms own.
        st.record(10_000_000, 15_200_000, 15_000_000);
        // Due at 20 ms; the previous send returned at 12 ms (free in time); sent at 23 ms: 3 ms own.
        st.record(20_000_000, 23_000_000, 12_000_000);
        // A send that returned after this one was made cannot hold more than the lag (clock order).
        st.record(30_000_000, 30_500_000, 31_000_000);
        let j = st.to_json();
        assert!((j["late_fraction"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-5);
        assert!((j["own_late_fraction"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-5);
        assert!((j["held_fraction"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-5);
        assert_eq!(j["own_behind_max_us"].as_f64().unwrap(), 3000.0);
        assert!((j["held_s"].as_f64().unwrap() - 0.0055).abs() < 1e-9);
    }
}
