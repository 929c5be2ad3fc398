//! Stream traces end to end over loopback (`trace_path`, docs/agent-protocol.md "Traces"):
//! the built binary as receiver and sender, each writing its trace file; the files are
//! read back and checked against the result lines.  Properties only, no wall-clock bounds
//! beyond "a killed agent's file holds what it flushed a second or more before".

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

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
}

fn result_of(lines: &[Value]) -> Value {
    let r: Vec<&Value> = lines.iter().filter(|l| l["type"] == "result").collect();
    assert_eq!(r.len(), 1, "exactly one result line expected in {lines:?}");
    r[0].clone()
}

fn cfg(role: &str, protocol: &str, extra: Value) -> Value {
    let mut c = json!({"v":1, "role": role, "protocol": protocol, "pattern": "stream",
                       "payload_bytes": 200, "timeout_ms": 20_000, "report_interval_ms": 0});
    if role == "receiver" {
        c["listen"] = json!("127.0.0.1:0");
    }
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

/// A fresh folder for one test's files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roughnet-trace-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch folder");
    d
}

/// The records of a trace file: `width` u64 fields each (3 sender, 4 receiver).
fn records(path: &Path, width: usize) -> Vec<Vec<u64>> {
    let data = std::fs::read(path).expect("read trace");
    assert_eq!(
        data.len() % (8 * width),
        0,
        "whole records only in {path:?}"
    );
    data.chunks(8 * width)
        .map(|r| {
            r.chunks(8)
                .map(|f| u64::from_le_bytes(f.try_into().unwrap()))
                .collect()
        })
        .collect()
}

/// Run a traced stream; return (receiver result, sender result, tx records, rx records).
fn traced_stream(
    name: &str,
    protocol: &str,
    extra: Value,
) -> (Value, Value, Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let dir = scratch(name);
    let (tx_path, rx_path) = (dir.join("t.tx"), dir.join("t.rx"));
    let mut rx_cfg = cfg("receiver", protocol, extra.clone());
    rx_cfg["trace_path"] = json!(rx_path.to_str().unwrap());
    let mut tx_cfg = cfg("sender", protocol, extra);
    tx_cfg["trace_path"] = json!(tx_path.to_str().unwrap());
    let mut r = start(&rx_cfg);
    tx_cfg["peers"] = json!([r.ready()]);
    let (tx_code, tx_lines) = start(&tx_cfg).finish();
    let (rx_code, rx_lines) = r.finish();
    assert_eq!(tx_code, 0, "sender exit code; lines {tx_lines:?}");
    assert_eq!(rx_code, 0, "receiver exit code; lines {rx_lines:?}");
    let (txr, rxr) = (records(&tx_path, 3), records(&rx_path, 4));
    std::fs::remove_dir_all(&dir).unwrap();
    (result_of(&rx_lines), result_of(&tx_lines), txr, rxr)
}

/// The properties every traced stream has, whatever the protocol.
fn check(rx: &Value, tx: &Value, txr: &[Vec<u64>], rxr: &[Vec<u64>], warmup: u64) {
    let sent = tx["sent"].as_u64().unwrap();
    // Sender: one record per counted message, in order, warm-up and end marker excluded.
    assert_eq!(tx["trace_records"].as_u64(), Some(sent), "{tx}");
    assert_eq!(txr.len() as u64, sent);
    for (k, r) in txr.iter().enumerate() {
        assert_eq!(
            r[0],
            warmup + k as u64,
            "sender seqs count up from the warm-up"
        );
        assert!(r[1] <= r[2], "intended {} after actual {}", r[1], r[2]);
    }
    // Receiver: one record per arrival of a counted message, duplicates included.
    let arrivals = rx["received"].as_u64().unwrap() + rx["duplicates"].as_u64().unwrap();
    assert_eq!(rx["trace_records"].as_u64(), Some(arrivals), "{rx}");
    assert_eq!(rxr.len() as u64, arrivals);
    let sent_by_seq: HashMap<u64, &Vec<u64>> = txr.iter().map(|r| (r[0], r)).collect();
    let mut seen = std::collections::HashSet::new();
    for r in rxr {
        let s = sent_by_seq
            .get(&r[0])
            .unwrap_or_else(|| panic!("received seq {} was never sent (or is warm-up)", r[0]));
        assert_eq!(&r[..3], &s[..], "the receiver's stamps are the sender's");
        assert!(r[3] >= r[2], "recv_ns {} before actual_ns {}", r[3], r[2]);
        seen.insert(r[0]);
    }
    assert_eq!(seen.len() as u64, rx["received"].as_u64().unwrap());
}

#[test]
fn traced_udp_stream_at_a_rate() {
    let extra = json!({"messages": 500, "warmup": 10, "rate_msgs_per_s": 5000.0});
    let (rx, tx, txr, rxr) = traced_stream("udp", "udp", extra);
    assert_eq!(tx["sent"], 500);
    check(&rx, &tx, &txr, &rxr, 10);
    // Loopback UDP at a modest rate loses nothing in practice; allow a little.
    assert!(rxr.len() >= 450, "{rx}");
}

#[test]
fn traced_tcp_stream_as_fast_as_possible() {
    let extra = json!({"messages": 3000, "warmup": 5});
    let (rx, tx, txr, rxr) = traced_stream("tcp", "tcp", extra);
    check(&rx, &tx, &txr, &rxr, 5);
    assert_eq!(rxr.len(), 3000);
    // TCP keeps the order: the receiver's records are the sender's, one for one.
    for (a, b) in rxr.iter().zip(&txr) {
        assert_eq!(&a[..3], &b[..]);
    }
}

#[test]
fn traced_stream_by_duration_matches_the_end_marker_count() {
    let extra = json!({"duration_ms": 300, "rate_msgs_per_s": 1000.0});
    let (rx, tx, txr, rxr) = traced_stream("duration", "tcp", extra);
    let sent = tx["sent"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(rx["expected"].as_u64(), Some(sent));
    check(&rx, &tx, &txr, &rxr, 0);
    assert_eq!(rxr.len() as u64, sent);
}

#[test]
fn a_trace_that_cannot_be_created_is_a_config_error_before_ready() {
    let dir = scratch("uncreatable");
    let mut c = cfg("receiver", "udp", json!({"messages": 10}));
    c["trace_path"] = json!(dir.join("no/such/folder/t.rx").to_str().unwrap());
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 2, "{lines:?}");
    assert!(lines.iter().all(|l| l["type"] != "ready"), "{lines:?}");
    let e = lines
        .iter()
        .find(|l| l["type"] == "error")
        .expect("an error line");
    assert_eq!(e["kind"], "config");
    assert!(e["message"].as_str().unwrap().contains("trace_path"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_killed_agent_keeps_what_it_flushed_a_second_before() {
    // 500 msg/s for 2.5 s is ~1250 records: fewer than either buffer holds, so whatever is
    // in the files was put there by the once-a-second flush, not by a full buffer.
    let dir = scratch("killed");
    let (tx_path, rx_path) = (dir.join("t.tx"), dir.join("t.rx"));
    let extra = json!({"duration_ms": 10_000, "rate_msgs_per_s": 500.0});
    let mut rx_cfg = cfg("receiver", "udp", extra.clone());
    rx_cfg["trace_path"] = json!(rx_path.to_str().unwrap());
    let mut tx_cfg = cfg("sender", "udp", extra);
    tx_cfg["trace_path"] = json!(tx_path.to_str().unwrap());
    let mut r = start(&rx_cfg);
    tx_cfg["peers"] = json!([r.ready()]);
    let mut s = start(&tx_cfg);
    std::thread::sleep(Duration::from_millis(2500));
    // Child::kill is SIGKILL: no result line, no final flush.
    s.child.kill().expect("kill sender");
    r.child.kill().expect("kill receiver");
    let (_, tx_lines) = s.finish();
    let (_, rx_lines) = r.finish();
    assert!(tx_lines.iter().all(|l| l["type"] != "result"));
    assert!(rx_lines.iter().all(|l| l["type"] != "result"));
    let (txr, rxr) = (records(&tx_path, 3), records(&rx_path, 4));
    // At least the first second (500 messages) was flushed; allow for a slow start.
    assert!(txr.len() >= 400, "{} sender records", txr.len());
    assert!(rxr.len() >= 400, "{} receiver records", rxr.len());
    for (k, t) in txr.iter().enumerate() {
        assert_eq!(t[0], k as u64);
    }
    for r in &rxr {
        assert!(r[3] >= r[2]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
