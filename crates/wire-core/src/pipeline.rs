//! One frame through one direction's pipeline, shared by the two-sided `Emulator` and the N-port
//! `Segment`: up? -> MTU -> loss -> (half-duplex frame limit) -> drop-tail queue (and modem buffer)
//! -> duplicate -> corrupt -> serialise (own serialiser, or the shared half-duplex medium) -> delay.
//!
//! Owns only the order of those steps and the per-copy bookkeeping; the steps themselves are
//! `Direction`'s, the medium's timing is `halfduplex`'s, and what happens to an admitted copy
//! (which heap, which destination) is the caller's `emit`.

use crate::config::HalfDuplex;
use crate::direction::Direction;
use crate::halfduplex::Medium;
use crate::stats::DropReason;
use crate::Ingress;

/// What one pass shares with the rest of the link.
pub(crate) struct Hop<'a> {
    /// The half-duplex medium this direction transmits on, with its settings and the index of the
    /// transmitter (a turnaround is taken when the transmitter changes). None: own serialiser.
    pub medium: Option<(&'a mut Medium, &'a HalfDuplex, usize)>,
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
    let hd = hop.medium.as_ref().map(|(_, h, _)| *h);
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
        if let Err(r) = admit_one(d, now_ns, len, hd) {
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
        let tx_end = match &mut hop.medium {
            Some((medium, h, who)) => {
                let bytes = len as u64 + d.cfg.overhead_bytes as u64;
                let (_, end) =
                    medium.transmit(now_ns, *who, bytes, d.cfg.rate_bps, h.turnaround_ns);
                d.note_serialised(end, len);
                end
            }
            None => d.serialise(now_ns, len, hop.start_ns),
        };
        let due = d.departure(tx_end);
        d.note_held(len);
        d.note_high_water(now_ns, hd.is_some());
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
) -> Result<(), DropReason> {
    d.queue_admit(now_ns, len, hd.is_some())?;
    if let Some(buf) = hd.and_then(|h| h.buffer_bytes) {
        if d.backlog_bytes() + len as u64 > buf {
            return Err(DropReason::Overrun);
        }
    }
    Ok(())
}
