//! The CSMA medium (ns-3's CSMA channel) through the `Emulator` and the `Segment`, time driven
//! directly: the channel is busy for a frame's serialisation plus the propagation delay, so one
//! sender's frames are spaced by at least that much; efficiency grows as the delay shrinks; a
//! stream faster than one frame per busy period loses the rest at the sender's queue.

mod common;

use common::{drain, frame, seq_of, MS, US};
use roughnet_wire_core::{
    serialisation_ns, Csma, DirectionConfig, Emulator, HalfDuplex, Ingress, LinkConfig, Segment,
    Side,
};

fn link(rate: u64, delay_ns: u64, queue: Option<u32>) -> LinkConfig {
    let d = DirectionConfig {
        rate_bps: Some(rate),
        delay_ns,
        queue_packets: queue,
        ..Default::default()
    };
    LinkConfig {
        a_to_b: d.clone(),
        b_to_a: d,
        csma: Some(Csma::default()),
        ..Default::default()
    }
}

/// Frames of `len` B from A every `gap` ns for `n` frames; returns the delivered (seq, due).
fn stream(cfg: LinkConfig, len: usize, gap: u64, n: u64) -> (Vec<(u64, u64)>, Emulator) {
    let mut e = Emulator::new(cfg, 5).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let t = i * gap;
        e.egress(t, &mut out);
        e.ingress(t, Side::A, frame(i, len));
    }
    out.extend(drain(&mut e));
    let got = out.iter().map(|(_, f, due)| (seq_of(f), *due)).collect();
    (got, e)
}

#[test]
fn lone_frame_is_not_delayed_by_the_medium() {
    let (got, e) = stream(link(10_000_000, 2 * MS, None), 1250, 0, 1);
    // 1250 B at 10 Mbit/s = 1 ms, + 2 ms propagation
    assert_eq!(got, vec![(0, 3 * MS)]);
    assert_eq!(e.csma_counts().backoffs, 0);
}

#[test]
fn one_senders_frames_are_a_busy_period_apart() {
    // 1000 frames offered back to back: each waits for the previous one's serialisation AND
    // propagation (ns-3's channel is PROPAGATING until then), plus the backoff that overshoots it.
    let (rate, delay, len) = (10_000_000u64, 1 * MS, 1000usize);
    let ser = serialisation_ns(len as u64, rate);
    let (got, e) = stream(link(rate, delay, Some(2000)), len, 0, 1000);
    assert_eq!(got.len(), 1000);
    let mut gaps = Vec::new();
    for w in got.windows(2) {
        assert!(w[1].0 == w[0].0 + 1, "FIFO: {:?}", w);
        let gap = w[1].1 - w[0].1;
        assert!(gap >= ser + delay, "{gap} < {}", ser + delay);
        assert!(
            gap < ser + delay + 1000 * US,
            "{gap}: more than one backoff late"
        );
        gaps.push(gap);
    }
    assert!(e.csma_counts().backoffs > 1000);
    // the backoff overshoot is random: not every gap equal
    assert!(gaps.iter().any(|g| *g != gaps[0]));
}

/// Saturated one-way throughput over `delay` as a fraction of the rate.
fn efficiency(rate: u64, delay: u64, len: usize) -> f64 {
    let n = 400u64;
    let (got, _) = stream(link(rate, delay, Some(1000)), len, 0, n);
    let span = got.last().unwrap().1 - got.first().unwrap().1;
    let bits = (got.len() as u64 - 1) * len as u64 * 8;
    bits as f64 / (span as f64 / 1e9) / rate as f64
}

#[test]
fn efficiency_grows_as_propagation_delay_shrinks() {
    // the four links of SEEDS S1, 1436 B frames
    let e: Vec<f64> = [
        (5_000_000, 2 * MS),
        (10_000_000, MS),
        (100_000_000, 50 * US),
        (1_000_000_000, 500),
    ]
    .iter()
    .map(|&(r, d)| efficiency(r, d, 1436))
    .collect();
    // 5M-2ms and 10M-1ms have the same rate x delay (10 kbit), so the same share of each busy
    // period is serialisation; the product halves at 100M-50us and falls tenfold at 1G-0.5us
    assert!((e[0] - e[1]).abs() < 0.1, "{e:?}");
    assert!(e[2] > e[0].max(e[1]) && e[3] > e[2], "{e:?}");
    // 5M-2ms: serialisation 2.3 ms of a >= 4.3 ms busy period
    assert!(e[0] < 2.3 / 4.3 + 1e-9 && e[0] > 0.35, "{e:?}");
    assert!(e[3] > 0.9, "{e:?}");
    // without the CSMA medium the same sender gets the whole rate
    let mut plain = link(5_000_000, 2 * MS, Some(1000));
    plain.csma = None;
    let (got, _) = stream(plain, 1436, 0, 400);
    let span = got.last().unwrap().1 - got.first().unwrap().1;
    let eff = (got.len() as f64 - 1.0) * 1436.0 * 8.0 / (span as f64 / 1e9) / 5e6;
    assert!(eff > 0.99, "{eff}");
}

#[test]
fn stream_faster_than_the_busy_period_loses_at_the_queue() {
    // 500 msg/s of 1066 B frames at 5 Mbit/s, 2 ms each way: a frame holds the channel
    // 1.7 + 2 ms (+ backoff), so about half get through and the queue drops the rest.
    let n = 1500u64;
    let (got, e) = stream(link(5_000_000, 2 * MS, Some(100)), 1066, 2 * MS, n);
    let lost = 1.0 - got.len() as f64 / n as f64;
    assert!((0.4..0.6).contains(&lost), "lost {lost}");
    assert_eq!(
        e.stats().a_to_b.drops.queue_full,
        n - got.len() as u64,
        "every loss is a queue drop"
    );
    // the same stream on the plain link (no medium): nothing lost
    let mut plain = link(5_000_000, 2 * MS, Some(100));
    plain.csma = None;
    assert_eq!(stream(plain, 1066, 2 * MS, n).0.len() as u64, n);
}

#[test]
fn both_directions_share_the_channel() {
    let (rate, delay, len) = (10_000_000u64, 500 * US, 500usize);
    let ser = serialisation_ns(len as u64, rate);
    let mut e = Emulator::new(link(rate, delay, Some(1000)), 2).unwrap();
    let mut out = Vec::new();
    for i in 0..300u64 {
        let t = i * 200 * US;
        e.egress(t, &mut out);
        let side = if i % 2 == 0 { Side::A } else { Side::B };
        assert_eq!(e.ingress(t, side, frame(i, len)), Ingress::Queued);
    }
    out.extend(drain(&mut e));
    assert_eq!(out.len(), 300);
    // (start of serialisation, end of busy period) of every frame: none overlaps another
    let mut busy: Vec<(u64, u64)> = out
        .iter()
        .map(|(_, _, due)| (due - delay - ser, *due))
        .collect();
    busy.sort();
    for w in busy.windows(2) {
        assert!(w[1].0 >= w[0].1, "overlap: {w:?}");
    }
}

#[test]
fn segment_ports_share_one_channel() {
    let (rate, len) = (10_000_000u64, 600usize);
    let ser = serialisation_ns(len as u64, rate);
    let mut cfg = link(rate, 100 * US, Some(1000));
    cfg.b_to_a.rate_bps = None; // downlinks add only their delay
    let macs = (1..=3u8).map(|i| Some([2, 0, 0, 0, 0, i])).collect();
    let mut s = Segment::new(cfg, 4, macs).unwrap();
    let mut out = Vec::new();
    let mut sent = 0;
    for i in 0..300u64 {
        let t = i * 150 * US;
        s.egress(t, &mut out);
        let from = (i % 3) as usize;
        let to = ((i + 1) % 3) as u8 + 1;
        let mut f = frame(i, len);
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, to]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, from as u8 + 1]);
        if s.ingress(t, from, f) == Ingress::Queued {
            sent += 1;
        }
    }
    while let Some(t) = s.next_due() {
        s.egress(t, &mut out);
    }
    assert_eq!(out.len(), sent);
    // busy period: serialisation + uplink delay + downlink delay (200 us)
    let mut busy: Vec<(u64, u64)> = out
        .iter()
        .map(|(_, _, due)| (due - 200 * US - ser, *due))
        .collect();
    busy.sort();
    for w in busy.windows(2) {
        assert!(w[1].0 >= w[0].1, "overlap: {w:?}");
    }
    assert!(s.csma_counts().backoffs > 0);
}

#[test]
fn csma_config_is_checked() {
    let mut c = link(1_000_000, 0, None);
    c.half_duplex = Some(HalfDuplex::default());
    let err = Emulator::new(c, 1).unwrap_err().to_string();
    assert!(err.contains("csma"), "{err}");
    let mut c = link(1_000_000, 0, None);
    c.csma.as_mut().unwrap().slot_ns = 0;
    let err = Emulator::new(c, 1).unwrap_err().to_string();
    assert!(err.contains("csma.slot_ns"), "{err}");
    let cfg: LinkConfig =
        serde_json::from_str(r#"{"csma": {"max_retries": 5}}"#).expect("partial csma JSON");
    assert_eq!(cfg.csma.unwrap().slot_ns, 1000);
    assert!(serde_json::from_str::<LinkConfig>(r#"{"csma": {"slots": 5}}"#).is_err());
}
