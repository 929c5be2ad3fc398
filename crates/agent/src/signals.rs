//! SIGTERM / SIGINT: a process-wide "stop requested" flag.
//!
//! The handler only stores to an atomic.  It is installed without SA_RESTART, so a
//! blocking socket call returns EINTR; loops also check `stop_requested()` at least
//! every `POLL_SLICE_NS` (they never block longer than that), so a stop is seen
//! within about 50 ms.  Roles then print their result and exit 0.

use std::sync::atomic::{AtomicBool, Ordering};

/// Longest a loop may block before looking at the stop flag again.
pub const POLL_SLICE_NS: u64 = 50_000_000;

static STOP: AtomicBool = AtomicBool::new(false);

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

/// True once SIGTERM or SIGINT arrived.
#[inline]
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// For tests: pretend a signal arrived (or clear it).
pub fn set_stop(v: bool) {
    STOP.store(v, Ordering::SeqCst);
}
