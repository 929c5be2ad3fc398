//! Sequence-number accounting at a receiver: received, lost, duplicates, reordered.
//!
//! A bitmap indexed by sequence number (one bit per message, grown on demand, so
//! 10 million messages cost 1.25 MB) makes each arrival O(1).  Definitions (see
//! docs/agent-protocol.md): a duplicate is a sequence number already seen; a
//! reordered arrival is a new sequence number lower than the highest seen so far;
//! warm-up messages (seq < warmup) are counted apart and never as loss.

/// Sequence numbers at or above this are refused (a corrupt or foreign message),
/// so a bad header cannot make the bitmap allocate gigabytes.
pub const MAX_SEQ: u64 = 1 << 34;
/// `reserve` allocates at most this many bits up front (16 MiB).
pub const RESERVE_MAX_SEQ: u64 = 1 << 27;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    New,
    Reordered,
    Duplicate,
    Warmup,
    OutOfRange,
}

#[derive(Debug, Default)]
pub struct SeqTracker {
    warmup: u64,
    bits: Vec<u64>,
    highest: Option<u64>,
    pub received: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub warmup_received: u64,
    pub out_of_range: u64,
}

impl SeqTracker {
    /// `warmup`: the first this-many sequence numbers are warm-up messages.
    pub fn new(warmup: u64) -> Self {
        SeqTracker {
            warmup,
            ..Default::default()
        }
    }

    /// Account one arrival.  `is_warmup` is the message's own flag; a sequence
    /// number below `warmup` counts as warm-up as well.
    #[inline]
    pub fn record(&mut self, seq: u64, is_warmup: bool) -> Arrival {
        if is_warmup || seq < self.warmup {
            self.warmup_received += 1;
            return Arrival::Warmup;
        }
        if seq >= MAX_SEQ {
            self.out_of_range += 1;
            return Arrival::OutOfRange;
        }
        let word = (seq / 64) as usize;
        let bit = 1u64 << (seq % 64);
        if word >= self.bits.len() {
            let want = (word + 1)
                .max(self.bits.len() * 2)
                .min((MAX_SEQ / 64) as usize);
            self.bits.resize(want, 0);
        }
        if self.bits[word] & bit != 0 {
            self.duplicates += 1;
            return Arrival::Duplicate;
        }
        self.bits[word] |= bit;
        self.received += 1;
        match self.highest {
            Some(h) if seq < h => {
                self.reordered += 1;
                Arrival::Reordered
            }
            _ => {
                self.highest = Some(seq);
                Arrival::New
            }
        }
    }

    /// Pre-size the bitmap for `n` counted messages (avoids growth in the hot path),
    /// up to `RESERVE_MAX_SEQ`; beyond that it grows as messages arrive.
    pub fn reserve(&mut self, n: u64) {
        let words = ((self.warmup.saturating_add(n)).min(RESERVE_MAX_SEQ) / 64 + 1) as usize;
        if words > self.bits.len() {
            self.bits.resize(words, 0);
        }
    }

    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Counted messages lost.  With `expected` (counted messages, warm-up excluded)
    /// it is expected minus received; without, the holes below the highest seen.
    pub fn lost(&self, expected: Option<u64>) -> u64 {
        match expected {
            Some(e) => e.saturating_sub(self.received),
            None => match self.highest {
                Some(h) => (h + 1 - self.warmup).saturating_sub(self.received),
                None => 0,
            },
        }
    }

    /// True when every one of `expected` counted messages has arrived.
    pub fn complete(&self, expected: u64) -> bool {
        self.received >= expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_stream_has_no_anomalies() {
        let mut t = SeqTracker::new(0);
        for s in 0..1000 {
            assert_eq!(t.record(s, false), Arrival::New);
        }
        assert_eq!(
            (t.received, t.duplicates, t.reordered, t.lost(Some(1000))),
            (1000, 0, 0, 0)
        );
        assert!(t.complete(1000));
    }

    #[test]
    fn loss_duplicates_and_reordering() {
        let mut t = SeqTracker::new(2);
        // warm-up 0,1 ; then 2 3 5 4 4 7 (6 and 8,9 lost; 4 reordered then duplicated)
        for (s, w) in [
            (0, true),
            (1, true),
            (2, false),
            (3, false),
            (5, false),
            (4, false),
            (4, false),
            (7, false),
        ] {
            t.record(s, w);
        }
        assert_eq!(t.warmup_received, 2);
        assert_eq!(t.received, 5);
        assert_eq!(t.duplicates, 1);
        assert_eq!(t.reordered, 1);
        assert_eq!(t.lost(Some(8)), 3); // seq 2..9 expected: 6, 8, 9 missing
        assert_eq!(t.lost(None), 1); // only the hole at 6 is visible without a count
        assert!(!t.complete(8));
    }

    #[test]
    fn reverse_order_counts_every_but_first_as_reordered() {
        let mut t = SeqTracker::new(0);
        for s in (0..100).rev() {
            t.record(s, false);
        }
        assert_eq!(t.received, 100);
        assert_eq!(t.reordered, 99);
        assert_eq!(t.lost(None), 0);
    }

    #[test]
    fn sparse_large_seq_grows_and_foreign_seq_is_refused() {
        let mut t = SeqTracker::new(0);
        assert_eq!(t.record(5_000_000, false), Arrival::New);
        assert_eq!(t.record(MAX_SEQ + 1, false), Arrival::OutOfRange);
        assert_eq!(t.record(5_000_000, false), Arrival::Duplicate);
        assert_eq!(t.lost(None), 5_000_000);
    }
}
