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

fn main() {
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
