//! Per-pair links on a shared radio medium: a segment whose ports have positions draws its 802.11p
//! loss per copy, at the distance between sender and receiver when the frame was sent. Time is
//! driven directly; distances are chosen against the model's defaults (docs/wire-models.md: PER
//! below 1e-3 up to about 300 m, certain loss beyond about 450 m).

mod common;

use common::*;
use roughnet_wire_core::*;

const BROADCAST: Mac = [0xff; 6];

fn mac(p: usize) -> Mac {
    [2, 0, 0, 0, 0, p as u8 + 1]
}

fn macs(n: usize) -> Vec<Option<Mac>> {
    (0..n).map(|p| Some(mac(p))).collect()
}

/// An Ethernet frame to `dst` from port `from`'s host, `len` bytes, with `seq` in its payload.
fn eth(dst: Mac, from: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(22)];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&mac(from));
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

fn fixed(x_m: f64, y_m: f64) -> Vec<PositionPoint> {
    vec![PositionPoint { at_ns: 0, x_m, y_m }]
}

fn radio(shadowing_db: f64) -> LossModel {
    LossModel::Ieee80211p(Ieee80211pParams {
        shadowing_db,
        ..Default::default()
    })
}

/// The scenario's usual shape: the 802.11p model on the link, so in both directions.
fn cfg(positions: Vec<Vec<PositionPoint>>) -> LinkConfig {
    let d = DirectionConfig {
        loss: radio(0.0),
        ..Default::default()
    };
    LinkConfig {
        a_to_b: d.clone(),
        b_to_a: d,
        positions,
        ..Default::default()
    }
}

/// Frames received per port, and which sequence numbers each port received.
fn received(out: &[(usize, Vec<u8>, u64)], ports: usize) -> Vec<Vec<u64>> {
    let mut got = vec![Vec::new(); ports];
    for (p, f, _) in out {
        got[*p].push(seq_in(f));
    }
    got
}

#[test]
fn near_pairs_deliver_and_far_pairs_do_not() {
    // 0 at the origin, 1 at 50 m, 2 at 1 km, 3 at 200 m (all within the straight line x, y).
    let pos = vec![
        fixed(0.0, 0.0),
        fixed(30.0, 40.0),
        fixed(1000.0, 0.0),
        fixed(0.0, -200.0),
    ];
    let mut s = Segment::new(cfg(pos), 1, macs(4)).unwrap();
    let n = 2000u64;
    for i in 0..n {
        for dst in 1..4 {
            s.ingress(i * MS, 0, eth(mac(dst), 0, i, 1000));
        }
    }
    let got = received(&drain_seg(&mut s), 4);
    assert_eq!(got[0].len(), 0);
    assert!(
        got[1].len() as u64 >= n - 2,
        "50 m: {} of {n}",
        got[1].len()
    );
    assert!(
        got[3].len() as u64 >= n - 2,
        "200 m: {} of {n}",
        got[3].len()
    );
    assert_eq!(got[2].len(), 0, "1 km: nothing gets through");
    let st = s.stats();
    // The far port's copies are counted as frame errors of its downlink; the uplink draws nothing.
    assert_eq!(st.ports[2].downlink.drops.frame_error, n);
    assert_eq!(st.ports[2].downlink.packets_in, n);
    assert_eq!(st.ports[0].uplink.drops.frame_error, 0);
    assert_eq!(st.forwarding.copies, 3 * n);
}

#[test]
fn a_broadcast_reaches_near_receivers_and_not_far_ones_in_the_same_frame() {
    let pos = vec![
        fixed(0.0, 0.0),
        fixed(-80.0, 0.0),
        fixed(700.0, 0.0),
        fixed(0.0, 120.0),
    ];
    let mut s = Segment::new(cfg(pos), 3, macs(4)).unwrap();
    let n = 1000u64;
    for i in 0..n {
        s.ingress(i * MS, 0, eth(BROADCAST, 0, i, 300));
    }
    let out = drain_seg(&mut s);
    let got = received(&out, 4);
    assert!(got[1].len() as u64 >= n - 1, "80 m: {}", got[1].len());
    assert!(got[3].len() as u64 >= n - 1, "120 m: {}", got[3].len());
    assert!(got[2].is_empty(), "700 m: {}", got[2].len());
    // Frame by frame: each broadcast reached both near receivers (the very same frame) and not the
    // far one.
    let both = (0..n)
        .filter(|i| got[1].contains(i) && got[3].contains(i))
        .count() as u64;
    assert!(
        both >= n - 2,
        "{both} of {n} frames reached both near receivers"
    );
    assert_eq!(s.stats().forwarding.flooded, n);
}

#[test]
fn copies_of_one_broadcast_are_lost_independently() {
    // Two receivers at the same distance on the cliff (360 m): each loses a fraction of the
    // frames, but not the same frames: both lose a frame about as often as the product.
    let pos = vec![fixed(0.0, 0.0), fixed(360.0, 0.0), fixed(-360.0, 0.0)];
    let mut s = Segment::new(cfg(pos), 9, macs(3)).unwrap();
    let n = 20_000u64;
    let len = 400;
    for i in 0..n {
        s.ingress(i * MS, 0, eth(BROADCAST, 0, i, len));
    }
    let got = received(&drain_seg(&mut s), 3);
    let per = ieee80211p_per(&Ieee80211pParams::default(), 360.0, len, 0.0);
    assert!(
        per > 0.2 && per < 0.8,
        "choose a distance on the cliff: PER {per}"
    );
    for p in [1, 2] {
        let lost = n - got[p].len() as u64;
        let (lo, hi) = binomial_999(n, per);
        assert!(
            (lo..=hi).contains(&(lost as f64)),
            "port {p}: {lost} lost, PER {per}"
        );
    }
    let r1: std::collections::HashSet<u64> = got[1].iter().copied().collect();
    let r2: std::collections::HashSet<u64> = got[2].iter().copied().collect();
    let both_lost = (0..n)
        .filter(|i| !r1.contains(i) && !r2.contains(i))
        .count();
    let (lo, hi) = binomial_999(n, per * per);
    assert!(
        (lo..=hi).contains(&(both_lost as f64)),
        "{both_lost} lost by both; independent copies: about {}",
        n as f64 * per * per
    );
}

#[test]
fn a_moving_port_is_reached_while_near_and_not_once_far() {
    // Port 1 drives away from port 0 along x: 10 m at 0 s, 1010 m at 10 s (100 m/s).
    let pos = vec![
        fixed(0.0, 0.0),
        vec![
            PositionPoint {
                at_ns: 0,
                x_m: 10.0,
                y_m: 0.0,
            },
            PositionPoint {
                at_ns: 10_000 * MS,
                x_m: 1010.0,
                y_m: 0.0,
            },
        ],
        fixed(0.0, 20.0),
    ];
    let mut s = Segment::new(cfg(pos), 4, macs(3)).unwrap();
    let n = 1000u64; // one frame every 10 ms for 10 s
    for i in 0..n {
        s.ingress(i * 10 * MS, 0, eth(BROADCAST, 0, i, 500));
    }
    let got = received(&drain_seg(&mut s), 3);
    // Distance of frame i: 10 + i metres.
    let delivered = |lo: u64, hi: u64| got[1].iter().filter(|&&i| i >= lo && i < hi).count();
    assert!(
        delivered(0, 280) >= 279,
        "within 290 m: {}",
        delivered(0, 280)
    );
    assert_eq!(delivered(450, n), 0, "beyond 460 m");
    assert!(delivered(280, 450) > 0 && delivered(280, 450) < 170);
    // The fixed port nearby gets every frame throughout.
    assert!(got[2].len() as u64 >= n - 1);
}

#[test]
fn the_receiving_ports_downlink_model_is_used_when_the_uplink_has_none() {
    let mut c = cfg(vec![fixed(0.0, 0.0), fixed(10.0, 0.0), fixed(900.0, 0.0)]);
    c.a_to_b.loss = LossModel::None;
    let mut s = Segment::new(c, 2, macs(3)).unwrap();
    for i in 0..200 {
        s.ingress(i * MS, 0, eth(BROADCAST, 0, i, 200));
    }
    let got = received(&drain_seg(&mut s), 3);
    assert_eq!(got[1].len(), 200);
    assert_eq!(got[2].len(), 0);
}

#[test]
fn same_seed_same_decisions() {
    let pos = vec![fixed(0.0, 0.0), fixed(370.0, 0.0), fixed(0.0, 360.0)];
    let mut c = cfg(pos);
    c.a_to_b.loss = radio(4.0);
    let run = |seed: u64| {
        let mut s = Segment::new(c.clone(), seed, macs(3)).unwrap();
        for i in 0..3000u64 {
            let p = (i % 3) as usize;
            let dst = if i % 2 == 0 {
                BROADCAST
            } else {
                mac((p + 1) % 3)
            };
            s.ingress(i * 100 * US, p, eth(dst, p, i, 600));
        }
        let out: Vec<_> = drain_seg(&mut s)
            .iter()
            .map(|(p, f, due)| (*p, seq_in(f), *due))
            .collect();
        (out, s.stats())
    };
    let (a, sa) = run(5);
    let (b, sb) = run(5);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert!(sa.b_to_a.drops.frame_error > 100 && (a.len() as u64) > 1000);
    assert_ne!(run(6).0, a);
}

#[test]
fn without_positions_the_segment_is_unchanged() {
    // One shared distance (the model's 100 m): both the uplink and the downlink draw, as before.
    let far = LinkConfig {
        a_to_b: DirectionConfig {
            loss: LossModel::Ieee80211p(Ieee80211pParams {
                distance_m: 2000.0,
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Segment::new(far, 1, macs(3)).unwrap();
    for i in 0..100 {
        s.ingress(i * MS, 0, eth(BROADCAST, 0, i, 200));
    }
    assert!(drain_seg(&mut s).is_empty());
    assert_eq!(s.stats().ports[0].uplink.drops.frame_error, 100);
}

#[test]
fn a_two_sided_link_takes_the_distance_between_its_ends() {
    for (x, delivered) in [(50.0, true), (800.0, false)] {
        let mut e = Emulator::new(cfg(vec![fixed(0.0, 0.0), fixed(x, 0.0)]), 1).unwrap();
        for i in 0..100 {
            e.ingress(i * MS, Side::A, frame(i, 300));
        }
        let n = drain(&mut e).len();
        assert_eq!(n == 100, delivered, "{x} m: {n} of 100");
        assert_eq!(n == 0, !delivered, "{x} m: {n} of 100");
    }
}

#[test]
fn bad_positions_are_refused_naming_the_key() {
    let e = Segment::new(cfg(vec![fixed(0.0, 0.0), fixed(1.0, 0.0)]), 1, macs(3)).unwrap_err();
    assert!(
        e.to_string().starts_with("positions = 2 port positions"),
        "{e}"
    );
    let e = Emulator::new(cfg(vec![fixed(0.0, 0.0)]), 1).unwrap_err();
    assert!(
        e.to_string().starts_with("positions = 1 port positions"),
        "{e}"
    );
    let mut c = cfg(vec![fixed(0.0, 0.0), vec![], fixed(1.0, 0.0)]);
    let e = Segment::new(c.clone(), 1, macs(3)).unwrap_err();
    assert!(e.to_string().starts_with("positions[1] = []"), "{e}");
    c.positions[1] = fixed(f64::INFINITY, 0.0);
    let e = Segment::new(c.clone(), 1, macs(3)).unwrap_err();
    assert!(e.to_string().starts_with("positions[1][0].x_m"), "{e}");
    c.positions[1] = fixed(5.0, 0.0);
    c.distance_trace = vec![DistancePoint {
        at_ns: 0,
        distance_m: 10.0,
    }];
    let e = Segment::new(c, 1, macs(3)).unwrap_err();
    assert!(e.to_string().contains("one of them"), "{e}");
    // The JSON shape: a fixed position is one point, at_ns optional; unknown keys are errors.
    let j: LinkConfig = serde_json::from_str(
        r#"{"positions": [[{"x_m": 0, "y_m": 0}], [{"at_ns": 5, "x_m": 1, "y_m": 2}]]}"#,
    )
    .unwrap();
    assert_eq!(j.positions[1][0].at_ns, 5);
    assert!(
        serde_json::from_str::<LinkConfig>(r#"{"positions": [[{"x": 0, "y_m": 0}]]}"#).is_err()
    );
    // Serialised without positions, a configuration is as before (no `positions` key).
    assert!(!serde_json::to_string(&LinkConfig::default())
        .unwrap()
        .contains("positions"));
}

#[test]
fn a_distance_table_is_a_per_pair_model_too() {
    // No loss up to 100 m, 100 % from 400 m, linear between: 50 % at 250 m.
    let table = LossModel::DistanceTable {
        points: vec![
            DistanceLoss {
                distance_m: 100.0,
                p: 0.0,
            },
            DistanceLoss {
                distance_m: 400.0,
                p: 1.0,
            },
        ],
        distance_m: 0.0,
    };
    let mut c = cfg(vec![
        fixed(0.0, 0.0),
        fixed(0.0, 90.0),
        fixed(150.0, 200.0),
        fixed(500.0, 0.0),
    ]);
    c.a_to_b.loss = table.clone();
    c.b_to_a.loss = table;
    let mut s = Segment::new(c, 8, macs(4)).unwrap();
    let n = 10_000u64;
    for i in 0..n {
        s.ingress(i * MS, 0, eth(BROADCAST, 0, i, 100));
    }
    let got = received(&drain_seg(&mut s), 4);
    assert_eq!(got[1].len() as u64, n);
    assert!(got[3].is_empty());
    let (lo, hi) = binomial_999(n, 0.5);
    assert!(
        (lo..=hi).contains(&(got[2].len() as f64)),
        "250 m: {}",
        got[2].len()
    );
    assert_eq!(s.stats().ports[3].downlink.drops.loss, n);
}
