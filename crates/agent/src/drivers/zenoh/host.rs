//! Host mode: the one zenoh session every zenoh flow of a process shares (`host_plan` at parse time,
//! `install_host_session`, each flow's hold on it).

use super::*;

/// Host mode: the one zenoh session every zenoh flow of the process shares (a car runs one
/// session with many publishers and subscribers, not one per flow).  It listens on every
/// receiver's and ponger's `listen` address and opens one link per pair of hosts: to each peer of
/// a sender or pinger, unless a receiver or ponger of this process has that peer as its `source`
/// (the pair has flows both ways) and its own `listen` IP is the higher one, in which case the
/// peer opens it.  Gossip is off in this session, so the links are exactly these (zenoh keeps one
/// link per pair of sessions; a second open would be refused and retried).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSession {
    /// The flows sharing it, in the host object's order.
    pub flows: Vec<u32>,
    pub listen: Vec<SocketAddr>,
    pub connect: Vec<SocketAddr>,
}

/// Host mode: the shared session of the zenoh flows among `flows` ((id, configuration); the
/// others are skipped); None without zenoh flows.  Err: a flow whose session knobs differ from
/// the first zenoh flow's (one session cannot be configured both ways), naming both flows and
/// every key.
pub fn host_plan(flows: &[(u32, &Config)]) -> Result<Option<HostSession>, PlanError> {
    let mut first: Option<(u32, Vec<(&'static str, String)>)> = None;
    let mut plan = HostSession {
        flows: vec![],
        listen: vec![],
        connect: vec![],
    };
    let mut outgoing: Vec<SocketAddr> = Vec::new();
    let mut incoming: HashMap<IpAddr, IpAddr> = HashMap::new(); // source -> our listen IP
    for &(id, cfg) in flows {
        if cfg.protocol != "zenoh" {
            continue;
        }
        let Ok(z) = Zenoh::from_config(cfg) else {
            continue; // host::parse created every driver first: not reached
        };
        let knobs = z.session_knobs();
        match &first {
            None => first = Some((id, knobs)),
            Some((f, k)) => {
                let diffs = crate::drivers::knob_diffs(k, &knobs);
                if !diffs.is_empty() {
                    return Err(PlanError {
                        flow: id,
                        message: format!(
                            "flows {f} and {id}: zenoh options differ ({}): one session per host \
                             needs the same session knobs",
                            diffs.join(", ")
                        ),
                    });
                }
            }
        }
        plan.flows.push(id);
        match cfg.role {
            Role::Receiver | Role::Ponger => {
                if let Some(l) = cfg.listen {
                    if !plan.listen.contains(&l) {
                        plan.listen.push(l);
                    }
                    if let Some(src) = cfg.source {
                        incoming.insert(src.to_canonical(), l.ip().to_canonical());
                    }
                }
            }
            Role::Sender | Role::Pinger => {
                for p in &cfg.peers {
                    if !outgoing.contains(p) {
                        outgoing.push(*p);
                    }
                }
            }
        }
    }
    if first.is_none() {
        return Ok(None);
    }
    if !z_scouting(flows) {
        plan.connect = outgoing
            .into_iter()
            .filter(|p| {
                let ip = p.ip().to_canonical();
                incoming.get(&ip).is_none_or(|mine| *mine < ip)
            })
            .collect();
    }
    Ok(Some(plan))
}

/// Whether the zenoh flows find each other by multicast scouting (then nothing is connected).
fn z_scouting(flows: &[(u32, &Config)]) -> bool {
    flows
        .iter()
        .filter(|(_, c)| c.protocol == "zenoh")
        .filter_map(|(_, c)| Zenoh::from_config(c).ok())
        .any(|z| z.scouting || z.mode == Mode::Client)
}

/// The shared session and, once a flow opened it, the session itself with the number of flows
/// holding it and of flows that have held it.
struct SessionSlot {
    plan: HostSession,
    live: Option<Session>,
    holders: usize,
    /// Holds given so far: the session stays open until every planned flow has had one.
    opened: usize,
}

static HOST_SESSION: Mutex<Option<SessionSlot>> = Mutex::new(None);

fn host_registry() -> MutexGuard<'static, Option<SessionSlot>> {
    HOST_SESSION.lock().unwrap_or_else(|p| p.into_inner())
}

/// Host mode, before any flow starts: from now on the zenoh flows share one session, opened by
/// the first flow that needs it and closed when the last flow holding it ends.
pub fn install_host_session(plan: Option<HostSession>) {
    *host_registry() = plan.map(|plan| SessionSlot {
        plan,
        live: None,
        holders: 0,
        opened: 0,
    });
}

/// A flow's hold on the shared session.  The last hold closes it once every planned flow has
/// held it (under the registry's lock), so a flow that starts after the others ended (a sender
/// whose receivers gave up while a large fleet got ready) finds the session open: a second
/// session on the same listen addresses would be refused while zenoh still closes the first
/// (seen at 100 cars: "Address already in use" after "close operation timed out").
pub struct HostHold(());

impl Drop for HostHold {
    fn drop(&mut self) {
        let mut reg = host_registry();
        if let Some(slot) = reg.as_mut() {
            slot.holders = slot.holders.saturating_sub(1);
            if slot.holders == 0 && slot.opened >= slot.plan.flows.len() {
                drop(slot.live.take()); // the last clone: the session closes
            }
        }
    }
}

/// The shared session for a flow of `z` (opening it if no flow holds it), or None outside host
/// mode.
pub(super) fn hold_host_session(
    z: &Zenoh,
    cfg: &Config,
) -> Result<Option<(Session, Option<HostHold>)>, DriverError> {
    let mut reg = host_registry();
    let Some(slot) = reg.as_mut() else {
        return Ok(None);
    };
    let session = match &slot.live {
        Some(s) => s.clone(),
        None => {
            let s = z.open_session(cfg, &slot.plan.listen, &slot.plan.connect, false)?;
            tracing::info!(
                flows = slot.plan.flows.len(),
                listen = ?slot.plan.listen,
                connect = ?slot.plan.connect,
                "opened the host's zenoh session"
            );
            slot.live = Some(s.clone());
            s
        }
    };
    slot.holders += 1;
    slot.opened += 1;
    Ok(Some((session, Some(HostHold(())))))
}
