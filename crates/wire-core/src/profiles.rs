//! Named link profiles (`ethernet-1g`, `wifi-good`, ...): ready-made `LinkConfig`s.
//!
//! Owns only the numbers; each carries its source in a comment, repeated with more detail in
//! docs/wire-models.md. Side A is the "client" end (the host, the station, the handset, the
//! ground terminal); `a_to_b` is the uplink where the two directions differ.

use crate::config::{
    DirectionConfig, HalfDuplex, Ieee80211pParams, JitterDist, LinkConfig, LossModel,
};

/// Names accepted by [`profile`].
pub const PROFILES: [&str; 7] = [
    "ethernet-1g",
    "wifi-good",
    "wifi-noisy",
    "lte",
    "satellite-geo",
    "hf-modem",
    "v2v-80211p",
];

const MS: u64 = 1_000_000;

fn symmetric(d: DirectionConfig) -> LinkConfig {
    LinkConfig {
        a_to_b: d.clone(),
        b_to_a: d,
        ..Default::default()
    }
}

/// The named profile, or None for an unknown name (see [`PROFILES`]).
pub fn profile(name: &str) -> Option<LinkConfig> {
    Some(match name {
        "ethernet-1g" => symmetric(DirectionConfig {
            rate_bps: Some(1_000_000_000),
            // IEEE 802.3: preamble 7 + SFD 1 + FCS 4 + minimum inter-packet gap 12 bytes.
            overhead_bytes: 24,
            // 100 m of twisted pair (802.3 clause 40 segment length) at about 5 ns/m.
            delay_ns: 500,
            // Linux's default txqueuelen.
            queue_packets: Some(1000),
            ..Default::default()
        }),
        // Assumed (no measured source here): an 802.11ac station near its access point.
        "wifi-good" => symmetric(DirectionConfig {
            rate_bps: Some(200_000_000),
            delay_ns: 2 * MS,
            jitter_ns: MS,
            jitter_dist: JitterDist::Paretonormal,
            loss: LossModel::Bernoulli { p: 0.001 },
            queue_packets: Some(1000),
            ..Default::default()
        }),
        // Assumed: a distant or congested station; bursty loss (mean burst 1/r = 3.3 frames).
        "wifi-noisy" => symmetric(DirectionConfig {
            rate_bps: Some(20_000_000),
            delay_ns: 5 * MS,
            jitter_ns: 5 * MS,
            jitter_dist: JitterDist::Paretonormal,
            loss: LossModel::GilbertElliott {
                p: 0.01,
                r: 0.3,
                h: 0.2,
                k: 0.999,
            },
            queue_packets: Some(1000),
            ..Default::default()
        }),
        // Huang et al., MobiSys 2012 (4GTest): downlink about 12.7 Mbit/s, uplink about
        // 5.6 Mbit/s, RTT about 70 ms (as recalled, see docs/wire-models.md). Jitter assumed.
        "lte" => LinkConfig {
            a_to_b: DirectionConfig {
                rate_bps: Some(6_000_000),
                delay_ns: 35 * MS,
                jitter_ns: 5 * MS,
                jitter_dist: JitterDist::Normal,
                queue_packets: Some(1000),
                ..Default::default()
            },
            b_to_a: DirectionConfig {
                rate_bps: Some(13_000_000),
                delay_ns: 35 * MS,
                jitter_ns: 5 * MS,
                jitter_dist: JitterDist::Normal,
                queue_packets: Some(1000),
                ..Default::default()
            },
            ..Default::default()
        },
        // GEO at 35 786 km: 239-278 ms ground-satellite-ground; 25/3 Mbit/s: FCC 15-10 benchmark.
        "satellite-geo" => LinkConfig {
            a_to_b: DirectionConfig {
                rate_bps: Some(3_000_000),
                delay_ns: 280 * MS,
                queue_packets: Some(1000),
                ..Default::default()
            },
            b_to_a: DirectionConfig {
                rate_bps: Some(25_000_000),
                delay_ns: 280 * MS,
                queue_packets: Some(1000),
                ..Default::default()
            },
            ..Default::default()
        },
        // SEEDS S3: 1475 bit/s effective, 4 s one way, half duplex, about 255-byte packets
        // (+ 14-byte Ethernet header here), overrun. Turnaround and buffer size assumed.
        "hf-modem" => {
            let mut l = symmetric(DirectionConfig {
                rate_bps: Some(1475),
                delay_ns: 4000 * MS,
                ..Default::default()
            });
            l.half_duplex = Some(HalfDuplex {
                turnaround_ns: 500 * MS,
                max_frame_bytes: Some(255 + 14),
                buffer_bytes: Some(4096),
            });
            l
        }
        // 802.11p at its 6 Mbit/s safety-message mode (SAE J2945/1); loss from distance and
        // frame size (loss::ieee80211p_per), 100 m unless the link has a distance_trace.
        "v2v-80211p" => symmetric(DirectionConfig {
            rate_bps: Some(6_000_000),
            loss: LossModel::Ieee80211p(Ieee80211pParams::default()),
            queue_packets: Some(1000),
            ..Default::default()
        }),
        _ => return None,
    })
}
