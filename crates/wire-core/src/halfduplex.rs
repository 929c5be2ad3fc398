//! The half-duplex shared medium: one transmitter at a time, a turnaround when the direction
//! changes (e.g. the HF modem pair of SEEDS S3).
//!
//! Owns when the medium is free and who transmitted last. Frames are served in arrival order
//! across all transmitters (both sides of a link, or every port of a segment; first come, first
//! served): a frame starts when the medium is free, plus
//! the turnaround if the previous frame went the other way and the turnaround has not yet
//! elapsed. The per-side buffer limit (`Overrun`) and frame-size limit (`TooLarge`) are checked
//! by the emulator with the values of `config::HalfDuplex`; this module only does timing.

use crate::direction::serialisation_ns;

#[derive(Debug, Clone, Default)]
pub(crate) struct Medium {
    pub free_at_ns: u64,
    /// Who transmitted last (a side's or a port's index).
    pub last: Option<usize>,
    /// Times the direction changed (turnarounds taken).
    pub turnarounds: u64,
}

impl Medium {
    /// A frame from transmitter `from` (a side's or a port's index), `bytes` long on the wire
    /// (frame + overhead), arrives at `now_ns` on a medium of `rate_bps` (None: no
    /// serialisation time). Returns (start, end) of its transmission.
    pub fn transmit(
        &mut self,
        now_ns: u64,
        from: usize,
        bytes: u64,
        rate_bps: Option<u64>,
        turnaround_ns: u64,
    ) -> (u64, u64) {
        let mut start = now_ns.max(self.free_at_ns);
        if self.last.is_some_and(|l| l != from) {
            start = start.max(self.free_at_ns + turnaround_ns);
            self.turnarounds += 1;
        }
        let end = start + rate_bps.map_or(0, |r| serialisation_ns(bytes, r));
        self.free_at_ns = end;
        self.last = Some(from);
        (start, end)
    }

    /// A side went down: its queued transmissions are gone; the medium is free once the other
    /// side's already scheduled frames are sent (`other_finish_ns`), or now.
    pub fn side_down(&mut self, now_ns: u64, other_finish_ns: u64) {
        self.free_at_ns = self.free_at_ns.min(now_ns.max(other_finish_ns));
    }
}
