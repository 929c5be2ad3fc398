//! What the thread that owns the control socket and a link's two direction threads (`split`) hand each
//! other: control requests and their replies, each thread's share of a stats line, and the eventfd that
//! wakes a sleeping loop. Below both `forward` (a direction's loop) and `split` (the control thread).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use serde_json::Value;

use crate::control::Command;
use crate::errors::WireError;
use crate::report::{DirectionIo, LoopStats};

/// What a direction thread shares with the thread that owns the control socket (`split`).
pub struct SplitHandles {
    /// Control commands forwarded to this loop, each with where to send the answer.
    pub requests: Receiver<Request>,
    /// An eventfd written when a request is waiting or the loop must look at `halt`.
    pub wake: Arc<OwnedFd>,
    /// Stop without draining (the other direction failed).
    pub halt: Arc<AtomicBool>,
}

/// A control command for one direction thread, and where its answer goes.
pub struct Request {
    pub cmd: Command,
    pub reply: Sender<Reply>,
}

pub enum Reply {
    /// The answer to `set`, `up` or `down`.
    Answer(Value),
    /// The answer to `stats`: the thread's share.
    Part(Box<Part>),
}

/// One direction thread's share of a stats line.
pub struct Part {
    pub core: Value,
    pub io: DirectionIo,
    pub lp: LoopStats,
    pub up: [bool; 2],
    pub stop: Option<Value>,
}

/// Empty a wake eventfd (non-blocking; nothing to read is fine).
pub fn clear_wake(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a live u64 from an eventfd we own.
    unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
}

pub fn wake(fd: &OwnedFd) {
    let v = 1u64;
    // SAFETY: writing 8 bytes from a live u64 to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), &v as *const u64 as *const libc::c_void, 8) };
}

pub fn eventfd() -> Result<OwnedFd, WireError> {
    // SAFETY: plain syscall; the descriptor is owned right away.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(WireError::Io(format!(
            "eventfd: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
