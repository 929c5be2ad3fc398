//! Time for the I/O loop: CLOCK_MONOTONIC in ns (the clock every namespace of the machine shares and the
//! core is driven with), conversion of kernel RX timestamps (CLOCK_REALTIME) to it, and precise waiting
//! (sleep in the kernel, then spin for the last stretch, because wakeups arrive 45-180 us late here).
//! It does not decide what to wait for: the forwarding loop does.

use std::sync::atomic::{AtomicBool, Ordering};

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; clock ids used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC now, in ns.
pub fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, in ns (signed), sampled now. Kernel RX timestamps
/// (SO_TIMESTAMPNS) are CLOCK_REALTIME; subtracting this maps them onto CLOCK_MONOTONIC.
/// Re-sampled once per receive batch so a clock step or slew cannot accumulate.
///
/// A sample is off by up to half the time between its two monotonic reads, so one interrupted between
/// them (a preempted vCPU) would map timestamps early and let frames leave before their delay (seen in CI:
/// 9 us early). The tightest of a few samples is taken, stopping at the first within `TIGHT_NS`.
pub fn realtime_offset_ns() -> i64 {
    const TRIES: usize = 4;
    const TIGHT_NS: u64 = 1_000;
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..TRIES {
        let m1 = read(libc::CLOCK_MONOTONIC);
        let r = read(libc::CLOCK_REALTIME);
        let m2 = read(libc::CLOCK_MONOTONIC);
        let gap = m2.saturating_sub(m1);
        let offset = r as i64 - ((m1 / 2 + m2 / 2) as i64);
        if best.is_none_or(|(g, _)| gap < g) {
            best = Some((gap, offset));
        }
        if gap <= TIGHT_NS {
            break;
        }
    }
    best.map_or(0, |(_, o)| o)
}

/// Ask for a 1 ns timer slack for this thread (the default 50 us slack would add to every wakeup).
pub fn tighten_timer_slack() {
    // SAFETY: prctl with an integer argument; failure only leaves the default slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Run this thread under SCHED_FIFO at `priority` (1-99), so that departures are not late because ordinary
/// processes hold the CPU. The kernel's RT throttling (sched_rt_runtime_us) still leaves others 5 % of each
/// second, and the loop's spin budget bounds busy-waiting. Err when not permitted (no CAP_SYS_NICE).
pub fn set_realtime(priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: plain syscall on the calling thread with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Set by the SIGTERM/SIGINT handler; the loop checks it every turn.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Install SIGTERM/SIGINT handlers that set `STOP` (without SA_RESTART, so a blocking ppoll returns EINTR).
pub fn install_stop_handlers() -> std::io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction with a plain handler that only stores to an atomic (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    // A closed stdout (the runner went away) must not kill us with SIGPIPE in the middle of a write.
    // SAFETY: setting a signal disposition to SIG_IGN.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    Ok(())
}

pub fn stopping() -> bool {
    STOP.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_advances() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
    }

    #[test]
    fn realtime_offset_is_stable() {
        let a = realtime_offset_ns();
        let b = realtime_offset_ns();
        // Two samples taken microseconds apart agree to well within a millisecond unless the clock was stepped.
        assert!((a - b).abs() < 1_000_000, "offsets {a} and {b}");
    }
}
