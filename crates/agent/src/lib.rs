//! roughnet-agent: one binary that speaks every roughnet protocol and runs the
//! workload patterns, printing JSON lines (docs/agent-protocol.md).
//!
//! Who does what: `config` checks the JSON configuration; `drivers` move
//! messages with one protocol each behind one trait (the extension point);
//! `patterns` run stream / ping / ramp / bulk against that trait; `message`,
//! `schedule`, `accounting` and `hist` are the measurement pieces (header,
//! open-loop schedule, sequence accounting, HDR histograms); `clock`,
//! `signals` and `output` are the process's edges (time, SIGTERM, stdout);
//! `trace` writes the stream pattern's per-message trace files; `host` runs
//! several flows in one process (`roughnet-agent host`), where `host::udp_group` serves the UDP stream
//! receivers that share one listen address with one socket and one thread.

pub mod accounting;
pub mod clock;
pub mod config;
pub mod drivers;
pub mod hist;
pub mod host;
pub mod message;
pub mod output;
pub mod patterns;
pub mod schedule;
pub mod signals;
pub mod trace;

/// The agent's version, as `roughnet-agent version` prints it.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
