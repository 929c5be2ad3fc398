//! The `dds` driver: Cyclone DDS (the implementation ROS 2 ships) through the
//! `cyclors` bindings to the real C library.
//!
//! Owns the DDS side of roughnet: the domain configuration (unicast peers or
//! multicast, the interface of `listen` / towards `peers`), the topic type, QoS
//! from the knobs, and the discovery handshake that keeps discovery from eating
//! the first messages.  The C calls themselves are wrapped in `dds/ffi.rs`.
//!
//! Type: one IDL struct `struct Bytes { sequence<octet> data; }` (type name
//! `roughnet::Bytes`, or in ROS 2 naming mode the standard ROS 2 message
//! `std_msgs/msg/UInt8MultiArray`, type name `std_msgs::msg::dds_::UInt8MultiArray_`,
//! with an empty `layout`, so that any ROS 2 node reads it without building a package);
//! the message (32-byte header + filler) is `data`.  Python's `cyclonedds` declares
//! the same type as `class Bytes(IdlStruct, typename="roughnet::Bytes"): data: sequence[uint8]`.
//!
//! Topics under the run's base name (`topic`, default `roughnet`; ROS 2 mode:
//! `rt/<topic>`): `<base>/data` (stream, bulk), `<base>/ping` (requests, to every
//! ponger), `<base>/pong/<listen>` (each ponger's replies, so the pinger tells
//! them apart), `<base>/ready` (the handshake below).
//!
//! Handshake: a writer matching a reader is not enough, because a volatile
//! reader that has not yet matched the writer drops what arrives before.  So
//! every receiver/ponger publishes, on `<base>/ready`, the GUIDs of the writers
//! its reader has matched (re-published whenever that set changes, from its
//! receive calls), and a sender/pinger sends nothing before every peer lists
//! its writer.  With `peers` the count is `peers.len()`.
//!
//! Knobs: `reliability` (reliable: KEEP_ALL by default; best_effort: KEEP_LAST 1; in ROS 2 mode
//! KEEP_LAST 10 either way, ROS's default profile),
//! `history_depth` (0 = keep all), `durability` (volatile / transient_local),
//! `multicast` (false: unicast discovery to `peers`), `ros2`, `domain_id`,
//! `batch` (bytes; 0 or absent = off): Cyclone's writer batching (the
//! `writer_batching` QoS on the data writers) with `General/MaxMessageSize` set
//! to `batch`, i.e. samples are packed into RTPS messages (UDP payloads) of up to
//! that many bytes, a message leaving when the next sample would not fit, and at
//! `dds_write_flush`, which the driver calls after each end marker, ping request
//! and reply (so nothing waits in a batch at the end or for a round trip).
//!
//! Debugging: with `ROUGHNET_DDS_TRACE=<dir>` in its environment the agent has
//! Cyclone write its discovery/trace log to `<dir>/cdds-<pid>.log`.

mod discovery;
mod ffi;
mod host;
mod ros2;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Deserialize;

use self::ffi::{Domain, Qos, Reader, Writer};
use super::{
    options_error, Driver, DriverError, PlanError, Receiver, Requester, Responder, Sender,
};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, Pattern, Role};
use crate::signals::stop_requested;
use discovery::flow_endpoints;
pub use discovery::{cyclone_xml, discovery_port, FixedIndex};
use host::registry;
pub use host::{
    host_node_name, host_plan, install_host_domains, DomainHandle, DomainKnobs, HostDomain,
};
use ros2::check_ros2_names;
pub use ros2::{
    node_name, ros2_topic, type_name, ROS2_DEFAULT_DEPTH, ROS2_NAME_MAX, UINT8_MULTI_ARRAY_HASH,
};

const KNOBS: [&str; 8] = [
    "request_reply",
    "reliability",
    "history_depth",
    "durability",
    "multicast",
    "ros2",
    "domain_id",
    "batch",
];
/// `batch` bounds: Cyclone's FragmentSize (1344 B: `MaxMessageSize` below it leaves no room
/// for a fragment per message) to the largest UDP payload.
pub const BATCH_MIN: u64 = 1344;
pub const BATCH_MAX: u64 = 65507;
pub const MAX_MESSAGE: usize = 64 << 20;
/// Best-effort end markers are repeated like UDP's.
const END_COPIES: u32 = 5;
const END_GAP: std::time::Duration = std::time::Duration::from_millis(10);
/// Best effort: how long the first end marker waits after the last message.  A best-effort reader keeps
/// the last sample only (KEEP_LAST 1 by default): an end marker arriving before the receiver took the last
/// message replaced it in the reader's history, and the message counted as lost.  In v2v-fleet (best
/// effort, 156 flows) 22 of the 91 messages sent in the run's last second arrived (18 of 48 within 250 m,
/// lost at 34 m too), while in each of the seconds before every message within 250 m arrived.
const BEST_EFFORT_END_LEAD: std::time::Duration = std::time::Duration::from_millis(50);
/// At the end, how long a writer waits at least for its reliable data to be acknowledged (longer: until
/// the run's give-up time).  A fixed 5 s was too short on lossy links: a lost heartbeat or ACKNACK costs a
/// repair period, and the ros2 endpoint saw a 5 % lossy link leave the last 60 of 300 messages unrepaired
/// when its writer left after 5 s.  The wait ends as soon as every matched reader acknowledged (a reader
/// that leaves is no longer waited for).
const ACK_WAIT_NS: i64 = 5_000_000_000;
/// How long a ponger waits, before its first reply, for the pinger's reply reader.
const MATCH_WAIT_NS: u64 = 2_000_000_000;
/// How long a writer waits for readers that matched it to confirm (see await_ready).
const HANDSHAKE_GRACE_NS: u64 = 2_000_000_000;
/// How long a writer waits for every reader to match before it goes ahead with the readers
/// matched so far (at least one), as the zenoh sender does after its TOKEN_GRACE: on a radio
/// segment some receivers are out of range at the start (or their discovery packets lost) and
/// match later, missing what was sent before, as they would miss it over the air.
const MATCH_GRACE_NS: u64 = 5_000_000_000;
pub const DEFAULT_TOPIC: &str = "roughnet";
/// `Discovery/SPDPInterval`.  With Cyclone 11's default a configured unicast peer gets ONE
/// participant announcement (SPDP) when the domain starts: its locators are then "aging",
/// re-announced every 30 s (the default interval) but pruned after 30 s
/// (`InitialLocatorPruneDelay`), i.e. before the second try.  Over a lossy hop that one packet
/// is lost now and then, and as the receiver has no peers of its own (it answers the
/// announcements it gets) the two never discover each other.  With 1 s the peer is announced
/// every second until it answers or is pruned (30 tries), and known participants every second
/// too (default: 80 % of the 10 s lease).  Cost: one ~360-byte SPDP per candidate port
/// (ParticipantIndex auto: 65 per peer address and per own address) each second for the
/// first 30 s, about 0.4 Mbit/s per sender then; a few hundred bytes per second afterwards.
const SPDP_INTERVAL: &str = "1s";

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DdsOptions {
    pub reliability: Option<String>,
    pub history_depth: Option<i32>,
    pub durability: Option<String>,
    pub multicast: Option<bool>,
    pub ros2: Option<bool>,
    pub domain_id: Option<u32>,
    pub batch: Option<u64>,
    pub request_reply: Option<String>,
    /// Set by the runner (run.agents.prepare_specs), not by a scenario: the fixed
    /// `Discovery/ParticipantIndex` every agent of one flow shares (100 + the flow's number), so that a
    /// sender announces itself (SPDP) to one port of each receiver instead of the 65 an automatic index
    /// could have taken (an 11-car fleet all to all, 132 agents: about 7,900 announcements a second, and
    /// most cars never discovered each other).
    pub participant_index: Option<u32>,
}

/// QoS settings from the knobs.
#[derive(Debug, Clone, Copy)]
pub struct QosSpec {
    pub reliable: bool,
    /// 0 = keep all.
    pub depth: i32,
    pub transient_local: bool,
    /// Cyclone's writer batching (writers only).
    pub batching: bool,
}

pub struct Dds {
    qos: QosSpec,
    /// `General/MaxMessageSize` when batching (None: off, Cyclone's default 14720 B applies).
    batch: Option<u32>,
    multicast: bool,
    ros2: bool,
    domain_id: u32,
    base: String,
    /// ROS 2 mode, `request_reply = "service"`: ping and ramp as the ROS 2 service roughnet_msgs/srv/Bytes.
    service: bool,
    /// DdsOptions::participant_index (None: `auto`).
    participant_index: Option<u32>,
}

/// A topic-name chunk naming an address (`198.18.0.2:5201` -> `198.18.0.2_5201`; ROS 2 mode, a legal
/// ROS 2 name token: `a198_18_0_2_5201`, as roughnet's rclpy endpoint names it, python/roughnet/ros2).
fn addr_key(a: &SocketAddr, ros2: bool) -> String {
    let key: String = a
        .to_string()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || (c == '.' && !ros2) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if ros2 {
        format!("a{key}")
    } else {
        key
    }
}

impl Dds {
    pub fn from_config(cfg: &Config) -> Result<Dds, ConfigError> {
        super::require_endpoints(cfg)?;
        let o: DdsOptions = serde_json::from_value(serde_json::Value::Object(cfg.options.clone()))
            .map_err(|e| options_error("dds", &KNOBS, e))?;
        let reliable = match o.reliability.as_deref() {
            None | Some("reliable") => true,
            Some("best_effort") => false,
            Some(v) => {
                return Err(ConfigError::invalid(
                    "options.reliability",
                    format!("{v:?}"),
                    "one of reliable, best_effort for protocol dds",
                ))
            }
        };
        let transient_local = match o.durability.as_deref() {
            None | Some("volatile") => false,
            Some("transient_local") => true,
            Some(v) => {
                return Err(ConfigError::invalid(
                    "options.durability",
                    format!("{v:?}"),
                    "one of volatile, transient_local for protocol dds",
                ))
            }
        };
        let ros2 = o.ros2.unwrap_or(false);
        // ROS 2 mode takes ROS's default profile (rmw_qos_profile_default: keep last 10), as an rclpy node
        // (protocol ros2) does; plain DDS keeps all when reliable, the latest one when best effort.
        let depth = o.history_depth.unwrap_or(if ros2 {
            ROS2_DEFAULT_DEPTH
        } else if reliable {
            0
        } else {
            1
        });
        if depth < 0 {
            return Err(ConfigError::invalid(
                "options.history_depth",
                depth,
                "a depth >= 0 for protocol dds (0 = keep all)",
            ));
        }
        let domain_id = o.domain_id.unwrap_or(0);
        if domain_id > 232 {
            return Err(ConfigError::invalid(
                "options.domain_id",
                domain_id,
                "0..232 for protocol dds",
            ));
        }
        let batch = match o.batch.unwrap_or(0) {
            0 => None,
            n @ BATCH_MIN..=BATCH_MAX => Some(n as u32),
            n => {
                return Err(ConfigError::invalid(
                    "options.batch",
                    n,
                    format!(
                        "0 (no batching) or {BATCH_MIN}..{BATCH_MAX} bytes (Cyclone's MaxMessageSize) for protocol dds"
                    ),
                ))
            }
        };
        if batch.is_some() && cfg.pattern == Pattern::Sync {
            // Sync answers every burst with a summary and waits for the peer's: a summary held
            // in a batch would wait for the next reliable heartbeat's repair instead.
            return Err(ConfigError::invalid(
                "options.batch",
                o.batch.unwrap_or(0),
                "0 (no batching) with pattern sync for protocol dds (sync waits for every reply)",
            ));
        }
        let topic = cfg.topic.clone().unwrap_or_else(|| DEFAULT_TOPIC.into());
        if ros2 {
            check_ros2_names(&topic, cfg)?;
        }
        let base = if ros2 { ros2_topic(&topic) } else { topic };
        let service = match o.request_reply.as_deref() {
            None | Some("topics") => false,
            Some("service") if ros2 && matches!(cfg.pattern, Pattern::Ping | Pattern::Ramp) => true,
            Some(v) => {
                return Err(ConfigError::invalid(
                    "options.request_reply",
                    format!("{v:?}"),
                    "\"topics\", or \"service\" with ros2 = true and pattern ping or ramp, for protocol dds",
                ))
            }
        };
        if let Some(index) = o.participant_index {
            // The data port (discovery port + 1) must be a port.
            if discovery_port(domain_id, index) + 1 > 65535 {
                return Err(ConfigError::invalid(
                    "options.participant_index",
                    index,
                    format!("an index whose ports fit below 65536 in domain {domain_id} (7411 + 250 x domain + 2 x index)"),
                ));
            }
        }
        Ok(Dds {
            qos: QosSpec {
                reliable,
                depth,
                transient_local,
                batching: batch.is_some(),
            },
            batch,
            multicast: o.multicast.unwrap_or(false),
            ros2,
            domain_id,
            base,
            service,
            participant_index: o.participant_index,
        })
    }

    /// The domain a flow's endpoints live in: in host mode the process's shared one for this domain id
    /// (created by the first flow that asks, `install_host_domains`), else one of the flow's own.
    fn domain(&self, cfg: &Config) -> Result<DomainHandle, DriverError> {
        {
            let mut reg = registry();
            if let Some(slot) = reg
                .iter_mut()
                .find(|s| s.plan.knobs.domain_id == self.domain_id)
            {
                if let Some(d) = &slot.live {
                    return Ok(DomainHandle {
                        dom: Some(d.clone()),
                        shared: true,
                    });
                }
                let p = &slot.plan;
                tracing::info!(
                    domain = self.domain_id,
                    flows = ?p.flows,
                    "creating the DDS participant this process's flows share"
                );
                let d = Arc::new(self.new_domain(
                    &p.ifaces,
                    &p.peers,
                    p.prune_s,
                    host_node_name(std::process::id()),
                )?);
                slot.live = Some(d.clone());
                return Ok(DomainHandle {
                    dom: Some(d),
                    shared: true,
                });
            }
        }
        let (iface, peers) = flow_endpoints(cfg);
        let prune_s = cfg.timeout_ns.div_ceil(1_000_000_000).max(30);
        let d = self.new_domain(
            &iface.into_iter().collect::<Vec<_>>(),
            &peers,
            prune_s,
            node_name(cfg.role, std::process::id()),
        )?;
        Ok(DomainHandle {
            dom: Some(Arc::new(d)),
            shared: false,
        })
    }

    fn new_domain(
        &self,
        ifaces: &[IpAddr],
        peers: &[IpAddr],
        prune_s: u64,
        node: String,
    ) -> Result<Domain, DriverError> {
        let trace = std::env::var("ROUGHNET_DDS_TRACE")
            .ok()
            .filter(|d| !d.is_empty() && !d.contains(['<', '>', '&']))
            .map(|d| format!("{d}/cdds-{}.log", std::process::id()));
        let fixed = self.participant_index.map(|index| FixedIndex {
            index,
            domain: self.domain_id,
            prune_s,
        });
        let xml = cyclone_xml(
            ifaces,
            peers,
            self.multicast,
            self.batch,
            trace.as_deref(),
            fixed,
        );
        tracing::debug!(%xml, domain = self.domain_id, "creating the Cyclone DDS domain");
        let node = self.ros2.then(|| ffi::RosNode {
            namespace: "/".into(),
            name: node,
            type_hash: UINT8_MULTI_ARRAY_HASH,
        });
        Domain::new(self.domain_id, &xml, type_name(self.ros2), node)
    }

    /// The knobs that configure the domain and its participant (not one endpoint).
    pub fn knobs(&self) -> DomainKnobs {
        DomainKnobs {
            domain_id: self.domain_id,
            multicast: self.multicast,
            ros2: self.ros2,
            batch: self.batch,
            participant_index: self.participant_index,
        }
    }

    fn topic(&self, what: &str) -> String {
        format!("{}/{what}", self.base)
    }

    /// The DDS topics of the ROS 2 service `<base>/service/<key>` that the ponger at `ponger` offers:
    /// (`rq/<name>Request`, `rr/<name>Reply`), rmw's naming.
    fn service_topics(&self, ponger: &SocketAddr) -> (String, String) {
        let name = format!("{}/service/{}", &self.base[3..], addr_key(ponger, true));
        (format!("rq/{name}Request"), format!("rr/{name}Reply"))
    }

    fn data_qos(&self) -> Qos {
        Qos::new(&self.qos)
    }

    /// The handshake topic is always reliable and transient-local (late joiners see the last list).
    fn ready_qos() -> Qos {
        Qos::new(&QosSpec {
            reliable: true,
            depth: 1,
            transient_local: true,
            batching: false,
        })
    }

    /// Wait until `writer` matched `peers` readers (after MATCH_GRACE_NS: at least one,
    /// then go ahead with those), then until every matched peer lists `writer` on the
    /// ready topic.  A peer that is not roughnet (Python cyclonedds, ddsperf) never
    /// lists anything: after HANDSHAKE_GRACE_NS the writer goes ahead on DDS matching alone.
    fn await_ready(
        &self,
        dom: &Domain,
        writer: &Writer,
        ready: &mut Reader,
        peers: usize,
        cfg: &Config,
    ) -> Result<(), DriverError> {
        let give_up = cfg.give_up_ns();
        let gave_up = |what: String| DriverError::GaveUp {
            what,
            timeout_ms: cfg.timeout_ns / 1_000_000,
        };
        let grace = give_up.min(now_ns() + MATCH_GRACE_NS);
        let peers = loop {
            let m = writer.matched_count()? as usize;
            if m >= peers {
                break peers;
            }
            if m >= 1 && now_ns() >= grace {
                tracing::info!(
                    "dds: {m} of {peers} readers of {} matched within {} s; going ahead with them (the others get what is sent after they match)",
                    writer.topic(),
                    MATCH_GRACE_NS / 1_000_000_000
                );
                break m;
            }
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= give_up {
                return Err(gave_up(format!(
                    "waiting for {peers} DDS readers of {} to match ({m} did)",
                    writer.topic()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        let me = writer.guid()?;
        let until = give_up.min(now_ns() + HANDSHAKE_GRACE_NS);
        let mut lists: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            while let Some((n, from)) = ready.take(&mut buf, dom)? {
                lists.insert(from, buf[..n].to_vec());
            }
            let seen = lists
                .values()
                .filter(|l| l.chunks_exact(16).any(|g| g == me))
                .count();
            if seen >= peers {
                tracing::debug!("dds: {seen} peers confirmed {}", writer.topic());
                return Ok(());
            }
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= until {
                tracing::info!(
                    "dds: {seen} of {peers} readers of {} confirmed the match (others are not roughnet agents); going ahead",
                    writer.topic()
                );
                return Ok(());
            }
            ready.wait((now_ns() + 20_000_000).min(until))?;
        }
    }
}

impl Dds {
    /// Ping/ramp as a client of each ponger's ROS 2 service: a request writer and a reply reader per
    /// ponger.  No ready handshake (a ROS service publishes no lists): the requests wait until each
    /// writer matched the server's request reader and each reply reader its reply writer.
    fn open_service_client(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        let dom = self.domain(cfg)?;
        let size = cfg.max_message_bytes();
        let mut writers = Vec::new();
        let mut replies = Vec::new();
        for p in &cfg.peers {
            let (rq, rr) = self.service_topics(p);
            replies.push(dom.reader(&rr, &self.data_qos(), size)?);
            writers.push(dom.writer(&rq, &self.data_qos())?.stamp_from_header());
        }
        dom.announce_node()?;
        let give_up = cfg.give_up_ns();
        loop {
            let mut ok = true;
            for w in &writers {
                ok &= w.matched_count()? >= 1;
            }
            for r in &replies {
                ok &= r.matched_count()? >= 1;
            }
            if ok {
                break;
            }
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= give_up {
                return Err(DriverError::GaveUp {
                    what: format!("waiting for the service behind {}", writers[0].topic()),
                    timeout_ms: cfg.timeout_ns / 1_000_000,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // The server's side of the match (its reply writer knowing our reader) may come a moment later.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let ready = dom.reader(&self.topic("ready"), &Dds::ready_qos(), 1024)?;
        let ws = dom.waitset(&replies)?;
        Ok(Box::new(DdsRequester {
            writers,
            replies,
            ws,
            next: 0,
            reliable: self.qos.reliable,
            give_up,
            _ready: ready,
            dom,
        }))
    }
}

/// The receiving side of the handshake: publishes the writers `reader` matched.
struct ReadyAnnouncer {
    writer: Writer,
    announced: Vec<u8>,
    scratch: Vec<u8>,
}

impl ReadyAnnouncer {
    fn new(dom: &Domain, base: &str) -> Result<Self, DriverError> {
        let writer = dom.writer(&format!("{base}/ready"), &Dds::ready_qos())?;
        Ok(ReadyAnnouncer {
            writer,
            announced: Vec::new(),
            scratch: Vec::with_capacity(1024),
        })
    }

    /// Re-publish the matched writers of `reader` if they changed (cheap when not).
    fn update(&mut self, reader: &Reader) -> Result<(), DriverError> {
        if !reader.matched_changed()? {
            return Ok(());
        }
        reader.matched_writer_guids(&mut self.scratch)?;
        if self.scratch != self.announced {
            std::mem::swap(&mut self.scratch, &mut self.announced);
            self.writer.write(&self.announced, u64::MAX)?;
        }
        Ok(())
    }
}

impl Driver for Dds {
    fn name(&self) -> &'static str {
        "dds"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_MESSAGE
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        let dom = self.domain(cfg)?;
        let mut ready = dom.reader(&self.topic("ready"), &Dds::ready_qos(), 16 * 1024)?;
        let writer = dom
            .writer(&self.topic("data"), &self.data_qos())?
            .stamp_from_header();
        dom.announce_node()?;
        self.await_ready(&dom, &writer, &mut ready, cfg.peers.len(), cfg)?;
        Ok(Box::new(DdsSender {
            writer,
            reliable: self.qos.reliable,
            peers: cfg.peers.len(),
            give_up: cfg.give_up_ns(),
            _ready: ready,
            _dom: dom,
        }))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        let dom = self.domain(cfg)?;
        let reader = dom.reader(
            &self.topic("data"),
            &self.data_qos(),
            cfg.max_message_bytes(),
        )?;
        let announcer = ReadyAnnouncer::new(&dom, &self.base)?;
        dom.announce_node()?;
        let local = cfg
            .listen
            .map(|l| l.to_string())
            .unwrap_or_else(|| "dds".into());
        Ok(Box::new(DdsReceiver {
            reader,
            announcer,
            local,
            dom,
        }))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        if self.service {
            return self.open_service_client(cfg);
        }
        let dom = self.domain(cfg)?;
        let mut ready = dom.reader(&self.topic("ready"), &Dds::ready_qos(), 16 * 1024)?;
        let size = cfg.max_message_bytes();
        let replies = cfg
            .peers
            .iter()
            .map(|p| {
                dom.reader(
                    &self.topic(&format!("pong/{}", addr_key(p, self.ros2))),
                    &self.data_qos(),
                    size,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let writer = dom
            .writer(&self.topic("ping"), &self.data_qos())?
            .stamp_from_header();
        dom.announce_node()?;
        self.await_ready(&dom, &writer, &mut ready, cfg.peers.len(), cfg)?;
        // Our reply readers must know each ponger's reply writer before we ask.
        let give_up = cfg.give_up_ns();
        for r in &replies {
            while r.matched_count()? < 1 {
                if stop_requested() {
                    return Err(DriverError::Interrupted);
                }
                if now_ns() >= give_up {
                    return Err(DriverError::GaveUp {
                        what: format!("waiting for the ponger's writer of {}", r.topic()),
                        timeout_ms: cfg.timeout_ns / 1_000_000,
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let ws = dom.waitset(&replies)?;
        Ok(Box::new(DdsRequester {
            writers: vec![writer],
            replies,
            ws,
            next: 0,
            reliable: self.qos.reliable,
            give_up,
            _ready: ready,
            dom,
        }))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        let dom = self.domain(cfg)?;
        let listen = cfg.listen.expect("checked: pongers listen");
        let (ping_topic, pong_topic) = if self.service {
            self.service_topics(&listen)
        } else {
            (
                self.topic("ping"),
                self.topic(&format!("pong/{}", addr_key(&listen, self.ros2))),
            )
        };
        let reader = dom.reader(&ping_topic, &self.data_qos(), cfg.max_message_bytes())?;
        let writer = dom.writer(&pong_topic, &self.data_qos())?;
        let announcer = ReadyAnnouncer::new(&dom, &self.base)?;
        dom.announce_node()?;
        Ok(Box::new(DdsResponder {
            reader,
            writer,
            announcer,
            matched: false,
            give_up: cfg.give_up_ns(),
            local: listen.to_string(),
            dom,
        }))
    }
}

/// After the last message: reliable writers wait for acknowledgements, until the run's give-up time but
/// at least ACK_WAIT_NS.
fn drain(writer: &Writer, reliable: bool, give_up: u64) {
    if !reliable {
        return;
    }
    // In 100 ms steps, so that a signal ends the wait.
    let until = now_ns() + (ACK_WAIT_NS as u64).max(give_up.saturating_sub(now_ns()));
    loop {
        let t0 = now_ns();
        match writer.wait_for_acks(100_000_000) {
            Ok(()) => return,
            Err(e) => {
                // A timeout returns after the 100 ms; an immediate error is not one to wait out.
                let immediate = now_ns() - t0 < 50_000_000;
                if immediate || stop_requested() || now_ns() >= until {
                    tracing::debug!(
                        "dds: waiting for acknowledgements on {}: {e}",
                        writer.topic()
                    );
                    return;
                }
            }
        }
    }
}

fn send_end(
    writer: &mut Writer,
    reliable: bool,
    end: &[u8],
    give_up: u64,
) -> Result<(), DriverError> {
    let copies = if reliable { 1 } else { END_COPIES };
    if !reliable {
        std::thread::sleep(BEST_EFFORT_END_LEAD);
    }
    for k in 0..copies {
        writer.write(end, give_up)?;
        // Nothing may stay in a batch after the end marker.
        writer.flush()?;
        if k + 1 < copies {
            std::thread::sleep(END_GAP);
        }
    }
    drain(writer, reliable, give_up);
    Ok(())
}

pub struct DdsSender {
    writer: Writer,
    reliable: bool,
    peers: usize,
    give_up: u64,
    _ready: Reader,
    _dom: DomainHandle,
}

impl Sender for DdsSender {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        self.writer.write(msg, self.give_up)?;
        Ok(0)
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        send_end(&mut self.writer, self.reliable, end, self.give_up)
    }

    fn peers(&self) -> usize {
        self.peers
    }
}

pub struct DdsReceiver {
    reader: Reader,
    announcer: ReadyAnnouncer,
    local: String,
    dom: DomainHandle,
}

impl Receiver for DdsReceiver {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        loop {
            if let Some((n, _)) = self.reader.take(buf, &self.dom)? {
                return Ok(Some(n));
            }
            self.announcer.update(&self.reader)?;
            if now_ns() >= deadline_ns {
                return Ok(None);
            }
            self.reader.wait(deadline_ns.min(now_ns() + 10_000_000))?;
        }
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }

    fn peers_closed(&self) -> bool {
        // Every writer that matched has gone (after at least one).
        self.reader.all_writers_gone().unwrap_or(false)
    }
}

pub struct DdsRequester {
    /// One (topics: the ping topic) or one per ponger (services).
    writers: Vec<Writer>,
    replies: Vec<Reader>,
    ws: ffi::WaitSet,
    next: usize,
    reliable: bool,
    give_up: u64,
    _ready: Reader,
    dom: DomainHandle,
}

impl Requester for DdsRequester {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        for w in &mut self.writers {
            w.write(msg, self.give_up)?;
            // A request waits for its reply: it may not wait in a batch (ddsperf flushes pings too).
            w.flush()?;
        }
        Ok(0)
    }

    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        let k = self.replies.len();
        loop {
            for j in 0..k {
                let i = (self.next + j) % k;
                if let Some((n, _)) = self.replies[i].take(buf, &self.dom)? {
                    self.next = (i + 1) % k;
                    return Ok(Some((n, i)));
                }
            }
            if now_ns() >= deadline_ns {
                return Ok(None);
            }
            self.ws.wait(deadline_ns)?;
        }
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        for w in &mut self.writers {
            send_end(w, self.reliable, end, self.give_up)?;
        }
        Ok(())
    }

    fn peers(&self) -> usize {
        self.replies.len()
    }
}

pub struct DdsResponder {
    reader: Reader,
    writer: Writer,
    announcer: ReadyAnnouncer,
    matched: bool,
    give_up: u64,
    local: String,
    dom: DomainHandle,
}

impl Responder for DdsResponder {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        loop {
            if let Some((n, _)) = self.reader.take(buf, &self.dom)? {
                return Ok(Some(n));
            }
            self.announcer.update(&self.reader)?;
            if now_ns() >= deadline_ns {
                return Ok(None);
            }
            self.reader.wait(deadline_ns.min(now_ns() + 10_000_000))?;
        }
    }

    #[inline]
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        if !self.matched {
            let until = now_ns() + MATCH_WAIT_NS;
            while self.writer.matched_count()? < 1 && now_ns() < until && !stop_requested() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.matched = true;
        }
        self.writer.write(msg, self.give_up)?;
        self.writer.flush()
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

#[cfg(test)]
mod tests;
