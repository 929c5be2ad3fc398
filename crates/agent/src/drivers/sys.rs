//! Socket helpers shared by the socket drivers: deadline waits, non-blocking
//! receives, forced buffer sizes.
//!
//! The receive strategy keeps the common case to one system call: when the
//! deadline is far, a plain blocking call on a socket whose SO_RCVTIMEO is
//! `BLOCK_TIMEOUT` (it returns by itself, so deadlines and signals are still
//! seen); when the deadline is near, ppoll with a nanosecond timeout and then a
//! MSG_DONTWAIT call, so the deadline is kept precisely.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use socket2::{SockAddr, Socket};

use crate::clock::{now_ns, timespec_from_ns};

/// SO_RCVTIMEO of every receiving socket: the longest one blocking call lasts.
pub const BLOCK_TIMEOUT: Duration = Duration::from_millis(10);
/// Use a blocking call only when the deadline is further away than this
/// (BLOCK_TIMEOUT plus the kernel's jiffy rounding, with a margin).
pub const FAR_NS: u64 = 25_000_000;

/// ppoll until `deadline_ns` (0 timeout when already past).  Returns the number
/// of ready descriptors; 0 on timeout or when a signal interrupted the wait.
pub fn poll_until(pfds: &mut [libc::pollfd], deadline_ns: u64) -> io::Result<usize> {
    let now = now_ns();
    let ts = timespec_from_ns(deadline_ns.saturating_sub(now));
    // SAFETY: pfds is a valid slice of pollfd; ts is valid; no signal mask.
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

/// Wait until `fd` is readable or `deadline_ns` passes.
pub fn wait_readable(fd: RawFd, deadline_ns: u64) -> io::Result<bool> {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    Ok(poll_until(&mut p, deadline_ns)? > 0)
}

fn cvt(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// recvfrom with `flags` (0 = blocking, honouring SO_RCVTIMEO), returning the source.
pub fn recv_from_flags(
    fd: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> io::Result<(usize, SocketAddr)> {
    // SAFETY: storage is plain data, len matches its size, buf is valid for writes.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let n = cvt(libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ))?;
        let addr = SockAddr::new(storage, len);
        let sa = addr.as_socket().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "datagram from a non-IP address")
        })?;
        Ok((n, sa))
    }
}

/// Receive with a deadline.  `call(flags)` does one receive system call with
/// the given flags: 0 for a blocking call (bounded by SO_RCVTIMEO), MSG_DONTWAIT
/// for a non-blocking one.  Returns `Ok(None)` when the deadline passes or a
/// signal interrupts.
pub fn recv_with_deadline<T>(
    fd: RawFd,
    deadline_ns: u64,
    mut call: impl FnMut(libc::c_int) -> io::Result<T>,
) -> io::Result<Option<T>> {
    loop {
        let now = now_ns();
        let r = if deadline_ns > now + FAR_NS {
            call(0)
        } else {
            if deadline_ns > now && !wait_readable(fd, deadline_ns)? {
                return Ok(None);
            }
            call(libc::MSG_DONTWAIT)
        };
        match r {
            Ok(v) => return Ok(Some(v)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if now_ns() >= deadline_ns {
                    return Ok(None);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// recv(2) with flags.
pub fn recv_flags(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() writable bytes.
    cvt(unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) })
}

/// Set SO_SNDBUF (`send`) or SO_RCVBUF to `bytes`, with the *FORCE variant first
/// (root gets past net.core.[rw]mem_max, which a namespace cannot raise), falling
/// back to the plain option.  Returns the size the kernel reports afterwards.
/// TCP_CONGESTION: the socket's congestion control algorithm (ENOENT when the kernel lacks it).
pub fn set_congestion(sock: &Socket, name: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket fd; the option value is the name's bytes and their length.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn set_buffer(sock: &Socket, send: bool, bytes: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let opt = if send {
        libc::SO_SNDBUFFORCE
    } else {
        libc::SO_RCVBUFFORCE
    };
    let val: libc::c_int = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    // SAFETY: a valid socket fd and a c_int option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        tracing::debug!(
            "SO_{}BUFFORCE failed ({e}); falling back to the capped option",
            if send { "SND" } else { "RCV" }
        );
        if send {
            sock.set_send_buffer_size(bytes)?;
        } else {
            sock.set_recv_buffer_size(bytes)?;
        }
    }
    let got = if send {
        sock.send_buffer_size()?
    } else {
        sock.recv_buffer_size()?
    };
    // The kernel doubles the value for bookkeeping overhead; less than asked means capped.
    if got < bytes {
        tracing::warn!(
            "{} buffer is {got} bytes, less than the {bytes} asked",
            if send { "send" } else { "receive" }
        );
    }
    Ok(got)
}

/// True for errors a datagram send tolerates (counted, not fatal): ICMP refusals
/// from an absent peer, firewall drops, unreachable routes, full queues.
pub fn is_soft_send_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::EPERM
                | libc::ENOBUFS
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EAGAIN
        )
    )
}
