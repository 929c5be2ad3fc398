//! The forwarding loop: one thread that receives frames from every port (two interfaces of a link, or
//! the N of a shared segment), feeds them to the core (`core::Core`: wire-core's `Emulator` or
//! `Segment`), sends what the core says is due, serves the control socket, and waits in between (ppoll
//! until the next departure or the next frame, then spins for the last `spin_ns`). On SIGTERM/SIGINT it
//! stops receiving and drains: frames already queued keep leaving at their times for at most
//! `DRAIN_NS`. It owns the timing and the I/O counters; the impairment decisions are the core's.
//!
//! By default one such loop serves both directions: a reply usually finds it awake (its busy-poll window),
//! where a second thread would be asleep (docs/wire.md has the measurements). With `--threads 2` a link
//! without a shared medium (no half duplex, no CSMA) is served by two such loops, one thread per direction
//! (`split`): each reads one side only and has its own `Emulator` of which it uses one direction, so
//! nothing is locked per frame.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use roughnet_wire_core::{LinkConfig, Side};
use serde_json::{json, Value};

use crate::clock::{now_ns, realtime_offset_ns, stopping};
use crate::control::{Command, ControlServer};
use crate::core::Core;
use crate::errors::WireError;
use crate::handoff::{clear_wake, Part, Reply, SplitHandles};
use crate::packet::{PacketSocket, RxBatch};
use crate::report::{error_line, segment_stats_line, stats_line, DirectionIo, LoopStats, WireInfo};

/// How often (at most) the loop polls the control socket while traffic keeps it busy.
const CONTROL_CHECK_NS: u64 = 5_000_000;
/// How often (at most) the kernel's receive-drop counters are read.
const KERNEL_DROPS_CHECK_NS: u64 = 100_000_000;
/// Receive batches taken from one socket before the loop sends what is due (bounds the added latency
/// under a flood while keeping batches full).
const MAX_RX_ROUNDS: usize = 4;
/// After SIGTERM/SIGINT, frames already queued keep leaving at their due times for at most this long.
pub const DRAIN_NS: u64 = 2_000_000_000;
/// Window over which the spin budget is counted.
pub const SPIN_WINDOW_NS: u64 = 10_000_000;

/// Accounts the time spent busy-waiting, per window.
#[derive(Default)]
struct SpinBudget {
    window_start: u64,
    used: u64,
    /// `now` of the previous loop turn if that turn was spinning.
    prev_turn: Option<u64>,
    /// Time spent spinning since the start.
    total: u64,
}

impl SpinBudget {
    /// A spin turn at `now`: may the loop keep spinning?
    fn spin(&mut self, now: u64, budget: u64) -> bool {
        if now.saturating_sub(self.window_start) >= SPIN_WINDOW_NS {
            self.window_start = now;
            self.used = 0;
        }
        if let Some(prev) = self.prev_turn {
            let d = now.saturating_sub(prev);
            self.used += d;
            self.total += d;
        }
        if self.used >= budget {
            self.prev_turn = None;
            return false;
        }
        self.prev_turn = Some(now);
        true
    }

    fn not_spinning(&mut self) {
        self.prev_turn = None;
    }
}

pub struct Options {
    /// Spin (busy-wait) instead of sleeping when the next departure is closer than this.
    pub spin_ns: u64,
    /// Most of the time spent spinning, in ns per SPIN_WINDOW_NS; past it the loop sleeps until the due time
    /// instead (under heavy traffic spinning would take the CPU the endpoints' stacks need).
    pub spin_budget_ns: u64,
    /// Which ports' sockets are read (all, except in the one-process-per-direction experiment).
    pub receive: Vec<bool>,
    /// Busy-poll window: for this long after the last frame arrived, keep polling the sockets instead of
    /// sleeping in ppoll, within the same spin budget (issue 17). A reply or the next frame of an exchange
    /// usually comes within tens of microseconds, and a ppoll wakeup costs several microseconds on a VM
    /// (and can come much later under load): polling saves that wakeup in each direction. 0 = off.
    pub busy_poll_ns: u64,
    /// Set when this loop is one of a link's two direction threads (`split`).
    pub split: Option<SplitHandles>,
}

pub struct Wire {
    core: Core,
    socks: Vec<Arc<PacketSocket>>,
    rx: Vec<RxBatch>,
    /// A link: indexed by direction (0 = a_to_b, frames from A; 1 = b_to_a). A segment: by port (frames
    /// received on it, and departures to it).
    io: Vec<DirectionIo>,
    control: Option<ControlServer>,
    lp: LoopStats,
    info: WireInfo,
    opts: Options,
    started_ns: u64,
    /// Time last given to the core; the core is always fed non-decreasing times.
    last_fed_ns: u64,
    /// Per direction (0 = a_to_b, a segment's uplinks): not partitioned by the control socket as a whole.
    up: [bool; 2],
    inbuf: Vec<(u64, Vec<u8>)>,
    arrivals: Vec<(u64, usize, Vec<u8>)>,
    scratch: Vec<(Side, Vec<u8>, u64)>,
    out: Vec<(usize, Vec<u8>, u64)>,
    /// What the drain after SIGTERM did (for the final stats line).
    stop: Option<Value>,
    /// Per socket: when its interface was last seen down (ENETDOWN) and not yet up again; such an
    /// interface is looked up every DOWN_CHECK_NS, because the kernel reports ENETDOWN once, when the
    /// interface goes down, and nothing more when it is then removed (`ip link del` does both).
    down_checked_ns: Vec<Option<u64>>,
}

/// How often an interface that went down is checked for having been removed.
const DOWN_CHECK_NS: u64 = 100_000_000;

impl Wire {
    pub fn new(
        core: Core,
        socks: Vec<Arc<PacketSocket>>,
        control: Option<ControlServer>,
        info: WireInfo,
        opts: Options,
    ) -> Self {
        let rx = socks.iter().map(|s| RxBatch::new(s.frame_room)).collect();
        let io = socks.iter().map(|_| DirectionIo::new()).collect();
        let now = now_ns();
        Self {
            core,
            socks,
            rx,
            io,
            control,
            lp: LoopStats::new(),
            info,
            opts,
            started_ns: now,
            last_fed_ns: now,
            up: [true, true],
            inbuf: Vec::with_capacity(crate::packet::BATCH),
            arrivals: Vec::with_capacity(4 * crate::packet::BATCH),
            scratch: Vec::with_capacity(4 * crate::packet::BATCH),
            out: Vec::with_capacity(4 * crate::packet::BATCH),
            stop: None,
            down_checked_ns: Vec::new(),
        }
    }

    fn feed_time(&mut self, t: u64) -> u64 {
        self.last_fed_ns = self.last_fed_ns.max(t);
        self.last_fed_ns
    }

    /// Receive what is waiting on every socket and hand it to the core in arrival order. Returns the
    /// number of frames the kernel handed over.
    fn receive(&mut self) -> Result<usize, WireError> {
        let mut total = 0;
        let now = now_ns();
        let offset = if self.info.rx_timestamps { realtime_offset_ns() } else { 0 };
        for i in 0..self.socks.len() {
            if !self.opts.receive[i] {
                continue;
            }
            if self.down_checked_ns.len() != self.socks.len() {
                self.down_checked_ns = vec![None; self.socks.len()];
            }
            if let Some(checked) = self.down_checked_ns[i] {
                if now.saturating_sub(checked) >= DOWN_CHECK_NS {
                    if !self.socks[i].still_exists() {
                        return Err(WireError::Io(format!(
                            "interface {} went down and was removed",
                            self.socks[i].ifname
                        )));
                    }
                    self.down_checked_ns[i] = Some(now);
                }
            }
            for _ in 0..MAX_RX_ROUNDS {
                let n = match self.rx[i].recv(&self.socks[i], now, offset, &mut self.inbuf) {
                    Ok(n) => n,
                    Err(e) if e.raw_os_error() == Some(libc::ENETDOWN) && self.socks[i].still_exists() => {
                        // The interface went down and may come back: the socket stays bound; go on
                        // (checking now and then that it was not removed meanwhile).
                        tracing::warn!(ifname = %self.socks[i].ifname, "interface went down");
                        self.down_checked_ns[i] = Some(now);
                        0
                    }
                    Err(e) => {
                        return Err(WireError::Io(format!(
                            "interface {}: recvmmsg: {e} (was the interface removed?)",
                            self.socks[i].ifname
                        )))
                    }
                };
                total += n;
                if n > 0 {
                    self.down_checked_ns[i] = None; // frames again: it is up
                }
                for (ts, frame) in self.inbuf.drain(..) {
                    self.arrivals.push((ts, i, frame));
                }
                if n < crate::packet::BATCH {
                    break;
                }
            }
        }
        if self.arrivals.is_empty() {
            return Ok(total);
        }
        // Interleave the ports by arrival time (stable: each port's own order is kept).
        self.arrivals.sort_by_key(|a| a.0);
        let mut arrivals = std::mem::take(&mut self.arrivals);
        for (ts, port, frame) in arrivals.drain(..) {
            let t = self.feed_time(ts);
            // Drops are counted by reason inside the core's stats.
            self.core.ingress(t, port, frame);
        }
        self.arrivals = arrivals;
        Ok(total)
    }

    /// Send every frame the core says is due now; record each departure's scheduling error.
    fn transmit(&mut self) {
        let t = self.feed_time(now_ns());
        self.core.egress(t, &mut self.scratch, &mut self.out);
        if self.out.is_empty() {
            return;
        }
        let mut out = std::mem::take(&mut self.out);
        for dest in (0..self.socks.len()).rev() {
            let slot = self.core.tx_slot(dest);
            let frames: Vec<&[u8]> =
                out.iter().filter(|(to, _, _)| *to == dest).map(|(_, f, _)| f.as_slice()).collect();
            if frames.is_empty() {
                continue;
            }
            let actual = now_ns();
            let sent = self.socks[dest].send_all(&frames, &mut self.io[slot].send_errors);
            self.io[slot].tx_frames += sent as u64;
            for (_, _, due) in out.iter().filter(|(to, _, _)| *to == dest) {
                self.io[slot].record_departure(actual, *due);
            }
        }
        let segment = self.core.is_segment();
        for (to, frame, _) in out.drain(..) {
            // A link's buffer came in on the other side: back to that side's pool. A segment's may have
            // come from any port: back to the pool with the fewest spares.
            let src = if segment {
                (0..self.rx.len()).min_by_key(|&i| self.rx[i].spare()).unwrap_or(0)
            } else {
                1 - to
            };
            self.rx[src].recycle(frame);
        }
        self.out = out;
    }

    fn refresh_kernel_drops(&mut self) {
        // Only the sockets this loop reads: the counter resets on read, and the other direction's thread
        // reads its own.
        for i in 0..self.socks.len() {
            if !self.opts.receive[i] {
                continue;
            }
            self.io[i].rx_kernel_drops += self.socks[i].take_kernel_drops();
            self.io[i].rx_truncated = self.rx[i].truncated;
        }
    }

    /// The `stats` JSON line as of now.
    pub fn stats(&mut self) -> Value {
        self.refresh_kernel_drops();
        let core = self.core.stats_json();
        let uptime = now_ns().saturating_sub(self.started_ns);
        let mut line = if self.core.is_segment() {
            segment_stats_line(&self.info, uptime, self.up, core, &self.io, &self.lp)
        } else {
            stats_line(&self.info, uptime, self.up, core, &self.io, &self.lp)
        };
        if let (Some(stop), Value::Object(m)) = (&self.stop, &mut line) {
            m.insert("stop".into(), stop.clone());
        }
        line
    }

    fn handle(&mut self, cmd: Command) -> Value {
        let now = self.feed_time(now_ns());
        match cmd {
            Command::Stats => self.stats(),
            Command::Link { up, direction, port } => {
                if let Err(msg) = self.core.set_up(now, direction, port, up) {
                    return error_line("request", &msg);
                }
                if port.is_none() {
                    match direction {
                        None => self.up = [up, up],
                        Some(Side::A) => self.up[0] = up,
                        Some(Side::B) => self.up[1] = up,
                    }
                }
                tracing::info!(up, ?direction, ?port, "link state changed by the control socket");
                json!({"v": 1, "type": "ok", "cmd": if up { "up" } else { "down" }})
            }
            Command::Set(v) => match serde_json::from_value::<LinkConfig>(v) {
                Err(e) => error_line("config", &format!("link configuration not accepted: {e}")),
                Ok(cfg) if self.opts.split.is_some() && (cfg.half_duplex.is_some() || cfg.csma.is_some()) => {
                    error_line(
                        "config",
                        "link configuration not accepted: half_duplex and csma couple the two directions, and \
                         this wire runs one thread per direction; start it with --threads 1 for a medium that \
                         can change at run time",
                    )
                }
                Ok(cfg) => match self.core.set_config(now, cfg) {
                    Ok(()) => {
                        tracing::info!("link configuration replaced by the control socket");
                        json!({"v": 1, "type": "ok", "cmd": "set"})
                    }
                    Err(e) => error_line("config", &format!("link configuration not accepted: {e}")),
                },
            },
        }
    }

    fn service_control(&mut self) {
        if let Some(mut ctl) = self.control.take() {
            ctl.service(&mut |cmd| self.handle(cmd));
            self.control = Some(ctl);
        }
        if self.opts.split.is_some() {
            self.service_requests();
        }
    }

    /// A direction thread: answer the commands the control thread forwarded (`split`).
    fn service_requests(&mut self) {
        loop {
            let Some(split) = &self.opts.split else { return };
            clear_wake(&split.wake);
            let Ok(req) = split.requests.try_recv() else { return };
            let reply = match req.cmd {
                Command::Stats => Reply::Part(Box::new(self.part())),
                cmd => Reply::Answer(self.handle(cmd)),
            };
            // The control thread may have given up waiting: nothing to do then.
            let _ = req.reply.send(reply);
        }
    }

    /// This loop's share of a stats line (`split`): its core's stats, its I/O counters and loop figures.
    pub fn part(&mut self) -> Part {
        self.refresh_kernel_drops();
        let slot = if self.opts.receive[0] { 0 } else { 1 };
        Part {
            core: self.core.stats_json(),
            io: self.io[slot].clone(),
            lp: self.lp.clone(),
            up: self.up,
            stop: self.stop.clone(),
        }
    }

    fn halted(&self) -> bool {
        self.opts.split.as_ref().is_some_and(|s| s.halt.load(Ordering::Relaxed))
    }

    /// Block until a frame arrives, the control socket has something, a signal comes, or `timeout` passes.
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), WireError> {
        let start = now_ns();
        let mut fds: Vec<libc::pollfd> = self
            .socks
            .iter()
            .zip(self.opts.receive.iter().copied())
            .map(|(s, rx)| libc::pollfd { fd: if rx { s.raw_fd() } else { -1 }, events: libc::POLLIN, revents: 0 })
            .collect();
        if let Some(ctl) = &self.control {
            ctl.poll_fds(&mut fds);
        }
        if let Some(split) = &self.opts.split {
            use std::os::fd::AsRawFd;
            fds.push(libc::pollfd { fd: split.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        let ts = timeout.map(|d| libc::timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ });
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: fds is a live array of pollfd; tsp is null or points at a live timespec.
        let r = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tsp, std::ptr::null()) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(WireError::Io(format!("ppoll: {e}")));
            }
        }
        if r == 0 {
            if let Some(d) = timeout {
                self.lp.record_wakeup(start + d.as_nanos() as u64, now_ns());
            }
        }
        // A socket error (POLLERR) is read and judged by the next receive.
        Ok(())
    }

    /// After the stop signal: receive nothing more, send what is queued at its due time until nothing is
    /// left or `DRAIN_NS` has passed (frames due later than that are not waited for), and record it.
    fn drain(&mut self) {
        let start = now_ns();
        let deadline = start + DRAIN_NS;
        let held = self.core.held();
        let tx0: u64 = self.io.iter().map(|d| d.tx_frames).sum();
        loop {
            self.transmit();
            let now = now_ns();
            match self.core.next_due() {
                Some(due) if due <= deadline && now < deadline => {
                    // Sleep until shortly before the departure, then spin (no sockets to watch any more).
                    let wake = due.saturating_sub(self.opts.spin_ns);
                    if wake > now {
                        std::thread::sleep(Duration::from_nanos(wake - now));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                _ => break,
            }
        }
        let end = now_ns();
        let left = self.core.held();
        let sent = self.io.iter().map(|d| d.tx_frames).sum::<u64>() - tx0;
        tracing::info!(held, sent, left, "stopped: drained queued frames");
        self.stop = Some(json!({
            "held_at_signal": held,
            "sent_while_draining": sent,
            "left_at_exit": left,
            "drain_ms": end.saturating_sub(start) as f64 / 1e6,
            "drain_limit_ms": DRAIN_NS / 1_000_000,
        }));
    }

    /// Forward until SIGTERM/SIGINT, then drain. Returns the final stats line.
    pub fn run(&mut self) -> Result<Value, WireError> {
        // Time 0 of the configuration's schedules and traces: when forwarding starts.
        let t0 = now_ns();
        self.forward(t0)?;
        Ok(self.stats())
    }

    /// The loop itself, with `t0` as time 0 of schedules and traces (a link's two direction threads share
    /// it): forward until SIGTERM/SIGINT, then drain; or until `halt`, then stop at once.
    pub fn forward(&mut self, t0: u64) -> Result<(), WireError> {
        let t0 = self.feed_time(t0);
        self.core.start(t0);
        let mut last_control = 0u64;
        let mut last_drops = 0u64;
        let mut spin = SpinBudget::default();
        let mut last_frame = 0u64;
        while !stopping() && !self.halted() {
            let n = self.receive()?;
            self.transmit();
            let now = now_ns();
            if n > 0 {
                last_frame = now;
            }
            if now.saturating_sub(last_drops) > KERNEL_DROPS_CHECK_NS {
                self.refresh_kernel_drops();
                last_drops = now;
            }
            if n > 0 {
                spin.not_spinning();
                // More may be waiting; the control socket still gets its turn every few ms.
                if now.saturating_sub(last_control) > CONTROL_CHECK_NS {
                    self.service_control();
                    last_control = now;
                }
                continue;
            }
            let due = self.core.next_due();
            match due {
                Some(due) if due <= now + self.opts.spin_ns => {
                    if now.saturating_sub(last_control) > CONTROL_CHECK_NS {
                        self.service_control();
                        last_control = now;
                    }
                    let allowed = spin.spin(now, self.opts.spin_budget_ns);
                    self.lp.spin_ns = spin.total;
                    if allowed {
                        // Close to a departure: spin (the receive calls above are the spin's body).
                        std::hint::spin_loop();
                    } else {
                        // Spin budget spent: sleep until the due time itself (the wakeup comes late).
                        self.wait(Some(Duration::from_nanos(due.saturating_sub(now))))?;
                    }
                }
                _ if now.saturating_sub(last_frame) < self.opts.busy_poll_ns
                    && spin.spin(now, self.opts.spin_budget_ns) =>
                {
                    // Busy-poll window after traffic: the receive calls above are the poll.
                    self.lp.spin_ns = spin.total;
                    if now.saturating_sub(last_control) > CONTROL_CHECK_NS {
                        self.service_control();
                        last_control = now;
                    }
                    std::hint::spin_loop();
                }
                _ => {
                    spin.not_spinning();
                    // Sleep until the spin window before the next departure, or a scheduled change (applied
                    // by the next egress), whichever is first; a frame or a command wakes us earlier.
                    let wake = [due.map(|d| d - self.opts.spin_ns), self.core.next_change()].into_iter().flatten().min();
                    let mut timeout = wake.map(|w| Duration::from_nanos(w.saturating_sub(now)));
                    if self.down_checked_ns.iter().any(Option::is_some) {
                        // An interface is down: wake up to check whether it was removed meanwhile.
                        let check = Duration::from_nanos(DOWN_CHECK_NS);
                        timeout = Some(timeout.map_or(check, |t| t.min(check)));
                    }
                    self.wait(timeout)?;
                    self.service_control();
                    last_control = now_ns();
                }
            }
        }
        if !self.halted() {
            self.drain();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_budget_caps_spinning_per_window() {
        let mut b = SpinBudget::default();
        let budget = 2_000_000; // 2 ms per 10 ms window
        let mut t = 1_000_000_000;
        let mut spun = 0;
        // Spin turns 1 us apart: allowed until 2 ms of the window are used, then refused.
        while b.spin(t, budget) {
            spun += 1;
            t += 1_000;
        }
        assert!((1_999..=2_001).contains(&spun), "spun {spun} turns");
        // Still refused later in the same window, allowed again in the next one.
        assert!(!b.spin(t + 1_000_000, budget));
        assert!(b.spin(t + SPIN_WINDOW_NS, budget));
    }

    #[test]
    fn time_between_separate_spins_is_not_counted() {
        let mut b = SpinBudget::default();
        let budget = 1_000;
        let t = 5 * SPIN_WINDOW_NS;
        assert!(b.spin(t, budget));
        b.not_spinning();
        // 9 ms later (same window) a new spin starts: the sleep in between was not spinning.
        assert!(b.spin(t + 9_000_000, budget));
        assert!(b.spin(t + 9_000_500, budget));
        assert!(!b.spin(t + 9_001_100, budget));
    }
}
