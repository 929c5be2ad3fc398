//! End to end through real brokers on loopback: mosquitto (MQTT 3.1.1 and 5,
//! QoS 0/1/2, TLS), nats-server and Apache Kafka (KRaft, single node), each
//! started here on a free port and ended by PID.  A test whose broker is not
//! installed prints why and returns (Kafka: the jars in
//! $ROUGHNET_KAFKA_LIBS or /var/cache/roughnet/kafka-4.3.1/libs).
//! Properties only (counts, consistency); no wall-clock bounds.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use roughnet_agent::hist;

const AGENT: &str = env!("CARGO_BIN_EXE_roughnet-agent");

// ---------------------------------------------------------------- agents

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
    fn ready(&mut self) {
        loop {
            let l = self.next_line().expect("agent ended before printing ready");
            if l["type"] == "ready" {
                return;
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

fn cfg(
    role: &str,
    protocol: &str,
    pattern: &str,
    broker: &str,
    topic: &str,
    extra: Value,
) -> Value {
    let mut c = json!({"v":1, "role": role, "protocol": protocol, "pattern": pattern,
                       "broker": broker, "topic": topic,
                       "payload_bytes": 200, "timeout_ms": 30_000, "report_interval_ms": 0});
    for (k, v) in extra.as_object().expect("object") {
        c[k] = v.clone();
    }
    c
}

/// Start every listener, wait for their `ready`, run the connector; results.
fn run(listeners: Vec<Value>, connector: Value) -> (Vec<Value>, Value) {
    let mut ls: Vec<Running> = listeners.iter().map(start).collect();
    for l in &mut ls {
        l.ready();
    }
    let (c_code, c_lines) = start(&connector).finish();
    assert_eq!(c_code, 0, "connector exit code; lines {c_lines:?}");
    let mut rs = Vec::new();
    for l in ls {
        let (code, lines) = l.finish();
        assert_eq!(code, 0, "listener exit code; lines {lines:?}");
        rs.push(result_of(&lines));
    }
    (rs, result_of(&c_lines))
}

fn check_latency(obj: &Value, count: u64) {
    assert_eq!(obj["count"], count, "{obj}");
    let h = hist::deserialize(obj["hdr"].as_str().expect("hdr")).expect("hdr decodes");
    assert_eq!(h.len(), count);
    if count > 0 {
        let (min, p50, max) = (
            obj["min_us"].as_f64().unwrap(),
            obj["p50_us"].as_f64().unwrap(),
            obj["max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= p50 && p50 <= max, "{obj}");
    }
}

/// A reliable stream of `n` messages to `receivers` subscribers: every one arrives once.
fn stream_all(
    protocol: &str,
    broker: &str,
    topic: &str,
    receivers: usize,
    n: u64,
    extra: Value,
) -> Value {
    let mut e = extra;
    e["messages"] = json!(n);
    e["warmup"] = json!(5);
    let rx = cfg("receiver", protocol, "stream", broker, topic, e.clone());
    let (rs, tx) = run(
        vec![rx; receivers],
        cfg("sender", protocol, "stream", broker, topic, e),
    );
    assert_eq!(tx["sent"], n, "{tx}");
    assert_eq!(tx["peers"], 1);
    for r in &rs {
        // the sender's result beside the receiver's: its acks and errors tell a message never written from
        // one never read (seen once in CI: a kafka receiver with the end marker and none of the data)
        assert_eq!(r["received"], n, "{r}\nsender: {tx}");
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(r["duplicates"], 0, "{r}");
        assert_eq!(r["warmup_received"], 5, "{r}");
        assert_eq!(r["complete"], true, "{r}");
        check_latency(&r["latency_actual"], n);
    }
    tx
}

fn ping(protocol: &str, broker: &str, topic: &str, pattern: &str, extra: Value) {
    let mut e = extra;
    e["messages"] = json!(50);
    e["warmup"] = json!(2);
    if pattern == "ramp" {
        e["step_bytes"] = json!(1000);
    }
    let (rs, pi) = run(
        vec![cfg("ponger", protocol, pattern, broker, topic, e.clone())],
        cfg("pinger", protocol, pattern, broker, topic, e),
    );
    assert_eq!(pi["sent"], 50, "{pi}");
    assert_eq!(pi["received"], 50, "{pi}");
    assert_eq!(pi["lost"], 0, "{pi}");
    check_latency(&pi["rtt_actual"], 50);
    assert_eq!(rs[0]["received"], 50, "{}", rs[0]);
    if pattern == "ramp" {
        let pts = pi["points"].as_array().expect("points");
        assert_eq!(pts.len(), 50);
        assert_eq!(pts[49][0], 200 + 49 * 1000, "{pi}");
    }
}

fn bulk(protocol: &str, broker: &str, topic: &str, extra: Value) {
    let mut e = extra;
    e["messages"] = json!(300);
    e["payload_bytes"] = json!(16_384);
    let (rs, tx) = run(
        vec![cfg("receiver", protocol, "bulk", broker, topic, e.clone())],
        cfg("sender", protocol, "bulk", broker, topic, e),
    );
    assert_eq!(tx["sent"], 300, "{tx}");
    if protocol == "nats" {
        // Core NATS is at-most-once: a subscriber that falls behind a burst of 16 KiB
        // messages loses some (a slow consumer). What must hold is the accounting,
        // and that the run ends by the end marker, not by the timeout.
        let (got, lost) = (
            rs[0]["received"].as_u64().unwrap(),
            rs[0]["lost"].as_u64().unwrap(),
        );
        assert_eq!(got + lost, 300, "{}", rs[0]);
        assert!(got > 0, "{}", rs[0]);
        assert_eq!(rs[0]["bytes"], got * 16_384, "{}", rs[0]);
        let end = rs[0]["end_reason"].as_str().unwrap_or("");
        assert!(end == "complete" || end == "end_marker", "{}", rs[0]);
        return;
    }
    assert_eq!(rs[0]["received"], 300, "{}", rs[0]);
    assert_eq!(rs[0]["bytes"], 300 * 16_384, "{}", rs[0]);
}

// ---------------------------------------------------------------- brokers

/// A broker process, ended by PID when dropped.
struct Broker {
    child: Child,
    dir: PathBuf,
    addr: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Broker {
    /// SIGKILL, as a crash would.
    fn crash(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A broker that dies in mid-run makes both agents fail (exit 1) with an error
/// that names it, instead of waiting for the timeout.
fn broker_crash_fails_the_run(protocol: &str, b: &mut Broker, topic: &str, extra: Value) {
    let mut e = extra;
    e["messages"] = json!(1_000_000);
    e["rate_msgs_per_s"] = json!(1000.0);
    e["timeout_ms"] = json!(60_000);
    let mut rx = start(&cfg(
        "receiver",
        protocol,
        "stream",
        &b.addr,
        topic,
        e.clone(),
    ));
    rx.ready();
    let tx = start(&cfg("sender", protocol, "stream", &b.addr, topic, e));
    // Let messages flow for a while (no assertion depends on how long).
    std::thread::sleep(Duration::from_millis(1500));
    b.crash();
    let t = Instant::now();
    for (name, agent) in [("sender", tx), ("receiver", rx)] {
        let (code, lines) = agent.finish();
        assert_eq!(
            code, 1,
            "{protocol} {name} after the broker died: {lines:?}"
        );
        let err = lines
            .iter()
            .find(|l| l["type"] == "error")
            .expect("an error line");
        let msg = err["message"].as_str().unwrap();
        assert!(msg.contains(&b.addr), "{protocol} {name}: {msg}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(50),
        "{protocol}: agents waited for their timeout"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rn-brokered-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn which(bin: &str) -> Option<PathBuf> {
    for d in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/sbin", "/bin"] {
        let p = Path::new(d).join(bin);
        if p.exists() {
            return Some(p);
        }
    }
    None
}

/// Wait until `port` accepts TCP connections (the broker listens).
fn wait_listening(b: &mut Broker, port: u16, what: &str) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(st)) = b.child.try_wait() {
            panic!(
                "{what} exited ({st}) before listening; see {}",
                b.dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not listen on port {port} within 60 s");
}

fn mosquitto(tls: Option<&Path>) -> Option<Broker> {
    mosquitto_with(tls, 100, "")
}

/// mosquitto with `max_inflight_messages` = `max_inflight` (per client, both directions:
/// mosquitto 2.0 also caps a client's incoming QoS 2 messages awaiting PUBREL with it).
fn mosquitto_with(tls: Option<&Path>, max_inflight: u32, name: &str) -> Option<Broker> {
    let bin = which("mosquitto")?;
    let dir = scratch(&format!(
        "mosquitto{}{name}",
        if tls.is_some() { "-tls" } else { "" }
    ));
    let port = free_port();
    let mut conf = format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_inflight_messages {max_inflight}\nmax_queued_messages 100000\n"
    );
    if let Some(certs) = tls {
        conf += &format!(
            "cafile {0}/ca.pem\ncertfile {0}/server.pem\nkeyfile {0}/server.key\n",
            certs.display()
        );
    }
    std::fs::write(dir.join("mosquitto.conf"), conf).unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let child = Command::new(bin)
        .args(["-c", dir.join("mosquitto.conf").to_str().unwrap()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start mosquitto");
    let mut b = Broker {
        child,
        dir,
        addr: format!("127.0.0.1:{port}"),
    };
    wait_listening(&mut b, port, "mosquitto");
    Some(b)
}

fn nats_server() -> Option<Broker> {
    let bin = which("nats-server")?;
    let dir = scratch("nats");
    let port = free_port();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start nats-server");
    let mut b = Broker {
        child,
        dir,
        addr: format!("127.0.0.1:{port}"),
    };
    wait_listening(&mut b, port, "nats-server");
    Some(b)
}

fn kafka_libs() -> Option<PathBuf> {
    let p = std::env::var_os("ROUGHNET_KAFKA_LIBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/roughnet/kafka-4.3.1/libs"));
    let has_jars = std::fs::read_dir(&p)
        .ok()?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("kafka_2.13"));
    (has_jars && which("java").is_some()).then_some(p)
}

fn kafka() -> Option<Broker> {
    let libs = kafka_libs()?;
    let dir = scratch("kafka");
    let (port, cport) = (free_port(), free_port());
    let props = format!(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{cport}\n\
         listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n\
         advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\nlog.dirs={}\n\
         offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n\
         transaction.state.log.min.isr=1\ngroup.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n",
        dir.join("data").display()
    );
    let conf = dir.join("server.properties");
    std::fs::write(&conf, props).unwrap();
    let cp = format!("{}/*", libs.display());
    let st = Command::new("java")
        .args([
            "-Xmx256m",
            "-cp",
            &cp,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            "rnTestCluster00000000A",
            "-c",
        ])
        .arg(&conf)
        .stdout(Stdio::null())
        .status()
        .expect("run StorageTool");
    assert!(st.success(), "kafka StorageTool format failed");
    // The jars carry no logging configuration: log INFO to stdout, for the readiness line.
    let log4j = dir.join("log4j2.properties");
    std::fs::write(
        &log4j,
        "appender.out.type = Console\nappender.out.name = OUT\nappender.out.layout.type = PatternLayout\n\
         appender.out.layout.pattern = [%d] %p %m (%c)%n\nrootLogger.level = info\nrootLogger.appenderRef.out.ref = OUT\n",
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let child = Command::new("java")
        .arg("-Xmx512m")
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .args(["-cp", &cp, "kafka.Kafka"])
        .arg(&conf)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start kafka");
    let mut b = Broker {
        child,
        dir,
        addr: format!("127.0.0.1:{port}"),
    };
    wait_listening(&mut b, port, "kafka");
    // Listening comes a little before the broker serves requests: wait for its log line.
    let t = Instant::now();
    loop {
        let mut s = String::new();
        let _ = std::fs::File::open(b.dir.join("log")).and_then(|mut f| f.read_to_string(&mut s));
        if s.contains("Kafka Server started") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "kafka did not start: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(b)
}

/// A CA and a server certificate for 127.0.0.1 (openssl), or None without openssl.
fn certificates(name: &str) -> Option<PathBuf> {
    let openssl = which("openssl")?;
    let d = scratch(name);
    let run = |args: &[&str]| {
        let st = Command::new(&openssl)
            .args(args)
            .current_dir(&d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=roughnet test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(d.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext",
        "-out",
        "server.pem",
    ]);
    // mosquitto started as root drops to its own user, which must read the key.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(d.join("server.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    Some(d)
}

// ---------------------------------------------------------------- tests

#[test]
fn mqtt_through_mosquitto() {
    let Some(mut b) = mosquitto(None) else {
        eprintln!("SKIP mqtt_through_mosquitto: mosquitto is not installed");
        return;
    };
    let a = b.addr.as_str();
    for (i, (version, qos)) in [
        ("3.1.1", 0),
        ("3.1.1", 1),
        ("3.1.1", 2),
        ("5", 0),
        ("5", 1),
        ("5", 2),
    ]
    .into_iter()
    .enumerate()
    {
        let opts = json!({"options": {"version": version, "qos": qos}});
        let tx = stream_all("mqtt", a, &format!("rn/t{i}"), 2, 500, opts.clone());
        assert!(tx.get("ack_latency").is_none());
        ping("mqtt", a, &format!("rn/p{i}"), "ping", opts.clone());
    }
    let opts = json!({"options": {"qos": 1, "inflight": 10, "keep_alive": 5_000_000_000u64, "clean_session": false}});
    ping("mqtt", a, "rn/ramp", "ramp", opts.clone());
    bulk("mqtt", a, "rn/bulk", opts);
    // A rate-limited stream by duration learns its count from the end marker.
    let e = json!({"duration_ms": 300, "rate_msgs_per_s": 1000.0, "options": {"qos": 1}});
    let (rs, tx) = run(
        vec![cfg("receiver", "mqtt", "stream", a, "rn/dur", e.clone())],
        cfg("sender", "mqtt", "stream", a, "rn/dur", e),
    );
    assert_eq!(rs[0]["expected"], tx["sent"], "{}", rs[0]);
    assert_eq!(rs[0]["received"], tx["sent"]);
    broker_crash_fails_the_run("mqtt", &mut b, "rn/crash", json!({"options": {"qos": 1}}));
}

/// Issue 5: QoS 2 lost about half of 400 messages over a 10 % lossy leg.  mosquitto
/// holds each incoming QoS 2 message until its PUBREL and refuses more than
/// `max_inflight_messages` of them with a PUBREC that a 3.1.1 client cannot tell from
/// success (reason codes exist only in MQTT 5), so a publisher whose window (`inflight`,
/// 100 by default) exceeds the broker's limit loses the excess silently.  A burst with
/// no rate against a broker limit of 3 makes the window fill on loopback too.
#[test]
fn mqtt_qos2_publisher_window_fits_the_broker() {
    let Some(b) = mosquitto_with(None, 3, "-small-window") else {
        eprintln!("SKIP mqtt_qos2_publisher_window_fits_the_broker: mosquitto is not installed");
        return;
    };
    for (i, version) in ["3.1.1", "5"].into_iter().enumerate() {
        let opts = json!({"options": {"version": version, "qos": 2}});
        stream_all("mqtt", &b.addr, &format!("rn/q2w{i}"), 1, 2000, opts);
    }
}

#[test]
fn mqtt_over_tls() {
    let Some(certs) = certificates("certs") else {
        eprintln!("SKIP mqtt_over_tls: openssl is not installed");
        return;
    };
    let Some(b) = mosquitto(Some(&certs)) else {
        eprintln!("SKIP mqtt_over_tls: mosquitto is not installed");
        return;
    };
    let ca = certs.join("ca.pem");
    for version in ["3.1.1", "5"] {
        let opts = json!({"options": {"version": version, "qos": 1, "tls": true, "tls_ca": ca}});
        stream_all("mqtt", &b.addr, "rn/tls", 1, 200, opts);
    }
    // A client that does not trust the server's CA fails with a clear error.
    let wrong = certificates("other-ca").unwrap().join("ca.pem");
    let c = cfg(
        "sender",
        "mqtt",
        "stream",
        &b.addr,
        "rn/tls",
        json!({"messages": 1, "timeout_ms": 5000,
        "options": {"tls": true, "tls_ca": wrong}}),
    );
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 1, "{lines:?}");
    assert!(lines.iter().any(|l| l["type"] == "error"), "{lines:?}");
    let _ = std::fs::remove_dir_all(&certs);
    let _ = std::fs::remove_dir_all(wrong.parent().unwrap());
}

#[test]
fn mqtt_errors_are_clear() {
    // No broker listening: the sender retries, then gives up naming the broker (at
    // QoS 2 over 3.1.1 after first asking for the broker's receive maximum).
    for qos in [0, 2] {
        let port = free_port();
        let c = cfg(
            "sender",
            "mqtt",
            "stream",
            &format!("127.0.0.1:{port}"),
            "rn/x",
            json!({"messages": 1, "timeout_ms": 500, "options": {"qos": qos}}),
        );
        let (code, lines) = start(&c).finish();
        assert_eq!(code, 1, "{lines:?}");
        let msg = lines
            .iter()
            .find(|l| l["type"] == "error")
            .expect("an error line")["message"]
            .to_string();
        assert!(
            msg.contains(&port.to_string()) && msg.contains("MQTT broker"),
            "qos {qos}: {msg}"
        );
    }
    // A missing broker key is a configuration error (exit 2) that names it.
    let mut c = cfg(
        "receiver",
        "mqtt",
        "stream",
        "x",
        "t",
        json!({"messages": 1}),
    );
    c.as_object_mut().unwrap().remove("broker");
    let (code, lines) = start(&c).finish();
    assert_eq!(code, 2, "{lines:?}");
    assert!(
        lines[0]["message"]
            .as_str()
            .unwrap()
            .contains("or `broker`"),
        "{lines:?}"
    );
}

#[test]
fn nats_through_nats_server() {
    let Some(mut b) = nats_server() else {
        eprintln!("SKIP nats_through_nats_server: nats-server is not installed");
        return;
    };
    let a = b.addr.as_str();
    stream_all("nats", a, "rn.stream", 2, 2000, json!({}));
    stream_all(
        "nats",
        a,
        "rn.rate",
        1,
        500,
        json!({"rate_msgs_per_s": 5000.0}),
    );
    ping("nats", a, "rn.ping", "ping", json!({}));
    ping("nats", a, "rn.ramp", "ramp", json!({}));
    // Open loop: requests go out on a schedule, several outstanding at once.
    ping(
        "nats",
        a,
        "rn.open",
        "ping",
        json!({"interval_ns": 200_000}),
    );
    bulk("nats", a, "rn.bulk", json!({}));
    broker_crash_fails_the_run("nats", &mut b, "rn.crash", json!({}));
}

#[test]
fn kafka_through_a_kraft_broker() {
    let Some(mut b) = kafka() else {
        eprintln!(
            "SKIP kafka_through_a_kraft_broker: no Kafka jars (set ROUGHNET_KAFKA_LIBS) or no java"
        );
        return;
    };
    let a = b.addr.as_str();
    let tx = stream_all(
        "kafka",
        a,
        "rn/k1",
        2,
        1000,
        json!({"options": {"linger": 0}}),
    );
    let ack = &tx["ack_latency"];
    // Every message and the end marker got a delivery report.
    assert_eq!(ack["count"], 1000 + 5 + 1, "{tx}");
    check_latency(ack, 1006);
    assert_eq!(tx["delivery_errors"], 0);
    assert_eq!(tx["unacked"], 0, "{tx}");
    // Three partitions: the end marker reaches each, so the receiver completes.
    let opts = json!({"options": {"partitions": 3, "acks": "1", "compression": "lz4", "batch_size": 65536}});
    let tx = stream_all("kafka", a, "rn/k3", 1, 1000, opts);
    assert_eq!(tx["ack_latency"]["count"], 1000 + 5 + 3);
    stream_all(
        "kafka",
        a,
        "rn/kidem",
        1,
        300,
        json!({"options": {"idempotence": true, "compression": "zstd"}}),
    );
    ping(
        "kafka",
        a,
        "rn/kping",
        "ping",
        json!({"options": {"linger": 0, "fetch_max_wait": 10_000_000}}),
    );
    ping(
        "kafka",
        a,
        "rn/kramp",
        "ramp",
        json!({"options": {"linger": 0}}),
    );
    bulk("kafka", a, "rn/kbulk", json!({}));
    broker_crash_fails_the_run(
        "kafka",
        &mut b,
        "rn/kcrash",
        json!({"options": {"linger": 0}}),
    );
}
