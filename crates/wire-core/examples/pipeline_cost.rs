//! Cost of the pipeline per frame (ingress + egress, no I/O), to compare with the I/O
//! budget of the binary (2 Gbit/s of 1500-byte frames is about 170 000 frames/s, 6 us each).
//! Run: cargo run --release -p roughnet-wire-core --example pipeline_cost
use std::time::Instant;

use roughnet_wire_core::*;

fn run(name: &str, d: DirectionConfig) {
    let mut e = Emulator::new(
        LinkConfig {
            a_to_b: d,
            ..Default::default()
        },
        1,
    )
    .expect("valid");
    let n: u64 = 1_000_000;
    let gap_ns = 6_000; // 1500-byte frames at 2 Gbit/s
    let mut out = Vec::with_capacity(1024);
    let mut pool: Vec<Vec<u8>> = (0..1024).map(|_| vec![0u8; 1500]).collect();
    let t = Instant::now();
    for i in 0..n {
        let now = i * gap_ns;
        let f = pool.pop().unwrap_or_else(|| vec![0u8; 1500]);
        e.ingress(now, Side::A, f);
        e.egress(now, &mut out);
        for (_, f, _) in out.drain(..) {
            pool.push(f);
        }
    }
    let el = t.elapsed();
    let s = e.stats().a_to_b;
    println!(
        "{name:<28} {:>7.0} ns/frame  out {} drops {} queue high {}",
        el.as_nanos() as f64 / n as f64,
        s.packets_out,
        s.drops.total(),
        s.queue_high_packets
    );
}

/// A segment of `n` ports, one broadcast every 100 us from port 0 (one per port in turn would be the same
/// per copy): the cost per copy with and without per-pair 802.11p decisions (`positions`).
fn segment(name: &str, n: usize, per_pair: bool) {
    let radio = DirectionConfig {
        loss: LossModel::Ieee80211p(Ieee80211pParams {
            shadowing_db: 4.0,
            ..Default::default()
        }),
        ..Default::default()
    };
    // Ports on a line 10 m apart, the last ones moving (two-point traces): every decision interpolates.
    let positions = if per_pair {
        (0..n)
            .map(|p| {
                vec![
                    PositionPoint {
                        at_ns: 0,
                        x_m: 10.0 * p as f64,
                        y_m: 0.0,
                    },
                    PositionPoint {
                        at_ns: 60_000_000_000,
                        x_m: 10.0 * p as f64,
                        y_m: 100.0,
                    },
                ]
            })
            .collect()
    } else {
        Vec::new()
    };
    let cfg = LinkConfig {
        a_to_b: radio.clone(),
        b_to_a: radio,
        positions,
        ..Default::default()
    };
    let macs = (0..n)
        .map(|p| Some([2, 0, 0, 0, (p >> 8) as u8, p as u8]))
        .collect();
    let mut s = Segment::new(cfg, 1, macs).expect("valid");
    let frames: u64 = 20_000;
    let mut out = Vec::with_capacity(4096);
    let mut f = vec![0u8; 300];
    f[..6].copy_from_slice(&[0xff; 6]);
    let t = Instant::now();
    for i in 0..frames {
        let now = i * 100_000;
        s.ingress(now, 0, f.clone());
        s.egress(now, &mut out);
        out.clear();
    }
    let el = t.elapsed();
    let st = s.stats();
    println!(
        "{name:<28} {:>7.0} ns/copy   copies {} delivered {}",
        el.as_nanos() as f64 / st.forwarding.copies as f64,
        st.forwarding.copies,
        st.b_to_a.packets_out
    );
}

fn main() {
    segment("segment 50, shared distance", 50, false);
    segment("segment 50, per pair", 50, true);
    segment("segment 200, per pair", 200, true);
    run("none", DirectionConfig::default());
    run(
        "delay 50 ms",
        DirectionConfig {
            delay_ns: 50_000_000,
            ..Default::default()
        },
    );
    run(
        "delay+jitter+loss+rate",
        DirectionConfig {
            delay_ns: 50_000_000,
            jitter_ns: 1_000_000,
            jitter_dist: JitterDist::Normal,
            loss: LossModel::GilbertElliott {
                p: 0.01,
                r: 0.3,
                h: 0.0,
                k: 1.0,
            },
            rate_bps: Some(2_500_000_000),
            queue_packets: Some(10_000),
            duplicate: 0.001,
            corrupt: 0.001,
            ..Default::default()
        },
    );
    run(
        "allow_reorder jitter 5 ms",
        DirectionConfig {
            delay_ns: 50_000_000,
            jitter_ns: 5_000_000,
            allow_reorder: true,
            ..Default::default()
        },
    );
}
