//! One direction of a link: the per-frame pipeline from arrival to departure time.
//!
//! Owns a direction's configuration, random streams, model states, serialiser (rate or
//! delivery trace), drop-tail queue accounting, delay/jitter/reorder and counters. It does not
//! own the queue of frames waiting to leave (the `Emulator` keeps one heap for both
//! directions), nor anything shared between directions (half-duplex medium, schedule,
//! distance), which `lib.rs` and `halfduplex.rs` pass in.
//!
//! Order of the pipeline for one frame (netem's order where netem has the step):
//! up? -> MTU -> loss model -> drop-tail queue -> duplicate -> corrupt -> serialise ->
//! reorder or delay + jitter -> no-reorder clamp.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{
    DirectionConfig, DEFAULT_QUEUE_PACKETS, ETHERNET_HEADER_BYTES, HELD_LIMIT_PACKETS,
};
use crate::jitter::Jitter;
use crate::loss::LossState;
use crate::stats::{DirectionStats, DropReason};
use crate::trace::TraceCursor;

/// Random streams of one direction: each decision has its own ChaCha stream, so enabling
/// one impairment does not change the decisions of another for the same seed.
#[derive(Debug, Clone)]
struct Streams {
    loss: ChaCha8Rng,
    jitter: ChaCha8Rng,
    reorder: ChaCha8Rng,
    duplicate: ChaCha8Rng,
    corrupt: ChaCha8Rng,
}

impl Streams {
    fn new(seed: u64, dir: u64) -> Self {
        let s = |k: u64| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            r.set_stream(dir * 16 + k);
            r
        };
        Streams {
            loss: s(0),
            jitter: s(1),
            reorder: s(2),
            duplicate: s(3),
            corrupt: s(4),
        }
    }
}

/// Nanoseconds to serialise `bytes` at `rate_bps`, rounded up.
pub fn serialisation_ns(bytes: u64, rate_bps: u64) -> u64 {
    ((bytes as u128 * 8 * 1_000_000_000).div_ceil(rate_bps as u128)) as u64
}

#[derive(Debug, Clone)]
pub(crate) struct Direction {
    pub cfg: DirectionConfig,
    pub up: bool,
    rng: Streams,
    loss: LossState,
    jitter: Jitter,
    reorder_counter: u32,
    /// When this direction's serialiser is free again.
    pub tx_finish_ns: u64,
    last_departure_ns: u64,
    /// Frames admitted whose serialisation has not finished: (end ns, bytes). FIFO, so the
    /// end times are non-decreasing.
    backlog: VecDeque<(u64, u32)>,
    backlog_bytes: u64,
    trace: Option<TraceCursor>,
    pub stats: DirectionStats,
}

impl Direction {
    pub fn new(cfg: DirectionConfig, seed: u64, dir: u64) -> Self {
        let loss = LossState::new(cfg.loss.clone());
        let trace = cfg.delivery_trace.as_ref().map(TraceCursor::new);
        Direction {
            cfg,
            up: true,
            rng: Streams::new(seed, dir),
            loss,
            jitter: Jitter::new(),
            reorder_counter: 0,
            tx_finish_ns: 0,
            last_departure_ns: 0,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            trace,
            stats: DirectionStats {
                up: true,
                ..Default::default()
            },
        }
    }

    /// Replaces the configuration (control socket or schedule). Frames already admitted keep
    /// their departure times; the serialiser, loss-model state and random streams carry on.
    pub fn set_config(&mut self, cfg: DirectionConfig) {
        self.loss.set_model(cfg.loss.clone());
        if cfg.delivery_trace != self.cfg.delivery_trace {
            self.trace = cfg.delivery_trace.as_ref().map(TraceCursor::new);
        }
        if cfg.reorder_gap != self.cfg.reorder_gap {
            self.reorder_counter = 0;
        }
        self.cfg = cfg;
    }

    /// Whether the drop-tail queue is the frames in front of a serialiser (rate, trace or
    /// half-duplex medium) rather than every frame held.
    fn has_serialiser(&self, half_duplex: bool) -> bool {
        half_duplex || self.cfg.rate_bps.is_some() || self.trace.is_some()
    }

    /// Frames and bytes in the drop-tail queue at `now_ns`.
    pub fn queue_occupancy(&mut self, now_ns: u64, half_duplex: bool) -> (u64, u64) {
        while let Some(&(end, len)) = self.backlog.front() {
            if end > now_ns {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= len as u64;
        }
        if self.has_serialiser(half_duplex) {
            (self.backlog.len() as u64, self.backlog_bytes)
        } else {
            (self.stats.held_packets, self.stats.held_bytes)
        }
    }

    /// Bytes waiting or in transmission (the half-duplex modem's buffer).
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }

    /// Size checks and the loss model, in that order. `per_pair`: a distance-based loss model is
    /// decided per pair by the segment, not here (no draw).
    pub fn pre_admit(
        &mut self,
        len: usize,
        distance_m: Option<f64>,
        per_pair: bool,
    ) -> Result<(), DropReason> {
        if !self.up {
            return Err(DropReason::LinkDown);
        }
        if let Some(mtu) = self.cfg.mtu {
            if len.saturating_sub(ETHERNET_HEADER_BYTES) > mtu as usize {
                return Err(DropReason::TooLarge);
            }
        }
        if per_pair && self.cfg.loss.is_distance_based() {
            return Ok(());
        }
        match self.loss.decide(&mut self.rng.loss, len, distance_m) {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }

    /// The drop-tail queue check for one frame (and one copy).
    pub fn queue_admit(
        &mut self,
        now_ns: u64,
        len: usize,
        half_duplex: bool,
    ) -> Result<(), DropReason> {
        let (pk, by) = self.queue_occupancy(now_ns, half_duplex);
        let limit_packets = match (self.cfg.queue_packets, self.cfg.queue_bytes) {
            (None, None) if self.has_serialiser(half_duplex) => Some(DEFAULT_QUEUE_PACKETS),
            (p, _) => p,
        };
        if limit_packets.is_some_and(|l| pk >= l as u64)
            || self.cfg.queue_bytes.is_some_and(|l| by + len as u64 > l)
            || self.stats.held_packets as usize >= HELD_LIMIT_PACKETS
        {
            return Err(DropReason::QueueFull);
        }
        Ok(())
    }

    /// Draws whether a delivered frame gets a duplicate.
    pub fn draw_duplicate(&mut self) -> bool {
        self.cfg.duplicate > 0.0 && self.rng.duplicate.gen::<f64>() < self.cfg.duplicate
    }

    /// Flips one bit after the Ethernet header (anywhere in a runt) with probability
    /// `corrupt`; returns whether it did.
    pub fn maybe_corrupt(&mut self, frame: &mut [u8]) -> bool {
        if self.cfg.corrupt <= 0.0
            || frame.is_empty()
            || self.rng.corrupt.gen::<f64>() >= self.cfg.corrupt
        {
            return false;
        }
        let lo = if frame.len() > ETHERNET_HEADER_BYTES {
            ETHERNET_HEADER_BYTES
        } else {
            0
        };
        let i = self.rng.corrupt.gen_range(lo..frame.len());
        let bit = self.rng.corrupt.gen_range(0..8);
        frame[i] ^= 1 << bit;
        self.stats.corrupted += 1;
        true
    }

    /// Serialisation on this direction's own link (no half duplex): the end time of the
    /// frame's transmission. `start_ns` is the emulator's start (for the delivery trace).
    pub fn serialise(&mut self, now_ns: u64, len: usize, start_ns: u64) -> u64 {
        let end = if let Some(trace) = &mut self.trace {
            trace.deliver(now_ns, len as u64, start_ns)
        } else if let Some(rate) = self.cfg.rate_bps {
            let begin = now_ns.max(self.tx_finish_ns);
            begin + serialisation_ns(len as u64 + self.cfg.overhead_bytes as u64, rate)
        } else {
            now_ns
        };
        self.note_serialised(end, len);
        end
    }

    /// Records a frame whose transmission ends at `end_ns` (own serialiser or medium).
    pub fn note_serialised(&mut self, end_ns: u64, len: usize) {
        self.tx_finish_ns = self.tx_finish_ns.max(end_ns);
        self.backlog.push_back((end_ns, len as u32));
        self.backlog_bytes += len as u64;
    }

    /// Updates the queue high-water mark after a frame was admitted at `now_ns`.
    pub fn note_high_water(&mut self, now_ns: u64, half_duplex: bool) {
        let (pk, by) = self.queue_occupancy(now_ns, half_duplex);
        self.stats.queue_high_packets = self.stats.queue_high_packets.max(pk);
        self.stats.queue_high_bytes = self.stats.queue_high_bytes.max(by);
    }

    /// Departure time of a frame whose transmission ends at `tx_end_ns`: netem's reorder
    /// (sent without the delay) or delay + jitter, then the no-reorder clamp.
    pub fn departure(&mut self, tx_end_ns: u64) -> u64 {
        let cfg = &self.cfg;
        if cfg.reorder > 0.0 {
            let gap = cfg.reorder_gap.max(1);
            // q_netem.c netem_enqueue: frames 1 .. gap-1 are delayed, the gap-th is sent at
            // once with probability `reorder` (else it is delayed and the next is eligible).
            if self.reorder_counter + 1 >= gap && self.rng.reorder.gen::<f64>() < cfg.reorder {
                self.reorder_counter = 0;
                self.stats.reordered += 1;
                return tx_end_ns;
            }
            self.reorder_counter = self.reorder_counter.saturating_add(1);
        }
        let j = self.jitter.sample(
            &mut self.rng.jitter,
            cfg.jitter_ns,
            cfg.jitter_dist,
            cfg.jitter_correlation,
        );
        let delay = (cfg.delay_ns as i128 + j as i128).max(0) as u64;
        let mut due = tx_end_ns + delay;
        if !cfg.allow_reorder {
            due = due.max(self.last_departure_ns);
        }
        self.last_departure_ns = self.last_departure_ns.max(due);
        due
    }

    /// Counts a frame entering the heap.
    pub fn note_held(&mut self, len: usize) {
        self.stats.held_packets += 1;
        self.stats.held_bytes += len as u64;
    }

    /// Counts a frame leaving the heap (sent, or dropped when the link went down).
    pub fn note_released(&mut self, len: usize, sent: bool) {
        self.stats.held_packets -= 1;
        self.stats.held_bytes -= len as u64;
        if sent {
            self.stats.packets_out += 1;
            self.stats.bytes_out += len as u64;
        } else {
            self.stats.drops.add(DropReason::LinkDown);
        }
    }

    /// Link down from `at_ns`: the serialiser's backlog is lost (frames in the heap are
    /// removed by the emulator).
    pub fn go_down(&mut self, at_ns: u64) {
        self.up = false;
        self.stats.up = false;
        self.backlog.clear();
        self.backlog_bytes = 0;
        self.tx_finish_ns = self.tx_finish_ns.min(at_ns);
        self.last_departure_ns = self.last_departure_ns.min(at_ns);
    }

    pub fn go_up(&mut self) {
        self.up = true;
        self.stats.up = true;
    }
}
