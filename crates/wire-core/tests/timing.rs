//! Timing of the pipeline, driven with explicit time: delay, jitter and ordering, rate and
//! queue, delivery traces, half duplex.

mod common;

use common::*;
use roughnet_wire_core::*;

fn emu(a_to_b: DirectionConfig) -> Emulator {
    Emulator::new(
        LinkConfig {
            a_to_b,
            ..Default::default()
        },
        1,
    )
    .unwrap()
}

#[test]
fn delay_is_exact() {
    let mut e = emu(DirectionConfig {
        delay_ns: 10 * MS,
        ..Default::default()
    });
    let arrivals = [0, 1, 37 * US, 5 * MS, 5 * MS, 123_456_789];
    for (i, t) in arrivals.iter().enumerate() {
        assert_eq!(
            e.ingress(*t, Side::A, frame(i as u64, 100)),
            Ingress::Queued
        );
    }
    // Nothing leaves one nanosecond early.
    let mut out = Vec::new();
    e.egress(10 * MS - 1, &mut out);
    assert!(out.is_empty());
    let out = drain(&mut e);
    assert_eq!(out.len(), arrivals.len());
    for (i, (to, f, due)) in out.iter().enumerate() {
        assert_eq!(*to, Side::B);
        assert_eq!(seq_of(f), i as u64);
        assert_eq!(*due, arrivals[i] + 10 * MS);
    }
    let s = e.stats();
    assert_eq!(
        (
            s.a_to_b.packets_in,
            s.a_to_b.packets_out,
            s.a_to_b.held_packets
        ),
        (6, 6, 0)
    );
    assert_eq!(s.b_to_a.packets_in, 0);
}

fn jitter_run(allow_reorder: bool, dist: JitterDist) -> (Vec<(u64, u64)>, Vec<u64>) {
    let mut e = emu(DirectionConfig {
        delay_ns: 10 * MS,
        jitter_ns: 2 * MS,
        jitter_dist: dist,
        allow_reorder,
        ..Default::default()
    });
    let n = 20_000;
    let mut arrival = Vec::new();
    for i in 0..n {
        let t = i * 100 * US;
        arrival.push(t);
        e.ingress(t, Side::A, frame(i, 200));
    }
    let out = drain(&mut e);
    assert_eq!(out.len(), n as usize);
    let seqs: Vec<u64> = out.iter().map(|(_, f, _)| seq_of(f)).collect();
    let delays = out
        .iter()
        .map(|(_, f, due)| (seq_of(f), due - arrival[seq_of(f) as usize]))
        .collect();
    (delays, seqs)
}

#[test]
fn uniform_jitter_within_bounds_and_no_reordering_by_default() {
    let (delays, seqs) = jitter_run(false, JitterDist::Uniform);
    assert!(
        delays.iter().all(|(_, d)| (8 * MS..=12 * MS).contains(d)),
        "a delay outside 10 ms +- 2 ms"
    );
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "reordered without allow_reorder"
    );
    // The delay still varies (the clamp does not turn jitter into a constant).
    let min = delays.iter().map(|d| d.1).min().unwrap();
    let max = delays.iter().map(|d| d.1).max().unwrap();
    assert!(max - min > 2 * MS, "{min} {max}");
}

#[test]
fn normal_jitter_never_reorders_unless_allowed() {
    let (_, seqs) = jitter_run(false, JitterDist::Normal);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    // With allow_reorder, 2 ms of jitter on 100 us spacing reorders a lot.
    let (delays, seqs) = jitter_run(true, JitterDist::Normal);
    let inversions = seqs.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 1000, "{inversions}");
    // Mean delay stays 10 ms (standard deviation 2 ms, 20k samples: +-0.1 ms is > 20 sd).
    let mean = delays.iter().map(|d| d.1 as f64).sum::<f64>() / delays.len() as f64;
    assert!((mean - 10e6).abs() < 0.1e6, "{mean}");
}

#[test]
fn netem_reorder_with_gap() {
    // netem "delay 10ms reorder 25% gap 5": frames 1-4 of each gap are delayed, the 5th
    // (and the next, while the draw fails) goes out at once with probability 25 %.
    let mut e = emu(DirectionConfig {
        delay_ns: 10 * MS,
        reorder: 0.25,
        reorder_gap: 5,
        ..Default::default()
    });
    let n = 40_000u64;
    for i in 0..n {
        e.ingress(i * MS, Side::A, frame(i, 100));
    }
    let out = drain(&mut e);
    let early: Vec<u64> = out
        .iter()
        .filter(|(_, f, due)| *due == seq_of(f) * MS)
        .map(|(_, f, _)| seq_of(f))
        .collect();
    assert_eq!(e.stats().a_to_b.reordered as usize, early.len());
    // Never two early frames less than `gap` apart.
    assert!(early.windows(2).all(|w| w[1] - w[0] >= 5));
    // Expected share: one reordered frame per 4 + 1/0.25 = 8 frames.
    let share = early.len() as f64 / n as f64;
    assert!((share - 0.125).abs() < 0.01, "{share}");
}

#[test]
fn rate_spaces_departures_by_serialisation_time() {
    let mut e = emu(DirectionConfig {
        rate_bps: Some(10_000_000),
        overhead_bytes: 24,
        delay_ns: MS,
        queue_packets: Some(100),
        ..Default::default()
    });
    // A burst of 50 frames of 1000 bytes at t = 0: (1000 + 24) * 8 / 10 Mbit/s = 819.2 us each.
    for i in 0..50 {
        assert_eq!(e.ingress(0, Side::A, frame(i, 1000)), Ingress::Queued);
    }
    let out = drain(&mut e);
    for (i, (_, _, due)) in out.iter().enumerate() {
        assert_eq!(*due, (i as u64 + 1) * 819_200 + MS);
    }
    assert_eq!(serialisation_ns(1024, 10_000_000), 819_200);
    // A frame arriving after the link went idle is not held back by the old backlog.
    e.ingress(1000 * MS, Side::A, frame(99, 1000));
    assert_eq!(drain(&mut e)[0].2, 1000 * MS + 819_200 + MS);
}

#[test]
fn rate_is_kept_under_load() {
    // Offered 2x the rate for 1 s: realised departures carry exactly the rate.
    let rate = 10_000_000u64;
    let mut e = emu(DirectionConfig {
        rate_bps: Some(rate),
        queue_packets: Some(50),
        ..Default::default()
    });
    let mut queued_bytes = 0u64;
    for i in 0..1700u64 {
        if e.ingress(i * 600 * US, Side::A, frame(i, 1500)) == Ingress::Queued {
            queued_bytes += 1500;
        }
    }
    let out = drain(&mut e);
    let last = out.last().unwrap().2;
    let realised = queued_bytes as f64 * 8.0 / (last as f64 / 1e9);
    assert!(
        (realised - rate as f64).abs() / (rate as f64) < 0.01,
        "{realised}"
    );
    let s = e.stats().a_to_b;
    assert!(s.drops.queue_full > 0);
    assert_eq!(s.queue_high_packets, 50);
}

#[test]
fn queue_limits_drop_tail() {
    let mut e = emu(DirectionConfig {
        rate_bps: Some(1_000_000),
        queue_packets: Some(10),
        ..Default::default()
    });
    let verdicts: Vec<Ingress> = (0..50)
        .map(|i| e.ingress(0, Side::A, frame(i, 1000)))
        .collect();
    assert!(verdicts[..10].iter().all(|v| *v == Ingress::Queued));
    assert!(verdicts[10..]
        .iter()
        .all(|v| *v == Ingress::Dropped(DropReason::QueueFull)));
    // 8 ms per frame at 1 Mbit/s: at 8 ms one has left, so one more fits.
    assert_eq!(e.ingress(8 * MS, Side::A, frame(50, 1000)), Ingress::Queued);
    assert_eq!(
        e.ingress(8 * MS, Side::A, frame(51, 1000)),
        Ingress::Dropped(DropReason::QueueFull)
    );
    let s = e.stats().a_to_b;
    assert_eq!(
        (s.drops.queue_full, s.queue_high_packets, s.queue_high_bytes),
        (41, 10, 10_000)
    );

    let mut e = emu(DirectionConfig {
        rate_bps: Some(1_000_000),
        queue_bytes: Some(5_500),
        ..Default::default()
    });
    let queued = (0..20)
        .filter(|i| e.ingress(0, Side::A, frame(*i, 1000)) == Ingress::Queued)
        .count();
    assert_eq!(queued, 5);
    // Without a rate, the limit bounds the frames held in the delay line (netem's `limit`).
    let mut e = emu(DirectionConfig {
        delay_ns: 100 * MS,
        queue_packets: Some(3),
        ..Default::default()
    });
    let queued = (0..20)
        .filter(|i| e.ingress(*i * MS, Side::A, frame(*i, 100)) == Ingress::Queued)
        .count();
    assert_eq!(queued, 3);
}

#[test]
fn mtu_drops_too_large() {
    let mut e = emu(DirectionConfig {
        mtu: Some(1500),
        ..Default::default()
    });
    assert_eq!(e.ingress(0, Side::A, frame(0, 1514)), Ingress::Queued);
    assert_eq!(
        e.ingress(0, Side::A, frame(1, 1515)),
        Ingress::Dropped(DropReason::TooLarge)
    );
    assert_eq!(e.stats().a_to_b.drops.too_large, 1);
}

#[test]
fn delivery_trace_limits_throughput() {
    // One opportunity per ms (12 Mbit/s of 1500-byte frames), Mahimahi's format.
    let trace = DeliveryTrace::from_mahimahi("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n").unwrap();
    let mut e = emu(DirectionConfig {
        delivery_trace: Some(trace),
        queue_packets: Some(10_000),
        ..Default::default()
    });
    // 10 frames per ms offered, each exactly one opportunity (1504 bytes; a 1500-byte frame
    // would leave 4 bytes of each opportunity to the next frame, as in Mahimahi).
    for i in 0..1000 {
        e.ingress(i * 100 * US, Side::A, frame(i, 1504));
    }
    let out = drain(&mut e);
    assert_eq!(out.len(), 1000);
    for (i, (_, _, due)) in out.iter().enumerate() {
        assert_eq!(*due, (i as u64 + 1) * MS, "frame {i}");
    }
    assert!(DeliveryTrace::from_mahimahi("1\nx\n").is_err());
}

#[test]
fn half_duplex_never_overlaps_and_respects_turnaround() {
    let rate = 1475u64;
    let d = DirectionConfig {
        rate_bps: Some(rate),
        ..Default::default()
    };
    let cfg = LinkConfig {
        a_to_b: d.clone(),
        b_to_a: d,
        half_duplex: Some(HalfDuplex {
            turnaround_ns: 300 * MS,
            max_frame_bytes: Some(269),
            buffer_bytes: Some(100_000),
        }),
        ..Default::default()
    };
    let mut e = Emulator::new(cfg, 9).unwrap();
    // Both sides send 100-byte frames at pseudo-random times (a fixed LCG, no clock).
    let mut x: u64 = 12345;
    let mut t = 0u64;
    let mut sent = 0;
    for i in 0..400u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        t += (x >> 33) % (800 * MS);
        let side = if (x >> 20) & 1 == 0 { Side::A } else { Side::B };
        if e.ingress(t, side, frame(i, 100)) == Ingress::Queued {
            sent += 1;
        }
    }
    let out = drain(&mut e);
    assert_eq!(out.len(), sent);
    // No delay configured: due is the end of transmission; each lasts 100 * 8 / 1475 s.
    let ser = serialisation_ns(100, rate);
    let mut tx: Vec<(u64, u64, Side)> = out
        .iter()
        .map(|(to, _, due)| (due - ser, *due, to.other()))
        .collect();
    tx.sort();
    let mut turns = 0;
    for w in tx.windows(2) {
        assert!(w[1].0 >= w[0].1, "overlap: {:?}", w);
        if w[1].2 != w[0].2 {
            turns += 1;
            assert!(
                w[1].0 >= w[0].1 + 300 * MS,
                "turnaround not respected: {:?}",
                w
            );
        }
    }
    assert!(turns > 50, "{turns}");
}

#[test]
fn half_duplex_size_limit_and_overrun() {
    // The profile leaves the modem's buffer to the user (S3's manual gives none): 4 KiB here.
    let mut p = profile("hf-modem").unwrap();
    p.half_duplex.as_mut().unwrap().buffer_bytes = Some(4096);
    let mut e = Emulator::new(p, 1).unwrap();
    assert_eq!(
        e.ingress(0, Side::A, frame(0, 270)),
        Ingress::Dropped(DropReason::TooLarge)
    );
    // Offer far more than 1475 bit/s drains: the 4096-byte buffer overruns.
    let verdicts: Vec<Ingress> = (1..100)
        .map(|i| e.ingress(i * MS, Side::A, frame(i, 255)))
        .collect();
    let queued = verdicts.iter().filter(|v| **v == Ingress::Queued).count();
    assert_eq!(queued, 4096 / 255);
    assert!(verdicts
        .iter()
        .all(|v| matches!(v, Ingress::Queued | Ingress::Dropped(DropReason::Overrun))));
    let s = e.stats().a_to_b;
    assert_eq!(
        (s.drops.too_large, s.drops.overrun),
        (1, 99 - queued as u64)
    );
    // The modem latency: the first frame arrives 4 s after its transmission ends.
    let out = drain(&mut e);
    assert_eq!(out[0].2, MS + serialisation_ns(255, 1475) + 4000 * MS);
}

#[test]
fn no_reordering_across_shapes_correlations_and_rates() {
    for dist in [
        JitterDist::Uniform,
        JitterDist::Normal,
        JitterDist::Pareto,
        JitterDist::Paretonormal,
    ] {
        for rho in [0.0, 0.5] {
            for rate in [None, Some(100_000_000)] {
                let mut e = emu(DirectionConfig {
                    rate_bps: rate,
                    delay_ns: 5 * MS,
                    jitter_ns: 3 * MS,
                    jitter_dist: dist,
                    jitter_correlation: rho,
                    queue_packets: Some(10_000),
                    ..Default::default()
                });
                for i in 0..5_000u64 {
                    e.ingress(i * 50 * US, Side::A, frame(i, 1000));
                }
                let out = drain(&mut e);
                assert_eq!(out.len(), 5_000);
                let seqs: Vec<u64> = out.iter().map(|o| seq_of(&o.1)).collect();
                assert!(
                    seqs.windows(2).all(|w| w[0] < w[1]),
                    "{dist:?} rho {rho} rate {rate:?}"
                );
                assert!(out.windows(2).all(|w| w[0].2 <= w[1].2));
            }
        }
    }
}
