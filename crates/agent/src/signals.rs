//! SIGTERM / SIGINT: a process-wide "stop requested" flag, and a flow's own one.
//!
//! The handler only stores to an atomic.  It is installed without SA_RESTART, so a
//! blocking socket call returns EINTR; loops also check `stop_requested()` at least
//! every `POLL_SLICE_NS` (they never block longer than that), so a stop is seen
//! within about 50 ms.  Roles then print their result and exit 0.
//!
//! Host mode (crate::host) runs several flows in one process, each in its own thread; a flow
//! can be stopped alone (a `{"stop": K}` command).  Its thread holds that flow's flag in a
//! thread-local (`set_flow_stop`), which `stop_requested` reads beside the process-wide one.
//! A driver thread that checks `stop_requested` on a flow's behalf must carry the flag over
//! (`flow_stop` in the flow's thread, `set_flow_stop` in its own).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Longest a loop may block before looking at the stop flag again.
pub const POLL_SLICE_NS: u64 = 50_000_000;

static STOP: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The stop flag of the flow this thread runs (host mode); None elsewhere.  `'static`: a host
    /// leaks one small flag per flow (at most crate::host::MAX_FLOWS), so reading it needs no
    /// reference count and no lazy initialisation.
    static FLOW_STOP: Cell<Option<&'static AtomicBool>> = const { Cell::new(None) };
}

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Install the handler for SIGTERM and SIGINT.
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: sigaction is plain data; the handler is async-signal-safe (one atomic store).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = 0; // no SA_RESTART: blocking calls return EINTR
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// True once SIGTERM or SIGINT arrived, or (host mode) this thread's flow was told to stop.
#[inline]
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
        || FLOW_STOP.with(|f| f.get().is_some_and(|s| s.load(Ordering::Relaxed)))
}

/// True once SIGTERM or SIGINT arrived (whatever thread asks; no flow's flag).  A thread that
/// serves several flows (a host's shared UDP receiver, crate::host::udp_group) reads this and each
/// flow's flag itself.
#[inline]
pub fn signal_received() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Make `flag` this thread's flow stop flag (None: no flow's).
pub fn set_flow_stop(flag: Option<&'static AtomicBool>) {
    FLOW_STOP.with(|f| f.set(flag));
}

/// This thread's flow stop flag, to hand to a thread working for the same flow.
pub fn flow_stop() -> Option<&'static AtomicBool> {
    FLOW_STOP.with(|f| f.get())
}

/// For tests: pretend a signal arrived (or clear it).
pub fn set_stop(v: bool) {
    STOP.store(v, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_flag_stops_only_its_thread() {
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let other = std::thread::spawn(move || {
            set_flow_stop(Some(flag));
            while !stop_requested() {
                std::thread::yield_now();
            }
            flow_stop().is_some()
        });
        assert!(!stop_requested());
        flag.store(true, Ordering::SeqCst);
        assert!(other.join().unwrap());
        // this thread has no flow: still running
        assert!(!stop_requested());
        assert!(flow_stop().is_none());
    }
}
