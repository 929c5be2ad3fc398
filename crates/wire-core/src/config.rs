//! Configuration of an emulated link: the serde (JSON) shapes and their validation.
//!
//! Owns `LinkConfig`, `DirectionConfig`, the loss / jitter / trace / half-duplex / schedule
//! descriptions and `ConfigError`. It does not own any behaviour: the models that use these
//! values live in `loss.rs`, `jitter.rs`, `direction.rs`, `halfduplex.rs` and `schedule.rs`.
//! Every quantity carries its unit in its name (`delay_ns`, `rate_bps`, `distance_m`);
//! probabilities are fractions in [0, 1]. Unknown keys are errors.

use serde::{Deserialize, Serialize};

/// Size of an Ethernet header (destination, source, ethertype), subtracted from a frame's
/// length before comparing it with `mtu` (IEEE 802.3 clause 3.1.1).
pub const ETHERNET_HEADER_BYTES: usize = 14;

/// Bytes a Mahimahi delivery opportunity carries (Mahimahi's `PACKET_SIZE`, link_queue.hh).
pub const MAHIMAHI_OPPORTUNITY_BYTES: u32 = 1504;

/// Drop-tail queue length applied when a rate is set and no queue limit is given: the
/// Linux default `txqueuelen` of an Ethernet device and netem's default `limit` (1000).
pub const DEFAULT_QUEUE_PACKETS: u32 = 1000;

/// Frames one direction may hold at once (in its delay line) whatever the configuration:
/// a memory bound, not a model. Beyond it frames are dropped with reason `QueueFull`.
/// 262 144 frames hold one second of 1500-byte frames at 3 Gbit/s.
pub const HELD_LIMIT_PACKETS: usize = 262_144;

/// An invalid configuration: names the field, the value and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{field} = {value} is invalid: expected {expected}")]
    Invalid {
        field: String,
        value: String,
        expected: String,
    },
    #[error("delivery trace line {line}: {message}")]
    Trace { line: usize, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(field: &str, value: impl ToString, expected: &str) -> Self {
        ConfigError::Invalid {
            field: field.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }
}

/// Shape of the delay jitter (netem's `distribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterDist {
    /// Uniform in [-jitter, +jitter] (netem's default without a table).
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter_ns` (netem's normal.dist).
    Normal,
    /// Pareto, shape 3, shifted and scaled to mean 0 and standard deviation `jitter_ns`
    /// (iproute2's netem/pareto.c uses the same shape).
    Pareto,
    /// 25 % Pareto + 75 % normal, rescaled to standard deviation `jitter_ns`
    /// (iproute2's netem/paretonormal.c).
    Paretonormal,
}

/// Loss model of one direction (JSON: `{"model": "bernoulli", "p": 0.1}`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossModel {
    #[default]
    None,
    /// Independent loss with probability `p` (netem `loss random`).
    Bernoulli { p: f64 },
    /// netem's `loss gemodel p r 1-h 1-k`: `p` good->bad, `r` bad->good transition
    /// probabilities; a frame in the bad state is lost with probability `1 - h`, in the good
    /// state with `1 - k`. Defaults as tc-netem(8): h = 0 (bad state loses every frame),
    /// k = 1 (good state loses none), i.e. the simple Gilbert model, whose mean loss burst is
    /// 1/r frames.
    GilbertElliott {
        p: f64,
        r: f64,
        #[serde(default)]
        h: f64,
        #[serde(default = "one")]
        k: f64,
    },
    /// netem's `loss state p13 p31 p32 p23 p14` (4-state Markov model of Salsano et al.,
    /// "NetemCLG", and q_netem.c `loss_4state`): state 1 good (gap), 2 good within a burst,
    /// 3 lost within a burst, 4 isolated loss. Missing p31 defaults to 1 - p13, the others to 0.
    Markov4 {
        p13: f64,
        #[serde(default)]
        p31: Option<f64>,
        #[serde(default)]
        p32: f64,
        #[serde(default)]
        p23: f64,
        #[serde(default)]
        p14: f64,
    },
    /// Loss that grows with frame size: each bit is wrong with probability `ber`, a frame of
    /// `len` bytes is lost with PER = 1 - (1 - ber)^(8 len) (independent bit errors).
    SizeDependent { ber: f64 },
    /// IEEE 802.11p (DSRC, 5.9 GHz, 10 MHz channel) at 6 Mbit/s (QPSK rate 1/2): distance ->
    /// path loss -> SNR -> BER -> PER. See `loss::Ieee80211p` and docs/wire-models.md.
    Ieee80211p(Ieee80211pParams),
    /// Loss probability from distance alone, a table: linear between its points, held before the
    /// first and after the last (a measured or simulated range curve). `distance_m`: the distance when
    /// the link has neither positions nor a distance trace (default 0 m).
    DistanceTable {
        points: Vec<DistanceLoss>,
        #[serde(default)]
        distance_m: f64,
    },
}

/// A point of a `distance_table` loss model: at `distance_m`, frames are lost with probability `p`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistanceLoss {
    pub distance_m: f64,
    pub p: f64,
}

impl LossModel {
    /// Whether the model's loss depends on the distance between sender and receiver (on a segment
    /// with positions it is then drawn per pair, not in the uplink or downlink).
    pub fn is_distance_based(&self) -> bool {
        matches!(
            self,
            LossModel::Ieee80211p(_) | LossModel::DistanceTable { .. }
        )
    }
}

fn one() -> f64 {
    1.0
}

/// Parameters of the 802.11p frame error model; every default is cited in docs/wire-models.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Ieee80211pParams {
    /// Distance between the vehicles when the link has no `distance_trace`.
    pub distance_m: f64,
    /// Transmit power plus antenna gains (EIRP + receive gain), dBm.
    pub tx_power_dbm: f64,
    /// Path loss at the reference distance d0 = 1 m (free space at 5.9 GHz: 47.9 dB).
    pub ref_loss_db: f64,
    /// Path loss exponent up to `critical_distance_m` (Cheng et al. 2007: 2.1).
    pub exponent_near: f64,
    /// Path loss exponent beyond `critical_distance_m` (Cheng et al. 2007: 3.8).
    pub exponent_far: f64,
    /// Breakpoint of the dual-slope model (Cheng et al. 2007: 100 m).
    pub critical_distance_m: f64,
    /// Receiver noise figure, dB (ns-3 YansWifiPhy default: 7 dB).
    pub noise_figure_db: f64,
    /// Channel bandwidth, Hz (802.11p: 10 MHz).
    pub bandwidth_hz: f64,
    /// PHY bit rate, bit/s (the 6 Mbit/s QPSK 1/2 mode).
    pub bit_rate_bps: f64,
    /// Standard deviation of log-normal shadowing drawn per frame, dB (0: none).
    pub shadowing_db: f64,
}

impl Default for Ieee80211pParams {
    fn default() -> Self {
        Ieee80211pParams {
            distance_m: 100.0,
            tx_power_dbm: 20.0,
            ref_loss_db: 47.86,
            exponent_near: 2.1,
            exponent_far: 3.8,
            critical_distance_m: 100.0,
            noise_figure_db: 7.0,
            bandwidth_hz: 10e6,
            bit_rate_bps: 6e6,
            shadowing_db: 0.0,
        }
    }
}

/// Mahimahi-style delivery trace: at each listed time (ms from the start, repeating with
/// period = the last timestamp) the link may deliver `bytes_per_opportunity` bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryTrace {
    /// Delivery opportunities, ms since the start, non-decreasing (repeats allowed: two
    /// opportunities at the same ms).
    pub opportunities_ms: Vec<u64>,
    #[serde(default = "default_opportunity_bytes")]
    pub bytes_per_opportunity: u32,
}

fn default_opportunity_bytes() -> u32 {
    MAHIMAHI_OPPORTUNITY_BYTES
}

impl DeliveryTrace {
    /// Parses Mahimahi's trace format: one integer per line, ms of a delivery opportunity.
    /// Blank lines are ignored.
    pub fn from_mahimahi(text: &str) -> Result<DeliveryTrace, ConfigError> {
        let mut opportunities_ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            let ms: u64 = t.parse().map_err(|_| ConfigError::Trace {
                line: i + 1,
                message: format!("{t:?} is not a whole number of milliseconds"),
            })?;
            opportunities_ms.push(ms);
        }
        let trace = DeliveryTrace {
            opportunities_ms,
            bytes_per_opportunity: MAHIMAHI_OPPORTUNITY_BYTES,
        };
        trace.validate("delivery_trace")?;
        Ok(trace)
    }

    pub(crate) fn validate(&self, field: &str) -> Result<(), ConfigError> {
        let ops = &self.opportunities_ms;
        if ops.is_empty() {
            return Err(ConfigError::invalid(
                field,
                "[]",
                "at least one delivery opportunity",
            ));
        }
        if let Some(i) = (1..ops.len()).find(|&i| ops[i] < ops[i - 1]) {
            return Err(ConfigError::invalid(
                &format!("{field}.opportunities_ms[{i}]"),
                ops[i],
                "non-decreasing timestamps (ms)",
            ));
        }
        if *ops.last().unwrap() == 0 {
            return Err(ConfigError::invalid(
                field,
                "last timestamp 0",
                "a last timestamp > 0 ms (the trace period)",
            ));
        }
        if self.bytes_per_opportunity == 0 {
            return Err(ConfigError::invalid(
                &format!("{field}.bytes_per_opportunity"),
                0,
                "> 0",
            ));
        }
        Ok(())
    }
}

/// Impairments of one direction. All fields optional; the default is a perfect link.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectionConfig {
    /// Link rate; None: no serialisation delay.
    pub rate_bps: Option<u64>,
    /// Bytes added to each frame for the serialisation delay (24 for Ethernet: 8 preamble +
    /// SFD, 12 inter-frame gap, 4 FCS; IEEE 802.3).
    pub overhead_bytes: u32,
    /// Fixed one-way delay added after serialisation.
    pub delay_ns: u64,
    /// Jitter scale: the half-width for `uniform`, the standard deviation otherwise.
    pub jitter_ns: u64,
    pub jitter_dist: JitterDist,
    /// Correlation of successive jitter draws in [0, 1) (netem's correlation: the uniform
    /// variate is mixed with the previous one).
    pub jitter_correlation: f64,
    /// false (default): a frame never departs before the frame before it in this direction,
    /// jitter only stretches gaps (netem's behaviour with a rate). true: jitter may reorder.
    pub allow_reorder: bool,
    /// netem's `reorder`: this fraction of eligible frames departs without `delay_ns`.
    pub reorder: f64,
    /// netem's `gap`: only every `reorder_gap`-th frame is eligible for reordering (0 = 1).
    pub reorder_gap: u32,
    pub loss: LossModel,
    /// Fraction of frames sent twice (the copy is queued right after the original).
    pub duplicate: f64,
    /// Fraction of frames with one bit flipped (after the Ethernet header), left for the
    /// receiver's checksum to drop.
    pub corrupt: f64,
    /// Drop-tail limit of the queue in front of the rate (frames waiting or in
    /// serialisation); without a rate, of all frames held. None with a rate: 1000.
    pub queue_packets: Option<u32>,
    /// Drop-tail limit in bytes (frame lengths), same scope as `queue_packets`.
    pub queue_bytes: Option<u64>,
    /// Largest L3 packet (frame length minus the 14-byte Ethernet header); larger frames
    /// are dropped with reason `TooLarge`.
    pub mtu: Option<u32>,
    /// Mahimahi-style delivery opportunities; replaces `rate_bps` when set.
    pub delivery_trace: Option<DeliveryTrace>,
}

impl DirectionConfig {
    pub(crate) fn validate(&self, dir: &str) -> Result<(), ConfigError> {
        let f = |name: &str| format!("{dir}.{name}");
        let prob = |name: &str, v: f64| -> Result<(), ConfigError> {
            if !(0.0..=1.0).contains(&v) || v.is_nan() {
                return Err(ConfigError::invalid(&f(name), v, "a probability in [0, 1]"));
            }
            Ok(())
        };
        if self.rate_bps == Some(0) {
            return Err(ConfigError::invalid(
                &f("rate_bps"),
                0,
                "a rate > 0 bit/s, or no rate",
            ));
        }
        if !(0.0..1.0).contains(&self.jitter_correlation) {
            return Err(ConfigError::invalid(
                &f("jitter_correlation"),
                self.jitter_correlation,
                "a fraction in [0, 1)",
            ));
        }
        prob("reorder", self.reorder)?;
        prob("duplicate", self.duplicate)?;
        prob("corrupt", self.corrupt)?;
        if self.reorder > 0.0 && self.delay_ns == 0 {
            return Err(ConfigError::invalid(
                &f("reorder"),
                self.reorder,
                "reorder only with delay_ns > 0 (as netem)",
            ));
        }
        if self.queue_packets == Some(0) {
            return Err(ConfigError::invalid(
                &f("queue_packets"),
                0,
                "at least 1 packet, or no limit",
            ));
        }
        if self.queue_bytes == Some(0) {
            return Err(ConfigError::invalid(
                &f("queue_bytes"),
                0,
                "at least 1 byte, or no limit",
            ));
        }
        if let Some(m) = self.mtu {
            if m < 68 {
                return Err(ConfigError::invalid(
                    &f("mtu"),
                    m,
                    "an MTU >= 68 bytes (RFC 791)",
                ));
            }
        }
        if let Some(t) = &self.delivery_trace {
            t.validate(&f("delivery_trace"))?;
        }
        match &self.loss {
            LossModel::None => {}
            LossModel::Bernoulli { p } => prob("loss.p", *p)?,
            LossModel::GilbertElliott { p, r, h, k } => {
                prob("loss.p", *p)?;
                prob("loss.r", *r)?;
                prob("loss.h", *h)?;
                prob("loss.k", *k)?;
            }
            LossModel::Markov4 {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                for (n, v) in [("p13", *p13), ("p32", *p32), ("p23", *p23), ("p14", *p14)] {
                    prob(&format!("loss.{n}"), v)?;
                }
                if let Some(v) = p31 {
                    prob("loss.p31", *v)?;
                }
                if p13 + p14 > 1.0 {
                    return Err(ConfigError::invalid(
                        &f("loss.p13 + loss.p14"),
                        p13 + p14,
                        "a sum <= 1",
                    ));
                }
                if p31.unwrap_or(1.0 - p13) + p32 > 1.0 {
                    return Err(ConfigError::invalid(
                        &f("loss.p31 + loss.p32"),
                        p31.unwrap_or(1.0 - p13) + p32,
                        "a sum <= 1",
                    ));
                }
            }
            LossModel::SizeDependent { ber } => prob("loss.ber", *ber)?,
            LossModel::DistanceTable { points, distance_m } => {
                if points.is_empty() {
                    return Err(ConfigError::invalid(
                        &f("loss.points"),
                        "[]",
                        "at least one point {distance_m, p}",
                    ));
                }
                for (i, pt) in points.iter().enumerate() {
                    if !pt.distance_m.is_finite() || pt.distance_m < 0.0 {
                        return Err(ConfigError::invalid(
                            &f(&format!("loss.points[{i}].distance_m")),
                            pt.distance_m,
                            "a finite distance >= 0 m",
                        ));
                    }
                    if i > 0 && pt.distance_m < points[i - 1].distance_m {
                        return Err(ConfigError::invalid(
                            &f(&format!("loss.points[{i}].distance_m")),
                            pt.distance_m,
                            "non-decreasing distances",
                        ));
                    }
                    prob(&format!("loss.points[{i}].p"), pt.p)?;
                }
                if !distance_m.is_finite() || *distance_m < 0.0 {
                    return Err(ConfigError::invalid(
                        &f("loss.distance_m"),
                        distance_m,
                        "a finite distance >= 0 m",
                    ));
                }
            }
            LossModel::Ieee80211p(p) => {
                let pos = [
                    ("distance_m", p.distance_m, true),
                    ("critical_distance_m", p.critical_distance_m, false),
                    ("bandwidth_hz", p.bandwidth_hz, false),
                    ("bit_rate_bps", p.bit_rate_bps, false),
                    ("exponent_near", p.exponent_near, true),
                    ("exponent_far", p.exponent_far, true),
                    ("shadowing_db", p.shadowing_db, true),
                ];
                for (n, v, zero_ok) in pos {
                    if !v.is_finite() || v < 0.0 || (!zero_ok && v == 0.0) {
                        return Err(ConfigError::invalid(
                            &f(&format!("loss.{n}")),
                            v,
                            if zero_ok {
                                "a finite number >= 0"
                            } else {
                                "a finite number > 0"
                            },
                        ));
                    }
                }
                for (n, v) in [
                    ("tx_power_dbm", p.tx_power_dbm),
                    ("ref_loss_db", p.ref_loss_db),
                    ("noise_figure_db", p.noise_figure_db),
                ] {
                    if !v.is_finite() {
                        return Err(ConfigError::invalid(
                            &f(&format!("loss.{n}")),
                            v,
                            "a finite number",
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A half-duplex shared medium (one transmitter at a time, e.g. the HF modem of SEEDS S3).
/// Both directions use their own `rate_bps` (and other impairments); the medium serialises
/// them one frame at a time and waits `turnaround_ns` whenever the direction changes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HalfDuplex {
    /// Time between the end of a frame in one direction and the start of a frame in the other.
    pub turnaround_ns: u64,
    /// Largest frame (whole Ethernet frame, bytes) the medium carries; larger: `TooLarge`.
    pub max_frame_bytes: Option<u32>,
    /// Bytes each side's modem buffers before transmission; beyond: `Overrun`.
    pub buffer_bytes: Option<u64>,
}

/// The CSMA shared medium (ns-3's CSMA channel: `csma.rs`): one transmitter at a time, the
/// channel busy for a frame's serialisation plus the propagation delay, binary exponential
/// backoff for a sender that finds it busy. The defaults are ns-3's (`Backoff::Backoff()`,
/// `CsmaNetDevice`'s `InterframeGap`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Csma {
    /// One backoff slot.
    pub slot_ns: u64,
    /// Fewest slots of one backoff.
    pub min_slots: u32,
    /// Most slots of one backoff.
    pub max_slots: u32,
    /// Retry count past which the backoff range stops doubling.
    pub ceiling: u32,
    /// Backoffs of one frame before it is aborted (counted as `queue_full`: it never left its
    /// sender's queue).
    pub max_retries: u32,
    /// Time between the end of a sender's frame and its readiness for the next.
    pub interframe_gap_ns: u64,
}

impl Default for Csma {
    fn default() -> Self {
        Csma {
            slot_ns: 1000,
            min_slots: 1,
            max_slots: 1000,
            ceiling: 10,
            max_retries: 1000,
            interframe_gap_ns: 0,
        }
    }
}

/// One piecewise change: at `at_ns` after the start, the given parts of the link are replaced.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduledChange {
    pub at_ns: u64,
    /// Replaces the whole a->b direction configuration (not a per-field patch).
    pub a_to_b: Option<DirectionConfig>,
    pub b_to_a: Option<DirectionConfig>,
    /// Link up (true) or down (false) from then on.
    pub up: Option<bool>,
}

/// A point of a distance trace: metres between the ends at `at_ns` after the start.
/// Between points the distance is interpolated linearly; before the first / after the
/// last it is held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistancePoint {
    pub at_ns: u64,
    pub distance_m: f64,
}

/// A point of a port's position trace: where the port's host is at `at_ns` after the start (x, y in
/// metres on a plane). Linear between points, held before the first and after the last; a trace of
/// one point is a fixed position (`at_ns` defaults to 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PositionPoint {
    #[serde(default)]
    pub at_ns: u64,
    pub x_m: f64,
    pub y_m: f64,
}

/// The whole link: both directions, and what they share.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    pub a_to_b: DirectionConfig,
    pub b_to_a: DirectionConfig,
    pub half_duplex: Option<HalfDuplex>,
    /// A CSMA shared medium (ns-3's channel model); not with `half_duplex`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csma: Option<Csma>,
    /// Piecewise changes, applied in `at_ns` order (sorted on load).
    pub schedule: Vec<ScheduledChange>,
    /// Distance over time, feeding `LossModel::Ieee80211p` in both directions.
    pub distance_trace: Vec<DistancePoint>,
    /// Each port's position over time (port order; none, or one per port). On a segment, a
    /// distance-based loss model then decides per pair: each copy from port i to port j draws its
    /// loss at the distance between i and j (docs/wire-models.md, "Per-pair links"); on a two-sided
    /// link the distance between the two ends replaces `distance_trace`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<Vec<PositionPoint>>,
}

impl LinkConfig {
    /// Checks every value; the error names the field (`a_to_b.loss.p`) and what was expected.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.a_to_b.validate("a_to_b")?;
        self.b_to_a.validate("b_to_a")?;
        if let Some(hd) = &self.half_duplex {
            if hd
                .max_frame_bytes
                .is_some_and(|m| (m as usize) <= ETHERNET_HEADER_BYTES)
            {
                return Err(ConfigError::invalid(
                    "half_duplex.max_frame_bytes",
                    hd.max_frame_bytes.unwrap(),
                    "more than the 14-byte Ethernet header",
                ));
            }
            for (name, d) in [("a_to_b", &self.a_to_b), ("b_to_a", &self.b_to_a)] {
                if d.delivery_trace.is_some() {
                    return Err(ConfigError::invalid(
                        &format!("{name}.delivery_trace"),
                        "a trace",
                        "no delivery trace on a half-duplex link (the medium serialises at rate_bps)",
                    ));
                }
            }
            if hd.buffer_bytes == Some(0) {
                return Err(ConfigError::invalid(
                    "half_duplex.buffer_bytes",
                    0,
                    "at least 1 byte, or no limit",
                ));
            }
        }
        if let Some(c) = &self.csma {
            if self.half_duplex.is_some() {
                return Err(ConfigError::invalid(
                    "csma",
                    "csma and half_duplex",
                    "one shared medium: csma or half_duplex",
                ));
            }
            if c.slot_ns == 0 {
                return Err(ConfigError::invalid("csma.slot_ns", 0, "at least 1 ns"));
            }
            if c.max_slots == 0 || c.min_slots > c.max_slots {
                return Err(ConfigError::invalid(
                    "csma.max_slots",
                    c.max_slots,
                    "at least 1 and at least min_slots",
                ));
            }
            for (name, d) in [("a_to_b", &self.a_to_b), ("b_to_a", &self.b_to_a)] {
                if d.delivery_trace.is_some() {
                    return Err(ConfigError::invalid(
                        &format!("{name}.delivery_trace"),
                        "a trace",
                        "no delivery trace on a CSMA medium (the medium serialises at rate_bps)",
                    ));
                }
            }
        }
        for (i, c) in self.schedule.iter().enumerate() {
            if let Some(d) = &c.a_to_b {
                d.validate(&format!("schedule[{i}].a_to_b"))?;
            }
            if let Some(d) = &c.b_to_a {
                d.validate(&format!("schedule[{i}].b_to_a"))?;
            }
        }
        for (i, p) in self.distance_trace.iter().enumerate() {
            if !p.distance_m.is_finite() || p.distance_m < 0.0 {
                return Err(ConfigError::invalid(
                    &format!("distance_trace[{i}].distance_m"),
                    p.distance_m,
                    "a finite distance >= 0 m",
                ));
            }
            if i > 0 && p.at_ns < self.distance_trace[i - 1].at_ns {
                return Err(ConfigError::invalid(
                    &format!("distance_trace[{i}].at_ns"),
                    p.at_ns,
                    "non-decreasing times",
                ));
            }
        }
        validate_positions(&self.positions)?;
        if !self.positions.is_empty() && !self.distance_trace.is_empty() {
            return Err(ConfigError::invalid(
                "positions",
                "positions and a distance_trace",
                "one of them (the ports' positions set every distance)",
            ));
        }
        Ok(())
    }
}

/// Checks every port's trace (`positions`): at least one point, finite coordinates, non-decreasing times.
fn validate_positions(positions: &[Vec<PositionPoint>]) -> Result<(), ConfigError> {
    for (i, trace) in positions.iter().enumerate() {
        if trace.is_empty() {
            return Err(ConfigError::invalid(
                &format!("positions[{i}]"),
                "[]",
                "at least one point {at_ns, x_m, y_m} (one point: a fixed position)",
            ));
        }
        for (k, p) in trace.iter().enumerate() {
            for (name, v) in [("x_m", p.x_m), ("y_m", p.y_m)] {
                if !v.is_finite() {
                    return Err(ConfigError::invalid(
                        &format!("positions[{i}][{k}].{name}"),
                        v,
                        "a finite coordinate in metres",
                    ));
                }
            }
            if k > 0 && p.at_ns < trace[k - 1].at_ns {
                return Err(ConfigError::invalid(
                    &format!("positions[{i}][{k}].at_ns"),
                    p.at_ns,
                    "non-decreasing times",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod position_tests {
    use super::*;

    fn pt(at_ns: u64, x_m: f64, y_m: f64) -> PositionPoint {
        PositionPoint { at_ns, x_m, y_m }
    }

    #[test]
    fn invalid_positions_name_the_key() {
        let e = validate_positions(&[vec![pt(0, 0.0, 0.0)], vec![]]).unwrap_err();
        assert!(e.to_string().starts_with("positions[1] = []"), "{e}");
        let e = validate_positions(&[vec![pt(0, f64::NAN, 0.0)]]).unwrap_err();
        assert!(e.to_string().starts_with("positions[0][0].x_m"), "{e}");
        let e = validate_positions(&[vec![pt(5, 0.0, 0.0), pt(4, 1.0, 0.0)]]).unwrap_err();
        assert!(
            e.to_string().starts_with("positions[0][1].at_ns = 4"),
            "{e}"
        );
    }
}
