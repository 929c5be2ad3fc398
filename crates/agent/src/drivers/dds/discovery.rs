//! How a participant finds its peers: Cyclone's configuration (interfaces, unicast peers, a fixed
//! participant index and its discovery port) and which interface and peers a flow uses.

use super::*;

/// The local address the kernel would use towards `peer` (no packet is sent).
pub(super) fn local_ip_towards(peer: &SocketAddr) -> Option<IpAddr> {
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
            x.push_str(&format!(
                "<InitialLocatorPruneDelay>{}s</InitialLocatorPruneDelay>",
                f.prune_s
            ));
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
pub(super) fn flow_endpoints(cfg: &Config) -> (Option<IpAddr>, Vec<IpAddr>) {
    let (iface, peers) = match cfg.role {
        Role::Receiver | Role::Ponger => (cfg.listen.map(|l| l.ip()), vec![]),
        Role::Sender | Role::Pinger => (
            cfg.peers.first().and_then(local_ip_towards),
            cfg.peers.iter().map(|p| p.ip()).collect(),
        ),
    };
    (iface.filter(|ip| !ip.is_unspecified()), peers)
}
