//! What the binary reports: the scheduling error of departures (actual send time minus due time) per
//! direction (a link) or per port (a shared segment) in HDR histograms, the I/O counters only the binary sees (kernel receive drops, truncated
//! frames, send failures), and the `stats` / `ready` / `error` JSON lines built from them and from the
//! core's own `Stats`. It does not measure anything itself; the forwarding loop feeds it.

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::packet::SendErrors;

/// Histogram range: 1 ns .. 1 h, 3 significant digits (DESIGN.md's measurement rules, in ns as the agent's).
const HIST_LOWEST_NS: u64 = 1;
const HIST_HIGHEST_NS: u64 = 3_600_000_000_000;
const HIST_SIGFIG: u8 = 3;
/// A departure later than this counts as late in `late_fraction`.
pub const LATE_NS: u64 = 1_000_000;

/// Everything the I/O side records for one direction (frames that arrive at one side and leave at the other).
#[derive(Clone)]
pub struct DirectionIo {
    sched: Histogram<u64>,
    late: u64,
    /// Frames the kernel dropped at the receiving socket because the loop did not read them in time.
    pub rx_kernel_drops: u64,
    /// Frames larger than the receive buffer (interface MTU + L2 header), dropped.
    pub rx_truncated: u64,
    /// Frames handed to the kernel for sending.
    pub tx_frames: u64,
    /// Frames the kernel refused to send, by reason.
    pub send_errors: SendErrors,
}

impl DirectionIo {
    pub fn new() -> Self {
        Self {
            sched: Histogram::new_with_bounds(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_SIGFIG)
                .expect("constant histogram bounds are valid"),
            late: 0,
            rx_kernel_drops: 0,
            rx_truncated: 0,
            tx_frames: 0,
            send_errors: SendErrors::default(),
        }
    }

    /// One departure: `actual_ns` is when the frame was handed to the kernel, `due_ns` when the core wanted it out.
    pub fn record_departure(&mut self, actual_ns: u64, due_ns: u64) {
        let err = actual_ns.saturating_sub(due_ns);
        if err > LATE_NS {
            self.late += 1;
        }
        self.sched.saturating_record(err.max(HIST_LOWEST_NS));
    }

    /// Several slots' figures together (a segment's ports): histograms added, counters summed.
    pub fn merged(all: &[DirectionIo]) -> DirectionIo {
        let mut m = DirectionIo::new();
        for d in all {
            // Same bounds and precision on both sides: adding cannot fail.
            let _ = m.sched.add(&d.sched);
            m.late += d.late;
            m.rx_kernel_drops += d.rx_kernel_drops;
            m.rx_truncated += d.rx_truncated;
            m.tx_frames += d.tx_frames;
            m.send_errors.msgsize += d.send_errors.msgsize;
            m.send_errors.netdown += d.send_errors.netdown;
            m.send_errors.nobufs += d.send_errors.nobufs;
            m.send_errors.other += d.send_errors.other;
        }
        m
    }

    pub fn sched_json(&self) -> Value {
        let h = &self.sched;
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let count = h.len();
        let mut hdr = Vec::new();
        let encoded = V2DeflateSerializer::new()
            .serialize(h, &mut hdr)
            .map(|_| base64::engine::general_purpose::STANDARD.encode(&hdr))
            .unwrap_or_default();
        json!({
            "count": count,
            "min_us": if count > 0 { h.min() as f64 / 1000.0 } else { 0.0 },
            "mean_us": if count > 0 { h.mean() / 1000.0 } else { 0.0 },
            "p50_us": us(0.5),
            "p90_us": us(0.9),
            "p99_us": us(0.99),
            "p999_us": us(0.999),
            "max_us": if count > 0 { h.max() as f64 / 1000.0 } else { 0.0 },
            "late_fraction": if count > 0 { self.late as f64 / count as f64 } else { 0.0 },
            "hdr": encoded,
        })
    }

    fn io_json(&self) -> Value {
        json!({
            "rx_kernel_drops": self.rx_kernel_drops,
            "rx_truncated": self.rx_truncated,
            "tx_frames": self.tx_frames,
            "send_errors": {
                "msgsize": self.send_errors.msgsize,
                "netdown": self.send_errors.netdown,
                "nobufs": self.send_errors.nobufs,
                "other": self.send_errors.other,
            },
        })
    }
}

/// How the loop itself fared: timed wakeups and how late they came (scheduler latency of this machine,
/// the root cause when departures are late), and time spent spinning.
#[derive(Clone)]
pub struct LoopStats {
    wake_late: Histogram<u64>,
    pub spin_ns: u64,
}

impl LoopStats {
    pub fn new() -> Self {
        Self {
            wake_late: Histogram::new_with_bounds(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_SIGFIG)
                .expect("constant histogram bounds are valid"),
            spin_ns: 0,
        }
    }

    /// Several loops' figures together (a link's two direction threads): wakeups added, spinning summed
    /// (so `spin_fraction` is in cores).
    pub fn merged(all: &[&LoopStats]) -> LoopStats {
        let mut m = LoopStats::new();
        for l in all {
            // Same bounds and precision on both sides: adding cannot fail.
            let _ = m.wake_late.add(&l.wake_late);
            m.spin_ns += l.spin_ns;
        }
        m
    }

    /// A timed sleep meant to end at `intended_ns` ended at `woke_ns`.
    pub fn record_wakeup(&mut self, intended_ns: u64, woke_ns: u64) {
        self.wake_late.saturating_record(woke_ns.saturating_sub(intended_ns).max(HIST_LOWEST_NS));
    }

    pub fn json(&self, uptime_ns: u64) -> Value {
        let h = &self.wake_late;
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        json!({
            "timed_wakeups": h.len(),
            "wake_late_p50_us": us(0.5),
            "wake_late_p99_us": us(0.99),
            "wake_late_max_us": if !h.is_empty() { h.max() as f64 / 1000.0 } else { 0.0 },
            "spin_fraction": if uptime_ns > 0 { self.spin_ns as f64 / uptime_ns as f64 } else { 0.0 },
        })
    }
}

/// One port of the wire: its interface, that interface's MTU, and the MAC of the host behind it (segments).
#[derive(Clone)]
pub struct PortInfo {
    pub ifname: String,
    pub mtu: usize,
    pub mac: Option<String>,
}

/// Fixed facts about this wire, repeated in every stats line.
#[derive(Clone)]
pub struct WireInfo {
    /// In command-line order: `--if-a`, `--if-b` (a link), or the `--port`s (a segment).
    pub ports: Vec<PortInfo>,
    pub seed: u64,
    pub rx_timestamps: bool,
    pub spin_us: u64,
    pub control: Option<String>,
    /// The loop runs under SCHED_FIFO.
    pub realtime: bool,
    /// Forwarding threads: 1 (one loop) or 2 (one per direction of a link).
    pub threads: usize,
}

/// The `stats` line: `core` is the core's `Stats` serialised; when it holds `a_to_b` / `b_to_a` objects,
/// the I/O figures are merged into them as `sched_error` and `io`, so each direction reads as one object.
pub fn stats_line(
    info: &WireInfo,
    uptime_ns: u64,
    up: [bool; 2],
    core: Value,
    io: &[DirectionIo],
    lp: &LoopStats,
) -> Value {
    let names = ["a_to_b", "b_to_a"];
    let mut line = Map::new();
    line.insert("v".into(), json!(1));
    line.insert("type".into(), json!("stats"));
    line.insert("uptime_s".into(), json!(uptime_ns as f64 / 1e9));
    line.insert("up".into(), json!(up[0] && up[1]));
    line.insert("if_a".into(), json!(info.ports[0].ifname));
    line.insert("if_b".into(), json!(info.ports[1].ifname));
    line.insert("seed".into(), json!(info.seed));
    line.insert("realtime".into(), json!(info.realtime));
    line.insert("threads".into(), json!(info.threads));
    let mut core = core;
    let mut rest = Map::new();
    if let Value::Object(m) = &mut core {
        for (k, v) in std::mem::take(m) {
            rest.insert(k, v);
        }
    } else {
        rest.insert("emulator".into(), core);
    }
    for (i, name) in names.iter().enumerate() {
        let mut dir = match rest.remove(*name) {
            Some(Value::Object(m)) => m,
            Some(other) => {
                let mut m = Map::new();
                m.insert("emulator".into(), other);
                m
            }
            None => Map::new(),
        };
        dir.insert("up".into(), json!(up[i]));
        dir.insert("sched_error".into(), io[i].sched_json());
        dir.insert("io".into(), io[i].io_json());
        line.insert((*name).into(), Value::Object(dir));
    }
    line.insert("loop".into(), lp.json(uptime_ns));
    // Whatever else the core reports (link-wide figures) keeps its own keys, under "link".
    if !rest.is_empty() {
        line.insert("link".into(), Value::Object(rest));
    }
    Value::Object(line)
}

fn ports_json(info: &WireInfo) -> Value {
    info.ports.iter().map(|p| json!({"ifname": p.ifname, "mtu": p.mtu, "mac": p.mac})).collect()
}

/// The `stats` line of a shared segment (`core` is wire-core's `SegmentStats`, `io` one slot per port).
/// `a_to_b` / `b_to_a` hold all uplinks / all downlinks together, as a link's two directions, so readers
/// of the two-sided line read a segment the same way: frames received (kernel drops, truncation) count
/// in `a_to_b.io`, departures (scheduling error, sends) in `b_to_a`. `ports[i]` has port i's own
/// `uplink` and `downlink` counters and the I/O of its interface; `forwarding` counts the decisions.
pub fn segment_stats_line(
    info: &WireInfo,
    uptime_ns: u64,
    up: [bool; 2],
    core: Value,
    io: &[DirectionIo],
    lp: &LoopStats,
) -> Value {
    let mut line = Map::new();
    line.insert("v".into(), json!(1));
    line.insert("type".into(), json!("stats"));
    line.insert("uptime_s".into(), json!(uptime_ns as f64 / 1e9));
    line.insert("up".into(), json!(up[0] && up[1]));
    line.insert("segment".into(), json!(true));
    line.insert("seed".into(), json!(info.seed));
    line.insert("realtime".into(), json!(info.realtime));
    line.insert("threads".into(), json!(info.threads));
    let mut rest = match core {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("emulator".into(), other);
            m
        }
    };
    let all = DirectionIo::merged(io);
    let none = DirectionIo::new();
    let rx_only = |d: &DirectionIo| {
        let mut j = d.io_json();
        j["tx_frames"] = json!(0);
        j["send_errors"] = none.io_json()["send_errors"].clone();
        j
    };
    let tx_only = |d: &DirectionIo| {
        let mut j = d.io_json();
        j["rx_kernel_drops"] = json!(0);
        j["rx_truncated"] = json!(0);
        j
    };
    for (name, sched, io_part) in [
        ("a_to_b", none.sched_json(), rx_only(&all)),
        ("b_to_a", all.sched_json(), tx_only(&all)),
    ] {
        let mut dir = match rest.remove(name) {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        dir.insert("sched_error".into(), sched);
        dir.insert("io".into(), io_part);
        line.insert(name.into(), Value::Object(dir));
    }
    let core_ports = match rest.remove("ports") {
        Some(Value::Array(v)) => v,
        _ => Vec::new(),
    };
    let ports: Vec<Value> = info
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let c = core_ports.get(i).cloned().unwrap_or_else(|| json!({}));
            json!({
                "ifname": p.ifname,
                "mac": p.mac,
                "uplink": c.get("uplink").cloned().unwrap_or(Value::Null),
                "downlink": c.get("downlink").cloned().unwrap_or(Value::Null),
                "sched_error": io.get(i).map(|d| d.sched_json()).unwrap_or(Value::Null),
                "io": io.get(i).map(|d| d.io_json()).unwrap_or(Value::Null),
            })
        })
        .collect();
    line.insert("ports".into(), Value::Array(ports));
    if let Some(f) = rest.remove("forwarding") {
        line.insert("forwarding".into(), f);
    }
    line.insert("loop".into(), lp.json(uptime_ns));
    if !rest.is_empty() {
        line.insert("link".into(), Value::Object(rest));
    }
    Value::Object(line)
}

pub fn ready_line(info: &WireInfo) -> Value {
    let mut line = json!({
        "v": 1,
        "type": "ready",
        "pid": std::process::id(),
        "ports": ports_json(info),
        "seed": info.seed,
        "rx_timestamps": info.rx_timestamps,
        "spin_us": info.spin_us,
        "realtime": info.realtime,
        "threads": info.threads,
        "control": info.control,
        "version": env!("CARGO_PKG_VERSION"),
    });
    if let [a, b] = &info.ports[..] {
        line["if_a"] = json!(a.ifname);
        line["if_b"] = json!(b.ifname);
        line["mtu_a"] = json!(a.mtu);
        line["mtu_b"] = json!(b.mtu);
    }
    line
}

pub fn error_line(kind: &str, message: &str) -> Value {
    json!({"v": 1, "type": "error", "kind": kind, "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_error_percentiles_follow_recorded_values() {
        let mut d = DirectionIo::new();
        for i in 0..100u64 {
            d.record_departure(1_000_000 + i * 1_000, 1_000_000); // 0..99 us late
        }
        d.record_departure(10_000_000, 5_000_000); // 5 ms late
        let j = d.sched_json();
        assert_eq!(j["count"], 101);
        let p50 = j["p50_us"].as_f64().unwrap();
        assert!((49.0..=51.0).contains(&p50), "p50 {p50}");
        let max = j["max_us"].as_f64().unwrap();
        assert!((4990.0..=5010.0).contains(&max), "max {max}");
        assert!((j["late_fraction"].as_f64().unwrap() - 1.0 / 101.0).abs() < 1e-9);
        assert!(!j["hdr"].as_str().unwrap().is_empty());
    }

    #[test]
    fn early_departure_counts_as_zero_error() {
        let mut d = DirectionIo::new();
        d.record_departure(5, 10);
        assert_eq!(d.sched_json()["max_us"].as_f64().unwrap(), 0.001);
    }

    #[test]
    fn stats_line_merges_directions() {
        let info = WireInfo {
            ports: ["a", "b"].iter().map(|n| PortInfo { ifname: n.to_string(), mtu: 1500, mac: None }).collect(),
            seed: 1,
            rx_timestamps: true,
            spin_us: 100,
            control: None,
            realtime: false,
            threads: 1,
        };
        let core = json!({"a_to_b": {"packets_in": 3}, "b_to_a": {"packets_in": 4}, "half_duplex_turnarounds": 0});
        let io = [DirectionIo::new(), DirectionIo::new()];
        let mut lp = LoopStats::new();
        lp.record_wakeup(1_000, 51_000);
        lp.spin_ns = 500_000_000;
        let line = stats_line(&info, 2_000_000_000, [true, false], core, &io, &lp);
        assert_eq!(line["loop"]["timed_wakeups"], 1);
        assert!((line["loop"]["wake_late_max_us"].as_f64().unwrap() - 50.0).abs() < 0.1);
        assert_eq!(line["loop"]["spin_fraction"], 0.25);
        assert_eq!(line["a_to_b"]["packets_in"], 3);
        assert_eq!(line["b_to_a"]["packets_in"], 4);
        assert_eq!(line["a_to_b"]["sched_error"]["count"], 0);
        assert_eq!(line["link"]["half_duplex_turnarounds"], 0);
        assert_eq!(line["uptime_s"], 2.0);
        assert_eq!(line["up"], false);
        assert_eq!(line["b_to_a"]["up"], false);
    }

    #[test]
    fn segment_stats_line_has_ports_and_link_shaped_directions() {
        let info = WireInfo {
            ports: (0..3)
                .map(|i| PortInfo { ifname: format!("rn0p{i}"), mtu: 1500, mac: Some(format!("02:00:00:00:00:0{i}")) })
                .collect(),
            seed: 3,
            rx_timestamps: true,
            spin_us: 100,
            control: None,
            realtime: false,
            threads: 1,
        };
        let core = json!({
            "a_to_b": {"packets_in": 6}, "b_to_a": {"packets_out": 9}, "schedule_applied": 0,
            "ports": [{"uplink": {"packets_in": 1}, "downlink": {"packets_out": 2}},
                      {"uplink": {"packets_in": 2}, "downlink": {"packets_out": 3}},
                      {"uplink": {"packets_in": 3}, "downlink": {"packets_out": 4}}],
            "forwarding": {"unicast": 4, "flooded": 2, "filtered": 0, "copies": 8},
        });
        let mut io: Vec<DirectionIo> = (0..3).map(|_| DirectionIo::new()).collect();
        io[1].record_departure(2_000, 1_000);
        io[2].record_departure(3_000, 1_000);
        io[2].rx_kernel_drops = 5;
        io[1].tx_frames = 7;
        let line = segment_stats_line(&info, 1_000_000_000, [true, true], core, &io, &LoopStats::new());
        assert_eq!(line["segment"], true);
        assert_eq!(line["a_to_b"]["packets_in"], 6);
        assert_eq!(line["b_to_a"]["packets_out"], 9);
        // Receptions count on the way in, departures on the way out.
        assert_eq!(line["a_to_b"]["io"]["rx_kernel_drops"], 5);
        assert_eq!(line["a_to_b"]["io"]["tx_frames"], 0);
        assert_eq!(line["b_to_a"]["io"]["tx_frames"], 7);
        assert_eq!(line["b_to_a"]["io"]["rx_kernel_drops"], 0);
        assert_eq!(line["b_to_a"]["sched_error"]["count"], 2);
        assert_eq!(line["a_to_b"]["sched_error"]["count"], 0);
        assert_eq!(line["ports"][2]["ifname"], "rn0p2");
        assert_eq!(line["ports"][2]["uplink"]["packets_in"], 3);
        assert_eq!(line["ports"][1]["downlink"]["packets_out"], 3);
        assert_eq!(line["ports"][2]["sched_error"]["count"], 1);
        assert_eq!(line["forwarding"]["copies"], 8);
        assert_eq!(line["link"]["schedule_applied"], 0);
    }
}
