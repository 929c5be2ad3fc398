//! roughnet-wire-core: the impairment pipeline of the userspace link emulator (no I/O, no clock).
//!
//! The binary (`crates/wire`) moves frames between two interfaces and calls this crate: every
//! frame is handed to [`Emulator::ingress`] with the current time, and [`Emulator::egress`]
//! returns the frames whose departure time has come. A shared segment of N hosts is a
//! [`Segment`] with the same shape of API (ports instead of sides). All time is passed in as `u64`
//! nanoseconds (CLOCK_MONOTONIC in the binary, anything in tests); all randomness comes from
//! ChaCha8 streams seeded by the `seed` given to [`Emulator::new`], so the same seed and the
//! same sequence of (time, side, frame length) give the same decisions.
//!
//! Who does what:
//! - `config`: the JSON shapes (`LinkConfig`, `DirectionConfig`, ...) and their validation;
//! - `direction`: one direction's pipeline (MTU, loss, queue, duplicate, corrupt, rate,
//!   delay/jitter/reorder); `loss`, `jitter`, `trace` (Mahimahi delivery opportunities) are
//!   its models;
//! - `pipeline`: one frame through one direction (shared by `Emulator` and `Segment`);
//! - `segment`: a shared segment of N ports (a learning-free bridge: per-port uplink and
//!   downlink pipelines, forwarding by destination MAC, one half-duplex medium for all);
//! - `halfduplex`: the shared medium of a half-duplex link or segment (and the channel state the
//!   CSMA medium shares);
//! - `csma`: the CSMA shared medium (ns-3's channel: busy for serialisation + propagation, backoff);
//! - `schedule`: piecewise changes over time and the distance trace;
//! - `positions`: each port's position over time and the distance between two ports (a segment's
//!   per-pair 802.11p loss; a two-sided link's distance);
//! - `profiles`: named link profiles with the source of each number;
//! - `stats`: counters and drop reasons;
//! - this file: the `Emulator` (one two-sided link), which owns both directions, the heap of frames waiting to
//!   leave, the medium and the schedule.
//!
//! The emulator's start (time 0 of schedules and traces) is the time given to
//! [`Emulator::start`], or else the first time passed to any method.
//!
//! Additions to the agreed API (small, additive): [`Emulator::start`],
//! [`Emulator::set_direction_up`], [`Emulator::next_change`], [`Emulator::config`],
//! [`DeliveryTrace::from_mahimahi`], [`profile`] / [`profile_names`]; the N-port [`Segment`] with
//! [`forwarding`], [`parse_mac`] and [`DirectionStats::sum`].

mod config;
mod csma;
mod direction;
mod halfduplex;
mod jitter;
mod loss;
mod pipeline;
mod positions;
mod profiles;
mod schedule;
mod segment;
mod stats;
mod trace;

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

pub use config::{
    ConfigError, Csma, DeliveryTrace, DirectionConfig, DistanceLoss, DistancePoint, HalfDuplex,
    Ieee80211pParams, JitterDist, LinkConfig, LossModel, PositionPoint, ScheduledChange,
    DEFAULT_QUEUE_PACKETS, ETHERNET_HEADER_BYTES, HELD_LIMIT_PACKETS, MAHIMAHI_OPPORTUNITY_BYTES,
};
pub use direction::serialisation_ns;
pub use loss::{ieee80211p_per, path_loss_db, per_from_ber, qpsk_ber, snr_db, table_loss};
pub use profiles::{parse_table as parse_profile_table, profile, profile_names, PROFILE_TABLE};
pub use segment::{
    forwarding, parse_mac, Delivery, ForwardCounts, Mac, PortStats, Segment, SegmentStats,
    MAX_PORTS,
};
pub use stats::{DirectionStats, DropCounts, DropReason, Stats};

use csma::Backoff;
use direction::Direction;
use halfduplex::Medium;
use pipeline::{Hop, Shared};
use positions::link_distance;
use schedule::Schedule;

/// The side a frame arrived from (`A`: it goes to B, through the `a_to_b` direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }
}

/// What happened to a frame given to `ingress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// Accepted; it (and a duplicate, if one was made) will come out of `egress`.
    Queued,
    Dropped(DropReason),
}

/// A frame waiting in the heap. Ordered by (due, seq) reversed, so the heap pops the earliest.
/// `P` is the destination: a `Side` in the two-sided `Emulator`, a port index in a `Segment`.
#[derive(Debug)]
pub(crate) struct Pending<P> {
    pub due_ns: u64,
    pub seq: u64,
    pub to: P,
    pub frame: Vec<u8>,
}

impl<P> PartialEq for Pending<P> {
    fn eq(&self, o: &Self) -> bool {
        self.due_ns == o.due_ns && self.seq == o.seq
    }
}
impl<P> Eq for Pending<P> {}
impl<P> PartialOrd for Pending<P> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Pending<P> {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.due_ns, o.seq).cmp(&(self.due_ns, self.seq))
    }
}

/// One emulated link, both directions.
#[derive(Debug)]
pub struct Emulator {
    cfg: LinkConfig,
    dirs: [Direction; 2],
    heap: BinaryHeap<Pending<Side>>,
    seq: u64,
    start_ns: Option<u64>,
    medium: Medium,
    backoff: Backoff,
    schedule: Schedule,
    schedule_applied: u64,
}

/// Counters of a CSMA medium (zero without one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CsmaCounts {
    /// Backoffs taken (a ready frame found the channel busy and waited).
    pub backoffs: u64,
    /// Frames aborted after `max_retries` backoffs (also counted as `queue_full`).
    pub aborted: u64,
}

/// The medium of a link: half-duplex, CSMA (with the propagation delay of the transmitting
/// direction), or none.
pub(crate) fn shared_medium<'a>(
    cfg: &'a LinkConfig,
    backoff: &'a mut Backoff,
    propagation_ns: u64,
) -> Option<Shared<'a>> {
    if let Some(h) = &cfg.half_duplex {
        return Some(Shared::HalfDuplex(h));
    }
    cfg.csma.as_ref().map(|c| Shared::Csma {
        cfg: c,
        backoff,
        propagation_ns,
    })
}

impl Emulator {
    /// Validates `cfg` and builds the emulator; `seed` fixes every random decision.
    pub fn new(cfg: LinkConfig, seed: u64) -> Result<Self, ConfigError> {
        cfg.validate()?;
        positions::check_count(&cfg, 2)?;
        let dirs = [
            Direction::new(cfg.a_to_b.clone(), seed, 0),
            Direction::new(cfg.b_to_a.clone(), seed, 1),
        ];
        let schedule = Schedule::new(cfg.schedule.clone());
        Ok(Emulator {
            cfg,
            dirs,
            heap: BinaryHeap::new(),
            seq: 0,
            start_ns: None,
            medium: Medium::default(),
            backoff: Backoff::new(seed),
            schedule,
            schedule_applied: 0,
        })
    }

    /// The CSMA medium's counters.
    pub fn csma_counts(&self) -> CsmaCounts {
        CsmaCounts {
            backoffs: self.backoff.backoffs,
            aborted: self.backoff.aborted,
        }
    }

    /// Sets time 0 of schedules and traces (only the first call, or the first time seen, counts).
    pub fn start(&mut self, now_ns: u64) {
        if self.start_ns.is_none() {
            self.start_ns = Some(now_ns);
        }
    }

    fn start_ns(&self) -> u64 {
        self.start_ns.unwrap_or(0)
    }

    /// The configuration in force (the last `set_config`, with scheduled changes applied).
    pub fn config(&self) -> LinkConfig {
        let mut c = self.cfg.clone();
        c.a_to_b = self.dirs[0].cfg.clone();
        c.b_to_a = self.dirs[1].cfg.clone();
        c
    }

    /// A frame arrived from `from` at `now_ns`.
    pub fn ingress(&mut self, now_ns: u64, from: Side, frame: Vec<u8>) -> Ingress {
        self.apply_due_changes(now_ns);
        let start = self.start_ns();
        let distance = link_distance(&self.cfg, now_ns.saturating_sub(start));
        let to = from.other();
        let Emulator {
            cfg,
            dirs,
            heap,
            seq,
            medium,
            backoff,
            ..
        } = self;
        let propagation = dirs[from.index()].cfg.delay_ns;
        let mut hop = Hop {
            medium: shared_medium(cfg, backoff, propagation).map(|s| (medium, s, from.index())),
            start_ns: start,
            distance_m: distance,
            per_pair: false,
        };
        pipeline::pass(
            &mut dirs[from.index()],
            now_ns,
            frame,
            &mut hop,
            &mut |due_ns, frame| {
                *seq += 1;
                heap.push(Pending {
                    due_ns,
                    seq: *seq,
                    to,
                    frame,
                });
            },
        )
    }

    /// Frames due at or before `now_ns`, in departure order, appended to `out` as
    /// (to, frame, due_ns).
    pub fn egress(&mut self, now_ns: u64, out: &mut Vec<(Side, Vec<u8>, u64)>) {
        self.start(now_ns);
        while let Some(rel) = self.schedule.next_at() {
            let at = self.start_ns().saturating_add(rel);
            if at > now_ns {
                break;
            }
            self.release(at, out);
            self.apply_due_changes(at);
        }
        self.release(now_ns, out);
    }

    fn release(&mut self, now_ns: u64, out: &mut Vec<(Side, Vec<u8>, u64)>) {
        while self.heap.peek().is_some_and(|p| p.due_ns <= now_ns) {
            let p = self.heap.pop().expect("peeked");
            self.dirs[p.to.other().index()].note_released(p.frame.len(), true);
            out.push((p.to, p.frame, p.due_ns));
        }
    }

    /// Earliest pending departure, or None when nothing is queued.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|p| p.due_ns)
    }

    /// Absolute time of the next scheduled change not yet applied (changes are applied by the
    /// first `ingress`/`egress` at or after it; an idle I/O loop may wake for it).
    pub fn next_change(&self) -> Option<u64> {
        self.schedule
            .next_at()
            .map(|rel| self.start_ns().saturating_add(rel))
    }

    /// Replaces the whole configuration at `now_ns`. Frames already queued keep their
    /// departure times. The new `schedule` continues from now: its changes at or before now
    /// (relative to the start) are history and are not applied.
    pub fn set_config(&mut self, now_ns: u64, cfg: LinkConfig) -> Result<(), ConfigError> {
        cfg.validate()?;
        positions::check_count(&cfg, 2)?;
        self.apply_due_changes(now_ns);
        self.dirs[0].set_config(cfg.a_to_b.clone());
        self.dirs[1].set_config(cfg.b_to_a.clone());
        self.schedule =
            Schedule::new_from(cfg.schedule.clone(), now_ns.saturating_sub(self.start_ns()));
        self.cfg = cfg;
        Ok(())
    }

    /// Link up or down (both directions) from `now_ns`. Going down loses every frame not yet
    /// delivered (dropped with reason `LinkDown`), as pulling a cable loses what is in flight.
    pub fn set_up(&mut self, now_ns: u64, up: bool) {
        self.start(now_ns);
        self.set_direction_up(now_ns, Side::A, up);
        self.set_direction_up(now_ns, Side::B, up);
    }

    /// Up or down for frames arriving from `from` only (a one-way partition).
    pub fn set_direction_up(&mut self, now_ns: u64, from: Side, up: bool) {
        self.start(now_ns);
        let di = from.index();
        if up {
            self.dirs[di].go_up();
            return;
        }
        if !self.dirs[di].up {
            return;
        }
        self.dirs[di].go_down(now_ns);
        let to = from.other();
        let heap = std::mem::take(&mut self.heap);
        let mut keep = Vec::with_capacity(heap.len());
        for p in heap.into_vec() {
            if p.to == to && p.due_ns > now_ns {
                self.dirs[di].note_released(p.frame.len(), false);
            } else {
                keep.push(p);
            }
        }
        self.heap = BinaryHeap::from(keep);
        if self.cfg.half_duplex.is_some() || self.cfg.csma.is_some() {
            let other_finish = self.dirs[from.other().index()].tx_finish_ns;
            self.medium.side_down(now_ns, other_finish);
        }
    }

    /// Counters of both directions.
    pub fn stats(&self) -> Stats {
        Stats {
            a_to_b: self.dirs[0].stats,
            b_to_a: self.dirs[1].stats,
            schedule_applied: self.schedule_applied,
        }
    }

    /// Applies every scheduled change due at or before `now_ns`, each at its own time.
    fn apply_due_changes(&mut self, now_ns: u64) {
        self.start(now_ns);
        let start = self.start_ns();
        while let Some(c) = self.schedule.pop_due(now_ns.saturating_sub(start)) {
            let at = start.saturating_add(c.at_ns);
            if let Some(d) = c.a_to_b {
                self.dirs[0].set_config(d);
            }
            if let Some(d) = c.b_to_a {
                self.dirs[1].set_config(d);
            }
            if let Some(up) = c.up {
                self.set_up(at, up);
            }
            self.schedule_applied += 1;
        }
    }
}
