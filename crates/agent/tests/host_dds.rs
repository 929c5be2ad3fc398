//! Host mode with DDS: the flows of one `roughnet-agent host` process share ONE Cyclone domain and
//! participant (Cyclone has one domain per domain id in a process), each flow with its own topic's
//! reader or writer and its own result; flows whose domain knobs differ are refused (exit 2).
//! Loopback only (as tests/brokerless.rs: automatic participant indexes, each test its own topics).
#![cfg(feature = "dds")]

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use roughnet_agent::clock::now_ns;

const AGENT: &str = env!("CARGO_BIN_EXE_roughnet-agent");

struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    lines: Vec<Value>,
}

fn host(flows: Value) -> Host {
    let mut child = Command::new(AGENT)
        .args([
            "host",
            "--config-json",
            &json!({"v": 1, "flows": flows}).to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn roughnet-agent");
    let out = BufReader::new(child.stdout.take().expect("piped stdout"));
    Host {
        stdin: child.stdin.take(),
        child,
        out,
        lines: Vec::new(),
    }
}

impl Host {
    fn next_line(&mut self) -> Option<Value> {
        let mut s = String::new();
        if self.out.read_line(&mut s).expect("read stdout") == 0 {
            return None;
        }
        let v: Value =
            serde_json::from_str(&s).unwrap_or_else(|e| panic!("not a whole JSON line ({e}): {s}"));
        self.lines.push(v.clone());
        Some(v)
    }

    /// Read until every flow in `flows` said `ready`; every line before must be a ready line.
    fn ready(&mut self, flows: &[u64]) {
        let mut want: BTreeSet<u64> = flows.iter().copied().collect();
        while !want.is_empty() {
            let l = self.next_line().unwrap_or_else(|| {
                panic!("the host ended before its ready lines: {:?}", self.lines)
            });
            assert_eq!(l["type"], "ready", "only ready lines before t0: {l}");
            let k = l["flow"].as_u64().expect("a ready line names its flow");
            assert!(want.remove(&k), "an unexpected ready line: {l}");
        }
    }

    fn t0(&mut self, t0: u64) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{}", json!({"t0_ns": t0})).expect("write t0");
        stdin.flush().expect("flush");
    }

    fn finish(mut self) -> (i32, Vec<Value>) {
        while self.next_line().is_some() {}
        let st = self.child.wait().expect("wait");
        (st.code().unwrap_or(-1), self.lines)
    }
}

fn results(lines: &[Value]) -> BTreeMap<u64, Value> {
    let mut out = BTreeMap::new();
    for l in lines {
        if l["type"] == "result" {
            let k = l["flow"].as_u64().expect("a result names its flow");
            assert!(
                out.insert(k, l.clone()).is_none(),
                "two results for flow {k}"
            );
        }
    }
    out
}

fn errors(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "error").collect()
}

fn topic(name: &str) -> String {
    format!("roughnet/h{}_{name}", std::process::id())
}

fn receiver(port: u16, name: &str, messages: u64) -> Value {
    json!({"v": 1, "role": "receiver", "protocol": "dds", "pattern": "stream",
           "listen": format!("127.0.0.1:{port}"), "topic": topic(name), "payload_bytes": 200,
           "messages": messages, "timeout_ms": 30_000, "report_interval_ms": 0})
}

fn sender(port: u16, name: &str, messages: u64, rate: f64) -> Value {
    json!({"v": 1, "role": "sender", "protocol": "dds", "pattern": "stream",
           "peers": [format!("127.0.0.1:{port}")], "topic": topic(name), "payload_bytes": 200,
           "messages": messages, "rate_msgs_per_s": rate, "timeout_ms": 30_000,
           "report_interval_ms": 0})
}

fn options(mut c: Value, o: Value) -> Value {
    c["options"] = o;
    c
}

/// Each receiver got exactly its sender's messages: (receiver flow, sender flow, count).
fn check_pairs(r: &BTreeMap<u64, Value>, pairs: &[(u64, u64, u64)], lines: &[Value]) {
    for &(rx, tx, n) in pairs {
        let (rx, tx) = (&r[&rx], &r[&tx]);
        assert_eq!(tx["role"], "sender", "{lines:?}");
        assert_eq!(tx["protocol"], "dds", "{tx}");
        assert_eq!(tx["sent"], n, "{tx}");
        assert_eq!(tx["end_reason"], "complete", "{tx}");
        assert_eq!(rx["role"], "receiver", "{rx}");
        assert_eq!(rx["received"], n, "{rx}");
        assert_eq!(rx["lost"], 0, "{rx}");
        assert_eq!(rx["duplicates"], 0, "{rx}");
        assert_eq!(rx["bad_messages"], 0, "{rx}");
        assert_eq!(rx["complete"], true, "{rx}");
    }
}

/// Two pairs in one process: four DDS flows on one participant (no "dds_create_domain:
/// Precondition Not Met"), each receiver counting exactly its own sender's messages; the short
/// pair ends long before the long one, which goes on on the participant they shared (it is deleted
/// with the last flow, not the first).
#[test]
fn one_host_process_carries_several_dds_flows_on_one_participant() {
    let mut h = host(json!([
        {"flow": 1, "start_ns": null, "config": receiver(17301, "a", 150)},
        {"flow": 2, "start_ns": null, "config": receiver(17302, "b", 250)},
        {"flow": 11, "start_ns": 0, "config": sender(17301, "a", 150, 1000.0)},
        {"flow": 12, "start_ns": 50_000_000, "config": sender(17302, "b", 250, 100.0)},
    ]));
    h.ready(&[1, 2]);
    h.t0(now_ns());
    let (code, lines) = h.finish();
    assert!(errors(&lines).is_empty(), "{lines:?}");
    assert_eq!(code, 0, "{lines:?}");
    let r = results(&lines);
    assert_eq!(
        r.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 11, 12],
        "{lines:?}"
    );
    check_pairs(&r, &[(1, 11, 150), (2, 12, 250)], &lines);
}

/// Two host processes over 127.0.0.1, each with one participant carrying receivers of the other's
/// senders and a sender of its own: every receiver gets exactly its sender's messages.
#[test]
fn two_host_processes_exchange_dds_flows_both_ways() {
    let mut a = host(json!([
        {"flow": 1, "start_ns": null, "config": receiver(17311, "x1", 120)},
        {"flow": 2, "start_ns": null, "config": receiver(17312, "x2", 180)},
        {"flow": 3, "start_ns": 0, "config": sender(17313, "x3", 90, 300.0)},
    ]));
    let mut b = host(json!([
        {"flow": 11, "start_ns": 0, "config": sender(17311, "x1", 120, 300.0)},
        {"flow": 12, "start_ns": 20_000_000, "config": sender(17312, "x2", 180, 300.0)},
        {"flow": 13, "start_ns": null, "config": receiver(17313, "x3", 90)},
    ]));
    a.ready(&[1, 2]);
    b.ready(&[13]);
    let t0 = now_ns();
    a.t0(t0);
    b.t0(t0);
    let (code_b, lines_b) = b.finish();
    let (code_a, lines_a) = a.finish();
    assert!(errors(&lines_a).is_empty(), "{lines_a:?}");
    assert!(errors(&lines_b).is_empty(), "{lines_b:?}");
    assert_eq!((code_a, code_b), (0, 0), "{lines_a:?} {lines_b:?}");
    let mut r = results(&lines_a);
    r.extend(results(&lines_b));
    assert_eq!(
        r.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 11, 12, 13]
    );
    for k in [3, 11, 12] {
        assert_eq!(r[&k]["peers"], 1, "flow {k}: {}", r[&k]);
    }
    check_pairs(&r, &[(1, 11, 120), (2, 12, 180), (13, 3, 90)], &[]);
}

/// One participant cannot be configured two ways: flows of one domain id whose domain knobs differ
/// are refused before anything starts (no ready line), naming both flows and every key; QoS knobs
/// (per endpoint) may differ, and so may the domain id (another participant).
#[test]
fn dds_flows_whose_domain_knobs_differ_are_refused_naming_the_keys() {
    let h = host(json!([
        {"flow": 3, "start_ns": null, "config": receiver(17321, "k", 10)},
        {"flow": 5, "start_ns": null, "config": options(receiver(17322, "k2", 10),
            json!({"reliability": "best_effort", "domain_id": 1, "batch": 4096}))},
        {"flow": 7, "start_ns": 0, "config": options(sender(17321, "k", 10, 100.0),
            json!({"batch": 8192, "multicast": true}))},
    ]));
    let (code, lines) = h.finish();
    assert_eq!(code, 2, "{lines:?}");
    assert_eq!(lines.len(), 1, "one error line, nothing started: {lines:?}");
    let e = &lines[0];
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["kind"], "config", "{e}");
    assert_eq!(e["flow"], 7, "{e}");
    assert_eq!(
        e["message"],
        "flows 3 and 7: dds options differ (multicast false and true, batch 0 and 8192): one \
         participant per host needs the same domain knobs",
        "{e}"
    );
    // QoS knobs differing, and another domain id with knobs of its own: accepted (t0 never comes,
    // standard input ends: the waiting sender ends unstarted, the receivers by their stop below).
    let mut h = host(json!([
        {"flow": 3, "start_ns": null, "config": options(receiver(17323, "q", 10),
            json!({"reliability": "best_effort", "history_depth": 4}))},
        {"flow": 5, "start_ns": null, "config": options(receiver(17324, "q2", 10),
            json!({"domain_id": 1, "batch": 4096}))},
        {"flow": 7, "start_ns": 0, "config": options(sender(17323, "q", 10, 100.0),
            json!({"durability": "transient_local"}))},
    ]));
    h.ready(&[3, 5]);
    // SAFETY: our own child's pid.
    unsafe { libc::kill(h.child.id() as i32, libc::SIGTERM) };
    let (code, lines) = h.finish();
    let r = results(&lines);
    assert_eq!(
        r.keys().copied().collect::<Vec<_>>(),
        vec![3, 5],
        "{lines:?}"
    );
    assert_eq!(code, 1, "the unstarted sender counts as failed: {lines:?}");
    assert!(
        errors(&lines)
            .iter()
            .all(|e| e["flow"] == 7 && e["kind"] == "io"),
        "{lines:?}"
    );
}

/// ROS 2 mode: the shared participant presents one node with every flow's endpoints; two pairs of
/// one process still get exactly their own messages.
#[test]
fn ros2_mode_flows_share_one_participant_too() {
    let ros2 = json!({"ros2": true});
    let mut h = host(json!([
        {"flow": 1, "start_ns": null, "config": options(receiver(17331, "r1", 60), ros2.clone())},
        {"flow": 2, "start_ns": null, "config": options(receiver(17332, "r2", 80), ros2.clone())},
        {"flow": 11, "start_ns": 0, "config": options(sender(17331, "r1", 60, 500.0), ros2.clone())},
        {"flow": 12, "start_ns": 0, "config": options(sender(17332, "r2", 80, 500.0), ros2)},
    ]));
    h.ready(&[1, 2]);
    h.t0(now_ns());
    let (code, lines) = h.finish();
    assert!(errors(&lines).is_empty(), "{lines:?}");
    assert_eq!(code, 0, "{lines:?}");
    check_pairs(&results(&lines), &[(1, 11, 60), (2, 12, 80)], &lines);
}

/// The participant goes with the last flow holding it: a flow starting after every other DDS flow
/// of its process ended makes a new one (no "Precondition Not Met" from a domain left behind) and
/// reaches its receiver in another process.
#[test]
fn a_flow_starting_after_the_others_ended_gets_a_new_participant() {
    let mut a = host(json!([
        {"flow": 1, "start_ns": null, "config": receiver(17341, "l1", 30)},
        {"flow": 11, "start_ns": 0, "config": sender(17341, "l1", 30, 1000.0)},
        {"flow": 12, "start_ns": 2_500_000_000u64, "config": sender(17342, "l2", 40, 400.0)},
    ]));
    let mut b = host(json!([
        {"flow": 13, "start_ns": null, "config": receiver(17342, "l2", 40)},
    ]));
    a.ready(&[1]);
    b.ready(&[13]);
    let t0 = now_ns();
    a.t0(t0);
    // flows 1 and 11 end (and with them the participant) before flow 12 starts
    let mut ended = BTreeSet::new();
    while ended.len() < 2 {
        let l = a.next_line().expect("flows 1 and 11 end first");
        assert_eq!(l["type"], "result", "{l}");
        ended.insert(l["flow"].as_u64().unwrap());
    }
    assert!(
        now_ns() < t0 + 2_500_000_000,
        "flows 1 and 11 took too long for this test"
    );
    b.t0(t0);
    let (code_a, lines_a) = a.finish();
    let (code_b, lines_b) = b.finish();
    assert!(errors(&lines_a).is_empty(), "{lines_a:?}");
    assert_eq!((code_a, code_b), (0, 0), "{lines_a:?} {lines_b:?}");
    let mut r = results(&lines_a);
    r.extend(results(&lines_b));
    check_pairs(&r, &[(1, 11, 30), (13, 12, 40)], &[]);
}
