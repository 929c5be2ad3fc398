//! Counters of the emulator: drop reasons and per-direction statistics (serde Serialize).
//!
//! Owns only the counting; the pipeline (`direction.rs`) decides what to count. The I/O
//! side's scheduling error is not here: the binary measures and reports it itself.

use serde::Serialize;

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// A random loss model decided (bernoulli, gilbert_elliott, markov4).
    Loss,
    /// A frame error model decided (size_dependent, ieee80211p): the receiver's FCS failed.
    FrameError,
    /// The drop-tail queue (packets or bytes) was full, or the direction's memory bound.
    QueueFull,
    /// Larger than the MTU or the half-duplex medium's frame limit.
    TooLarge,
    /// The half-duplex modem's buffer was full.
    Overrun,
    /// The link (or this direction) was down when the frame arrived or while it was queued.
    LinkDown,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::Loss,
        DropReason::FrameError,
        DropReason::QueueFull,
        DropReason::TooLarge,
        DropReason::Overrun,
        DropReason::LinkDown,
    ];
}

/// Frames dropped, by reason (JSON: one key per reason, all present).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DropCounts {
    pub loss: u64,
    pub frame_error: u64,
    pub queue_full: u64,
    pub too_large: u64,
    pub overrun: u64,
    pub link_down: u64,
}

impl DropCounts {
    pub fn get(&self, r: DropReason) -> u64 {
        match r {
            DropReason::Loss => self.loss,
            DropReason::FrameError => self.frame_error,
            DropReason::QueueFull => self.queue_full,
            DropReason::TooLarge => self.too_large,
            DropReason::Overrun => self.overrun,
            DropReason::LinkDown => self.link_down,
        }
    }

    pub(crate) fn add(&mut self, r: DropReason) {
        self.add_n(r, 1);
    }

    pub(crate) fn add_n(&mut self, r: DropReason, n: u64) {
        match r {
            DropReason::Loss => self.loss += n,
            DropReason::FrameError => self.frame_error += n,
            DropReason::QueueFull => self.queue_full += n,
            DropReason::TooLarge => self.too_large += n,
            DropReason::Overrun => self.overrun += n,
            DropReason::LinkDown => self.link_down += n,
        }
    }

    pub fn total(&self) -> u64 {
        DropReason::ALL.iter().map(|r| self.get(*r)).sum()
    }
}

/// Counters of one direction. `packets_in` counts frames offered by the I/O side;
/// `packets_out` frames handed back by `egress` (duplicates included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirectionStats {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub drops: DropCounts,
    /// Extra copies made by `duplicate`.
    pub duplicated: u64,
    /// Frames sent with a flipped bit.
    pub corrupted: u64,
    /// Frames sent early by `reorder` (netem's reorder/gap).
    pub reordered: u64,
    /// Highest occupancy of the drop-tail queue (see `DirectionConfig::queue_packets`).
    pub queue_high_packets: u64,
    pub queue_high_bytes: u64,
    /// Frames and bytes held now (admitted, not yet handed to `egress`).
    pub held_packets: u64,
    pub held_bytes: u64,
    /// Whether this direction is up now (`Emulator::set_up`, schedules).
    pub up: bool,
}

impl DirectionStats {
    /// Several directions' counters together (a segment's uplinks, or its downlinks): sums, except the
    /// queue high-water marks (the largest) and `up` (all up).
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a DirectionStats>) -> DirectionStats {
        let mut t = DirectionStats {
            up: true,
            ..Default::default()
        };
        for s in all {
            t.packets_in += s.packets_in;
            t.bytes_in += s.bytes_in;
            t.packets_out += s.packets_out;
            t.bytes_out += s.bytes_out;
            for r in DropReason::ALL {
                let n = s.drops.get(r);
                t.drops.add_n(r, n);
            }
            t.duplicated += s.duplicated;
            t.corrupted += s.corrupted;
            t.reordered += s.reordered;
            t.queue_high_packets = t.queue_high_packets.max(s.queue_high_packets);
            t.queue_high_bytes = t.queue_high_bytes.max(s.queue_high_bytes);
            t.held_packets += s.held_packets;
            t.held_bytes += s.held_bytes;
            t.up &= s.up;
        }
        t
    }
}

/// Both directions' counters (JSON `{"a_to_b": {...}, "b_to_a": {...}, "schedule_applied": 0}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub a_to_b: DirectionStats,
    pub b_to_a: DirectionStats,
    /// Scheduled changes applied so far.
    pub schedule_applied: u64,
}
