//! The `zenoh` driver (the `zenoh` crate, 1.x), and the in-process zenoh router
//! behind `roughnet-agent router`.
//!
//! Zenoh runs its own tokio runtime inside the session; this driver uses the
//! crate's blocking API (`Wait`) and its FIFO channel handlers with deadlines, so
//! the patterns stay synchronous.  Layout of keys under the run's `topic` (default
//! `roughnet/default`):
//!
//! | key | who declares | what |
//! |---|---|---|
//! | `<topic>/data` | senders publish, receivers subscribe | stream and bulk messages |
//! | `<topic>/ping` | pingers publish, pongers subscribe | requests (fan-out to every ponger) |
//! | `<topic>/pong/<addr>` | ponger with `listen` = addr publishes | its replies (the pinger tells pongers apart by key) |
//! | `<topic>/rx/<addr>`, `<topic>/ponger/<addr>` | liveliness tokens | "subscribed and ready" |
//! | `<topic>/rx-left/<addr>`, `<topic>/ponger-left/<addr>` | liveliness tokens | "leaving now" (not a dropped transport) |
//!
//! This follows zenoh's own z_ping/z_pong (two publishers and two subscribers).
//! A sender or pinger waits until it sees the liveliness token of every peer in
//! `cfg.peers` (declared after the peer's subscriber, on the same session, so
//! its subscription is known) before the first message: nothing is lost to
//! discovery.  At the end it waits until the peers have left (reliable: up to the
//! run's timeout; best effort: a few seconds), so the session is not closed under
//! queued data; a peer whose token went with a dropped transport is waited for and
//! gets the end marker again when it is back (`PeerTokens`).  Tokens are followed
//! with a liveliness subscriber, not queries, so a slow or lossy link under test
//! cannot hide them.
//!
//! Modes: `peer` (receivers listen on `<transport>/<listen>`, senders connect to
//! `<transport>/<peer>`; with `multicast_scouting` they find each other by
//! scouting instead of connecting) and `client` (everyone connects to `broker`,
//! a zenoh router such as `roughnet-agent router`).  Transports tcp, udp and quic
//! (peer mode; TLS files from the options).  The options, their checks and the
//! session timing for slow links (open timeout, lease, and this driver's own
//! waits scaled with them) are in `zenoh/options.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use zenoh::handlers::{FifoChannel, FifoChannelHandler};
use zenoh::pubsub::{Publisher, Subscriber};
use zenoh::qos::{CongestionControl, Priority, Reliability};
use zenoh::sample::{Sample, SampleKind};
use zenoh::{Session, Wait};

use super::{
    options_error, Driver, DriverError, PlanError, Receiver, Requester, Responder, Sender,
};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, Role};
use crate::signals::stop_requested;

mod host;
mod options;
mod tokens;
use host::hold_host_session;
pub use host::{host_plan, install_host_session, HostHold, HostSession};
use options::{
    duration_knob, pick, tls_of, Mode, Timing, Tls, ZenohOptions, KNOBS, ZENOH_OPEN_TIMEOUT,
};
use tokens::{left_key, PeerTokens, Presence};

/// Largest message the driver accepts (zenoh fragments large payloads).
pub const MAX_MESSAGE: usize = 64 << 20;
/// Samples a subscriber queues before zenoh's receive task waits (back-pressure).
const FIFO_CAPACITY: usize = 1024;
/// Best-effort end markers are repeated like UDP's.
const END_COPIES: u32 = 5;
const END_GAP: Duration = Duration::from_millis(10);
/// How long a best-effort sender waits, at the end, for receivers to leave before closing.
const LEAVE_WAIT: Duration = Duration::from_secs(3);
/// How long a ponger waits for the pinger's reply subscription to be known.
const MATCH_WAIT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);
/// How often a wait for peers' tokens looks at the stop signal.
const POLL_STOP: Duration = Duration::from_millis(100);
/// How long a peer whose transport dropped may take to come back (zenoh reconnects).
const REJOIN_WAIT: Duration = Duration::from_secs(15);
/// A leaving receiver keeps its session this long after declaring its `-left` token
/// (on a slow link a round trip: `Zenoh::leave_linger`).
const LEAVE_LINGER: Duration = Duration::from_millis(300);
/// How long a sender waits for peers' tokens before settling for a matching subscription.
const TOKEN_GRACE: Duration = Duration::from_secs(2);
pub const DEFAULT_TOPIC: &str = "roughnet/default";

pub struct Zenoh {
    mode: Mode,
    transport: &'static str,
    reliable: bool,
    block: bool,
    express: bool,
    priority: Priority,
    scouting: bool,
    tls: Option<Tls>,
    /// Session timing (zenoh's defaults unless the run set them for a slow link).
    timing: Timing,
    /// `wait_before_close` (zenoh's 5 s when None).
    wait_before_close: Option<Duration>,
    broker: Option<String>,
    topic: String,
}

impl Zenoh {
    pub fn from_config(cfg: &Config) -> Result<Zenoh, ConfigError> {
        let o: ZenohOptions =
            serde_json::from_value(serde_json::Value::Object(cfg.options.clone()))
                .map_err(|e| options_error("zenoh", &KNOBS, e))?;
        let mode = match pick("mode", &o.mode, &["peer", "client"])? {
            "peer" => Mode::Peer,
            _ => Mode::Client,
        };
        let transport = pick("transport", &o.transport, &["tcp", "udp", "quic"])?;
        let reliable =
            pick("reliability", &o.reliability, &["reliable", "best_effort"])? == "reliable";
        let block = pick(
            "congestion_control",
            &o.congestion_control,
            &["block", "drop"],
        )? == "block";
        let priority = match o.priority.unwrap_or(5) {
            1 => Priority::RealTime,
            2 => Priority::InteractiveHigh,
            3 => Priority::InteractiveLow,
            4 => Priority::DataHigh,
            5 => Priority::Data,
            6 => Priority::DataLow,
            7 => Priority::Background,
            p => {
                return Err(ConfigError::invalid(
                    "options.priority",
                    p,
                    "1..7 for protocol zenoh (1 real time ... 5 data ... 7 background)",
                ))
            }
        };
        let scouting = o.multicast_scouting.unwrap_or(false);
        if mode == Mode::Peer {
            super::require_endpoints(cfg)?;
        }
        if mode == Mode::Client && cfg.broker.is_none() {
            return Err(ConfigError::Missing {
                key: "broker",
                when: "for protocol zenoh in mode client (IP:PORT of the zenoh router)".into(),
            });
        }
        if mode == Mode::Client && scouting {
            return Err(ConfigError::invalid(
                "options.multicast_scouting",
                true,
                "false for protocol zenoh in mode client (clients connect to `broker`)",
            ));
        }
        let tls = tls_of(&o, transport, mode, cfg)?;
        let timing = Timing {
            open: duration_knob("open_timeout", o.open_timeout)?,
            lease: duration_knob("lease", o.lease)?,
        };
        let topic = cfg.topic.clone().unwrap_or_else(|| DEFAULT_TOPIC.into());
        zenoh::key_expr::KeyExpr::try_from(format!("{topic}/data")).map_err(|e| {
            ConfigError::invalid(
                "topic",
                format!("{topic:?}"),
                format!("a zenoh key expression such as \"roughnet/0123\" ({e})"),
            )
        })?;
        Ok(Zenoh {
            mode,
            transport,
            reliable,
            block,
            express: o.express.unwrap_or(false),
            priority,
            scouting,
            tls,
            timing,
            wait_before_close: duration_knob("wait_before_close", o.wait_before_close)?,
            broker: cfg.broker.clone(),
            topic,
        })
    }

    fn endpoint(&self, addr: &SocketAddr) -> String {
        format!("{}/{}", self.transport, addr)
    }

    /// A flow's session: in host mode the process's shared one (`HostSession`, with the hold that
    /// keeps it open), else its own: `listen` for receivers/pongers (peer mode), `connect` for the
    /// others.
    fn open(
        &self,
        cfg: &Config,
        listen: Option<SocketAddr>,
    ) -> Result<(Session, Option<HostHold>), DriverError> {
        if let Some(held) = hold_host_session(self, cfg)? {
            return Ok(held);
        }
        let connect: Vec<SocketAddr> = if self.scouting || listen.is_some() {
            vec![]
        } else {
            cfg.peers.clone()
        };
        let listen: Vec<SocketAddr> = listen.into_iter().collect();
        Ok((self.open_session(cfg, &listen, &connect, true)?, None))
    }

    /// Open a session listening on `listen` and connecting to `connect` (peer mode; a client
    /// connects to `broker`), with zenoh's gossip unless `gossip` is false.
    fn open_session(
        &self,
        cfg: &Config,
        listen: &[SocketAddr],
        connect: &[SocketAddr],
        gossip: bool,
    ) -> Result<Session, DriverError> {
        let what = listen
            .first()
            .map(|l| self.endpoint(l))
            .unwrap_or_else(|| "zenoh session".into());
        let conf_err = |e: zenoh::Error| DriverError::Protocol {
            addr: what.clone(),
            msg: format!("zenoh configuration: {e}"),
        };
        let mut c = zenoh::Config::default();
        let json = |v: &serde_json::Value| v.to_string();
        let (listen_eps, connect_eps): (Vec<String>, Vec<String>) = match self.mode {
            Mode::Client => (
                vec![],
                vec![format!(
                    "tcp/{}",
                    self.broker
                        .as_deref()
                        .expect("checked: client has a broker")
                )],
            ),
            Mode::Peer => (
                listen.iter().map(|l| self.endpoint(l)).collect(),
                connect.iter().map(|p| self.endpoint(p)).collect(),
            ),
        };
        if !gossip {
            c.insert_json5("scouting/gossip/enabled", "false")
                .map_err(conf_err)?;
        }
        let mode = if self.mode == Mode::Client {
            "client"
        } else {
            "peer"
        };
        c.insert_json5("mode", &json(&mode.into()))
            .map_err(conf_err)?;
        c.insert_json5("listen/endpoints", &json(&listen_eps.clone().into()))
            .map_err(conf_err)?;
        c.insert_json5("connect/endpoints", &json(&connect_eps.clone().into()))
            .map_err(conf_err)?;
        c.insert_json5("scouting/multicast/enabled", &json(&self.scouting.into()))
            .map_err(conf_err)?;
        if let Some(open) = self.timing.open {
            let ms = open.as_millis().to_string();
            c.insert_json5("transport/unicast/open_timeout", &ms)
                .map_err(conf_err)?;
            c.insert_json5("transport/unicast/accept_timeout", &ms)
                .map_err(conf_err)?;
            // Declarations exchanged after the open wait as long for the peer's final answer.
            let interests = open.max(ZENOH_OPEN_TIMEOUT).as_millis().to_string();
            c.insert_json5("routing/interests/timeout", &interests)
                .map_err(conf_err)?;
        }
        if let Some(lease) = self.timing.lease {
            c.insert_json5("transport/link/tx/lease", &lease.as_millis().to_string())
                .map_err(conf_err)?;
        }
        if let Some(wait) = self.wait_before_close {
            c.insert_json5(
                "transport/link/tx/queue/congestion_control/block/wait_before_close",
                &wait.as_micros().to_string(),
            )
            .map_err(conf_err)?;
        }
        if let Some(tls) = &self.tls {
            c.insert_json5(
                "transport/link/tls/root_ca_certificate",
                &json(&tls.ca.clone().into()),
            )
            .map_err(conf_err)?;
            if let (Some((cert, key)), false) = (&tls.listen, listen.is_empty()) {
                c.insert_json5(
                    "transport/link/tls/listen_certificate",
                    &json(&cert.clone().into()),
                )
                .map_err(conf_err)?;
                c.insert_json5(
                    "transport/link/tls/listen_private_key",
                    &json(&key.clone().into()),
                )
                .map_err(conf_err)?;
            }
        }
        if self.mode == Mode::Client {
            // Retry the router until the run gives up, then fail the open.
            let left_ms = cfg.give_up_ns().saturating_sub(now_ns()) / 1_000_000;
            c.insert_json5("connect/timeout_ms", &left_ms.max(1).to_string())
                .map_err(conf_err)?;
            c.insert_json5("connect/exit_on_failure", "true")
                .map_err(conf_err)?;
        }
        tracing::debug!(mode, ?listen_eps, ?connect_eps, "opening a zenoh session");
        zenoh::open(c).wait().map_err(|e| DriverError::Protocol {
            addr: what.clone(),
            msg: format!("opening the zenoh session: {e}"),
        })
    }

    fn publisher(&self, s: &Session, key: String) -> Result<Publisher<'static>, DriverError> {
        s.declare_publisher(key.clone())
            .reliability(if self.reliable {
                Reliability::Reliable
            } else {
                Reliability::BestEffort
            })
            .congestion_control(if self.block {
                CongestionControl::Block
            } else {
                CongestionControl::Drop
            })
            .express(self.express)
            .priority(self.priority)
            .wait()
            .map_err(|e| DriverError::Protocol {
                addr: key,
                msg: format!("declaring the publisher: {e}"),
            })
    }

    fn subscriber(
        &self,
        s: &Session,
        key: String,
    ) -> Result<Subscriber<FifoChannelHandler<Sample>>, DriverError> {
        s.declare_subscriber(key.clone())
            .with(FifoChannel::new(FIFO_CAPACITY))
            .wait()
            .map_err(|e| DriverError::Protocol {
                addr: key,
                msg: format!("declaring the subscriber: {e}"),
            })
    }

    fn token(
        &self,
        s: &Session,
        key: String,
    ) -> Result<zenoh::liveliness::LivelinessToken, DriverError> {
        s.liveliness()
            .declare_token(key.clone())
            .wait()
            .map_err(|e| DriverError::Protocol {
                addr: key,
                msg: format!("declaring the liveliness token: {e}"),
            })
    }

    /// How long a leaving receiver keeps its session after declaring its `-left` token:
    /// closing sooner discards the declaration if it is still in the transmission queue,
    /// and the senders take the leave for a dropped transport.  On a slow link (the
    /// runner set `open_timeout` to four round trips, run/slowlink.py) a round trip.
    fn leave_linger(&self) -> Duration {
        self.timing
            .open
            .map_or(LEAVE_LINGER, |open| (open / 4).max(LEAVE_LINGER))
    }

    /// Local address to print in `ready`: the listen locator zenoh bound, else `listen`.
    /// (A shared session in host mode may listen on several addresses: the one with `listen`'s IP.)
    fn local(&self, s: &Session, listen: Option<SocketAddr>) -> String {
        if self.mode == Mode::Peer {
            let locs = s.info().locators().wait();
            let mine = locs.iter().find(|l| {
                let a = l.address().to_string();
                listen.is_some_and(|w| {
                    a.parse::<SocketAddr>()
                        .is_ok_and(|b| b.ip().to_canonical() == w.ip().to_canonical())
                })
            });
            if let Some(l) = mine.or(locs.first()) {
                return l.address().to_string();
            }
        }
        match listen {
            Some(l) => l.to_string(),
            None => format!("{} via {}", s.zid(), self.broker.as_deref().unwrap_or("?")),
        }
    }
}

impl Zenoh {
    /// What configures the session rather than one publisher or subscriber, as (key, value): the
    /// zenoh flows of a host agent share one session and must agree on these (`host_plan`).
    fn session_knobs(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Option<Duration>| {
            d.map_or_else(
                || "default".to_string(),
                |d| format!("{} ms", d.as_millis()),
            )
        };
        let mode = match self.mode {
            Mode::Peer => "peer",
            Mode::Client => "client",
        };
        vec![
            ("options.mode", mode.to_string()),
            ("options.transport", self.transport.to_string()),
            ("options.multicast_scouting", self.scouting.to_string()),
            ("options.open_timeout", ms(self.timing.open)),
            ("options.lease", ms(self.timing.lease)),
            ("options.wait_before_close", ms(self.wait_before_close)),
            (
                "options.tls_ca",
                self.tls
                    .as_ref()
                    .map_or_else(|| "none".into(), |t| t.ca.clone()),
            ),
            (
                "broker",
                self.broker.clone().unwrap_or_else(|| "none".into()),
            ),
        ]
    }
}

/// A key chunk naming an address (`198.18.0.2:5201` -> `198.18.0.2_5201`).
pub fn addr_key(a: &SocketAddr) -> String {
    str_key(&a.to_string())
}

fn str_key(a: &str) -> String {
    a.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn instant_of(deadline_ns: u64) -> Instant {
    Instant::now() + Duration::from_nanos(deadline_ns.saturating_sub(now_ns()))
}

/// Copy a sample's payload into `buf`; a payload longer than `buf` is an error.
fn copy_payload(sample: &Sample, buf: &mut [u8]) -> Result<usize, DriverError> {
    let p = sample.payload();
    let n = p.len();
    if n > buf.len() {
        return Err(DriverError::TooLarge {
            size: n,
            limit: buf.len(),
        });
    }
    let mut at = 0;
    for s in p.slices() {
        buf[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
    Ok(n)
}

/// The key chunk naming this receiver/ponger: the address it reports in `ready`
/// (what senders get as `peers`), else its zenoh id.
fn self_key(s: &Session, listen: Option<SocketAddr>, local: &str) -> String {
    match listen {
        Some(_) => str_key(local),
        None => s.zid().to_string(),
    }
}

/// Wait for every peer's token; a subscriber that is not a roughnet agent
/// declares none, so after TOKEN_GRACE a matching subscription is enough.
fn await_peers(
    tokens: &mut PeerTokens,
    publisher: &Publisher<'_>,
    cfg: &Config,
    scale: u32,
) -> Result<(), DriverError> {
    let give_up = cfg.give_up_ns();
    let grace = give_up.min(now_ns() + (TOKEN_GRACE * scale).as_nanos() as u64);
    if tokens.wait_for(true, grace)? {
        return Ok(());
    }
    tracing::warn!(
        "zenoh: not every peer's token under {}/ after {:?}; still waiting (or for a matching subscription)",
        tokens.prefix,
        TOKEN_GRACE * scale
    );
    loop {
        if matches!(publisher.matching_status().wait(), Ok(m) if m.matching()) {
            tracing::info!(
                "zenoh: going ahead on a matching subscription for {} (no token from every peer)",
                tokens.prefix
            );
            return Ok(());
        }
        if tokens.wait_for(true, give_up.min(now_ns() + POLL.as_nanos() as u64))? {
            return Ok(());
        }
        if now_ns() >= give_up {
            return Err(gave_up(
                "waiting for the zenoh subscribers of every peer",
                cfg,
            ));
        }
    }
}

fn gave_up(what: &str, cfg: &Config) -> DriverError {
    DriverError::GaveUp {
        what: what.into(),
        timeout_ms: cfg.timeout_ns / 1_000_000,
    }
}

impl Driver for Zenoh {
    fn name(&self) -> &'static str {
        "zenoh"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_MESSAGE
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        let (session, hold) = self.open(cfg, None)?;
        let mut tokens = PeerTokens::declare(
            &session,
            &format!("{}/rx", self.topic),
            &cfg.peers,
            self.timing.scale(),
        )?;
        let publisher = self.publisher(&session, format!("{}/data", self.topic))?;
        await_peers(&mut tokens, &publisher, cfg, self.timing.scale())?;
        Ok(Box::new(ZenohSender {
            publisher,
            reliable: self.reliable,
            scale: self.timing.scale(),
            give_up_ns: cfg.give_up_ns(),
            peers: cfg.peers.len(),
            tokens,
            _session: session,
            _hold: hold,
        }))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        let listen = cfg.listen;
        let (session, hold) = self.open(cfg, listen)?;
        let subscriber = self.subscriber(&session, format!("{}/data", self.topic))?;
        let local = self.local(&session, listen);
        let me = self_key(&session, listen, &local);
        let key = format!("{}/rx/{me}", self.topic);
        let token = self.token(&session, key.clone())?;
        Ok(Box::new(ZenohReceiver {
            local,
            subscriber,
            _presence: Presence {
                token: Some(token),
                session: session.clone(),
                left: left_key(&key),
                linger: self.leave_linger(),
            },
            _session: session,
            _hold: hold,
        }))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        let (session, hold) = self.open(cfg, None)?;
        let (tx, rx) = mpsc::sync_channel::<(usize, Sample)>(FIFO_CAPACITY);
        // One reply subscription per ponger (the index tells them apart); without
        // `peers` (client mode) one for all, counted as one peer.
        let keys: Vec<String> = if cfg.peers.is_empty() {
            vec![format!("{}/pong/*", self.topic)]
        } else {
            cfg.peers
                .iter()
                .map(|p| format!("{}/pong/{}", self.topic, addr_key(p)))
                .collect()
        };
        let mut subscribers = Vec::with_capacity(keys.len());
        for (i, key) in keys.into_iter().enumerate() {
            let tx = tx.clone();
            let sub = session
                .declare_subscriber(key.clone())
                .callback(move |sample| {
                    let _ = tx.send((i, sample));
                })
                .wait()
                .map_err(|e| DriverError::Protocol {
                    addr: key,
                    msg: format!("declaring the reply subscriber: {e}"),
                })?;
            subscribers.push(sub);
        }
        let mut tokens = PeerTokens::declare(
            &session,
            &format!("{}/ponger", self.topic),
            &cfg.peers,
            self.timing.scale(),
        )?;
        let publisher = self.publisher(&session, format!("{}/ping", self.topic))?;
        await_peers(&mut tokens, &publisher, cfg, self.timing.scale())?;
        Ok(Box::new(ZenohRequester {
            publisher,
            replies: rx,
            _subscribers: subscribers,
            reliable: self.reliable,
            scale: self.timing.scale(),
            give_up_ns: cfg.give_up_ns(),
            peers: cfg.peers.len(),
            tokens,
            _session: session,
            _hold: hold,
        }))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        let listen = cfg.listen;
        let (session, hold) = self.open(cfg, listen)?;
        let subscriber = self.subscriber(&session, format!("{}/ping", self.topic))?;
        let local = self.local(&session, listen);
        let me = self_key(&session, listen, &local);
        let publisher = self.publisher(&session, format!("{}/pong/{me}", self.topic))?;
        let key = format!("{}/ponger/{me}", self.topic);
        let token = self.token(&session, key.clone())?;
        Ok(Box::new(ZenohResponder {
            local,
            subscriber,
            publisher,
            matched: false,
            scale: self.timing.scale(),
            _presence: Presence {
                token: Some(token),
                session: session.clone(),
                left: left_key(&key),
                linger: self.leave_linger(),
            },
            _session: session,
            _hold: hold,
        }))
    }
}

fn put(publisher: &Publisher<'_>, msg: &[u8]) -> Result<(), DriverError> {
    publisher
        .put(msg)
        .wait()
        .map_err(|e| DriverError::Protocol {
            addr: publisher.key_expr().to_string(),
            msg: format!("put: {e}"),
        })
}

/// Send the end marker (repeated when best effort), then wait for the peers to leave.
///
/// A roughnet receiver leaves (its token goes) once it has everything up to the end
/// marker, or when its transport closed; until then the transport may still hold
/// messages that closing our session would lose.  Reliable: wait as long as the run
/// allows, as Kafka's and MQTT QoS 1's flush do (over 25 % drop a TCP connection can
/// stall for many seconds).  Best effort, or a subscriber that declares no token (not
/// a roughnet agent: only its matching subscription tells), at most LEAVE_WAIT.
fn finish_with(
    publisher: &Publisher<'_>,
    reliable: bool,
    end: &[u8],
    tokens: &mut PeerTokens,
    give_up_ns: u64,
    scale: u32,
) -> Result<(), DriverError> {
    let copies = if reliable { 1 } else { END_COPIES };
    for k in 0..copies {
        put(publisher, end)?;
        if k + 1 < copies {
            std::thread::sleep(END_GAP);
        }
    }
    let bounded = give_up_ns.min(now_ns() + (LEAVE_WAIT * scale).as_nanos() as u64);
    // Changes that came while we were sending; a peer back before now got this marker.
    tokens.update(now_ns())?;
    tokens.take_rejoined();
    if !tokens.seen {
        while now_ns() < bounded && !stop_requested() {
            match publisher.matching_status().wait() {
                Ok(m) if m.matching() => std::thread::sleep(POLL),
                _ => break,
            }
        }
        return Ok(());
    }
    let until = if reliable { give_up_ns } else { bounded };
    loop {
        match tokens.wait_for(false, until.min(now_ns() + POLL_STOP.as_nanos() as u64)) {
            Ok(true) | Err(DriverError::Interrupted) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(e),
        }
        // A receiver came back on a new transport: the end marker may have gone with
        // the old one's queue.
        if tokens.take_rejoined() {
            put(publisher, end)?;
        }
        if now_ns() >= until {
            break;
        }
    }
    if reliable {
        tracing::warn!(
            "zenoh: {} peer(s) under {}/ still present at the run's timeout; closing the session \
             may lose what the transport still holds",
            tokens.count(),
            tokens.prefix
        );
    } else {
        tracing::debug!(
            "zenoh: peers still present {:?} after the end marker",
            LEAVE_WAIT * scale
        );
    }
    Ok(())
}

pub struct ZenohSender {
    publisher: Publisher<'static>,
    reliable: bool,
    scale: u32,
    give_up_ns: u64,
    peers: usize,
    tokens: PeerTokens,
    _session: Session,
    /// Last: in host mode, the flow's hold on the shared session (crate::host).
    _hold: Option<HostHold>,
}

impl Sender for ZenohSender {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        put(&self.publisher, msg)?;
        self.tokens.drain();
        Ok(0)
    }

    fn extra_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("transport_drops".into(), self.tokens.drops.into());
        m
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        finish_with(
            &self.publisher,
            self.reliable,
            end,
            &mut self.tokens,
            self.give_up_ns,
            self.scale,
        )
    }

    fn peers(&self) -> usize {
        self.peers.max(1)
    }
}

pub struct ZenohReceiver {
    local: String,
    subscriber: Subscriber<FifoChannelHandler<Sample>>,
    /// Before `_session`: dropped first.
    _presence: Presence,
    _session: Session,
    /// Last: in host mode, the flow's hold on the shared session (crate::host).
    _hold: Option<HostHold>,
}

impl Receiver for ZenohReceiver {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        match self.subscriber.recv_deadline(instant_of(deadline_ns)) {
            Ok(Some(sample)) => copy_payload(&sample, buf).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(DriverError::Protocol {
                addr: self.local.clone(),
                msg: format!("subscriber closed: {e}"),
            }),
        }
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

pub struct ZenohRequester {
    publisher: Publisher<'static>,
    replies: mpsc::Receiver<(usize, Sample)>,
    _subscribers: Vec<Subscriber<()>>,
    reliable: bool,
    scale: u32,
    give_up_ns: u64,
    peers: usize,
    tokens: PeerTokens,
    _session: Session,
    /// Last: in host mode, the flow's hold on the shared session (crate::host).
    _hold: Option<HostHold>,
}

impl Requester for ZenohRequester {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        put(&self.publisher, msg)?;
        Ok(0)
    }

    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        let wait = Duration::from_nanos(deadline_ns.saturating_sub(now_ns()));
        match self.replies.recv_timeout(wait) {
            Ok((peer, sample)) => Ok(Some((copy_payload(&sample, buf)?, peer))),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(DriverError::Protocol {
                addr: self.publisher.key_expr().to_string(),
                msg: "reply subscribers closed".into(),
            }),
        }
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        finish_with(
            &self.publisher,
            self.reliable,
            end,
            &mut self.tokens,
            self.give_up_ns,
            self.scale,
        )
    }

    fn peers(&self) -> usize {
        self.peers.max(1)
    }
}

pub struct ZenohResponder {
    local: String,
    subscriber: Subscriber<FifoChannelHandler<Sample>>,
    publisher: Publisher<'static>,
    /// The pinger's reply subscription has been seen (checked once, before the first reply).
    matched: bool,
    scale: u32,
    /// Before `_session`: dropped first.
    _presence: Presence,
    _session: Session,
    /// Last: in host mode, the flow's hold on the shared session (crate::host).
    _hold: Option<HostHold>,
}

impl Responder for ZenohResponder {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        match self.subscriber.recv_deadline(instant_of(deadline_ns)) {
            Ok(Some(sample)) => copy_payload(&sample, buf).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(DriverError::Protocol {
                addr: self.local.clone(),
                msg: format!("subscriber closed: {e}"),
            }),
        }
    }

    #[inline]
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        if !self.matched {
            // The request came after the pinger subscribed to our replies, but the
            // subscription may travel on another priority queue: wait for it once.
            let until = Instant::now() + MATCH_WAIT * self.scale;
            while Instant::now() < until && !stop_requested() {
                match self.publisher.matching_status().wait() {
                    Ok(s) if s.matching() => break,
                    _ => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            self.matched = true;
        }
        put(&self.publisher, msg)
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

/// `roughnet-agent router`: a zenoh router listening on `endpoints` (e.g.
/// `tcp/198.18.0.1:7447`), multicast scouting off.  Prints `ready` once
/// listening and runs until SIGTERM/SIGINT.
pub fn run_router(endpoints: &[String]) -> Result<(), DriverError> {
    let what = endpoints.join(",");
    let conf_err = |e: zenoh::Error| DriverError::Protocol {
        addr: what.clone(),
        msg: format!("zenoh router configuration: {e}"),
    };
    let mut c = zenoh::Config::default();
    c.insert_json5("mode", "\"router\"").map_err(conf_err)?;
    c.insert_json5(
        "listen/endpoints",
        &serde_json::Value::from(endpoints.to_vec()).to_string(),
    )
    .map_err(conf_err)?;
    c.insert_json5("listen/exit_on_failure", "true")
        .map_err(conf_err)?;
    c.insert_json5("scouting/multicast/enabled", "false")
        .map_err(conf_err)?;
    let session = zenoh::open(c).wait().map_err(|e| DriverError::Protocol {
        addr: what.clone(),
        msg: format!("starting the zenoh router: {e}"),
    })?;
    let locators: Vec<String> = session
        .info()
        .locators()
        .wait()
        .iter()
        .map(|l| l.to_string())
        .collect();
    crate::output::emit(
        "ready",
        serde_json::json!({"role": "router", "listen": what, "locators": locators}),
    );
    while !stop_requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
    tracing::info!("zenoh router stopping");
    session.close().wait().map_err(|e| DriverError::Protocol {
        addr: what,
        msg: format!("closing the zenoh router: {e}"),
    })
}

#[cfg(test)]
mod tests;
