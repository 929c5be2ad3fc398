//! The `zmq` driver: ZeroMQ (libzmq through the `zmq` crate), transport tcp.
//!
//! * stream / bulk: the receiver's SUB socket binds `tcp://<listen>` and
//!   subscribes to everything; the sender's XPUB socket connects to every peer.
//!   The slow-joiner problem is handled as ZeroMQ's guide says: the XPUB
//!   (`ZMQ_XPUB_VERBOSE`) reads one subscription message per subscriber and the
//!   sender sends nothing until it has one from each peer.  `ZMQ_XPUB_NODROP`
//!   makes a full pipe (high-water mark reached) block the sender instead of
//!   dropping, so PUB/SUB over TCP is lossless as TCP is: back-pressure, not loss.
//! * ping / ramp: the ponger's ROUTER binds `listen`; the pinger has one DEALER per
//!   peer and sends REQ-style envelopes (an empty delimiter frame, then the
//!   message), so a plain REQ client is answered too.  The ponger echoes the
//!   envelope it received.
//!
//! Knobs: `sndhwm`, `rcvhwm` (messages, libzmq's default 1000), `transport`
//! (`tcp`).  Receives try a non-blocking receive, then block in libzmq with
//! ZMQ_RCVTIMEO (milliseconds, rounded up; zmq_poll for a pinger with several
//! pongers); `recv_into` copies into the pattern's buffer.

use std::net::SocketAddr;

use serde::Deserialize;

use super::{options_error, Driver, DriverError, Receiver, Requester, Responder, Sender};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError};
use crate::signals::stop_requested;

const KNOBS: [&str; 3] = ["sndhwm", "rcvhwm", "transport"];
pub const MAX_MESSAGE: usize = 64 << 20;
/// Linger on close: queued messages (the end marker) get this long to leave.
const LINGER_MS: i32 = 5_000;
/// A blocked send re-checks signals and the give-up time this often.
const SEND_SLICE_MS: i32 = 50;
/// Largest routing identity ROUTER hands us (libzmq: at most 255 bytes).
const MAX_IDENTITY: usize = 256;

extern "C" {
    fn zmq_setsockopt(
        s: *mut std::ffi::c_void,
        option: std::ffi::c_int,
        optval: *const std::ffi::c_void,
        optvallen: usize,
    ) -> std::ffi::c_int;
}
const ZMQ_XPUB_NODROP: std::ffi::c_int = 69;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZmqOptions {
    pub sndhwm: Option<i32>,
    pub rcvhwm: Option<i32>,
    pub transport: Option<String>,
}

pub struct Zmq {
    opts: ZmqOptions,
    ctx: zmq::Context,
}

fn zerr(op: &'static str, addr: impl std::fmt::Display, e: zmq::Error) -> DriverError {
    DriverError::io(op, addr, std::io::Error::from_raw_os_error(e.to_raw()))
}

fn endpoint(a: &SocketAddr) -> String {
    format!("tcp://{a}")
}

impl Zmq {
    pub fn from_config(cfg: &Config) -> Result<Zmq, ConfigError> {
        super::require_endpoints(cfg)?;
        let opts: ZmqOptions =
            serde_json::from_value(serde_json::Value::Object(cfg.options.clone()))
                .map_err(|e| options_error("zmq", &KNOBS, e))?;
        if let Some(t) = &opts.transport {
            if t != "tcp" {
                return Err(ConfigError::invalid(
                    "options.transport",
                    format!("{t:?}"),
                    "\"tcp\" for protocol zmq",
                ));
            }
        }
        for (k, v) in [("sndhwm", opts.sndhwm), ("rcvhwm", opts.rcvhwm)] {
            if let Some(v) = v {
                if v < 0 {
                    return Err(ConfigError::invalid(
                        format!("options.{k}"),
                        v,
                        "a message count >= 0 for protocol zmq (0 = no limit)",
                    ));
                }
            }
        }
        Ok(Zmq {
            opts,
            ctx: zmq::Context::new(),
        })
    }

    fn socket(&self, kind: zmq::SocketType, addr: &str) -> Result<zmq::Socket, DriverError> {
        let s = self
            .ctx
            .socket(kind)
            .map_err(|e| zerr("zmq socket for", addr, e))?;
        if let Some(h) = self.opts.sndhwm {
            s.set_sndhwm(h)
                .map_err(|e| zerr("ZMQ_SNDHWM on", addr, e))?;
        }
        if let Some(h) = self.opts.rcvhwm {
            s.set_rcvhwm(h)
                .map_err(|e| zerr("ZMQ_RCVHWM on", addr, e))?;
        }
        s.set_linger(LINGER_MS)
            .map_err(|e| zerr("ZMQ_LINGER on", addr, e))?;
        s.set_sndtimeo(SEND_SLICE_MS)
            .map_err(|e| zerr("ZMQ_SNDTIMEO on", addr, e))?;
        Ok(s)
    }

    fn bound(
        &self,
        kind: zmq::SocketType,
        cfg: &Config,
    ) -> Result<(zmq::Socket, String), DriverError> {
        let listen = cfg.listen.expect("checked: listening roles have `listen`");
        let ep = endpoint(&listen);
        let s = self.socket(kind, &ep)?;
        s.bind(&ep).map_err(|e| zerr("bind", &ep, e))?;
        let local = s
            .get_last_endpoint()
            .ok()
            .and_then(|r| r.ok())
            .map(|e| e.trim_start_matches("tcp://").to_string())
            .unwrap_or_else(|| listen.to_string());
        Ok((s, local))
    }
}

/// Poll `items` until one is readable or `deadline_ns` passes; true when readable.
fn poll_until(
    items: &mut [zmq::PollItem],
    deadline_ns: u64,
    what: &str,
) -> Result<bool, DriverError> {
    let left = deadline_ns.saturating_sub(now_ns());
    let ms = left.div_ceil(1_000_000) as i64;
    match zmq::poll(items, ms) {
        Ok(n) => Ok(n > 0),
        Err(zmq::Error::EINTR) => Ok(false),
        Err(e) => Err(zerr("zmq_poll on", what, e)),
    }
}

/// One non-blocking receive into `buf`: Some(len), None when nothing is queued.
#[inline]
fn try_recv(s: &zmq::Socket, buf: &mut [u8], what: &str) -> Result<Option<usize>, DriverError> {
    match s.recv_into(buf, zmq::DONTWAIT) {
        Ok(n) if n > buf.len() => Err(DriverError::TooLarge {
            size: n,
            limit: buf.len(),
        }),
        Ok(n) => Ok(Some(n)),
        Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => Ok(None),
        Err(e) => Err(zerr("zmq recv on", what, e)),
    }
}

/// Receive one frame, waiting until `deadline_ns`: a non-blocking attempt, then
/// a blocking receive with ZMQ_RCVTIMEO set to the time left (rounded up to a
/// millisecond; setting it is a libzmq field store, no system call).  This is
/// libzmq's own blocking path, one wake-up less than zmq_poll + receive.
fn recv_deadline(
    s: &zmq::Socket,
    buf: &mut [u8],
    deadline_ns: u64,
    what: &str,
) -> Result<Option<usize>, DriverError> {
    if let Some(n) = try_recv(s, buf, what)? {
        return Ok(Some(n));
    }
    loop {
        let left = deadline_ns.saturating_sub(now_ns());
        if left == 0 {
            return Ok(None);
        }
        let ms = left.div_ceil(1_000_000).min(i32::MAX as u64) as i32;
        s.set_rcvtimeo(ms)
            .map_err(|e| zerr("ZMQ_RCVTIMEO on", what, e))?;
        match s.recv_into(buf, 0) {
            Ok(n) if n > buf.len() => {
                return Err(DriverError::TooLarge {
                    size: n,
                    limit: buf.len(),
                })
            }
            Ok(n) => return Ok(Some(n)),
            Err(zmq::Error::EAGAIN) => return Ok(None),
            Err(zmq::Error::EINTR) => {
                if now_ns() >= deadline_ns {
                    return Ok(None);
                }
            }
            Err(e) => return Err(zerr("zmq recv on", what, e)),
        }
    }
}

/// Send one frame, blocking (back-pressure) until it is queued; gives up on a
/// signal or at `give_up_ns`.
#[inline]
fn send_blocking(
    s: &zmq::Socket,
    msg: &[u8],
    flags: i32,
    give_up_ns: u64,
    timeout_ms: u64,
    what: &str,
) -> Result<(), DriverError> {
    loop {
        match s.send(msg, flags) {
            Ok(()) => return Ok(()),
            Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => {
                if stop_requested() {
                    return Err(DriverError::Interrupted);
                }
                if now_ns() >= give_up_ns {
                    return Err(DriverError::GaveUp {
                        what: format!("sending to {what} (high-water mark reached)"),
                        timeout_ms,
                    });
                }
            }
            Err(e) => return Err(zerr("zmq send to", what, e)),
        }
    }
}

impl Driver for Zmq {
    fn name(&self) -> &'static str {
        "zmq"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_MESSAGE
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        let what = cfg.peers.iter().map(endpoint).collect::<Vec<_>>().join(",");
        let mut s = self.socket(zmq::XPUB, &what)?;
        s.set_xpub_verbose(true)
            .map_err(|e| zerr("ZMQ_XPUB_VERBOSE on", &what, e))?;
        let one: std::ffi::c_int = 1;
        // SAFETY: a live socket, an int option of the documented size.
        let rc = unsafe {
            zmq_setsockopt(
                s.as_mut_ptr(),
                ZMQ_XPUB_NODROP,
                &one as *const _ as *const std::ffi::c_void,
                std::mem::size_of::<std::ffi::c_int>(),
            )
        };
        if rc != 0 {
            return Err(DriverError::io(
                "ZMQ_XPUB_NODROP on",
                &what,
                std::io::Error::last_os_error(),
            ));
        }
        for p in &cfg.peers {
            s.connect(&endpoint(p))
                .map_err(|e| zerr("connect", endpoint(p), e))?;
        }
        // Slow joiners: wait for one subscription from each peer.
        let mut subs = 0usize;
        let mut frame = [0u8; 256];
        let give_up = cfg.give_up_ns();
        while subs < cfg.peers.len() {
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= give_up {
                return Err(DriverError::GaveUp {
                    what: format!(
                        "waiting for subscriptions from every peer ({subs} of {} arrived)",
                        cfg.peers.len()
                    ),
                    timeout_ms: cfg.timeout_ns / 1_000_000,
                });
            }
            let deadline = (now_ns() + 50_000_000).min(give_up);
            if let Some(n) = recv_deadline(&s, &mut frame, deadline, &what)? {
                if n >= 1 && frame[0] == 1 {
                    subs += 1;
                }
            }
        }
        Ok(Box::new(ZmqSender {
            s,
            what,
            peers: cfg.peers.len(),
            give_up,
            timeout_ms: cfg.timeout_ns / 1_000_000,
        }))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        let (s, local) = self.bound(zmq::SUB, cfg)?;
        s.set_subscribe(b"")
            .map_err(|e| zerr("ZMQ_SUBSCRIBE on", &local, e))?;
        Ok(Box::new(ZmqReceiver { s, local }))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        let socks = cfg
            .peers
            .iter()
            .map(|p| {
                let ep = endpoint(p);
                let s = self.socket(zmq::DEALER, &ep)?;
                s.connect(&ep).map_err(|e| zerr("connect", &ep, e))?;
                Ok((s, ep))
            })
            .collect::<Result<Vec<_>, DriverError>>()?;
        Ok(Box::new(ZmqRequester {
            socks,
            next: 0,
            give_up: cfg.give_up_ns(),
            timeout_ms: cfg.timeout_ns / 1_000_000,
        }))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        let (s, local) = self.bound(zmq::ROUTER, cfg)?;
        Ok(Box::new(ZmqResponder {
            s,
            local,
            envelope: [[0u8; MAX_IDENTITY]; 4],
            env_len: [0; 4],
            env_frames: 0,
            give_up: cfg.give_up_ns(),
            timeout_ms: cfg.timeout_ns / 1_000_000,
        }))
    }
}

pub struct ZmqSender {
    s: zmq::Socket,
    what: String,
    peers: usize,
    give_up: u64,
    timeout_ms: u64,
}

impl Sender for ZmqSender {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        send_blocking(&self.s, msg, 0, self.give_up, self.timeout_ms, &self.what)?;
        Ok(0)
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        // TCP underneath: one end marker; ZMQ_LINGER lets it leave on close.
        send_blocking(&self.s, end, 0, self.give_up, self.timeout_ms, &self.what)
    }

    fn peers(&self) -> usize {
        self.peers
    }
}

pub struct ZmqReceiver {
    s: zmq::Socket,
    local: String,
}

impl Receiver for ZmqReceiver {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        recv_deadline(&self.s, buf, deadline_ns, &self.local)
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

pub struct ZmqRequester {
    socks: Vec<(zmq::Socket, String)>,
    /// Where the next poll starts (fairness between peers).
    next: usize,
    give_up: u64,
    timeout_ms: u64,
}

impl ZmqRequester {
    /// A reply from peer `i`: skip the envelope (frames up to the empty delimiter).
    fn take(&self, i: usize, buf: &mut [u8]) -> Result<Option<usize>, DriverError> {
        let (s, ep) = &self.socks[i];
        let Some(mut n) = try_recv(s, buf, ep)? else {
            return Ok(None);
        };
        while s.get_rcvmore().unwrap_or(false) {
            n = match s.recv_into(buf, 0) {
                Ok(n) if n > buf.len() => {
                    return Err(DriverError::TooLarge {
                        size: n,
                        limit: buf.len(),
                    })
                }
                Ok(n) => n,
                Err(e) => return Err(zerr("zmq recv on", ep, e)),
            };
        }
        Ok(Some(n))
    }
}

impl Requester for ZmqRequester {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        for (s, ep) in &self.socks {
            send_blocking(s, b"", zmq::SNDMORE, self.give_up, self.timeout_ms, ep)?;
            send_blocking(s, msg, 0, self.give_up, self.timeout_ms, ep)?;
        }
        Ok(0)
    }

    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        let k = self.socks.len();
        loop {
            for j in 0..k {
                let i = (self.next + j) % k;
                if let Some(n) = self.take(i, buf)? {
                    self.next = (i + 1) % k;
                    return Ok(Some((n, i)));
                }
            }
            if now_ns() >= deadline_ns {
                return Ok(None);
            }
            let mut items: Vec<zmq::PollItem> = Vec::new();
            if k == 1 {
                // One ponger: block in libzmq's receive (the delimiter frame), then the body.
                let (s, ep) = &self.socks[0];
                let Some(mut n) = recv_deadline(s, buf, deadline_ns, ep)? else {
                    return Ok(None);
                };
                while s.get_rcvmore().unwrap_or(false) {
                    n = match s.recv_into(buf, 0) {
                        Ok(n) if n > buf.len() => {
                            return Err(DriverError::TooLarge {
                                size: n,
                                limit: buf.len(),
                            })
                        }
                        Ok(n) => n,
                        Err(e) => return Err(zerr("zmq recv on", ep, e)),
                    };
                }
                return Ok(Some((n, 0)));
            } else {
                // Several peers (fan-out ping): one poll over all sockets.
                items.extend(self.socks.iter().map(|(s, _)| s.as_poll_item(zmq::POLLIN)));
                poll_until(&mut items, deadline_ns, "zmq pongers")?;
            }
        }
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        self.send(end).map(|_| ())
    }

    fn peers(&self) -> usize {
        self.socks.len()
    }
}

pub struct ZmqResponder {
    s: zmq::Socket,
    local: String,
    /// Envelope of the last request (routing id, then the empty delimiter of a
    /// REQ-style peer), kept in fixed buffers for the reply.
    envelope: [[u8; MAX_IDENTITY]; 4],
    env_len: [usize; 4],
    env_frames: usize,
    give_up: u64,
    timeout_ms: u64,
}

impl Responder for ZmqResponder {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        // First frame: the routing id ROUTER prepends.
        let Some(n) = recv_deadline(&self.s, &mut self.envelope[0], deadline_ns, &self.local)?
        else {
            return Ok(None);
        };
        self.env_len[0] = n.min(MAX_IDENTITY);
        self.env_frames = 1;
        // Then envelope frames up to and including an empty delimiter, then the body.
        loop {
            if !self.s.get_rcvmore().unwrap_or(false) {
                return Err(DriverError::Protocol {
                    addr: self.local.clone(),
                    msg: "a request without a body frame".into(),
                });
            }
            let n = self
                .s
                .recv_into(buf, 0)
                .map_err(|e| zerr("zmq recv on", &self.local, e))?;
            if n > buf.len() {
                return Err(DriverError::TooLarge {
                    size: n,
                    limit: buf.len(),
                });
            }
            let more = self.s.get_rcvmore().unwrap_or(false);
            if !more {
                return Ok(Some(n));
            }
            if self.env_frames < self.envelope.len() && n <= MAX_IDENTITY {
                let f = self.env_frames;
                self.envelope[f][..n].copy_from_slice(&buf[..n]);
                self.env_len[f] = n;
                self.env_frames += 1;
            }
        }
    }

    #[inline]
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        for f in 0..self.env_frames {
            let frame = &self.envelope[f][..self.env_len[f]];
            send_blocking(
                &self.s,
                frame,
                zmq::SNDMORE,
                self.give_up,
                self.timeout_ms,
                &self.local,
            )?;
        }
        send_blocking(&self.s, msg, 0, self.give_up, self.timeout_ms, &self.local)
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}
