//! The ping pattern: request/reply round trips, closed loop (next request after
//! the replies) or open loop (a request every `interval_ns`, replies taken as
//! they come).  The ponger echoes each request with the reply flag set, so the
//! pinger reads both send stamps back from the reply and keeps no per-request
//! state; replies are counted per peer by sequence number.  `ramp` is this
//! pattern with a growing size (see `ramp`).

use serde_json::json;

use super::{error_json, next_deadline, EndReason, PatternError};
use crate::accounting::{Arrival, SeqTracker};
use crate::clock::{cpu_json, now_ns, sleep_until_ns, SPIN_NS};
use crate::config::Config;
use crate::drivers::{Driver, DriverError, Requester};
use crate::hist::Latency;
use crate::message::{fill_payload, mark_reply, Header, FLAG_END, FLAG_WARMUP, HEADER_LEN};
use crate::output::{self, Intervals};
use crate::schedule::{Schedule, ScheduleStats};
use crate::signals::stop_requested;

/// What the pinger learns from replies.
struct Replies {
    trackers: Vec<SeqTracker>,
    rtt_intended: Latency,
    rtt_actual: Latency,
    points: Option<Vec<(usize, f64)>>,
    intervals: Intervals,
    /// Replies to the request in flight in closed loop (seq `round_seq`).
    round_seq: u64,
    round_replies: usize,
    bad: u64,
}

impl Replies {
    #[inline]
    fn on_reply(&mut self, msg: &[u8], peer: usize, rt: u64) {
        let h = match Header::decode(msg) {
            Ok(h) if h.is_reply() => h,
            Ok(_) => {
                self.bad += 1;
                return;
            }
            Err(e) => {
                tracing::warn!("dropping a reply that is not ours: {e}");
                self.bad += 1;
                return;
            }
        };
        if h.seq == self.round_seq {
            self.round_replies += 1;
        }
        let Some(t) = self.trackers.get_mut(peer) else {
            self.bad += 1;
            return;
        };
        match t.record(h.seq, h.is_warmup()) {
            Arrival::New | Arrival::Reordered => {
                let rtt_actual = rt as i64 - h.actual_ns as i64;
                self.rtt_intended.record(rt as i64 - h.intended_ns as i64);
                self.rtt_actual.record(rtt_actual);
                if let Some(p) = self.points.as_mut() {
                    p.push((msg.len(), rtt_actual as f64 / 1000.0));
                }
                self.intervals.add(1, msg.len() as u64);
            }
            Arrival::OutOfRange => self.bad += 1,
            Arrival::Duplicate | Arrival::Warmup => {}
        }
    }

    fn received(&self) -> u64 {
        self.trackers.iter().map(|t| t.received).sum()
    }
}

/// Take replies until `until_ns`, or until `done` says so.  Returns a reason to end the run, if any.
fn take_replies(
    rq: &mut dyn Requester,
    st: &mut Replies,
    rbuf: &mut [u8],
    until_ns: u64,
    give_up: u64,
    done: &dyn Fn(&Replies) -> bool,
) -> Result<Option<EndReason>, PatternError> {
    loop {
        if stop_requested() {
            return Ok(Some(EndReason::Signal));
        }
        if done(st) {
            return Ok(None);
        }
        let now = now_ns();
        if now >= give_up {
            return Ok(Some(EndReason::Timeout));
        }
        if now >= until_ns {
            return Ok(None);
        }
        let deadline = next_deadline(now, &[until_ns, give_up, st.intervals.next_ns()]);
        if let Some((n, peer)) = rq.recv(rbuf, deadline)? {
            st.on_reply(&rbuf[..n], peer, now_ns());
        }
        st.intervals.tick(now_ns());
    }
}

/// The pinger of ping (`ramp` = false) and ramp (`ramp` = true: sizes grow, points kept).
pub fn ping(cfg: &Config, driver: &dyn Driver, ramp: bool) -> Result<(), PatternError> {
    let mut rq = driver.open_requester(cfg)?;
    let peers = rq.peers();
    let max = cfg.max_message_bytes();
    let mut buf = vec![0u8; max];
    fill_payload(&mut buf);
    let mut rbuf = vec![0u8; max.max(65_536).min(driver.max_message_bytes())];
    let messages = cfg
        .messages
        .expect("checked by config: ping and ramp have `messages`");
    let total = messages + cfg.warmup;
    let t0 = now_ns();
    let schedule = Schedule::from_interval(t0, cfg.interval_ns);
    let give_up = cfg.give_up_ns();
    let mut st = Replies {
        trackers: (0..peers)
            .map(|_| {
                let mut t = SeqTracker::new(cfg.warmup);
                t.reserve(messages);
                t
            })
            .collect(),
        rtt_intended: Latency::new(),
        rtt_actual: Latency::new(),
        points: ramp.then(|| Vec::with_capacity(messages as usize * peers)),
        intervals: Intervals::new("pinger", t0, cfg.report_interval_ns),
        round_seq: u64::MAX,
        round_replies: 0,
        bad: 0,
    };
    let mut stats = ScheduleStats::default();
    let (mut sent, mut warmup_sent, mut send_errors) = (0u64, 0u64, 0u64);
    let mut reason = None;
    let mut failure: Option<PatternError> = None; // the driver's error that ended it early (kept in the result)
    let mut last_send = t0;
    let mut free_at = 0u64; // when the previous send returned
    let mut i = 0u64;
    while i < total {
        if stop_requested() {
            reason = Some(EndReason::Signal);
            break;
        }
        let intended = schedule.intended_ns(i);
        if let Some(t) = intended {
            // Open loop: take replies until just before the send time, then spin to it.
            reason = take_replies(
                rq.as_mut(),
                &mut st,
                &mut rbuf,
                t.saturating_sub(SPIN_NS),
                give_up,
                &|_| false,
            )
            .unwrap_or_else(|e| keep(&mut failure, e));
            if reason.is_some() {
                break;
            }
            sleep_until_ns(t, &stop_requested);
            if stop_requested() {
                reason = Some(EndReason::Signal);
                break;
            }
        }
        let actual = now_ns();
        if actual >= give_up {
            reason = Some(EndReason::Timeout);
            break;
        }
        let warm = i < cfg.warmup;
        let size = if warm {
            cfg.payload_bytes
        } else {
            cfg.size_of_iteration(i - cfg.warmup)
        };
        let h = Header {
            flags: if warm { FLAG_WARMUP } else { 0 },
            seq: i,
            intended_ns: intended.unwrap_or(actual),
            actual_ns: actual,
        };
        h.encode(&mut buf[..size]);
        st.round_seq = i;
        st.round_replies = 0;
        match rq.send(&buf[..size]) {
            Ok(failed) => send_errors += failed as u64,
            Err(DriverError::Interrupted) => {
                reason = Some(EndReason::Signal);
                break;
            }
            Err(DriverError::GaveUp { .. }) => {
                reason = Some(EndReason::Timeout);
                break;
            }
            Err(e) => {
                reason = keep(&mut failure, e.into());
                break;
            }
        }
        last_send = actual;
        if let Some(t) = intended {
            stats.record(t, actual, free_at);
        }
        free_at = now_ns();
        if warm {
            warmup_sent += 1;
        } else {
            sent += 1;
        }
        i += 1;
        if intended.is_none() {
            // Closed loop: wait for every peer's reply (or the reply timeout).
            let until = actual.saturating_add(cfg.reply_timeout_ns);
            reason = take_replies(rq.as_mut(), &mut st, &mut rbuf, until, give_up, &|s| {
                s.round_replies >= peers
            })
            .unwrap_or_else(|e| keep(&mut failure, e));
            if reason.is_some() {
                break;
            }
        }
    }
    if reason.is_none() {
        // Replies still in flight: wait for them up to the reply timeout after the last request.
        let want = sent * peers as u64;
        let until = last_send.saturating_add(cfg.reply_timeout_ns);
        reason = take_replies(rq.as_mut(), &mut st, &mut rbuf, until, give_up, &|s| {
            s.received() >= want
        })
        .unwrap_or_else(|e| keep(&mut failure, e));
    }
    let mut end = [0u8; HEADER_LEN];
    let now = now_ns();
    Header {
        flags: FLAG_END,
        seq: i,
        intended_ns: now,
        actual_ns: now,
    }
    .encode(&mut end);
    if failure.is_none() {
        if let Err(e) = rq.finish(&end) {
            tracing::warn!("sending the end marker: {e}");
        }
    }
    let received = st.received();
    let expected = sent * peers as u64;
    let mut result = json!({
        "role": "pinger", "pattern": if ramp { "ramp" } else { "ping" }, "protocol": driver.name(), "peers": peers,
        "sent": sent, "warmup_sent": warmup_sent, "received": received,
        "lost": expected.saturating_sub(received),
        "duplicates": st.trackers.iter().map(|t| t.duplicates).sum::<u64>(),
        "reordered": st.trackers.iter().map(|t| t.reordered).sum::<u64>(),
        "bad_messages": st.bad, "send_errors": send_errors,
        "end_reason": reason.unwrap_or(EndReason::Complete).as_str(),
        "rtt_intended": st.rtt_intended.to_json(), "rtt_actual": st.rtt_actual.to_json(),
        "schedule": stats.to_json(), "cpu": cpu_json(),
        // The wait for replies this run used (`[workload] reply_timeout`): it decides what counts as lost.
        "reply_timeout_ms": cfg.reply_timeout_ns / 1_000_000,
    });
    if let Some(p) = st.points {
        result["points"] = json!(p.iter().map(|(s, r)| json!([s, r])).collect::<Vec<_>>());
    }
    if let Some(e) = &failure {
        result["error"] = error_json(e);
    }
    output::emit("result", result);
    // the partial result is out; the error line and the exit code say the pinger failed
    failure.map_or(Ok(()), Err)
}

/// A driver error that ends the pinger early: kept for its result (which still reports every reply counted),
/// and the end reason it stands for.
fn keep(failure: &mut Option<PatternError>, e: PatternError) -> Option<EndReason> {
    failure.get_or_insert(e);
    Some(EndReason::Error)
}

/// The ponger of ping and ramp: echo every request with the reply flag set.
pub fn pong(cfg: &Config, driver: &dyn Driver) -> Result<(), PatternError> {
    let mut rs = driver.open_responder(cfg)?;
    let mut buf = vec![
        0u8;
        cfg.max_message_bytes()
            .max(65_536)
            .min(driver.max_message_bytes())
    ];
    let start = now_ns();
    let give_up = cfg.give_up_ns();
    let mut intervals = Intervals::new("ponger", start, cfg.report_interval_ns);
    let (mut received, mut warmup_received, mut bytes, mut reply_errors, mut bad) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    output::ready("ponger", &rs.local_addr());
    let reason = loop {
        if stop_requested() {
            break EndReason::Signal;
        }
        let now = now_ns();
        if now >= give_up {
            break EndReason::Timeout;
        }
        if rs.peers_closed() {
            break EndReason::EndMarker;
        }
        let deadline = next_deadline(now, &[give_up, intervals.next_ns()]);
        if let Some(n) = rs.recv(&mut buf, deadline)? {
            let msg = &mut buf[..n];
            match Header::decode(msg) {
                Ok(h) if h.is_end() => break EndReason::EndMarker,
                Ok(h) => {
                    mark_reply(msg);
                    if let Err(e) = rs.reply(msg) {
                        reply_errors += 1;
                        tracing::debug!("reply: {e}");
                    }
                    if h.is_warmup() {
                        warmup_received += 1;
                    } else {
                        received += 1;
                        bytes += n as u64;
                    }
                    intervals.add(1, n as u64);
                }
                Err(e) => {
                    bad += 1;
                    tracing::warn!("dropping a request that is not ours: {e}");
                }
            }
        }
        intervals.tick(now_ns());
    };
    output::emit(
        "result",
        json!({
            "role": "ponger", "pattern": cfg.pattern.as_str(), "protocol": driver.name(),
            "received": received, "warmup_received": warmup_received, "bytes": bytes,
            "reply_errors": reply_errors, "bad_messages": bad, "end_reason": reason.as_str(), "cpu": cpu_json(),
        }),
    );
    Ok(())
}
