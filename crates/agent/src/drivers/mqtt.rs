//! The `mqtt` driver: MQTT 3.1.1 and 5 through a broker (mosquitto), with the
//! `rumqttc` client.
//!
//! Each endpoint owns one rumqttc `Client` and a thread that drives its
//! `Connection` (rumqttc runs its own tokio runtime inside it) for the whole run;
//! the thread hands incoming publications and acknowledgement counts to the
//! blocking endpoint through a bounded channel, so a slow receiver holds back the
//! socket (TCP back-pressure) instead of growing a queue.  The connection is never
//! polled with a timeout: cancelling rumqttc's poll in mid-write can drop a packet.
//!
//! Topics: stream and bulk publish on `<topic>`; ping and ramp send requests on
//! `<topic>/ping` and replies on `<topic>/pong`.  Receivers are ready after the
//! broker's SUBACK.  Knobs: `version`, `qos`, `clean_session`, `keep_alive`,
//! `inflight`, `tls` (+ `tls_ca`, the CA certificate the runner passes), `reconnect`.
//!
//! A lost connection ends the run with an error, unless `reconnect` is on: then,
//! once the endpoint is open, the connection thread keeps polling after an error
//! (rumqttc connects again on the next poll) with a backoff of 100 ms doubling up
//! to 1 s.  A reconnect that starts a new session (CONNACK without session present:
//! clean session, or a broker that lost its state) subscribes again, and the
//! publications rumqttc held for the old session are dropped (counted as
//! `abandoned`); a resumed session gets them again.  While disconnected `send`
//! blocks (rumqttc's request queue fills) until the run's give-up time.  Senders
//! and receivers report `reconnects`, `disconnected_s` and `abandoned`.
//!
//! The publisher's window never exceeds what the broker accepts.  A broker holds
//! each incoming QoS 2 message until its PUBREL and refuses more than its receive
//! maximum (mosquitto: `max_inflight_messages`) with a PUBREC whose reason code
//! only MQTT 5 carries: a 3.1.1 client takes it for success and the message is
//! lost (issue 5, docs/protocols.md).  MQTT 5 clients learn the limit from the
//! CONNACK (rumqttc obeys it); a 3.1.1 endpoint that publishes at QoS 2 asks for
//! it first with a short MQTT 5 connection ([`broker_receive_maximum`]).

use bytes::Bytes;
use serde::Deserialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{
    sync_channel, Receiver as ChanRx, RecvTimeoutError, SyncSender, TryRecvError,
};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rumqttc::v5 as m5;

mod client;
mod host;

use client::{
    broker_receive_maximum, client_v4, pump_v4, pump_v5, tls_transport, Client, Counters, Event,
};
pub use host::{host_plan, install_host_clients, HostClient};

use super::brokered::{self, check_send, copy_into, protocol_error, until, BrokerEndpoint};
use super::{Driver, DriverError, Receiver, Requester, Responder, Sender};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, MAX_MESSAGE_BYTES};
use crate::signals::stop_requested;

const KNOBS: [&str; 9] = [
    "nodelay",
    "version",
    "qos",
    "clean_session",
    "keep_alive",
    "inflight",
    "tls",
    "tls_ca",
    "reconnect",
];
/// Requests the client queues before `send` waits (rumqttc's request channel).
const REQUEST_CAPACITY: usize = 64;
/// Events the connection thread may hold for a receiver that is busy.
const EVENT_CAPACITY: usize = 1024;
/// Pause between attempts while the request queue is full or the broker refuses.
const RETRY: Duration = Duration::from_micros(200);
const CONNECT_RETRY: Duration = Duration::from_millis(50);
/// rumqttc gives up on a connect or a flush after this (its default is 5 s, too
/// short for a large message on a slow, lossy link), with `reconnect` (a broker that
/// stopped answering is then noticed after this long, and reconnected to).
const NETWORK_TIMEOUT_S: u64 = 30;
/// The same without `reconnect`, where giving up ends the run: TCP itself keeps
/// retransmitting far longer, and at 25 % loss a run of lost retransmissions can stall a
/// flush for over 30 s (backoff 0.2 + 0.4 + ... + 12.8 s); the run's own timeout bounds it.
const NETWORK_TIMEOUT_NO_RECONNECT_S: u64 = 180;

/// rumqttc's connect and flush timeout for these options.
fn network_timeout_s(opts: &MqttOptions) -> u64 {
    if opts.reconnect {
        NETWORK_TIMEOUT_S
    } else {
        NETWORK_TIMEOUT_NO_RECONNECT_S
    }
}
/// Copies of the end marker at QoS 0 (a broker may drop QoS 0 under load).
const END_COPIES_QOS0: usize = 3;
/// How long `finish` waits for the broker to acknowledge what is in flight.
const FINISH_WAIT_NS: u64 = 10_000_000_000;
/// Receive maximum of an MQTT 5 CONNACK that names none (MQTT 5, 3.2.2.3.3).
const DEFAULT_RECEIVE_MAXIMUM: u16 = 65_535;
/// With `reconnect`: the first pause after a connection error, doubled per failed attempt up to
/// [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

fn default_version() -> String {
    "3.1.1".into()
}
fn yes() -> bool {
    true
}
fn default_keep_alive() -> u64 {
    30_000_000_000
}
fn default_inflight() -> u32 {
    100
}

/// Knobs (docs/protocols.md); durations in ns.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttOptions {
    #[serde(default = "default_version")]
    pub version: String,
    #[serde(default)]
    pub qos: u8,
    #[serde(default = "yes")]
    pub clean_session: bool,
    #[serde(default = "default_keep_alive")]
    pub keep_alive: u64,
    #[serde(default = "default_inflight")]
    pub inflight: u32,
    #[serde(default)]
    pub tls: bool,
    pub tls_ca: Option<String>,
    /// Survive a lost connection: reconnect (and subscribe again) instead of ending the run.
    #[serde(default)]
    pub reconnect: bool,
    /// TCP_NODELAY on the client's connection (Nagle off); rumqttc's default is false (Nagle on).
    #[serde(default)]
    pub nodelay: bool,
}

pub struct Mqtt {
    opts: MqttOptions,
    v5: bool,
    host: String,
    port: u16,
    topic: String,
}

impl Mqtt {
    pub fn from_config(cfg: &Config) -> Result<Mqtt, ConfigError> {
        let opts: MqttOptions = brokered::parse_options(cfg, "mqtt", &KNOBS)?;
        let v5 = match opts.version.as_str() {
            "3.1.1" => false,
            "5" | "5.0" => true,
            other => {
                return Err(ConfigError::invalid(
                    "options.version",
                    format!("{other:?}"),
                    "\"3.1.1\" or \"5\"",
                ))
            }
        };
        if opts.qos > 2 {
            return Err(ConfigError::invalid("options.qos", opts.qos, "0, 1 or 2"));
        }
        let ka = opts.keep_alive;
        if ka != 0 && (!ka.is_multiple_of(1_000_000_000) || ka > 65_535_000_000_000) {
            return Err(ConfigError::invalid(
                "options.keep_alive",
                format!("{ka} ns"),
                "0 (off) or a whole number of seconds from 1 s to 65535 s (MQTT counts seconds)",
            ));
        }
        if !(1..=65_535).contains(&opts.inflight) {
            return Err(ConfigError::invalid(
                "options.inflight",
                opts.inflight,
                "between 1 and 65535 messages",
            ));
        }
        match (opts.tls, &opts.tls_ca) {
            (true, None) => {
                return Err(ConfigError::Missing {
                    key: "options.tls_ca",
                    when: "when options.tls is true (path of the CA certificate, PEM)".into(),
                })
            }
            (false, Some(p)) => {
                return Err(ConfigError::invalid(
                    "options.tls_ca",
                    format!("{p:?}"),
                    "no tls_ca unless options.tls is true",
                ))
            }
            _ => {}
        }
        let (host, port) = brokered::broker_addr(cfg, "mqtt")?;
        Ok(Mqtt {
            opts,
            v5,
            host,
            port,
            topic: brokered::topic(cfg),
        })
    }

    fn open(
        &self,
        cfg: &Config,
        subscribe: Option<String>,
        publish: Option<String>,
    ) -> Result<Box<MqttEndpoint>, DriverError> {
        MqttEndpoint::open(self, cfg, subscribe, publish).map(Box::new)
    }
}

impl Driver for Mqtt {
    fn name(&self) -> &'static str {
        "mqtt"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_MESSAGE_BYTES as usize
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        Ok(self.open(cfg, None, Some(self.topic.clone()))?)
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        Ok(self.open(cfg, Some(self.topic.clone()), None)?)
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        let (ping, pong) = (
            format!("{}/ping", self.topic),
            format!("{}/pong", self.topic),
        );
        Ok(self.open(cfg, Some(pong), Some(ping))?)
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        let (ping, pong) = (
            format!("{}/ping", self.topic),
            format!("{}/pong", self.topic),
        );
        Ok(self.open(cfg, Some(ping), Some(pong))?)
    }
}

/// One MQTT client: every role (sender, receiver, pinger, ponger) is this.
pub struct MqttEndpoint {
    /// None on the host's shared client (`hold`).
    client: Option<Client>,
    events: ChanRx<Event>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
    /// Host mode: this flow's hold on the host's client (host.rs).
    hold: Option<host::Hold>,
    publish_topic: String,
    qos: u8,
    published: u64,
    /// The `reconnect` knob: report reconnects and disconnected time.
    reconnect: bool,
    broker: String,
    cfg: Config,
}

impl MqttEndpoint {
    fn open(
        d: &Mqtt,
        cfg: &Config,
        subscribe: Option<String>,
        publish: Option<String>,
    ) -> Result<MqttEndpoint, DriverError> {
        let broker = format!("{}:{}", d.host, d.port);
        if let Some(hold) = host::hold(d, cfg)? {
            return Self::open_shared(d, cfg, hold, subscribe, publish);
        }
        let transport = match &d.opts.tls_ca {
            Some(p) if d.opts.tls => Some(tls_transport(p)?),
            _ => None,
        };
        let id = brokered::client_id("mqtt", cfg);
        // A 3.1.1 QoS 2 publisher keeps its window within the broker's receive
        // maximum (module docs); MQTT 5 clients get it from their own CONNACK.
        let mut inflight = d.opts.inflight;
        if publish.is_some() && !d.v5 && d.opts.qos == 2 {
            if let Some(n) = broker_receive_maximum(d, cfg, &id, transport.clone(), &broker) {
                if u32::from(n) < inflight {
                    tracing::info!(
                        "mqtt: QoS 2 window {n} (the receive maximum of {broker}) instead of \
                         options.inflight {inflight}"
                    );
                    inflight = u32::from(n);
                }
            }
        }
        let publish_topic = publish.unwrap_or_default();
        // Connect, retrying while the broker is not listening yet.
        let mut ep = loop {
            let ep = Self::connect(
                d,
                cfg,
                &id,
                transport.clone(),
                publish_topic.clone(),
                subscribe.clone(),
                inflight,
            )?;
            match ep.wait_for(cfg, "the CONNACK of the MQTT broker", |e| match e {
                Event::ConnAck(r) => Some(r),
                _ => None,
            }) {
                Ok(()) => break ep,
                Err(Retry::Refused(_)) if now_ns() < cfg.give_up_ns() => {
                    drop(ep);
                    std::thread::sleep(CONNECT_RETRY);
                }
                Err(r) => return Err(r.into_error(&broker, cfg)),
            }
        };
        if let Some(t) = subscribe {
            ep.client
                .as_ref()
                .expect("an own client")
                .subscribe(&t, d.opts.qos)
                .map_err(|e| protocol_error(&broker, e))?;
            ep.wait_for(cfg, "the SUBACK of the MQTT broker", |e| match e {
                Event::SubAck(r) => Some(r),
                _ => None,
            })
            .map_err(|r| r.into_error(&broker, cfg))?;
            tracing::debug!("mqtt: subscribed to {t} at {broker}");
        }
        ep.qos = d.opts.qos;
        ep.reconnect = d.opts.reconnect;
        // From here on a lost connection is survived (module docs).
        ep.counters
            .resilient
            .store(d.opts.reconnect, Ordering::Release);
        Ok(ep)
    }

    /// A flow on the host's shared client (host.rs): its own events and counters, the
    /// connection's subscription routed to it.
    fn open_shared(
        d: &Mqtt,
        cfg: &Config,
        mut hold: host::Hold,
        subscribe: Option<String>,
        publish: Option<String>,
    ) -> Result<MqttEndpoint, DriverError> {
        let broker = format!("{}:{}", d.host, d.port);
        let (tx, rx) = sync_channel(EVENT_CAPACITY);
        if let Some(t) = &subscribe {
            hold.subscribe(t, d.opts.qos, &tx, cfg)?;
        }
        drop(tx); // the connection holds the route's copy: its end closes the channel
        let ep = MqttEndpoint {
            client: None,
            events: rx,
            counters: Arc::new(Counters::default()),
            thread: None,
            hold: Some(hold),
            publish_topic: publish.unwrap_or_default(),
            qos: d.opts.qos,
            published: 0,
            reconnect: false,
            broker: broker.clone(),
            cfg: cfg.clone(),
        };
        if let Some(t) = subscribe {
            ep.wait_for(cfg, "the SUBACK of the MQTT broker", |e| match e {
                Event::SubAck(r) => Some(r),
                _ => None,
            })
            .map_err(|r| r.into_error(&broker, cfg))?;
            tracing::debug!("mqtt: subscribed to {t} at {broker} (the host's client)");
        }
        Ok(ep)
    }

    fn connect(
        d: &Mqtt,
        cfg: &Config,
        id: &str,
        transport: Option<rumqttc::Transport>,
        publish_topic: String,
        subscribe: Option<String>,
        inflight: u32,
    ) -> Result<MqttEndpoint, DriverError> {
        let broker = &format!("{}:{}", d.host, d.port);
        let subscription = subscribe.map(|t| (t, d.opts.qos));
        let max_packet = MAX_MESSAGE_BYTES as usize + 64 * 1024;
        let keep_alive = Duration::from_nanos(d.opts.keep_alive);
        let counters = Arc::new(Counters::default());
        let (tx, rx) = sync_channel(EVENT_CAPACITY);
        let n = counters.clone();
        let (client, thread) = if d.v5 {
            let mut o = m5::MqttOptions::new(id, d.host.clone(), d.port);
            o.set_keep_alive(keep_alive)
                .set_clean_start(d.opts.clean_session)
                .set_max_packet_size(Some(max_packet as u32))
                .set_outgoing_inflight_upper_limit(inflight as u16)
                .set_request_channel_capacity(REQUEST_CAPACITY);
            if !d.opts.clean_session {
                // MQTT 5 ends a session at disconnect unless it has an expiry.
                o.set_session_expiry_interval(Some(3600));
            }
            let mut net = rumqttc::NetworkOptions::new();
            net.set_connection_timeout(network_timeout_s(&d.opts));
            net.set_tcp_nodelay(d.opts.nodelay);
            o.set_network_options(net);
            if let Some(t) = transport {
                o.set_transport(t);
            }
            let (c, conn) = m5::Client::new(o, REQUEST_CAPACITY);
            let th = std::thread::Builder::new()
                .name("mqtt-conn".into())
                .spawn(move || pump_v5(conn, tx, n, subscription))
                .map_err(|e| DriverError::io("spawn the MQTT connection thread for", broker, e))?;
            (Client::V5(c), th)
        } else {
            let (c, conn) = client_v4(d, id, inflight, transport);
            let th = std::thread::Builder::new()
                .name("mqtt-conn".into())
                .spawn(move || pump_v4(conn, tx, n, subscription))
                .map_err(|e| DriverError::io("spawn the MQTT connection thread for", broker, e))?;
            (Client::V4(c), th)
        };
        Ok(MqttEndpoint {
            client: Some(client),
            events: rx,
            counters,
            thread: Some(thread),
            hold: None,
            publish_topic,
            qos: 0,
            published: 0,
            reconnect: false,
            broker: broker.to_string(),
            cfg: cfg.clone(),
        })
    }

    /// Wait (until the run's timeout) for the event `pick` accepts.
    fn wait_for(
        &self,
        cfg: &Config,
        what: &str,
        pick: impl Fn(Event) -> Option<Result<(), String>>,
    ) -> Result<(), Retry> {
        loop {
            if stop_requested() {
                return Err(Retry::Fatal(DriverError::Interrupted));
            }
            let left = cfg.give_up_ns().saturating_sub(now_ns());
            if left == 0 {
                return Err(Retry::Fatal(DriverError::GaveUp {
                    what: format!("{what} from {}", self.broker),
                    timeout_ms: cfg.timeout_ns / 1_000_000,
                }));
            }
            match self
                .events
                .recv_timeout(Duration::from_nanos(left.min(50_000_000)))
            {
                Ok(Event::Ended {
                    error,
                    refused: true,
                }) => return Err(Retry::Refused(error)),
                Ok(Event::Ended { error, .. }) => {
                    return Err(Retry::Fatal(protocol_error(&self.broker, error)))
                }
                Ok(e) => match pick(e) {
                    Some(Ok(())) => return Ok(()),
                    Some(Err(m)) => return Err(Retry::Fatal(protocol_error(&self.broker, m))),
                    None => {}
                },
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) if self.hold.is_some() => {
                    return Err(Retry::Fatal(self.ended_error()))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Retry::Fatal(protocol_error(
                        &self.broker,
                        "the MQTT connection thread ended",
                    )))
                }
            }
        }
    }

    /// Whether the connection (own or shared) has ended.
    fn connection_over(&self) -> bool {
        match &self.hold {
            Some(h) => h.conn.ended().is_some(),
            None => self.thread.as_ref().is_none_or(|t| t.is_finished()),
        }
    }

    /// The connection's error, for a channel that closed.
    fn ended_error(&self) -> DriverError {
        let m = self.hold.as_ref().and_then(|h| h.conn.ended());
        protocol_error(
            &self.broker,
            m.unwrap_or_else(|| "the MQTT connection ended".into()),
        )
    }

    /// Fail if the connection has ended (events other than an end are not expected here).
    fn check_alive(&self) -> Result<(), DriverError> {
        loop {
            match self.events.try_recv() {
                Ok(Event::Ended { error, .. }) => return Err(protocol_error(&self.broker, error)),
                Ok(_) => {}
                Err(TryRecvError::Empty) if self.hold.is_some() && self.connection_over() => {
                    return Err(self.ended_error())
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(self.ended_error()),
            }
        }
    }

    /// With `reconnect`: `reconnects`, `disconnected_s`, `abandoned`.
    fn reconnect_results(&self) -> serde_json::Map<String, serde_json::Value> {
        if self.reconnect {
            self.counters.reconnect_results()
        } else {
            serde_json::Map::new()
        }
    }

    fn shutdown(&mut self) {
        self.counters.closing.store(true, Ordering::Release);
        // On the host's client: the flow's route goes, the last flow disconnects.
        drop(self.hold.take());
        if let Some(c) = &self.client {
            c.disconnect();
        }
        if let Some(t) = self.thread.take() {
            let limit = now_ns() + 1_000_000_000;
            while !t.is_finished() && now_ns() < limit {
                // The thread may be blocked handing us an event: make room.
                let _ = self.events.try_recv();
                std::thread::sleep(Duration::from_millis(1));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// Why waiting for the broker failed: worth retrying (not listening yet) or not.
enum Retry {
    Refused(String),
    Fatal(DriverError),
}

impl Retry {
    fn into_error(self, broker: &str, cfg: &Config) -> DriverError {
        match self {
            Retry::Fatal(e) => e,
            Retry::Refused(m) => DriverError::GaveUp {
                what: format!("connecting to the MQTT broker {broker} ({m})"),
                timeout_ms: cfg.timeout_ns / 1_000_000,
            },
        }
    }
}

impl Drop for MqttEndpoint {
    fn drop(&mut self) {
        if self.thread.is_some() || self.hold.is_some() {
            self.shutdown();
        }
    }
}

impl BrokerEndpoint for MqttEndpoint {
    /// Queue one publication, waiting while rumqttc's request queue is full.
    fn publish(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        loop {
            let queued = match (&self.hold, &self.client) {
                (Some(h), _) => {
                    h.conn
                        .try_publish(&self.publish_topic, self.qos, msg, &self.counters)
                }
                (None, Some(c)) => c.try_publish(&self.publish_topic, self.qos, msg),
                (None, None) => false,
            };
            if queued {
                break;
            }
            if self.connection_over() {
                self.check_alive()?;
                return Err(self.ended_error());
            }
            check_send(&self.cfg, "publishing to the MQTT broker")?;
            std::thread::sleep(RETRY);
        }
        self.published += 1;
        Ok(())
    }

    /// Next incoming publication, or `None` at the deadline.
    fn next(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        loop {
            match self.events.recv_timeout(until(deadline_ns)) {
                Ok(Event::Message(b)) => return copy_into(buf, &b).map(Some),
                Ok(Event::Ended { error, .. }) => return Err(protocol_error(&self.broker, error)),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => return Err(self.ended_error()),
            }
        }
    }

    /// Send the end marker, wait until everything is written (QoS 0) or
    /// acknowledged (QoS 1, 2), then disconnect.
    fn close(&mut self, end: &[u8]) -> Result<(), DriverError> {
        let copies = if self.qos == 0 { END_COPIES_QOS0 } else { 1 };
        for _ in 0..copies {
            self.publish(end)?;
        }
        // Reliable QoS waits for its acknowledgements as long as the run allows: over a lossy
        // link a large message's PUBACK can take longer than a fixed wait (a 64 KB message
        // at 10 % drop was acknowledged after more than 10 s), and leaving then loses it.
        let limit = if self.qos == 0 {
            (now_ns() + FINISH_WAIT_NS).min(self.cfg.give_up_ns())
        } else {
            self.cfg.give_up_ns()
        };
        let done = |n: &Counters| {
            n.abandoned.load(Ordering::Acquire)
                + if self.qos == 0 {
                    n.written.load(Ordering::Acquire)
                } else {
                    n.completed.load(Ordering::Acquire) + n.refused.load(Ordering::Acquire)
                }
        };
        while done(&self.counters) < self.published {
            if stop_requested() || now_ns() >= limit || self.connection_over() {
                tracing::warn!(
                    "mqtt: {} of {} publications unacknowledged at close",
                    self.published - done(&self.counters),
                    self.published
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.shutdown();
        Ok(())
    }

    fn broker(&self) -> String {
        self.broker.clone()
    }

    fn sender_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.reconnect_results()
    }

    fn receiver_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.reconnect_results()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(options: serde_json::Value) -> Config {
        let v = serde_json::json!({"v":1,"role":"sender","protocol":"mqtt","pattern":"stream",
            "broker":"127.0.0.1:1883","payload_bytes":64,"messages":10,"options":options});
        Config::parse(&v.to_string()).unwrap()
    }

    fn err(options: serde_json::Value) -> String {
        match Mqtt::from_config(&cfg(options)) {
            Ok(_) => panic!("accepted a bad configuration"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn knobs_are_checked() {
        let d = Mqtt::from_config(&cfg(
            serde_json::json!({"version":"5","qos":2,"inflight":10}),
        ))
        .unwrap();
        assert!(d.v5 && d.opts.qos == 2 && d.opts.clean_session);
        assert_eq!(d.topic, brokered::DEFAULT_TOPIC);
        assert!(err(serde_json::json!({"qos":3})).contains("options.qos"));
        assert!(err(serde_json::json!({"version":"4"})).contains("\"3.1.1\" or \"5\""));
        assert!(err(serde_json::json!({"keep_alive":1_500_000_000u64}))
            .contains("whole number of seconds"));
        assert!(err(serde_json::json!({"inflight":0})).contains("options.inflight"));
        assert!(err(serde_json::json!({"tls":true})).contains("options.tls_ca"));
        assert!(!d.opts.reconnect);
        let d = Mqtt::from_config(&cfg(serde_json::json!({"reconnect":true}))).unwrap();
        assert!(d.opts.reconnect);
        assert!(err(serde_json::json!({"reconnect":"yes"})).contains("invalid type"));
        let e = err(serde_json::json!({"acks":"all"}));
        assert!(
            e.contains("protocol mqtt") && e.contains("acks") && e.contains("reconnect"),
            "{e}"
        );
    }

    #[test]
    fn reconnects_are_counted_only_once_open_with_the_knob() {
        let n = Counters::default();
        let mut backoff = RECONNECT_FIRST;
        // Before the endpoint is open (or without the knob) an error ends the connection.
        assert!(!n.survive("refused", 0, &mut backoff));
        n.resilient.store(true, Ordering::Release);
        // Each failed attempt doubles the pause, up to the cap.
        assert!(n.survive("reset", 3, &mut backoff));
        assert_eq!(backoff, RECONNECT_FIRST * 2);
        for _ in 0..5 {
            backoff = (backoff * 2).min(RECONNECT_MAX);
        }
        assert_eq!(backoff, RECONNECT_MAX);
        assert!(n.down_since.load(Ordering::Acquire) > 0);
        // A new session: resubscribe, and the 3 pending publications are gone.
        assert!(n.reconnected(false, &mut backoff));
        assert_eq!(backoff, RECONNECT_FIRST);
        let r = n.reconnect_results();
        assert_eq!(r["reconnects"], 1);
        assert_eq!(r["abandoned"], 3);
        assert!(r["disconnected_s"].as_f64().unwrap() >= 0.09, "{r:?}");
        // A resumed session keeps them; a CONNACK while connected is no reconnect.
        assert!(n.survive("reset", 2, &mut backoff));
        assert!(!n.reconnected(true, &mut backoff));
        assert!(!n.reconnected(true, &mut backoff));
        let r = n.reconnect_results();
        assert_eq!(
            (r["reconnects"].as_u64(), r["abandoned"].as_u64()),
            (Some(2), Some(3))
        );
        // Closing: the next error ends the connection thread.
        n.closing.store(true, Ordering::Release);
        assert!(!n.survive("reset", 0, &mut backoff));
    }
}
