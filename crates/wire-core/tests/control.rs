//! Changes over time and at run time: schedules, link down/up, set_config; the JSON
//! configuration format and the named profiles.

mod common;

use common::*;
use roughnet_wire_core::*;

#[test]
fn schedule_changes_apply_at_their_time() {
    let d10 = DirectionConfig {
        delay_ns: 10 * MS,
        ..Default::default()
    };
    let d50 = DirectionConfig {
        delay_ns: 50 * MS,
        ..Default::default()
    };
    let cfg = LinkConfig {
        a_to_b: d10.clone(),
        schedule: vec![
            ScheduledChange {
                at_ns: 3000 * MS,
                up: Some(true),
                ..Default::default()
            },
            ScheduledChange {
                at_ns: 1000 * MS,
                a_to_b: Some(d50.clone()),
                ..Default::default()
            },
            ScheduledChange {
                at_ns: 2000 * MS,
                up: Some(false),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let mut e = Emulator::new(cfg, 1).unwrap();
    let t0 = 7 * MS; // the start: schedule times are relative to it
    e.start(t0);
    assert_eq!(e.next_change(), Some(t0 + 1000 * MS));
    let mut out = Vec::new();
    let mut verdicts = Vec::new();
    for i in 0..400u64 {
        let t = t0 + i * 10 * MS;
        verdicts.push((t - t0, e.ingress(t, Side::A, frame(i, 100))));
        e.egress(t, &mut out);
    }
    out.extend(drain(&mut e));
    for (_, f, due) in &out {
        let sent = seq_of(f) * 10 * MS;
        let delay = due - t0 - sent;
        // The change to 50 ms applies from 1 s on, frames sent before keep 10 ms.
        if sent < 1000 * MS {
            assert_eq!(delay, 10 * MS, "frame sent at {sent}");
        } else {
            assert_eq!(delay, 50 * MS, "frame sent at {sent}");
        }
    }
    // Down from 2 s to 3 s: frames sent then are dropped, and so are the frames in flight at
    // 2 s (sent at 1.96-1.99 s; the one sent at 1.95 s arrives at 2 s exactly and is kept).
    for (rel, v) in &verdicts {
        let expect_down = (2000 * MS..3000 * MS).contains(rel);
        assert_eq!(
            *v == Ingress::Dropped(DropReason::LinkDown),
            expect_down,
            "at {rel}"
        );
    }
    let s = e.stats();
    assert_eq!(s.schedule_applied, 3);
    assert_eq!(s.a_to_b.drops.link_down, 100 + 4);
    assert_eq!(s.a_to_b.packets_out + s.a_to_b.drops.total(), 400);
    assert_eq!(e.config().a_to_b, d50);
}

#[test]
fn schedule_applies_in_time_order_within_one_late_egress() {
    // An egress called late still releases frames due before a link-down change.
    let cfg = LinkConfig {
        a_to_b: DirectionConfig {
            delay_ns: 10 * MS,
            ..Default::default()
        },
        schedule: vec![ScheduledChange {
            at_ns: 15 * MS,
            up: Some(false),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut e = Emulator::new(cfg, 1).unwrap();
    e.ingress(0, Side::A, frame(0, 100)); // due 10 ms: delivered
    e.ingress(10 * MS, Side::A, frame(1, 100)); // due 20 ms: in flight at 15 ms, lost
    let mut out = Vec::new();
    e.egress(100 * MS, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(seq_of(&out[0].1), 0);
    assert_eq!(e.stats().a_to_b.drops.link_down, 1);
    assert!(!e.stats().a_to_b.up);
}

#[test]
fn link_down_drops_and_up_restores() {
    let d = DirectionConfig {
        delay_ns: 10 * MS,
        ..Default::default()
    };
    let mut e = Emulator::new(
        LinkConfig {
            a_to_b: d.clone(),
            b_to_a: d,
            ..Default::default()
        },
        1,
    )
    .unwrap();
    e.ingress(0, Side::A, frame(0, 100));
    e.ingress(0, Side::B, frame(1, 100));
    e.set_up(5 * MS, false);
    assert_eq!(e.next_due(), None, "frames in flight are lost");
    assert_eq!(
        e.ingress(6 * MS, Side::A, frame(2, 100)),
        Ingress::Dropped(DropReason::LinkDown)
    );
    assert_eq!(
        e.ingress(6 * MS, Side::B, frame(3, 100)),
        Ingress::Dropped(DropReason::LinkDown)
    );
    e.set_up(7 * MS, true);
    assert_eq!(e.ingress(8 * MS, Side::A, frame(4, 100)), Ingress::Queued);
    let out = drain(&mut e);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].0, seq_of(&out[0].1), out[0].2),
        (Side::B, 4, 18 * MS)
    );
    let s = e.stats();
    assert_eq!((s.a_to_b.drops.link_down, s.b_to_a.drops.link_down), (2, 2));
    assert_eq!((s.a_to_b.held_packets, s.b_to_a.held_packets), (0, 0));

    // A one-way partition: A -> B down, B -> A still up.
    e.set_direction_up(20 * MS, Side::A, false);
    assert_eq!(
        e.ingress(21 * MS, Side::A, frame(5, 100)),
        Ingress::Dropped(DropReason::LinkDown)
    );
    assert_eq!(e.ingress(21 * MS, Side::B, frame(6, 100)), Ingress::Queued);
}

#[test]
fn set_config_changes_new_frames_only() {
    let mut e = Emulator::new(
        LinkConfig {
            a_to_b: DirectionConfig {
                delay_ns: 10 * MS,
                ..Default::default()
            },
            ..Default::default()
        },
        1,
    )
    .unwrap();
    e.ingress(0, Side::A, frame(0, 100));
    let new = LinkConfig {
        a_to_b: DirectionConfig {
            delay_ns: 2 * MS,
            ..Default::default()
        },
        ..Default::default()
    };
    e.set_config(MS, new.clone()).unwrap();
    e.ingress(MS, Side::A, frame(1, 100));
    let out = drain(&mut e);
    // Without allow_reorder, the faster frame waits for the one before it.
    assert_eq!(
        out.iter().map(|o| (seq_of(&o.1), o.2)).collect::<Vec<_>>(),
        vec![(0, 10 * MS), (1, 10 * MS)]
    );
    assert_eq!(e.config(), new);
    let bad = LinkConfig {
        a_to_b: DirectionConfig {
            duplicate: 1.5,
            ..Default::default()
        },
        ..Default::default()
    };
    let err = e.set_config(2 * MS, bad).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a_to_b.duplicate = 1.5 is invalid: expected a probability in [0, 1]"
    );
    assert_eq!(e.config(), new, "a rejected config changes nothing");
}

#[test]
fn json_config_round_trip_and_strictness() {
    let text = r#"{
        "a_to_b": {"rate_bps": 10000000, "overhead_bytes": 24, "delay_ns": 10000000, "jitter_ns": 1000000,
                   "jitter_dist": "normal", "loss": {"model": "markov4", "p13": 0.01, "p23": 0.1, "p14": 0.001},
                   "queue_packets": 100, "mtu": 1500},
        "b_to_a": {"loss": {"model": "ieee80211p", "distance_m": 250.0}},
        "half_duplex": null,
        "schedule": [{"at_ns": 1000000000, "up": false}],
        "distance_trace": [{"at_ns": 0, "distance_m": 10.0}]
    }"#;
    let cfg: LinkConfig = serde_json::from_str(text).unwrap();
    assert_eq!(cfg.a_to_b.jitter_dist, JitterDist::Normal);
    assert!(matches!(
        cfg.a_to_b.loss,
        LossModel::Markov4 { p31: None, .. }
    ));
    match &cfg.b_to_a.loss {
        LossModel::Ieee80211p(p) => assert_eq!((p.distance_m, p.tx_power_dbm), (250.0, 20.0)),
        other => panic!("{other:?}"),
    }
    Emulator::new(cfg.clone(), 1).unwrap();
    let back: LinkConfig = serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
    assert_eq!(back, cfg);

    let unknown = serde_json::from_str::<LinkConfig>(r#"{"a_to_b": {"delay": 5}}"#).unwrap_err();
    assert!(
        unknown.to_string().contains("unknown field `delay`"),
        "{unknown}"
    );
    let bad_model = serde_json::from_str::<LinkConfig>(
        r#"{"a_to_b": {"loss": {"model": "random", "p": 0.1}}}"#,
    );
    assert!(bad_model.is_err());
    let cfg: LinkConfig = serde_json::from_str(
        r#"{"a_to_b": {"loss": {"model": "gilbert_elliott", "p": 2, "r": 0.1}}}"#,
    )
    .unwrap();
    let err = Emulator::new(cfg, 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a_to_b.loss.p = 2 is invalid: expected a probability in [0, 1]"
    );
}

#[test]
fn every_profile_is_valid_and_distinct() {
    for name in profile_names() {
        let p = profile(name).unwrap_or_else(|| panic!("{name}"));
        Emulator::new(p.clone(), 1).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(profile("token-ring").is_none());
    let geo = profile("satellite-geo").unwrap();
    assert!(
        geo.a_to_b.delay_ns >= 238 * MS,
        "at least the propagation to GEO altitude and back down"
    );
    let hf = profile("hf-modem").unwrap();
    assert!(hf.half_duplex.is_some());
}

#[test]
fn stats_serialise_with_every_reason() {
    let e = Emulator::new(LinkConfig::default(), 1).unwrap();
    let v: serde_json::Value = serde_json::to_value(e.stats()).unwrap();
    for r in [
        "loss",
        "frame_error",
        "queue_full",
        "too_large",
        "overrun",
        "link_down",
    ] {
        assert_eq!(v["a_to_b"]["drops"][r], 0, "{r}");
    }
    assert_eq!(v["b_to_a"]["up"], true);
}
