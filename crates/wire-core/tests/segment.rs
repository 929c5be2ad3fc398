//! The N-port shared segment: forwarding decisions (unicast to one port, flood to all others, never
//! back to the ingress port), the uplink-then-downlink model, the one shared half-duplex medium,
//! per-port counters and determinism.

mod common;

use common::*;
use roughnet_wire_core::*;

const MACS: [Mac; 3] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]];
const BROADCAST: Mac = [0xff; 6];
const MULTICAST: Mac = [0x01, 0x00, 0x5e, 0x7f, 0x00, 0x01]; // 239.255.0.1 (DDS discovery)

fn macs() -> Vec<Option<Mac>> {
    MACS.iter().map(|m| Some(*m)).collect()
}

/// An Ethernet frame to `dst` from `src`, `len` bytes, with `seq` in its payload.
fn eth(dst: Mac, src: Mac, seq: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(22)];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..22].copy_from_slice(&seq.to_be_bytes());
    f
}

fn seq_in(f: &[u8]) -> u64 {
    u64::from_be_bytes(f[14..22].try_into().unwrap())
}

fn drain_seg(s: &mut Segment) -> Vec<(usize, Vec<u8>, u64)> {
    let mut out = Vec::new();
    while let Some(t) = s.next_due() {
        s.egress(t, &mut out);
    }
    out
}

fn delays(up_ms: u64, down_ms: u64) -> LinkConfig {
    LinkConfig {
        a_to_b: DirectionConfig {
            delay_ns: up_ms * MS,
            ..Default::default()
        },
        b_to_a: DirectionConfig {
            delay_ns: down_ms * MS,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn forwarding_decisions() {
    let m = macs();
    let f = |dst: Mac, from: usize| forwarding(&m, from, &eth(dst, MACS[from], 0, 60));
    // Unicast goes to the one port whose host owns the destination, from any other port.
    assert_eq!(f(MACS[1], 0), Delivery::Unicast(1));
    assert_eq!(f(MACS[2], 0), Delivery::Unicast(2));
    assert_eq!(f(MACS[0], 2), Delivery::Unicast(0));
    // Broadcast, multicast and unknown unicast are flooded.
    assert_eq!(f(BROADCAST, 1), Delivery::Flood);
    assert_eq!(f(MULTICAST, 1), Delivery::Flood);
    assert_eq!(f([2, 9, 9, 9, 9, 9], 1), Delivery::Flood);
    // Never back to the ingress port; runts go nowhere.
    assert_eq!(f(MACS[1], 1), Delivery::Filtered);
    assert_eq!(forwarding(&m, 0, &[0xff; 10]), Delivery::Filtered);
    // A port whose MAC is unknown is reached by flooding only.
    let partial = vec![Some(MACS[0]), None, Some(MACS[2])];
    assert_eq!(
        forwarding(&partial, 0, &eth(MACS[1], MACS[0], 0, 60)),
        Delivery::Flood
    );
}

#[test]
fn unicast_reaches_only_its_port_and_flood_every_other_port() {
    let mut s = Segment::new(LinkConfig::default(), 1, macs()).unwrap();
    for from in 0..3 {
        for to in 0..3 {
            if from == to {
                continue;
            }
            s.ingress(
                MS,
                from,
                eth(MACS[to], MACS[from], (from * 10 + to) as u64, 100),
            );
            let out = drain_seg(&mut s);
            let ports: Vec<usize> = out.iter().map(|o| o.0).collect();
            assert_eq!(ports, vec![to], "unicast {from} -> {to}");
        }
        for dst in [BROADCAST, MULTICAST, [2, 7, 7, 7, 7, 7]] {
            s.ingress(MS, from, eth(dst, MACS[from], 99, 100));
            let mut ports: Vec<usize> = drain_seg(&mut s).iter().map(|o| o.0).collect();
            ports.sort();
            let want: Vec<usize> = (0..3).filter(|&p| p != from).collect();
            assert_eq!(ports, want, "flood from {from} to {dst:?}");
        }
        // A frame to the sender's own host crosses the medium and goes nowhere.
        s.ingress(MS, from, eth(MACS[from], MACS[from], 1, 100));
        assert!(drain_seg(&mut s).is_empty());
    }
    let st = s.stats();
    assert_eq!(st.forwarding.unicast, 6);
    assert_eq!(st.forwarding.flooded, 9);
    assert_eq!(st.forwarding.filtered, 3);
    assert_eq!(st.forwarding.copies, 6 + 9 * 2);
    // Per port: 2 unicast + 3 flooded + 1 own frame in; 2 unicast + 3 * 2 flooded copies out of the others.
    for p in &st.ports {
        assert_eq!(p.uplink.packets_in, 6);
        assert_eq!(p.uplink.packets_out, 6);
        assert_eq!(p.downlink.packets_out, 2 + 6);
    }
    assert_eq!(st.a_to_b.packets_in, 18);
    assert_eq!(st.b_to_a.packets_out, 24);
    assert_eq!(st.b_to_a.held_packets, 0);
}

#[test]
fn a_frame_passes_the_senders_uplink_then_the_receivers_downlink() {
    // Uplink 5 ms, downlink 3 ms: every copy leaves 8 ms after it arrived.
    let mut s = Segment::new(delays(5, 3), 7, macs()).unwrap();
    let t0 = 100 * MS;
    s.ingress(t0, 0, eth(MACS[2], MACS[0], 1, 200));
    s.ingress(t0 + MS, 1, eth(BROADCAST, MACS[1], 2, 200));
    // Nothing before its time.
    let mut early = Vec::new();
    s.egress(t0 + 7 * MS, &mut early);
    assert!(early.is_empty());
    let out = drain_seg(&mut s);
    let got: Vec<(usize, u64, u64)> = out
        .iter()
        .map(|(p, f, due)| (*p, seq_in(f), *due))
        .collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], (2, 1, t0 + 8 * MS));
    let mut bc: Vec<(usize, u64, u64)> = got[1..].to_vec();
    bc.sort();
    assert_eq!(bc, vec![(0, 2, t0 + 9 * MS), (2, 2, t0 + 9 * MS)]);
}

#[test]
fn each_destination_has_its_own_downlink() {
    // Port 2's downlink is down: a broadcast still reaches port 1, and port 2's downlink counts the drop.
    let mut s = Segment::new(delays(0, 1), 3, macs()).unwrap();
    s.set_ports_up(0, Some(2), false, true, false);
    s.ingress(MS, 0, eth(BROADCAST, MACS[0], 5, 100));
    let out = drain_seg(&mut s);
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![1]);
    let st = s.stats();
    assert_eq!(st.ports[2].downlink.drops.link_down, 1);
    assert!(!st.ports[2].downlink.up);
    assert!(
        !st.b_to_a.up,
        "the aggregate is up only when every downlink is"
    );
    // Port 2 isolated both ways: nothing from it gets out either.
    s.set_ports_up(2 * MS, Some(2), true, true, false);
    s.ingress(3 * MS, 2, eth(MACS[0], MACS[2], 6, 100));
    assert!(drain_seg(&mut s).is_empty());
    s.set_up(4 * MS, true);
    s.ingress(5 * MS, 2, eth(MACS[0], MACS[2], 7, 100));
    assert_eq!(drain_seg(&mut s).len(), 1);
}

#[test]
fn downlink_loss_is_drawn_per_copy() {
    // 50 % loss on every downlink: of 2000 broadcasts each of the two receivers gets about half, and the
    // two receivers' losses are not the same frames (independent draws per copy).
    let cfg = LinkConfig {
        b_to_a: DirectionConfig {
            loss: LossModel::Bernoulli { p: 0.5 },
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Segment::new(cfg, 11, macs()).unwrap();
    let n = 2000u64;
    let mut got = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..n {
        s.ingress(i * US, 0, eth(BROADCAST, MACS[0], i, 100));
        let mut out = Vec::new();
        s.egress(i * US, &mut out);
        for (p, f, _) in out {
            got[p].push(seq_in(&f));
        }
    }
    assert!(got[0].is_empty());
    let (lo, hi) = binomial_999(n, 0.5);
    for p in [1, 2] {
        let k = got[p].len() as f64;
        assert!(k > lo && k < hi, "port {p} got {k} of {n}");
    }
    let both = got[1]
        .iter()
        .filter(|s| got[2].binary_search(s).is_ok())
        .count() as f64;
    // Independent: about a quarter of the frames reach both (far from the half that shared draws would give).
    let (lo, hi) = binomial_999(n, 0.25);
    assert!(
        both > lo && both < hi,
        "{both} frames reached both receivers"
    );
}

#[test]
fn half_duplex_segment_has_one_transmitter_at_a_time() {
    // 1 Mbit/s medium, 2 ms turnaround: three hosts send 1000-byte frames at once (8 ms each on the medium).
    let cfg = LinkConfig {
        a_to_b: DirectionConfig {
            rate_bps: Some(1_000_000),
            ..Default::default()
        },
        half_duplex: Some(HalfDuplex {
            turnaround_ns: 2 * MS,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut s = Segment::new(cfg, 1, macs()).unwrap();
    let t0 = 10 * MS;
    for k in 0..2u64 {
        for p in 0..3 {
            s.ingress(
                t0,
                p,
                eth(MACS[(p + 1) % 3], MACS[p], k * 10 + p as u64, 1000),
            );
        }
    }
    let mut out = drain_seg(&mut s);
    out.sort_by_key(|o| o.2);
    let ends: Vec<u64> = out.iter().map(|o| o.2 - t0).collect();
    // First come, first served on one medium: port 0, 1, 2, 0, 1, 2; every change of transmitter costs
    // a turnaround: ends at 8, 18, 28, 38, 48, 58 ms.
    assert_eq!(
        ends,
        vec![8 * MS, 18 * MS, 28 * MS, 38 * MS, 48 * MS, 58 * MS]
    );
    // Back to back from one sender: no turnaround.
    let mut s2 = Segment::new(
        LinkConfig {
            a_to_b: DirectionConfig {
                rate_bps: Some(1_000_000),
                ..Default::default()
            },
            half_duplex: Some(HalfDuplex {
                turnaround_ns: 2 * MS,
                ..Default::default()
            }),
            ..Default::default()
        },
        1,
        macs(),
    )
    .unwrap();
    s2.ingress(t0, 0, eth(MACS[1], MACS[0], 1, 1000));
    s2.ingress(t0, 0, eth(MACS[2], MACS[0], 2, 1000));
    let ends: Vec<u64> = drain_seg(&mut s2).iter().map(|o| o.2 - t0).collect();
    assert_eq!(ends, vec![8 * MS, 16 * MS]);
}

#[test]
fn same_seed_same_decisions() {
    let cfg = LinkConfig {
        a_to_b: DirectionConfig {
            loss: LossModel::Bernoulli { p: 0.2 },
            ..Default::default()
        },
        b_to_a: DirectionConfig {
            loss: LossModel::Bernoulli { p: 0.2 },
            jitter_ns: MS,
            ..Default::default()
        },
        ..Default::default()
    };
    let run = |seed: u64| {
        let mut s = Segment::new(cfg.clone(), seed, macs()).unwrap();
        for i in 0..500u64 {
            let p = (i % 3) as usize;
            let dst = if i % 5 == 0 {
                BROADCAST
            } else {
                MACS[(p + 1) % 3]
            };
            s.ingress(i * 100 * US, p, eth(dst, MACS[p], i, 100));
        }
        drain_seg(&mut s)
            .iter()
            .map(|(p, f, due)| (*p, seq_in(f), *due))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn bad_port_lists_are_refused() {
    let e = Segment::new(LinkConfig::default(), 1, vec![Some(MACS[0])]).unwrap_err();
    assert!(e.to_string().contains("2 to 254 ports"), "{e}");
    let e = Segment::new(LinkConfig::default(), 1, vec![Some(MACS[0]), Some(MACS[0])]).unwrap_err();
    assert!(e.to_string().contains("ports[1].mac"), "{e}");
    let e = Segment::new(
        LinkConfig::default(),
        1,
        vec![Some(MACS[0]), Some(BROADCAST)],
    )
    .unwrap_err();
    assert!(e.to_string().contains("unicast"), "{e}");
    assert_eq!(
        parse_mac("02:00:5E:10:00:0a"),
        Some([2, 0, 0x5e, 0x10, 0, 0x0a])
    );
    assert_eq!(parse_mac("02:00:5e:10:00"), None);
    assert_eq!(parse_mac("02:00:5e:10:00:01:02"), None);
    assert_eq!(parse_mac("zz:00:5e:10:00:01"), None);
}
