//! The `nats` driver: core NATS publish/subscribe through nats-server, with the
//! `async-nats` client; request/reply for ping and ramp.
//!
//! Each endpoint owns a one-worker tokio runtime on which async-nats runs its
//! connection task.  Publishing hands the message to the client's bounded command
//! queue (no runtime hop when there is room; the queue filling up is the
//! back-pressure); receiving takes the next message from the subscription's queue,
//! waiting on the runtime only when it is empty.
//!
//! Subjects: stream and bulk publish on `<topic>`.  Ping and ramp are NATS
//! request/reply as its users write it: the ponger subscribes to `<topic>.ping`
//! and answers each request on the request's reply subject; the pinger publishes
//! requests with a reply subject on its own inbox, which it subscribed to first (so
//! requests can be outstanding at once, for open-loop pings).  A receiver is ready
//! once the server has its subscription, and a sender's close returns once the
//! server has everything it published: both wait for a message the client sends
//! itself on a fresh inbox (`server_round_trip`; the server handles one
//! connection's operations in order).  async-nats's `flush` only empties the
//! client's buffer into the socket: a sender that exited after it, with messages
//! still in its socket on a slow link, had them discarded when the server's next
//! bytes reached the closed socket (the kernel answers those with a reset).
//! A lost connection ends the run with an error rather than a silent reconnect,
//! unless the `reconnect` knob is on: then async-nats's own reconnecting (pauses of
//! 100 ms doubling up to 1 s; it subscribes again and sends what was queued meanwhile)
//! carries the endpoint over a server restart, `send` blocks while the client's queue
//! is full, and senders and receivers report `reconnects` and `disconnected_s`.
//!
//! With the `jetstream` knob (stream and bulk; the server needs JetStream: the nats
//! service's `jetstream = true`) messages go through a JetStream stream, spoken
//! over core NATS with the JetStream API subjects (no extra client code): the
//! receiver creates the stream `RN_<topic>` (file storage, on `<topic>`) and its own
//! durable push consumer (explicit acks, delivered to an inbox it subscribed to
//! first) and acknowledges each message; the sender publishes each message with a
//! reply subject for the server's PubAck and a `Nats-Msg-Id` (so a message sent
//! again is stored once), keeps up to [`JS_WINDOW`] unacknowledged, sends again
//! what has no PubAck after [`JS_RESEND`], and closes once everything is
//! acknowledged.  Together with `reconnect` nothing is lost across a server restart.

use async_nats::{Client, ConnectOptions, HeaderMap, Subject, Subscriber};
use bytes::Bytes;
use futures::{FutureExt as _, StreamExt as _};
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::brokered::{self, check_send, copy_into, protocol_error, until, BrokerEndpoint};
use super::{Driver, DriverError, Receiver, Requester, Responder, Sender};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, Pattern};
use crate::signals::stop_requested;

mod host;
pub use host::{host_plan, install_host_clients, HostClient};

const KNOBS: [&str; 2] = ["reconnect", "jetstream"];
/// JetStream: messages a sender keeps unacknowledged before `send` waits.
const JS_WINDOW: usize = 4096;
/// JetStream: a message without a PubAck this long is published again (deduplicated by id).
const JS_RESEND: Duration = Duration::from_secs(2);
/// JetStream: the consumer's ack wait (a delivered message not acknowledged this long
/// is delivered again, e.g. one lost in a server crash).
const JS_ACK_WAIT_NS: u64 = 5_000_000_000;
/// JetStream: how long one API request waits for the server's answer.
const JS_API_WAIT: Duration = Duration::from_secs(5);
/// nats-server's default `max_payload` (1 MiB); a bigger message needs a server configured for it.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Messages a subscription buffers before the client reports a slow consumer (drops).
const SUBSCRIPTION_CAPACITY: usize = 65_536;
/// Slice of a blocking wait between looks at signals and the timeout.
const SLICE: Duration = Duration::from_millis(50);
const CONNECT_RETRY: Duration = Duration::from_millis(50);
/// With `reconnect`: the pause before a reconnect attempt, doubled per failed attempt up to
/// [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Knobs (docs/protocols.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsOptions {
    /// Survive a lost connection (async-nats reconnects) instead of ending the run.
    #[serde(default)]
    pub reconnect: bool,
    /// Carry messages through a JetStream stream (module docs).
    #[serde(default)]
    pub jetstream: bool,
}

/// The JetStream stream of a run topic: `RN_` and the topic with every character
/// other than `[A-Za-z0-9_-]` as `_` (stream names cannot hold `.`, `*`, `>`, spaces).
pub fn js_stream_name(topic: &str) -> String {
    let t: String = topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("RN_{t}")
}

pub struct Nats {
    broker: String,
    topic: String,
    opts: NatsOptions,
}

/// The pause before reconnect attempt `attempts` (1 for the first) with `reconnect`.
fn reconnect_delay(attempts: usize) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16) as u32;
    (RECONNECT_FIRST * 2u32.pow(doublings)).min(RECONNECT_MAX)
}

/// What the connection's event callback saw.
#[derive(Default)]
struct Link {
    /// The connection is gone for good (closed; or disconnected, without `reconnect`).
    lost: AtomicBool,
    reconnect: bool,
    reconnects: AtomicU64,
    /// Time disconnected in finished outages, and the start of the current one (0: none).
    down_ns: AtomicU64,
    down_since: AtomicU64,
}

impl Link {
    fn new(reconnect: bool) -> Link {
        Link {
            reconnect,
            ..Link::default()
        }
    }

    /// The connection is gone for good.
    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    fn event(&self, ev: &async_nats::Event) {
        match ev {
            async_nats::Event::Disconnected if self.reconnect => {
                let _ = self.down_since.compare_exchange(
                    0,
                    now_ns().max(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                tracing::warn!("nats: disconnected; reconnecting");
            }
            async_nats::Event::Disconnected | async_nats::Event::Closed => {
                self.lost.store(true, Ordering::Release);
                tracing::warn!("nats: {ev}");
            }
            async_nats::Event::Connected => {
                let since = self.down_since.swap(0, Ordering::AcqRel);
                if since == 0 {
                    tracing::debug!("nats: connected");
                } else {
                    let down = now_ns().saturating_sub(since);
                    self.down_ns.fetch_add(down, Ordering::AcqRel);
                    self.reconnects.fetch_add(1, Ordering::AcqRel);
                    tracing::warn!("nats: reconnected after {:.3} s", down as f64 / 1e9);
                }
            }
            other => tracing::warn!("nats: {other}"),
        }
    }

    /// With `reconnect`: `reconnects` and `disconnected_s` (a current outage included).
    fn results(&self) -> serde_json::Map<String, serde_json::Value> {
        if !self.reconnect {
            return serde_json::Map::new();
        }
        brokered::outage_results(
            self.reconnects.load(Ordering::Acquire),
            self.down_ns.load(Ordering::Acquire),
            self.down_since.load(Ordering::Acquire),
        )
    }
}

impl Nats {
    pub fn from_config(cfg: &Config) -> Result<Nats, ConfigError> {
        let opts: NatsOptions = brokered::parse_options(cfg, "nats", &KNOBS)?;
        if opts.jetstream && !matches!(cfg.pattern, Pattern::Stream | Pattern::Bulk) {
            return Err(ConfigError::invalid(
                "options.jetstream",
                "true",
                format!(
                    "false for pattern {} (JetStream carries stream and bulk)",
                    cfg.pattern.as_str()
                ),
            ));
        }
        let (host, port) = brokered::broker_addr(cfg, "nats")?;
        let topic = brokered::topic(cfg);
        if topic.contains(|c: char| c.is_whitespace() || c == '*' || c == '>')
            || topic.starts_with('.')
            || topic.ends_with('.')
            || topic.contains("..")
        {
            return Err(ConfigError::invalid(
                "topic",
                format!("{topic:?}"),
                "a NATS subject: no spaces, `*` or `>`, no empty `.`-separated token",
            ));
        }
        let broker = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Nats {
            broker,
            topic,
            opts,
        })
    }
}

impl Driver for Nats {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_PAYLOAD
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        Ok(Box::new(NatsEndpoint::open(self, cfg, Role::Publisher)?))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        Ok(Box::new(NatsEndpoint::open(self, cfg, Role::Subscriber)?))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        Ok(Box::new(NatsEndpoint::open(self, cfg, Role::Requester)?))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        Ok(Box::new(NatsEndpoint::open(self, cfg, Role::Responder)?))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Publisher,
    Subscriber,
    Requester,
    Responder,
}

/// One NATS connection (or, in host mode, a flow's part of the host's one): every role is this.
pub struct NatsEndpoint {
    rt: Arc<tokio::runtime::Runtime>,
    client: Client,
    sub: Option<Subscriber>,
    /// Where `publish` goes (stream subject, or `<topic>.ping` for a requester).
    subject: Subject,
    /// Requester: its inbox, the reply subject of every request.
    inbox: Option<Subject>,
    /// Responder: the reply subject of the last request.
    last_reply: Option<Subject>,
    role: Role,
    link: Arc<Link>,
    /// JetStream sender: PubAcks, ids, what is unacknowledged.
    js: Option<JsPublisher>,
    /// JetStream receiver: acknowledge each message.
    js_ack: bool,
    broker: String,
    cfg: Config,
    /// Host mode: this flow's hold on the host's connection (host.rs), dropped last.
    _hold: Option<host::Hold>,
}

/// A JetStream publisher's bookkeeping (module docs).
struct JsPublisher {
    /// PubAcks arrive on `<inbox>.<n>`.
    acks: Subscriber,
    inbox: String,
    /// `Nats-Msg-Id` prefix (unique per endpoint).
    id: String,
    next: u64,
    /// Unacknowledged messages by number, and the order they were (last) published in.
    unacked: HashMap<u64, Bytes>,
    order: VecDeque<(u64, u64)>,
    resent: u64,
    refused_acks: u64,
}

impl NatsEndpoint {
    /// The one-worker runtime a connection's task runs on.
    fn runtime(broker: &str) -> Result<tokio::runtime::Runtime, DriverError> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("nats-rt")
            .enable_all()
            .build()
            .map_err(|e| DriverError::io("start a tokio runtime for", broker, e))
    }

    fn open(d: &Nats, cfg: &Config, role: Role) -> Result<NatsEndpoint, DriverError> {
        // Host mode: the host's one connection to this server (host.rs); else a connection of its own.
        let (rt, client, link, hold) = match host::hold(d, cfg)? {
            Some((hold, sh)) => (
                sh.rt.clone(),
                sh.client.clone(),
                sh.link.clone(),
                Some(hold),
            ),
            None => {
                let rt = Arc::new(Self::runtime(&d.broker)?);
                let link = Arc::new(Link::new(d.opts.reconnect));
                let name = brokered::client_id("nats", cfg);
                let client = Self::connect(&rt, d, cfg, &name, link.clone())?;
                (rt, client, link, None)
            }
        };
        let stream = Subject::from(d.topic.as_str());
        let ping = Subject::from(format!("{}.ping", d.topic));
        let perr = |e: &dyn std::fmt::Display| protocol_error(&d.broker, e);
        let js_on = d.opts.jetstream;
        let (sub, subject, inbox) = match role {
            Role::Publisher => (None, stream, None),
            Role::Subscriber if js_on => {
                // Our own inbox first, then the consumer that delivers to it.
                let deliver = Subject::from(client.new_inbox());
                let s = rt
                    .block_on(client.subscribe(deliver.clone()))
                    .map_err(|e| perr(&e))?;
                js_setup_consumer(&rt, &client, d, cfg, &deliver)?;
                (Some(s), stream, None)
            }
            Role::Subscriber => (
                Some(
                    rt.block_on(client.subscribe(stream.clone()))
                        .map_err(|e| perr(&e))?,
                ),
                stream,
                None,
            ),
            Role::Responder => (
                Some(
                    rt.block_on(client.subscribe(ping.clone()))
                        .map_err(|e| perr(&e))?,
                ),
                ping,
                None,
            ),
            Role::Requester => {
                let inbox = Subject::from(client.new_inbox());
                let s = rt
                    .block_on(client.subscribe(inbox.clone()))
                    .map_err(|e| perr(&e))?;
                (Some(s), ping, Some(inbox))
            }
        };
        let js = if js_on && role == Role::Publisher {
            js_wait_for_stream(&rt, &client, d, cfg)?;
            let inbox = client.new_inbox();
            let acks = rt
                .block_on(client.subscribe(format!("{inbox}.*")))
                .map_err(|e| perr(&e))?;
            Some(JsPublisher {
                acks,
                inbox,
                id: brokered::client_id("nats", cfg),
                next: 0,
                unacked: HashMap::with_capacity(JS_WINDOW),
                order: VecDeque::with_capacity(JS_WINDOW),
                resent: 0,
                refused_acks: 0,
            })
        } else {
            None
        };
        let needs_round_trip = sub.is_some() || js.is_some();
        let e = NatsEndpoint {
            rt,
            client,
            sub,
            subject,
            inbox,
            last_reply: None,
            role,
            link,
            js,
            js_ack: js_on && role == Role::Subscriber,
            broker: d.broker.clone(),
            cfg: cfg.clone(),
            _hold: hold,
        };
        if needs_round_trip && !e.server_round_trip(until(cfg.give_up_ns()))? {
            return Err(DriverError::GaveUp {
                what: format!("nats-server {} confirming the subscription", d.broker),
                timeout_ms: cfg.timeout_ns / 1_000_000,
            });
        }
        Ok(e)
    }

    /// Whether a message sent to a fresh inbox of this client came back within `limit`:
    /// then the server has handled everything this client sent before it.
    fn server_round_trip(&self, limit: Duration) -> Result<bool, DriverError> {
        let perr = |e: &dyn std::fmt::Display| protocol_error(&self.broker, e);
        let inbox = Subject::from(self.client.new_inbox());
        let c = &self.client;
        self.rt.block_on(async {
            let mut back = c.subscribe(inbox.clone()).await.map_err(|e| perr(&e))?;
            c.publish(inbox, Bytes::new()).await.map_err(|e| perr(&e))?;
            c.flush().await.map_err(|e| perr(&e))?;
            let deadline = tokio::time::Instant::now() + limit;
            loop {
                // In slices, so that a signal ends the wait.
                let slice =
                    SLICE.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                match tokio::time::timeout(slice, back.next()).await {
                    Ok(Some(_)) => return Ok(true),
                    Ok(None) => {
                        return Err(perr(&"the connection closed while waiting for the server"))
                    }
                    Err(_) if stop_requested() => return Err(DriverError::Interrupted),
                    Err(_) if tokio::time::Instant::now() >= deadline => return Ok(false),
                    Err(_) => {}
                }
            }
        })
    }

    fn connect(
        rt: &tokio::runtime::Runtime,
        d: &Nats,
        cfg: &Config,
        name: &str,
        link: Arc<Link>,
    ) -> Result<Client, DriverError> {
        loop {
            let link = link.clone();
            let opts = ConnectOptions::new()
                .name(name)
                .subscription_capacity(SUBSCRIPTION_CAPACITY)
                // Subjects were checked once in from_config, not per publish.
                .skip_subject_validation(true)
                // One attempt may last until the run's timeout: the kernel retransmits lost
                // handshake segments by itself, and on a slow link (seconds each way) the
                // INFO/CONNECT exchange takes longer than any fixed bound; a new attempt would
                // only start it over.  A refused attempt returns at once and is retried.
                .connection_timeout(until(cfg.give_up_ns()).max(Duration::from_secs(1)))
                .reconnect_delay_callback(reconnect_delay)
                .event_callback(move |ev| {
                    let link = link.clone();
                    async move { link.event(&ev) }
                });
            let addr = format!("nats://{}", d.broker);
            match rt.block_on(opts.connect(addr.as_str())) {
                Ok(c) => return Ok(c),
                Err(e) => {
                    // Refused (not listening yet) or another I/O error: try again until the
                    // run's timeout (an attempt that timed out has reached it).  Anything else
                    // (a bad reply, authentication) is final.
                    let transient = matches!(
                        e.kind(),
                        async_nats::ConnectErrorKind::Io | async_nats::ConnectErrorKind::TimedOut
                    );
                    if stop_requested() {
                        return Err(DriverError::Interrupted);
                    }
                    if !transient {
                        return Err(protocol_error(
                            &d.broker,
                            format!("connecting to nats-server: {e}"),
                        ));
                    }
                    if now_ns() >= cfg.give_up_ns() {
                        return Err(DriverError::GaveUp {
                            what: format!("connecting to nats-server {} ({e})", d.broker),
                            timeout_ms: cfg.timeout_ns / 1_000_000,
                        });
                    }
                    tracing::warn!("nats: connecting to {}: {e}; trying again", d.broker);
                    std::thread::sleep(CONNECT_RETRY);
                }
            }
        }
    }

    fn check_connected(&self) -> Result<(), DriverError> {
        if self.link.is_lost() {
            return Err(protocol_error(
                &self.broker,
                "the connection to nats-server was lost",
            ));
        }
        Ok(())
    }

    /// Publish `msg` on `subject` (with `reply` as its reply subject).
    fn publish_to(
        &self,
        subject: &Subject,
        reply: Option<&Subject>,
        msg: &[u8],
    ) -> Result<(), DriverError> {
        self.check_connected()?;
        let send = |payload: Bytes| {
            let c = &self.client;
            let (s, r) = (subject.clone(), reply.cloned());
            async move {
                match r {
                    None => c.publish(s, payload).await,
                    Some(r) => c.publish_with_reply(s, r, payload).await,
                }
            }
        };
        // Fast path: room in the client's queue, no wait on the runtime.
        let res = match send(Bytes::copy_from_slice(msg)).now_or_never() {
            Some(r) => r,
            None => loop {
                check_send(&self.cfg, "publishing to nats-server")?;
                self.check_connected()?;
                let p = Bytes::copy_from_slice(msg);
                if let Ok(r) = self
                    .rt
                    .block_on(async { tokio::time::timeout(SLICE, send(p)).await })
                {
                    break r;
                }
            },
        };
        res.map_err(|e| protocol_error(&self.broker, e))
    }
}

impl NatsEndpoint {
    /// JetStream: publish one message (waiting while the window is full).
    fn js_publish(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        while self
            .js
            .as_ref()
            .is_some_and(|j| j.unacked.len() >= JS_WINDOW)
        {
            check_send(
                &self.cfg,
                "publishing to JetStream (the PubAck window stayed full)",
            )?;
            self.js_service(SLICE)?;
        }
        self.js_service(Duration::ZERO)?;
        let j = self.js.as_mut().expect("a JetStream publisher");
        let n = j.next;
        j.next += 1;
        let payload = Bytes::copy_from_slice(msg);
        j.unacked.insert(n, payload.clone());
        j.order.push_back((n, now_ns()));
        self.js_send(n, payload)
    }

    fn js_send(&self, n: u64, payload: Bytes) -> Result<(), DriverError> {
        let j = self.js.as_ref().expect("a JetStream publisher");
        let mut h = HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("{}-{n}", j.id));
        let reply = format!("{}.{n}", j.inbox);
        let c = &self.client;
        let subject = self.subject.clone();
        let send = || {
            c.publish_with_reply_and_headers(
                subject.clone(),
                reply.clone(),
                h.clone(),
                payload.clone(),
            )
        };
        let res = match send().now_or_never() {
            Some(r) => r,
            None => loop {
                check_send(&self.cfg, "publishing to JetStream")?;
                self.check_connected()?;
                if let Ok(r) = self
                    .rt
                    .block_on(async { tokio::time::timeout(SLICE, send()).await })
                {
                    break r;
                }
            },
        };
        res.map_err(|e| protocol_error(&self.broker, e))
    }

    /// JetStream: take the PubAcks that arrived (waiting up to `wait` for one when none
    /// has), and publish again what waited longer than JS_RESEND.
    fn js_service(&mut self, wait: Duration) -> Result<(), DriverError> {
        self.check_connected()?;
        let Some(j) = self.js.as_mut() else {
            return Ok(());
        };
        let mut first = true;
        loop {
            let m = match j.acks.next().now_or_never() {
                Some(m) => m,
                None if first && !wait.is_zero() => self
                    .rt
                    .block_on(async { tokio::time::timeout(wait, j.acks.next()).await })
                    .unwrap_or_default(),
                None => None,
            };
            first = false;
            let Some(m) = m else { break };
            let n = m
                .subject
                .rsplit('.')
                .next()
                .and_then(|x| x.parse::<u64>().ok());
            // A PubAck is {"stream":..,"seq":..}; an error reply has "error" (sent again later).
            let ok = !m.payload.is_empty()
                && serde_json::from_slice::<serde_json::Value>(&m.payload)
                    .is_ok_and(|v| v.get("error").is_none() && v.get("seq").is_some());
            match n {
                Some(n) if ok => {
                    j.unacked.remove(&n);
                }
                _ => {
                    j.refused_acks += 1;
                    tracing::debug!(
                        "nats: JetStream answered {}: {}",
                        m.subject,
                        String::from_utf8_lossy(&m.payload)
                    );
                }
            }
        }
        // Forget the acknowledged at the front; resend the overdue.
        let now = now_ns();
        let mut again = Vec::new();
        while let Some(&(n, at)) = j.order.front() {
            if !j.unacked.contains_key(&n) {
                j.order.pop_front();
                continue;
            }
            if now.saturating_sub(at) < JS_RESEND.as_nanos() as u64 {
                break;
            }
            j.order.pop_front();
            again.push(n);
        }
        for n in again {
            let j = self.js.as_mut().expect("a JetStream publisher");
            let Some(p) = j.unacked.get(&n).cloned() else {
                continue;
            };
            j.order.push_back((n, now_ns()));
            j.resent += 1;
            self.js_send(n, p)?;
        }
        Ok(())
    }

    fn js_results(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        if let Some(j) = &self.js {
            m.insert("js_resent".into(), j.resent.into());
            m.insert("js_unacked".into(), j.unacked.len().into());
        }
        m
    }
}

/// Send a JetStream API request (core request/reply) and return its JSON answer.
fn js_api(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    d: &Nats,
    subject: String,
    body: serde_json::Value,
) -> Result<serde_json::Value, DriverError> {
    let perr = |e: &dyn std::fmt::Display| protocol_error(&d.broker, e);
    let answer = rt
        .block_on(async {
            tokio::time::timeout(
                JS_API_WAIT,
                client.request(subject.clone(), Bytes::from(body.to_string())),
            )
            .await
        })
        .map_err(|_| perr(&format!("no answer to {subject} (is JetStream enabled?)")))?;
    let m = answer.map_err(|e| {
        perr(&format!(
            "{subject}: {e} (JetStream needs `jetstream = true` on the nats service)"
        ))
    })?;
    serde_json::from_slice(&m.payload).map_err(|e| perr(&format!("{subject}: bad answer: {e}")))
}

/// The receiver's side: the stream (created when missing) and a durable push consumer
/// delivering to `deliver`.
fn js_setup_consumer(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    d: &Nats,
    cfg: &Config,
    deliver: &Subject,
) -> Result<(), DriverError> {
    let name = js_stream_name(&d.topic);
    let created = js_api(
        rt,
        client,
        d,
        format!("$JS.API.STREAM.CREATE.{name}"),
        serde_json::json!({"name": name, "subjects": [d.topic], "storage": "file",
            "retention": "limits", "duplicate_window": 120_000_000_000u64}),
    )?;
    if let Some(e) = created.get("error") {
        // 10058: a stream of that name exists (another receiver made it): fine.
        if e.get("err_code").and_then(|c| c.as_u64()) != Some(10058) {
            return Err(protocol_error(
                &d.broker,
                format!("creating JetStream stream {name}: {e}"),
            ));
        }
    }
    let durable: String = brokered::client_id("nats-rx", cfg)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let consumer = js_api(
        rt,
        client,
        d,
        format!("$JS.API.CONSUMER.DURABLE.CREATE.{name}.{durable}"),
        serde_json::json!({"stream_name": name, "config": {
            "durable_name": durable, "deliver_subject": deliver.as_str(),
            "deliver_policy": "all", "ack_policy": "explicit", "ack_wait": JS_ACK_WAIT_NS,
            "max_ack_pending": 65_536, "replay_policy": "instant"}}),
    )?;
    if let Some(e) = consumer.get("error") {
        return Err(protocol_error(
            &d.broker,
            format!("creating JetStream consumer {durable} on {name}: {e}"),
        ));
    }
    tracing::debug!("nats: JetStream consumer {durable} on stream {name}");
    Ok(())
}

/// The sender's side: wait (until the run's timeout) for the receiver's stream.
fn js_wait_for_stream(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    d: &Nats,
    cfg: &Config,
) -> Result<(), DriverError> {
    let name = js_stream_name(&d.topic);
    loop {
        check_send(
            cfg,
            &format!("JetStream stream {name} (its receiver creates it)"),
        )?;
        let info = js_api(
            rt,
            client,
            d,
            format!("$JS.API.STREAM.INFO.{name}"),
            serde_json::json!({}),
        )?;
        if info.get("error").is_none() {
            return Ok(());
        }
        std::thread::sleep(CONNECT_RETRY);
    }
}

impl BrokerEndpoint for NatsEndpoint {
    fn publish(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        if self.js.is_some() {
            return self.js_publish(msg);
        }
        self.publish_to(&self.subject, None, msg)
    }

    /// A request names the requester's inbox as its reply subject.
    fn request(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        self.publish_to(&self.subject, self.inbox.as_ref(), msg)
    }

    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        match self.last_reply.clone() {
            Some(to) => self.publish_to(&to, None, msg),
            // A request without a reply subject (not from a requester): nothing to answer.
            None => Err(protocol_error(
                &self.broker,
                "a request without a reply subject",
            )),
        }
    }

    /// Next message on the subscription, or `None` at the deadline.
    fn next(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        let sub = self
            .sub
            .as_mut()
            .expect("receiving roles subscribe at open");
        let msg = match sub.next().now_or_never() {
            Some(m) => m,
            None => {
                let wait = until(deadline_ns);
                if wait.is_zero() {
                    return Ok(None);
                }
                match self
                    .rt
                    .block_on(async { tokio::time::timeout(wait, sub.next()).await })
                {
                    Ok(m) => m,
                    Err(_) => {
                        self.check_connected()?;
                        return Ok(None);
                    }
                }
            }
        };
        match msg {
            Some(m) if self.js_ack => {
                if m.status.is_some() && m.payload.is_empty() {
                    return Ok(None); // a JetStream status message (none are asked for)
                }
                let n = copy_into(buf, &m.payload)?;
                if let Some(reply) = m.reply {
                    self.publish_to(&reply, None, b"")?;
                }
                Ok(Some(n))
            }
            Some(m) => {
                if self.role == Role::Responder {
                    self.last_reply = m.reply;
                }
                copy_into(buf, &m.payload).map(Some)
            }
            None => Err(protocol_error(
                &self.broker,
                "the subscription ended (connection closed)",
            )),
        }
    }

    /// Send the end marker, flush it to the server, close.
    ///
    /// Core NATS delivers at most once: a subscriber that falls behind (a slow
    /// consumer) loses messages, the end marker included.  So the marker is sent
    /// END_COPIES times, END_GAP apart, as over UDP; receivers count it once.
    fn close(&mut self, end: &[u8]) -> Result<(), DriverError> {
        if self.js.is_some() {
            self.js_publish(end)?;
            while self.js.as_ref().is_some_and(|j| !j.unacked.is_empty()) {
                check_send(&self.cfg, "waiting for JetStream's PubAcks at the end")?;
                self.js_service(SLICE)?;
            }
            return Ok(());
        }
        const END_COPIES: usize = 5;
        const END_GAP: Duration = Duration::from_millis(10);
        let reply = self.inbox.clone();
        let subject = self.subject.clone();
        for i in 0..END_COPIES {
            if i > 0 {
                std::thread::sleep(END_GAP);
            }
            self.publish_to(&subject, reply.as_ref(), end)?;
        }
        // Until the server has all of it (core NATS has no acknowledgements), as long as
        // the run allows.
        let limit = until(self.cfg.give_up_ns()).max(Duration::from_millis(1));
        if self.server_round_trip(limit)? {
            Ok(())
        } else {
            Err(protocol_error(
                &self.broker,
                "the server did not confirm the last messages before the timeout",
            ))
        }
    }

    fn broker(&self) -> String {
        self.broker.clone()
    }

    fn sender_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = self.link.results();
        m.extend(self.js_results());
        m
    }

    fn receiver_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.link.results()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: serde_json::Value) -> Config {
        let mut v = serde_json::json!({"v":1,"role":"receiver","protocol":"nats","pattern":"stream",
            "broker":"127.0.0.1:4222","payload_bytes":64,"messages":10});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        Config::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn knobs_and_subjects_are_checked() {
        assert!(Nats::from_config(&cfg(serde_json::json!({"topic":"roughnet/0123"}))).is_ok());
        let e = Nats::from_config(&cfg(serde_json::json!({"options":{"qos":1}})))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("protocol nats") && e.contains("qos"), "{e}");
        let e = Nats::from_config(&cfg(serde_json::json!({"topic":"a b"})))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("NATS subject"), "{e}");
        let d = Nats::from_config(&cfg(serde_json::json!({"options":{"reconnect":true}}))).unwrap();
        assert!(d.opts.reconnect && !d.opts.jetstream);
        let js = serde_json::json!({"options":{"jetstream":true}});
        assert!(Nats::from_config(&cfg(js.clone())).unwrap().opts.jetstream);
        let mut ping = js;
        ping["pattern"] = "ping".into();
        ping["role"] = "ponger".into();
        let e = Nats::from_config(&cfg(ping)).err().unwrap().to_string();
        assert!(
            e.contains("options.jetstream") && e.contains("pattern ping"),
            "{e}"
        );
        assert_eq!(js_stream_name("roughnet/0123.a b"), "RN_roughnet_0123_a_b");
        assert!(
            !Nats::from_config(&cfg(serde_json::json!({})))
                .unwrap()
                .opts
                .reconnect
        );
    }

    #[test]
    fn reconnects_are_counted_with_the_knob() {
        assert_eq!(reconnect_delay(1), RECONNECT_FIRST);
        assert_eq!(reconnect_delay(2), RECONNECT_FIRST * 2);
        assert_eq!(reconnect_delay(100), RECONNECT_MAX);
        // Without the knob a disconnect is the end, and nothing extra is reported.
        let off = Link::default();
        off.event(&async_nats::Event::Disconnected);
        assert!(off.lost.load(Ordering::Acquire) && off.results().is_empty());
        let on = Link {
            reconnect: true,
            ..Link::default()
        };
        on.event(&async_nats::Event::Connected); // the first connection is no reconnect
        on.event(&async_nats::Event::Disconnected);
        assert!(!on.lost.load(Ordering::Acquire));
        std::thread::sleep(Duration::from_millis(20));
        assert!(on.results()["disconnected_s"].as_f64().unwrap() >= 0.02); // still down
        on.event(&async_nats::Event::Connected);
        let r = on.results();
        assert_eq!(r["reconnects"], 1);
        assert!(r["disconnected_s"].as_f64().unwrap() >= 0.02, "{r:?}");
        on.event(&async_nats::Event::Closed);
        assert!(on.lost.load(Ordering::Acquire));
    }
}
