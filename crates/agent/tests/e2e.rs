//! End to end over loopback: the built binary as receiver/ponger and
//! sender/pinger, checking the JSON lines it prints.  Properties only (counts,
//! consistency, histogram decoding); no wall-clock bounds.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

use roughnet_agent::hist;

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
    /// Read lines until the `ready` line; return the address it reports.
    fn ready(&mut self) -> String {
        loop {
            let l = self.next_line().expect("agent ended before printing ready");
            if l["type"] == "ready" {
                return l["listen"]
                    .as_str()
                    .expect("listen is a string")
                    .to_string();
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
        assert_eq!(v["v"], 1, "every line carries v=1: {s}");
        self.lines.push(v.clone());
        Some(v)
    }

    /// Read to the end, wait for exit; (exit code, every line).
    fn finish(mut self) -> (i32, Vec<Value>) {
        while self.next_line().is_some() {}
        let st = self.child.wait().expect("wait");
        (st.code().unwrap_or(-1), self.lines)
    }
}

fn result_of(lines: &[Value]) -> Value {
    let r: Vec<&Value> = lines.iter().filter(|l| l["type"] == "result").collect();
    assert_eq!(r.len(), 1, "exactly one result line expected in {lines:?}");
    r[0].clone()
}

/// Run a listening role and a connecting role; return (listener result, connector result).
fn pair(listener: Value, connector: Value) -> (Value, Value) {
    let mut l = start(&listener);
    let addr = l.ready();
    let mut c_cfg = connector;
    c_cfg["peers"] = json!([addr]);
    let (c_code, c_lines) = start(&c_cfg).finish();
    let (l_code, l_lines) = l.finish();
    assert_eq!(c_code, 0, "connector exit code; lines {c_lines:?}");
    assert_eq!(l_code, 0, "listener exit code; lines {l_lines:?}");
    (result_of(&l_lines), result_of(&c_lines))
}

fn cfg(role: &str, protocol: &str, pattern: &str, extra: Value) -> Value {
    let mut c = json!({"v":1, "role": role, "protocol": protocol, "pattern": pattern,
                       "payload_bytes": 200, "timeout_ms": 20_000, "report_interval_ms": 0});
    if matches!(role, "receiver" | "ponger") {
        c["listen"] = json!("127.0.0.1:0");
    }
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

fn check_latency(obj: &Value, count: u64) {
    assert_eq!(obj["count"], count, "{obj}");
    let h = hist::deserialize(obj["hdr"].as_str().expect("hdr")).expect("hdr decodes");
    assert_eq!(h.len(), count);
    if count > 0 {
        let (p50, p99, max, min) = (
            obj["p50_us"].as_f64().unwrap(),
            obj["p99_us"].as_f64().unwrap(),
            obj["max_us"].as_f64().unwrap(),
            obj["min_us"].as_f64().unwrap(),
        );
        assert!(min <= p50 && p50 <= p99 && p99 <= max, "{obj}");
        assert!(p50 > 0.0);
    }
}

fn stream_1000(protocol: &str, rate: Option<f64>) {
    let extra = json!({"messages": 1000, "warmup": 10, "rate_msgs_per_s": rate});
    let (rx, tx) = pair(
        cfg("receiver", protocol, "stream", extra.clone()),
        cfg("sender", protocol, "stream", extra),
    );
    assert_eq!(tx["sent"], 1000);
    assert_eq!(tx["warmup_sent"], 10);
    assert_eq!(rx["expected"], 1000);
    let received = rx["received"].as_u64().unwrap();
    assert_eq!(received + rx["lost"].as_u64().unwrap(), 1000, "{rx}");
    assert_eq!(rx["duplicates"], 0);
    assert_eq!(rx["bytes"].as_u64().unwrap(), received * 200);
    check_latency(&rx["latency_actual"], received);
    check_latency(&rx["latency_intended"], received);
    // Latency from the intended time is never below latency from the actual time.
    assert!(rx["latency_intended"]["p50_us"].as_f64() >= rx["latency_actual"]["p50_us"].as_f64());
    if protocol == "tcp" {
        assert_eq!(received, 1000);
        assert_eq!(rx["warmup_received"], 10);
        assert_eq!(rx["end_reason"], "complete");
        assert_eq!(rx["complete"], true);
    } else {
        // Loopback UDP at a modest rate loses nothing in practice; allow a little.
        assert!(received >= 950, "{rx}");
    }
    check_schedule(&tx["schedule"], rate.is_some());
    // CPU: getrusage's user and system times add up to the kernel's exact runtime of the process (only their split
    // is sampled at ticks), so a receiver that started, listened and decoded 1000 messages has a total above 0
    // (either share alone may be 0 at tick granularity; rounded to 1 us).
    for (who, r) in [("receiver", &rx), ("sender", &tx)] {
        let (user, sys) = (
            r["cpu"]["user_s"].as_f64().unwrap(),
            r["cpu"]["sys_s"].as_f64().unwrap(),
        );
        assert!(
            user >= 0.0 && sys >= 0.0 && user + sys > 0.0,
            "{who}: {}",
            r["cpu"]
        );
    }
}

/// A sender's `schedule` object: exact relations, no wall-clock bound (this machine is shared: how late a timer
/// fires depends on the load, not on the agent).
fn check_schedule(s: &Value, paced: bool) {
    let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k} in {s}"));
    let (late, own, held) = (
        f("late_fraction"),
        f("own_late_fraction"),
        f("held_fraction"),
    );
    if !paced {
        // As fast as possible: no intended times, nothing recorded, so nothing is late or behind.
        assert_eq!(
            (late, own, held, f("behind_max_us")),
            (0.0, 0.0, 0.0, 0.0),
            "{s}"
        );
        return;
    }
    // Fractions of the sends; a send's own (machine) and held (protocol) shares are parts of its lag, so a send
    // late by either share is late; and a send is late exactly when its lag exceeds 1 ms (schedule::LATE_NS).
    assert!((0.0..=1.0).contains(&late), "{s}");
    assert!(own <= late && held <= late, "{s}");
    assert_eq!(late > 0.0, f("behind_max_us") > 1000.0, "{s}");
    assert!(f("own_behind_max_us") <= f("behind_max_us"), "{s}");
}

#[test]
fn stream_tcp_1000_messages_as_fast_as_possible() {
    stream_1000("tcp", None);
}

#[test]
fn stream_udp_1000_messages_at_a_rate() {
    stream_1000("udp", Some(5000.0));
}

#[test]
fn stream_by_duration_learns_the_count_from_the_end_marker() {
    let extra = json!({"duration_ms": 200, "rate_msgs_per_s": 1000.0});
    let (rx, tx) = pair(
        cfg("receiver", "tcp", "stream", extra.clone()),
        cfg("sender", "tcp", "stream", extra),
    );
    let sent = tx["sent"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(rx["expected"].as_u64(), Some(sent));
    assert_eq!(rx["received"].as_u64(), Some(sent));
    assert_eq!(rx["complete"], true);
}

#[test]
fn ping_udp_round_trips() {
    let extra = json!({"messages": 300, "warmup": 5, "payload_bytes": 64});
    let (po, pi) = pair(
        cfg("ponger", "udp", "ping", extra.clone()),
        cfg("pinger", "udp", "ping", extra),
    );
    assert_eq!(pi["sent"], 300);
    let received = pi["received"].as_u64().unwrap();
    assert_eq!(received + pi["lost"].as_u64().unwrap(), 300);
    assert!(received >= 295, "{pi}");
    check_latency(&pi["rtt_actual"], received);
    check_latency(&pi["rtt_intended"], received);
    assert_eq!(po["received"], 300);
    assert_eq!(po["warmup_received"], 5);
    assert_eq!(po["end_reason"], "end_marker");
}

#[test]
fn ping_udp_open_loop_keeps_its_schedule_stats() {
    let extra = json!({"messages": 100, "interval_ns": 2_000_000});
    let (_po, pi) = pair(
        cfg("ponger", "udp", "ping", extra.clone()),
        cfg("pinger", "udp", "ping", extra),
    );
    assert_eq!(pi["sent"], 100);
    let s = &pi["schedule"];
    assert!(
        s["behind_max_us"].as_f64().unwrap() >= s["behind_p99_us"].as_f64().unwrap(),
        "{s}"
    );
    assert!(pi["received"].as_u64().unwrap() >= 95);
}

#[test]
fn ramp_tcp_grows_by_the_step() {
    let extra =
        json!({"messages": 50, "step_bytes": 1000, "payload_bytes": 100, "interval_ns": 1_000_000});
    let (po, pi) = pair(
        cfg("ponger", "tcp", "ramp", extra.clone()),
        cfg("pinger", "tcp", "ramp", extra),
    );
    assert_eq!(pi["received"], 50);
    let points = pi["points"].as_array().expect("points");
    assert_eq!(points.len(), 50);
    for (k, p) in points.iter().enumerate() {
        assert_eq!(
            p[0].as_u64().unwrap(),
            100 + 1000 * k as u64,
            "TCP keeps order, sizes grow by the step"
        );
        assert!(p[1].as_f64().unwrap() > 0.0);
    }
    assert_eq!(po["received"], 50);
    assert_eq!(
        po["bytes"].as_u64().unwrap(),
        (0..50u64).map(|k| 100 + 1000 * k).sum::<u64>()
    );
}

#[test]
fn bulk_tcp_moves_every_byte() {
    let extra = json!({"duration_ms": 300, "options": {"send_size": 65536}});
    let (rx, tx) = pair(
        cfg("receiver", "tcp", "bulk", extra.clone()),
        cfg("sender", "tcp", "bulk", extra),
    );
    let sent = tx["bytes"].as_u64().unwrap();
    assert!(sent > 0 && sent % 65536 == 0, "{tx}");
    assert_eq!(
        rx["bytes"].as_u64(),
        Some(sent),
        "TCP delivers everything written"
    );
    assert_eq!(rx["complete"], true);
    assert!(rx["throughput_bps"].as_f64().unwrap() > 0.0);
}

#[test]
fn bulk_udp_counts_datagrams() {
    let extra = json!({"messages": 2000, "payload_bytes": 1200});
    let (rx, tx) = pair(
        cfg("receiver", "udp", "bulk", extra.clone()),
        cfg("sender", "udp", "bulk", extra),
    );
    assert_eq!(tx["sent"], 2000);
    assert_eq!(rx["sent"], 2000);
    let received = rx["received"].as_u64().unwrap();
    assert_eq!(received + rx["lost"].as_u64().unwrap(), 2000);
    assert_eq!(rx["bytes"].as_u64().unwrap(), received * 1200);
}

#[test]
fn sigterm_makes_a_receiver_report_and_exit_zero() {
    let mut r = start(&cfg("receiver", "udp", "stream", json!({"messages": 10})));
    r.ready();
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(r.child.id() as i32, libc::SIGTERM) };
    let (code, lines) = r.finish();
    assert_eq!(code, 0);
    let res = result_of(&lines);
    assert_eq!(res["end_reason"], "signal");
    assert_eq!(res["complete"], false);
    assert_eq!(res["lost"], 10);
}

#[test]
fn a_receiver_times_out_incomplete() {
    let mut c = cfg("receiver", "tcp", "stream", json!({"messages": 5}));
    c["timeout_ms"] = json!(200);
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 0, "an incomplete receiver is a result, not an error");
    assert_eq!(result_of(&lines)["end_reason"], "timeout");
}

#[test]
fn configuration_errors_exit_2_with_a_json_line() {
    for bad in [
        json!({"v":1,"role":"sender","protocol":"udp","pattern":"stream","peers":["127.0.0.1:9"],"payload_bytes":70000,"messages":1}),
        json!({"v":1,"role":"sender","protocol":"carrier-pigeon","pattern":"stream","peers":["127.0.0.1:9"],"payload_bytes":64,"messages":1}),
        json!({"v":1,"role":"sender","protocol":"udp","pattern":"stream","peers":["127.0.0.1:9"],"payload_bytes":64,"messages":1,"options":{"mss":1000}}),
        json!({"v":1,"role":"sender","protocol":"udp","pattern":"stream","payload_bytes":64,"messages":1}),
    ] {
        let (code, lines) = start(&bad).finish();
        assert_eq!(code, 2, "{bad}");
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["type"], "error");
        assert_eq!(lines[0]["kind"], "config");
        assert!(!lines[0]["message"].as_str().unwrap().is_empty());
    }
}

#[test]
fn version_line() {
    let out = Command::new(AGENT)
        .arg("version")
        .output()
        .expect("run version");
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(v["type"], "version");
    let protocols = v["protocols"].as_array().expect("protocols is a list");
    for p in ["tcp", "udp"] {
        assert!(protocols.contains(&json!(p)), "{p} missing from {protocols:?}");
    }
    assert_eq!(v["patterns"], json!(["stream", "ping", "ramp", "bulk", "sync"]));
}

/// Start `n` listening roles; return them with their addresses.
fn listeners(c: &Value, n: usize) -> (Vec<Running>, Vec<String>) {
    let mut rs: Vec<Running> = (0..n).map(|_| start(c)).collect();
    let addrs = rs.iter_mut().map(|r| r.ready()).collect();
    (rs, addrs)
}

fn fan_out(protocol: &str) {
    let extra = json!({"messages": 500, "rate_msgs_per_s": 5000.0});
    let (rxs, addrs) = listeners(&cfg("receiver", protocol, "stream", extra.clone()), 2);
    let mut s = cfg("sender", protocol, "stream", extra);
    s["peers"] = json!(addrs);
    let (code, lines) = start(&s).finish();
    assert_eq!(code, 0);
    let tx = result_of(&lines);
    assert_eq!(tx["peers"], 2);
    assert_eq!(tx["sent"], 500);
    for r in rxs {
        let (code, lines) = r.finish();
        assert_eq!(code, 0);
        let rx = result_of(&lines);
        let received = rx["received"].as_u64().unwrap();
        assert_eq!(received + rx["lost"].as_u64().unwrap(), 500, "{rx}");
        assert!(received >= 475, "every receiver gets the stream: {rx}");
    }
}

#[test]
fn stream_fans_out_to_every_tcp_receiver() {
    fan_out("tcp");
}

#[test]
fn stream_fans_out_to_every_udp_receiver() {
    fan_out("udp");
}

#[test]
fn ping_to_two_udp_pongers_counts_replies_per_peer() {
    let extra = json!({"messages": 100, "payload_bytes": 64});
    let (pos, addrs) = listeners(&cfg("ponger", "udp", "ping", extra.clone()), 2);
    let mut p = cfg("pinger", "udp", "ping", extra);
    p["peers"] = json!(addrs);
    let (code, lines) = start(&p).finish();
    assert_eq!(code, 0);
    let pi = result_of(&lines);
    assert_eq!(pi["peers"], 2);
    let received = pi["received"].as_u64().unwrap();
    assert_eq!(received + pi["lost"].as_u64().unwrap(), 200, "{pi}");
    assert!(received >= 190, "{pi}");
    assert_eq!(
        pi["duplicates"], 0,
        "replies from two peers are not duplicates of each other"
    );
    for po in pos {
        let (code, lines) = po.finish();
        assert_eq!(code, 0);
        assert_eq!(result_of(&lines)["received"], 100);
    }
}

#[test]
fn config_from_a_file_and_from_stdin() {
    let c = cfg(
        "receiver",
        "udp",
        "stream",
        json!({"messages": 1, "timeout_ms": 100}),
    );
    let path = std::env::temp_dir().join(format!("rn-agent-cfg-{}.json", std::process::id()));
    std::fs::write(&path, c.to_string()).unwrap();
    let out = Command::new(AGENT)
        .args(["run", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"type\":\"result\""));

    let mut child = Command::new(AGENT)
        .args(["run", "--config", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(c.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"end_reason\":\"timeout\""));
}

#[test]
fn sigint_stops_a_sender_which_still_reports_and_ends_the_stream() {
    let extra = json!({"duration_ms": 60_000, "rate_msgs_per_s": 50.0});
    let mut rx = start(&cfg("receiver", "udp", "stream", extra.clone()));
    let addr = rx.ready();
    let mut s = cfg("sender", "udp", "stream", extra);
    s["peers"] = json!([addr]);
    s["report_interval_ms"] = json!(100);
    let mut tx = start(&s);
    // Wait for the sender's first interval line, then interrupt it.
    while tx.next_line().expect("sender ended early")["type"] != "interval" {}
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(tx.child.id() as i32, libc::SIGINT) };
    let (code, lines) = tx.finish();
    assert_eq!(code, 0);
    let t = result_of(&lines);
    assert_eq!(t["end_reason"], "signal");
    let sent = t["sent"].as_u64().unwrap();
    assert!(sent >= 1);
    let (code, lines) = rx.finish();
    assert_eq!(code, 0);
    let r = result_of(&lines);
    assert_eq!(
        r["expected"].as_u64(),
        Some(sent),
        "the end marker tells the receiver how many were sent"
    );
    assert_eq!(r["received"].as_u64(), Some(sent));
    assert_eq!(r["end_reason"], "complete");
}

#[test]
fn large_tcp_messages_grow_the_read_buffer() {
    // 600 kB messages are larger than the 256 KiB initial read buffer.
    let extra = json!({"messages": 20, "payload_bytes": 600_000});
    let (rx, tx) = pair(
        cfg("receiver", "tcp", "stream", extra.clone()),
        cfg("sender", "tcp", "stream", extra),
    );
    assert_eq!(tx["sent"], 20);
    assert_eq!(rx["received"], 20);
    assert_eq!(rx["bytes"], 20 * 600_000);
    assert_eq!(rx["bad_messages"], 0);
}
