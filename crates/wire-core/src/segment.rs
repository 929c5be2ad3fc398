//! A shared segment of N ports (N >= 2): one `Segment` serves every host of a `between = [a, b, c, ...]`
//! link, as a learning-free bridge with impairments.
//!
//! Owns the forwarding decision (`forwarding`: unicast to the one port whose host owns the destination
//! MAC, broadcast / multicast / unknown destinations to every other port, never back to the ingress
//! port), the two stages a frame goes through, and the segment's counters. The per-frame steps are
//! `pipeline::pass` over `Direction`s, as in the two-sided `Emulator`.
//!
//! Model (docs/scenario-format.md, shared segments): each port has an *uplink* (host -> medium, the
//! configuration's `a_to_b`, the scenario's `forward`) and a *downlink* (medium -> host, `b_to_a`,
//! `reverse`). A frame from A to B passes A's uplink, then B's downlink; a flooded frame is copied after
//! the uplink and each copy passes its own destination's downlink. With `half_duplex`, the uplinks all
//! transmit on ONE medium (one transmitter at a time, a turnaround whenever the transmitter changes, at
//! the uplink's `rate_bps`); the downlinks then only add their own impairments.
//!
//! Per-pair links (`positions`): with a position per port, a distance-based loss model (`ieee80211p`,
//! `distance_table`)
//! is no longer drawn in the uplink or downlink but once per copy, between the medium and the
//! receiver's downlink, at the distance between sender and receiver when the frame was sent (a
//! flooded frame's copies each draw their own). The uplink's model is used (the transmitter's radio),
//! or the downlink's if the uplink has none. Everything else of the segment is unchanged.
//!
//! Time and seeds as in the `Emulator`: time is passed in (non-decreasing), port `p`'s uplink draws
//! from random stream `2p`, its downlink from `2p + 1`, the per-pair decisions of copies received by
//! port `p` from stream `RADIO_STREAM_BASE + p`.

use std::collections::BinaryHeap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::config::{ConfigError, LinkConfig, ETHERNET_HEADER_BYTES};
use crate::csma::Backoff;
use crate::direction::Direction;
use crate::halfduplex::Medium;
use crate::loss::distance_draw;
use crate::pipeline::{self, Hop};
use crate::positions::{self, distance_between};
use crate::schedule::{distance_at, Schedule};
use crate::stats::{DirectionStats, DropReason};
use crate::{Ingress, Pending, Side};

/// An Ethernet address.
pub type Mac = [u8; 6];

/// Most ports of one segment (the hosts of one /24 subnet).
pub const MAX_PORTS: usize = 254;

/// First random stream of the per-pair decisions (receiving port p: this + p), far above the
/// directions' streams (direction d, decision k: 16 d + k, d < 2 * MAX_PORTS).
pub const RADIO_STREAM_BASE: u64 = 1 << 32;

/// Where a frame that crossed the medium goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// To the one port whose host owns the destination MAC.
    Unicast(usize),
    /// Broadcast, multicast, or a destination no port owns: a copy to every port but the ingress one.
    Flood,
    /// Nowhere: addressed to the sender's own host, or shorter than an Ethernet header.
    Filtered,
}

/// The forwarding decision for `frame` arriving on port `from`, given each port's host MAC (None: not
/// known, that host is reached by flooding only).
pub fn forwarding(macs: &[Option<Mac>], from: usize, frame: &[u8]) -> Delivery {
    if frame.len() < ETHERNET_HEADER_BYTES {
        return Delivery::Filtered;
    }
    let dst = &frame[..6];
    if dst[0] & 1 == 1 {
        return Delivery::Flood; // the group bit: broadcast and multicast
    }
    match macs.iter().position(|m| m.is_some_and(|m| m[..] == *dst)) {
        Some(j) if j == from => Delivery::Filtered,
        Some(j) => Delivery::Unicast(j),
        None => Delivery::Flood,
    }
}

/// How the frames that crossed the medium were forwarded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ForwardCounts {
    /// Frames sent to one port.
    pub unicast: u64,
    /// Frames copied to every other port (broadcast, multicast, unknown unicast).
    pub flooded: u64,
    /// Frames delivered nowhere (see `Delivery::Filtered`).
    pub filtered: u64,
    /// Copies handed to downlinks (one per unicast frame, N - 1 per flooded frame).
    pub copies: u64,
}

/// One port's counters: frames from its host into the segment, and from the segment to its host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PortStats {
    pub uplink: DirectionStats,
    pub downlink: DirectionStats,
}

/// A segment's counters. `a_to_b` / `b_to_a` are all uplinks / all downlinks together, so a reader of
/// the two-sided `Stats` (forward / reverse) reads a segment the same way; `ports` has each port's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SegmentStats {
    pub a_to_b: DirectionStats,
    pub b_to_a: DirectionStats,
    pub schedule_applied: u64,
    pub ports: Vec<PortStats>,
    pub forwarding: ForwardCounts,
}

/// One emulated shared segment.
#[derive(Debug)]
pub struct Segment {
    cfg: LinkConfig,
    macs: Vec<Option<Mac>>,
    up: Vec<Direction>,
    down: Vec<Direction>,
    /// Frames in their uplink: due when they have crossed the medium; `to` is (source port, time
    /// the frame was sent into the uplink).
    medium_q: BinaryHeap<Pending<(usize, u64)>>,
    /// Frames in a downlink: due when they leave to their host; `to` is the destination port.
    out_q: BinaryHeap<Pending<usize>>,
    seq: u64,
    start_ns: Option<u64>,
    medium: Medium,
    backoff: Backoff,
    schedule: Schedule,
    schedule_applied: u64,
    fwd: ForwardCounts,
    /// Per receiving port: the stream of its per-pair loss decisions (used with `positions`).
    radio: Vec<ChaCha8Rng>,
}

impl Segment {
    /// Validates `cfg`, builds one port per entry of `macs` (each port's host MAC, if known).
    pub fn new(cfg: LinkConfig, seed: u64, macs: Vec<Option<Mac>>) -> Result<Self, ConfigError> {
        cfg.validate()?;
        if !(2..=MAX_PORTS).contains(&macs.len()) {
            return Err(ConfigError::invalid("ports", macs.len(), "2 to 254 ports"));
        }
        for (i, m) in macs.iter().enumerate() {
            if let Some(m) = m {
                if m[0] & 1 == 1 {
                    return Err(ConfigError::invalid(
                        &format!("ports[{i}].mac"),
                        fmt_mac(m),
                        "a unicast MAC",
                    ));
                }
                if macs[..i].contains(&Some(*m)) {
                    return Err(ConfigError::invalid(
                        &format!("ports[{i}].mac"),
                        fmt_mac(m),
                        "a MAC no other port has",
                    ));
                }
            }
        }
        positions::check_count(&cfg, macs.len())?;
        let n = macs.len() as u64;
        let radio = (0..n)
            .map(|p| {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(RADIO_STREAM_BASE + p);
                r
            })
            .collect();
        let up = (0..n)
            .map(|p| Direction::new(cfg.a_to_b.clone(), seed, 2 * p))
            .collect();
        let down = (0..n)
            .map(|p| Direction::new(cfg.b_to_a.clone(), seed, 2 * p + 1))
            .collect();
        let schedule = Schedule::new(cfg.schedule.clone());
        Ok(Segment {
            cfg,
            macs,
            up,
            down,
            medium_q: BinaryHeap::new(),
            out_q: BinaryHeap::new(),
            seq: 0,
            start_ns: None,
            medium: Medium::default(),
            backoff: Backoff::new(seed),
            schedule,
            schedule_applied: 0,
            fwd: ForwardCounts::default(),
            radio,
        })
    }

    /// The CSMA medium's counters.
    pub fn csma_counts(&self) -> crate::CsmaCounts {
        crate::CsmaCounts {
            backoffs: self.backoff.backoffs,
            aborted: self.backoff.aborted,
        }
    }

    pub fn ports(&self) -> usize {
        self.macs.len()
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
        c.a_to_b = self.up[0].cfg.clone();
        c.b_to_a = self.down[0].cfg.clone();
        c
    }

    /// A frame arrived on `port` (from its host) at `now_ns`. Panics if `port` is not a port.
    pub fn ingress(&mut self, now_ns: u64, port: usize, frame: Vec<u8>) -> Ingress {
        self.apply_due_changes(now_ns);
        self.advance(now_ns);
        let start = self.start_ns();
        let distance = distance_at(&self.cfg.distance_trace, now_ns.saturating_sub(start));
        let Segment {
            cfg,
            up,
            medium_q,
            seq,
            medium,
            backoff,
            down,
            ..
        } = self;
        // a CSMA segment's channel is busy for the whole one-way delay: the uplink's and the
        // downlink's (as the ns3 backend's CSMA channel has Delay = forward + reverse)
        let propagation = up[port].cfg.delay_ns + down[0].cfg.delay_ns;
        let mut hop = Hop {
            medium: crate::shared_medium(cfg, backoff, propagation).map(|s| (medium, s, port)),
            start_ns: start,
            distance_m: distance,
            per_pair: !cfg.positions.is_empty(),
        };
        let verdict = pipeline::pass(
            &mut up[port],
            now_ns,
            frame,
            &mut hop,
            &mut |due_ns, frame| {
                *seq += 1;
                medium_q.push(Pending {
                    due_ns,
                    seq: *seq,
                    to: (port, now_ns),
                    frame,
                });
            },
        );
        self.advance(now_ns);
        verdict
    }

    /// Frames that have crossed the medium by `now_ns`, in medium order, into their destinations'
    /// downlinks (each at the time it crossed).
    fn advance(&mut self, now_ns: u64) {
        while self.medium_q.peek().is_some_and(|p| p.due_ns <= now_ns) {
            let p = self.medium_q.pop().expect("peeked");
            let (t, (src, sent)) = (p.due_ns, p.to);
            self.up[src].note_released(p.frame.len(), true);
            match forwarding(&self.macs, src, &p.frame) {
                Delivery::Filtered => self.fwd.filtered += 1,
                Delivery::Unicast(j) => {
                    self.fwd.unicast += 1;
                    self.downlink(t, (src, sent), j, p.frame);
                }
                Delivery::Flood => {
                    self.fwd.flooded += 1;
                    let last = (0..self.ports())
                        .rev()
                        .find(|&j| j != src)
                        .expect("2 ports or more");
                    for j in (0..last).filter(|&j| j != src) {
                        self.downlink(t, (src, sent), j, p.frame.clone());
                    }
                    self.downlink(t, (src, sent), last, p.frame);
                }
            }
        }
    }

    /// A copy that crossed the medium at `t`, from `src` (sent into its uplink at `sent`), into
    /// `port`'s downlink; with positions, first the per-pair loss decision.
    fn downlink(&mut self, t: u64, (src, sent): (usize, u64), port: usize, frame: Vec<u8>) {
        self.fwd.copies += 1;
        let start = self.start_ns();
        let per_pair = !self.cfg.positions.is_empty();
        let lost = per_pair
            .then(|| self.pair_lost(src, sent.saturating_sub(start), port, frame.len()))
            .flatten();
        if let Some(reason) = lost {
            let d = &mut self.down[port];
            d.stats.packets_in += 1;
            d.stats.bytes_in += frame.len() as u64;
            d.stats.drops.add(reason);
            return;
        }
        let distance = distance_at(&self.cfg.distance_trace, t.saturating_sub(start));
        let Segment {
            down, out_q, seq, ..
        } = self;
        let mut hop = Hop {
            medium: None,
            start_ns: start,
            distance_m: distance,
            per_pair,
        };
        pipeline::pass(&mut down[port], t, frame, &mut hop, &mut |due_ns, frame| {
            *seq += 1;
            out_q.push(Pending {
                due_ns,
                seq: *seq,
                to: port,
                frame,
            });
        });
    }

    /// The per-pair decision for a copy of `len` bytes from `src` to `dst`, sent at `rel_ns` after the
    /// start: the uplink's distance-based model (else the downlink's) at the distance between the two
    /// ports then, drawn from `dst`'s stream; Some(reason) if the copy is lost. No distance-based model:
    /// never lost here.
    fn pair_lost(&mut self, src: usize, rel_ns: u64, dst: usize, len: usize) -> Option<DropReason> {
        let (up, down) = (&self.up[src].cfg.loss, &self.down[dst].cfg.loss);
        let model = if up.is_distance_based() { up } else { down };
        if !model.is_distance_based() {
            return None;
        }
        let pos = &self.cfg.positions;
        let d = distance_between(&pos[src], &pos[dst], rel_ns)?;
        distance_draw(model, &mut self.radio[dst], len, d)
    }

    /// Frames due at or before `now_ns`, in departure order, appended to `out` as (destination port,
    /// frame, due_ns).
    pub fn egress(&mut self, now_ns: u64, out: &mut Vec<(usize, Vec<u8>, u64)>) {
        self.start(now_ns);
        while let Some(rel) = self.schedule.next_at() {
            let at = self.start_ns().saturating_add(rel);
            if at > now_ns {
                break;
            }
            self.advance(at);
            self.release(at, out);
            self.apply_due_changes(at);
        }
        self.advance(now_ns);
        self.release(now_ns, out);
    }

    fn release(&mut self, now_ns: u64, out: &mut Vec<(usize, Vec<u8>, u64)>) {
        while self.out_q.peek().is_some_and(|p| p.due_ns <= now_ns) {
            let p = self.out_q.pop().expect("peeked");
            self.down[p.to].note_released(p.frame.len(), true);
            out.push((p.to, p.frame, p.due_ns));
        }
    }

    /// Earliest time something is due (a frame crossing the medium or leaving), None when empty.
    pub fn next_due(&self) -> Option<u64> {
        let crossing = self.medium_q.peek().map(|p| p.due_ns);
        let leaving = self.out_q.peek().map(|p| p.due_ns);
        crossing.into_iter().chain(leaving).min()
    }

    /// Absolute time of the next scheduled change not yet applied.
    pub fn next_change(&self) -> Option<u64> {
        self.schedule
            .next_at()
            .map(|rel| self.start_ns().saturating_add(rel))
    }

    /// Replaces the whole configuration at `now_ns` (every uplink gets `a_to_b`, every downlink
    /// `b_to_a`); as `Emulator::set_config`.
    pub fn set_config(&mut self, now_ns: u64, cfg: LinkConfig) -> Result<(), ConfigError> {
        cfg.validate()?;
        positions::check_count(&cfg, self.ports())?;
        self.apply_due_changes(now_ns);
        self.up
            .iter_mut()
            .for_each(|d| d.set_config(cfg.a_to_b.clone()));
        self.down
            .iter_mut()
            .for_each(|d| d.set_config(cfg.b_to_a.clone()));
        self.schedule =
            Schedule::new_from(cfg.schedule.clone(), now_ns.saturating_sub(self.start_ns()));
        self.cfg = cfg;
        Ok(())
    }

    /// The whole segment up or down from `now_ns`; down loses every frame in flight (`LinkDown`).
    pub fn set_up(&mut self, now_ns: u64, up: bool) {
        self.set_ports_up(now_ns, None, true, true, up);
    }

    /// As `Emulator::set_direction_up`: `Side::A` is every uplink (frames into the segment), `Side::B`
    /// every downlink (frames out of it).
    pub fn set_direction_up(&mut self, now_ns: u64, from: Side, up: bool) {
        self.set_ports_up(now_ns, None, from == Side::A, from == Side::B, up);
    }

    /// One port (`Some(p)`) or all (`None`): its uplink and/or downlink up or down from `now_ns`.
    /// Cutting one port's both directions isolates that host from the others (a partition).
    pub fn set_ports_up(
        &mut self,
        now_ns: u64,
        port: Option<usize>,
        uplink: bool,
        downlink: bool,
        up: bool,
    ) {
        self.start(now_ns);
        self.advance(now_ns);
        let ports: Vec<usize> = match port {
            Some(p) => vec![p],
            None => (0..self.ports()).collect(),
        };
        for p in ports {
            if uplink {
                go(
                    &mut self.up[p],
                    &mut self.medium_q,
                    |t| t.0 == p,
                    now_ns,
                    up,
                );
            }
            if downlink {
                go(&mut self.down[p], &mut self.out_q, |t| *t == p, now_ns, up);
            }
        }
        if (self.cfg.half_duplex.is_some() || self.cfg.csma.is_some()) && uplink && !up {
            let busy = self
                .up
                .iter()
                .filter(|d| d.up)
                .map(|d| d.tx_finish_ns)
                .max()
                .unwrap_or(0);
            self.medium.side_down(now_ns, busy);
        }
    }

    /// Counters of every port, and of all uplinks / downlinks together.
    pub fn stats(&self) -> SegmentStats {
        SegmentStats {
            a_to_b: DirectionStats::sum(self.up.iter().map(|d| &d.stats)),
            b_to_a: DirectionStats::sum(self.down.iter().map(|d| &d.stats)),
            schedule_applied: self.schedule_applied,
            ports: self
                .up
                .iter()
                .zip(&self.down)
                .map(|(u, d)| PortStats {
                    uplink: u.stats,
                    downlink: d.stats,
                })
                .collect(),
            forwarding: self.fwd,
        }
    }

    fn apply_due_changes(&mut self, now_ns: u64) {
        self.start(now_ns);
        let start = self.start_ns();
        while let Some(c) = self.schedule.pop_due(now_ns.saturating_sub(start)) {
            let at = start.saturating_add(c.at_ns);
            if let Some(d) = c.a_to_b {
                self.up.iter_mut().for_each(|u| u.set_config(d.clone()));
            }
            if let Some(d) = c.b_to_a {
                self.down.iter_mut().for_each(|u| u.set_config(d.clone()));
            }
            if let Some(up) = c.up {
                self.set_up(at, up);
            }
            self.schedule_applied += 1;
        }
    }
}

/// One direction of a port up or down; going down drops its frames not yet due (`LinkDown`): those of
/// `q` whose `to` is the port's (`mine`).
fn go<P>(
    d: &mut Direction,
    q: &mut BinaryHeap<Pending<P>>,
    mine: impl Fn(&P) -> bool,
    now_ns: u64,
    up: bool,
) {
    if up {
        d.go_up();
        return;
    }
    if !d.up {
        return;
    }
    d.go_down(now_ns);
    let mut keep = Vec::with_capacity(q.len());
    for p in std::mem::take(q).into_vec() {
        if mine(&p.to) && p.due_ns > now_ns {
            d.note_released(p.frame.len(), false);
        } else {
            keep.push(p);
        }
    }
    *q = BinaryHeap::from(keep);
}

fn fmt_mac(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses "02:00:5e:10:00:01" (case-insensitive); None if it is not six hex bytes.
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}
