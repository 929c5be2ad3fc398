//! Protocol drivers: THE extension point of roughnet-agent.
//!
//! A driver knows how to move opaque messages with one protocol (TCP, UDP, later
//! Zenoh, MQTT, Kafka, DDS, ZeroMQ, NATS).  It knows nothing about patterns,
//! schedules, sequence numbers or latency: the patterns in `crate::patterns` are
//! written against the traits below only, so every protocol gets every pattern.
//!
//! # Adding a protocol
//!
//! 1. Create `src/drivers/<name>.rs` with a type implementing [`Driver`] and the
//!    endpoint traits it hands out.  Parse your knobs from `cfg.options` in a
//!    constructor with a `#[serde(deny_unknown_fields)]` struct, and turn a bad
//!    knob into [`crate::config::ConfigError`] naming the protocol
//!    (see [`options_error`]).
//! 2. Register it in [`create`] and in [`PROTOCOLS`].
//! 3. Add it to the end-to-end test matrix in `tests/e2e.rs`.
//!
//! # The contract every driver keeps
//!
//! * **Messages are opaque byte strings** of at most [`Driver::max_message_bytes`];
//!   the first 32 bytes are the pattern's header (crate::message), which a driver
//!   must deliver unchanged.  Message boundaries are preserved (TCP frames with a
//!   4-byte length; UDP sends one datagram per message; a broker protocol sends one
//!   publication per message).
//! * **Blocking calls with deadlines.**  Every receive takes an absolute deadline
//!   (CLOCK_MONOTONIC ns, crate::clock::now_ns) and returns `Ok(None)` when it
//!   passes with nothing received.  Patterns pass deadlines at most
//!   `signals::POLL_SLICE_NS` (50 ms) ahead, so a driver need not watch signals in
//!   receive paths; a call interrupted by a signal (EINTR) returns `Ok(None)`.
//!   Sends may block (that is back-pressure and shows up as schedule lag) but must
//!   give up with [`DriverError::Interrupted`] once `signals::stop_requested()` is
//!   set, or [`DriverError::GaveUp`] after `cfg.give_up_ns()`.
//! * **Hot paths do not allocate.**  Buffers are sized at open time; send and
//!   receive do one system call each in the common case.  Latency benchmarks
//!   (sockperf, iperf3) measure exactly this.
//! * **Threads of its own** work for the flow that opened the endpoint: in host mode
//!   (crate::host) several flows share the process, and a flow's thread carries its id
//!   (`output::current_flow`, every line it prints says `"flow": K`) and its stop flag
//!   (`signals::flow_stop`).  A driver thread that prints, or that checks `stop_requested`,
//!   sets both in itself (`output::set_flow`, `signals::set_flow_stop`).  None does today.
//! * **Async libraries** (zenoh, rdkafka, async-nats) run their own runtime inside
//!   the driver (e.g. a tokio runtime owned by the endpoint) and bridge to these
//!   blocking calls with a channel; the patterns stay synchronous.
//! * **Fan-out**: a [`Sender`] / [`Requester`] delivers each message to every
//!   address in `cfg.peers` (or, for a broker protocol, publishes once to a topic
//!   the receivers subscribed to).  A receiver accepts any number of senders.
//! * **Errors**: a failure to hand one message to one peer that the protocol
//!   tolerates (a UDP ICMP refusal, a firewall EPERM) is *counted*, not raised:
//!   `send` returns how many peers it could not reach.  Anything that ends the
//!   run (a broken TCP connection, a bind failure) is a [`DriverError`].
//!
//! # The four endpoint kinds
//!
//! | pattern role | opened with | trait |
//! |---|---|---|
//! | stream sender | [`Driver::open_sender`] | [`Sender`] |
//! | stream receiver | [`Driver::open_receiver`] | [`Receiver`] |
//! | ping/ramp pinger | [`Driver::open_requester`] | [`Requester`] |
//! | ping/ramp ponger | [`Driver::open_responder`] | [`Responder`] |
//! | bulk sender / receiver | [`Driver::open_bulk_sender`] / [`Driver::open_bulk_receiver`] | [`BulkSender`] / [`BulkReceiver`] |
//!
//! Bulk has default implementations ([`FramedBulkSender`], [`FramedBulkReceiver`])
//! built on Sender/Receiver: sequence-numbered messages of `payload_bytes`, so the
//! receiver counts loss.  A driver overrides them when it has a faster raw path
//! (TCP: plain writes of `send_size` bytes with no framing).

use std::io;
use thiserror::Error;

use crate::config::{Config, ConfigError};
use crate::message::{Header, FLAG_END};

pub mod sys;
pub mod tcp;
pub mod udp;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(any(feature = "mqtt", feature = "nats"))]
mod host_slots;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(any(feature = "mqtt", feature = "kafka", feature = "nats"))]
pub mod brokered;
#[cfg(feature = "zenoh")]
pub mod zenoh;
#[cfg(feature = "zmq")]
pub mod zmq;
#[cfg(feature = "dds")]
pub mod dds;

/// Protocols this build speaks (the `protocols` of `roughnet-agent version`).
pub const PROTOCOLS: &[&str] = &[
    "tcp",
    "udp",
    #[cfg(feature = "mqtt")]
    "mqtt",
    #[cfg(feature = "kafka")]
    "kafka",
    #[cfg(feature = "nats")]
    "nats",
    #[cfg(feature = "zenoh")]
    "zenoh",
    #[cfg(feature = "zmq")]
    "zmq",
    #[cfg(feature = "dds")]
    "dds",
];

/// Every driver roughnet-agent has, built or not (each but tcp and udp is a cargo feature of the
/// same name; `full`, the default, builds them all).
pub const ALL_PROTOCOLS: &[&str] = &["tcp", "udp", "mqtt", "kafka", "nats", "zenoh", "zmq", "dds"];

/// Drivers this build was compiled without (the `missing` of `roughnet-agent version`).
pub fn missing_protocols() -> Vec<&'static str> {
    ALL_PROTOCOLS
        .iter()
        .copied()
        .filter(|p| !PROTOCOLS.contains(p))
        .collect()
}

/// `"full"` when every driver is built, `"minimal"` for TCP and UDP alone, else `"custom"`.
pub fn build_kind() -> &'static str {
    match PROTOCOLS.len() {
        n if n == ALL_PROTOCOLS.len() => "full",
        2 => "minimal",
        _ => "custom",
    }
}

/// The refusal of a protocol roughnet knows whose driver this build left out (exit 2, naming the
/// driver and `make build`); None when `protocol` is built or unknown.
pub fn missing_driver(protocol: &str) -> Option<ConfigError> {
    (ALL_PROTOCOLS.contains(&protocol) && !PROTOCOLS.contains(&protocol)).then(|| {
        ConfigError::MissingDriver {
            protocol: protocol.to_string(),
            built: PROTOCOLS.join(", "),
        }
    })
}

/// Why a driver operation failed.
#[derive(Debug, Error)]
pub enum DriverError {
    #[error("{op} {addr}: {source}")]
    Io {
        op: &'static str,
        addr: String,
        source: io::Error,
    },
    #[error("protocol error from {addr}: {msg}")]
    Protocol { addr: String, msg: String },
    #[error("a message of {size} bytes does not fit: the limit is {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("interrupted by SIGTERM/SIGINT")]
    Interrupted,
    #[error("gave up on {what} at the timeout ({timeout_ms} ms after start)")]
    GaveUp { what: String, timeout_ms: u64 },
}

impl DriverError {
    pub fn io(op: &'static str, addr: impl std::fmt::Display, source: io::Error) -> Self {
        DriverError::Io {
            op,
            addr: addr.to_string(),
            source,
        }
    }
}

/// A protocol: opens endpoints for the roles of a run.  `Send`: a host (crate::host) creates
/// every flow's driver before any runs, then hands each to the flow's thread.
pub trait Driver: Send {
    /// Protocol name as in the configuration (`"tcp"`).
    fn name(&self) -> &'static str;

    /// Largest message this protocol can carry as one message.
    fn max_message_bytes(&self) -> usize;

    /// Connect to every `cfg.peers` address (retrying until `cfg.give_up_ns()` while
    /// the peer is not there yet) and return a sender that fans out to all of them.
    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError>;

    /// Bind `cfg.listen` and return a receiver that accepts any number of senders.
    /// It must be ready to receive when this returns (the agent then prints `ready`).
    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError>;

    /// Connect to `cfg.peers` for request/reply.
    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError>;

    /// Bind `cfg.listen` for request/reply.
    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError>;

    /// Bulk sending; by default framed, sequence-numbered messages of `payload_bytes`.
    fn open_bulk_sender(&self, cfg: &Config) -> Result<Box<dyn BulkSender>, DriverError> {
        Ok(Box::new(FramedBulkSender::new(
            self.open_sender(cfg)?,
            cfg.payload_bytes,
        )))
    }

    /// Bulk receiving; by default the counterpart of the framed bulk sender.
    fn open_bulk_receiver(&self, cfg: &Config) -> Result<Box<dyn BulkReceiver>, DriverError> {
        Ok(Box::new(FramedBulkReceiver::new(
            self.open_receiver(cfg)?,
            self.max_message_bytes().min(cfg.payload_bytes.max(65_536)),
        )))
    }
}

/// One-way sending to every peer.
pub trait Sender {
    /// Hand one message to every peer.  Returns how many peers it could not be
    /// handed to for reasons the protocol tolerates (counted as send errors).
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError>;

    /// Send the end marker `end` and close.  Unreliable protocols repeat it
    /// (UDP: 5 copies 10 ms apart).  Errors here are logged, not fatal: the
    /// receiver may already have ended.
    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError>;

    /// Number of peers messages fan out to.
    fn peers(&self) -> usize;

    /// Extra fields for the sender's result line, read after `finish` (kafka:
    /// `ack_latency`, from the delivery reports).  Default: none.
    fn extra_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

/// Receiving from any number of senders.
pub trait Receiver {
    /// Copy the next message into `buf` and return its length, or `Ok(None)` when
    /// `deadline_ns` passes first.  A message longer than `buf` is an error.
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError>;

    /// The bound address (what `ready` prints; the real port when 0 was asked).
    fn local_addr(&self) -> String;

    /// True when the protocol can tell that every sender has gone (TCP: every
    /// accepted connection reached EOF, after at least one).  Default: never.
    fn peers_closed(&self) -> bool {
        false
    }

    /// Extra fields for the receiver's result line, read at the end of the run (mqtt,
    /// nats, kafka with `reconnect`: `reconnects`, `disconnected_s`).  Default: none.
    fn extra_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

/// The pinger side of request/reply.
pub trait Requester {
    /// Send one request to every peer; returns peers not reached (as [`Sender::send`]).
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError>;

    /// Next reply into `buf`: `(length, index of the peer in cfg.peers)`, or
    /// `Ok(None)` at the deadline.
    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError>;

    /// Send the end marker (so pongers stop) and close.
    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError>;

    fn peers(&self) -> usize;
}

/// The ponger side of request/reply.
pub trait Responder {
    /// Next request into `buf`, or `Ok(None)` at the deadline.  The endpoint
    /// remembers where it came from, for [`Responder::reply`].
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError>;

    /// Send `msg` back to the origin of the last request received.
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError>;

    fn local_addr(&self) -> String;

    fn peers_closed(&self) -> bool {
        false
    }
}

/// What a bulk receive produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkEvent {
    /// Application bytes arrived; `seq` for message-oriented bulk (loss counting).
    Data { bytes: usize, seq: Option<u64> },
    /// The sender said it is done; `total` = messages it sent, when it knows.
    End { total: Option<u64> },
    /// Every sender has gone (stream protocols: EOF); no more data can come.
    Closed,
    /// The deadline passed.
    Idle,
}

pub trait BulkSender {
    /// Send one chunk (sequence number `seq`) to every peer as fast as the
    /// protocol allows.  Returns (application bytes per peer, peers not reached).
    fn send_chunk(&mut self, seq: u64) -> Result<(usize, u32), DriverError>;

    /// Tell receivers we are done after `total` chunks, and close.
    fn finish(&mut self, total: u64) -> Result<(), DriverError>;

    /// True when chunks carry sequence numbers (the receiver can count loss).
    fn sequenced(&self) -> bool;
}

pub trait BulkReceiver {
    fn recv_chunk(&mut self, deadline_ns: u64) -> Result<BulkEvent, DriverError>;
    fn local_addr(&self) -> String;
    /// True when chunks carry sequence numbers.
    fn sequenced(&self) -> bool;
}

/// Default bulk sender: header + filler messages of `payload_bytes` through a [`Sender`].
pub struct FramedBulkSender {
    inner: Box<dyn Sender>,
    buf: Vec<u8>,
}

impl FramedBulkSender {
    pub fn new(inner: Box<dyn Sender>, payload_bytes: usize) -> Self {
        let mut buf = vec![0u8; payload_bytes];
        crate::message::fill_payload(&mut buf);
        FramedBulkSender { inner, buf }
    }
}

impl BulkSender for FramedBulkSender {
    fn send_chunk(&mut self, seq: u64) -> Result<(usize, u32), DriverError> {
        let now = crate::clock::now_ns();
        Header {
            flags: 0,
            seq,
            intended_ns: now,
            actual_ns: now,
        }
        .encode(&mut self.buf);
        let failed = self.inner.send(&self.buf)?;
        Ok((self.buf.len(), failed))
    }

    fn finish(&mut self, total: u64) -> Result<(), DriverError> {
        let now = crate::clock::now_ns();
        let mut end = [0u8; crate::message::HEADER_LEN];
        Header {
            flags: FLAG_END,
            seq: total,
            intended_ns: now,
            actual_ns: now,
        }
        .encode(&mut end);
        self.inner.finish(&end)
    }

    fn sequenced(&self) -> bool {
        true
    }
}

/// Default bulk receiver: decodes headers from a [`Receiver`].
pub struct FramedBulkReceiver {
    inner: Box<dyn Receiver>,
    buf: Vec<u8>,
}

impl FramedBulkReceiver {
    pub fn new(inner: Box<dyn Receiver>, max_bytes: usize) -> Self {
        FramedBulkReceiver {
            inner,
            buf: vec![0u8; max_bytes],
        }
    }
}

impl BulkReceiver for FramedBulkReceiver {
    fn recv_chunk(&mut self, deadline_ns: u64) -> Result<BulkEvent, DriverError> {
        match self.inner.recv(&mut self.buf, deadline_ns)? {
            None if self.inner.peers_closed() => Ok(BulkEvent::Closed),
            None => Ok(BulkEvent::Idle),
            Some(n) => {
                let h = Header::decode(&self.buf[..n]).map_err(|e| DriverError::Protocol {
                    addr: self.inner.local_addr(),
                    msg: e.to_string(),
                })?;
                if h.is_end() {
                    Ok(BulkEvent::End { total: Some(h.seq) })
                } else {
                    Ok(BulkEvent::Data {
                        bytes: n,
                        seq: Some(h.seq),
                    })
                }
            }
        }
    }

    fn local_addr(&self) -> String {
        self.inner.local_addr()
    }

    fn sequenced(&self) -> bool {
        true
    }
}

/// A configuration error for a knob of `protocol` (unknown, or a bad value).
pub fn options_error(protocol: &str, known: &[&str], e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Options {
        protocol: protocol.into(),
        detail: e.to_string(),
        known: known.join(", "),
    }
}

/// `listen` (receiver, ponger) or `peers` (sender, pinger), for protocols without a broker.
pub fn require_endpoints(cfg: &Config) -> Result<(), ConfigError> {
    use crate::config::Role;
    let when = |what: &str| format!("{what} for protocol {} (it has no broker)", cfg.protocol);
    match cfg.role {
        Role::Receiver | Role::Ponger if cfg.listen.is_none() => Err(ConfigError::Missing {
            key: "listen",
            when: when("for role receiver/ponger"),
        }),
        Role::Sender | Role::Pinger if cfg.peers.is_empty() => Err(ConfigError::Missing {
            key: "peers",
            when: when("(a non-empty list)"),
        }),
        _ => Ok(()),
    }
}

/// Host mode: a flow that cannot share what the host agent's flows of its protocol share (a DDS
/// participant, a zenoh session, an MQTT client), refused by that driver's `host_plan`: the later
/// flow's id and the message, which names both flows and the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    pub flow: u32,
    pub message: String,
}

/// Host mode: "key A and B" for each shared knob whose value differs between two flows' lists
/// (the same keys in the same order), for a `PlanError`.
#[cfg(any(feature = "zenoh", feature = "mqtt", feature = "nats"))]
pub fn knob_diffs(first: &[(&'static str, String)], other: &[(&'static str, String)]) -> Vec<String> {
    first
        .iter()
        .zip(other)
        .filter(|(a, b)| a.1 != b.1)
        .map(|(a, b)| format!("{} {} and {}", a.0, a.1, b.1))
        .collect()
}

/// The driver for `cfg.protocol`, with its knobs parsed and sizes checked.
pub fn create(cfg: &Config) -> Result<Box<dyn Driver>, ConfigError> {
    // `broker` lets config leave out `listen` / `peers`; point-to-point protocols need them.
    if matches!(cfg.protocol.as_str(), "tcp" | "udp") {
        require_endpoints(cfg)?;
    }
    let driver: Box<dyn Driver> = match cfg.protocol.as_str() {
        "tcp" => Box::new(tcp::Tcp::from_config(cfg)?),
        "udp" => Box::new(udp::Udp::from_config(cfg)?),
        #[cfg(feature = "mqtt")]
        "mqtt" => Box::new(mqtt::Mqtt::from_config(cfg)?),
        #[cfg(feature = "kafka")]
        "kafka" => Box::new(kafka::Kafka::from_config(cfg)?),
        #[cfg(feature = "nats")]
        "nats" => Box::new(nats::Nats::from_config(cfg)?),
        #[cfg(feature = "zenoh")]
        "zenoh" => Box::new(zenoh::Zenoh::from_config(cfg)?),
        #[cfg(feature = "zmq")]
        "zmq" => Box::new(zmq::Zmq::from_config(cfg)?),
        #[cfg(feature = "dds")]
        "dds" => Box::new(dds::Dds::from_config(cfg)?),
        other => {
            if let Some(e) = missing_driver(other) {
                return Err(e);
            }
            return Err(ConfigError::invalid(
                "protocol",
                format!("{other:?}"),
                format!(
                    "one of {} (the protocols this agent build speaks)",
                    PROTOCOLS.join(", ")
                ),
            ));
        }
    };
    let largest = cfg.max_message_bytes();
    if largest > driver.max_message_bytes() {
        let key = if cfg.step_bytes > 0 {
            "payload_bytes + step_bytes * (messages - 1)"
        } else {
            "payload_bytes"
        };
        return Err(ConfigError::invalid(
            key,
            largest,
            format!(
                "at most {} bytes: the largest message protocol {} carries",
                driver.max_message_bytes(),
                driver.name()
            ),
        ));
    }
    Ok(driver)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(protocol: &str, extra: serde_json::Value) -> Config {
        let mut v = serde_json::json!({"v":1,"role":"pinger","protocol":protocol,"pattern":"ping",
            "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        Config::parse(&v.to_string()).unwrap()
    }

    fn err(protocol: &str, extra: serde_json::Value) -> String {
        match create(&cfg(protocol, extra)) {
            Ok(d) => panic!("driver {} accepted a bad configuration", d.name()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn known_protocols_are_created() {
        for p in PROTOCOLS {
            // Brokered protocols take `broker`; the others ignore it.
            let extra = serde_json::json!({"broker": "127.0.0.1:9"});
            assert_eq!(create(&cfg(p, extra)).unwrap().name(), *p);
        }
    }

    #[test]
    fn driver_checks_name_the_protocol_and_the_limit() {
        assert!(err("pigeon", serde_json::json!({})).contains("one of tcp, udp"));
        let e = err("udp", serde_json::json!({"payload_bytes": 65_508}));
        assert!(
            e.contains("65508") && e.contains("65507") && e.contains("udp"),
            "{e}"
        );
        let e = err(
            "udp",
            serde_json::json!({"pattern":"ramp","step_bytes":10_000}),
        );
        assert!(
            e.contains("payload_bytes + step_bytes") && e.contains("90064"),
            "{e}"
        );
        let e = err("udp", serde_json::json!({"options":{"nodelay":true}}));
        assert!(e.contains("protocol udp") && e.contains("nodelay"), "{e}");
        let e = err("tcp", serde_json::json!({"options":{"mss":20}}));
        assert!(e.contains("options.mss") && e.contains("88"), "{e}");
        let e = err("tcp", serde_json::json!({"options":{"send_buffer":"big"}}));
        assert!(
            e.contains("protocol tcp") && e.contains("invalid type"),
            "{e}"
        );
        // TCP carries what UDP cannot.
        assert!(create(&cfg("tcp", serde_json::json!({"payload_bytes": 1_000_000}))).is_ok());
    }
}
