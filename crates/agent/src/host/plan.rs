//! What a host object says (`parse`: its flows, each checked and its driver created) and which of its flows
//! share what: one UDP receiver (`shared_receivers`), one DDS participant per domain (`dds_plan`), one zenoh
//! session (`zenoh_plan`), one MQTT client per broker (`mqtt_plan`).

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use std::net::{IpAddr, SocketAddr};

use crate::config::{Config, ConfigError, Pattern, Role};
use crate::drivers::{self, Driver};

/// The host object's format version (its `v`).
pub const HOST_VERSION: u64 = 1;
/// Most flows one host object may hold.
pub const MAX_FLOWS: usize = 4096;

/// A host object that cannot run: nothing was started.  `flow()` names the flow it is about
/// (None: the host object itself).
#[derive(Debug, Error)]
pub enum HostError {
    #[error("the host configuration is not a valid roughnet-agent host object: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Host(ConfigError),
    #[error("flow {flow}: the flow entry is not valid: {source}")]
    Entry {
        flow: u32,
        source: serde_json::Error,
    },
    #[error("flow {flow}: {source}")]
    Flow { flow: u32, source: ConfigError },
    /// Two flows that would bind one UDP address without sharing a receiver (crate::host::udp_group).
    #[error("flow {flow}: {message}")]
    Shared { flow: u32, message: String },
    /// DDS flows that cannot share the process's one participant (drivers::dds::host_plan), or
    /// zenoh flows its one session (drivers::zenoh::host_plan); the message names both flows.
    #[error("{message}")]
    Participant { flow: u32, message: String },
}

impl HostError {
    /// The flow this error is about, if it is about one.
    pub fn flow(&self) -> Option<u32> {
        match self {
            HostError::Entry { flow, .. }
            | HostError::Flow { flow, .. }
            | HostError::Shared { flow, .. }
            | HostError::Participant { flow, .. } => Some(*flow),
            HostError::Json(_) | HostError::Host(_) => None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    v: u64,
    flows: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlow {
    #[allow(dead_code)] // read (and checked) before, from the entry itself
    flow: u32,
    #[serde(default)]
    start_ns: Option<u64>,
    config: Value,
}

/// One checked flow, its driver created.
pub struct Flow {
    pub id: u32,
    /// None: start at once; Some(d): start `d` ns after the runner's t0.
    pub start_ns: Option<u64>,
    pub cfg: Config,
    pub driver: Box<dyn Driver>,
}

/// Check a host object: its shape, every flow's configuration, and create every flow's driver.
pub fn parse(text: &str) -> Result<Vec<Flow>, HostError> {
    let raw: RawHost = serde_json::from_str(text)?;
    if raw.v != HOST_VERSION {
        return Err(HostError::Host(ConfigError::invalid(
            "v",
            raw.v,
            format!("{HOST_VERSION} (the host format this agent speaks)"),
        )));
    }
    if raw.flows.is_empty() || raw.flows.len() > MAX_FLOWS {
        return Err(HostError::Host(ConfigError::invalid(
            "flows",
            format!("{} entries", raw.flows.len()),
            format!("1 to {MAX_FLOWS} flows"),
        )));
    }
    // Ids first: an entry without one, or a duplicate, is named before any configuration is read.
    let mut seen = HashSet::new();
    let mut ids = Vec::with_capacity(raw.flows.len());
    for (i, entry) in raw.flows.iter().enumerate() {
        let given = entry.get("flow");
        let id = given
            .and_then(Value::as_u64)
            .and_then(|k| u32::try_from(k).ok())
            .ok_or_else(|| {
                HostError::Host(ConfigError::invalid(
                    format!("flows[{i}].flow"),
                    given.map_or_else(|| "absent".to_string(), Value::to_string),
                    "a flow id, an integer 0 to 4294967295",
                ))
            })?;
        if !seen.insert(id) {
            return Err(HostError::Flow {
                flow: id,
                source: ConfigError::invalid("flow", id, "an id no other flow of the host has"),
            });
        }
        ids.push(id);
    }
    let mut flows = Vec::with_capacity(ids.len());
    for (id, entry) in ids.into_iter().zip(raw.flows) {
        let rf =
            RawFlow::deserialize(entry).map_err(|source| HostError::Entry { flow: id, source })?;
        let flow_err = |source| HostError::Flow { flow: id, source };
        let cfg = Config::parse(&rf.config.to_string()).map_err(flow_err)?;
        let driver = drivers::create(&cfg).map_err(flow_err)?;
        flows.push(Flow {
            id,
            start_ns: rf.start_ns,
            cfg,
            driver,
        });
    }
    shared_receivers(&flows)?;
    dds_plan(&flows)?;
    zenoh_plan(&flows)?;
    mqtt_plan(&flows)?;
    nats_plan(&flows)?;
    Ok(flows)
}

/// The MQTT flows' shared clients (one per broker, drivers::mqtt::host_plan); Err names two
/// flows whose connection knobs differ or that subscribe to one topic.
#[cfg(feature = "mqtt")]
pub fn mqtt_plan(flows: &[Flow]) -> Result<Vec<drivers::mqtt::HostClient>, HostError> {
    let list: Vec<(u32, &Config)> = flows.iter().map(|f| (f.id, &f.cfg)).collect();
    drivers::mqtt::host_plan(&list).map_err(|e| HostError::Participant {
        flow: e.flow,
        message: e.message,
    })
}

#[cfg(not(feature = "mqtt"))]
pub fn mqtt_plan(_flows: &[Flow]) -> Result<(), HostError> {
    Ok(())
}

/// The NATS flows' shared connections (one per server, drivers::nats::host_plan); Err names two
/// flows whose `reconnect` differs.
#[cfg(feature = "nats")]
pub fn nats_plan(flows: &[Flow]) -> Result<Vec<drivers::nats::HostClient>, HostError> {
    let list: Vec<(u32, &Config)> = flows.iter().map(|f| (f.id, &f.cfg)).collect();
    drivers::nats::host_plan(&list).map_err(|e| HostError::Participant {
        flow: e.flow,
        message: e.message,
    })
}

#[cfg(not(feature = "nats"))]
pub fn nats_plan(_flows: &[Flow]) -> Result<(), HostError> {
    Ok(())
}

/// The zenoh flows' shared session (one per process, drivers::zenoh::host_plan); Err names two
/// flows whose session knobs differ.
#[cfg(feature = "zenoh")]
pub fn zenoh_plan(flows: &[Flow]) -> Result<Option<drivers::zenoh::HostSession>, HostError> {
    let list: Vec<(u32, &Config)> = flows.iter().map(|f| (f.id, &f.cfg)).collect();
    drivers::zenoh::host_plan(&list).map_err(|e| HostError::Participant {
        flow: e.flow,
        message: e.message,
    })
}

#[cfg(not(feature = "zenoh"))]
pub fn zenoh_plan(_flows: &[Flow]) -> Result<(), HostError> {
    Ok(())
}

/// The DDS flows' shared domains (one participant per domain id for the whole process,
/// drivers::dds::host_plan); Err names two flows whose domain knobs differ.
#[cfg(feature = "dds")]
pub fn dds_plan(flows: &[Flow]) -> Result<Vec<drivers::dds::HostDomain>, HostError> {
    let list: Vec<(u32, Option<u64>, &Config)> =
        flows.iter().map(|f| (f.id, f.start_ns, &f.cfg)).collect();
    drivers::dds::host_plan(&list).map_err(|e| HostError::Participant {
        flow: e.flow,
        message: e.message,
    })
}

#[cfg(not(feature = "dds"))]
pub fn dds_plan(_flows: &[Flow]) -> Result<(), HostError> {
    Ok(())
}

/// True for a flow that may share a UDP receiver: a udp stream receiver with `source`.
fn shareable(cfg: &Config) -> bool {
    cfg.protocol == "udp"
        && cfg.pattern == Pattern::Stream
        && cfg.role == Role::Receiver
        && cfg.source.is_some()
}

/// The flows that share one UDP receiver (crate::host::udp_group), as groups of indices into `flows`
/// (each in flow order, the groups in the order of their first flows): the udp stream receivers
/// with a `source` on one `listen` address, with the same `options` and `start_ns`.  A `listen`
/// port 0 never groups (each such flow binds a port of its own).  Err: two UDP flows that
/// would bind one address without sharing a receiver, or two flows of one with one source.
pub fn shared_receivers(flows: &[Flow]) -> Result<Vec<Vec<usize>>, HostError> {
    use std::collections::hash_map::Entry;
    let mut by_listen: HashMap<SocketAddr, usize> = HashMap::new(); // listen -> index in groups
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut sources: HashMap<(SocketAddr, IpAddr), u32> = HashMap::new();
    for (i, f) in flows.iter().enumerate() {
        let c = &f.cfg;
        let Some(listen) = c.listen.filter(|a| c.protocol == "udp" && a.port() != 0) else {
            continue;
        };
        let err = |message: String| HostError::Shared {
            flow: f.id,
            message,
        };
        match by_listen.entry(listen) {
            Entry::Vacant(v) => {
                v.insert(groups.len());
                groups.push(vec![i]);
            }
            Entry::Occupied(o) => {
                let g = &mut groups[*o.get()];
                let j = &flows[g[0]];
                if !shareable(c) || !shareable(&j.cfg) {
                    return Err(err(format!(
                        "listen {listen} is also flow {}'s; a shared UDP receiver needs source on both",
                        j.id
                    )));
                }
                if c.options != j.cfg.options {
                    return Err(err(format!(
                        "listen {listen} is also flow {}'s, with other options; flows sharing a UDP \
                         receiver need the same options",
                        j.id
                    )));
                }
                if f.start_ns != j.start_ns {
                    return Err(err(format!(
                        "listen {listen} is also flow {}'s, with another start_ns; flows sharing a UDP \
                         receiver start together",
                        j.id
                    )));
                }
                g.push(i);
            }
        }
        if let Some(src) = c.source.filter(|_| shareable(c)) {
            if let Some(k) = sources.insert((listen, src), f.id) {
                return Err(err(format!(
                    "source {src} on listen {listen} is also flow {k}'s; each flow sharing a UDP \
                     receiver needs a source of its own"
                )));
            }
        }
    }
    Ok(groups
        .into_iter()
        .filter(|g| shareable(&flows[g[0]].cfg))
        .collect())
}
