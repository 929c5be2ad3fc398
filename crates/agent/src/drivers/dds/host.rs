//! Host mode: the DDS flows of a process share one Cyclone domain and participant per domain id
//! (`host_plan` at parse time, `install_host_domains`, each flow's `DomainHandle`).

use super::*;

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
        diff(
            "domain_id",
            self.domain_id.to_string(),
            other.domain_id.to_string(),
        );
        diff(
            "multicast",
            self.multicast.to_string(),
            other.multicast.to_string(),
        );
        diff("ros2", self.ros2.to_string(), other.ros2.to_string());
        diff("batch", batch(self.batch), batch(other.batch));
        diff(
            "participant_index",
            index(self.participant_index),
            index(other.participant_index),
        );
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
        match plans
            .iter_mut()
            .find(|p| p.knobs.domain_id == knobs.domain_id)
        {
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
pub(super) struct Slot {
    pub(super) plan: HostDomain,
    pub(super) live: Option<Arc<Domain>>,
}

/// Host mode's shared domains (empty in `run` mode: every flow makes its own).
static HOST_DOMAINS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

pub(super) fn registry() -> MutexGuard<'static, Vec<Slot>> {
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
    pub(super) dom: Option<Arc<Domain>>,
    pub(super) shared: bool,
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
