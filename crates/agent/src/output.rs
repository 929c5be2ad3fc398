//! The JSON lines on stdout: ready, interval, result, error, version.
//!
//! Every line starts with `"v":1,"type":...` and is flushed at once, because the
//! runner reacts to `ready` and reads intervals live.  Patterns build the fields;
//! this module only frames and writes them.  Logs never go here (stderr, tracing).
//!
//! Host mode (crate::host): every line printed on behalf of a flow carries `"flow": K`.  The
//! thread running flow K says so once (`set_flow`); `emit` adds the key.  A thread that prints
//! on a flow's behalf from elsewhere carries the id over (`current_flow`, then `set_flow`).

use serde_json::{json, Map, Value};
use std::cell::Cell;
use std::io::Write;

thread_local! {
    /// The flow this thread prints for (host mode); None: no `flow` key.
    static FLOW: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Lines this thread prints from now on carry `"flow": flow` (None: no flow key).
pub fn set_flow(flow: Option<u32>) {
    FLOW.with(|f| f.set(flow));
}

/// The flow this thread prints for, if any.
pub fn current_flow() -> Option<u32> {
    FLOW.with(|f| f.get())
}

/// Run `f` with this thread printing for `flow`, then restore what it printed for before.
pub fn with_flow<R>(flow: u32, f: impl FnOnce() -> R) -> R {
    let before = current_flow();
    set_flow(Some(flow));
    let r = f();
    set_flow(before);
    r
}

/// Output format version (the `v` of every line).
pub const OUTPUT_VERSION: u64 = 1;

/// Write one line `{"v":1,"type":<kind>, ...fields}` to stdout and flush (with
/// `"flow":K` after the type when this thread prints for flow K).
pub fn emit(kind: &str, fields: Value) {
    let line = format_line(kind, fields, current_flow());
    let mut out = std::io::stdout().lock();
    // A closed stdout (runner gone) must not turn a finished run into a crash.
    if let Err(e) = out.write_all(line.as_bytes()).and_then(|_| out.flush()) {
        tracing::warn!("cannot write to stdout: {e}");
    }
}

/// The text of one line, newline included.
fn format_line(kind: &str, fields: Value, flow: Option<u32>) -> String {
    let mut line = format!("{{\"v\":{OUTPUT_VERSION},\"type\":{}", json!(kind));
    if let Some(k) = flow {
        line.push_str(&format!(",\"flow\":{k}"));
    }
    if let Value::Object(mut m) = fields {
        if flow.is_some() {
            m.remove("flow"); // one key, the thread's
        }
        if !m.is_empty() {
            let rest = Value::Object(m).to_string();
            line.push(',');
            line.push_str(&rest[1..rest.len() - 1]);
        }
    }
    line.push_str("}\n");
    line
}

/// Build an object from (key, value) pairs, keeping them in the given order
/// in the Map (serde_json sorts keys in output; order is not part of the contract).
pub fn obj(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        m.insert(k.to_string(), v);
    }
    Value::Object(m)
}

/// `ready`: bound and accepting.
pub fn ready(role: &str, listen: &str) {
    emit("ready", json!({"role": role, "listen": listen}));
}

/// `error` line; `kind` is config, io or protocol.
pub fn error(kind: &str, message: &str) {
    emit("error", json!({"kind": kind, "message": message}));
}

/// Interval lines every `every_ns` (0 = never): messages and bytes since the last line.
pub struct Intervals {
    role: &'static str,
    start_ns: u64,
    every_ns: u64,
    next_ns: u64,
    last_ns: u64,
    messages: u64,
    bytes: u64,
}

impl Intervals {
    pub fn new(role: &'static str, start_ns: u64, every_ns: u64) -> Self {
        let next_ns = if every_ns == 0 {
            u64::MAX
        } else {
            start_ns + every_ns
        };
        Intervals {
            role,
            start_ns,
            every_ns,
            next_ns,
            last_ns: start_ns,
            messages: 0,
            bytes: 0,
        }
    }

    #[inline]
    pub fn add(&mut self, messages: u64, bytes: u64) {
        self.messages += messages;
        self.bytes += bytes;
    }

    /// When the next line is due (u64::MAX if never): loops wake up for it.
    #[inline]
    pub fn next_ns(&self) -> u64 {
        self.next_ns
    }

    /// Emit a line if one is due at `now_ns`.
    #[inline]
    pub fn tick(&mut self, now_ns: u64) {
        if now_ns >= self.next_ns {
            self.flush_line(now_ns);
        }
    }

    fn flush_line(&mut self, now_ns: u64) {
        let span_s = (now_ns - self.last_ns) as f64 / 1e9;
        let rate = if span_s > 0.0 {
            self.bytes as f64 * 8.0 / span_s
        } else {
            0.0
        };
        emit(
            "interval",
            json!({"role": self.role, "t_ms": (now_ns - self.start_ns) / 1_000_000,
                   "messages": self.messages, "bytes": self.bytes, "rate_bps": rate.round()}),
        );
        self.messages = 0;
        self.bytes = 0;
        self.last_ns = now_ns;
        // Skip intervals that passed while blocked; never emit a burst of empty lines.
        while self.next_ns <= now_ns {
            self.next_ns += self.every_ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_carries_the_flow_when_there_is_one() {
        let plain = format_line("result", json!({"role": "sender", "sent": 3}), None);
        let v: Value = serde_json::from_str(&plain).unwrap();
        assert_eq!(
            v,
            json!({"v": 1, "type": "result", "role": "sender", "sent": 3})
        );
        assert!(plain.ends_with("}\n") && plain.matches('\n').count() == 1);
        let tagged = format_line("ready", json!({"role": "receiver", "flow": 99}), Some(7));
        let v: Value = serde_json::from_str(&tagged).unwrap();
        assert_eq!(
            v,
            json!({"v": 1, "type": "ready", "flow": 7, "role": "receiver"})
        );
        assert_eq!(tagged.matches("\"flow\"").count(), 1);
        let empty: Value = serde_json::from_str(&format_line("x", json!({}), Some(0))).unwrap();
        assert_eq!(empty, json!({"v": 1, "type": "x", "flow": 0}));
    }

    #[test]
    fn with_flow_restores_the_previous_flow() {
        assert_eq!(current_flow(), None);
        let inner = with_flow(4, || with_flow(5, current_flow));
        assert_eq!(inner, Some(5));
        assert_eq!(current_flow(), None);
    }
}
