//! Host mode (`roughnet-agent host`, issue 27): the built binary carrying several flows in one
//! process over loopback UDP, driven through its standard input.  Properties only (counts,
//! which flow said what, exit codes); the only time bounds are generous ones.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::UdpSocket;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use roughnet_agent::clock::now_ns;
use roughnet_agent::message::{Header, FLAG_END, HEADER_LEN};

const AGENT: &str = env!("CARGO_BIN_EXE_roughnet-agent");

struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    lines: Vec<Value>,
}

fn start(args: &[&str]) -> Host {
    let mut child = Command::new(AGENT)
        .args(args)
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

fn host(flows: Value) -> Host {
    start(&[
        "host",
        "--config-json",
        &json!({"v": 1, "flows": flows}).to_string(),
    ])
}

impl Host {
    fn next_line(&mut self) -> Option<Value> {
        let mut s = String::new();
        if self.out.read_line(&mut s).expect("read stdout") == 0 {
            return None;
        }
        let v: Value =
            serde_json::from_str(&s).unwrap_or_else(|e| panic!("not a whole JSON line ({e}): {s}"));
        assert_eq!(v["v"], 1, "every line carries v=1: {s}");
        self.lines.push(v.clone());
        Some(v)
    }

    /// Read until every flow in `flows` said `ready`; every line before must be a ready line.
    fn ready(&mut self, flows: &[u64]) {
        let mut want: BTreeSet<u64> = flows.iter().copied().collect();
        while !want.is_empty() {
            let l = self
                .next_line()
                .expect("the host ended before its ready lines");
            assert_eq!(l["type"], "ready", "only ready lines before t0: {l}");
            let k = l["flow"].as_u64().expect("a ready line names its flow");
            assert!(want.remove(&k), "an unexpected ready line: {l}");
        }
    }

    fn command(&mut self, c: Value) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{c}").expect("write a command");
        stdin.flush().expect("flush stdin");
    }

    fn t0(&mut self) {
        self.command(json!({"t0_ns": now_ns()}));
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Read to the end and wait for exit: (exit code, every line).
    fn finish(mut self) -> (i32, Vec<Value>) {
        while self.next_line().is_some() {}
        let st = self.child.wait().expect("wait");
        (st.code().unwrap_or(-1), self.lines)
    }
}

/// Each flow's result line (exactly one per flow that has one); every line must name a flow.
fn results(lines: &[Value]) -> BTreeMap<u64, Value> {
    let mut out = BTreeMap::new();
    for l in lines {
        let k = l["flow"]
            .as_u64()
            .unwrap_or_else(|| panic!("a line without its flow: {l}"));
        if l["type"] == "result" {
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

/// A loopback UDP port free a moment ago (the host binds it right after).
fn udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn receiver(port: u16, extra: Value) -> Value {
    with(
        json!({"v": 1, "role": "receiver", "protocol": "udp", "pattern": "stream",
               "listen": format!("127.0.0.1:{port}"), "payload_bytes": 200,
               "timeout_ms": 20_000, "report_interval_ms": 0}),
        extra,
    )
}

fn sender(port: u16, extra: Value) -> Value {
    with(
        json!({"v": 1, "role": "sender", "protocol": "udp", "pattern": "stream",
               "peers": [format!("127.0.0.1:{port}")], "payload_bytes": 200,
               "rate_msgs_per_s": 200.0, "timeout_ms": 20_000, "report_interval_ms": 0}),
        extra,
    )
}

fn with(mut c: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

#[test]
fn one_process_carries_two_receivers_and_two_senders() {
    let (p1, p2) = (udp_port(), udp_port());
    let n = json!({"messages": 100});
    // The senders' traces say when each message left: no sooner than t0 + the flow's start.
    let trace =
        |k: u32| std::env::temp_dir().join(format!("rn-host-{}-{k}.tx", std::process::id()));
    let traced = |k: u32| json!({"messages": 100, "trace_path": trace(k)});
    let mut h = host(json!([
        {"flow": 11, "start_ns": 0, "config": sender(p1, traced(11))},
        {"flow": 1, "start_ns": null, "config": receiver(p1, n.clone())},
        {"flow": 12, "start_ns": 100_000_000, "config": sender(p2, traced(12))},
        {"flow": 2, "start_ns": null, "config": receiver(p2, n.clone())},
    ]));
    h.ready(&[1, 2]);
    let t0 = now_ns();
    h.command(json!({"t0_ns": t0}));
    let (code, lines) = h.finish();
    for (k, start) in [(11, 0), (12, 100_000_000)] {
        let tx = std::fs::read(trace(k)).expect("the sender's trace");
        let _ = std::fs::remove_file(trace(k));
        assert_eq!(tx.len(), 100 * 24, "flow {k}: one record per message");
        let first_sent = u64::from_le_bytes(tx[16..24].try_into().unwrap());
        assert!(
            first_sent >= t0 + start,
            "flow {k} sent at {first_sent}, before t0 {t0} + its start {start}"
        );
    }
    assert_eq!(code, 0, "{lines:?}");
    assert!(errors(&lines).is_empty(), "{lines:?}");
    let r = results(&lines);
    assert_eq!(
        r.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 11, 12],
        "{lines:?}"
    );
    for (rx, tx) in [(1, 11), (2, 12)] {
        let (rx, tx) = (&r[&rx], &r[&tx]);
        assert_eq!(tx["role"], "sender");
        assert_eq!(tx["end_reason"], "complete", "{tx}");
        assert_eq!(tx["sent"], 100, "{tx}");
        assert_eq!(rx["role"], "receiver");
        assert_eq!(rx["end_reason"], "complete", "{rx}");
        assert_eq!(rx["received"], 100, "{rx}");
        assert_eq!(rx["lost"], 0, "{rx}");
        assert_eq!(rx["duplicates"], 0, "{rx}");
    }
}

#[test]
fn a_stop_command_stops_only_its_flow() {
    let (p1, p2) = (udp_port(), udp_port());
    let long = json!({"duration_ms": 20_000});
    let mut h = host(json!([
        {"flow": 1, "start_ns": null, "config": receiver(p1, json!({"messages": 100}))},
        {"flow": 2, "start_ns": null, "config": receiver(p2, long.clone())},
        {"flow": 10, "start_ns": 0, "config": sender(p1, json!({"messages": 100}))},
        {"flow": 20, "start_ns": 0, "config": sender(p2, long)},
    ]));
    h.ready(&[1, 2]);
    h.t0();
    std::thread::sleep(std::time::Duration::from_millis(300));
    h.command(json!({"stop": 20}));
    let (code, lines) = h.finish();
    assert_eq!(code, 0, "{lines:?}");
    assert!(errors(&lines).is_empty(), "{lines:?}");
    let r = results(&lines);
    assert_eq!(r.len(), 4, "{lines:?}");
    let stopped = &r[&20];
    assert_eq!(stopped["end_reason"], "signal", "{stopped}");
    let sent = stopped["sent"].as_u64().unwrap();
    // 20 s at 200/s would be 4000: it stopped early
    assert!(sent > 0 && sent < 4000, "{stopped}");
    // its receiver learnt the count from the end marker the stopped sender still sends, and got
    // everything before it
    assert_eq!(r[&2]["expected"], sent, "{}", r[&2]);
    assert_eq!(r[&2]["received"], sent, "{}", r[&2]);
    assert_eq!(r[&2]["complete"], true, "{}", r[&2]);
    // the other pair never saw the stop
    assert_eq!(r[&10]["end_reason"], "complete", "{}", r[&10]);
    assert_eq!(r[&10]["sent"], 100);
    assert_eq!(r[&1]["end_reason"], "complete", "{}", r[&1]);
    assert_eq!(r[&1]["received"], 100);
}

#[test]
fn a_bad_flow_configuration_starts_nothing() {
    let p = udp_port();
    let mut bad = sender(p, json!({"messages": 10}));
    bad["bogus_key"] = json!(1);
    let (code, lines) = host(json!([
        {"flow": 0, "start_ns": null, "config": receiver(p, json!({"messages": 10}))},
        {"flow": 5, "start_ns": 0, "config": bad},
    ]))
    .finish();
    assert_eq!(code, 2, "{lines:?}");
    assert_eq!(
        lines.len(),
        1,
        "one error line and nothing else (no ready): {lines:?}"
    );
    let e = &lines[0];
    assert_eq!(e["type"], "error");
    assert_eq!(e["kind"], "config");
    assert_eq!(e["flow"], 5);
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.starts_with("flow 5: ") && msg.contains("bogus_key"),
        "{msg}"
    );

    // About the host object itself: no flow key.
    for (args, word) in [
        (
            vec!["host", "--config-json", r#"{"v": 2, "flows": []}"#],
            "`v` = 2",
        ),
        (
            vec!["host", "--config-json", r#"{"v": 1, "flows": []}"#],
            "`flows`",
        ),
        (vec!["host", "--config", "-"], "standard input"),
    ] {
        let (code, lines) = start(&args).finish();
        assert_eq!(code, 2, "{args:?}: {lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["kind"], "config");
        assert!(lines[0].get("flow").is_none(), "{lines:?}");
        assert!(
            lines[0]["message"].as_str().unwrap().contains(word),
            "{lines:?}"
        );
    }

    // Two flows with one id: the id is named.
    let (code, lines) = host(json!([
        {"flow": 3, "config": receiver(p, json!({"messages": 10}))},
        {"flow": 3, "config": receiver(p, json!({"messages": 10}))},
    ]))
    .finish();
    assert_eq!(code, 2, "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["flow"], 3, "{lines:?}");
}

#[test]
fn end_of_input_before_t0_ends_the_waiting_flows() {
    let p = udp_port();
    let mut h = host(json!([
        {"flow": 0, "start_ns": null,
         "config": receiver(p, json!({"messages": 10, "timeout_ms": 1500}))},
        {"flow": 1, "start_ns": 0, "config": sender(p, json!({"messages": 10}))},
    ]));
    h.ready(&[0]);
    h.close_stdin();
    let (code, lines) = h.finish();
    assert_eq!(code, 1, "a flow that never ran is a failure: {lines:?}");
    let errs = errors(&lines);
    assert_eq!(errs.len(), 1, "{lines:?}");
    assert_eq!(errs[0]["flow"], 1);
    assert_eq!(errs[0]["kind"], "io");
    assert_eq!(errs[0]["message"], "flow 1: stopped before its start");
    // the running flow went on to its own end
    let r = results(&lines);
    assert_eq!(r.len(), 1, "{lines:?}");
    assert_eq!(r[&0]["end_reason"], "timeout", "{}", r[&0]);
    assert_eq!(r[&0]["received"], 0);
    let at = |t: &str| lines.iter().position(|l| l["type"] == t).unwrap();
    assert!(
        at("error") < at("result"),
        "the waiting flow ended at once: {lines:?}"
    );
}

#[test]
fn a_failing_flow_leaves_the_others_running() {
    let p = udp_port();
    // 192.0.2.1 (TEST-NET-1) is no address of this machine: binding it fails.
    let (code, lines) = host(json!([
        {"flow": 0, "config": receiver(p, json!({"messages": 10, "timeout_ms": 1500}))},
        {"flow": 4, "config": with(receiver(p, json!({"messages": 10})),
                                   json!({"listen": "192.0.2.1:9"}))},
    ]))
    .finish();
    assert_eq!(code, 1, "{lines:?}");
    let errs = errors(&lines);
    assert_eq!(errs.len(), 1, "{lines:?}");
    assert_eq!(errs[0]["flow"], 4);
    assert_eq!(errs[0]["kind"], "io");
    assert!(
        errs[0]["message"].as_str().unwrap().starts_with("flow 4: "),
        "{lines:?}"
    );
    let r = results(&lines);
    assert_eq!(r.keys().copied().collect::<Vec<_>>(), vec![0], "{lines:?}");
    assert_eq!(r[&0]["end_reason"], "timeout");
}

#[test]
fn sigterm_stops_every_flow() {
    let p = udp_port();
    let mut h = host(json!([
        {"flow": 0, "config": receiver(p, json!({"messages": 10}))},
        {"flow": 1, "start_ns": 0, "config": sender(p, json!({"messages": 10}))},
    ]));
    h.ready(&[0]);
    // SAFETY: kill with a child's pid and a signal number.
    unsafe { libc::kill(h.child.id() as i32, libc::SIGTERM) };
    let (code, lines) = h.finish();
    assert_eq!(code, 1, "flow 1 never ran: {lines:?}");
    let r = results(&lines);
    assert_eq!(r[&0]["end_reason"], "signal", "{lines:?}");
    let errs = errors(&lines);
    assert_eq!(errs.len(), 1, "{lines:?}");
    assert_eq!(errs[0]["message"], "flow 1: stopped before its start");
}

#[test]
fn version_lists_the_modes() {
    let (code, lines) = start(&["version"]).finish();
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["modes"], json!(["run", "host"]));
    assert!(lines[0]["protocols"]
        .as_array()
        .unwrap()
        .contains(&json!("udp")));
}

// --- Shared UDP receivers (docs/agent-protocol.md "Shared UDP receivers") ---

/// A socket sending from `ip` (a loopback address: all of 127/8 is this machine's).
fn from(ip: &str) -> UdpSocket {
    UdpSocket::bind(format!("{ip}:0")).unwrap_or_else(|e| panic!("bind {ip}: {e}"))
}

/// One stream message of `len` bytes as a roughnet sender frames it (`flags` 0: data).
fn message(seq: u64, flags: u16, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    let now = now_ns();
    Header {
        flags,
        seq,
        intended_ns: now,
        actual_ns: now,
    }
    .encode(&mut m);
    m
}

/// A millisecond between bursts of datagrams.
fn pause() {
    std::thread::sleep(std::time::Duration::from_millis(1));
}

/// The names of the threads of process `pid` (/proc/PID/task/*/comm).
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process's tasks")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn receivers_sharing_a_listen_address_get_exactly_their_sources_messages_in_one_thread() {
    let p = udp_port();
    let rx = |source: &str, extra: Value| {
        with(
            receiver(p, extra),
            json!({"source": source, "timeout_ms": 10_000}),
        )
    };
    let trace = std::env::temp_dir().join(format!("rn-host-shared-{}.rx", std::process::id()));
    let mut h = host(json!([
        {"flow": 20, "config": rx("127.0.0.2", json!({"messages": 50, "trace_path": trace}))},
        {"flow": 30, "config": rx("127.0.0.3", json!({"messages": 60}))},
        // learns its count from the end marker
        {"flow": 40, "config": rx("127.0.0.4", json!({"duration_ms": 1000}))},
        // runs until stopped, with interval lines
        {"flow": 60, "config": rx("127.0.0.6", json!({"duration_ms": 1000, "report_interval_ms": 100}))},
    ]));
    h.ready(&[20, 30, 40, 60]);
    let names = thread_names(h.child.id());
    let group = format!("udp-group-{p}");
    assert_eq!(
        names.iter().filter(|n| **n == group).count(),
        1,
        "one thread serves the four flows: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("flow-")),
        "no thread of their own: {names:?}"
    );

    let to = format!("127.0.0.1:{p}");
    // First a stranger: junk, and data that would complete or spoil any flow that counted it
    // (each sender has a message size of its own, so `bytes` says whose a flow counted).
    let stranger = from("127.0.0.5");
    stranger.send_to(b"not a roughnet message", &to).unwrap();
    for seq in 0..70 {
        stranger.send_to(&message(seq, 0, 100), &to).unwrap();
        if seq % 5 == 4 {
            pause(); // within the socket's default buffer, however late the receiver runs
        }
    }
    stranger
        .send_to(&message(70, FLAG_END, HEADER_LEN), &to)
        .unwrap();
    // Then the three senders, interleaved, each its own count.
    let senders: Vec<(UdpSocket, u64, usize)> = vec![
        (from("127.0.0.2"), 50, 200),
        (from("127.0.0.3"), 60, 210),
        (from("127.0.0.4"), 70, 220),
    ];
    for seq in 0..70 {
        for (s, n, size) in &senders {
            if seq < *n {
                s.send_to(&message(seq, 0, *size), &to).unwrap();
            }
        }
        pause();
    }
    senders[2]
        .0
        .send_to(&message(70, FLAG_END, HEADER_LEN), &to)
        .unwrap();
    let six = from("127.0.0.6");
    for seq in 0..5 {
        six.send_to(&message(seq, 0, 200), &to).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    h.command(json!({"stop": 60}));
    let (code, lines) = h.finish();
    let records = std::fs::read(&trace).expect("flow 20's trace");
    let _ = std::fs::remove_file(&trace);

    assert_eq!(code, 0, "{lines:?}");
    assert!(errors(&lines).is_empty(), "{lines:?}");
    let r = results(&lines);
    assert_eq!(
        r.keys().copied().collect::<Vec<_>>(),
        vec![20, 30, 40, 60],
        "{lines:?}"
    );
    for (k, n, size, reason) in [
        (20, 50, 200, "complete"),
        (30, 60, 210, "complete"),
        (40, 70, 220, "complete"),
        (60, 5, 200, "signal"),
    ] {
        let x = &r[&k];
        assert_eq!(x["role"], "receiver", "{x}");
        assert_eq!(x["protocol"], "udp", "{x}");
        assert_eq!(x["received"], n, "flow {k}: {x}");
        assert_eq!(x["bytes"], n * size, "flow {k}: {x}");
        assert_eq!(x["duplicates"], 0, "flow {k}: {x}");
        assert_eq!(x["bad_messages"], 0, "flow {k}: {x}");
        assert_eq!(x["end_reason"], reason, "flow {k}: {x}");
        assert_eq!(x["latency_actual"]["count"], n, "flow {k}: {x}");
    }
    assert_eq!(r[&40]["expected"], 70, "from its end marker: {}", r[&40]);
    assert_eq!(r[&60]["expected"], Value::Null, "{}", r[&60]);
    // the trace holds flow 20's arrivals, its own sequence numbers
    assert_eq!(r[&20]["trace_records"], 50, "{}", r[&20]);
    assert_eq!(records.len(), 50 * 32);
    let seqs: BTreeSet<u64> = records
        .chunks(32)
        .map(|c| u64::from_le_bytes(c[..8].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, (0..50).collect());
    // interval lines: flow 60's only (the others have none), each tagged
    let intervals: Vec<&Value> = lines.iter().filter(|l| l["type"] == "interval").collect();
    assert!(intervals.len() >= 2, "{lines:?}");
    assert!(intervals.iter().all(|l| l["flow"] == 60), "{intervals:?}");
    let counted: u64 = intervals
        .iter()
        .map(|l| l["messages"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, 5, "{intervals:?}");
}

#[test]
fn a_shared_receiver_flow_times_out_alone_and_sigterm_ends_the_rest() {
    let p = udp_port();
    let rx = |source: &str, timeout: u64| {
        with(
            receiver(p, json!({"messages": 10})),
            json!({"source": source, "timeout_ms": timeout}),
        )
    };
    let mut h = host(json!([
        {"flow": 1, "config": rx("127.0.0.2", 300)},
        {"flow": 2, "config": rx("127.0.0.3", 30_000)},
    ]));
    h.ready(&[1, 2]);
    let t = now_ns();
    let first = h.next_line().expect("flow 1's result");
    assert_eq!(first["type"], "result", "{first}");
    assert_eq!(first["flow"], 1, "{first}");
    assert_eq!(first["end_reason"], "timeout", "{first}");
    assert!(now_ns() - t < 5_000_000_000, "timed out on time");
    // SAFETY: kill with a child's pid and a signal number.
    unsafe { libc::kill(h.child.id() as i32, libc::SIGTERM) };
    let (code, lines) = h.finish();
    assert_eq!(code, 0, "{lines:?}");
    let r = results(&lines);
    assert_eq!(r[&2]["end_reason"], "signal", "{lines:?}");
}

#[test]
fn a_shared_receiver_that_cannot_bind_fails_each_of_its_flows() {
    // 192.0.2.1 (TEST-NET-1) is no address of this machine.
    let rx = |source: &str| {
        with(
            receiver(9, json!({"messages": 10})),
            json!({"listen": "192.0.2.1:9", "source": source}),
        )
    };
    let (code, lines) = host(json!([
        {"flow": 1, "config": rx("127.0.0.2")},
        {"flow": 2, "config": rx("127.0.0.3")},
    ]))
    .finish();
    assert_eq!(code, 1, "{lines:?}");
    let errs = errors(&lines);
    assert_eq!(errs.len(), 2, "{lines:?}");
    for (e, k) in errs.iter().zip([1, 2]) {
        assert_eq!(e["flow"], k, "{lines:?}");
        assert_eq!(e["kind"], "io", "{lines:?}");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!("flow {k}: bind")) && msg.contains("192.0.2.1:9"),
            "{msg}"
        );
    }
}

#[test]
fn two_flows_on_one_udp_address_without_sources_are_refused() {
    let p = udp_port();
    let (code, lines) = host(json!([
        {"flow": 1, "config": with(receiver(p, json!({"messages": 10})), json!({"source": "127.0.0.2"}))},
        {"flow": 2, "config": receiver(p, json!({"messages": 10}))},
    ]))
    .finish();
    assert_eq!(code, 2, "{lines:?}");
    assert_eq!(lines.len(), 1, "nothing started: {lines:?}");
    assert_eq!(lines[0]["kind"], "config");
    assert_eq!(lines[0]["flow"], 2);
    assert_eq!(
        lines[0]["message"],
        format!(
            "flow 2: listen 127.0.0.1:{p} is also flow 1's; a shared UDP receiver needs source on both"
        )
    );
}

#[test]
fn a_run_receiver_with_a_source_ignores_other_senders() {
    let p = udp_port();
    let cfg = with(
        receiver(p, json!({"messages": 40})),
        json!({"source": "127.0.0.2", "timeout_ms": 10_000}),
    );
    let mut h = start(&["run", "--config-json", &cfg.to_string()]);
    let ready = h.next_line().expect("ready");
    assert_eq!(ready["type"], "ready", "{ready}");
    let to = format!("127.0.0.1:{p}");
    // A stranger first: its messages would be counted as seq 0..19 (then the real ones as
    // duplicates), its junk as bad messages, its end marker would end the stream early.
    let stranger = from("127.0.0.3");
    stranger.send_to(b"junk", &to).unwrap();
    for seq in 0..20 {
        stranger.send_to(&message(seq, 0, 100), &to).unwrap();
    }
    stranger
        .send_to(&message(20, FLAG_END, HEADER_LEN), &to)
        .unwrap();
    let real = from("127.0.0.2");
    for seq in 0..40 {
        real.send_to(&message(seq, 0, 200), &to).unwrap();
    }
    let (code, lines) = h.finish();
    assert_eq!(code, 0, "{lines:?}");
    let r = lines
        .iter()
        .find(|l| l["type"] == "result")
        .expect("result");
    assert_eq!(r["end_reason"], "complete", "{r}");
    assert_eq!(r["expected"], 40, "{r}");
    assert_eq!(r["received"], 40, "{r}");
    assert_eq!(r["bytes"], 40 * 200, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["bad_messages"], 0, "{r}");
}

#[test]
fn source_is_refused_where_it_does_not_belong() {
    let p = udp_port();
    let tcp = with(
        receiver(p, json!({"messages": 10})),
        json!({"protocol": "tcp", "source": "127.0.0.2"}),
    );
    let tx = with(
        sender(p, json!({"messages": 10})),
        json!({"source": "127.0.0.2"}),
    );
    let port = with(
        receiver(p, json!({"messages": 10})),
        json!({"source": "127.0.0.2:5000"}),
    );
    let name = with(
        receiver(p, json!({"messages": 10})),
        json!({"source": "car-3"}),
    );
    for (cfg, word) in [
        (tcp, "this is a tcp stream receiver"),
        (tx, "stream sender"),
        (port, "without a port"),
        (name, "without a port"),
    ] {
        let (code, lines) = start(&["run", "--config-json", &cfg.to_string()]).finish();
        assert_eq!(code, 2, "{cfg}: {lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["kind"], "config");
        let msg = lines[0]["message"].as_str().unwrap();
        assert!(msg.contains("`source`") && msg.contains(word), "{msg}");
    }
}

#[test]
fn zenoh_flows_that_cannot_share_one_session_are_refused_naming_both_and_the_keys() {
    let p = udp_port();
    let rx = with(
        receiver(p, json!({"messages": 10})),
        json!({"protocol": "zenoh", "source": "127.0.0.1"}),
    );
    let tx = with(
        sender(p + 1, json!({"messages": 10})),
        json!({"protocol": "zenoh", "options": {"transport": "udp"}}),
    );
    let (code, lines) = host(json!([
        {"flow": 4, "start_ns": null, "config": rx},
        {"flow": 9, "start_ns": 0, "config": tx},
    ]))
    .finish();
    assert_eq!(code, 2, "{lines:?}");
    assert_eq!(lines.len(), 1, "one error line, nothing started: {lines:?}");
    assert_eq!(
        (&lines[0]["kind"], &lines[0]["flow"]),
        (&json!("config"), &json!(9))
    );
    let msg = lines[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("flows 4 and 9") && msg.contains("options.transport tcp and udp"),
        "{msg}"
    );
}

#[test]
fn mqtt_flows_that_cannot_share_one_client_are_refused_naming_both_and_the_keys() {
    let p = udp_port();
    let mqtt = |topic: &str, options: Value| json!({"protocol": "mqtt", "broker": "127.0.0.1:1883", "topic": topic, "options": options});
    let rx = with(
        receiver(p, json!({"messages": 10})),
        mqtt("t/a", json!({"qos": 1})),
    );
    let tx = with(
        sender(p + 1, json!({"messages": 10})),
        mqtt("t/b", json!({"keep_alive": 10_000_000_000u64})),
    );
    let (code, lines) = host(json!([
        {"flow": 3, "start_ns": null, "config": rx},
        {"flow": 7, "start_ns": 0, "config": tx},
    ]))
    .finish();
    assert_eq!(code, 2, "{lines:?}");
    assert_eq!(lines.len(), 1, "one error line, nothing started: {lines:?}");
    assert_eq!(
        (&lines[0]["kind"], &lines[0]["flow"]),
        (&json!("config"), &json!(7))
    );
    let msg = lines[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("flows 3 and 7") && msg.contains("keep_alive 30 s and 10 s"),
        "{msg}"
    );
}

/// The host's zenoh session stays open until every planned zenoh flow has held it: a flow that
/// starts after the others ended (a sender whose receivers gave up while a large fleet got ready)
/// uses the same session.  A second session on the same listen address, opened while zenoh still
/// closed the first, was refused with "Address already in use" at 100 cars.
#[test]
fn a_zenoh_flow_starting_after_the_others_ended_finds_the_session_open() {
    let p = udp_port();
    let rx = |topic: &str| {
        with(
            receiver(p, json!({"messages": 10, "timeout_ms": 700})),
            json!({"protocol": "zenoh", "topic": topic, "source": "127.0.0.1"}),
        )
    };
    let flows = json!([
        {"flow": 1, "start_ns": null, "config": rx("roughnet/early")},
        // starts 1.5 s after t0: flow 1 has timed out (0.7 s) and let go of the session by then
        {"flow": 2, "start_ns": 1_500_000_000u64, "config": rx("roughnet/late")},
    ]);
    let mut child = Command::new(AGENT)
        .args([
            "host",
            "--config-json",
            &json!({"v": 1, "flows": flows}).to_string(),
        ])
        .env("RUST_LOG", "roughnet_agent=info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roughnet-agent");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read the ready line");
    let ready: Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(
        (&ready["type"], &ready["flow"]),
        (&json!("ready"), &json!(1)),
        "{line}"
    );
    writeln!(stdin, "{}", json!({"t0_ns": now_ns()})).expect("write t0");
    drop(stdin);
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read stdout");
    let done = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&done.stderr);
    let lines: Vec<Value> = rest
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(errors(&lines).is_empty(), "{lines:?}\n{stderr}");
    let r = results(&lines);
    for k in [1u64, 2] {
        assert_eq!(r[&k]["end_reason"], "timeout", "{lines:?}");
    }
    let opened = stderr.matches("opened the host's zenoh session").count();
    assert_eq!(opened, 1, "one session for both flows:\n{stderr}");
    assert_eq!(done.status.code(), Some(0), "{stderr}");
}
