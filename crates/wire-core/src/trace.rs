//! Mahimahi-style delivery traces: when each frame finishes crossing a link whose capacity is a
//! list of delivery opportunities.
//!
//! Owns the cursor into the (repeating) trace. Semantics of Mahimahi's LinkQueue
//! (mahimahi/src/packet/link_queue.cc, `rationalize`): each opportunity at time T carries up to
//! 1504 bytes of the FIFO queue's head; a frame may be spread over several opportunities and
//! leaves at the time of the one that carries its last byte; an opportunity only serves
//! frames that arrived at or before T, and what it does not use is lost; the trace repeats with
//! a period equal to its last timestamp.

use crate::config::DeliveryTrace;

#[derive(Debug, Clone)]
pub struct TraceCursor {
    /// Opportunity offsets within one period, ns.
    ops_ns: Vec<u64>,
    period_ns: u64,
    bytes_per_op: u64,
    /// Next opportunity to use, counted from the start over all periods.
    next: u64,
    /// Bytes left in opportunity `next` (it may be partly used by the frame before).
    left: u64,
}

impl TraceCursor {
    pub fn new(t: &DeliveryTrace) -> Self {
        let ops_ns: Vec<u64> = t.opportunities_ms.iter().map(|ms| ms * 1_000_000).collect();
        let period_ns = *ops_ns.last().expect("validated: non-empty");
        TraceCursor {
            ops_ns,
            period_ns,
            bytes_per_op: t.bytes_per_opportunity as u64,
            next: 0,
            left: t.bytes_per_opportunity as u64,
        }
    }

    fn time_of(&self, k: u64, start_ns: u64) -> u64 {
        let n = self.ops_ns.len() as u64;
        start_ns + (k / n) * self.period_ns + self.ops_ns[(k % n) as usize]
    }

    /// Index of the first opportunity at or after `t_ns`.
    fn first_at_or_after(&self, t_ns: u64, start_ns: u64) -> u64 {
        let n = self.ops_ns.len() as u64;
        let rel = t_ns.saturating_sub(start_ns);
        let cycle = rel / self.period_ns;
        let within = rel - cycle * self.period_ns;
        let i = self.ops_ns.partition_point(|&o| o < within) as u64;
        // i == n: none left in this cycle; the next cycle's first opportunity (i wraps).
        cycle * n + i
    }

    /// A frame of `len` bytes arrives at `now_ns`: returns the time its last byte is delivered.
    pub fn deliver(&mut self, now_ns: u64, len: u64, start_ns: u64) -> u64 {
        if self.time_of(self.next, start_ns) < now_ns {
            // The queue was empty at the opportunities in between: they are lost.
            self.next = self.first_at_or_after(now_ns, start_ns);
            self.left = self.bytes_per_op;
        }
        let mut remaining = len.max(1);
        loop {
            let take = remaining.min(self.left);
            remaining -= take;
            self.left -= take;
            let t = self.time_of(self.next, start_ns);
            if self.left == 0 {
                self.next += 1;
                self.left = self.bytes_per_op;
            }
            if remaining == 0 {
                return t;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(ops: &[u64]) -> TraceCursor {
        TraceCursor::new(&DeliveryTrace {
            opportunities_ms: ops.to_vec(),
            bytes_per_opportunity: 1504,
        })
    }

    #[test]
    fn one_frame_per_opportunity_and_repeat() {
        let mut c = cursor(&[1, 2, 4]);
        let ms = 1_000_000;
        assert_eq!(c.deliver(0, 1500, 0), ms);
        assert_eq!(c.deliver(0, 1500, 0), 2 * ms);
        assert_eq!(c.deliver(0, 1500, 0), 4 * ms);
        // Period 4 ms: the next ones are at 5, 6, 8 ms.
        assert_eq!(c.deliver(0, 1500, 0), 5 * ms);
        // Arriving at 6.5 ms: 6 ms is gone, the next is 8 ms.
        assert_eq!(c.deliver(6 * ms + ms / 2, 100, 0), 8 * ms);
        // Small frames share the 8 ms opportunity's remaining bytes.
        assert_eq!(c.deliver(6 * ms + ms / 2, 100, 0), 8 * ms);
        // Long idle: jump straight to the right cycle (start offset honoured).
        assert_eq!(c.deliver(1000 * ms + 3 * ms, 1500, 0), 1004 * ms);
        assert_eq!(c.deliver(7, 1500, 7), 7 + 1004 * ms + ms);
    }

    #[test]
    fn frame_spread_over_opportunities() {
        let mut c = cursor(&[1, 2, 3, 4]);
        let ms = 1_000_000;
        assert_eq!(c.deliver(0, 1000, 0), ms); // 504 left in 1 ms
        assert_eq!(c.deliver(0, 1000, 0), 2 * ms); // 504 at 1 ms + 496 at 2 ms
        assert_eq!(c.deliver(0, 1008, 0), 2 * ms); // exactly fills 2 ms
        assert_eq!(c.deliver(0, 1, 0), 3 * ms);
    }
}
