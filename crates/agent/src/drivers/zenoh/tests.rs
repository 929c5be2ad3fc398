//! The zenoh driver's unit tests (host plans, keys, options).

use super::*;

fn c(v: serde_json::Value) -> Config {
    Config::parse(&v.to_string()).unwrap()
}

fn rx(listen: &str, source: Option<&str>, o: serde_json::Value) -> Config {
    c(
        serde_json::json!({"v":1,"role":"receiver","protocol":"zenoh","pattern":"stream",
        "listen":listen,"source":source,"payload_bytes":64,"messages":10,"options":o}),
    )
}

fn tx(peers: &[&str], o: serde_json::Value) -> Config {
    c(
        serde_json::json!({"v":1,"role":"sender","protocol":"zenoh","pattern":"stream",
        "peers":peers,"payload_bytes":64,"messages":10,"options":o}),
    )
}

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn a_host_session_listens_once_and_opens_one_link_per_pair_of_hosts() {
    // This host is .2: it sends to .1, .3 and .4 and receives from .1, .3 and .5.
    let none = serde_json::json!({});
    let udp = c(
        serde_json::json!({"v":1,"role":"receiver","protocol":"udp","pattern":"stream",
        "listen":"127.0.0.2:9","payload_bytes":64,"messages":10}),
    );
    let flows = [
        rx("127.0.0.2:7201", Some("127.0.0.1"), none.clone()),
        (udp),
        rx("127.0.0.2:7201", Some("127.0.0.3"), none.clone()),
        rx("127.0.0.2:7201", Some("127.0.0.5"), none.clone()),
        tx(
            &["127.0.0.1:7201", "127.0.0.3:7201", "127.0.0.4:7201"],
            none.clone(),
        ),
    ];
    let list: Vec<(u32, &Config)> = flows
        .iter()
        .enumerate()
        .map(|(i, f)| (i as u32, f))
        .collect();
    let plan = host_plan(&list).unwrap().unwrap();
    assert_eq!(plan.flows, vec![0, 2, 3, 4]);
    assert_eq!(plan.listen, vec![a("127.0.0.2:7201")]);
    // .1 sends to us too and is lower: it opens that link; .3 (both ways, higher) and .4 (only
    // our flow) are ours to open; .5 opens its own (we have no flow to it).
    assert_eq!(plan.connect, vec![a("127.0.0.3:7201"), a("127.0.0.4:7201")]);
}

#[test]
fn without_sources_every_peer_is_connected_and_without_zenoh_there_is_no_session() {
    let none = serde_json::json!({});
    let flows = [
        rx("127.0.0.2:7201", None, none.clone()),
        tx(&["127.0.0.1:7201"], none.clone()),
    ];
    let list: Vec<(u32, &Config)> = flows
        .iter()
        .enumerate()
        .map(|(i, f)| (i as u32, f))
        .collect();
    assert_eq!(
        host_plan(&list).unwrap().unwrap().connect,
        vec![a("127.0.0.1:7201")]
    );
    let scouted = [tx(
        &["127.0.0.1:7201"],
        serde_json::json!({"multicast_scouting": true}),
    )];
    assert!(host_plan(&[(0, &scouted[0])])
        .unwrap()
        .unwrap()
        .connect
        .is_empty());
    let udp = c(
        serde_json::json!({"v":1,"role":"sender","protocol":"udp","pattern":"stream",
        "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10}),
    );
    assert_eq!(host_plan(&[(0, &udp)]).unwrap(), None);
}

#[test]
fn flows_whose_session_knobs_differ_are_refused_naming_both_and_the_keys() {
    let r = rx(
        "127.0.0.2:7201",
        None,
        serde_json::json!({"lease": 2_000_000_000u64}),
    );
    let t = tx(
        &["127.0.0.1:7201"],
        serde_json::json!({"transport": "udp", "reliability": "best_effort"}),
    );
    let e = host_plan(&[(4, &r), (9, &t)]).unwrap_err();
    assert_eq!(e.flow, 9);
    assert!(e.message.contains("flows 4 and 9"), "{}", e.message);
    assert!(
        e.message.contains("options.transport tcp and udp"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("options.lease 2000 ms and default"),
        "{}",
        e.message
    );
    // publisher and subscriber knobs may differ
    assert!(!e.message.contains("reliability"), "{}", e.message);
}
