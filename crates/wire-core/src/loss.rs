//! Loss decisions: Bernoulli, Gilbert-Elliott, the 4-state Markov model, size-dependent bit
//! errors and the 802.11p distance/size frame error model.
//!
//! Owns the state of each model and the per-frame decision; it draws its randomness from the
//! stream it is given and knows nothing of queues or time (the 802.11p model gets the current
//! distance as an argument). The Markov models follow Linux's net/sched/sch_netem.c
//! (`loss_gilb_ell`, `loss_4state`) and tc-netem(8), so the same parameters mean the same thing.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::config::{DistanceLoss, Ieee80211pParams, LossModel};
use crate::stats::DropReason;

/// Boltzmann's constant times 290 K, as a noise power density: -174 dBm/Hz (ITU-R P.372).
pub const THERMAL_NOISE_DBM_PER_HZ: f64 = -174.0;

/// State of a loss model between frames.
#[derive(Debug, Clone)]
pub struct LossState {
    model: LossModel,
    /// Gilbert-Elliott: false = good, true = bad. Markov4: unused.
    bad: bool,
    /// Markov4 state, 1..=4 as in q_netem.c (1 = TX_IN_GAP_PERIOD, 2 = TX_IN_BURST_PERIOD,
    /// 3 = LOST_IN_BURST_PERIOD, 4 = LOST_IN_GAP_PERIOD).
    m4: u8,
}

impl LossState {
    pub fn new(model: LossModel) -> Self {
        LossState {
            model,
            bad: false,
            m4: 1,
        }
    }

    /// Replaces the model; the Markov state carries over when the kind of model is the same
    /// (a schedule that changes `p` keeps the channel in the state it was in).
    pub fn set_model(&mut self, model: LossModel) {
        if std::mem::discriminant(&model) != std::mem::discriminant(&self.model) {
            self.bad = false;
            self.m4 = 1;
        }
        self.model = model;
    }

    /// Decides the fate of one frame of `len` bytes. `distance_m` overrides the 802.11p
    /// model's static distance (from the link's distance trace).
    pub fn decide(
        &mut self,
        rng: &mut ChaCha8Rng,
        len: usize,
        distance_m: Option<f64>,
    ) -> Option<DropReason> {
        match &self.model {
            LossModel::None => None,
            LossModel::Bernoulli { p } => (rng.gen::<f64>() < *p).then_some(DropReason::Loss),
            LossModel::GilbertElliott { p, r, h, k } => {
                // q_netem.c loss_gilb_ell: first the transition out of the current state, then
                // the loss draw with the loss probability of the state the frame arrived in.
                let (p, r, h, k) = (*p, *r, *h, *k);
                let t: f64 = rng.gen();
                let l: f64 = rng.gen();
                let lost = if self.bad {
                    if t < r {
                        self.bad = false;
                    }
                    l < 1.0 - h
                } else {
                    if t < p {
                        self.bad = true;
                    }
                    l < 1.0 - k
                };
                lost.then_some(DropReason::Loss)
            }
            LossModel::Markov4 {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                let p31 = p31.unwrap_or(1.0 - p13);
                let u: f64 = rng.gen();
                // q_netem.c loss_4state, after the 2026 simplification of its comparisons.
                let lost = match self.m4 {
                    1 => {
                        if u < *p14 {
                            self.m4 = 4;
                            true
                        } else if u < p13 + p14 {
                            self.m4 = 3;
                            true
                        } else {
                            false
                        }
                    }
                    2 => {
                        if u < *p23 {
                            self.m4 = 3;
                            true
                        } else {
                            false
                        }
                    }
                    3 => {
                        if u < *p32 {
                            self.m4 = 2;
                            false
                        } else if u < p31 + p32 {
                            self.m4 = 1;
                            false
                        } else {
                            true
                        }
                    }
                    _ => {
                        self.m4 = 1;
                        false
                    }
                };
                lost.then_some(DropReason::Loss)
            }
            LossModel::SizeDependent { ber } => {
                let per = per_from_ber(*ber, len);
                (rng.gen::<f64>() < per).then_some(DropReason::FrameError)
            }
            LossModel::Ieee80211p(params) => {
                ieee80211p_draw(params, rng, len, distance_m.unwrap_or(params.distance_m))
            }
            LossModel::DistanceTable {
                points,
                distance_m: fixed,
            } => {
                let p = table_loss(points, distance_m.unwrap_or(*fixed));
                (rng.gen::<f64>() < p).then_some(DropReason::Loss)
            }
        }
    }
}

/// A distance-based model's decision for one frame of `len` bytes at `d` metres (None for a model that
/// is not distance-based: it never drops here). Used for a segment's per-pair decisions.
pub(crate) fn distance_draw(
    model: &LossModel,
    rng: &mut ChaCha8Rng,
    len: usize,
    d: f64,
) -> Option<DropReason> {
    match model {
        LossModel::Ieee80211p(params) => ieee80211p_draw(params, rng, len, d),
        LossModel::DistanceTable { points, .. } => {
            (rng.gen::<f64>() < table_loss(points, d)).then_some(DropReason::Loss)
        }
        _ => None,
    }
}

/// Loss probability of a `distance_table` at `d` metres: linear between points, held outside them.
pub fn table_loss(points: &[DistanceLoss], d: f64) -> f64 {
    let Some(first) = points.first() else {
        return 0.0;
    };
    if d <= first.distance_m {
        return first.p;
    }
    let i = points.partition_point(|p| p.distance_m <= d);
    if i >= points.len() {
        return points[points.len() - 1].p;
    }
    let (a, b) = (points[i - 1], points[i]);
    a.p + (d - a.distance_m) / (b.distance_m - a.distance_m) * (b.p - a.p)
}

/// One 802.11p frame of `len` bytes at `d` metres: a shadowing draw (if any), then the loss draw.
/// Shared by a direction's loss model and a segment's per-pair decision.
pub(crate) fn ieee80211p_draw(
    params: &Ieee80211pParams,
    rng: &mut ChaCha8Rng,
    len: usize,
    d: f64,
) -> Option<DropReason> {
    let shadow = if params.shadowing_db > 0.0 {
        params.shadowing_db * crate::jitter::standard_normal(rng.gen())
    } else {
        0.0
    };
    let per = ieee80211p_per(params, d, len, shadow);
    (rng.gen::<f64>() < per).then_some(DropReason::FrameError)
}

/// Frame error rate for independent bit errors: 1 - (1 - ber)^(8 len).
pub fn per_from_ber(ber: f64, len: usize) -> f64 {
    if ber <= 0.0 {
        return 0.0;
    }
    if ber >= 1.0 {
        return 1.0;
    }
    // ln1p keeps precision for tiny BERs (1e-9 over 12 000 bits).
    1.0 - ((8 * len) as f64 * (-ber).ln_1p()).exp()
}

/// Dual-slope log-distance path loss (dB) at `d` metres, d0 = 1 m (Cheng et al. 2007).
pub fn path_loss_db(p: &Ieee80211pParams, d: f64) -> f64 {
    let d = d.max(1.0);
    if d <= p.critical_distance_m {
        p.ref_loss_db + 10.0 * p.exponent_near * d.log10()
    } else {
        p.ref_loss_db
            + 10.0 * p.exponent_near * p.critical_distance_m.log10()
            + 10.0 * p.exponent_far * (d / p.critical_distance_m).log10()
    }
}

/// SNR (dB) at distance `d` with `shadow_db` of extra loss.
pub fn snr_db(p: &Ieee80211pParams, d: f64, shadow_db: f64) -> f64 {
    let rx_dbm = p.tx_power_dbm - path_loss_db(p, d) - shadow_db;
    let noise_dbm = THERMAL_NOISE_DBM_PER_HZ + 10.0 * p.bandwidth_hz.log10() + p.noise_figure_db;
    rx_dbm - noise_dbm
}

/// Uncoded QPSK (Gray-coded) bit error rate: BER = Q(sqrt(2 Eb/N0)) = erfc(sqrt(Eb/N0)) / 2,
/// with Eb/N0 = SNR * bandwidth / bit rate (Proakis, Digital Communications, 5th ed., 4.3).
pub fn qpsk_ber(p: &Ieee80211pParams, snr_db: f64) -> f64 {
    let snr = 10f64.powf(snr_db / 10.0);
    let ebn0 = snr * p.bandwidth_hz / p.bit_rate_bps;
    0.5 * erfc(ebn0.sqrt())
}

/// Probability that a frame of `len` bytes is lost at distance `d` (see docs/wire-models.md).
pub fn ieee80211p_per(p: &Ieee80211pParams, d: f64, len: usize, shadow_db: f64) -> f64 {
    per_from_ber(qpsk_ber(p, snr_db(p, d, shadow_db)), len)
}

/// Complementary error function, Chebyshev fit with relative error < 1.2e-7 everywhere
/// (Press et al., Numerical Recipes in C, 2nd ed., 6.2, `erfcc`).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let ans = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        ans
    } else {
        2.0 - ans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn erfc_known_values() {
        // Abramowitz & Stegun table 7.1.
        assert!((erfc(0.0) - 1.0).abs() < 1e-7);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-7);
        assert!((erfc(2.0) - 0.004_677_735).abs() < 1e-8);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-7);
    }

    #[test]
    fn per_grows_with_size() {
        let small = per_from_ber(1e-5, 64);
        let big = per_from_ber(1e-5, 1500);
        assert!(small < big);
        assert!((big - (1.0 - (1.0f64 - 1e-5).powi(12000))).abs() < 1e-12);
        assert_eq!(per_from_ber(0.0, 1500), 0.0);
    }

    #[test]
    fn ieee80211p_loss_grows_with_distance_and_size() {
        let p = Ieee80211pParams::default();
        let near = ieee80211p_per(&p, 50.0, 300, 0.0);
        let far = ieee80211p_per(&p, 600.0, 300, 0.0);
        assert!(near < 1e-6, "near PER {near}");
        assert!(far > 0.99, "far PER {far}");
        // Somewhere between, a longer frame fails more often than a short one.
        let mid = (100..1000)
            .map(|d| d as f64)
            .find(|d| ieee80211p_per(&p, *d, 100, 0.0) > 0.1)
            .unwrap();
        assert!(ieee80211p_per(&p, mid, 1400, 0.0) > ieee80211p_per(&p, mid, 100, 0.0));
        // Free-space loss at 1 m and 5.9 GHz is 47.86 dB (20 log10(4 pi f / c)).
        let fs = 20.0 * (4.0 * std::f64::consts::PI * 5.9e9 / 299_792_458.0f64).log10();
        assert!((fs - p.ref_loss_db).abs() < 0.01, "{fs}");
    }

    #[test]
    fn distance_table_interpolates_and_holds() {
        let pts = [
            DistanceLoss {
                distance_m: 100.0,
                p: 0.0,
            },
            DistanceLoss {
                distance_m: 300.0,
                p: 0.5,
            },
            DistanceLoss {
                distance_m: 300.0,
                p: 0.8,
            },
            DistanceLoss {
                distance_m: 500.0,
                p: 1.0,
            },
        ];
        assert_eq!(table_loss(&pts, 0.0), 0.0);
        assert_eq!(table_loss(&pts, 200.0), 0.25);
        // A step: two points at one distance, the later one holds from there on.
        assert_eq!(table_loss(&pts, 300.0), 0.8);
        assert!((table_loss(&pts, 400.0) - 0.9).abs() < 1e-12);
        assert_eq!(table_loss(&pts, 9000.0), 1.0);
    }

    #[test]
    fn markov4_only_isolated_losses_when_p13_zero() {
        let mut s = LossState::new(LossModel::Markov4 {
            p13: 0.0,
            p31: None,
            p32: 0.0,
            p23: 0.0,
            p14: 0.2,
        });
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let seq: Vec<bool> = (0..10_000)
            .map(|_| s.decide(&mut rng, 100, None).is_some())
            .collect();
        // State 4 always returns to state 1 and the next frame passes: never two losses in a row.
        assert!(seq.windows(2).all(|w| !(w[0] && w[1])));
        let lost = seq.iter().filter(|l| **l).count();
        assert!(lost > 1000, "{lost}");
    }
}
