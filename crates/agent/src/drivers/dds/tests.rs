//! The dds driver's unit tests (options, ROS 2 names, Cyclone's XML, host plans).

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
        m.contains("<General>") && m.contains("<MaxMessageSize>8192B</MaxMessageSize></General>"),
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
    assert_eq!(
        dds(serde_json::json!({"ros2": true})).unwrap().qos.depth,
        10
    );
    let be = dds(serde_json::json!({"ros2": true, "reliability": "best_effort"})).unwrap();
    assert_eq!(be.qos.depth, 10);
    let set = dds(serde_json::json!({"ros2": true, "history_depth": 0})).unwrap();
    assert_eq!(set.qos.depth, 0);
    assert_eq!(dds(serde_json::json!({})).unwrap().qos.depth, 0);
    assert_eq!(
        dds(serde_json::json!({"reliability": "best_effort"}))
            .unwrap()
            .qos
            .depth,
        1
    );
}

#[test]
fn fixed_index_names_one_port_per_peer() {
    let ip: IpAddr = "198.18.0.2".parse().unwrap();
    let f = |index, domain| {
        Some(FixedIndex {
            index,
            domain,
            prune_s: 70,
        })
    };
    let x = cyclone_xml(&[], &[ip, ip], false, None, None, f(103, 0));
    assert!(
        x.contains("<ParticipantIndex>103</ParticipantIndex>"),
        "{x}"
    );
    assert!(
        x.contains("<InitialLocatorPruneDelay>70s</InitialLocatorPruneDelay>"),
        "{x}"
    );
    assert!(!x.contains("MaxAutoParticipantIndex"), "{x}");
    let auto = cyclone_xml(&[], &[ip], false, None, None, None);
    assert!(
        auto.contains("<ParticipantIndex>auto") && !auto.contains("InitialLocatorPruneDelay"),
        "{auto}"
    );
    // 7400 + 10 + 2 x 103, once
    assert_eq!(
        x.matches("<Peer address=\"198.18.0.2:7616\"/>").count(),
        1,
        "{x}"
    );
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
        c(
            serde_json::json!({"v":1,"role":"receiver","protocol":"dds","pattern":"stream",
            "listen":listen,"payload_bytes":64,"messages":10,"timeout_ms":40_000,"options":o}),
        )
    };
    let tx = |peers: &[&str], o: serde_json::Value| {
        c(
            serde_json::json!({"v":1,"role":"sender","protocol":"dds","pattern":"stream",
            "peers":peers,"payload_bytes":64,"messages":10,"timeout_ms":40_000,"options":o}),
        )
    };
    let udp = c(
        serde_json::json!({"v":1,"role":"receiver","protocol":"udp","pattern":"stream",
        "listen":"127.0.0.1:9","payload_bytes":64,"messages":10}),
    );
    let idx = serde_json::json!({"participant_index": 100});
    let (r1, r2) = (
        rx("127.0.0.2:5000", idx.clone()),
        rx("127.0.0.3:5001", idx.clone()),
    );
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
    assert_eq!(
        plans[0].ifaces,
        vec![ip("127.0.0.2"), ip("127.0.0.3"), ip("127.0.0.1")]
    );
    assert_eq!(plans[0].peers, vec![ip("127.0.0.4"), ip("127.0.0.5")]);
    assert_eq!(
        plans[0].prune_s,
        100 + 40 + 30,
        "the longest flow's life, and 30 s"
    );
    assert_eq!(plans[1].flows, vec![6]);
    assert_eq!(plans[1].knobs.domain_id, 3);
    assert!(
        plans[1].ifaces.is_empty() && plans[1].peers.is_empty(),
        "{:?}",
        plans[1]
    );
    let e = host_plan(&[
        (1, None, &r1),
        (
            9,
            None,
            &rx(
                "127.0.0.2:6000",
                serde_json::json!({"participant_index": 101, "ros2": true}),
            ),
        ),
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
    assert_eq!(
        dds(serde_json::json!({"participant_index": 3}))
            .unwrap()
            .participant_index,
        Some(3)
    );
    // 7411 + 2 x 29062 = 65535 fits in domain 0; one more does not, and in domain 232 far less.
    assert!(dds(serde_json::json!({"participant_index": 29062})).is_ok());
    for bad in [
        serde_json::json!({"participant_index": 29063}),
        serde_json::json!({"participant_index": 100, "domain_id": 232}),
    ] {
        let e = dds(bad).err().expect("refused").to_string();
        assert!(
            e.contains("options.participant_index") && e.contains("65536"),
            "{e}"
        );
    }
    let e = dds(serde_json::json!({"participant_index": 40000}))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("options.participant_index") && e.contains("65536"),
        "{e}"
    );
}
