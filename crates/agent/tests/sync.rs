//! The sync pattern end to end over loopback: two `syncer` agents reconcile
//! their bundle stores over tcp (and over mosquitto / zenoh when this build and
//! machine have them).  Properties only: every bundle arrives exactly once,
//! byte counts agree between the two sides, the window is respected, a fixed
//! window ends the run; no wall-clock bounds.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_roughnet-agent");

struct Running {
    child: Child,
    out: BufReader<ChildStdout>,
    lines: Vec<Value>,
}

fn start(cfg: &Value) -> Running {
    let mut child = Command::new(AGENT)
        .args(["run", "--config-json", &cfg.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn roughnet-agent");
    let out = BufReader::new(child.stdout.take().expect("piped stdout"));
    Running {
        child,
        out,
        lines: Vec::new(),
    }
}

impl Running {
    fn next_line(&mut self) -> Option<Value> {
        let mut s = String::new();
        if self.out.read_line(&mut s).expect("read stdout") == 0 {
            return None;
        }
        let v: Value =
            serde_json::from_str(&s).unwrap_or_else(|e| panic!("not a JSON line ({e}): {s}"));
        self.lines.push(v.clone());
        Some(v)
    }

    fn ready(&mut self) {
        while let Some(l) = self.next_line() {
            if l["type"] == "ready" {
                assert_eq!(l["role"], "syncer");
                return;
            }
        }
        panic!("syncer ended before ready: {:?}", self.lines);
    }

    /// (exit code, the result line or the error line)
    fn finish(mut self) -> (i32, Value) {
        while self.next_line().is_some() {}
        let code = self.child.wait().expect("wait").code().unwrap_or(-1);
        let last = self
            .lines
            .iter()
            .rev()
            .find(|l| l["type"] == "result" || l["type"] == "error")
            .cloned()
            .unwrap_or(Value::Null);
        (code, last)
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const OVERHEAD: u64 = 40; // header 32 + kind, padding, id

fn syncer(protocol: &str, bundles: u64, first: u64, window: u64, extra: &Value) -> Value {
    let manifest = 200;
    let mut v = json!({"v":1,"role":"syncer","protocol":protocol,"pattern":"sync",
        "payload_bytes": OVERHEAD + manifest, "bundles": bundles, "bundle_first": first,
        "manifest_bytes": manifest, "window": window, "timeout_ms": 60_000,
        "report_interval_ms": 0, "seed": 11});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// Two syncers over point-to-point addresses; (result a, result b).
fn p2p(protocol: &str, a: Value, b: Value) -> (Value, Value) {
    let (pa, pb) = (free_port(), free_port());
    let mut a = a;
    let mut b = b;
    a["listen"] = json!(format!("127.0.0.1:{pa}"));
    a["peers"] = json!([format!("127.0.0.1:{pb}")]);
    b["listen"] = json!(format!("127.0.0.1:{pb}"));
    b["peers"] = json!([format!("127.0.0.1:{pa}")]);
    let _ = protocol;
    both(a, b)
}

fn both(a: Value, b: Value) -> (Value, Value) {
    let mut ra = start(&a);
    ra.ready();
    let rb = start(&b);
    let (cb, res_b) = rb.finish();
    let (ca, res_a) = ra.finish();
    assert_eq!((ca, cb), (0, 0), "exit codes; results {res_a} / {res_b}");
    assert_eq!(res_a["type"], "result", "{res_a}");
    assert_eq!(res_b["type"], "result", "{res_b}");
    (res_a, res_b)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} is not an integer in {v}"))
}

/// Both sides hold the union and each bundle crossed once.
fn check_full_sync(a: &Value, b: &Value, na: u64, nb: u64, shared: u64) {
    let union = na + nb - shared;
    for (r, got) in [(a, nb - shared), (b, na - shared)] {
        assert_eq!(r["end_reason"], "complete", "{r}");
        assert_eq!(r["full_sync"], true, "{r}");
        assert_eq!(u(r, "bundles_held"), union, "{r}");
        assert_eq!(u(r, "bundles_received"), got, "{r}");
        assert_eq!(u(r, "duplicates"), 0, "{r}");
        assert_eq!(u(r, "bad_bundles"), 0, "{r}");
        assert_eq!(u(r, "bad_messages"), 0, "{r}");
        assert_eq!(u(r, "goodput_bytes"), got * 200, "{r}");
        assert!(r["time_to_full_sync_s"].as_f64().is_some(), "{r}");
        assert!(u(r, "in_flight_max") <= u(r, "window"), "{r}");
    }
    // Nothing sent twice, nothing lost: what one side sent the other received.
    assert_eq!(u(a, "bundles_sent"), u(b, "bundles_received"));
    assert_eq!(u(b, "bundles_sent"), u(a, "bundles_received"));
}

#[test]
fn tcp_disjoint_stores_reach_full_sync() {
    let (a, b) = p2p(
        "tcp",
        syncer("tcp", 60, 0, 4, &json!({})),
        syncer("tcp", 40, 60, 4, &json!({})),
    );
    check_full_sync(&a, &b, 60, 40, 0);
    // Over one TCP connection per direction the application byte counts agree exactly.
    assert_eq!(u(&a, "bytes_sent"), u(&b, "bytes_received"), "{a}\n{b}");
    assert_eq!(u(&b, "bytes_sent"), u(&a, "bytes_received"), "{a}\n{b}");
    // Overhead: headers, ids and summaries on top of the 200-byte manifests.
    let o = a["overhead_ratio"].as_f64().unwrap();
    assert!(o > 1.0 && o < 2.0, "overhead ratio {o}");
    assert!(u(&a, "in_flight_max") > 1, "a window of 4 was used: {a}");
    assert_eq!(a["bundle_latency"]["count"], 40);
}

#[test]
fn tcp_overlapping_stores_exchange_only_the_difference() {
    let (a, b) = p2p(
        "tcp",
        syncer("tcp", 50, 0, 1, &json!({})),
        syncer("tcp", 50, 30, 1, &json!({})),
    );
    check_full_sync(&a, &b, 50, 50, 20);
    assert_eq!(u(&a, "in_flight_max"), 1);
    // With one bundle in flight every bundle waits for its acknowledgement.
    assert!(u(&b, "summaries_sent") >= u(&a, "bundles_sent"), "{b}");
}

#[test]
fn tcp_identical_stores_are_in_sync_after_the_summaries() {
    let (a, b) = p2p(
        "tcp",
        syncer("tcp", 30, 0, 2, &json!({})),
        syncer("tcp", 30, 0, 2, &json!({})),
    );
    check_full_sync(&a, &b, 30, 30, 30);
    assert_eq!(u(&a, "bundles_sent"), 0);
    assert!(a["overhead_ratio"].is_null());
}

#[test]
fn a_fixed_window_ends_the_sync_before_it_is_complete() {
    // Far more than a 100 ms window can carry with one bundle in flight.
    let w = json!({"duration_ms": 100});
    let (a, b) = p2p(
        "tcp",
        syncer("tcp", 1_000_000, 0, 1, &w),
        syncer("tcp", 1_000_000, 1_000_000, 1, &w),
    );
    for r in [&a, &b] {
        assert!(
            r["end_reason"] == "window" || r["end_reason"] == "peer_ended",
            "{r}"
        );
        assert_eq!(r["full_sync"], false, "{r}");
        assert!(r["time_to_full_sync_s"].is_null());
        assert!(u(r, "bundles_received") < 1_000_000);
        assert!(u(r, "bundles_received") > 0, "something moved in 100 ms: {r}");
        assert_eq!(u(r, "duplicates"), 0);
    }
    // A bundle is received at most once for each time it was sent.
    assert!(u(&a, "bundles_received") <= u(&b, "bundles_sent"));
    assert!(u(&b, "bundles_received") <= u(&a, "bundles_sent"));
}

#[test]
fn udp_and_bad_sizes_are_refused_as_configuration_errors() {
    let mut v = syncer("udp", 10, 0, 1, &json!({}));
    v["listen"] = json!("127.0.0.1:9");
    v["peers"] = json!(["127.0.0.1:10"]);
    let (code, err) = start(&v).finish();
    assert_eq!(code, 2, "{err}");
    assert_eq!(err["kind"], "config");
    let m = err["message"].as_str().unwrap();
    assert!(m.contains("reliable transport") && m.contains("udp"), "{m}");
    let mut v = syncer("tcp", 10, 0, 1, &json!({"payload_bytes": 100}));
    v["listen"] = json!("127.0.0.1:9");
    v["peers"] = json!(["127.0.0.1:10"]);
    let (code, err) = start(&v).finish();
    assert_eq!(code, 2, "{err}");
    assert!(err["message"].as_str().unwrap().contains("bundle message size"));
}

fn speaks(protocol: &str) -> bool {
    let out = Command::new(AGENT).arg("version").output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["protocols"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == protocol)
}

#[test]
fn zenoh_reliable_peers_reach_full_sync() {
    if !speaks("zenoh") {
        eprintln!("SKIP zenoh_reliable_peers_reach_full_sync: this agent build has no zenoh");
        return;
    }
    let o = json!({"options": {"reliability": "reliable"}});
    let mut a = syncer("zenoh", 30, 0, 4, &o);
    let mut b = syncer("zenoh", 30, 30, 4, &o);
    a["topic"] = json!("rn-sync-test/a");
    a["peer_topic"] = json!("rn-sync-test/b");
    b["topic"] = json!("rn-sync-test/b");
    b["peer_topic"] = json!("rn-sync-test/a");
    let (a, b) = p2p("zenoh", a, b);
    check_full_sync(&a, &b, 30, 30, 0);
}

/// A mosquitto on a free loopback port, ended by pid when dropped.
struct Mosquitto {
    child: Child,
    dir: std::path::PathBuf,
    addr: String,
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn mosquitto() -> Option<Mosquitto> {
    let bin = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    let dir = std::env::temp_dir().join(format!("rn-sync-{}-mosquitto", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"),
    )
    .unwrap();
    let child = Command::new(bin)
        .args(["-c", conf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mosquitto");
    let m = Mosquitto {
        child,
        dir,
        addr: format!("127.0.0.1:{port}"),
    };
    let t = Instant::now();
    while std::net::TcpStream::connect(&m.addr).is_err() {
        assert!(t.elapsed() < Duration::from_secs(30), "mosquitto did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(m)
}

#[test]
fn mqtt_qos1_through_mosquitto_reaches_full_sync() {
    if !speaks("mqtt") {
        eprintln!("SKIP mqtt_qos1_through_mosquitto_reaches_full_sync: this agent build has no mqtt");
        return;
    }
    let Some(m) = mosquitto() else {
        eprintln!("SKIP mqtt_qos1_through_mosquitto_reaches_full_sync: mosquitto is not installed");
        return;
    };
    let o = json!({"options": {"qos": 1}, "broker": m.addr});
    let mut a = syncer("mqtt", 40, 0, 4, &o);
    let mut b = syncer("mqtt", 25, 30, 4, &o);
    a["topic"] = json!("rn-sync-test/a");
    a["peer_topic"] = json!("rn-sync-test/b");
    b["topic"] = json!("rn-sync-test/b");
    b["peer_topic"] = json!("rn-sync-test/a");
    let (a, b) = both(a, b);
    check_full_sync(&a, &b, 40, 25, 10);
    // qos 0 is at most once: refused.
    let mut q0 = syncer("mqtt", 5, 0, 1, &json!({"options": {"qos": 0}, "broker": m.addr}));
    q0["topic"] = json!("x");
    let (code, err) = start(&q0).finish();
    assert_eq!(code, 2, "{err}");
}
