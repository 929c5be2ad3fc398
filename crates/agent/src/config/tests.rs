//! The configuration's unit tests: every key checked, every error naming what was wrong.

use super::*;

fn base() -> serde_json::Value {
    serde_json::json!({"v":1,"role":"sender","protocol":"udp","pattern":"stream",
        "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10})
}

fn err_of(v: serde_json::Value) -> String {
    Config::parse(&v.to_string())
        .expect_err("should be refused")
        .to_string()
}

#[test]
fn a_good_config_gets_defaults() {
    let c = Config::parse(&base().to_string()).unwrap();
    assert_eq!(c.role, Role::Sender);
    assert_eq!(c.timeout_ns, 60_000_000_000);
    assert_eq!(c.linger_ns, 500_000_000);
    assert_eq!(c.report_interval_ns, 1_000_000_000);
    assert_eq!(c.peers.len(), 1);
}

fn ping_config() -> serde_json::Value {
    serde_json::json!({"v":1,"role":"pinger","protocol":"udp","pattern":"ping",
        "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10})
}

#[test]
fn the_reply_timeout_is_read_in_ms_and_defaults_to_1_s() {
    let c = Config::parse(&ping_config().to_string()).unwrap();
    assert_eq!(c.reply_timeout_ns, 1_000_000_000);
    let mut v = ping_config();
    v["reply_timeout_ms"] = 2500.into();
    assert_eq!(
        Config::parse(&v.to_string()).unwrap().reply_timeout_ns,
        2_500_000_000
    );
    v["reply_timeout_ms"] = 60_000.into(); // up to timeout_ms (default 60 s)
    assert_eq!(
        Config::parse(&v.to_string()).unwrap().reply_timeout_ns,
        60_000_000_000
    );
}

#[test]
fn a_role_with_a_short_timeout_keeps_the_default_reply_timeout_capped() {
    // a receiver (or a pinger) with timeout_ms under the 1 s default: not refused (the e2e tests' configs)
    let mut v = ping_config();
    v["timeout_ms"] = 150.into();
    assert_eq!(
        Config::parse(&v.to_string()).unwrap().reply_timeout_ns,
        150_000_000
    );
}

#[test]
fn a_reply_timeout_of_zero_or_past_the_timeout_is_refused() {
    let mut v = ping_config();
    v["reply_timeout_ms"] = 0.into();
    assert!(err_of(v).contains("at least 1 ms"));
    let mut v = ping_config();
    v["timeout_ms"] = 5000.into();
    v["reply_timeout_ms"] = 5001.into();
    let e = err_of(v);
    assert!(
        e.contains("`reply_timeout_ms` = 5001") && e.contains("at most timeout_ms (5000 ms)"),
        "{e}"
    );
    let mut v = ping_config();
    v["reply_timeout_ms"] = "2 s".into(); // milliseconds as an integer, not a duration string
    let e = err_of(v);
    assert!(e.contains("invalid type"), "{e}");
}

#[test]
fn errors_name_the_key_the_value_and_what_was_expected() {
    let mut v = base();
    v["colour"] = "red".into();
    assert!(err_of(v).contains("unknown field `colour`"));

    let mut v = base();
    v["payload_bytes"] = 8.into();
    let e = err_of(v);
    assert!(
        e.contains("`payload_bytes` = 8") && e.contains("between 32"),
        "{e}"
    );

    let mut v = base();
    v["role"] = "pinger".into();
    assert!(err_of(v).contains("sender or receiver for pattern stream"));

    let mut v = base();
    v["pattern"] = "flood".into();
    assert!(err_of(v).contains("one of stream, ping, ramp, bulk"));

    let mut v = base();
    v["duration_ms"] = 100.into();
    assert!(err_of(v).contains("give one of the two"));

    let mut v = base();
    v["rate_msgs_per_s"] = (-5.0).into();
    assert!(err_of(v).contains("`rate_msgs_per_s` = -5"));

    let mut v = base();
    v["peers"] = serde_json::json!(["nohost"]);
    assert!(err_of(v).contains("`peers[0]` = \"nohost\""));

    let mut v = base();
    v["v"] = 2.into();
    assert!(err_of(v).contains("`v` = 2"));

    let mut v = base();
    v["role"] = "receiver".into();
    assert!(err_of(v).contains("`listen` is required for role receiver"));

    assert!(Config::parse("{not json")
        .unwrap_err()
        .to_string()
        .contains("not a valid roughnet-agent object"));
}

#[test]
fn a_broker_replaces_listen_and_peers() {
    let mut v = base();
    v["peers"] = serde_json::Value::Null;
    assert!(err_of(v.clone()).contains("`peers` is required"));
    v["broker"] = "127.0.0.1:1883".into();
    v["topic"] = "roughnet/abc".into();
    let c = Config::parse(&v.to_string()).unwrap();
    assert!(c.peers.is_empty());
    assert_eq!(c.broker.as_deref(), Some("127.0.0.1:1883"));
    let mut r = base();
    r["role"] = "receiver".into();
    r["peers"] = serde_json::Value::Null;
    r["broker"] = "127.0.0.1:1883".into();
    assert!(Config::parse(&r.to_string()).unwrap().listen.is_none());
    r["broker"] = "".into();
    assert!(err_of(r).contains("`listen` is required"));
}

#[test]
fn sync_takes_a_syncer_with_listen_and_one_peer_and_a_reliable_transport() {
    let v = serde_json::json!({"v":1,"role":"syncer","protocol":"tcp","pattern":"sync",
        "listen":"127.0.0.1:9","peers":["127.0.0.1:10"],"payload_bytes":240,"bundles":5,
        "bundle_first":3,"window":2});
    let c = Config::parse(&v.to_string()).unwrap();
    assert_eq!(c.role, Role::Receiver);
    assert_eq!(c.peers.len(), 1);
    assert!(c.listen.is_some());
    let s = c.sync.unwrap();
    assert_eq!(
        (s.bundles, s.first, s.manifest_bytes, s.window),
        (5, 3, 200, 2)
    );
    assert_eq!(c.max_message_bytes(), SYNC_MAX_SUMMARY_BYTES.max(240));
    let mut w = v.clone();
    w["protocol"] = "udp".into();
    let e = err_of(w);
    assert!(e.contains("reliable transport") && e.contains("udp"), "{e}");
    let mut w = v.clone();
    w["protocol"] = "zenoh".into();
    w["options"] = serde_json::json!({"reliability": "best_effort"});
    assert!(err_of(w).contains("reliable transport"));
    let mut w = v.clone();
    w["payload_bytes"] = 64.into();
    assert!(err_of(w).contains("the bundle message size"));
    let mut w = v.clone();
    w["peers"] = serde_json::json!(["127.0.0.1:10", "127.0.0.1:11"]);
    assert!(err_of(w).contains("exactly one peer"));
    let mut w = v.clone();
    w["role"] = "sender".into();
    assert!(err_of(w).contains("syncer for pattern sync"));
    let mut w = v.clone();
    w["bundles"] = serde_json::Value::Null;
    assert!(err_of(w).contains("`bundles` is required"));
    let mut w = v;
    w["window"] = 0.into();
    assert!(err_of(w).contains("`window` = 0"));
    let mut b = base();
    b["window"] = 4.into();
    assert!(err_of(b).contains("only sync has it"));
}

#[test]
fn trace_path_is_for_stream_and_its_file_is_created_at_parse() {
    let dir = std::env::temp_dir().join(format!("roughnet-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.tx");
    std::fs::write(&path, b"old").unwrap();
    let mut v = base();
    v["trace_path"] = path.to_str().unwrap().into();
    let c = Config::parse(&v.to_string()).unwrap();
    assert_eq!(c.trace_path.as_deref(), path.to_str());
    assert!(c.trace_file.is_some());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "truncated");
    // Absent or null: no trace.
    assert!(Config::parse(&base().to_string())
        .unwrap()
        .trace_file
        .is_none());
    v["trace_path"] = serde_json::Value::Null;
    assert!(Config::parse(&v.to_string()).unwrap().trace_file.is_none());
    // A file that cannot be created is a configuration error naming the key.
    v["trace_path"] = dir.join("missing/t.tx").to_str().unwrap().into();
    let e = err_of(v.clone());
    assert!(
        e.contains("`trace_path`") && e.contains("a file this agent can create"),
        "{e}"
    );
    v["trace_path"] = "".into();
    assert!(err_of(v).contains("a file path, or null"));
    // Other patterns take none.
    let mut p = serde_json::json!({"v":1,"role":"pinger","protocol":"udp","pattern":"ping",
        "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10});
    p["trace_path"] = path.to_str().unwrap().into();
    assert!(err_of(p).contains("only stream writes traces"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn source_is_an_address_for_a_udp_stream_receiver_or_a_zenoh_receiver_or_ponger_only() {
    let mut r = base();
    r["role"] = "receiver".into();
    r["peers"] = serde_json::Value::Null;
    r["listen"] = "127.0.0.1:9".into();
    assert_eq!(Config::parse(&r.to_string()).unwrap().source, None);
    r["source"] = "127.0.0.2".into();
    assert_eq!(
        Config::parse(&r.to_string()).unwrap().source,
        Some("127.0.0.2".parse().unwrap())
    );
    r["source"] = "::ffff:10.0.0.3".into(); // IPv4-mapped: kept as the IPv4 address
    assert_eq!(
        Config::parse(&r.to_string()).unwrap().source,
        Some("10.0.0.3".parse().unwrap())
    );
    r["source"] = "fd00::3".into();
    assert!(Config::parse(&r.to_string()).unwrap().source.is_some());
    for bad in ["127.0.0.2:5000", "nohost", ""] {
        r["source"] = bad.into();
        let e = err_of(r.clone());
        assert!(
            e.contains("`source`") && e.contains("without a port"),
            "{bad}: {e}"
        );
    }
    let mut tcp = r.clone();
    tcp["source"] = "127.0.0.2".into();
    tcp["protocol"] = "tcp".into();
    let e = err_of(tcp);
    assert!(
        e.contains("`source`") && e.contains("this is a tcp stream receiver"),
        "{e}"
    );
    // zenoh: a receiver's or ponger's sender (host mode: who opens the pair's link)
    let mut z = r.clone();
    z["protocol"] = "zenoh".into();
    z["source"] = "127.0.0.2".into();
    assert!(Config::parse(&z.to_string()).unwrap().source.is_some());
    z["role"] = "ponger".into();
    z["pattern"] = "ping".into();
    assert!(Config::parse(&z.to_string()).unwrap().source.is_some());
    let mut zs = base();
    zs["protocol"] = "zenoh".into();
    zs["source"] = "127.0.0.2".into();
    let e = err_of(zs);
    assert!(
        e.contains("`source`") && e.contains("zenoh stream sender"),
        "{e}"
    );
    let mut s = base();
    s["source"] = "127.0.0.2".into();
    let e = err_of(s);
    assert!(e.contains("`source`") && e.contains("stream sender"), "{e}");
    let mut bulk = r.clone();
    bulk["source"] = "127.0.0.2".into();
    bulk["pattern"] = "bulk".into();
    let e = err_of(bulk);
    assert!(e.contains("`source`") && e.contains("bulk receiver"), "{e}");
}

#[test]
fn ramp_needs_a_step_and_a_bounded_last_size() {
    let v = serde_json::json!({"v":1,"role":"pinger","protocol":"tcp","pattern":"ramp",
        "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10});
    assert!(err_of(v.clone()).contains("`step_bytes` is required"));
    let mut w = v.clone();
    w["step_bytes"] = (MAX_MESSAGE_BYTES / 4).into();
    assert!(err_of(w).contains("last size"));
    let mut ok = v;
    ok["step_bytes"] = 100.into();
    let c = Config::parse(&ok.to_string()).unwrap();
    assert_eq!(c.max_message_bytes(), 64 + 900);
    assert_eq!(c.size_of_iteration(3), 364);
}
