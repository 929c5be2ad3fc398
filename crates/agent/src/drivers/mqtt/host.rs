//! Host mode (issue 27): the host's MQTT flows share one client per broker, one TCP connection
//! and one MQTT session, as a car's application has one connection to its broker with every
//! subscription and publication in it (docs/agent-protocol.md, "One MQTT client").
//!
//! Which flows share: every MQTT 3.1.1 flow without `reconnect`, grouped by broker address.  An
//! MQTT 5 flow, or one with `reconnect`, keeps a client of its own: its reconnect accounting
//! (publications re-sent or abandoned at a new session) is per connection.  Flows of one group
//! must agree on the connection's knobs (`clean_session`, `keep_alive`, `inflight`, `tls`,
//! `tls_ca`): [`host_plan`] refuses them otherwise, naming both flows and every key.  `qos` stays
//! per flow (MQTT sets it per publication and subscription).
//!
//! One thread drives the connection.  Incoming publications go to the flow that subscribed to
//! their topic (each flow has its own topics: the run's topic is per flow).  Outgoing accounting
//! stays per flow: requests enter rumqttc's channel in one order, under [`State`]'s lock, and
//! rumqttc writes them in that order (it reads no new request while its window is full or a
//! packet id collides), so each `Outgoing::Publish` / `Outgoing::Subscribe` event belongs to the
//! oldest request not yet seen; its packet id then routes the PUBACK / PUBCOMP / SUBACK back to
//! the flow.  A connection error ends every flow on it with that error.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::{broker_receive_maximum, client_v4, qos4, tls_transport, Counters, Event};
use super::{Mqtt, MqttOptions, CONNECT_RETRY, RETRY};
use crate::clock::now_ns;
use crate::config::{Config, Role};
use crate::drivers::host_slots::{lock, release, HostSlots, SlotRef};
use crate::drivers::{brokered, DriverError, PlanError};
use crate::signals::stop_requested;

/// One shared client of the plan: a broker and the flows that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostClient {
    pub broker: String,
    /// The flows sharing it, in the host object's order.
    pub flows: Vec<u32>,
    /// A flow publishes at QoS 2: the window is kept within the broker's receive maximum
    /// (asked over MQTT 5 first, as a flow of its own would).
    pub qos2_publisher: bool,
}

/// Whether a flow with these knobs shares its host's client (module docs).
pub(super) fn shares(opts: &MqttOptions) -> bool {
    opts.version == "3.1.1" && !opts.reconnect
}

/// The connection's knobs, which every flow on one client must agree on.
fn connection_knobs(o: &MqttOptions) -> [(&'static str, String); 5] {
    [
        ("clean_session", o.clean_session.to_string()),
        ("keep_alive", format!("{} s", o.keep_alive / 1_000_000_000)),
        ("inflight", o.inflight.to_string()),
        ("tls", o.tls.to_string()),
        ("tls_ca", format!("{:?}", o.tls_ca)),
    ]
}

/// The topics a flow subscribes to (Driver::open_* in mqtt.rs).
fn subscriptions(cfg: &Config, topic: &str) -> Option<String> {
    match cfg.role {
        Role::Sender => None,
        Role::Receiver => Some(topic.to_string()),
        Role::Pinger => Some(format!("{topic}/pong")),
        Role::Ponger => Some(format!("{topic}/ping")),
    }
}

/// Host mode: the shared clients of the MQTT flows among `flows` ((id, configuration); other
/// protocols and flows that keep their own client are skipped), one per broker.  Err: two flows
/// of one broker whose connection knobs differ, or that subscribe to one topic.
pub fn host_plan(flows: &[(u32, &Config)]) -> Result<Vec<HostClient>, PlanError> {
    struct Group {
        plan: HostClient,
        first: u32,
        knobs: [(&'static str, String); 5],
        topics: HashMap<String, u32>,
    }
    let mut groups: Vec<Group> = Vec::new();
    for &(id, cfg) in flows {
        if cfg.protocol != "mqtt" {
            continue;
        }
        let Ok(d) = Mqtt::from_config(cfg) else {
            continue; // host::parse created every driver first: not reached
        };
        if !shares(&d.opts) {
            continue;
        }
        let broker = format!("{}:{}", d.host, d.port);
        let knobs = connection_knobs(&d.opts);
        let i = match groups.iter().position(|g| g.plan.broker == broker) {
            Some(i) => i,
            None => {
                groups.push(Group {
                    plan: HostClient {
                        broker: broker.clone(),
                        flows: vec![],
                        qos2_publisher: false,
                    },
                    first: id,
                    knobs: knobs.clone(),
                    topics: HashMap::new(),
                });
                groups.len() - 1
            }
        };
        let g = &mut groups[i];
        let diffs = crate::drivers::knob_diffs(&g.knobs, &knobs);
        if !diffs.is_empty() {
            return Err(PlanError {
                flow: id,
                message: format!(
                    "flows {} and {id}: mqtt options differ ({}): one client per host and broker \
                     ({broker}) needs the same connection knobs",
                    g.first,
                    diffs.join(", ")
                ),
            });
        }
        if let Some(t) = subscriptions(cfg, &d.topic) {
            if let Some(other) = g.topics.insert(t.clone(), id) {
                return Err(PlanError {
                    flow: id,
                    message: format!(
                        "flows {other} and {id} both subscribe to the mqtt topic {t:?} on one \
                         client ({broker}): give them different topics"
                    ),
                });
            }
        }
        g.plan.flows.push(id);
        g.plan.qos2_publisher |= d.opts.qos == 2 && cfg.role != Role::Receiver;
    }
    Ok(groups.into_iter().map(|g| g.plan).collect())
}

/// What a request in rumqttc's channel was, for the event that reports it.
enum Req {
    Publish(Arc<Counters>, u8),
    Subscribe(SyncSender<Event>),
}

/// The connection's routing state (module docs).
#[derive(Default)]
struct State {
    /// Topic -> the subscribed flow's events.
    routes: HashMap<String, SyncSender<Event>>,
    /// Requests in the order they entered rumqttc's channel, not yet reported written.
    order: VecDeque<Req>,
    /// A publication rumqttc holds back behind a packet-id collision (reported later).
    collided: Option<Req>,
    /// QoS 1/2 publications written and not yet acknowledged, by packet id.
    publishes: HashMap<u16, Arc<Counters>>,
    /// Subscriptions written, by packet id, waiting for their SUBACK.
    subscribes: HashMap<u16, SyncSender<Event>>,
}

/// One live shared connection.
pub(super) struct Conn {
    client: rumqttc::Client,
    broker: String,
    state: Mutex<State>,
    connack: Mutex<Option<Result<(), (String, bool)>>>,
    /// Set when the connection has ended (its error), before the flows' channels are closed.
    ended: Mutex<Option<String>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Conn {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The connection's error once it has ended.
    pub(super) fn ended(&self) -> Option<String> {
        lock(&self.ended).clone()
    }

    /// Queue one publication for the flow counting into `counters`; false while rumqttc's
    /// request channel is full.
    pub(super) fn try_publish(
        &self,
        topic: &str,
        qos: u8,
        msg: &[u8],
        counters: &Arc<Counters>,
    ) -> bool {
        let mut st = self.state();
        if self
            .client
            .try_publish(topic, qos4(qos), false, msg.to_vec())
            .is_err()
        {
            return false;
        }
        st.order.push_back(Req::Publish(counters.clone(), qos));
        true
    }

    /// Route `topic` to `events` and subscribe; the SUBACK (or the connection's end) arrives on
    /// `events`.
    fn subscribe(
        &self,
        topic: &str,
        qos: u8,
        events: &SyncSender<Event>,
        cfg: &Config,
    ) -> Result<(), DriverError> {
        loop {
            if let Some(e) = self.ended() {
                return Err(brokered::protocol_error(&self.broker, e));
            }
            {
                let mut st = self.state();
                if self.client.try_subscribe(topic, qos4(qos)).is_ok() {
                    st.routes.insert(topic.to_string(), events.clone());
                    st.order.push_back(Req::Subscribe(events.clone()));
                    return Ok(());
                }
            }
            brokered::check_send(cfg, "subscribing at the MQTT broker")?;
            std::thread::sleep(RETRY);
        }
    }

    fn unroute(&self, topic: &str) {
        self.state().routes.remove(topic);
    }

    fn shutdown(&self) {
        self.client.try_disconnect().ok();
        let t = lock(&self.thread).take();
        if let Some(t) = t {
            let limit = now_ns() + 1_000_000_000;
            while !t.is_finished() && now_ns() < limit {
                std::thread::sleep(Duration::from_millis(1));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// Drive the shared connection until it ends (module docs).
fn pump(mut conn: rumqttc::Connection, c: Arc<Conn>) {
    use rumqttc::{ConnectReturnCode, Event as E, Outgoing, Packet, SubscribeReasonCode};
    let mut error: Option<(String, bool)> = None;
    while let Ok(ev) = conn.recv() {
        match ev {
            Ok(E::Incoming(Packet::Publish(p))) => {
                let to = c.state().routes.get(&p.topic).cloned();
                if let Some(tx) = to {
                    // Blocks while that flow's queue is full: TCP back-pressure, as with a
                    // client of its own (and for every flow here, as in one application).
                    let _ = tx.send(Event::Message(p.payload));
                }
            }
            Ok(E::Incoming(Packet::ConnAck(a))) => {
                *lock(&c.connack) = Some(match a.code {
                    ConnectReturnCode::Success => Ok(()),
                    code => Err((
                        format!("the broker refused the connection: {code:?}"),
                        false,
                    )),
                });
            }
            Ok(E::Incoming(Packet::SubAck(s))) => {
                let to = c.state().subscribes.remove(&s.pkid);
                if let Some(tx) = to {
                    let ok = s
                        .return_codes
                        .iter()
                        .all(|r| matches!(r, SubscribeReasonCode::Success(_)));
                    let _ = tx.send(Event::SubAck(if ok {
                        Ok(())
                    } else {
                        Err(format!(
                            "the broker refused the subscription: {:?}",
                            s.return_codes
                        ))
                    }));
                }
            }
            Ok(E::Incoming(Packet::PubAck(rumqttc::PubAck { pkid, .. })))
            | Ok(E::Incoming(Packet::PubComp(rumqttc::PubComp { pkid, .. }))) => {
                if let Some(n) = c.state().publishes.remove(&pkid) {
                    n.completed.fetch_add(1, Ordering::Release);
                }
            }
            Ok(E::Outgoing(Outgoing::Publish(pkid))) => {
                let mut st = c.state();
                let req = st.collided.take().or_else(|| st.order.pop_front());
                match req {
                    Some(Req::Publish(n, qos)) => {
                        n.written.fetch_add(1, Ordering::Release);
                        if qos > 0 {
                            st.publishes.insert(pkid, n);
                        }
                    }
                    _ => tracing::error!("mqtt: a publication written that no flow queued"),
                }
            }
            Ok(E::Outgoing(Outgoing::AwaitAck(_))) => {
                let mut st = c.state();
                st.collided = st.order.pop_front();
            }
            Ok(E::Outgoing(Outgoing::Subscribe(pkid))) => {
                let mut st = c.state();
                match st.order.pop_front() {
                    Some(Req::Subscribe(tx)) => {
                        st.subscribes.insert(pkid, tx);
                    }
                    _ => tracing::error!("mqtt: a subscription written that no flow queued"),
                }
            }
            Ok(E::Outgoing(Outgoing::Disconnect)) => break,
            Ok(_) => {}
            Err(e) => {
                let refused = matches!(&e, rumqttc::ConnectionError::Io(io)
                    if io.kind() == std::io::ErrorKind::ConnectionRefused);
                error = Some((e.to_string(), refused));
                break;
            }
        }
    }
    let message = error
        .as_ref()
        .map(|e| e.0.clone())
        .unwrap_or_else(|| "the MQTT connection ended".into());
    {
        let mut ca = lock(&c.connack);
        if ca.is_none() {
            *ca = Some(Err(error
                .clone()
                .unwrap_or_else(|| (message.clone(), false))));
        }
    }
    *lock(&c.ended) = Some(message.clone());
    let mut st = c.state();
    for tx in st.routes.values().chain(st.subscribes.values()) {
        let _ = tx.try_send(Event::Ended {
            error: message.clone(),
            refused: false,
        });
    }
    // Closing the channels: a flow whose queue was full learns of the end after draining it.
    st.routes.clear();
    st.subscribes.clear();
    st.order.clear();
}

/// Host mode's shared clients by broker (empty in `run` mode: every flow has its own client).
static HOST_CLIENTS: HostSlots<HostClient, Arc<Conn>> = HostSlots::new();

/// Host mode, before any flow starts: from now on the MQTT flows of each planned client share
/// it, opened by the first flow that needs it and closed when the last flow holding it ends.
pub fn install_host_clients(plan: Vec<HostClient>) {
    HOST_CLIENTS.install(plan.into_iter().map(|p| (p.broker.clone(), p)));
}

/// A flow's hold on its host's client; dropping it removes the flow's route, and the last hold
/// disconnects.
pub(super) struct Hold {
    slot: SlotRef<HostClient, Arc<Conn>>,
    pub(super) conn: Arc<Conn>,
    topic: Option<String>,
}

impl Hold {
    /// Subscribe this flow to `topic` on the shared connection (module docs).
    pub(super) fn subscribe(
        &mut self,
        topic: &str,
        qos: u8,
        events: &SyncSender<Event>,
        cfg: &Config,
    ) -> Result<(), DriverError> {
        self.topic = Some(topic.to_string());
        self.conn.subscribe(topic, qos, events, cfg)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(t) = &self.topic {
            self.conn.unroute(t);
        }
        release(&self.slot, |_, c| {
            c.shutdown();
            tracing::info!(broker = %c.broker, "closed the host's mqtt client");
        });
    }
}

/// The host's client for a flow of `d` (connecting it if no flow holds it), or None when the
/// flow keeps a client of its own (outside host mode, or knobs that do not share).
pub(super) fn hold(d: &Mqtt, cfg: &Config) -> Result<Option<Hold>, DriverError> {
    if !shares(&d.opts) {
        return Ok(None);
    }
    let broker = format!("{}:{}", d.host, d.port);
    let Some(slot) = HOST_CLIENTS.find(&broker) else {
        return Ok(None);
    };
    let mut s = lock(&slot);
    let conn = match s.live.as_ref().filter(|c| c.ended().is_none()) {
        Some(c) => c.clone(),
        None => {
            let c = connect(d, cfg, &s.plan)?;
            tracing::info!(
                flows = s.plan.flows.len(),
                broker = %broker,
                "opened the host's mqtt client"
            );
            s.live = Some(c.clone());
            c
        }
    };
    s.holders += 1;
    drop(s);
    Ok(Some(Hold {
        slot,
        conn,
        topic: None,
    }))
}

/// Connect the shared client, retrying while the broker is not listening yet.
fn connect(d: &Mqtt, cfg: &Config, plan: &HostClient) -> Result<Arc<Conn>, DriverError> {
    let broker = plan.broker.clone();
    let transport = match &d.opts.tls_ca {
        Some(p) if d.opts.tls => Some(tls_transport(p)?),
        _ => None,
    };
    let id = format!(
        "roughnet-mqtt-host-{}-{:x}",
        std::process::id(),
        now_ns() & 0xff_ffff
    );
    let mut inflight = d.opts.inflight;
    if plan.qos2_publisher {
        if let Some(n) = broker_receive_maximum(d, cfg, &id, transport.clone(), &broker) {
            inflight = inflight.min(u32::from(n));
        }
    }
    loop {
        let (client, connection) = client_v4(d, &id, inflight, transport.clone());
        let c = Arc::new(Conn {
            client,
            broker: broker.clone(),
            state: Mutex::new(State::default()),
            connack: Mutex::new(None),
            ended: Mutex::new(None),
            thread: Mutex::new(None),
        });
        let pc = c.clone();
        let th = std::thread::Builder::new()
            .name("mqtt-host".into())
            .spawn(move || pump(connection, pc))
            .map_err(|e| DriverError::io("spawn the MQTT connection thread for", &broker, e))?;
        *lock(&c.thread) = Some(th);
        let outcome = loop {
            if stop_requested() {
                c.shutdown();
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= cfg.give_up_ns() {
                break Err((format!("no CONNACK from {broker}"), false));
            }
            if let Some(r) = lock(&c.connack).clone() {
                break r;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        match outcome {
            Ok(()) => return Ok(c),
            Err((_, true)) if now_ns() < cfg.give_up_ns() => {
                c.shutdown();
                std::thread::sleep(CONNECT_RETRY);
            }
            Err((m, refused)) => {
                c.shutdown();
                return Err(if refused || m.starts_with("no CONNACK") {
                    DriverError::GaveUp {
                        what: format!("connecting to the MQTT broker {broker} ({m})"),
                        timeout_ms: cfg.timeout_ns / 1_000_000,
                    }
                } else {
                    brokered::protocol_error(&broker, m)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(id_topic: &str, role: &str, broker: &str, options: serde_json::Value) -> Config {
        let mut v = serde_json::json!({"v":1,"role":role,"protocol":"mqtt","pattern":"stream",
            "broker":broker,"payload_bytes":64,"messages":10,"topic":id_topic,"options":options});
        if role == "receiver" {
            v["listen"] = serde_json::json!("127.0.0.1:5201");
        }
        Config::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn flows_share_one_client_per_broker_unless_their_knobs_keep_their_own() {
        let none = serde_json::json!({});
        let cfgs = [
            cfg("t/a", "sender", "10.0.0.1:1883", none.clone()),
            cfg(
                "t/b",
                "receiver",
                "10.0.0.1:1883",
                serde_json::json!({"qos":1}),
            ),
            cfg("t/c", "receiver", "10.0.0.1:1883", none.clone()),
            cfg("t/d", "receiver", "10.0.0.2:1883", none.clone()),
            cfg(
                "t/e",
                "receiver",
                "10.0.0.1:1883",
                serde_json::json!({"version":"5"}),
            ),
            cfg(
                "t/f",
                "receiver",
                "10.0.0.1:1883",
                serde_json::json!({"reconnect":true}),
            ),
            cfg(
                "t/g",
                "sender",
                "10.0.0.1:1883",
                serde_json::json!({"qos":2}),
            ),
        ];
        let flows: Vec<(u32, &Config)> = cfgs
            .iter()
            .enumerate()
            .map(|(i, c)| (i as u32, c))
            .collect();
        let plan = host_plan(&flows).unwrap();
        assert_eq!(
            plan,
            vec![
                HostClient {
                    broker: "10.0.0.1:1883".into(),
                    flows: vec![0, 1, 2, 6],
                    qos2_publisher: true
                },
                HostClient {
                    broker: "10.0.0.2:1883".into(),
                    flows: vec![3],
                    qos2_publisher: false
                },
            ]
        );
    }

    #[test]
    fn differing_connection_knobs_or_one_topic_twice_are_refused_naming_both_flows() {
        let a = cfg("t/a", "receiver", "10.0.0.1:1883", serde_json::json!({}));
        let b = cfg(
            "t/b",
            "receiver",
            "10.0.0.1:1883",
            serde_json::json!({"keep_alive": 10_000_000_000u64, "inflight": 5}),
        );
        let e = host_plan(&[(3, &a), (7, &b)]).unwrap_err();
        assert_eq!(e.flow, 7);
        assert!(
            e.message.contains("flows 3 and 7")
                && e.message.contains("keep_alive 30 s and 10 s")
                && e.message.contains("inflight 100 and 5"),
            "{}",
            e.message
        );
        // the same knobs on another broker are no conflict
        let c = cfg(
            "t/b",
            "receiver",
            "10.0.0.9:1883",
            serde_json::json!({"keep_alive": 10_000_000_000u64}),
        );
        assert_eq!(host_plan(&[(3, &a), (7, &c)]).unwrap().len(), 2);
        let d = cfg(
            "t/a",
            "receiver",
            "10.0.0.1:1883",
            serde_json::json!({"qos": 1}),
        );
        let e = host_plan(&[(3, &a), (4, &d)]).unwrap_err();
        assert!(
            e.message.contains("flows 3 and 4 both subscribe") && e.message.contains("\"t/a\""),
            "{}",
            e.message
        );
        // a sender publishes only: no topic of its own to collide
        let s = cfg("t/a", "sender", "10.0.0.1:1883", serde_json::json!({}));
        assert!(host_plan(&[(3, &a), (4, &s)]).is_ok());
    }
}
