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

mod ffi;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Deserialize;

use self::ffi::{Domain, Qos, Reader, Writer};
use super::{options_error, Driver, PlanError, DriverError, Receiver, Requester, Responder, Sender};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, Pattern, Role};
use crate::signals::stop_requested;

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

/// `roughnet/0123` -> `rt/roughnet/r0123` (ROS 2 names: tokens of [A-Za-z0-9_],
/// not starting with a digit).
pub fn ros2_topic(topic: &str) -> String {
    let toks: Vec<String> = topic
        .split('/')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let t: String = t
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if t.starts_with(|c: char| c.is_ascii_digit()) {
                format!("r{t}")
            } else {
                t
            }
        })
        .collect();
    format!("rt/{}", toks.join("/"))
}

/// `std_msgs/msg/UInt8MultiArray`'s type hash (REP 2011, the wheel's share/std_msgs/msg/UInt8MultiArray.json):
/// ROS 2 (Kilted) endpoints carry it in their user_data as `typehash=<this>;`.
pub const UINT8_MULTI_ARRAY_HASH: &str =
    "RIHS01_5687e861b8d307a5e48b7515467ae7a5fc2daf805bd0ce6d8e9e604bade9f385";

/// The ROS 2 node name the agent presents in ROS 2 mode (`roughnet_sender_4242`): its role and
/// process id, so that agents on one domain never share a node name.
pub fn node_name(role: Role, pid: u32) -> String {
    format!("roughnet_{}_{pid}", role.as_str())
}

/// ROS 2's longest topic name (rmw: RMW_TOPIC_MAX_NAME_LENGTH, 255 - 8 for the `rt/` and `rq/`..`Reply`
/// decorations).
pub const ROS2_NAME_MAX: usize = 255 - 8;

/// ROS 2 mode's default history depth: ROS's default QoS profile (keep last 10).
pub const ROS2_DEFAULT_DEPTH: i32 = 10;

/// ROS 2 mode: the run's topic gives legal ROS 2 names for every topic the driver creates (at least one
/// name token, so never `rt//data`; no name longer than ROS allows), else a configuration error naming
/// `topic`.
fn check_ros2_names(topic: &str, cfg: &Config) -> Result<(), ConfigError> {
    let base = ros2_topic(topic);
    if base == "rt/" {
        return Err(ConfigError::invalid(
            "topic",
            format!("{topic:?}"),
            "a name with at least one letter, digit or underscore for protocol dds with ros2 = true",
        ));
    }
    let longest_key = cfg
        .peers
        .iter()
        .chain(cfg.listen.iter())
        .map(|a| addr_key(a, true).len())
        .max()
        .unwrap_or(0);
    // `/<base>/pong/<key>` is the longest (ROS names drop the `rt` prefix).
    let longest = base.len() - 2 + "/pong/".len() + longest_key;
    if longest > ROS2_NAME_MAX {
        return Err(ConfigError::invalid(
            "topic",
            format!("{topic:?}"),
            format!(
                "a topic whose ROS 2 names stay within {ROS2_NAME_MAX} characters (the ponger's reply topic would have {longest}) for protocol dds with ros2 = true"
            ),
        ));
    }
    Ok(())
}

pub fn type_name(ros2: bool) -> &'static str {
    if ros2 {
        "std_msgs::msg::dds_::UInt8MultiArray_"
    } else {
        "roughnet::Bytes"
    }
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

/// The local address the kernel would use towards `peer` (no packet is sent).
fn local_ip_towards(peer: &SocketAddr) -> Option<IpAddr> {
    let any = if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(peer).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// Cyclone DDS configuration (what CYCLONEDDS_URI would hold): the interfaces
/// with the addresses `ifaces` (none: Cyclone picks one), unicast discovery to `peers` unless `multicast`,
/// `General/MaxMessageSize` = `max_message` bytes when given, and a trace file
/// when `trace` names one.  With `fixed` this participant takes that index and each
/// peer is named with the discovery port of the same index (every agent of a flow has
/// the flow's index): one announcement per peer instead of one per port an automatic
/// index could have taken; and the peers are announced to for the agent's whole life.
pub fn cyclone_xml(
    ifaces: &[IpAddr],
    peers: &[IpAddr],
    multicast: bool,
    max_message: Option<u32>,
    trace: Option<&str>,
    fixed: Option<FixedIndex>,
) -> String {
    let mut x = String::from("<CycloneDDS><Domain Id=\"any\"><General>");
    if !ifaces.is_empty() {
        x.push_str("<Interfaces>");
        let mut seen = Vec::new();
        for ip in ifaces {
            if !seen.contains(ip) {
                seen.push(*ip);
                x.push_str(&format!("<NetworkInterface address=\"{ip}\"/>"));
            }
        }
        x.push_str("</Interfaces>");
    }
    x.push_str(if multicast {
        "<AllowMulticast>true</AllowMulticast>"
    } else {
        "<AllowMulticast>false</AllowMulticast>"
    });
    if let Some(n) = max_message {
        x.push_str(&format!("<MaxMessageSize>{n}B</MaxMessageSize>"));
    }
    x.push_str("</General><Discovery>");
    match fixed {
        Some(f) => {
            x.push_str(&format!("<ParticipantIndex>{}</ParticipantIndex>", f.index));
            x.push_str(&format!("<InitialLocatorPruneDelay>{}s</InitialLocatorPruneDelay>", f.prune_s));
        }
        None => {
            x.push_str("<ParticipantIndex>auto</ParticipantIndex>");
            x.push_str("<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex>");
        }
    }
    x.push_str(&format!("<SPDPInterval>{SPDP_INTERVAL}</SPDPInterval>"));
    if !multicast && !peers.is_empty() {
        x.push_str("<Peers>");
        let mut seen = Vec::new();
        for p in peers {
            if !seen.contains(p) {
                seen.push(*p);
                match fixed {
                    Some(f) => {
                        let port = discovery_port(f.domain, f.index);
                        let a = match p {
                            IpAddr::V4(v4) => format!("{v4}:{port}"),
                            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
                        };
                        x.push_str(&format!("<Peer address=\"{a}\"/>"));
                    }
                    None => x.push_str(&format!("<Peer address=\"{p}\"/>")),
                }
            }
        }
        x.push_str("</Peers>");
    }
    x.push_str("</Discovery>");
    if let Some(file) = trace {
        x.push_str(&format!(
            "<Tracing><Category>trace</Category><OutputFile>{file}</OutputFile></Tracing>"
        ));
    }
    x.push_str("</Domain></CycloneDDS>");
    x
}

/// A fixed participant index (DdsOptions::participant_index) in `domain`, and how long the configured peers
/// are announced to before Cyclone gives up on them (`Discovery/InitialLocatorPruneDelay`, default
/// 30 s): the agent's whole life.  With the default, in a moving fleet a pair that first came within
/// range 30 s or more into the run never discovered each other (v2v-fleet: 28 of 156 flows got nothing
/// over DDS that got something over UDP, every one of them first in range at 30 to 54 s; none of the
/// pairs in range by 27 s).  With one port per peer the cost is one announcement per peer and second.
#[derive(Debug, Clone, Copy)]
pub struct FixedIndex {
    pub index: u32,
    pub domain: u32,
    pub prune_s: u64,
}

/// The unicast discovery port of participant `index` in `domain` (DDSI's default port mapping:
/// base 7400, domain gain 250, participant gain 2, offset d1 = 10).
pub fn discovery_port(domain: u32, index: u32) -> u32 {
    7400 + 250 * domain + 10 + 2 * index
}

/// The interface a flow's own domain uses (its `listen` address for a receiver or ponger, the local
/// address towards its first peer for a sender or pinger; None: Cyclone picks one) and the peers it
/// announces itself to (a sender's or pinger's).
fn flow_endpoints(cfg: &Config) -> (Option<IpAddr>, Vec<IpAddr>) {
    let (iface, peers) = match cfg.role {
        Role::Receiver | Role::Ponger => (cfg.listen.map(|l| l.ip()), vec![]),
        Role::Sender | Role::Pinger => (
            cfg.peers.first().and_then(local_ip_towards),
            cfg.peers.iter().map(|p| p.ip()).collect(),
        ),
    };
    (iface.filter(|ip| !ip.is_unspecified()), peers)
}

/// The ROS 2 node name of a host agent's shared participant (`roughnet_host_4242`).
pub fn host_node_name(pid: u32) -> String {
    format!("roughnet_host_{pid}")
}

/// What configures a domain and its one participant rather than one endpoint: the flows of a host
/// agent that share a participant must agree on these (`host_plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainKnobs {
    pub domain_id: u32,
    /// `Discovery`/`General/AllowMulticast`.
    pub multicast: bool,
    /// The data type, the participant's user_data and its ROS 2 node.
    pub ros2: bool,
    /// `General/MaxMessageSize`.
    pub batch: Option<u32>,
    /// `Discovery/ParticipantIndex` (and the peers' discovery ports).
    pub participant_index: Option<u32>,
}

impl DomainKnobs {
    /// (key, this value, the other's) for each knob that differs.
    fn differences(&self, other: &DomainKnobs) -> Vec<(&'static str, String, String)> {
        let batch = |b: Option<u32>| b.unwrap_or(0).to_string();
        let index = |i: Option<u32>| i.map_or_else(|| "auto".to_string(), |i| i.to_string());
        let mut d = Vec::new();
        let mut diff = |key, a: String, b: String| {
            if a != b {
                d.push((key, a, b));
            }
        };
        diff("domain_id", self.domain_id.to_string(), other.domain_id.to_string());
        diff("multicast", self.multicast.to_string(), other.multicast.to_string());
        diff("ros2", self.ros2.to_string(), other.ros2.to_string());
        diff("batch", batch(self.batch), batch(other.batch));
        diff("participant_index", index(self.participant_index), index(other.participant_index));
        d
    }
}

/// Host mode: the one domain (and participant) every DDS flow of the process with this domain id
/// shares.  Its configuration is every flow's: the interfaces of all of them (each as its own domain
/// would have taken it, in flow order), the peers of all of them, announced to for the longest
/// flow's life.
#[derive(Debug, Clone, PartialEq)]
pub struct HostDomain {
    pub knobs: DomainKnobs,
    /// The flows sharing it, in the host object's order.
    pub flows: Vec<u32>,
    pub ifaces: Vec<IpAddr>,
    pub peers: Vec<IpAddr>,
    /// `Discovery/InitialLocatorPruneDelay` with a fixed index (FixedIndex::prune_s).
    pub prune_s: u64,
}

/// Host mode: the shared domains of the DDS flows among `flows` ((id, start offset, configuration);
/// the others are skipped), one per domain id.  Err: two flows of one domain id whose domain knobs
/// differ (one participant cannot be configured both ways), naming both flows and every key.
pub fn host_plan(flows: &[(u32, Option<u64>, &Config)]) -> Result<Vec<HostDomain>, PlanError> {
    let mut plans: Vec<HostDomain> = Vec::new();
    for &(id, start_ns, cfg) in flows {
        if cfg.protocol != "dds" {
            continue;
        }
        let Ok(d) = Dds::from_config(cfg) else {
            continue; // host::parse created every driver first: not reached
        };
        let knobs = d.knobs();
        let (iface, peers) = flow_endpoints(cfg);
        let life_s = (start_ns.unwrap_or(0) + cfg.timeout_ns).div_ceil(1_000_000_000);
        match plans.iter_mut().find(|p| p.knobs.domain_id == knobs.domain_id) {
            Some(p) => {
                let diffs = p.knobs.differences(&knobs);
                if !diffs.is_empty() {
                    let what = diffs
                        .iter()
                        .map(|(k, a, b)| format!("{k} {a} and {b}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(PlanError {
                        flow: id,
                        message: format!(
                            "flows {} and {id}: dds options differ ({what}): one participant per host \
                             needs the same domain knobs",
                            p.flows[0]
                        ),
                    });
                }
                p.flows.push(id);
                p.ifaces.extend(iface.filter(|ip| !p.ifaces.contains(ip)));
                for ip in peers {
                    if !p.peers.contains(&ip) {
                        p.peers.push(ip);
                    }
                }
                p.prune_s = p.prune_s.max(life_s + 30);
            }
            None => {
                let mut uniq = Vec::new();
                for ip in peers {
                    if !uniq.contains(&ip) {
                        uniq.push(ip);
                    }
                }
                plans.push(HostDomain {
                    knobs,
                    flows: vec![id],
                    ifaces: iface.into_iter().collect(),
                    peers: uniq,
                    prune_s: (life_s + 30).max(30),
                })
            }
        }
    }
    Ok(plans)
}

/// A shared domain and, once a flow created it, the domain itself (while some flow holds it).
struct Slot {
    plan: HostDomain,
    live: Option<Arc<Domain>>,
}

/// Host mode's shared domains (empty in `run` mode: every flow makes its own).
static HOST_DOMAINS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Slot>> {
    HOST_DOMAINS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Host mode, before any flow starts: from now on the DDS flows of each planned domain id share one
/// domain and participant, created by the first flow that opens an endpoint and deleted when the
/// last flow holding it ends.
pub fn install_host_domains(plans: Vec<HostDomain>) {
    let mut reg = registry();
    reg.clear();
    reg.extend(plans.into_iter().map(|plan| Slot { plan, live: None }));
}

/// A flow's hold on its domain.  A shared one is deleted by the handle of the last flow holding it,
/// under the registry's lock: a flow starting meanwhile waits and creates a new one (Cyclone has one
/// domain per id in a process, so the old one must be gone first).
pub struct DomainHandle {
    dom: Option<Arc<Domain>>,
    shared: bool,
}

impl std::ops::Deref for DomainHandle {
    type Target = Domain;
    fn deref(&self) -> &Domain {
        self.dom.as_deref().expect("present until dropped")
    }
}

impl Drop for DomainHandle {
    fn drop(&mut self) {
        if !self.shared {
            return; // dropped with the field
        }
        let mut reg = registry();
        let Some(d) = self.dom.take() else { return };
        // Ours and the registry's: we are the last flow; delete it before the lock goes.
        if Arc::strong_count(&d) == 2 {
            for slot in reg.iter_mut() {
                if slot.live.as_ref().is_some_and(|l| Arc::ptr_eq(l, &d)) {
                    slot.live = None;
                }
            }
        }
        drop(d);
        drop(reg);
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
        let depth = o
            .history_depth
            .unwrap_or(if ros2 { ROS2_DEFAULT_DEPTH } else if reliable { 0 } else { 1 });
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
            if let Some(slot) = reg.iter_mut().find(|s| s.plan.knobs.domain_id == self.domain_id) {
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
                let d = Arc::new(self.new_domain(&p.ifaces, &p.peers, p.prune_s, host_node_name(std::process::id()))?);
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
        let xml = cyclone_xml(ifaces, peers, self.multicast, self.batch, trace.as_deref(), fixed);
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
mod tests {
    use super::*;

    #[test]
    fn ros2_names_are_valid_ros_names() {
        assert_eq!(ros2_topic("roughnet/0123ab"), "rt/roughnet/r0123ab");
        assert_eq!(ros2_topic("/a-b/c"), "rt/a_b/c");
        assert_eq!(type_name(true), "std_msgs::msg::dds_::UInt8MultiArray_");
        let a: SocketAddr = "127.0.0.1:5201".parse().unwrap();
        assert_eq!(addr_key(&a, false), "127.0.0.1_5201");
        assert_eq!(addr_key(&a, true), "a127_0_0_1_5201");
    }

    fn dds(options: serde_json::Value) -> Result<Dds, ConfigError> {
        let v = serde_json::json!({"v":1,"role":"sender","protocol":"dds","pattern":"stream",
            "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10,"options":options});
        Dds::from_config(&Config::parse(&v.to_string()).unwrap())
    }

    #[test]
    fn ros2_mode_refuses_topics_without_a_legal_name() {
        for bad in ["/", "//", &"a/".repeat(130)] {
            let v = serde_json::json!({"v":1,"role":"sender","protocol":"dds","pattern":"stream",
                "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10,"topic":bad,"options":{"ros2":true}});
            let e = Dds::from_config(&Config::parse(&v.to_string()).unwrap())
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"))
                .to_string();
            assert!(e.contains("topic"), "{e}");
        }
        let v = serde_json::json!({"v":1,"role":"sender","protocol":"dds","pattern":"stream",
            "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10,"topic":"/a/","options":{"ros2":true}});
        let d = Dds::from_config(&Config::parse(&v.to_string()).unwrap()).unwrap();
        assert_eq!(d.topic("data"), "rt/a/data");
        // An empty topic is no topic: the default name.
        let v = serde_json::json!({"v":1,"role":"sender","protocol":"dds","pattern":"stream",
            "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10,"topic":"","options":{"ros2":true}});
        let d = Dds::from_config(&Config::parse(&v.to_string()).unwrap()).unwrap();
        assert_eq!(d.topic("data"), "rt/roughnet/data");
        assert_eq!(node_name(Role::Ponger, 42), "roughnet_ponger_42");
    }

    #[test]
    fn batch_is_cyclones_max_message_size_or_off() {
        let on = dds(serde_json::json!({"batch": 8192})).unwrap();
        assert_eq!(on.batch, Some(8192));
        assert!(on.qos.batching);
        for off in [serde_json::json!({}), serde_json::json!({"batch": 0})] {
            let d = dds(off).unwrap();
            assert!(d.batch.is_none() && !d.qos.batching);
        }
        let v = serde_json::json!({"v":1,"role":"syncer","protocol":"dds","pattern":"sync",
            "peers":["127.0.0.1:9"],"listen":"127.0.0.1:8","payload_bytes":240,"bundles":4,
            "options":{"batch":8192}});
        let e = Dds::from_config(&Config::parse(&v.to_string()).unwrap())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("options.batch") && e.contains("sync"), "{e}");
        for bad in [1343, 65508] {
            let e = dds(serde_json::json!({ "batch": bad }))
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("options.batch") && e.contains("1344") && e.contains("65507"),
                "{e}"
            );
        }
    }

    #[test]
    fn unicast_xml_lists_each_peer_once() {
        let ip: IpAddr = "198.18.0.2".parse().unwrap();
        let x = cyclone_xml(
            &["198.18.0.1".parse().unwrap()],
            &[ip, ip],
            false,
            None,
            None,
            None,
        );
        assert_eq!(
            x.matches("<Peer address=\"198.18.0.2\"/>").count(),
            1,
            "{x}"
        );
        assert!(x.contains("NetworkInterface address=\"198.18.0.1\""));
        assert!(x.contains("<AllowMulticast>false"));
        assert!(x.contains("<SPDPInterval>1s</SPDPInterval>"), "{x}");
        assert!(
            !x.contains("MaxMessageSize") && !x.contains("Tracing"),
            "{x}"
        );
        let m = cyclone_xml(&[], &[ip], true, Some(8192), Some("/tmp/t.log"), None);
        assert!(
            m.contains("<General>")
                && m.contains("<MaxMessageSize>8192B</MaxMessageSize></General>"),
            "{m}"
        );
        assert!(m.contains("<OutputFile>/tmp/t.log</OutputFile>"), "{m}");
        assert!(
            !m.contains("<Peers>") && m.contains("<AllowMulticast>true"),
            "{m}"
        );
    }

    #[test]
    fn ros2_mode_keeps_the_last_ten_as_ros_does() {
        assert_eq!(dds(serde_json::json!({"ros2": true})).unwrap().qos.depth, 10);
        let be = dds(serde_json::json!({"ros2": true, "reliability": "best_effort"})).unwrap();
        assert_eq!(be.qos.depth, 10);
        let set = dds(serde_json::json!({"ros2": true, "history_depth": 0})).unwrap();
        assert_eq!(set.qos.depth, 0);
        assert_eq!(dds(serde_json::json!({})).unwrap().qos.depth, 0);
        assert_eq!(dds(serde_json::json!({"reliability": "best_effort"})).unwrap().qos.depth, 1);
    }

    #[test]
    fn fixed_index_names_one_port_per_peer() {
        let ip: IpAddr = "198.18.0.2".parse().unwrap();
        let f = |index, domain| Some(FixedIndex { index, domain, prune_s: 70 });
        let x = cyclone_xml(&[], &[ip, ip], false, None, None, f(103, 0));
        assert!(x.contains("<ParticipantIndex>103</ParticipantIndex>"), "{x}");
        assert!(x.contains("<InitialLocatorPruneDelay>70s</InitialLocatorPruneDelay>"), "{x}");
        assert!(!x.contains("MaxAutoParticipantIndex"), "{x}");
        let auto = cyclone_xml(&[], &[ip], false, None, None, None);
        assert!(auto.contains("<ParticipantIndex>auto") && !auto.contains("InitialLocatorPruneDelay"), "{auto}");
        // 7400 + 10 + 2 x 103, once
        assert_eq!(x.matches("<Peer address=\"198.18.0.2:7616\"/>").count(), 1, "{x}");
        let y = cyclone_xml(&[], &[ip], false, None, None, f(0, 2));
        assert!(y.contains("<Peer address=\"198.18.0.2:7910\"/>"), "{y}");
        let v6: IpAddr = "fd00::2".parse().unwrap();
        let z = cyclone_xml(&[], &[v6], false, None, None, f(1, 0));
        assert!(z.contains("<Peer address=\"[fd00::2]:7412\"/>"), "{z}");
    }

    #[test]
    fn a_host_plan_is_one_domain_per_id_with_every_flows_interfaces_and_peers() {
        let c = |v: serde_json::Value| Config::parse(&v.to_string()).unwrap();
        let rx = |listen: &str, o: serde_json::Value| {
            c(serde_json::json!({"v":1,"role":"receiver","protocol":"dds","pattern":"stream",
                "listen":listen,"payload_bytes":64,"messages":10,"timeout_ms":40_000,"options":o}))
        };
        let tx = |peers: &[&str], o: serde_json::Value| {
            c(serde_json::json!({"v":1,"role":"sender","protocol":"dds","pattern":"stream",
                "peers":peers,"payload_bytes":64,"messages":10,"timeout_ms":40_000,"options":o}))
        };
        let udp = c(serde_json::json!({"v":1,"role":"receiver","protocol":"udp","pattern":"stream",
            "listen":"127.0.0.1:9","payload_bytes":64,"messages":10}));
        let idx = serde_json::json!({"participant_index": 100});
        let (r1, r2) = (rx("127.0.0.2:5000", idx.clone()), rx("127.0.0.3:5001", idx.clone()));
        let (t1, t2) = (
            tx(&["127.0.0.4:5000", "127.0.0.5:5000"], idx.clone()),
            tx(&["127.0.0.5:5001"], idx.clone()),
        );
        let other = rx("0.0.0.0:5002", serde_json::json!({"domain_id": 3}));
        let plans = host_plan(&[
            (1, None, &r1),
            (2, None, &udp),
            (3, None, &r2),
            (4, Some(100_000_000_000), &t1),
            (5, Some(0), &t2),
            (6, None, &other),
        ])
        .unwrap();
        assert_eq!(plans.len(), 2, "{plans:?}");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(plans[0].flows, vec![1, 3, 4, 5]);
        assert_eq!(plans[0].knobs.participant_index, Some(100));
        // the receivers' listen addresses, then the senders' (loopback: 127.0.0.1 towards either peer)
        assert_eq!(plans[0].ifaces, vec![ip("127.0.0.2"), ip("127.0.0.3"), ip("127.0.0.1")]);
        assert_eq!(plans[0].peers, vec![ip("127.0.0.4"), ip("127.0.0.5")]);
        assert_eq!(plans[0].prune_s, 100 + 40 + 30, "the longest flow's life, and 30 s");
        assert_eq!(plans[1].flows, vec![6]);
        assert_eq!(plans[1].knobs.domain_id, 3);
        assert!(plans[1].ifaces.is_empty() && plans[1].peers.is_empty(), "{:?}", plans[1]);
        let e = host_plan(&[
            (1, None, &r1),
            (9, None, &rx("127.0.0.2:6000", serde_json::json!({"participant_index": 101, "ros2": true}))),
        ])
        .unwrap_err();
        assert_eq!(e.flow, 9);
        assert_eq!(
            e.message,
            "flows 1 and 9: dds options differ (ros2 false and true, participant_index 100 and 101): \
             one participant per host needs the same domain knobs"
        );
    }

    #[test]
    fn participant_index_must_give_a_port() {
        assert_eq!(dds(serde_json::json!({"participant_index": 3})).unwrap().participant_index, Some(3));
        // 7411 + 2 x 29062 = 65535 fits in domain 0; one more does not, and in domain 232 far less.
        assert!(dds(serde_json::json!({"participant_index": 29062})).is_ok());
        for bad in [serde_json::json!({"participant_index": 29063}),
                    serde_json::json!({"participant_index": 100, "domain_id": 232})] {
            let e = dds(bad).err().expect("refused").to_string();
            assert!(e.contains("options.participant_index") && e.contains("65536"), "{e}");
        }
        let e = dds(serde_json::json!({"participant_index": 40000})).err().expect("refused").to_string();
        assert!(e.contains("options.participant_index") && e.contains("65536"), "{e}");
    }
}
