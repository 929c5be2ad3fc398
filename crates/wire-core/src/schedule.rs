//! Time-varying conditions: the piecewise schedule of configuration changes and the distance
//! trace, both in time relative to the emulator's start.
//!
//! Owns which scheduled change comes next and the distance at a given time. Applying a change
//! is the emulator's job (`lib.rs`); the delivery trace (Mahimahi) lives in `trace.rs`.

use crate::config::{DistancePoint, ScheduledChange};

#[derive(Debug, Clone, Default)]
pub(crate) struct Schedule {
    changes: Vec<ScheduledChange>,
    next: usize,
}

impl Schedule {
    /// `changes` sorted by time (stable: equal times apply in the order given).
    pub fn new(mut changes: Vec<ScheduledChange>) -> Self {
        changes.sort_by_key(|c| c.at_ns);
        Schedule { changes, next: 0 }
    }

    /// A new schedule installed at `rel_now_ns` after the start: changes at or before then are
    /// history and are not applied.
    pub fn new_from(changes: Vec<ScheduledChange>, rel_now_ns: u64) -> Self {
        let mut s = Self::new(changes);
        s.next = s.changes.partition_point(|c| c.at_ns <= rel_now_ns);
        s
    }

    /// Relative time of the next change not yet applied.
    pub fn next_at(&self) -> Option<u64> {
        self.changes.get(self.next).map(|c| c.at_ns)
    }

    /// Takes the next change if it is due at or before `rel_now_ns`.
    pub fn pop_due(&mut self, rel_now_ns: u64) -> Option<ScheduledChange> {
        let c = self.changes.get(self.next)?;
        if c.at_ns > rel_now_ns {
            return None;
        }
        self.next += 1;
        Some(c.clone())
    }
}

/// Distance at `rel_ns` after the start: linear between points, held outside them.
pub(crate) fn distance_at(trace: &[DistancePoint], rel_ns: u64) -> Option<f64> {
    let first = trace.first()?;
    if rel_ns <= first.at_ns {
        return Some(first.distance_m);
    }
    let i = trace.partition_point(|p| p.at_ns <= rel_ns);
    if i >= trace.len() {
        return Some(trace.last()?.distance_m);
    }
    let (a, b) = (trace[i - 1], trace[i]);
    let f = (rel_ns - a.at_ns) as f64 / (b.at_ns - a.at_ns) as f64;
    Some(a.distance_m + f * (b.distance_m - a.distance_m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_interpolates_and_holds() {
        let t = [
            DistancePoint {
                at_ns: 1_000,
                distance_m: 10.0,
            },
            DistancePoint {
                at_ns: 3_000,
                distance_m: 30.0,
            },
        ];
        assert_eq!(distance_at(&t, 0), Some(10.0));
        assert_eq!(distance_at(&t, 2_000), Some(20.0));
        assert_eq!(distance_at(&t, 3_000), Some(30.0));
        assert_eq!(distance_at(&t, 9_000), Some(30.0));
        assert_eq!(distance_at(&[], 9_000), None);
    }
}
