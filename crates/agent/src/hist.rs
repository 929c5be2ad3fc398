//! Latency histograms: HdrHistogram in nanoseconds, summarised and serialised.
//!
//! Range and precision of the serialised histogram are fixed by
//! docs/agent-protocol.md: lowest discernible 1000 ns, highest 3.6e12 ns (1 h),
//! 3 significant digits.  With a lowest discernible value of 1000 ns, HdrHistogram
//! resolves values below about 1 ms only to 512 ns (10 % at 5 us), too coarse for
//! the summary figures of a fast round trip; so each value is also recorded in a
//! copy with 1 ns resolution (3 significant digits at every magnitude), from which
//! min / mean / std / percentiles / max are computed.  Values above the range are
//! clamped to it (and counted in `clamped`), so recording never fails in a hot
//! path.  The serialised form is the HdrHistogram V2 compressed encoding in base64
//! ("HISTFAAA..."), readable by every HdrHistogram implementation.

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

pub const LOWEST_NS: u64 = 1_000;
pub const HIGHEST_NS: u64 = 3_600_000_000_000;
pub const SIGFIG: u8 = 3;
/// Lowest discernible value of the copy the summary figures come from.
pub const FINE_LOWEST_NS: u64 = 1;

/// Quantiles reported in every latency object, with their JSON key.
pub const QUANTILES: [(f64, &str); 6] = [
    (0.50, "p50_us"),
    (0.90, "p90_us"),
    (0.99, "p99_us"),
    (0.999, "p999_us"),
    (0.9999, "p9999_us"),
    (0.999999, "p999999_us"),
];

pub struct Latency {
    /// The contract histogram (serialised as `hdr`).
    h: Histogram<u64>,
    /// Same values at 1 ns resolution (summary figures).
    fine: Histogram<u64>,
    clamped: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Self {
        let h = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG)
            .expect("constant bounds are valid");
        let fine = Histogram::new_with_bounds(FINE_LOWEST_NS, HIGHEST_NS, SIGFIG)
            .expect("constant bounds are valid");
        Latency {
            h,
            fine,
            clamped: 0,
        }
    }

    /// Record one value in ns (negative differences are recorded as 0).
    #[inline]
    pub fn record(&mut self, ns: i64) {
        let v = if ns < 0 { 0 } else { ns as u64 };
        let v = if v > HIGHEST_NS {
            self.clamped += 1;
            HIGHEST_NS
        } else {
            v
        };
        self.h.saturating_record(v);
        self.fine.saturating_record(v);
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    pub fn histogram(&self) -> &Histogram<u64> {
        &self.h
    }

    /// Value at quantile `q` in ns, at 1 ns resolution (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.fine.is_empty() {
            0
        } else {
            self.fine.value_at_quantile(q)
        }
    }

    /// The latency object of a result line (values in microseconds, plus `hdr`).
    pub fn to_json(&self) -> Value {
        let us = |ns: f64| ns.round() / 1000.0; // microseconds, 3 decimals
        let mut o = serde_json::Map::new();
        o.insert("count".into(), json!(self.h.len()));
        if self.h.is_empty() {
            for k in ["min_us", "mean_us", "std_us"]
                .into_iter()
                .chain(QUANTILES.iter().map(|q| q.1))
                .chain(["max_us"])
            {
                o.insert(k.into(), Value::Null);
            }
        } else {
            let f = &self.fine;
            o.insert("min_us".into(), json!(us(f.min() as f64)));
            o.insert("mean_us".into(), json!(us(f.mean())));
            o.insert("std_us".into(), json!(us(f.stdev())));
            for (q, k) in QUANTILES {
                o.insert(k.into(), json!(us(f.value_at_quantile(q) as f64)));
            }
            o.insert("max_us".into(), json!(us(f.max() as f64)));
        }
        if self.clamped > 0 {
            o.insert("clamped".into(), json!(self.clamped));
        }
        o.insert("hdr".into(), json!(serialize(&self.h)));
        Value::Object(o)
    }
}

/// V2 compressed serialisation, base64 (standard alphabet, padded).
pub fn serialize(h: &Histogram<u64>) -> String {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .expect("serialising into a Vec cannot fail");
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// Inverse of `serialize` (used by tests and by anyone checking our output).
pub fn deserialize(s: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("base64: {e}"))?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut std::io::Cursor::new(bytes))
        .map_err(|e| format!("hdr: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialise_round_trip_keeps_every_count() {
        let mut l = Latency::new();
        for i in 1..=10_000i64 {
            l.record(i * 1_000); // 1 us .. 10 ms
        }
        let s = serialize(l.histogram());
        assert!(
            s.starts_with("HISTFAAA"),
            "not a V2 compressed histogram: {}",
            &s[..12]
        );
        let back = deserialize(&s).unwrap();
        assert_eq!(back.len(), 10_000);
        assert_eq!(back.low(), LOWEST_NS);
        assert_eq!(back.high(), HIGHEST_NS);
        for q in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(
                back.value_at_quantile(q),
                l.histogram().value_at_quantile(q)
            );
        }
    }

    #[test]
    fn percentiles_within_three_significant_digits() {
        let mut l = Latency::new();
        for i in 1..=1000i64 {
            l.record(i * 10_000); // 10 us .. 10 ms, uniform
        }
        let j = l.to_json();
        let p50 = j["p50_us"].as_f64().unwrap();
        let p99 = j["p99_us"].as_f64().unwrap();
        let max = j["max_us"].as_f64().unwrap();
        assert!((p50 - 5000.0).abs() / 5000.0 < 0.002, "p50 {p50}");
        assert!((p99 - 9900.0).abs() / 9900.0 < 0.002, "p99 {p99}");
        assert!((max - 10000.0).abs() / 10000.0 < 0.002, "max {max}");
        assert!((j["mean_us"].as_f64().unwrap() - 5005.0).abs() < 10.0);
        assert_eq!(j["count"], 1000);
    }

    #[test]
    fn small_round_trips_keep_three_digits_in_the_summary() {
        let mut l = Latency::new();
        for v in [4_700i64, 4_710, 4_720, 4_730, 4_740] {
            l.record(v);
        }
        let p50 = l.to_json()["p50_us"].as_f64().unwrap();
        assert!(
            (p50 - 4.72).abs() < 0.01,
            "p50 {p50} (the 1000-ns contract histogram alone would say 5.119)"
        );
        // The serialised histogram is still the contract's, with every value.
        let back = deserialize(&serialize(l.histogram())).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(back.low(), LOWEST_NS);
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let mut l = Latency::new();
        l.record(-5);
        l.record(HIGHEST_NS as i64 * 2);
        assert_eq!(l.count(), 2);
        assert_eq!(l.to_json()["clamped"], 1);
    }

    #[test]
    fn empty_histogram_has_null_percentiles() {
        let j = Latency::new().to_json();
        assert_eq!(j["count"], 0);
        assert!(j["p50_us"].is_null());
        assert!(deserialize(j["hdr"].as_str().unwrap()).unwrap().is_empty());
    }
}
