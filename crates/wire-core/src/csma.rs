//! The CSMA shared medium, as ns-3's CSMA channel has it (src/csma/model/csma-channel.cc,
//! csma-net-device.cc, backoff.cc, ns-3 3.44), so the real Linux stack can be measured on the
//! channel model the ns3 backend simulates.
//!
//! ns-3's model, which this module follows:
//! - one transmitter at a time on the whole channel; a frame holds the channel for its
//!   serialisation (`CsmaChannel::TransmitStart` .. `TransmitEnd`, state TRANSMITTING) AND then
//!   for the propagation delay (state PROPAGATING until `PropagationCompleteEvent`); only then is
//!   the channel IDLE again. Receivers get the frame at the end of serialisation + the delay;
//! - a device whose head-of-line frame finds the channel not IDLE backs off
//!   (`CsmaNetDevice::TransmitStart`): retry n (n = 1, 2, ...) waits a whole number of slots drawn
//!   uniformly from [min_slots, 2^min(n, ceiling) - 1] (capped at max_slots; ns-3 truncates a
//!   uniform real, so the top value is only reached when the range is one value), then looks
//!   again; after `max_retries` backoffs the frame is aborted (`TransmitAbort`). A device that
//!   starts a frame resets its retry count;
//! - a device is ready for its next frame when its previous one ended serialisation plus the
//!   interframe gap (ns-3's default gap is 0), so even a lone sender backs off over its own
//!   frame's propagation delay;
//! - no collisions (ns-3 has none: the channel state is global, seen at once by every device).
//!
//! What differs from ns-3's event-driven model: here a frame's start is computed when it arrives
//! (the emulator schedules ahead), in arrival order across transmitters, against the time the
//! channel is free after every frame scheduled before it. A frame that arrives later never takes
//! the channel before one already scheduled, whereas in ns-3 two devices backing off over the same
//! busy period race (the one whose retry comes first after the channel goes idle wins). Per frame
//! and per sender the timing is ns-3's; which of two contending senders goes first can differ.
//!
//! Owns the channel's timing and the backoff draws (one ChaCha stream); the queue limits and the
//! frames themselves stay with the callers (`pipeline`, `Direction`). The state of the channel (when
//! it is free, who sent last) is `halfduplex::Medium`'s, shared with the half-duplex medium.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::Csma;
use crate::direction::serialisation_ns;
use crate::halfduplex::Medium;

/// Random stream of the backoff draws (far from the directions' streams `16 d + k` and the
/// segment's per-pair streams `2^32 + p`).
pub const BACKOFF_STREAM: u64 = 1 << 40;

/// The backoff draws and the channel's counters.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    rng: ChaCha8Rng,
    /// Backoffs taken (every time a ready frame found the channel busy and waited).
    pub backoffs: u64,
    /// Frames aborted after `max_retries` backoffs.
    pub aborted: u64,
}

impl Backoff {
    pub fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(BACKOFF_STREAM);
        Backoff {
            rng,
            backoffs: 0,
            aborted: 0,
        }
    }

    /// Slots of backoff number `retry` (1-based), as ns-3's `Backoff::GetBackoffTime` draws them.
    pub fn slots(&mut self, retry: u32, cfg: &Csma) -> u64 {
        let ceiling = if cfg.ceiling > 0 && retry > cfg.ceiling {
            cfg.ceiling
        } else {
            retry
        };
        let top = ((1u64 << ceiling.min(63)) - 1).min(cfg.max_slots as u64);
        let lo = cfg.min_slots as u64;
        if top <= lo {
            return lo; // UniformRandomVariable::GetValue(min, max) with max <= min gives min
        }
        // (uint32_t) of a uniform real in [lo, top): a whole number in lo ..= top - 1
        self.rng.gen_range(lo..top)
    }

    /// A frame of `bytes` on the wire whose sender is ready at `ready_ns` (arrival, or the end of
    /// its previous frame's serialisation plus the interframe gap), from transmitter `from`.
    /// Returns (start, end of serialisation), or None if it was aborted after `max_retries`
    /// backoffs. The channel is busy until the end of serialisation + `propagation_ns`.
    pub fn transmit(
        &mut self,
        medium: &mut Medium,
        ready_ns: u64,
        from: usize,
        bytes: u64,
        rate_bps: Option<u64>,
        propagation_ns: u64,
        cfg: &Csma,
    ) -> Option<(u64, u64)> {
        let mut t = ready_ns;
        let mut retries = 0u32;
        while t < medium.free_at_ns {
            if retries >= cfg.max_retries {
                self.aborted += 1;
                return None;
            }
            retries += 1;
            self.backoffs += 1;
            t += self.slots(retries, cfg) * cfg.slot_ns;
        }
        let end = t + rate_bps.map_or(0, |r| serialisation_ns(bytes, r));
        medium.free_at_ns = end + propagation_ns;
        medium.last = Some(from);
        Some((t, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns3() -> Csma {
        Csma::default()
    }

    #[test]
    fn defaults_are_ns3s() {
        let c = ns3();
        assert_eq!(
            (
                c.slot_ns,
                c.min_slots,
                c.max_slots,
                c.ceiling,
                c.max_retries,
                c.interframe_gap_ns
            ),
            (1000, 1, 1000, 10, 1000, 0)
        );
    }

    #[test]
    fn slots_follow_ns3_ranges() {
        let c = ns3();
        let mut b = Backoff::new(7);
        // retry 1: 2^1 - 1 = 1 = min: always one slot
        assert!((0..100).all(|_| b.slots(1, &c) == 1));
        // retry 3: [1, 7) -> 1..=6, every value seen
        let mut seen = [false; 8];
        for _ in 0..2000 {
            let s = b.slots(3, &c) as usize;
            assert!((1..=6).contains(&s), "{s}");
            seen[s] = true;
        }
        assert!(seen[1..=6].iter().all(|x| *x));
        // past the ceiling (10): 2^10 - 1 = 1023 capped at max_slots 1000 -> 1..=999
        let big: Vec<u64> = (0..5000).map(|_| b.slots(25, &c)).collect();
        assert!(big.iter().all(|s| (1..=999).contains(s)));
        assert!(*big.iter().max().unwrap() > 900);
    }

    #[test]
    fn idle_channel_starts_at_once_and_is_busy_for_serialisation_plus_delay() {
        let c = ns3();
        let mut m = Medium::default();
        let mut b = Backoff::new(1);
        // 1250 B at 10 Mbit/s = 1 ms; 2 ms propagation
        let (s, e) = b
            .transmit(&mut m, 5_000, 0, 1250, Some(10_000_000), 2_000_000, &c)
            .unwrap();
        assert_eq!((s, e), (5_000, 1_005_000));
        assert_eq!(m.free_at_ns, 3_005_000);
        assert_eq!(b.backoffs, 0);
    }

    #[test]
    fn busy_channel_backs_off_to_a_retry_after_it_is_free() {
        let c = ns3();
        let mut m = Medium::default();
        let mut b = Backoff::new(3);
        b.transmit(&mut m, 0, 0, 1250, Some(10_000_000), 2_000_000, &c)
            .unwrap();
        // another sender, ready at 0.5 ms: waits until >= 3 ms (free), at a whole number of slots
        let (s, e) = b
            .transmit(&mut m, 500_000, 1, 1250, Some(10_000_000), 2_000_000, &c)
            .unwrap();
        assert!(s >= 3_000_000, "{s}");
        assert_eq!((s - 500_000) % 1000, 0);
        // the retry before the start still fell inside the busy period: at most one backoff late
        // (a backoff is at most 999 slots)
        assert!(s < 3_000_000 + 1_000_000, "{s}");
        assert_eq!(e, s + 1_000_000);
        assert!(b.backoffs >= 9, "{}", b.backoffs); // 1+1+..: about ten retries to span 2.5 ms
                                                    // ready exactly when the channel goes idle: no backoff
        let before = b.backoffs;
        let free = m.free_at_ns;
        let (s2, _) = b
            .transmit(&mut m, free, 0, 100, Some(10_000_000), 0, &c)
            .unwrap();
        assert_eq!((s2, b.backoffs), (free, before));
    }

    #[test]
    fn aborted_after_max_retries() {
        let c = Csma {
            max_retries: 3,
            ..ns3()
        };
        let mut m = Medium::default();
        let mut b = Backoff::new(1);
        b.transmit(&mut m, 0, 0, 1250, Some(10_000_000), 2_000_000, &c)
            .unwrap();
        // retries of 1 + <=2 + <=6 slots never reach 3 ms
        assert_eq!(b.transmit(&mut m, 0, 1, 100, Some(10_000_000), 0, &c), None);
        assert_eq!((b.aborted, b.backoffs), (1, 3));
    }

    #[test]
    fn same_seed_same_starts() {
        let c = ns3();
        let run = |seed| {
            let mut m = Medium::default();
            let mut b = Backoff::new(seed);
            (0..50u64)
                .map(|i| {
                    b.transmit(
                        &mut m,
                        i * 100_000,
                        (i % 3) as usize,
                        500,
                        Some(5_000_000),
                        2_000_000,
                        &c,
                    )
                    .unwrap()
                    .0
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }
}
