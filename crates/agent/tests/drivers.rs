//! Which drivers a build has (issue 31): the `version` line reports them, and a build without a
//! driver refuses it with exit 2, naming the driver and `make build`.
//!
//! Runs in both builds: the full one (`cargo test`, default features) checks that nothing is
//! missing; the minimal one (TCP and UDP only, as `make demo` builds it) checks every refusal:
//!
//!     cargo test --release -p roughnet-agent --no-default-features --test drivers

use serde_json::{json, Value};
use std::process::Command;

const AGENT: &str = env!("CARGO_BIN_EXE_roughnet-agent");
const ALL: [&str; 8] = ["tcp", "udp", "mqtt", "kafka", "nats", "zenoh", "zmq", "dds"];

fn lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

fn version() -> Value {
    let out = Command::new(AGENT)
        .arg("version")
        .output()
        .expect("run roughnet-agent version");
    assert!(out.status.success(), "version exit {:?}", out.status);
    let v = lines(&out.stdout);
    assert_eq!(v.len(), 1, "one version line: {v:?}");
    v[0].clone()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// What a built agent says when asked to run `protocol` (a receiver: needs nothing else).
fn run_receiver(protocol: &str) -> (Option<i32>, Vec<Value>, String) {
    let cfg = json!({"v": 1, "role": "receiver", "protocol": protocol, "pattern": "stream",
                     "listen": "127.0.0.1:0", "broker": "127.0.0.1:1", "payload_bytes": 64,
                     "messages": 1});
    let out = Command::new(AGENT)
        .args(["run", "--config-json", &cfg.to_string()])
        .output()
        .expect("run roughnet-agent");
    (
        out.status.code(),
        lines(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_reports_built_and_missing_drivers() {
    let v = version();
    let built = strings(&v["protocols"]);
    let missing = strings(&v["missing"]);
    assert!(
        built.contains(&"tcp".into()) && built.contains(&"udp".into()),
        "{v}"
    );
    let mut every: Vec<String> = built.iter().chain(missing.iter()).cloned().collect();
    every.sort();
    let mut all: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    all.sort();
    assert_eq!(every, all, "built + missing = every driver: {v}");
    if cfg!(feature = "full") {
        assert_eq!(v["build"], "full", "{v}");
        assert!(missing.is_empty(), "{v}");
    } else if cfg!(not(any(
        feature = "zenoh",
        feature = "zmq",
        feature = "dds",
        feature = "mqtt",
        feature = "kafka",
        feature = "nats"
    ))) {
        assert_eq!(v["build"], "minimal", "{v}");
        assert_eq!(built, ["tcp", "udp"], "{v}");
    }
}

#[test]
fn a_missing_driver_is_refused_naming_it_and_the_make_target() {
    let missing = strings(&version()["missing"]);
    for p in &missing {
        let (code, out, stderr) = run_receiver(p);
        assert_eq!(code, Some(2), "{p}: exit {code:?}, {out:?} {stderr}");
        let err = out
            .iter()
            .find(|l| l["type"] == "error")
            .unwrap_or_else(|| panic!("{p}: no error line: {out:?}"));
        assert_eq!(err["kind"], "config", "{err}");
        let msg = err["message"].as_str().expect("message");
        assert!(msg.contains(&format!("without the {p} driver")), "{msg}");
        assert!(msg.contains("`make build`"), "{msg}");
        assert!(msg.contains(&format!("--features {p}")), "{msg}");
    }
    // An unknown protocol is not "missing": it is refused as an unknown value.
    let (code, out, _) = run_receiver("carrier-pigeon");
    assert_eq!(code, Some(2));
    let msg = out
        .iter()
        .find(|l| l["type"] == "error")
        .expect("error line")["message"]
        .to_string();
    assert!(
        msg.contains("the protocols this agent build speaks") && !msg.contains("make build"),
        "{msg}"
    );
}

#[test]
fn the_router_without_zenoh_is_refused_naming_the_driver() {
    if cfg!(feature = "zenoh") {
        return; // the router runs until SIGTERM; crates/agent/tests/brokerless.rs starts it
    }
    let out = Command::new(AGENT)
        .args(["router", "--listen", "tcp/127.0.0.1:0"])
        .output()
        .expect("run roughnet-agent router");
    assert_eq!(out.status.code(), Some(2));
    let v = lines(&out.stdout);
    let msg = v.iter().find(|l| l["type"] == "error").expect("error line")["message"].to_string();
    assert!(
        msg.contains("without the zenoh driver") && msg.contains("`make build`"),
        "{msg}"
    );
}
