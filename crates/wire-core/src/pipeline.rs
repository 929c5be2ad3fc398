//! One frame through one direction's pipeline, shared by the two-sided `Emulator` and the N-port
//! `Segment`: up? -> MTU -> loss -> (half-duplex frame limit) -> drop-tail queue (and modem buffer)
//! -> duplicate -> corrupt -> serialise (own serialiser, or the shared half-duplex or CSMA medium)
//! -> delay.
//!
//! Owns only the order of those steps and the per-copy bookkeeping; the steps themselves are
//! `Direction`'s, the medium's timing is `halfduplex`'s or `csma`'s, and what happens to an
//! admitted copy (which heap, which destination) is the caller's `emit`.

use crate::config::{Csma, HalfDuplex};
use crate::csma::Backoff;
use crate::direction::Direction;
use crate::halfduplex::Medium;
use crate::stats::DropReason;
use crate::Ingress;

/// Which shared medium a direction transmits on, with its settings.
pub(crate) enum Shared<'a> {
    /// One transmitter at a time, a turnaround when the transmitter changes.
    HalfDuplex(&'a HalfDuplex),
    /// ns-3's CSMA channel: busy for serialisation + `propagation_ns`, backoff when busy.
    Csma {
        cfg: &'a Csma,
        backoff: &'a mut Backoff,
        /// How long the channel stays busy after a frame's serialisation.
        propagation_ns: u64,
    },
}

/// What one pass shares with the rest of the link.
pub(crate) struct Hop<'a> {
    /// The shared medium this direction transmits on, its kind and settings, and the index of the
    /// transmitter. None: own serialiser.
    pub medium: Option<(&'a mut Medium, Shared<'a>, usize)>,
    /// The emulator's start (time 0 of delivery traces).
    pub start_ns: u64,
    /// Distance between the ends now (distance trace), for the 802.11p frame-error model.
    pub distance_m: Option<f64>,
    /// A segment with positions: a distance-based loss model is decided per pair by the segment
    /// (between the medium and the receiver's downlink), so this direction skips it.
    pub per_pair: bool,
}

/// Runs `frame` (arrived at `now_ns`) through `d`. Each admitted copy (two when duplicated) is given to
/// `emit(due_ns, frame)`; drops are counted in `d`'s stats. Returns the verdict on the first copy.
pub(crate) fn pass(
    d: &mut Direction,
    now_ns: u64,
    mut frame: Vec<u8>,
    hop: &mut Hop<'_>,
    emit: &mut impl FnMut(u64, Vec<u8>),
) -> Ingress {
    let len = frame.len();
    d.stats.packets_in += 1;
    d.stats.bytes_in += len as u64;
    let hd = match &hop.medium {
        Some((_, Shared::HalfDuplex(h), _)) => Some(*h),
        _ => None,
    };
    let shared = hop.medium.is_some();
    let mut verdict = d.pre_admit(len, hop.distance_m, hop.per_pair);
    if verdict.is_ok()
        && hd
            .and_then(|h| h.max_frame_bytes)
            .is_some_and(|max| len > max as usize)
    {
        verdict = Err(DropReason::TooLarge);
    }
    if let Err(r) = verdict {
        d.stats.drops.add(r);
        return Ingress::Dropped(r);
    }
    let copies = if d.draw_duplicate() { 2 } else { 1 };
    let mut first = Ingress::Queued;
    for copy in 0..copies {
        if let Err(r) = admit_one(d, now_ns, len, hd, shared) {
            d.stats.drops.add(r);
            if copy == 0 {
                first = Ingress::Dropped(r);
                break;
            }
            continue;
        }
        let mut f = if copy + 1 < copies {
            frame.clone()
        } else {
            std::mem::take(&mut frame)
        };
        if copy == 1 {
            d.stats.duplicated += 1;
        }
        d.maybe_corrupt(&mut f);
        let bytes = len as u64 + d.cfg.overhead_bytes as u64;
        let tx_end = match &mut hop.medium {
            Some((medium, Shared::HalfDuplex(h), who)) => {
                let (_, end) =
                    medium.transmit(now_ns, *who, bytes, d.cfg.rate_bps, h.turnaround_ns);
                end
            }
            Some((
                medium,
                Shared::Csma {
                    cfg,
                    backoff,
                    propagation_ns,
                },
                who,
            )) => {
                // ready when the sender's previous frame is serialised (+ the gap), FIFO per sender
                let ready = if d.tx_finish_ns > 0 {
                    now_ns.max(d.tx_finish_ns + cfg.interframe_gap_ns)
                } else {
                    now_ns
                };
                match backoff.transmit(
                    medium,
                    ready,
                    *who,
                    bytes,
                    d.cfg.rate_bps,
                    *propagation_ns,
                    cfg,
                ) {
                    Some((_, end)) => end,
                    None => {
                        // ns-3's TransmitAbort: the frame never left its sender's queue
                        d.stats.drops.add(DropReason::QueueFull);
                        if copy == 0 {
                            first = Ingress::Dropped(DropReason::QueueFull);
                            break;
                        }
                        continue;
                    }
                }
            }
            None => d.serialise(now_ns, len, hop.start_ns),
        };
        if hop.medium.is_some() {
            d.note_serialised(tx_end, len);
        }
        let due = d.departure(tx_end);
        d.note_held(len);
        d.note_high_water(now_ns, shared);
        emit(due, f);
    }
    first
}

/// Queue limits (`QueueFull`) and the half-duplex buffer (`Overrun`) for one copy.
fn admit_one(
    d: &mut Direction,
    now_ns: u64,
    len: usize,
    hd: Option<&HalfDuplex>,
    shared: bool,
) -> Result<(), DropReason> {
    d.queue_admit(now_ns, len, shared)?;
    if let Some(buf) = hd.and_then(|h| h.buffer_bytes) {
        if d.backlog_bytes() + len as u64 > buf {
            return Err(DropReason::Overrun);
        }
    }
    Ok(())
}
