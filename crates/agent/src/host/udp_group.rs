//! A host's shared UDP receiver (host mode, issue 27): every UDP stream receiver flow of a host
//! that listens on one address with a `source` of its own shares ONE socket and ONE thread
//! (`udp-group-PORT`), which hands each datagram to the flow whose `source` sent it.
//!
//! A fleet where every car sends to every other car has, per host, one receiver flow per other
//! car; a thread and a socket each cost a wake-up per message and per poll slice.  A real car
//! has one socket; so has its agent here.  Each flow keeps its own accounting
//! (`patterns::stream::StreamRxState`): the same counts, interval lines, trace file and result
//! line as a flow of its own, each line tagged with its flow (`output::with_flow`).
//!
//! The loop: one receive at a time with a deadline no later than the earliest flow deadline
//! (interval line, trace flush, linger, timeout) nor one poll slice away; a datagram goes to its
//! flow by source address (a hash lookup) and only that flow's end is checked (O(1) per
//! datagram); when the earliest deadline or the poll slice passes, one scan over the flows
//! ticks them, checks every end condition (each flow's stop flag, a signal, its timeout, its
//! linger) and recomputes the earliest deadline.  A datagram from an address that is no flow's
//! source is counted for the group and logged once; no flow counts it.  A datagram from a flow
//! that has ended is dropped (as its own closed socket would).  The group ends when its last
//! flow does.  A failure of the socket ends every running flow with a partial result
//! (`end_reason` `error`) and its error line.  One receive buffer for the group; nothing is
//! allocated per datagram.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{describe, report, Outcome};
use crate::clock::now_ns;
use crate::config::Config;
use crate::drivers::udp::{Udp, MAX_DATAGRAM};
use crate::drivers::DriverError;
use crate::output;
use crate::patterns::stream::StreamRxState;
use crate::patterns::{error_kind, next_deadline, EndReason, PatternError};
use crate::signals::{self, POLL_SLICE_NS};

/// One flow of a shared receiver.
pub struct Member {
    pub id: u32,
    /// Its configuration: udp, stream, receiver, with `source`; every member has the same
    /// `listen` and `options` (crate::host checks).
    pub cfg: Config,
    /// Its stop flag (the `{"stop": K}` command).
    pub stop: &'static AtomicBool,
}

/// The thread's name for a group listening on `port` (at most 15 bytes, Linux's limit).
pub fn thread_name(port: u16) -> String {
    format!("udp-group-{port}")
}

/// The outcome of a flow whose run failed with `e`, its error line printed.
fn failed(id: u32, e: &PatternError) -> Outcome {
    let out = Outcome::Failed {
        kind: error_kind(e),
        message: format!("flow {id}: {}", describe(e)),
    };
    output::with_flow(id, || report(&out));
    out
}

/// Run the group's flows to their ends; `outcomes[i]` is set as member i ends (its result and
/// error line printed).  A member whose outcome is already set does not run (stopped before its
/// start).  The caller has set each member's `cfg.start_ns`.  A member whose outcome is still
/// None when this returns (a panic) did not end properly.
pub fn serve(members: &[Member], outcomes: &mut [Option<Outcome>]) {
    assert_eq!(members.len(), outcomes.len());
    let Some(first) = members
        .iter()
        .zip(outcomes.iter())
        .find_map(|(m, o)| o.is_none().then_some(m))
    else {
        return;
    };
    let opened = Udp::from_config(&first.cfg)
        .map_err(|e| PatternError::Protocol(e.to_string()))
        .and_then(|udp| {
            // No filter in the driver: this loop demultiplexes by source.
            udp.open_udp_receiver(&first.cfg, None)
                .map_err(PatternError::from)
        });
    let mut rx = match opened {
        Ok(rx) => rx,
        Err(e) => {
            for (m, o) in members.iter().zip(outcomes.iter_mut()) {
                if o.is_none() {
                    *o = Some(failed(m.id, &e));
                }
            }
            return;
        }
    };
    let local = crate::drivers::Receiver::local_addr(&rx);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    // None: the flow has ended (or never started).
    let mut flows: Vec<Option<StreamRxState<'_>>> = members
        .iter()
        .zip(outcomes.iter())
        .map(|(m, o)| o.is_none().then(|| StreamRxState::new(&m.cfg, "udp")))
        .collect();
    let by_source: HashMap<IpAddr, usize> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ip = m
                .cfg
                .source
                .expect("checked by host: members have a source");
            (ip.to_canonical(), i)
        })
        .collect();
    for (m, st) in members.iter().zip(&flows) {
        if st.is_some() {
            output::with_flow(m.id, || output::ready("receiver", &local));
        }
    }
    tracing::info!(
        "udp {local}: one receiver for {} flows ({})",
        members.len(),
        members
            .iter()
            .map(|m| format!("{} from {}", m.id, m.cfg.source.expect("checked")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let finish = |i: usize,
                  st: &mut StreamRxState<'_>,
                  reason: EndReason,
                  failure: Option<&PatternError>|
     -> Outcome {
        let id = members[i].id;
        output::with_flow(id, || st.finish(reason, failure, serde_json::Map::new()));
        match failure {
            None => Outcome::Done,
            Some(e) => failed(id, e),
        }
    };
    let mut active = flows.iter().filter(|f| f.is_some()).count();
    let mut unknown = 0u64;
    let mut now = now_ns();
    let mut earliest = 0u64; // the earliest deadline of a running flow: scan on the first turn
    let mut scan_at = 0u64; // and at least once a poll slice (stop flags)
    loop {
        let signal = signals::signal_received();
        if signal || now >= earliest || now >= scan_at {
            earliest = u64::MAX;
            for (i, slot) in flows.iter_mut().enumerate() {
                let Some(st) = slot.as_mut() else { continue };
                let m = &members[i];
                output::with_flow(m.id, || st.tick(now));
                let stop = signal || m.stop.load(Ordering::Relaxed);
                match st.end_reason(now, stop, false) {
                    Some(r) => {
                        outcomes[i] = Some(finish(i, st, r, None));
                        *slot = None;
                        active -= 1;
                    }
                    None => earliest = earliest.min(st.next_deadline()),
                }
            }
            if active == 0 {
                break;
            }
            scan_at = now.saturating_add(POLL_SLICE_NS);
        }
        let deadline = next_deadline(now, &[earliest, scan_at]);
        match rx.recv_from(&mut buf, deadline) {
            Ok(None) => now = now_ns(),
            Ok(Some((n, src))) => {
                now = now_ns();
                let Some(&i) = by_source.get(&src.ip().to_canonical()) else {
                    if unknown == 0 {
                        tracing::warn!(
                            "udp {local}: a datagram from {src}, the source of no flow here: not counted \
                             (nor are further ones from addresses no flow has)"
                        );
                    }
                    unknown += 1;
                    continue;
                };
                // None: the flow has ended; its straggler is dropped as its own socket would.
                let Some(st) = flows[i].as_mut() else {
                    continue;
                };
                let ended = if n > buf.len() {
                    // Its sender's message does not fit a datagram buffer: that flow's error, as alone.
                    let e = PatternError::from(DriverError::TooLarge {
                        size: n,
                        limit: buf.len(),
                    });
                    Some((EndReason::Error, Some(e)))
                } else {
                    st.on_message(&buf[..n], now);
                    // Stop flags wait for the scan (within a poll slice); time-outs for their deadline.
                    st.end_reason(now, false, false).map(|r| (r, None))
                };
                match ended {
                    Some((r, e)) => {
                        outcomes[i] = Some(finish(i, st, r, e.as_ref()));
                        flows[i] = None;
                        active -= 1;
                        if active == 0 {
                            break;
                        }
                    }
                    None => earliest = earliest.min(st.next_deadline()),
                }
            }
            Err(e) => {
                // The socket failed: every running flow ends with what it counted.
                let e = PatternError::from(e);
                for (i, slot) in flows.iter_mut().enumerate() {
                    if let Some(st) = slot.as_mut() {
                        outcomes[i] = Some(finish(i, st, EndReason::Error, Some(&e)));
                        *slot = None;
                    }
                }
                break;
            }
        }
    }
    if unknown > 0 {
        tracing::warn!(
            "udp {local}: {unknown} datagrams in all from addresses no flow has as its source"
        );
    }
}
