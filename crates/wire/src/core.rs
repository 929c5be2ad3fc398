//! The impairment core behind the forwarding loop: wire-core's two-sided `Emulator` for a two-interface
//! link, or a `Segment` for a shared segment of N ports. Owns the mapping between socket indices (ports,
//! in command-line order) and the core's sides or ports, which I/O counter slot a frame is counted in,
//! and the core's part of the stats JSON. The loop (`forward`) only deals in port indices.

use roughnet_wire_core::{ConfigError, Emulator, LinkConfig, Segment, Side};
use serde_json::{json, Value};

pub enum Core {
    /// Two ports: port 0 is side A (`--if-a`), port 1 side B. Every frame goes to the other port.
    Link(Emulator),
    /// N ports, forwarding by destination MAC.
    Segment(Segment),
}

fn side(port: usize) -> Side {
    if port == 0 {
        Side::A
    } else {
        Side::B
    }
}

fn port_of(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

impl Core {
    pub fn is_segment(&self) -> bool {
        matches!(self, Core::Segment(_))
    }

    pub fn start(&mut self, now_ns: u64) {
        match self {
            Core::Link(e) => e.start(now_ns),
            Core::Segment(s) => s.start(now_ns),
        }
    }

    /// A frame received on `port` (drops are counted by reason in the core's stats).
    pub fn ingress(&mut self, now_ns: u64, port: usize, frame: Vec<u8>) {
        match self {
            Core::Link(e) => {
                let _ = e.ingress(now_ns, side(port), frame);
            }
            Core::Segment(s) => {
                let _ = s.ingress(now_ns, port, frame);
            }
        }
    }

    /// Frames due by `now_ns` appended to `out` as (destination port, frame, due); `scratch` is the
    /// two-sided emulator's own output buffer (kept by the caller so that nothing is allocated per call).
    pub fn egress(&mut self, now_ns: u64, scratch: &mut Vec<(Side, Vec<u8>, u64)>, out: &mut Vec<(usize, Vec<u8>, u64)>) {
        match self {
            Core::Link(e) => {
                e.egress(now_ns, scratch);
                out.extend(scratch.drain(..).map(|(to, f, due)| (port_of(to), f, due)));
            }
            Core::Segment(s) => s.egress(now_ns, out),
        }
    }

    pub fn next_due(&self) -> Option<u64> {
        match self {
            Core::Link(e) => e.next_due(),
            Core::Segment(s) => s.next_due(),
        }
    }

    pub fn next_change(&self) -> Option<u64> {
        match self {
            Core::Link(e) => e.next_change(),
            Core::Segment(s) => s.next_change(),
        }
    }

    pub fn set_config(&mut self, now_ns: u64, cfg: LinkConfig) -> Result<(), ConfigError> {
        match self {
            Core::Link(e) => e.set_config(now_ns, cfg),
            Core::Segment(s) => s.set_config(now_ns, cfg),
        }
    }

    /// Up or down: everything, one direction (`Side::A`: a_to_b, a segment's uplinks), and on a segment
    /// optionally one port only. Err names what was wrong.
    pub fn set_up(&mut self, now_ns: u64, direction: Option<Side>, port: Option<usize>, up: bool) -> Result<(), String> {
        match self {
            Core::Link(e) => match (direction, port) {
                (_, Some(_)) => Err("\"port\" applies to a shared segment only; on a two-interface link use \
                                     \"direction\" (a_to_b or b_to_a)"
                    .to_string()),
                (None, None) => {
                    e.set_up(now_ns, up);
                    Ok(())
                }
                (Some(from), None) => {
                    e.set_direction_up(now_ns, from, up);
                    Ok(())
                }
            },
            Core::Segment(s) => {
                if let Some(p) = port {
                    if p >= s.ports() {
                        return Err(format!("\"port\" = {p}; expected 0 to {} (the ports in command-line order)", s.ports() - 1));
                    }
                }
                let (uplink, downlink) = match direction {
                    None => (true, true),
                    Some(Side::A) => (true, false),
                    Some(Side::B) => (false, true),
                };
                s.set_ports_up(now_ns, port, uplink, downlink, up);
                Ok(())
            }
        }
    }

    /// Frames held now (admitted, not yet sent), all directions.
    pub fn held(&self) -> u64 {
        match self {
            Core::Link(e) => {
                let s = e.stats();
                s.a_to_b.held_packets + s.b_to_a.held_packets
            }
            Core::Segment(s) => {
                let st = s.stats();
                st.a_to_b.held_packets + st.b_to_a.held_packets
            }
        }
    }

    /// The core's stats as JSON (`Stats` or `SegmentStats`), with `csma` (backoffs, aborted) on a
    /// CSMA medium.
    pub fn stats_json(&self) -> Value {
        let (v, csma) = match self {
            Core::Link(e) => (serde_json::to_value(e.stats()), e.config().csma.is_some().then(|| e.csma_counts())),
            Core::Segment(s) => (serde_json::to_value(s.stats()), s.config().csma.is_some().then(|| s.csma_counts())),
        };
        let mut v = v.unwrap_or_else(|e| json!({"error": e.to_string()}));
        if let (Some(c), Some(obj)) = (csma, v.as_object_mut()) {
            obj.insert("csma".into(), json!(c));
        }
        v
    }

    /// The I/O counter slot of a frame leaving on `port`: per direction on a link (frames to B travel
    /// a_to_b, slot 0), per port on a segment.
    pub fn tx_slot(&self, port: usize) -> usize {
        match self {
            Core::Link(_) => 1 - port,
            Core::Segment(_) => port,
        }
    }
}
