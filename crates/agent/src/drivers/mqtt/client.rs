//! The MQTT connection under an endpoint: rumqttc's client and event loop (3.1.1 and 5), the thread that
//! pumps it and tells the endpoint what happened (`Event`), what was written and acknowledged
//! (`Counters`), TLS, and probing a broker's receive maximum.

use super::*;

/// What the connection thread tells the endpoint.
pub(super) enum Event {
    ConnAck(Result<(), String>),
    SubAck(Result<(), String>),
    Message(Bytes),
    /// The connection ended; `refused` when the broker was not listening (retry).
    Ended {
        error: String,
        refused: bool,
    },
}

/// Publications written to the socket, acknowledged (QoS 1: PUBACK, 2: PUBCOMP),
/// and refused by the broker (MQTT 5 only: a PUBACK or PUBREC with a failure
/// reason code; such a publication is never completed).
///
/// With `reconnect`, also what the connection thread learns across reconnects.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) written: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) refused: AtomicU64,
    /// Publications rumqttc held for a session the broker no longer had (dropped at the
    /// reconnect: never acknowledged, never sent again).
    pub(super) abandoned: AtomicU64,
    /// Set once the endpoint is open with `reconnect`: from then on connection errors are
    /// survived (module docs).
    pub(super) resilient: AtomicBool,
    /// Set when the endpoint closes: the next error ends the connection thread.
    pub(super) closing: AtomicBool,
    pub(super) reconnects: AtomicU64,
    /// Time spent disconnected in finished outages, and the start of the current one (0: none).
    pub(super) down_ns: AtomicU64,
    pub(super) down_since: AtomicU64,
    /// Publications in rumqttc's pending queue at the last error (dropped at a new session).
    pub(super) pending_publishes: AtomicU64,
}

impl Counters {
    /// After a connection error: true to keep polling (reconnect), false to end.
    pub(super) fn survive(
        &self,
        error: &str,
        pending_publishes: usize,
        backoff: &mut Duration,
    ) -> bool {
        if !self.resilient.load(Ordering::Acquire) || self.closing.load(Ordering::Acquire) {
            return false;
        }
        let now = now_ns().max(1);
        if self
            .down_since
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!("mqtt: connection lost ({error}); reconnecting");
        } else {
            tracing::debug!("mqtt: reconnecting failed ({error})");
        }
        self.pending_publishes
            .store(pending_publishes as u64, Ordering::Release);
        // In slices, so that closing ends the wait.
        let until = now_ns() + backoff.as_nanos() as u64;
        while now_ns() < until && !self.closing.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20).min(*backoff));
        }
        *backoff = (*backoff * 2).min(RECONNECT_MAX);
        true
    }

    /// A CONNACK after a lost connection: count the outage; true when the session is new
    /// (the broker forgot the subscription and rumqttc dropped its pending publications).
    pub(super) fn reconnected(&self, session_present: bool, backoff: &mut Duration) -> bool {
        *backoff = RECONNECT_FIRST;
        let since = self.down_since.swap(0, Ordering::AcqRel);
        if since == 0 {
            return false;
        }
        let down = now_ns().saturating_sub(since);
        self.down_ns.fetch_add(down, Ordering::AcqRel);
        self.reconnects.fetch_add(1, Ordering::AcqRel);
        let dropped = if session_present {
            0
        } else {
            self.pending_publishes.swap(0, Ordering::AcqRel)
        };
        self.abandoned.fetch_add(dropped, Ordering::AcqRel);
        tracing::warn!(
            "mqtt: reconnected after {:.3} s ({} session{})",
            down as f64 / 1e9,
            if session_present { "resumed" } else { "new" },
            if dropped > 0 {
                format!(", {dropped} pending publications dropped")
            } else {
                String::new()
            }
        );
        !session_present
    }

    /// `reconnects`, `disconnected_s` (the current outage included) and `abandoned`.
    pub(super) fn reconnect_results(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = brokered::outage_results(
            self.reconnects.load(Ordering::Acquire),
            self.down_ns.load(Ordering::Acquire),
            self.down_since.load(Ordering::Acquire),
        );
        m.insert(
            "abandoned".into(),
            self.abandoned.load(Ordering::Acquire).into(),
        );
        m
    }
}

pub(super) enum Client {
    V4(rumqttc::Client),
    V5(m5::Client),
}

impl Client {
    pub(super) fn try_publish(&self, topic: &str, qos: u8, msg: &[u8]) -> bool {
        match self {
            Client::V4(c) => c.try_publish(topic, qos4(qos), false, msg.to_vec()).is_ok(),
            Client::V5(c) => c
                .try_publish(topic, qos5(qos), false, Bytes::copy_from_slice(msg))
                .is_ok(),
        }
    }

    pub(super) fn subscribe(&self, topic: &str, qos: u8) -> Result<(), String> {
        match self {
            Client::V4(c) => c.subscribe(topic, qos4(qos)).map_err(|e| e.to_string()),
            Client::V5(c) => c.subscribe(topic, qos5(qos)).map_err(|e| e.to_string()),
        }
    }

    pub(super) fn disconnect(&self) {
        let _ = match self {
            Client::V4(c) => c.disconnect().map_err(|e| e.to_string()),
            Client::V5(c) => c.disconnect().map_err(|e| e.to_string()),
        };
    }
}

pub(super) fn qos4(q: u8) -> rumqttc::QoS {
    match q {
        0 => rumqttc::QoS::AtMostOnce,
        1 => rumqttc::QoS::AtLeastOnce,
        _ => rumqttc::QoS::ExactlyOnce,
    }
}

fn qos5(q: u8) -> m5::mqttbytes::QoS {
    match q {
        0 => m5::mqttbytes::QoS::AtMostOnce,
        1 => m5::mqttbytes::QoS::AtLeastOnce,
        _ => m5::mqttbytes::QoS::ExactlyOnce,
    }
}

pub(super) fn tls_transport(ca_path: &str) -> Result<rumqttc::Transport, DriverError> {
    // rumqttc builds its rustls config with the process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = std::fs::read(ca_path)
        .map_err(|e| DriverError::io("read the MQTT TLS CA file", ca_path, e))?;
    Ok(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Simple {
            ca,
            alpn: None,
            client_auth: None,
        },
    ))
}

/// Drive a 3.1.1 connection until it ends; report what the endpoint needs.  `subscription`:
/// what to subscribe to again after a reconnect that starts a new session.
pub(super) fn pump_v4(
    mut conn: rumqttc::Connection,
    tx: SyncSender<Event>,
    n: Arc<Counters>,
    subscription: Option<(String, u8)>,
) {
    use rumqttc::{ConnectReturnCode, Event as E, Outgoing, Packet, Request, SubscribeReasonCode};
    let mut backoff = RECONNECT_FIRST;
    while let Ok(ev) = conn.recv() {
        let out = match ev {
            Ok(E::Incoming(Packet::Publish(p))) => Event::Message(p.payload),
            Ok(E::Incoming(Packet::ConnAck(a))) if n.resilient.load(Ordering::Acquire) => {
                if n.reconnected(a.session_present, &mut backoff) {
                    if let Some((t, q)) = &subscription {
                        let s = rumqttc::Subscribe::new(t.clone(), qos4(*q));
                        conn.eventloop.pending.push_front(Request::Subscribe(s));
                    }
                }
                continue;
            }
            Ok(E::Incoming(Packet::SubAck(s))) if n.resilient.load(Ordering::Acquire) => {
                if !s
                    .return_codes
                    .iter()
                    .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
                {
                    tracing::warn!(
                        "mqtt: the broker refused the subscription after a reconnect: {:?}",
                        s.return_codes
                    );
                }
                continue;
            }
            Ok(E::Incoming(Packet::ConnAck(a))) => Event::ConnAck(match a.code {
                ConnectReturnCode::Success => Ok(()),
                c => Err(format!("the broker refused the connection: {c:?}")),
            }),
            Ok(E::Incoming(Packet::SubAck(s))) => Event::SubAck(
                if s.return_codes
                    .iter()
                    .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "the broker refused the subscription: {:?}",
                        s.return_codes
                    ))
                },
            ),
            Ok(E::Incoming(Packet::PubAck(_) | Packet::PubComp(_))) => {
                n.completed.fetch_add(1, Ordering::Release);
                continue;
            }
            Ok(E::Outgoing(Outgoing::Publish(_))) => {
                n.written.fetch_add(1, Ordering::Release);
                continue;
            }
            Ok(E::Outgoing(Outgoing::Disconnect)) => return,
            Ok(_) => continue,
            Err(e) => {
                let pending = conn
                    .eventloop
                    .pending
                    .iter()
                    .filter(|r| matches!(r, Request::Publish(_)))
                    .count();
                if n.survive(&e.to_string(), pending, &mut backoff) {
                    continue;
                }
                Event::Ended {
                    refused: refused4(&e),
                    error: e.to_string(),
                }
            }
        };
        let ended = matches!(out, Event::Ended { .. });
        if tx.send(out).is_err() || ended {
            return;
        }
    }
}

/// A 3.1.1 client with the endpoint's knobs (one per flow, or the host's shared one: host.rs).
pub(super) fn client_v4(
    d: &Mqtt,
    id: &str,
    inflight: u32,
    transport: Option<rumqttc::Transport>,
) -> (rumqttc::Client, rumqttc::Connection) {
    let max_packet = MAX_MESSAGE_BYTES as usize + 64 * 1024;
    let mut o = rumqttc::MqttOptions::new(id, d.host.clone(), d.port);
    o.set_keep_alive(Duration::from_nanos(d.opts.keep_alive))
        .set_clean_session(d.opts.clean_session)
        .set_max_packet_size(max_packet, max_packet)
        .set_inflight(inflight as u16)
        .set_request_channel_capacity(REQUEST_CAPACITY);
    if let Some(t) = transport {
        o.set_transport(t);
    }
    let (c, mut conn) = rumqttc::Client::new(o, REQUEST_CAPACITY);
    let mut net = rumqttc::NetworkOptions::new();
    net.set_connection_timeout(network_timeout_s(&d.opts));
    net.set_tcp_nodelay(d.opts.nodelay);
    conn.eventloop.set_network_options(net);
    (c, conn)
}

fn refused4(e: &rumqttc::ConnectionError) -> bool {
    matches!(e, rumqttc::ConnectionError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// Drive an MQTT 5 connection until it ends (as [`pump_v4`]).
pub(super) fn pump_v5(
    mut conn: m5::Connection,
    tx: SyncSender<Event>,
    n: Arc<Counters>,
    subscription: Option<(String, u8)>,
) {
    use m5::mqttbytes::v5::{ConnectReturnCode, Filter, Packet, Subscribe, SubscribeReasonCode};
    use m5::{Event as E, Request};
    use rumqttc::Outgoing;
    let mut backoff = RECONNECT_FIRST;
    while let Ok(ev) = conn.recv() {
        let out = match ev {
            Ok(E::Incoming(Packet::Publish(p))) => Event::Message(p.payload),
            Ok(E::Incoming(Packet::ConnAck(a))) if n.resilient.load(Ordering::Acquire) => {
                if n.reconnected(a.session_present, &mut backoff) {
                    if let Some((t, q)) = &subscription {
                        let s = Subscribe::new(Filter::new(t.clone(), qos5(*q)), None);
                        conn.eventloop.pending.push_front(Request::Subscribe(s));
                    }
                }
                continue;
            }
            Ok(E::Incoming(Packet::SubAck(s))) if n.resilient.load(Ordering::Acquire) => {
                if !s
                    .return_codes
                    .iter()
                    .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
                {
                    tracing::warn!(
                        "mqtt: the broker refused the subscription after a reconnect: {:?}",
                        s.return_codes
                    );
                }
                continue;
            }
            Ok(E::Incoming(Packet::ConnAck(a))) => Event::ConnAck(match a.code {
                ConnectReturnCode::Success => Ok(()),
                c => Err(format!("the broker refused the connection: {c:?}")),
            }),
            Ok(E::Incoming(Packet::SubAck(s))) => Event::SubAck(
                if s.return_codes
                    .iter()
                    .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "the broker refused the subscription: {:?}",
                        s.return_codes
                    ))
                },
            ),
            Ok(E::Incoming(Packet::PubAck(a))) if !accepted_ack(a.reason) => {
                tracing::warn!(
                    "mqtt: the broker refused publication {}: {:?}",
                    a.pkid,
                    a.reason
                );
                n.refused.fetch_add(1, Ordering::Release);
                continue;
            }
            Ok(E::Incoming(Packet::PubRec(r))) if !accepted_rec(r.reason) => {
                tracing::warn!(
                    "mqtt: the broker refused publication {}: {:?}",
                    r.pkid,
                    r.reason
                );
                n.refused.fetch_add(1, Ordering::Release);
                continue;
            }
            Ok(E::Incoming(Packet::PubAck(_) | Packet::PubComp(_))) => {
                n.completed.fetch_add(1, Ordering::Release);
                continue;
            }
            Ok(E::Outgoing(Outgoing::Publish(_))) => {
                n.written.fetch_add(1, Ordering::Release);
                continue;
            }
            Ok(E::Outgoing(Outgoing::Disconnect)) => return,
            Ok(_) => continue,
            Err(e) => {
                let pending = conn
                    .eventloop
                    .pending
                    .iter()
                    .filter(|r| matches!(r, Request::Publish(_)))
                    .count();
                if n.survive(&e.to_string(), pending, &mut backoff) {
                    continue;
                }
                Event::Ended {
                    refused: matches!(&e, m5::ConnectionError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused),
                    error: e.to_string(),
                }
            }
        };
        let ended = matches!(out, Event::Ended { .. });
        if tx.send(out).is_err() || ended {
            return;
        }
    }
}

fn accepted_ack(r: m5::mqttbytes::v5::PubAckReason) -> bool {
    use m5::mqttbytes::v5::PubAckReason as R;
    matches!(r, R::Success | R::NoMatchingSubscribers)
}

fn accepted_rec(r: m5::mqttbytes::v5::PubRecReason) -> bool {
    use m5::mqttbytes::v5::PubRecReason as R;
    matches!(r, R::Success | R::NoMatchingSubscribers)
}

/// What one attempt of [`broker_receive_maximum`] learnt.
enum Probe {
    /// The CONNACK's Receive Maximum (its default when absent).
    Limit(u16),
    /// Not listening yet: try again.
    Refused,
    Failed(String),
}

/// The broker's Receive Maximum: how many QoS 1/2 publications it accepts from one
/// client before they are acknowledged (for QoS 2: until PUBREL).  Asked with a short
/// MQTT 5 connection (CONNECT, CONNACK, DISCONNECT) under the client id `<id>-rm`, for
/// 3.1.1 clients, whose CONNACK has no such field although the broker applies the same
/// limit to them (mosquitto: `max_inflight_messages` for every client).  `None` when
/// the broker does not answer MQTT 5 before the run's deadline (logged).
pub(super) fn broker_receive_maximum(
    d: &Mqtt,
    cfg: &Config,
    id: &str,
    transport: Option<rumqttc::Transport>,
    broker: &str,
) -> Option<u16> {
    loop {
        match probe_receive_maximum(d, cfg, id, transport.clone()) {
            Probe::Limit(n) => return Some(n),
            Probe::Refused if now_ns() < cfg.give_up_ns() && !stop_requested() => {
                std::thread::sleep(CONNECT_RETRY)
            }
            Probe::Refused => return None,
            Probe::Failed(_) if stop_requested() => return None,
            Probe::Failed(m) => {
                tracing::warn!(
                    "mqtt: could not learn the receive maximum of {broker} over MQTT 5 ({m}); \
                     the QoS 2 window stays at options.inflight"
                );
                return None;
            }
        }
    }
}

fn probe_receive_maximum(
    d: &Mqtt,
    cfg: &Config,
    id: &str,
    transport: Option<rumqttc::Transport>,
) -> Probe {
    use m5::mqttbytes::v5::Packet;
    let mut o = m5::MqttOptions::new(format!("{id}-rm"), d.host.clone(), d.port);
    o.set_keep_alive(Duration::from_secs(30))
        .set_clean_start(true);
    let mut net = rumqttc::NetworkOptions::new();
    net.set_connection_timeout(network_timeout_s(&d.opts));
    o.set_network_options(net);
    if let Some(t) = transport {
        o.set_transport(t);
    }
    let (client, mut conn) = m5::Client::new(o, 4);
    let (tx, rx) = sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("mqtt-probe".into())
        .spawn(move || {
            for ev in conn.iter() {
                let out = match ev {
                    Ok(m5::Event::Incoming(Packet::ConnAck(a))) => Probe::Limit(
                        a.properties
                            .and_then(|p| p.receive_max)
                            .filter(|&n| n > 0)
                            .unwrap_or(DEFAULT_RECEIVE_MAXIMUM),
                    ),
                    Ok(m5::Event::Outgoing(rumqttc::Outgoing::Disconnect)) => return,
                    Ok(_) => continue,
                    Err(m5::ConnectionError::Io(io))
                        if io.kind() == std::io::ErrorKind::ConnectionRefused =>
                    {
                        Probe::Refused
                    }
                    Err(e) => Probe::Failed(e.to_string()),
                };
                let end = !matches!(out, Probe::Limit(_));
                // Never block: the endpoint reads one answer at most.
                let _ = tx.try_send(out);
                if end {
                    return;
                }
            }
        });
    let th = match spawned {
        Ok(t) => t,
        Err(e) => return Probe::Failed(format!("spawning its thread: {e}")),
    };
    // Wait in short slices: a signal must end the agent within about 50 ms.
    let out = loop {
        let left = cfg.give_up_ns().saturating_sub(now_ns());
        if left == 0 {
            break Probe::Failed("no CONNACK before the run's timeout".into());
        }
        if stop_requested() {
            break Probe::Failed("interrupted by a signal".into());
        }
        match rx.recv_timeout(Duration::from_nanos(left.min(50_000_000))) {
            Ok(p) => break p,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Probe::Failed("the connection ended before its CONNACK".into())
            }
        }
    };
    if matches!(out, Probe::Limit(_)) {
        let _ = client.disconnect();
        let limit = now_ns() + 1_000_000_000;
        while !th.is_finished() && now_ns() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if th.is_finished() {
        let _ = th.join();
    }
    out
}
