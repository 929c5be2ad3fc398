//! Time for measurements: CLOCK_MONOTONIC nanoseconds, precise waits, CPU usage.
//!
//! Owns reading the clock, sleeping until an absolute instant (clock_nanosleep for
//! most of the wait, then spinning the last `SPIN_NS`, because nanosleep wakes
//! 45-180 us late on the machines we measured, see shared/MEASUREMENTS.md), and
//! the process's own CPU time.  It does not decide *when* to send: that is
//! `schedule`'s job.

/// Spin (instead of sleeping) for the last this-many nanoseconds before a deadline.
pub const SPIN_NS: u64 = 100_000;

/// CLOCK_MONOTONIC in nanoseconds.  Shared by every namespace of one machine, so a
/// timestamp taken by a sender is comparable with one taken by a receiver.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub(crate) fn timespec_from_ns(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Sleep with clock_nanosleep(TIMER_ABSTIME) until `SPIN_NS` before `target_ns`,
/// then spin until the clock reaches `target_ns`.  Returns at once when the target
/// has already passed.  The sleeping part wakes at least every
/// `signals::POLL_SLICE_NS` to ask `abort` (a signal reaches one thread of the
/// process only, and a host's flow can be stopped alone without any signal), and a
/// signal may end it early; the spin still runs, so the return is never before the
/// target unless `abort` says so.
pub fn sleep_until_ns(target_ns: u64, abort: &dyn Fn() -> bool) {
    loop {
        let now = now_ns();
        if now >= target_ns {
            return;
        }
        if target_ns - now > SPIN_NS {
            let wake = (target_ns - SPIN_NS).min(now.saturating_add(crate::signals::POLL_SLICE_NS));
            let ts = timespec_from_ns(wake);
            // SAFETY: ts is valid; a null remainder is allowed with TIMER_ABSTIME.
            let rc = unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            if (rc == libc::EINTR || wake < target_ns - SPIN_NS) && abort() {
                return;
            }
            continue;
        }
        while now_ns() < target_ns {
            std::hint::spin_loop();
        }
        return;
    }
}

/// Ask the kernel to wake our timers (poll, nanosleep) with 1 ns of slack instead
/// of the default 50 us.  Failure only costs precision, so it is logged, not fatal.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value and no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(
            "PR_SET_TIMERSLACK failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// CPU time this process has used so far (user, system), in seconds.
pub fn cpu_times_s() -> (f64, f64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// The `cpu` object of a result line.
pub fn cpu_json() -> serde_json::Value {
    let (user_s, sys_s) = cpu_times_s();
    serde_json::json!({"user_s": round6(user_s), "sys_s": round6(sys_s)})
}

/// Round to 6 decimals so JSON output stays short and stable.
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_and_sleep_reaches_target() {
        let a = now_ns();
        let target = a + 2_000_000;
        sleep_until_ns(target, &|| false);
        let b = now_ns();
        assert!(b >= target, "woke before the target: {b} < {target}");
    }

    #[test]
    fn a_long_sleep_sees_abort_within_a_slice() {
        let a = now_ns();
        let asked = std::cell::Cell::new(0u32);
        sleep_until_ns(a + 3_600_000_000_000, &|| {
            asked.set(asked.get() + 1);
            asked.get() >= 2
        });
        // two slices of 50 ms, not an hour (bound generous)
        assert_eq!(asked.get(), 2);
        assert!(now_ns() - a < 10_000_000_000);
    }

    #[test]
    fn sleep_until_past_returns_at_once() {
        let a = now_ns();
        sleep_until_ns(a.saturating_sub(1_000_000), &|| false);
        // Only a property: it did not wait for anything in the past (bound generous).
        assert!(now_ns() - a < 1_000_000_000);
    }

    #[test]
    fn cpu_times_are_non_negative() {
        let (u, s) = cpu_times_s();
        assert!(u >= 0.0 && s >= 0.0);
    }
}
