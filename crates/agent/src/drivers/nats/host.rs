//! Host mode (issue 27): the host's NATS flows share one connection per server, as a car's
//! application has one NATS connection with every subscription and publication in it
//! (docs/agent-protocol.md, "One NATS connection").
//!
//! async-nats multiplexes by itself: a `Client` is a handle on one connection (clones share it),
//! each subscription has its own subscription id and queue, and the server handles one
//! connection's operations in order.  So the shared connection needs no routing of its own: each
//! flow subscribes, publishes, asks for its round trips and keeps its counts as with a connection
//! of its own; what it shares is the tokio runtime, the connection task and the connection's
//! events (a lost connection ends every flow on it; with `reconnect`, every flow reports the
//! connection's `reconnects` and `disconnected_s`).
//!
//! Which flows share: every NATS flow of the host, grouped by server address.  The connection's
//! one knob, `reconnect`, must agree across a group ([`host_plan`] refuses otherwise, naming both
//! flows); `jetstream` is per flow (a stream, consumer and inboxes of the flow's own).  The
//! connection is opened by the first flow that needs it and closed when the last flow holding
//! it ends.

use std::sync::Arc;

use async_nats::Client;

use super::{Link, Nats, NatsEndpoint};
use crate::config::Config;
use crate::drivers::host_slots::{lock, release, HostSlots, SlotRef};
use crate::drivers::{DriverError, PlanError};

/// One shared connection of the plan: a server and the flows that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostClient {
    pub broker: String,
    /// The flows sharing it, in the host object's order.
    pub flows: Vec<u32>,
}

/// The connection's knobs, which every flow on one connection must agree on.
fn connection_knobs(d: &Nats) -> [(&'static str, String); 1] {
    [("reconnect", d.opts.reconnect.to_string())]
}

/// Host mode: the shared connections of the NATS flows among `flows` ((id, configuration); other
/// protocols are skipped), one per server.  Err: two flows of one server whose `reconnect` differs.
pub fn host_plan(flows: &[(u32, &Config)]) -> Result<Vec<HostClient>, PlanError> {
    struct Group {
        plan: HostClient,
        first: u32,
        knobs: [(&'static str, String); 1],
    }
    let mut groups: Vec<Group> = Vec::new();
    for &(id, cfg) in flows {
        if cfg.protocol != "nats" {
            continue;
        }
        let Ok(d) = Nats::from_config(cfg) else {
            continue; // host::parse created every driver first: not reached
        };
        let knobs = connection_knobs(&d);
        let i = match groups.iter().position(|g| g.plan.broker == d.broker) {
            Some(i) => i,
            None => {
                let plan = HostClient {
                    broker: d.broker.clone(),
                    flows: vec![],
                };
                groups.push(Group {
                    plan,
                    first: id,
                    knobs: knobs.clone(),
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
                    "flows {} and {id}: nats options differ ({}): one connection per host and \
                     server ({}) needs the same connection knobs",
                    g.first,
                    diffs.join(", "),
                    g.plan.broker
                ),
            });
        }
        g.plan.flows.push(id);
    }
    Ok(groups.into_iter().map(|g| g.plan).collect())
}

/// A live shared connection: the runtime its task runs on, the client, its events.
pub(super) struct Shared {
    pub(super) rt: Arc<tokio::runtime::Runtime>,
    pub(super) client: Client,
    pub(super) link: Arc<Link>,
}

/// Host mode's shared connections by server (empty in `run` mode: every flow has its own).
static HOST_CLIENTS: HostSlots<HostClient, Arc<Shared>> = HostSlots::new();

/// Host mode, before any flow starts: from now on the NATS flows of each planned connection
/// share it, opened by the first flow that needs it and closed when the last flow holding it ends.
pub fn install_host_clients(plan: Vec<HostClient>) {
    HOST_CLIENTS.install(plan.into_iter().map(|p| (p.broker.clone(), p)));
}

/// A flow's hold on its host's connection; the last hold dropped closes it.
pub(super) struct Hold {
    slot: SlotRef<HostClient, Arc<Shared>>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        release(&self.slot, |plan, _| {
            tracing::info!(server = %plan.broker, "closed the host's nats connection");
        });
    }
}

/// The host's connection for a flow of `d` (connecting it if no flow holds it), or None outside
/// host mode (or for a server no plan names: not reached).
pub(super) fn hold(d: &Nats, cfg: &Config) -> Result<Option<(Hold, Arc<Shared>)>, DriverError> {
    let Some(slot) = HOST_CLIENTS.find(&d.broker) else {
        return Ok(None);
    };
    // Locked while the first flow connects: the others wait for that connection, not one each.
    let mut s = lock(&slot);
    let shared = match s.live.as_ref().filter(|c| !c.link.is_lost()) {
        Some(c) => c.clone(),
        None => {
            let rt = Arc::new(NatsEndpoint::runtime(&d.broker)?);
            let link = Arc::new(Link::new(d.opts.reconnect));
            let name = format!("roughnet-nats-host-{}", std::process::id());
            let client = NatsEndpoint::connect(&rt, d, cfg, &name, link.clone())?;
            tracing::info!(
                flows = s.plan.flows.len(),
                server = %d.broker,
                "opened the host's nats connection"
            );
            let c = Arc::new(Shared { rt, client, link });
            s.live = Some(c.clone());
            c
        }
    };
    s.holders += 1;
    drop(s);
    Ok(Some((Hold { slot }, shared)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(role: &str, broker: &str, options: serde_json::Value) -> Config {
        let v = serde_json::json!({"v":1,"role":role,"protocol":"nats","pattern":"stream",
            "broker":broker,"payload_bytes":64,"messages":10,"options":options});
        Config::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn flows_share_one_connection_per_server() {
        let a = cfg("sender", "10.0.0.1:4222", serde_json::json!({}));
        let b = cfg(
            "receiver",
            "10.0.0.1:4222",
            serde_json::json!({"jetstream": false}),
        );
        let c = cfg("receiver", "10.0.0.2:4222", serde_json::json!({}));
        let mut udp = cfg("receiver", "10.0.0.1:4222", serde_json::json!({}));
        udp.protocol = "udp".into();
        let plan = host_plan(&[(0, &a), (1, &b), (2, &c), (3, &udp)]).unwrap();
        assert_eq!(
            plan,
            vec![
                HostClient {
                    broker: "10.0.0.1:4222".into(),
                    flows: vec![0, 1]
                },
                HostClient {
                    broker: "10.0.0.2:4222".into(),
                    flows: vec![2]
                },
            ]
        );
    }

    #[test]
    fn a_differing_reconnect_is_refused_naming_both_flows() {
        let a = cfg("sender", "10.0.0.1:4222", serde_json::json!({}));
        let b = cfg(
            "receiver",
            "10.0.0.1:4222",
            serde_json::json!({"reconnect": true}),
        );
        let e = host_plan(&[(4, &a), (7, &b)]).unwrap_err();
        assert_eq!(e.flow, 7);
        assert!(
            e.message.contains("flows 4 and 7")
                && e.message.contains("reconnect false and true")
                && e.message.contains("10.0.0.1:4222"),
            "{}",
            e.message
        );
        // The same knob on another server is another connection: no conflict.
        let c = cfg(
            "receiver",
            "10.0.0.2:4222",
            serde_json::json!({"reconnect": true}),
        );
        assert_eq!(host_plan(&[(4, &a), (7, &c)]).unwrap().len(), 2);
    }
}
