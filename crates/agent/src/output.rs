//! The JSON lines on stdout: ready, interval, result, error, version.
//!
//! Every line starts with `"v":1,"type":...` and is flushed at once, because the
//! runner reacts to `ready` and reads intervals live.  Patterns build the fields;
//! this module only frames and writes them.  Logs never go here (stderr, tracing).

use serde_json::{json, Map, Value};
use std::io::Write;

/// Output format version (the `v` of every line).
pub const OUTPUT_VERSION: u64 = 1;

/// Write one line `{"v":1,"type":<kind>, ...fields}` to stdout and flush.
pub fn emit(kind: &str, fields: Value) {
    let mut line = format!("{{\"v\":{OUTPUT_VERSION},\"type\":{}", json!(kind));
    if let Value::Object(m) = fields {
        if !m.is_empty() {
            let rest = Value::Object(m).to_string();
            line.push(',');
            line.push_str(&rest[1..rest.len() - 1]);
        }
    }
    line.push_str("}\n");
    let mut out = std::io::stdout().lock();
    // A closed stdout (runner gone) must not turn a finished run into a crash.
    if let Err(e) = out.write_all(line.as_bytes()).and_then(|_| out.flush()) {
        tracing::warn!("cannot write to stdout: {e}");
    }
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
