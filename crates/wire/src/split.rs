//! One thread per direction for a two-interface link without a shared medium (issue 17): the thread of
//! direction a_to_b reads side A only and sends to B, the thread of b_to_a the reverse. Each runs the
//! ordinary forwarding loop (`forward::Wire`) on its own `Emulator`, built from the same configuration and
//! seed, of which it uses one direction only: the directions of an emulator share nothing but the medium
//! (half duplex, CSMA) and the schedule, so without a medium each direction's decisions are the ones a
//! single loop would make, and a schedule is applied by both copies at the same times (both start at the
//! same time 0). Nothing is locked per frame.
//!
//! The calling thread keeps the control socket and the signals: it forwards each command to both loops
//! over a channel (an eventfd wakes a sleeping loop), merges their answers, and joins them at the end.
//! The `stats` line is the single loop's: `a_to_b` from the first thread, `b_to_a` from the second, the
//! loop figures of both together.

use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::clock::{now_ns, stopping};
use crate::control::{Command, ControlServer};
use crate::core::Core;
use crate::errors::WireError;
use crate::forward::{Options, Wire};
use crate::handoff::{eventfd, wake, Part, Reply, Request, SplitHandles};
use crate::packet::PacketSocket;
use crate::report::{error_line, stats_line, LoopStats, WireInfo};

/// How long the control thread sleeps between checks of the stop flag and of the threads.
const CONTROL_POLL: Duration = Duration::from_millis(100);
/// How long the control thread waits for a direction thread's answer to a command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Block SIGTERM/SIGINT in the calling thread (and in the threads it spawns while blocked); returns the
/// previous mask. The control thread keeps them, so that its ppoll is the one interrupted.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t manipulated only through the libc calls meant for it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: restoring a mask obtained from pthread_sigmask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

struct DirThread {
    requests: Sender<Request>,
    wake: Arc<OwnedFd>,
    handle: Option<std::thread::JoinHandle<(Wire, Result<(), WireError>)>>,
}

/// The link's two loops and the control socket.
pub struct SplitWire {
    threads: Vec<DirThread>,
    control: Option<ControlServer>,
    info: WireInfo,
    started_ns: u64,
    halt: Arc<AtomicBool>,
}

impl SplitWire {
    /// Start the two direction threads. `cores` are two emulators of the same configuration and seed;
    /// `socks` the link's two sockets (side A, side B); `opts` the single loop's options, copied to both.
    pub fn start(
        cores: [Core; 2],
        socks: Vec<Arc<PacketSocket>>,
        control: Option<ControlServer>,
        info: WireInfo,
        opts: Options,
    ) -> Result<Self, WireError> {
        let halt = Arc::new(AtomicBool::new(false));
        let t0 = now_ns();
        let old = block_stop_signals();
        let mut threads = Vec::new();
        for (dir, core) in cores.into_iter().enumerate() {
            let (tx, rx) = channel();
            let wake_fd = Arc::new(eventfd()?);
            let o = Options {
                spin_ns: opts.spin_ns,
                spin_budget_ns: opts.spin_budget_ns,
                receive: vec![dir == 0, dir == 1],
                busy_poll_ns: opts.busy_poll_ns,
                split: Some(SplitHandles {
                    requests: rx,
                    wake: wake_fd.clone(),
                    halt: halt.clone(),
                }),
            };
            let mut wire = Wire::new(core, socks.clone(), None, info.clone(), o);
            let name = if dir == 0 { "a_to_b" } else { "b_to_a" };
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    crate::clock::tighten_timer_slack();
                    let r = wire.forward(t0);
                    (wire, r)
                })
                .map_err(|e| WireError::Io(format!("starting the {name} thread: {e}")));
            let handle = match handle {
                Ok(h) => h,
                Err(e) => {
                    restore_signals(&old);
                    return Err(e);
                }
            };
            threads.push(DirThread { requests: tx, wake: wake_fd, handle: Some(handle) });
        }
        restore_signals(&old);
        Ok(Self { threads, control, info, started_ns: t0, halt })
    }

    /// Serve the control socket until SIGTERM/SIGINT or a direction thread ends (an error); then let
    /// both drain (or stop the other at once after an error), join them and return the final stats line
    /// with the first error, if any.
    pub fn run(mut self) -> (Value, Result<(), WireError>) {
        while !stopping() && self.threads.iter().all(|t| t.handle.as_ref().is_some_and(|h| !h.is_finished())) {
            self.wait();
            if let Some(mut ctl) = self.control.take() {
                ctl.service(&mut |cmd| self.dispatch(cmd));
                self.control = Some(ctl);
            }
        }
        if !stopping() {
            // A thread ended on its own: only an error does that. The other stops without draining.
            self.halt.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        for t in &self.threads {
            wake(&t.wake);
        }
        let mut parts = Vec::new();
        let mut result = Ok(());
        for t in &mut self.threads {
            match t.handle.take().map(|h| h.join()) {
                Some(Ok((mut wire, r))) => {
                    parts.push(wire.part());
                    if let (Err(e), Ok(())) = (r, &result) {
                        result = Err(e);
                    }
                }
                _ => {
                    if result.is_ok() {
                        result = Err(WireError::Io("a forwarding thread panicked".into()));
                    }
                }
            }
        }
        let stats = if parts.len() == 2 {
            self.merge(&parts[0], &parts[1])
        } else {
            error_line("io", "a forwarding thread panicked: no stats")
        };
        (stats, result)
    }

    fn wait(&self) {
        let mut fds = Vec::new();
        if let Some(ctl) = &self.control {
            ctl.poll_fds(&mut fds);
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: CONTROL_POLL.as_nanos() as _ };
        // SAFETY: fds is a live array of pollfd (possibly empty), ts a live timespec.
        unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    }

    /// Send `cmd` to both threads and wait for both answers.
    fn ask(&self, cmd: &Command) -> Result<Vec<Reply>, Value> {
        let mut pending = Vec::new();
        for t in &self.threads {
            let (tx, rx): (Sender<Reply>, Receiver<Reply>) = channel();
            if t.requests.send(Request { cmd: cmd.clone(), reply: tx }).is_err() {
                return Err(error_line("io", "a forwarding thread has stopped"));
            }
            wake(&t.wake);
            pending.push(rx);
        }
        pending
            .into_iter()
            .map(|rx| rx.recv_timeout(ANSWER_TIMEOUT).map_err(|_| error_line("io", "a forwarding thread did not answer")))
            .collect()
    }

    fn dispatch(&mut self, cmd: Command) -> Value {
        let replies = match self.ask(&cmd) {
            Ok(r) => r,
            Err(e) => return e,
        };
        match (cmd, &replies[..]) {
            (Command::Stats, [Reply::Part(a), Reply::Part(b)]) => self.merge(a, b),
            // Both loops were given the same command with the same configuration: an error is the same in
            // both; report the first one.
            (_, [Reply::Answer(a), Reply::Answer(b)]) => {
                if a.get("type").and_then(Value::as_str) == Some("error") {
                    a.clone()
                } else {
                    b.clone()
                }
            }
            _ => error_line("io", "unexpected answer from a forwarding thread"),
        }
    }

    /// The stats line of the link from the two threads' shares.
    fn merge(&self, a: &Part, b: &Part) -> Value {
        let mut core = a.core.clone();
        if let (Some(obj), Some(rev)) = (core.as_object_mut(), b.core.get("b_to_a")) {
            obj.insert("b_to_a".into(), rev.clone());
        }
        let lp = LoopStats::merged(&[&a.lp, &b.lp]);
        let uptime = now_ns().saturating_sub(self.started_ns);
        let up = [a.up[0], b.up[1]];
        let io = [a.io.clone(), b.io.clone()];
        let mut line = stats_line(&self.info, uptime, up, core, &io, &lp);
        if let (Some(sa), Some(sb), Value::Object(m)) = (&a.stop, &b.stop, &mut line) {
            let sum = |k: &str| sa.get(k).and_then(Value::as_u64).unwrap_or(0) + sb.get(k).and_then(Value::as_u64).unwrap_or(0);
            let ms = |v: &Value| v.get("drain_ms").and_then(Value::as_f64).unwrap_or(0.0);
            m.insert(
                "stop".into(),
                json!({
                    "held_at_signal": sum("held_at_signal"),
                    "sent_while_draining": sum("sent_while_draining"),
                    "left_at_exit": sum("left_at_exit"),
                    "drain_ms": ms(sa).max(ms(sb)),
                    "drain_limit_ms": sa.get("drain_limit_ms").cloned().unwrap_or(Value::Null),
                }),
            );
        }
        line
    }
}
