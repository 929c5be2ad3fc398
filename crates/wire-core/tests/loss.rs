//! Loss, duplication and corruption through the emulator, with statistical bounds; and
//! determinism of every decision for a given seed.

mod common;

use common::*;
use roughnet_wire_core::*;

fn emu(a_to_b: DirectionConfig, seed: u64) -> Emulator {
    Emulator::new(
        LinkConfig {
            a_to_b,
            ..Default::default()
        },
        seed,
    )
    .unwrap()
}

/// Fate of `n` frames of `len` bytes sent 1 ms apart (and sent on as they are due): true = dropped.
fn fates(e: &mut Emulator, n: u64, len: usize) -> Vec<bool> {
    let mut out = Vec::new();
    (0..n)
        .map(|i| {
            let dropped = matches!(
                e.ingress(i * MS, Side::A, frame(i, len)),
                Ingress::Dropped(_)
            );
            e.egress(i * MS, &mut out);
            out.clear();
            dropped
        })
        .collect()
}

fn bursts(lost: &[bool]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut run = 0;
    for l in lost {
        if *l {
            run += 1;
        } else if run > 0 {
            out.push(run);
            run = 0;
        }
    }
    out
}

#[test]
fn bernoulli_10_percent_within_binomial_interval() {
    let n = 100_000;
    for seed in [1, 2, 3] {
        let mut e = emu(
            DirectionConfig {
                loss: LossModel::Bernoulli { p: 0.1 },
                ..Default::default()
            },
            seed,
        );
        let lost = fates(&mut e, n, 100).iter().filter(|l| **l).count() as f64;
        let (lo, hi) = binomial_999(n, 0.1);
        assert!(
            lo <= lost && lost <= hi,
            "seed {seed}: {lost} outside [{lo}, {hi}]"
        );
        assert_eq!(e.stats().a_to_b.drops.loss as f64, lost);
    }
}

#[test]
fn gilbert_elliott_mean_burst_is_one_over_r() {
    // Simple Gilbert (h = 0, k = 1): bursts are the stays in the bad state, geometric with
    // mean 1/r; loss rate p / (p + r).
    for (p, r) in [(0.01, 0.25), (0.05, 0.5), (0.002, 0.1)] {
        let mut e = emu(
            DirectionConfig {
                loss: LossModel::GilbertElliott {
                    p,
                    r,
                    h: 0.0,
                    k: 1.0,
                },
                ..Default::default()
            },
            7,
        );
        let lost = fates(&mut e, 300_000, 100);
        let b = bursts(&lost);
        let mean = b.iter().sum::<usize>() as f64 / b.len() as f64;
        assert!(
            (mean - 1.0 / r).abs() / (1.0 / r) < 0.10,
            "p {p} r {r}: mean burst {mean} over {} bursts",
            b.len()
        );
        let rate = lost.iter().filter(|l| **l).count() as f64 / lost.len() as f64;
        let expect = p / (p + r);
        assert!(
            (rate - expect).abs() / expect < 0.15,
            "p {p} r {r}: loss {rate} vs {expect}"
        );
    }
}

#[test]
fn gilbert_elliott_h_and_k_as_tc_netem() {
    // 1 - k: loss in the good state. With p = 0 the chain never leaves it: Bernoulli(1 - k).
    let mut e = emu(
        DirectionConfig {
            loss: LossModel::GilbertElliott {
                p: 0.0,
                r: 1.0,
                h: 0.0,
                k: 0.95,
            },
            ..Default::default()
        },
        3,
    );
    let n = 100_000;
    let lost = fates(&mut e, n, 100).iter().filter(|l| **l).count() as f64;
    let (lo, hi) = binomial_999(n, 0.05);
    assert!(lo <= lost && lost <= hi, "{lost}");
    // JSON with netem's names; h and k default to the simple Gilbert model.
    let m: LossModel =
        serde_json::from_str(r#"{"model": "gilbert_elliott", "p": 0.1, "r": 0.5}"#).unwrap();
    assert_eq!(
        m,
        LossModel::GilbertElliott {
            p: 0.1,
            r: 0.5,
            h: 0.0,
            k: 1.0
        }
    );
}

/// Stationary probability of the loss states (3, 4) of netem's 4-state chain.
fn markov4_loss_rate(p13: f64, p31: f64, p32: f64, p23: f64, p14: f64) -> f64 {
    let t = [
        [1.0 - p13 - p14, 0.0, p13, p14],
        [0.0, 1.0 - p23, p23, 0.0],
        [p31, p32, 1.0 - p31 - p32, 0.0],
        [1.0, 0.0, 0.0, 0.0],
    ];
    let mut pi = [0.25; 4];
    for _ in 0..100_000 {
        let mut next = [0.0; 4];
        for (i, row) in t.iter().enumerate() {
            for (j, p) in row.iter().enumerate() {
                next[j] += pi[i] * p;
            }
        }
        pi = next;
    }
    pi[2] + pi[3]
}

#[test]
fn markov4_loss_rate_matches_stationary_distribution() {
    let (p13, p31, p32, p23, p14) = (0.02, 0.3, 0.2, 0.1, 0.01);
    let mut e = emu(
        DirectionConfig {
            loss: LossModel::Markov4 {
                p13,
                p31: Some(p31),
                p32,
                p23,
                p14,
            },
            ..Default::default()
        },
        5,
    );
    let n = 300_000;
    let lost = fates(&mut e, n, 100).iter().filter(|l| **l).count() as f64 / n as f64;
    let expect = markov4_loss_rate(p13, p31, p32, p23, p14);
    assert!((lost - expect).abs() / expect < 0.1, "{lost} vs {expect}");
}

#[test]
fn size_dependent_loss_hits_long_frames_more() {
    let ber = 1e-5;
    let n = 50_000;
    let rate = |len: usize| {
        let mut e = emu(
            DirectionConfig {
                loss: LossModel::SizeDependent { ber },
                ..Default::default()
            },
            11,
        );
        let lost = fates(&mut e, n, len).iter().filter(|l| **l).count() as f64;
        assert_eq!(e.stats().a_to_b.drops.frame_error as f64, lost);
        lost
    };
    for len in [64usize, 1500] {
        let p = per_from_ber(ber, len);
        let (lo, hi) = binomial_999(n, p);
        let lost = rate(len);
        assert!(
            lo <= lost && lost <= hi,
            "len {len}: {lost} outside [{lo}, {hi}]"
        );
    }
}

#[test]
fn ieee80211p_loss_follows_distance_trace() {
    let d = DirectionConfig {
        loss: LossModel::Ieee80211p(Ieee80211pParams::default()),
        ..Default::default()
    };
    let cfg = LinkConfig {
        a_to_b: d,
        // Vehicles drive apart from 50 m to 800 m over 100 s.
        distance_trace: vec![
            DistancePoint {
                at_ns: 0,
                distance_m: 50.0,
            },
            DistancePoint {
                at_ns: 100_000 * MS,
                distance_m: 800.0,
            },
        ],
        ..Default::default()
    };
    let mut e = Emulator::new(cfg, 1).unwrap();
    let lost = fates(&mut e, 100_000, 300);
    let first = lost[..20_000].iter().filter(|l| **l).count();
    let last = lost[80_000..].iter().filter(|l| **l).count();
    assert!(first < 100, "{first}");
    assert!(last > 19_900, "{last}");
}

#[test]
fn duplication_and_corruption_rates() {
    let n = 100_000u64;
    let mut e = emu(
        DirectionConfig {
            duplicate: 0.05,
            corrupt: 0.02,
            delay_ns: MS,
            ..Default::default()
        },
        13,
    );
    for i in 0..n {
        e.ingress(i * US, Side::A, frame(i, 200));
    }
    let out = drain(&mut e);
    let dups = out.len() as u64 - n;
    let (lo, hi) = binomial_999(n, 0.05);
    assert!(lo <= dups as f64 && dups as f64 <= hi, "{dups}");
    let s = e.stats().a_to_b;
    assert_eq!(s.duplicated, dups);
    assert_eq!(s.packets_out, n + dups);
    // Corrupted: exactly one bit differs from the original, never in the Ethernet header.
    let mut corrupted = 0u64;
    for (_, f, _) in &out {
        let original = frame(seq_of(f), 200);
        let bits: u32 = f
            .iter()
            .zip(&original)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!(bits <= 1);
        if bits == 1 {
            corrupted += 1;
            let pos = f.iter().zip(&original).position(|(a, b)| a != b).unwrap();
            assert!(pos >= ETHERNET_HEADER_BYTES);
        }
    }
    assert_eq!(corrupted, s.corrupted);
    let (lo, hi) = binomial_999(n + dups, 0.02);
    assert!(
        lo <= corrupted as f64 && corrupted as f64 <= hi,
        "{corrupted}"
    );
}

fn decisions(seed: u64) -> (Vec<bool>, Vec<(u64, u64)>) {
    let cfg = LinkConfig {
        a_to_b: DirectionConfig {
            loss: LossModel::GilbertElliott {
                p: 0.05,
                r: 0.3,
                h: 0.1,
                k: 0.99,
            },
            delay_ns: 5 * MS,
            jitter_ns: MS,
            jitter_dist: JitterDist::Paretonormal,
            jitter_correlation: 0.3,
            duplicate: 0.01,
            corrupt: 0.01,
            rate_bps: Some(50_000_000),
            ..Default::default()
        },
        b_to_a: DirectionConfig {
            loss: LossModel::Bernoulli { p: 0.2 },
            ..Default::default()
        },
        ..Default::default()
    };
    let mut e = Emulator::new(cfg, seed).unwrap();
    let mut dropped = Vec::new();
    for i in 0..20_000u64 {
        let side = if i % 3 == 0 { Side::B } else { Side::A };
        dropped.push(matches!(
            e.ingress(i * 50 * US, side, frame(i, 64 + (i as usize * 7) % 1400)),
            Ingress::Dropped(_)
        ));
    }
    let out = drain(&mut e)
        .iter()
        .map(|(_, f, due)| (seq_of(f) ^ f.iter().map(|b| *b as u64).sum::<u64>(), *due))
        .collect();
    (dropped, out)
}

#[test]
fn same_seed_same_decisions() {
    let a = decisions(42);
    let b = decisions(42);
    assert_eq!(a, b);
    let c = decisions(43);
    assert_ne!(a.0, c.0, "a different seed should drop different frames");
}

#[test]
fn impairments_use_independent_streams() {
    // Turning duplication on does not change which frames the loss model drops.
    let run = |dup: f64| {
        let mut e = emu(
            DirectionConfig {
                loss: LossModel::Bernoulli { p: 0.1 },
                duplicate: dup,
                ..Default::default()
            },
            8,
        );
        fates(&mut e, 10_000, 100)
    };
    assert_eq!(run(0.0), run(0.3));
}
