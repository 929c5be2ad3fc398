//! End to end over loopback for the brokerless protocols (zenoh, zmq, dds): the
//! built binary as receiver/ponger and sender/pinger, every pattern, checking
//! the JSON lines it prints.  Properties only (counts, consistency); no
//! wall-clock bounds.  Each test uses its own topic so parallel tests (and the
//! DDS domain they share on loopback) do not see each other's traffic.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

const AGENT: &str = env!("CARGO_BIN_EXE_roughnet-agent");

struct Running {
    child: Child,
    out: BufReader<ChildStdout>,
    lines: Vec<Value>,
}

fn spawn(args: &[&str]) -> Running {
    let mut child = Command::new(AGENT)
        .args(args)
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

fn start(cfg: &Value) -> Running {
    spawn(&["run", "--config-json", &cfg.to_string()])
}

impl Running {
    fn ready(&mut self) -> String {
        loop {
            let l = self.next_line().expect("agent ended before printing ready");
            if l["type"] == "ready" {
                return l["listen"].as_str().expect("listen").to_string();
            }
        }
    }

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

    fn finish(mut self) -> (i32, Vec<Value>) {
        while self.next_line().is_some() {}
        let st = self.child.wait().expect("wait");
        (st.code().unwrap_or(-1), self.lines)
    }

    fn terminate(mut self) -> i32 {
        // SAFETY: our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        while self.next_line().is_some() {}
        self.child.wait().expect("wait").code().unwrap_or(-1)
    }
}

fn result_of(lines: &[Value]) -> Value {
    let r: Vec<&Value> = lines.iter().filter(|l| l["type"] == "result").collect();
    assert_eq!(r.len(), 1, "exactly one result line expected in {lines:?}");
    r[0].clone()
}

fn topic(name: &str) -> String {
    format!("roughnet/t{}_{name}", std::process::id())
}

fn cfg(role: &str, protocol: &str, pattern: &str, name: &str, extra: Value) -> Value {
    let mut c = json!({"v":1, "role": role, "protocol": protocol, "pattern": pattern,
                       "payload_bytes": 200, "timeout_ms": 30_000, "report_interval_ms": 0,
                       "topic": topic(name)});
    if matches!(role, "receiver" | "ponger") {
        c["listen"] = json!("127.0.0.1:0");
    }
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

/// `n` listeners, then one connector to all of them; (listener results, connector result).
fn run_set(listeners: Vec<Value>, connector: Value) -> (Vec<Value>, Value) {
    let mut ls: Vec<Running> = listeners.iter().map(start).collect();
    let addrs: Vec<String> = ls.iter_mut().map(|l| l.ready()).collect();
    let mut c = connector;
    if c.get("broker").is_none() {
        c["peers"] = json!(addrs);
    }
    let (c_code, c_lines) = start(&c).finish();
    assert_eq!(c_code, 0, "connector exit code; lines {c_lines:?}");
    let rs = ls
        .into_iter()
        .map(|l| {
            let (code, lines) = l.finish();
            assert_eq!(code, 0, "listener exit code; lines {lines:?}");
            result_of(&lines)
        })
        .collect();
    (rs, result_of(&c_lines))
}

fn pair(listener: Value, connector: Value) -> (Value, Value) {
    let (mut l, c) = run_set(vec![listener], connector);
    (l.remove(0), c)
}

fn stream_1000(protocol: &str, name: &str, opts: Value) {
    let extra = json!({"messages": 1000, "warmup": 10, "options": opts});
    let (rx, tx) = pair(
        cfg("receiver", protocol, "stream", name, extra.clone()),
        cfg("sender", protocol, "stream", name, extra),
    );
    assert_eq!(tx["sent"], 1000, "{tx}");
    assert_eq!(rx["received"], 1000, "{rx}");
    assert_eq!(rx["lost"], 0, "{rx}");
    assert_eq!(rx["duplicates"], 0, "{rx}");
    assert_eq!(rx["complete"], true, "{rx}");
    assert_eq!(rx["bad_messages"], 0, "{rx}");
    assert_eq!(rx["latency_actual"]["count"], 1000, "{rx}");
    assert!(rx["latency_actual"]["p50_us"].as_f64().unwrap() > 0.0);
}

fn ping_100(protocol: &str, name: &str, opts: Value) {
    let extra = json!({"messages": 100, "warmup": 5, "options": opts});
    let (po, pi) = pair(
        cfg("ponger", protocol, "ping", name, extra.clone()),
        cfg("pinger", protocol, "ping", name, extra),
    );
    assert_eq!(pi["sent"], 100, "{pi}");
    assert_eq!(pi["received"], 100, "{pi}");
    assert_eq!(pi["lost"], 0, "{pi}");
    assert_eq!(pi["rtt_actual"]["count"], 100, "{pi}");
    let p50 = pi["rtt_actual"]["p50_us"].as_f64().unwrap();
    assert!(p50 > 0.0, "{pi}");
    assert_eq!(po["received"], 100, "{po}");
    assert_eq!(po["end_reason"], "end_marker", "{po}");
}

fn ramp(protocol: &str, name: &str) {
    let extra = json!({"messages": 20, "step_bytes": 1000, "payload_bytes": 1000});
    let (_po, pi) = pair(
        cfg("ponger", protocol, "ramp", name, extra.clone()),
        cfg("pinger", protocol, "ramp", name, extra),
    );
    let pts = pi["points"].as_array().expect("points");
    assert_eq!(pts.len(), 20, "{pi}");
    let sizes: Vec<u64> = pts.iter().map(|p| p[0].as_u64().unwrap()).collect();
    assert_eq!(sizes.first(), Some(&1000));
    assert_eq!(sizes.last(), Some(&20_000));
}

fn bulk(protocol: &str, name: &str) {
    let extra = json!({"messages": 500, "payload_bytes": 8192});
    let (rx, tx) = pair(
        cfg("receiver", protocol, "bulk", name, extra.clone()),
        cfg("sender", protocol, "bulk", name, extra),
    );
    assert_eq!(tx["sent"], 500, "{tx}");
    assert_eq!(rx["received"], 500, "{rx}");
    assert_eq!(rx["bytes"], 500 * 8192, "{rx}");
}

fn fan_out(protocol: &str, name: &str) {
    let extra = json!({"messages": 300});
    let mut r1 = cfg("receiver", protocol, "stream", name, extra.clone());
    let mut r2 = r1.clone();
    if protocol == "dds" {
        // DDS binds its own ports: `listen` gives the interface and the receiver's name.
        r1["listen"] = json!("127.0.0.1:17001");
        r2["listen"] = json!("127.0.0.1:17002");
    }
    let (rxs, tx) = run_set(vec![r1, r2], cfg("sender", protocol, "stream", name, extra));
    assert_eq!(tx["peers"], 2, "{tx}");
    for rx in rxs {
        assert_eq!(rx["received"], 300, "{rx}");
        assert_eq!(rx["complete"], true, "{rx}");
    }
}

// ---- zenoh ----

#[test]
fn zenoh_stream_reliable_1000() {
    stream_1000("zenoh", "zs", json!({}));
}

#[test]
fn zenoh_stream_express_priority() {
    stream_1000("zenoh", "zsx", json!({"express": true, "priority": 2}));
}

#[test]
fn zenoh_over_udp_counts_what_arrives() {
    // Zenoh's UDP links do not retransmit: even `reliable` data can be lost on them.
    let extra = json!({"messages": 1000, "rate_msgs_per_s": 20000.0,
                       "options": {"transport": "udp"}});
    let (rx, tx) = pair(
        cfg("receiver", "zenoh", "stream", "zsu", extra.clone()),
        cfg("sender", "zenoh", "stream", "zsu", extra),
    );
    assert_eq!(tx["sent"], 1000);
    let (r, l) = (
        rx["received"].as_u64().unwrap(),
        rx["lost"].as_u64().unwrap(),
    );
    assert_eq!(r + l, 1000, "{rx}");
    assert!(r > 0, "{rx}");
    assert_eq!(rx["bad_messages"], 0, "{rx}");
}

#[test]
fn zenoh_ping() {
    ping_100("zenoh", "zp", json!({}));
}

#[test]
fn zenoh_ramp() {
    ramp("zenoh", "zr");
}

#[test]
fn zenoh_bulk() {
    bulk("zenoh", "zb");
}

#[test]
fn zenoh_fans_out() {
    fan_out("zenoh", "zf");
}

#[test]
fn zenoh_best_effort_counts_what_arrives() {
    let extra = json!({"messages": 500, "rate_msgs_per_s": 5000.0,
                       "options": {"reliability": "best_effort", "congestion_control": "drop"}});
    let (rx, tx) = pair(
        cfg("receiver", "zenoh", "stream", "zbe", extra.clone()),
        cfg("sender", "zenoh", "stream", "zbe", extra),
    );
    assert_eq!(tx["sent"], 500);
    let (r, l) = (
        rx["received"].as_u64().unwrap(),
        rx["lost"].as_u64().unwrap(),
    );
    assert_eq!(r + l, 500, "{rx}");
    assert!(r > 0, "{rx}");
}

#[test]
fn zenoh_client_mode_through_the_agent_router() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = format!("tcp/127.0.0.1:{port}");
    let mut router = spawn(&["router", "--listen", &ep]);
    let l = router.next_line().expect("router prints ready");
    assert_eq!(l["type"], "ready", "{l}");
    assert_eq!(l["role"], "router", "{l}");
    let broker = format!("127.0.0.1:{port}");
    let opts = json!({"mode": "client"});
    let mut rx = cfg(
        "receiver",
        "zenoh",
        "stream",
        "zc",
        json!({"messages": 500, "options": opts, "broker": broker}),
    );
    rx.as_object_mut().unwrap().remove("listen");
    let tx = cfg(
        "sender",
        "zenoh",
        "stream",
        "zc",
        json!({"messages": 500, "options": opts, "broker": broker}),
    );
    let (rx, tx) = pair(rx, tx);
    assert_eq!(tx["sent"], 500, "{tx}");
    assert_eq!(rx["received"], 500, "{rx}");
    // Ping through the router too.
    let extra = json!({"messages": 50, "options": opts, "broker": broker});
    let mut po = cfg("ponger", "zenoh", "ping", "zcp", extra.clone());
    po.as_object_mut().unwrap().remove("listen");
    let (_, pi) = pair(po, cfg("pinger", "zenoh", "ping", "zcp", extra));
    assert_eq!(pi["received"], 50, "{pi}");
    assert_eq!(router.terminate(), 0);
}

#[test]
fn zenoh_knob_errors_name_the_protocol() {
    let c = cfg(
        "sender",
        "zenoh",
        "stream",
        "ze",
        json!({"messages": 1, "peers": ["127.0.0.1:9"], "options": {"qos": 1}}),
    );
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 2);
    let m = lines[0]["message"].as_str().unwrap();
    assert!(m.contains("protocol zenoh") && m.contains("qos"), "{m}");
    let c = cfg(
        "sender",
        "zenoh",
        "stream",
        "ze",
        json!({"messages": 1, "peers": ["127.0.0.1:9"], "options": {"mode": "client"}}),
    );
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 2);
    assert!(
        lines[0]["message"].as_str().unwrap().contains("broker"),
        "{lines:?}"
    );
}

// ---- zmq ----

#[test]
fn zmq_stream_1000() {
    stream_1000("zmq", "qs", json!({}));
}

#[test]
fn zmq_stream_small_hwm_is_still_lossless() {
    stream_1000("zmq", "qsh", json!({"sndhwm": 10, "rcvhwm": 10}));
}

#[test]
fn zmq_ping() {
    ping_100("zmq", "qp", json!({}));
}

#[test]
fn zmq_ramp() {
    ramp("zmq", "qr");
}

#[test]
fn zmq_bulk() {
    bulk("zmq", "qb");
}

#[test]
fn zmq_fans_out() {
    fan_out("zmq", "qf");
}

#[test]
fn zmq_knob_errors_name_the_protocol() {
    let c = cfg(
        "sender",
        "zmq",
        "stream",
        "qe",
        json!({"messages": 1, "peers": ["127.0.0.1:9"], "options": {"transport": "ipc"}}),
    );
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 2);
    assert!(
        lines[0]["message"]
            .as_str()
            .unwrap()
            .contains("protocol zmq"),
        "{lines:?}"
    );
}

// ---- dds ----

#[test]
fn dds_stream_reliable_1000() {
    stream_1000("dds", "ds", json!({}));
}

#[test]
fn dds_stream_transient_local_depth() {
    stream_1000(
        "dds",
        "dst",
        json!({"durability": "transient_local", "history_depth": 2000}),
    );
}

#[test]
fn dds_ping() {
    ping_100("dds", "dp", json!({}));
}

#[test]
fn dds_ping_ros2_naming() {
    ping_100("dds", "dpr", json!({"ros2": true}));
}

#[test]
fn dds_ramp() {
    ramp("dds", "dr");
}

#[test]
fn dds_bulk() {
    bulk("dds", "db");
}

#[test]
fn dds_fans_out() {
    fan_out("dds", "df");
}

#[test]
fn dds_best_effort_counts_what_arrives() {
    let extra = json!({"messages": 500, "rate_msgs_per_s": 5000.0,
                       "options": {"reliability": "best_effort"}});
    let (rx, tx) = pair(
        cfg("receiver", "dds", "stream", "dbe", extra.clone()),
        cfg("sender", "dds", "stream", "dbe", extra),
    );
    assert_eq!(tx["sent"], 500);
    let (r, l) = (
        rx["received"].as_u64().unwrap(),
        rx["lost"].as_u64().unwrap(),
    );
    assert_eq!(r + l, 500, "{rx}");
    assert!(r > 0, "{rx}");
}

#[test]
fn dds_knob_errors_name_the_protocol() {
    let c = cfg(
        "sender",
        "dds",
        "stream",
        "de",
        json!({"messages": 1, "peers": ["127.0.0.1:9"], "options": {"domain_id": 300}}),
    );
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 2);
    let m = lines[0]["message"].as_str().unwrap();
    assert!(m.contains("domain_id") && m.contains("dds"), "{m}");
}
