//! The run configuration: one JSON object, parsed strictly and checked once.
//!
//! Owns the shape of the object described in docs/agent-protocol.md, defaults,
//! and every check that needs no driver (roles fit the pattern, sizes, counts).
//! Protocol knobs (`options`) are checked by the driver named in `protocol`
//! (drivers::create), because only it knows them.  Nothing here touches a socket;
//! the one file touched is the stream pattern's trace (`trace_path`), created by
//! `Config::parse` so that one that cannot be created is a configuration error.

use serde::Deserialize;
use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use thiserror::Error;

use crate::message::HEADER_LEN;

/// The configuration format version this agent speaks.
pub const CONFIG_VERSION: u64 = 1;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read the configuration from {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the configuration is not a valid roughnet-agent object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("`{key}` = {value}: expected {expected}")]
    Invalid {
        key: String,
        value: String,
        expected: String,
    },
    #[error("`{key}` is required {when}")]
    Missing { key: &'static str, when: String },
    #[error("`options` for protocol {protocol}: {detail} (its knobs: {known})")]
    Options {
        protocol: String,
        detail: String,
        known: String,
    },
    /// A driver roughnet knows but this build left out (a cargo feature; drivers::missing_driver).
    #[error(
        "protocol {protocol:?}: this roughnet-agent was built without the {protocol} driver \
         (it has {built}); `make build` builds the agent with every driver \
         (or this driver alone: cargo build --release -p roughnet-agent --no-default-features --features {protocol})"
    )]
    MissingDriver { protocol: String, built: String },
}

impl ConfigError {
    pub fn invalid(
        key: impl Into<String>,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
    Pinger,
    Ponger,
}

impl Role {
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
            Role::Pinger => "pinger",
            Role::Ponger => "ponger",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Stream,
    Ping,
    Ramp,
    Bulk,
    Sync,
}

pub const PATTERNS: [&str; 5] = ["stream", "ping", "ramp", "bulk", "sync"];

impl Pattern {
    pub fn as_str(&self) -> &'static str {
        match self {
            Pattern::Stream => "stream",
            Pattern::Ping => "ping",
            Pattern::Ramp => "ramp",
            Pattern::Bulk => "bulk",
            Pattern::Sync => "sync",
        }
    }
}

fn default_timeout_ms() -> u64 {
    60_000
}
fn default_linger_ms() -> u64 {
    500
}
fn default_report_ms() -> u64 {
    1000
}
fn default_reply_timeout_ms() -> u64 {
    1000
}

/// The object as written (before checks).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    v: u64,
    role: String,
    protocol: String,
    pattern: String,
    #[serde(default)]
    listen: Option<String>,
    #[serde(default)]
    peers: Option<Vec<String>>,
    payload_bytes: u64,
    #[serde(default)]
    messages: Option<u64>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    rate_msgs_per_s: Option<f64>,
    #[serde(default)]
    interval_ns: Option<u64>,
    #[serde(default)]
    step_bytes: Option<u64>,
    #[serde(default)]
    warmup: u64,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_linger_ms")]
    linger_ms: u64,
    #[serde(default = "default_report_ms")]
    report_interval_ms: u64,
    /// None: the default (1 s, or timeout_ms when that is shorter); given: at most timeout_ms.
    #[serde(default)]
    reply_timeout_ms: Option<u64>,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    options: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    broker: Option<String>,
    #[serde(default)]
    topic: Option<String>,
    // --- sync pattern (patterns::sync); null / absent for the other patterns ---
    #[serde(default)]
    bundles: Option<u64>,
    #[serde(default)]
    bundle_first: Option<u64>,
    #[serde(default)]
    manifest_bytes: Option<u64>,
    #[serde(default)]
    bundle_payload_bytes: Option<u64>,
    #[serde(default)]
    window: Option<u64>,
    #[serde(default)]
    peer_topic: Option<String>,
    // --- stream pattern: per-message trace file (crate::trace); null / absent = none ---
    #[serde(default)]
    trace_path: Option<String>,
    // --- udp stream receiver: the one address its messages come from; null / absent = any ---
    #[serde(default)]
    source: Option<String>,
}

/// The sync pattern's settings (docs/agent-protocol.md, "sync").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncConfig {
    /// Bundles this side starts with: ids `first .. first + bundles`.
    pub bundles: u32,
    pub first: u32,
    /// Manifest bytes per bundle (incompressible: pseudo-random, as if already compressed).
    pub manifest_bytes: usize,
    /// Payload bytes after the manifest (0: manifest only).
    pub bundle_payload_bytes: usize,
    /// Bundles in flight (sent, not yet acknowledged by a summary) at most.
    pub window: u32,
}

/// Bytes in front of a bundle's manifest: the 32-byte header, kind, padding, bundle id.
pub const SYNC_BUNDLE_OVERHEAD: usize = HEADER_LEN + 8;
/// Most bundles one side may start with (ids are 32-bit).
pub const SYNC_MAX_BUNDLES: u64 = 1 << 24;
/// Most bundles in flight.
pub const SYNC_MAX_WINDOW: u64 = 65_535;
/// Largest summary message: header, kind, count, then at most this many id ranges.
pub const SYNC_MAX_RANGES: usize = 64;
pub const SYNC_MAX_SUMMARY_BYTES: usize = HEADER_LEN + 4 + 8 * SYNC_MAX_RANGES;

/// A checked configuration.  Units are in the field names.
#[derive(Debug, Clone)]
pub struct Config {
    pub role: Role,
    pub protocol: String,
    pub pattern: Pattern,
    pub listen: Option<SocketAddr>,
    pub peers: Vec<SocketAddr>,
    pub payload_bytes: usize,
    pub messages: Option<u64>,
    pub duration_ns: Option<u64>,
    pub rate_msgs_per_s: Option<f64>,
    pub interval_ns: Option<u64>,
    pub step_bytes: usize,
    pub warmup: u64,
    pub timeout_ns: u64,
    pub linger_ns: u64,
    pub report_interval_ns: u64,
    pub reply_timeout_ns: u64,
    pub seed: u64,
    pub options: serde_json::Map<String, serde_json::Value>,
    /// `IP:PORT` of the run's service (broker, zenoh router) as seen from this agent.
    pub broker: Option<String>,
    /// Per-run topic / key name given by the runner (drivers default it when absent).
    pub topic: Option<String>,
    /// sync: the topic the peer publishes to (this side subscribes to it); `topic` is this side's.
    pub peer_topic: Option<String>,
    /// sync: the pattern's settings (None for the other patterns).  A syncer's `role`
    /// is `Receiver` (it binds `listen`) and it also has `peers` (its one peer).
    pub sync: Option<SyncConfig>,
    /// stream: where this role writes its per-message trace (crate::trace), or None.
    pub trace_path: Option<String>,
    /// stream: that file, created (truncated) by `Config::parse`; None before and without one.
    pub trace_file: Option<Arc<File>>,
    /// udp stream receiver: the address this flow's messages come from (a datagram from any
    /// other is not this flow's: ignored, or in host mode another flow's of a shared receiver,
    /// crate::host); IPv4-mapped IPv6 addresses are stored as IPv4.  None: any sender.
    pub source: Option<IpAddr>,
    /// CLOCK_MONOTONIC when the configuration was read: `timeout_ms` counts from here.
    pub start_ns: u64,
}

/// Largest message any pattern may ask for (ramp end size included), whatever the driver.
pub const MAX_MESSAGE_BYTES: u64 = 64 << 20;
/// Most peers one sender may fan out to.
pub const MAX_PEERS: usize = 1024;

fn parse_addr(key: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| {
        ConfigError::invalid(
            key,
            format!("{s:?}"),
            "an IP:PORT address such as \"198.18.0.2:5201\"",
        )
    })
}

impl Config {
    /// Parse and check a JSON object, and create the trace file if there is one.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = serde_json::from_str(text)?;
        let mut cfg = Self::check(raw)?;
        cfg.create_trace()?;
        Ok(cfg)
    }

    /// Create (or truncate) `trace_path`: done at the start, so that a path that cannot
    /// be written is a configuration error before a receiver says `ready`.
    fn create_trace(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.trace_path {
            let file = File::create(path).map_err(|e| {
                ConfigError::invalid(
                    "trace_path",
                    format!("{path:?}"),
                    format!("a file this agent can create ({e})"),
                )
            })?;
            self.trace_file = Some(Arc::new(file));
        }
        Ok(())
    }

    fn check(raw: RawConfig) -> Result<Config, ConfigError> {
        if raw.v != CONFIG_VERSION {
            return Err(ConfigError::invalid(
                "v",
                raw.v,
                format!("{CONFIG_VERSION} (the format this agent speaks)"),
            ));
        }
        let pattern = match raw.pattern.as_str() {
            "stream" => Pattern::Stream,
            "ping" => Pattern::Ping,
            "ramp" => Pattern::Ramp,
            "bulk" => Pattern::Bulk,
            "sync" => Pattern::Sync,
            other => {
                return Err(ConfigError::invalid(
                    "pattern",
                    format!("{other:?}"),
                    "one of stream, ping, ramp, bulk, sync",
                ))
            }
        };
        let role =
            match (pattern, raw.role.as_str()) {
                (Pattern::Stream | Pattern::Bulk, "sender") => Role::Sender,
                (Pattern::Stream | Pattern::Bulk, "receiver") => Role::Receiver,
                (Pattern::Ping | Pattern::Ramp, "pinger") => Role::Pinger,
                (Pattern::Ping | Pattern::Ramp, "ponger") => Role::Ponger,
                // A syncer is a receiver and a sender at once; drivers match on Role, so the
                // configuration keeps the listening side's role and patterns::sync hands
                // the drivers a Receiver and a Sender copy (see `Config::sync`).
                (Pattern::Sync, "syncer") => Role::Receiver,
                (Pattern::Sync, other) => return Err(ConfigError::invalid(
                    "role",
                    format!("{other:?}"),
                    "syncer for pattern sync (each side binds `listen` and connects to `peers`)",
                )),
                (Pattern::Stream | Pattern::Bulk, other) => {
                    return Err(ConfigError::invalid(
                        "role",
                        format!("{other:?}"),
                        format!("sender or receiver for pattern {}", raw.pattern),
                    ))
                }
                (Pattern::Ping | Pattern::Ramp, other) => {
                    return Err(ConfigError::invalid(
                        "role",
                        format!("{other:?}"),
                        format!("pinger or ponger for pattern {}", raw.pattern),
                    ))
                }
            };
        let has_broker = raw.broker.as_deref().is_some_and(|b| !b.is_empty());
        let listen = match (role, &raw.listen) {
            (Role::Receiver | Role::Ponger, Some(s)) => Some(parse_addr("listen", s)?),
            // Through a broker (`broker` set) a receiver binds nothing of its own.
            (Role::Receiver | Role::Ponger, None) if has_broker => None,
            (Role::Receiver | Role::Ponger, None) => {
                return Err(ConfigError::Missing {
                    key: "listen",
                    when: format!(
                        "for role {} (or `broker`, for a protocol with a broker)",
                        role.as_str()
                    ),
                })
            }
            (_, Some(s)) => {
                return Err(ConfigError::invalid(
                    "listen",
                    format!("{s:?}"),
                    format!(
                        "no `listen` for role {} (it connects to `peers`)",
                        role.as_str()
                    ),
                ))
            }
            (_, None) => None,
        };
        // sync: the one peer (its listen address), unless a broker carries the traffic.
        let sync_peers =
            match (pattern, &raw.peers) {
                (Pattern::Sync, Some(p)) if p.len() > 1 => {
                    return Err(ConfigError::invalid(
                        "peers",
                        format!("{} addresses", p.len()),
                        "exactly one peer for role syncer (sync reconciles two stores)",
                    ))
                }
                (Pattern::Sync, Some(p)) if p.len() == 1 => vec![parse_addr("peers[0]", &p[0])?],
                (Pattern::Sync, _) if has_broker => Vec::new(),
                (Pattern::Sync, _) => return Err(ConfigError::Missing {
                    key: "peers",
                    when:
                        "(one address) for role syncer (or `broker`, for a protocol with a broker)"
                            .into(),
                }),
                _ => Vec::new(),
            };
        let peers = match (role, &raw.peers) {
            _ if pattern == Pattern::Sync => sync_peers,
            (Role::Sender | Role::Pinger, Some(p)) if !p.is_empty() => {
                if p.len() > MAX_PEERS {
                    return Err(ConfigError::invalid(
                        "peers",
                        format!("{} addresses", p.len()),
                        format!("at most {MAX_PEERS} peers"),
                    ));
                }
                p.iter()
                    .enumerate()
                    .map(|(i, s)| parse_addr(&format!("peers[{i}]"), s))
                    .collect::<Result<Vec<_>, _>>()?
            }
            // Through a broker a sender publishes to `broker`, not to peers.
            (Role::Sender | Role::Pinger, _) if has_broker => Vec::new(),
            (Role::Sender | Role::Pinger, _) => {
                return Err(ConfigError::Missing {
                    key: "peers",
                    when: format!(
                    "(a non-empty list) for role {} (or `broker`, for a protocol with a broker)",
                    role.as_str()
                ),
                })
            }
            (_, Some(p)) if !p.is_empty() => {
                return Err(ConfigError::invalid(
                    "peers",
                    format!("{p:?}"),
                    format!("no `peers` for role {} (it binds `listen`)", role.as_str()),
                ))
            }
            _ => Vec::new(),
        };
        if raw.payload_bytes < HEADER_LEN as u64 || raw.payload_bytes > MAX_MESSAGE_BYTES {
            return Err(ConfigError::invalid(
                "payload_bytes",
                raw.payload_bytes,
                format!("between {HEADER_LEN} (the header) and {MAX_MESSAGE_BYTES} bytes"),
            ));
        }
        if raw.messages == Some(0) {
            return Err(ConfigError::invalid("messages", 0, "at least 1 (or null)"));
        }
        if raw.duration_ms == Some(0) {
            return Err(ConfigError::invalid(
                "duration_ms",
                0,
                "at least 1 (or null)",
            ));
        }
        match pattern {
            Pattern::Stream | Pattern::Bulk => match (raw.messages, raw.duration_ms) {
                (None, None) => {
                    return Err(ConfigError::Missing {
                        key: "messages",
                        when: format!("(or `duration_ms`) for pattern {}", raw.pattern),
                    })
                }
                (Some(m), Some(d)) => {
                    return Err(ConfigError::invalid(
                        "duration_ms",
                        d,
                        format!("null when `messages` ({m}) is set: give one of the two"),
                    ))
                }
                _ => {}
            },
            Pattern::Sync => {
                if let Some(m) = raw.messages {
                    return Err(ConfigError::invalid(
                        "messages",
                        m,
                        "null for pattern sync (it takes `bundles`, and `duration_ms` for a fixed window)",
                    ));
                }
            }
            Pattern::Ping | Pattern::Ramp => {
                if raw.messages.is_none() {
                    return Err(ConfigError::Missing {
                        key: "messages",
                        when: format!("for pattern {}", raw.pattern),
                    });
                }
                if let Some(d) = raw.duration_ms {
                    return Err(ConfigError::invalid(
                        "duration_ms",
                        d,
                        format!("null for pattern {} (it uses `messages`)", raw.pattern),
                    ));
                }
            }
        }
        if let Some(r) = raw.rate_msgs_per_s {
            if pattern != Pattern::Stream {
                return Err(ConfigError::invalid(
                    "rate_msgs_per_s",
                    r,
                    format!("null for pattern {} (only stream has a rate)", raw.pattern),
                ));
            }
            if !(r.is_finite() && r > 0.0 && r <= 1e9) {
                return Err(ConfigError::invalid(
                    "rate_msgs_per_s",
                    r,
                    "a rate above 0 and at most 1e9 msg/s, or null for as fast as possible",
                ));
            }
        }
        if let Some(i) = raw.interval_ns {
            if !matches!(pattern, Pattern::Ping | Pattern::Ramp) {
                return Err(ConfigError::invalid(
                    "interval_ns",
                    i,
                    format!(
                        "null for pattern {} (only ping and ramp have an interval)",
                        raw.pattern
                    ),
                ));
            }
            if i == 0 {
                return Err(ConfigError::invalid(
                    "interval_ns",
                    0,
                    "at least 1 ns, or null for the next request after each reply",
                ));
            }
        }
        let step_bytes = match (pattern, raw.step_bytes) {
            (Pattern::Ramp, Some(s)) => s,
            (Pattern::Ramp, None) => {
                return Err(ConfigError::Missing {
                    key: "step_bytes",
                    when: "for pattern ramp".into(),
                })
            }
            (_, Some(s)) if s != 0 => {
                return Err(ConfigError::invalid(
                    "step_bytes",
                    s,
                    format!("null for pattern {} (only ramp grows)", raw.pattern),
                ))
            }
            _ => 0,
        };
        if pattern == Pattern::Ramp {
            let n = raw.messages.unwrap_or(1);
            let last = raw.payload_bytes as u128 + step_bytes as u128 * (n as u128 - 1);
            if last > MAX_MESSAGE_BYTES as u128 {
                return Err(ConfigError::invalid(
                    "step_bytes",
                    step_bytes,
                    format!("a step that keeps the last size ({last} bytes) at most {MAX_MESSAGE_BYTES} bytes"),
                ));
            }
        }
        let sync = check_sync(&raw, pattern)?;
        let trace_path = match raw.trace_path.as_deref() {
            Some(p) if pattern != Pattern::Stream => {
                return Err(ConfigError::invalid(
                    "trace_path",
                    format!("{p:?}"),
                    format!(
                        "null for pattern {} (only stream writes traces)",
                        raw.pattern
                    ),
                ))
            }
            Some("") => {
                return Err(ConfigError::invalid(
                    "trace_path",
                    "\"\"",
                    "a file path, or null for no trace",
                ))
            }
            p => p.map(str::to_owned),
        };
        let source = check_source(&raw, role, pattern)?;
        if raw.timeout_ms == 0 {
            return Err(ConfigError::invalid("timeout_ms", 0, "at least 1 ms"));
        }
        if raw.reply_timeout_ms == Some(0) {
            return Err(ConfigError::invalid("reply_timeout_ms", 0, "at least 1 ms"));
        }
        if let Some(reply) = raw.reply_timeout_ms.filter(|&r| r > raw.timeout_ms) {
            // The pinger gives up at timeout_ms anyway: a longer wait for replies, asked for, is a mistake upstream
            // (the default is only capped: a role with a short timeout that never waits for replies is fine).
            return Err(ConfigError::invalid(
                "reply_timeout_ms",
                reply,
                format!("at most timeout_ms ({} ms)", raw.timeout_ms),
            ));
        }
        let reply_timeout_ms = raw
            .reply_timeout_ms
            .unwrap_or_else(|| default_reply_timeout_ms().min(raw.timeout_ms));
        let ms = |x: u64| x.saturating_mul(1_000_000);
        Ok(Config {
            role,
            protocol: raw.protocol,
            pattern,
            listen,
            peers,
            payload_bytes: raw.payload_bytes as usize,
            messages: raw.messages,
            duration_ns: raw.duration_ms.map(ms),
            rate_msgs_per_s: raw.rate_msgs_per_s,
            interval_ns: raw.interval_ns,
            step_bytes: step_bytes as usize,
            warmup: raw.warmup,
            timeout_ns: ms(raw.timeout_ms),
            linger_ns: ms(raw.linger_ms),
            report_interval_ns: ms(raw.report_interval_ms),
            reply_timeout_ns: ms(reply_timeout_ms),
            seed: raw.seed,
            options: raw.options,
            broker: raw.broker.filter(|b| !b.is_empty()),
            topic: raw.topic.filter(|t| !t.is_empty()),
            peer_topic: raw.peer_topic.filter(|t| !t.is_empty()),
            sync,
            trace_path,
            trace_file: None,
            source,
            start_ns: crate::clock::now_ns(),
        })
    }

    /// Largest message this run sends (ramp: the last size).
    pub fn max_message_bytes(&self) -> usize {
        match (self.pattern, self.messages) {
            (Pattern::Ramp, Some(n)) => {
                self.payload_bytes + self.step_bytes * (n as usize).saturating_sub(1)
            }
            (Pattern::Sync, _) => self.payload_bytes.max(SYNC_MAX_SUMMARY_BYTES),
            _ => self.payload_bytes,
        }
    }

    /// Size of counted iteration `k` (0-based, warm-up excluded) of a ping or ramp.
    pub fn size_of_iteration(&self, k: u64) -> usize {
        self.payload_bytes + self.step_bytes * k as usize
    }

    /// CLOCK_MONOTONIC instant at which this role gives up (`timeout_ms` after start).
    pub fn give_up_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.timeout_ns)
    }
}

/// `source`: an IP address (no port), for a udp stream receiver, or a zenoh receiver or ponger
/// (its sender's or pinger's address: in host mode it decides which side of a pair of hosts opens
/// their link, drivers::zenoh::host_plan).
fn check_source(
    raw: &RawConfig,
    role: Role,
    pattern: Pattern,
) -> Result<Option<IpAddr>, ConfigError> {
    let Some(s) = raw.source.as_deref() else {
        return Ok(None);
    };
    let only = "null: `source` is for a udp stream receiver or a zenoh receiver or ponger only";
    let what = if pattern == Pattern::Sync {
        "syncer"
    } else {
        role.as_str()
    };
    let fits = match raw.protocol.as_str() {
        "udp" => role == Role::Receiver && pattern == Pattern::Stream,
        "zenoh" => matches!(role, Role::Receiver | Role::Ponger) && pattern != Pattern::Sync,
        _ => false,
    };
    if !fits {
        return Err(ConfigError::invalid(
            "source",
            format!("{s:?}"),
            format!("{only} (this is a {} {} {what})", raw.protocol, raw.pattern),
        ));
    }
    let ip: IpAddr = s.parse().map_err(|_| {
        ConfigError::invalid(
            "source",
            format!("{s:?}"),
            "an IPv4 or IPv6 address without a port, such as \"198.18.0.3\" (the senders' address)",
        )
    })?;
    Ok(Some(ip.to_canonical()))
}

/// The sync keys: required (bundles) and checked for pattern sync, refused for the others.
fn check_sync(raw: &RawConfig, pattern: Pattern) -> Result<Option<SyncConfig>, ConfigError> {
    if pattern != Pattern::Sync {
        let given = [
            ("bundles", raw.bundles.is_some()),
            ("bundle_first", raw.bundle_first.is_some()),
            ("manifest_bytes", raw.manifest_bytes.is_some()),
            ("bundle_payload_bytes", raw.bundle_payload_bytes.is_some()),
            ("window", raw.window.is_some()),
            ("peer_topic", raw.peer_topic.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ConfigError::invalid(
                *key,
                "(set)",
                format!("null for pattern {} (only sync has it)", raw.pattern),
            ));
        }
        return Ok(None);
    }
    // sync moves every bundle exactly once and never retransmits: the transport must be reliable.
    let opt = |k: &str| {
        raw.options
            .get(k)
            .and_then(|v| v.as_str().map(str::to_owned))
    };
    let unreliable = match raw.protocol.as_str() {
        "udp" => Some("udp does not retransmit".to_string()),
        "zenoh" if opt("reliability").as_deref() == Some("best_effort") => {
            Some("zenoh with reliability best_effort".into())
        }
        "zenoh" if opt("transport").as_deref() == Some("udp") => {
            Some("zenoh over its udp transport does not retransmit".into())
        }
        "mqtt" if raw.options.get("qos").and_then(|v| v.as_u64()) == Some(0) => {
            Some("mqtt qos 0 is at most once".into())
        }
        _ => None,
    };
    if let Some(why) = unreliable {
        return Err(ConfigError::invalid(
            "protocol",
            format!("{:?} ({why})", raw.protocol),
            "a reliable transport for pattern sync (tcp, mqtt with qos >= 1, zenoh reliable over tcp, ...)",
        ));
    }
    let bundles = match raw.bundles {
        None => {
            return Err(ConfigError::Missing {
                key: "bundles",
                when: "for pattern sync".into(),
            })
        }
        Some(b) if b > SYNC_MAX_BUNDLES => {
            return Err(ConfigError::invalid(
                "bundles",
                b,
                format!("at most {SYNC_MAX_BUNDLES} bundles per side"),
            ))
        }
        Some(b) => b,
    };
    let first = raw.bundle_first.unwrap_or(0);
    if first + bundles > u32::MAX as u64 {
        return Err(ConfigError::invalid(
            "bundle_first",
            first,
            "ids that fit in 32 bits (bundle_first + bundles <= 4294967295)",
        ));
    }
    let manifest = raw.manifest_bytes.unwrap_or(200);
    let payload = raw.bundle_payload_bytes.unwrap_or(0);
    if manifest == 0 || manifest + payload > MAX_MESSAGE_BYTES {
        return Err(ConfigError::invalid(
            "manifest_bytes",
            manifest,
            format!("at least 1 byte, with bundle_payload_bytes at most {MAX_MESSAGE_BYTES} bytes"),
        ));
    }
    let window = raw.window.unwrap_or(1);
    if window == 0 || window > SYNC_MAX_WINDOW {
        return Err(ConfigError::invalid(
            "window",
            window,
            format!("1 to {SYNC_MAX_WINDOW} bundles in flight"),
        ));
    }
    let size = SYNC_BUNDLE_OVERHEAD as u64 + manifest + payload;
    if raw.payload_bytes != size {
        return Err(ConfigError::invalid(
            "payload_bytes",
            raw.payload_bytes,
            format!(
                "{size} for pattern sync: the bundle message size, {SYNC_BUNDLE_OVERHEAD} + manifest_bytes ({manifest}) + bundle_payload_bytes ({payload})"
            ),
        ));
    }
    Ok(Some(SyncConfig {
        bundles: bundles as u32,
        first: first as u32,
        manifest_bytes: manifest as usize,
        bundle_payload_bytes: payload as usize,
        window: window as u32,
    }))
}

#[cfg(test)]
mod tests;
