//! Host mode (`roughnet-agent host`): one process carries several flows (issue 27, one agent
//! per host; docs/agent-protocol.md "Host mode: several flows in one process").
//!
//! The host object lists flows, each an ordinary run configuration with an id and an optional
//! start offset.  Every configuration is checked and its driver created before anything runs
//! (`parse`); then each flow runs `patterns::run` in its own thread (`flow-K`), which prints
//! for flow K (`output::set_flow`: every line carries `"flow": K`) and watches its own stop
//! flag beside the process-wide one (`signals::set_flow_stop`).  Standard input carries the
//! runner's commands, one JSON object a line: `{"t0_ns": T}` (the instant the offsets count
//! from, CLOCK_MONOTONIC ns) and `{"stop": K}` (stop flow K as SIGTERM would).  A flow's
//! failure is its own: the others go on; `run` says how many failed.
//!
//! UDP stream receivers that listen on one address, each with a `source` of its own, share one
//! socket and one thread (`udp-group-PORT`, crate::host::udp_group), which hands each datagram to the
//! flow whose source sent it (`shared_receivers` says which flows; two UDP flows that would bind
//! one address otherwise are a configuration error).  The DDS flows share one Cyclone domain and
//! participant per domain id (drivers::dds::install_host_domains: Cyclone has one domain per id in
//! a process, and a car runs one participant), each flow with readers and writers of its own; flows
//! whose domain knobs differ are a configuration error (`dds_plan`).  The zenoh flows share one
//! session (drivers::zenoh::install_host_session), which opens one link per pair of hosts; flows
//! whose session knobs differ are a configuration error (`zenoh_plan`).  The MQTT 3.1.1 flows
//! without `reconnect` share one client per broker (drivers::mqtt::install_host_clients), one
//! connection with every flow's subscriptions and publications; flows of one broker whose
//! connection knobs differ are a configuration error (`mqtt_plan`).  The NATS flows share one
//! connection per server (drivers::nats::install_host_clients; async-nats multiplexes the flows'
//! subscriptions on it); flows whose `reconnect` differs are a configuration error (`nats_plan`).
//! Kafka, ZeroMQ and TCP flows have a driver (client, sockets) of their own.

use std::collections::HashMap;
use std::io::BufRead;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::clock::{now_ns, sleep_until_ns};

use crate::output;
use crate::patterns;
use crate::signals::{self, stop_requested, POLL_SLICE_NS};

mod outcome;
mod plan;
pub mod udp_group;

pub(crate) use outcome::report;
pub use outcome::{describe, run_flow, FlowError, Outcome};
use outcome::{not_started, panic_message};
pub use plan::{
    dds_plan, mqtt_plan, nats_plan, parse, shared_receivers, zenoh_plan, Flow, HostError,
    HOST_VERSION, MAX_FLOWS,
};
use udp_group::Member;

/// A line of standard input the host understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `{"t0_ns": T}`: the instant (CLOCK_MONOTONIC ns) the flows' `start_ns` count from.
    T0(u64),
    /// `{"stop": K}`: stop flow K as SIGTERM would.
    Stop(u32),
}

/// Read one command line; Err says why it is not one.
pub fn parse_command(line: &str) -> Result<Command, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let m = v.as_object().ok_or("not a JSON object")?;
    if m.len() == 1 {
        if let Some(t) = m.get("t0_ns") {
            return t.as_u64().map(Command::T0).ok_or_else(|| {
                format!("t0_ns = {t}: expected CLOCK_MONOTONIC ns, an integer >= 0")
            });
        }
        if let Some(k) = m.get("stop") {
            return k
                .as_u64()
                .and_then(|k| u32::try_from(k).ok())
                .map(Command::Stop)
                .ok_or_else(|| format!("stop = {k}: expected a flow id"));
        }
    }
    Err("expected {\"t0_ns\": T} or {\"stop\": K}".into())
}

/// What the flows wait for before their start: t0, and whether standard input ended.
#[derive(Default)]
struct Gate {
    t0: Option<u64>,
    eof: bool,
}

#[derive(Default)]
struct Shared {
    gate: Mutex<Gate>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Run every flow, each in its own thread (a shared UDP receiver's flows in one thread together,
/// crate::host::udp_group), reading commands from `commands` (standard input) in another; returns once
/// every flow has ended, with the number that failed (each failure's error line already
/// printed).  The caller has installed the signal handler and timer slack.
pub fn run(flows: Vec<Flow>, commands: impl BufRead + Send + 'static) -> usize {
    let groups = match shared_receivers(&flows).and_then(|g| {
        // Every DDS flow of one domain id shares the process's participant.
        #[cfg(feature = "dds")]
        crate::drivers::dds::install_host_domains(dds_plan(&flows)?);
        // Every zenoh flow shares the process's session.
        #[cfg(feature = "zenoh")]
        crate::drivers::zenoh::install_host_session(zenoh_plan(&flows)?);
        // Every MQTT flow shares the process's client to its broker.
        #[cfg(feature = "mqtt")]
        crate::drivers::mqtt::install_host_clients(mqtt_plan(&flows)?);
        // The NATS flows share one connection per server.
        #[cfg(feature = "nats")]
        crate::drivers::nats::install_host_clients(nats_plan(&flows)?);
        Ok(g)
    }) {
        Ok(g) => g,
        Err(e) => {
            // parse checks this; flows built otherwise get the same refusal, nothing started
            let message = describe(&e);
            tracing::error!("{message}");
            match e.flow() {
                Some(k) => output::with_flow(k, || output::error("config", &message)),
                None => output::error("config", &message),
            }
            return flows.len();
        }
    };
    let shared = Arc::new(Shared::default());
    // One flag per flow for the process's life (at most MAX_FLOWS bytes): see signals::FLOW_STOP.
    let flags: HashMap<u32, &'static AtomicBool> = flows
        .iter()
        .map(|f| (f.id, &*Box::leak(Box::new(AtomicBool::new(false)))))
        .collect();
    {
        let (gate, flags) = (shared.clone(), flags.clone());
        let reader = std::thread::Builder::new()
            .name("host-stdin".into())
            .spawn(move || read_commands(commands, &gate, &flags));
        if let Err(e) = reader {
            // Without commands no flow gets t0: the waiting ones end as at end of input.
            tracing::error!("cannot start the thread reading standard input: {e}");
            shared.lock().eof = true;
        }
    }
    // What each thread runs, in the order of the flows (a group where its first flow was).
    let mut group_of = vec![None; flows.len()];
    for (g, members) in groups.iter().enumerate() {
        for &i in members {
            group_of[i] = Some(g);
        }
    }
    let mut slots: Vec<Option<Flow>> = flows.into_iter().map(Some).collect();
    let mut units = Vec::new();
    for i in 0..slots.len() {
        match group_of[i] {
            None => units.push(Unit::Flow(Box::new(
                slots[i].take().expect("each flow once"),
            ))),
            Some(g) if groups[g][0] == i => units.push(Unit::Group(
                groups[g]
                    .iter()
                    .map(|&k| slots[k].take().expect("each flow once"))
                    .collect(),
            )),
            Some(_) => {}
        }
    }
    let mut failed = 0;
    let mut threads = Vec::with_capacity(units.len());
    for unit in units {
        let ids = unit.ids();
        let (name, body): (String, ThreadBody) = match unit {
            Unit::Flow(f) => {
                let id = f.id;
                let flag = flags[&id];
                let shared = shared.clone();
                (
                    format!("flow-{id}"),
                    Box::new(move || vec![(id, run_one(*f, flag, &shared))]),
                )
            }
            Unit::Group(fs) => {
                let port = fs[0].cfg.listen.map_or(0, |a| a.port());
                let members: Vec<(Flow, &'static AtomicBool)> = fs
                    .into_iter()
                    .map(|f| {
                        let flag = flags[&f.id];
                        (f, flag)
                    })
                    .collect();
                let shared = shared.clone();
                (
                    udp_group::thread_name(port),
                    Box::new(move || run_group(members, &shared)),
                )
            }
        };
        match std::thread::Builder::new().name(name).spawn(body) {
            Ok(t) => threads.push((ids, t)),
            Err(e) => {
                for id in ids {
                    failed += 1;
                    let out = Outcome::Failed {
                        kind: "io",
                        message: format!("flow {id}: cannot start its thread: {e}"),
                    };
                    output::with_flow(id, || report(&out));
                }
            }
        }
    }
    for (ids, t) in threads {
        match t.join() {
            Ok(outs) => {
                failed += outs
                    .iter()
                    .filter(|(_, o)| matches!(o, Outcome::Failed { .. }))
                    .count()
            }
            Err(p) => {
                // run_flow and run_group catch panics; this is one in reporting them.
                for id in ids {
                    failed += 1;
                    let out = Outcome::Failed {
                        kind: "io",
                        message: format!(
                            "flow {id}: internal error: {}",
                            panic_message(p.as_ref())
                        ),
                    };
                    output::with_flow(id, || report(&out));
                }
            }
        }
    }
    failed
}

/// What one thread runs: a flow, or the flows of a shared UDP receiver.
enum Unit {
    Flow(Box<Flow>),
    Group(Vec<Flow>),
}

/// A thread's work: its flows' outcomes, each failure's error line printed.
type ThreadBody = Box<dyn FnOnce() -> Vec<(u32, Outcome)> + Send>;

impl Unit {
    fn ids(&self) -> Vec<u32> {
        match self {
            Unit::Flow(f) => vec![f.id],
            Unit::Group(fs) => fs.iter().map(|f| f.id).collect(),
        }
    }
}

/// A flow of its own, in its thread: wait for its start, run its pattern; its outcome, its error
/// line printed.
fn run_one(f: Flow, flag: &'static AtomicBool, shared: &Shared) -> Outcome {
    let id = f.id;
    output::set_flow(Some(id));
    signals::set_flow_stop(Some(flag));
    let Flow {
        start_ns,
        mut cfg,
        driver,
        ..
    } = f;
    let out = run_flow(id, || {
        if let Some(offset) = start_ns {
            if !wait_for_start(shared, offset, &stop_requested) {
                return Err(FlowError::NotStarted);
            }
        }
        // `timeout_ms` counts from the flow's start, not from reading the host object.
        cfg.start_ns = now_ns();
        tracing::info!(
            flow = id,
            role = cfg.role.as_str(),
            pattern = cfg.pattern.as_str(),
            protocol = driver.name(),
            "starting"
        );
        patterns::run(&cfg, driver.as_ref()).map_err(FlowError::Run)
    });
    report(&out);
    out
}

/// The flows of a shared UDP receiver, in their thread: wait for their start (they have one),
/// then serve them all (crate::host::udp_group); each flow's outcome, its error line printed.
fn run_group(members: Vec<(Flow, &'static AtomicBool)>, shared: &Shared) -> Vec<(u32, Outcome)> {
    let start_ns = members[0].0.start_ns;
    let ids: Vec<u32> = members.iter().map(|(f, _)| f.id).collect();
    let mut group: Vec<Member> = members
        .into_iter()
        .map(|(f, stop)| Member {
            id: f.id,
            cfg: f.cfg, // its driver is not needed: the group opens one socket for all
            stop,
        })
        .collect();
    let mut outcomes: Vec<Option<Outcome>> = group.iter().map(|_| None).collect();
    let r = catch_unwind(AssertUnwindSafe(|| {
        if let Some(offset) = start_ns {
            let all_stopped = || {
                signals::signal_received() || group.iter().all(|m| m.stop.load(Ordering::Relaxed))
            };
            let started = wait_for_start(shared, offset, &all_stopped);
            // A flow stopped before the start does not run (udp_group::serve skips it); the others do.
            for (m, o) in group.iter().zip(outcomes.iter_mut()) {
                if !started || signals::signal_received() || m.stop.load(Ordering::Relaxed) {
                    let out = Outcome::Failed {
                        kind: "io",
                        message: not_started(m.id),
                    };
                    output::with_flow(m.id, || report(&out));
                    *o = Some(out);
                }
            }
        }
        // `timeout_ms` counts from the flows' start, not from reading the host object.
        let now = now_ns();
        for m in &mut group {
            m.cfg.start_ns = now;
        }
        tracing::info!(
            flows = ?ids,
            role = "receiver",
            pattern = "stream",
            protocol = "udp",
            "starting (one shared receiver)"
        );
        udp_group::serve(&group, &mut outcomes);
    }));
    let why = r.err().map(|p| panic_message(p.as_ref()));
    ids.into_iter()
        .zip(outcomes)
        .map(|(id, o)| {
            let o = o.unwrap_or_else(|| {
                let out = Outcome::Failed {
                    kind: "io",
                    message: format!(
                        "flow {id}: internal error: {}",
                        why.as_deref()
                            .unwrap_or("its shared receiver ended without its result")
                    ),
                };
                output::with_flow(id, || report(&out));
                out
            });
            (id, o)
        })
        .collect()
}

/// Wait for t0, then until t0 + `offset`; false if `stopped` says so first (a stop command,
/// SIGTERM/SIGINT: `stop_requested` for a flow's own thread) or standard input ended before t0.
fn wait_for_start(shared: &Shared, offset: u64, stopped: &dyn Fn() -> bool) -> bool {
    let t0 = {
        let mut g = shared.lock();
        loop {
            if stopped() {
                return false;
            }
            if let Some(t) = g.t0 {
                break t;
            }
            if g.eof {
                return false;
            }
            // Commands wake us at once; a signal within a slice.
            g = shared
                .changed
                .wait_timeout(g, Duration::from_nanos(POLL_SLICE_NS))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    };
    sleep_until_ns(t0.saturating_add(offset), stopped);
    !stopped()
}

/// The standard input loop: commands until end of input.
fn read_commands(
    mut input: impl BufRead,
    shared: &Shared,
    flags: &HashMap<u32, &'static AtomicBool>,
) {
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("reading commands from standard input: {e}; no more commands");
                break;
            }
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match parse_command(text) {
            Ok(Command::T0(t)) => {
                let mut g = shared.lock();
                match g.t0 {
                    None => g.t0 = Some(t),
                    Some(first) => {
                        tracing::warn!("a second t0 ({t}) ignored: the flows count from {first}")
                    }
                }
            }
            Ok(Command::Stop(k)) => match flags.get(&k) {
                Some(f) => f.store(true, Ordering::SeqCst),
                None => tracing::warn!("stop {k}: this host has no flow {k}; ignored"),
            },
            Err(why) => tracing::warn!("standard input line {text:?} ignored: {why}"),
        }
        shared.changed.notify_all();
    }
    shared.lock().eof = true;
    shared.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patterns::PatternError;
    use serde_json::json;

    fn receiver(port: u16) -> Value {
        json!({"v": 1, "role": "receiver", "protocol": "udp", "pattern": "stream",
               "listen": format!("127.0.0.1:{port}"), "payload_bytes": 64, "messages": 10})
    }

    fn host(flows: Value) -> String {
        json!({"v": 1, "flows": flows}).to_string()
    }

    fn err(text: &str) -> (Option<u32>, String) {
        match parse(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => (e.flow(), describe(&e)),
        }
    }

    #[test]
    fn a_host_object_parses() {
        let flows = parse(&host(json!([
            {"flow": 7, "start_ns": null, "config": receiver(0)},
            {"flow": 0, "start_ns": 2_000_000_000u64, "config": receiver(0)},
            {"flow": 3, "config": receiver(0)},
        ])))
        .unwrap();
        let got: Vec<_> = flows
            .iter()
            .map(|f| (f.id, f.start_ns, f.driver.name()))
            .collect();
        assert_eq!(
            got,
            vec![
                (7, None, "udp"),
                (0, Some(2_000_000_000), "udp"),
                (3, None, "udp")
            ]
        );
    }

    #[test]
    fn host_errors_name_the_flow_or_the_host() {
        let (flow, msg) = err(&host(json!([
            {"flow": 1, "config": receiver(0)},
            {"flow": 5, "config": {"bogus_key": 1}},
        ])));
        assert_eq!(flow, Some(5));
        assert!(
            msg.starts_with("flow 5: ") && msg.contains("bogus_key"),
            "{msg}"
        );

        let mut bad = receiver(0);
        bad["options"] = json!({"nodelay": true}); // a TCP knob: refused by the UDP driver
        let (flow, msg) = err(&host(json!([{"flow": 9, "config": bad}])));
        assert_eq!(flow, Some(9));
        assert!(msg.starts_with("flow 9: ") && msg.contains("udp"), "{msg}");

        let (flow, msg) = err(&host(json!([
            {"flow": 2, "config": receiver(0)}, {"flow": 2, "config": receiver(0)}])));
        assert_eq!(flow, Some(2));
        assert!(msg.contains("`flow` = 2"), "{msg}");

        let (flow, msg) = err(&host(
            json!([{"flow": 4, "start_ns": -1, "config": receiver(0)}]),
        ));
        assert_eq!(flow, Some(4));
        assert!(
            msg.starts_with("flow 4: the flow entry") && msg.contains("-1"),
            "{msg}"
        );

        let (flow, msg) = err(&host(
            json!([{"flow": 4, "extra": 1, "config": receiver(0)}]),
        ));
        assert_eq!(flow, Some(4));
        assert!(msg.contains("extra"), "{msg}");

        let (flow, msg) = err(&host(json!([{"config": receiver(0)}])));
        assert_eq!(flow, None);
        assert!(
            msg.contains("flows[0].flow") && msg.contains("absent"),
            "{msg}"
        );

        let (flow, msg) = err(&host(
            json!([{"flow": 4294967296u64, "config": receiver(0)}]),
        ));
        assert_eq!(flow, None);
        assert!(msg.contains("flows[0].flow"), "{msg}");

        let (flow, msg) = err(&host(json!([])));
        assert_eq!(flow, None);
        assert!(
            msg.contains("`flows`") && msg.contains("0 entries"),
            "{msg}"
        );

        let (flow, msg) = err(&json!({"v": 2, "flows": []}).to_string());
        assert_eq!(flow, None);
        assert!(msg.contains("`v` = 2"), "{msg}");

        let (flow, msg) = err(&json!({"v": 1, "flows": [], "more": 1}).to_string());
        assert_eq!(flow, None);
        assert!(msg.contains("more"), "{msg}");
    }

    fn shared(port: u16, source: &str) -> Value {
        let mut c = receiver(port);
        c["source"] = source.into();
        c
    }

    #[test]
    fn udp_stream_receivers_with_sources_on_one_listen_address_share_a_receiver() {
        let mut other_opts = shared(5002, "10.0.0.9");
        other_opts["options"] = json!({"recv_buffer": 1_000_000});
        let flows = parse(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "config": receiver(5003)},                // alone: its own thread
            {"flow": 3, "config": shared(5001, "10.0.0.2")},
            {"flow": 4, "config": other_opts},                    // a group of one
            {"flow": 5, "config": shared(0, "10.0.0.3")},         // port 0: never shared
            {"flow": 6, "config": shared(0, "10.0.0.3")},
            {"flow": 7, "config": shared(5001, "::ffff:10.0.0.3")},
        ])))
        .unwrap();
        let ids = |g: &Vec<usize>| g.iter().map(|&i| flows[i].id).collect::<Vec<_>>();
        let groups: Vec<_> = shared_receivers(&flows).unwrap().iter().map(ids).collect();
        assert_eq!(groups, vec![vec![1, 3, 7], vec![4]]);
    }

    #[test]
    fn flows_that_would_bind_one_udp_address_without_sharing_are_refused() {
        let (flow, msg) = err(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "config": receiver(5001)},
        ])));
        assert_eq!(flow, Some(2));
        assert_eq!(
            msg,
            "flow 2: listen 127.0.0.1:5001 is also flow 1's; a shared UDP receiver needs source on both"
        );
        let (flow, msg) = err(&host(json!([
            {"flow": 8, "config": receiver(5001)},
            {"flow": 9, "config": shared(5001, "10.0.0.1")},
        ])));
        assert_eq!(flow, Some(9));
        assert!(
            msg.contains("is also flow 8's") && msg.contains("source on both"),
            "{msg}"
        );
        let mut pong = receiver(5001);
        pong["pattern"] = "ping".into();
        pong["role"] = "ponger".into();
        let (flow, msg) = err(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "config": pong},
        ])));
        assert_eq!(flow, Some(2));
        assert!(msg.contains("source on both"), "{msg}");
        let mut opts = shared(5001, "10.0.0.2");
        opts["options"] = json!({"recv_buffer": 1_000_000});
        let (flow, msg) = err(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "config": opts},
        ])));
        assert_eq!(flow, Some(2));
        assert!(msg.contains("same options"), "{msg}");
        let (flow, msg) = err(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "start_ns": 5, "config": shared(5001, "10.0.0.2")},
        ])));
        assert_eq!(flow, Some(2));
        assert!(msg.contains("start_ns"), "{msg}");
        let (flow, msg) = err(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "config": shared(5001, "10.0.0.2")},
            {"flow": 3, "config": shared(5001, "::ffff:10.0.0.1")},
        ])));
        assert_eq!(flow, Some(3));
        assert!(
            msg.contains("source 10.0.0.1 on listen 127.0.0.1:5001 is also flow 1's"),
            "{msg}"
        );
        // TCP receivers are not the UDP receiver's business (and one same source on two addresses is fine).
        let mut tcp = receiver(5001);
        tcp["protocol"] = "tcp".into();
        assert!(parse(&host(json!([
            {"flow": 1, "config": shared(5001, "10.0.0.1")},
            {"flow": 2, "config": tcp},
            {"flow": 3, "config": shared(5002, "10.0.0.1")},
        ])))
        .is_ok());
    }

    #[test]
    fn too_many_flows_are_refused() {
        let flows: Vec<Value> = (0..=MAX_FLOWS as u32)
            .map(|k| json!({"flow": k, "config": {}}))
            .collect();
        let (flow, msg) = err(&host(Value::Array(flows)));
        assert_eq!(flow, None);
        assert!(msg.contains("4097 entries"), "{msg}");
    }

    #[test]
    fn commands() {
        assert_eq!(parse_command(r#"{"t0_ns": 12}"#), Ok(Command::T0(12)));
        assert_eq!(parse_command(r#"{"stop": 7}"#), Ok(Command::Stop(7)));
        for bad in [
            r#"{"stop": -1}"#,
            r#"{"stop": 7, "t0_ns": 1}"#,
            r#"{"t0_ns": 1.5}"#,
            r#"{"go": 1}"#,
            "[1]",
            "stop 7",
        ] {
            assert!(parse_command(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_flow_outcome_names_the_flow() {
        assert_eq!(run_flow(1, || Ok(())), Outcome::Done);
        assert_eq!(
            run_flow(2, || Err(FlowError::NotStarted)),
            Outcome::Failed {
                kind: "io",
                message: "flow 2: stopped before its start".into()
            }
        );
        assert_eq!(
            run_flow(3, || Err(FlowError::Run(PatternError::Protocol(
                "bad".into()
            )))),
            Outcome::Failed {
                kind: "protocol",
                message: "flow 3: protocol error: bad".into()
            }
        );
        assert_eq!(
            run_flow(4, || panic!("boom {}", 4)),
            Outcome::Failed {
                kind: "io",
                message: "flow 4: internal error: boom 4".into()
            }
        );
    }

    #[test]
    fn waiting_flows_follow_the_commands() {
        let shared = Shared::default();
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let flags = HashMap::from([(1u32, flag)]);
        let now = now_ns();
        std::thread::scope(|s| {
            let w = s.spawn(|| {
                signals::set_flow_stop(Some(flag));
                wait_for_start(&shared, 1_000_000, &stop_requested)
            });
            let input = format!("junk\n{{\"stop\": 99}}\n{{\"t0_ns\": {now}}}\n");
            read_commands(std::io::Cursor::new(input), &shared, &flags);
            assert!(w.join().unwrap(), "t0 came: the flow starts");
        });
        assert!(now_ns() >= now + 1_000_000);
        assert!(!flag.load(Ordering::SeqCst), "stop 99 is not flow 1's");

        // End of input before t0, and a stop command, both end a waiting flow.
        let shared = Shared::default();
        read_commands(std::io::Cursor::new(""), &shared, &flags);
        assert!(!wait_for_start(&shared, 0, &stop_requested));
        let shared = Shared::default();
        let input = format!("{{\"t0_ns\": {now}}}\n{{\"stop\": 1}}\n");
        read_commands(std::io::Cursor::new(input), &shared, &flags);
        assert!(flag.load(Ordering::SeqCst));
        std::thread::scope(|s| {
            let w = s.spawn(|| {
                signals::set_flow_stop(Some(flag));
                wait_for_start(&shared, 0, &stop_requested)
            });
            assert!(!w.join().unwrap());
        });
    }
}
