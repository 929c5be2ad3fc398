//! The sync pattern: two stores of bundles reconcile over one protocol (SEEDS S3).
//!
//! Each side (role `syncer`) starts with `bundles` bundles, ids `bundle_first ..`,
//! opens a receiver (`listen`, or the peer's topic `peer_topic` through a broker)
//! and a sender to its one peer, and then:
//!
//! 1. announces what it holds (a summary: id ranges, `sync::wire`), and announces
//!    again when a summary of the peer says it has none of ours yet (through a
//!    broker, a summary published before the peer subscribed is gone);
//! 2. on each summary from the peer, computes what the peer lacks and sends those
//!    bundles, lowest id first, at most `window` of them unacknowledged;
//! 3. acknowledges received bundles with a fresh summary as soon as no further
//!    message is waiting (a burst of bundles gets one acknowledgement);
//! 4. stops when both sides hold everything (it knows the peer's set from the
//!    peer's summaries), at the end of the window `duration_ms`, when the peer
//!    ended, at `timeout_ms`, or on a signal; the end marker tells the peer.
//!
//! The transport must be reliable (config refuses udp and best-effort settings):
//! a bundle is sent once and never retransmitted by the pattern.  Owns the
//! reconciliation loop and the result line; the id sets are `sync::ids`, the
//! message layout `sync::wire`.

use serde_json::json;

use super::{next_deadline, PatternError};
use crate::clock::{cpu_json, now_ns, round6};
use crate::config::{Config, Role, SYNC_BUNDLE_OVERHEAD};
use crate::drivers::{self, Driver, DriverError, Receiver, Sender};
use crate::hist::Latency;
use crate::message::{Header, FLAG_END, HEADER_LEN};
use crate::output::{self, Intervals};
use crate::signals::stop_requested;

pub mod ids;
pub mod wire;

use ids::IdSet;
use wire::Body;

/// After a message arrived, look this long for the next one before acknowledging.
const ACK_POLL_NS: u64 = 200_000;

/// Counters of one side, for the result line.
#[derive(Default)]
struct Tally {
    messages_sent: u64,
    messages_received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    summaries_sent: u64,
    summaries_received: u64,
    bundles_sent: u64,
    bundles_received: u64,
    duplicates: u64,
    bad_bundles: u64,
    bad_messages: u64,
    in_flight_max: u32,
}

/// Why a sync side stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Both sides hold every bundle.
    Complete,
    /// The fixed window (`duration_ms`) ended.
    Window,
    /// The peer sent its end marker or closed.
    PeerEnded,
    Timeout,
    Signal,
}

impl End {
    fn as_str(self) -> &'static str {
        match self {
            End::Complete => "complete",
            End::Window => "window",
            End::PeerEnded => "peer_ended",
            End::Timeout => "timeout",
            End::Signal => "signal",
        }
    }
}

/// What a send turned into: sent, or a reason to stop.
fn send(
    tx: &mut dyn Sender,
    msg: &[u8],
    rx: &dyn Receiver,
    peer_ended: bool,
    synced: bool,
) -> Result<Option<End>, PatternError> {
    match tx.send(msg) {
        Ok(_) => Ok(None),
        // In full sync the last summary is a courtesy: the peer may have finished already.
        Err(DriverError::Io { .. }) if synced => Ok(Some(End::Complete)),
        Err(DriverError::Interrupted) => Ok(Some(End::Signal)),
        Err(DriverError::GaveUp { .. }) => Ok(Some(End::Timeout)),
        // The peer stopped first (its window ended): a broken connection is its goodbye.
        Err(DriverError::Io { .. }) if peer_ended || rx.peers_closed() => Ok(Some(End::PeerEnded)),
        Err(e) => Err(e.into()),
    }
}

pub fn run(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    let sc = cfg
        .sync
        .ok_or_else(|| PatternError::Protocol("pattern sync without its settings".into()))?;
    // Through a broker each side publishes on its own topic and subscribes to the peer's.
    // Drivers know receivers and senders: give them one configuration each.
    let rx_driver_owned;
    let mut rx_cfg = cfg.clone();
    rx_cfg.role = Role::Receiver;
    rx_cfg.peers = Vec::new();
    let mut tx_cfg = cfg.clone();
    tx_cfg.role = Role::Sender;
    tx_cfg.listen = None;
    let rx_driver: &dyn Driver = match &cfg.peer_topic {
        Some(t) => {
            rx_cfg.topic = Some(t.clone());
            rx_driver_owned = drivers::create(&rx_cfg)
                .map_err(|e| PatternError::Protocol(format!("the receiving side: {e}")))?;
            rx_driver_owned.as_ref()
        }
        None => driver,
    };
    let mut rx = rx_driver.open_receiver(&rx_cfg)?;
    output::ready("syncer", &rx.local_addr());
    let mut tx = driver.open_sender(&tx_cfg)?;

    let bundle_len = cfg.payload_bytes;
    let content_len = (sc.manifest_bytes + sc.bundle_payload_bytes) as u64;
    debug_assert_eq!(bundle_len, SYNC_BUNDLE_OVERHEAD + content_len as usize);
    let mut out = vec![0u8; cfg.max_message_bytes()];
    let mut inb = vec![0u8; cfg.max_message_bytes().min(driver.max_message_bytes())];
    let mut t = Tally::default();
    let mut latency = Latency::new();
    let mut seq = 0u64;
    let header = |seq: u64| {
        let now = now_ns();
        Header {
            flags: 0,
            seq,
            intended_ns: now,
            actual_ns: now,
        }
    };

    let mut mine = IdSet::span(sc.first, sc.bundles);
    let mut peer: Option<IdSet> = None;
    let mut in_flight = IdSet::new();
    let mut to_send = IdSet::new();
    let mut ack_pending = false;
    let mut just_received = false;
    let mut peer_ended = false;
    let (mut complete_at, mut full_at): (Option<u64>, Option<u64>) = (None, None);

    let t0 = now_ns();
    let give_up = cfg.give_up_ns();
    let window_end = cfg.duration_ns.map_or(u64::MAX, |d| t0.saturating_add(d));
    let mut intervals = Intervals::new("syncer", t0, cfg.report_interval_ns);

    // 1. Announce what we hold.
    let n = wire::encode_summary(&mut out, &header(seq), &mine, false);
    let mut end = send(tx.as_mut(), &out[..n], rx.as_ref(), false, false)?;
    if end.is_none() {
        seq += 1;
        t.messages_sent += 1;
        t.summaries_sent += 1;
        t.bytes_sent += n as u64;
    }
    while end.is_none() {
        let now = now_ns();
        if stop_requested() {
            end = Some(End::Signal);
        } else if full_at.is_some() {
            end = Some(End::Complete);
        } else if peer_ended {
            end = Some(End::PeerEnded);
        } else if now >= window_end {
            end = Some(End::Window);
        } else if now >= give_up {
            end = Some(End::Timeout);
        }
        if end.is_some() {
            break;
        }
        // 2. Fill the window with what the peer lacks.
        while (in_flight.len() as u32) < sc.window {
            let Some(id) = to_send.pop_first() else { break };
            wire::encode_bundle(&mut out[..bundle_len], &header(seq), id, cfg.seed);
            end = send(tx.as_mut(), &out[..bundle_len], rx.as_ref(), peer_ended, false)?;
            if end.is_some() {
                break;
            }
            seq += 1;
            in_flight.insert(id);
            t.in_flight_max = t.in_flight_max.max(in_flight.len() as u32);
            t.messages_sent += 1;
            t.bundles_sent += 1;
            t.bytes_sent += bundle_len as u64;
        }
        if end.is_some() {
            break;
        }
        // 3. Receive; acknowledge when nothing more is waiting.
        let deadline = if just_received {
            now_ns() + ACK_POLL_NS
        } else {
            next_deadline(now_ns(), &[give_up, window_end, intervals.next_ns()])
        };
        match rx.recv(&mut inb, deadline)? {
            None => {
                just_received = false;
                if rx.peers_closed() {
                    peer_ended = true;
                }
            }
            Some(n) => {
                just_received = true;
                let arrived = now_ns();
                let h = match Header::decode(&inb[..n]) {
                    Ok(h) => h,
                    Err(e) => {
                        t.bad_messages += 1;
                        tracing::warn!("dropping a message that is not ours: {e}");
                        continue;
                    }
                };
                if h.is_end() {
                    peer_ended = true;
                    continue;
                }
                t.messages_received += 1;
                t.bytes_received += n as u64;
                intervals.add(1, n as u64);
                match wire::decode(&inb[..n], bundle_len, cfg.seed) {
                    Err(e) => {
                        t.bad_messages += 1;
                        tracing::warn!("dropping a bad sync message: {e}");
                    }
                    Ok(Body::Summary { held, seen }) => {
                        t.summaries_received += 1;
                        // The peer has no summary of ours: ours was lost or is crossing; repeat it.
                        ack_pending |= !seen;
                        in_flight = in_flight.difference(&held);
                        to_send = mine.difference(&held).difference(&in_flight);
                        peer = Some(held);
                    }
                    Ok(Body::Bundle { id, intact }) => {
                        latency.record(arrived as i64 - h.actual_ns as i64);
                        if !intact {
                            t.bad_bundles += 1;
                        } else if mine.insert(id) {
                            t.bundles_received += 1;
                            ack_pending = true;
                        } else {
                            t.duplicates += 1;
                        }
                    }
                }
            }
        }
        intervals.tick(now_ns());
        if let Some(p) = &peer {
            let now = now_ns();
            if complete_at.is_none() && mine.is_superset(p) {
                complete_at = Some(now);
            }
            if mine.is_superset(p) && p.is_superset(&mine) {
                full_at.get_or_insert(now);
            }
        }
        // Acknowledge a burst once it is over, and always before leaving complete.
        if ack_pending && (!just_received || full_at.is_some()) {
            let n = wire::encode_summary(&mut out, &header(seq), &mine, peer.is_some());
            end = send(
                tx.as_mut(),
                &out[..n],
                rx.as_ref(),
                peer_ended,
                full_at.is_some(),
            )?;
            if end.is_none() {
                seq += 1;
                ack_pending = false;
                t.messages_sent += 1;
                t.summaries_sent += 1;
                t.bytes_sent += n as u64;
            }
        }
    }
    let end = end.unwrap_or(End::Complete);
    let stopped = now_ns();
    let mut marker = [0u8; HEADER_LEN];
    Header {
        flags: FLAG_END,
        seq,
        intended_ns: stopped,
        actual_ns: stopped,
    }
    .encode(&mut marker);
    // Leave the receiving side first: a sender may wait, in finish, until the peer's
    // receiver has gone (zenoh reliable), and the peer may be finishing too.
    drop(rx);
    if end != End::PeerEnded {
        if let Err(e) = tx.finish(&marker) {
            tracing::warn!("sending the end marker: {e}");
        }
    }
    let elapsed_s = (stopped - t0) as f64 / 1e9;
    let goodput_bytes = t.bundles_received * content_len;
    let moved = (t.bundles_received + t.bundles_sent) * content_len;
    let since = |x: Option<u64>| x.map(|x| round6((x - t0) as f64 / 1e9));
    output::emit(
        "result",
        json!({
            "role": "syncer", "pattern": "sync", "protocol": driver.name(),
            "end_reason": end.as_str(),
            "bundles_start": sc.bundles, "bundles_held": mine.len(),
            "peer_bundles_known": peer.as_ref().map(|p| p.len()),
            "bundles_received": t.bundles_received, "bundles_sent": t.bundles_sent,
            "duplicates": t.duplicates, "bad_bundles": t.bad_bundles, "bad_messages": t.bad_messages,
            "messages_sent": t.messages_sent, "messages_received": t.messages_received,
            "summaries_sent": t.summaries_sent, "summaries_received": t.summaries_received,
            "bytes_sent": t.bytes_sent, "bytes_received": t.bytes_received,
            "bundle_bytes": content_len, "goodput_bytes": goodput_bytes,
            "elapsed_s": round6(elapsed_s),
            "goodput_bps": if elapsed_s > 0.0 { (goodput_bytes as f64 * 8.0 / elapsed_s).round() } else { 0.0 },
            "overhead_ratio": if moved > 0 {
                Some(round6((t.bytes_sent + t.bytes_received) as f64 / moved as f64))
            } else { None },
            "window": sc.window, "in_flight_max": t.in_flight_max,
            "complete": complete_at.is_some(), "full_sync": full_at.is_some(),
            "time_to_complete_s": since(complete_at), "time_to_full_sync_s": since(full_at),
            "bundle_latency": latency.to_json(),
            "cpu": cpu_json(),
        }),
    );
    Ok(())
}
