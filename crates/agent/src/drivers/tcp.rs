//! The `tcp` driver: std::net blocking sockets tuned with socket2, no runtime.
//!
//! Messages are framed with a 4-byte little-endian length.  A sender or pinger
//! opens one connection per peer (fan-out); a receiver or ponger accepts any
//! number of connections and reads them through one buffered connection set.
//! Bulk has a raw path: plain writes of `send_size` bytes (default 128 KiB) with
//! no framing, the receiver counting bytes until every connection is closed.
//!
//! Knobs: `nodelay` (default true), `mss` (TCP_MAXSEG), `send_buffer`,
//! `recv_buffer` (SO_*BUFFORCE, falling back to the capped option), `send_size`,
//! `congestion` (TCP_CONGESTION: cubic, reno, bbr, ... as the kernel names them).
//! Buffers and MSS are set before connect/listen so window scaling and the
//! advertised MSS follow them; accepted sockets inherit the listener's.

use serde::Deserialize;
use std::io::{self, IoSlice, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::sys::{self, BLOCK_TIMEOUT, FAR_NS};
use super::{
    options_error, BulkEvent, BulkReceiver, BulkSender, Driver, DriverError, Receiver, Requester,
    Responder, Sender,
};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, MAX_MESSAGE_BYTES};
use crate::signals::stop_requested;

/// Bytes per write call in bulk when `send_size` is not set (as iperf3's default).
pub const DEFAULT_SEND_SIZE: usize = 128 * 1024;
/// Read buffer per connection (grows for larger messages).
pub const READ_BUF: usize = 256 * 1024;
/// With a single connection the receiver blocks on it, but looks for new
/// connections at least this often.
pub const LISTEN_CHECK_NS: u64 = 10_000_000;
/// Pause between connection attempts while a peer is not listening yet.
pub const CONNECT_RETRY: Duration = Duration::from_millis(50);
/// Longest single connect attempt (the kernel retries the SYN within it).
pub const CONNECT_ATTEMPT_NS: u64 = 30_000_000_000;
/// SO_SNDTIMEO: a stuck write returns this often to look at signals and the timeout.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(100);
/// Linux refuses TCP_MAXSEG below this (TCP_MIN_MSS).
pub const MIN_MSS: u32 = 88;

const KNOBS: [&str; 6] = [
    "nodelay",
    "mss",
    "send_buffer",
    "recv_buffer",
    "send_size",
    "congestion",
];

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpOptions {
    #[serde(default = "yes")]
    pub nodelay: bool,
    pub mss: Option<u32>,
    pub send_buffer: Option<usize>,
    pub recv_buffer: Option<usize>,
    pub send_size: Option<usize>,
    pub congestion: Option<String>,
}

pub struct Tcp {
    opts: TcpOptions,
}

impl Tcp {
    pub fn from_config(cfg: &Config) -> Result<Tcp, ConfigError> {
        let opts: TcpOptions =
            serde_json::from_value(serde_json::Value::Object(cfg.options.clone()))
                .map_err(|e| options_error("tcp", &KNOBS, e))?;
        if let Some(m) = opts.mss {
            if !(MIN_MSS..=65_535).contains(&m) {
                return Err(ConfigError::invalid(
                    "options.mss",
                    m,
                    format!("an MSS between {MIN_MSS} and 65535 bytes"),
                ));
            }
        }
        if let Some(s) = opts.send_size {
            if s == 0 || s as u64 > MAX_MESSAGE_BYTES {
                return Err(ConfigError::invalid(
                    "options.send_size",
                    s,
                    format!("between 1 and {MAX_MESSAGE_BYTES} bytes"),
                ));
            }
        }
        Ok(Tcp { opts })
    }

    fn socket(&self, addr: &SocketAddr, listening: bool) -> Result<Socket, DriverError> {
        let s = Socket::new(
            Domain::for_address(*addr),
            Type::STREAM,
            Some(Protocol::TCP),
        )
        .map_err(|e| DriverError::io("socket for", addr, e))?;
        if listening {
            s.set_reuse_address(true)
                .map_err(|e| DriverError::io("SO_REUSEADDR on", addr, e))?;
        }
        if let Some(m) = self.opts.mss {
            s.set_mss(m)
                .map_err(|e| DriverError::io("TCP_MAXSEG on", addr, e))?;
        }
        if let Some(b) = self.opts.send_buffer {
            sys::set_buffer(&s, true, b).map_err(|e| DriverError::io("SO_SNDBUF on", addr, e))?;
        }
        if let Some(b) = self.opts.recv_buffer {
            sys::set_buffer(&s, false, b).map_err(|e| DriverError::io("SO_RCVBUF on", addr, e))?;
        }
        if let Some(cc) = &self.opts.congestion {
            sys::set_congestion(&s, cc).map_err(|e| DriverError::io("TCP_CONGESTION on", addr, e))?;
        }
        Ok(s)
    }

    /// Connect to `peer`, retrying while it refuses, until the run's timeout.
    fn connect(&self, peer: &SocketAddr, cfg: &Config) -> Result<Conn, DriverError> {
        let give_up = cfg.give_up_ns();
        loop {
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            let now = now_ns();
            if now >= give_up {
                return Err(DriverError::GaveUp {
                    what: format!("connecting to {peer}"),
                    timeout_ms: cfg.timeout_ns / 1_000_000,
                });
            }
            let s = self.socket(peer, false)?;
            // One attempt may take CONNECT_ATTEMPT_NS: the kernel retransmits the SYN by itself,
            // and on a slow link (an HF modem: 4 s each way plus turnaround) the handshake takes
            // longer than a few seconds. A new attempt would start the handshake over.
            let wait = Duration::from_nanos((give_up - now).min(CONNECT_ATTEMPT_NS));
            match s.connect_timeout(&(*peer).into(), wait) {
                Ok(()) => {
                    s.set_nonblocking(false)
                        .map_err(|e| DriverError::io("O_NONBLOCK off on", peer, e))?;
                    let stream: TcpStream = s.into();
                    return Conn::new(stream, *peer, self.opts.nodelay);
                }
                Err(e) if retryable_connect(&e) => {
                    tracing::debug!("connect to {peer}: {e}; retrying");
                    std::thread::sleep(CONNECT_RETRY);
                }
                Err(e) => return Err(DriverError::io("connect to", peer, e)),
            }
        }
    }

    fn connect_all(&self, cfg: &Config) -> Result<ConnSet, DriverError> {
        let conns = cfg
            .peers
            .iter()
            .map(|p| self.connect(p, cfg))
            .collect::<Result<Vec<_>, _>>()?;
        let local = conns
            .first()
            .and_then(|c| c.s.local_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_default();
        Ok(ConnSet::new(None, conns, local, self.opts.nodelay, cfg))
    }

    fn listen(&self, cfg: &Config) -> Result<ConnSet, DriverError> {
        let addr = cfg
            .listen
            .expect("checked by config: listening roles have `listen`");
        let s = self.socket(&addr, true)?;
        s.bind(&addr.into())
            .map_err(|e| DriverError::io("bind", addr, e))?;
        s.listen(128)
            .map_err(|e| DriverError::io("listen on", addr, e))?;
        s.set_nonblocking(true)
            .map_err(|e| DriverError::io("O_NONBLOCK on", addr, e))?;
        let l: TcpListener = s.into();
        let local = l
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| addr.to_string());
        Ok(ConnSet::new(
            Some(l),
            Vec::new(),
            local,
            self.opts.nodelay,
            cfg,
        ))
    }
}

fn retryable_connect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EAGAIN)
    )
}

impl Driver for Tcp {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_MESSAGE_BYTES as usize
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        Ok(Box::new(TcpSender {
            set: self.connect_all(cfg)?,
        }))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        Ok(Box::new(TcpReceiver {
            set: self.listen(cfg)?,
        }))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        Ok(Box::new(TcpRequester {
            set: self.connect_all(cfg)?,
        }))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        Ok(Box::new(TcpResponder {
            set: self.listen(cfg)?,
            last: None,
        }))
    }

    fn open_bulk_sender(&self, cfg: &Config) -> Result<Box<dyn BulkSender>, DriverError> {
        let mut chunk = vec![0u8; self.opts.send_size.unwrap_or(DEFAULT_SEND_SIZE)];
        crate::message::fill_payload(&mut chunk);
        Ok(Box::new(TcpBulkSender {
            set: self.connect_all(cfg)?,
            chunk,
        }))
    }

    fn open_bulk_receiver(&self, cfg: &Config) -> Result<Box<dyn BulkReceiver>, DriverError> {
        Ok(Box::new(TcpBulkReceiver {
            set: self.listen(cfg)?,
        }))
    }
}

/// One connection with its read buffer (`buf[start..end]` holds unread bytes).
struct Conn {
    s: TcpStream,
    fd: RawFd,
    peer: SocketAddr,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    open: bool,
}

impl Conn {
    fn new(s: TcpStream, peer: SocketAddr, nodelay: bool) -> Result<Conn, DriverError> {
        s.set_nodelay(nodelay)
            .map_err(|e| DriverError::io("TCP_NODELAY on", peer, e))?;
        s.set_read_timeout(Some(BLOCK_TIMEOUT))
            .map_err(|e| DriverError::io("SO_RCVTIMEO on", peer, e))?;
        s.set_write_timeout(Some(SEND_TIMEOUT))
            .map_err(|e| DriverError::io("SO_SNDTIMEO on", peer, e))?;
        Ok(Conn {
            fd: s.as_raw_fd(),
            s,
            peer,
            buf: vec![0u8; READ_BUF],
            start: 0,
            end: 0,
            open: true,
        })
    }

    fn pending_len(&self) -> Option<usize> {
        if self.end - self.start >= 4 {
            let b = &self.buf[self.start..self.start + 4];
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        } else {
            None
        }
    }

    /// A complete frame in the buffer: (offset of the message, its length).
    #[inline]
    fn frame(&self, limit: usize) -> Result<Option<(usize, usize)>, DriverError> {
        match self.pending_len() {
            Some(len) if len > limit => Err(DriverError::TooLarge { size: len, limit }),
            Some(len) if self.end - self.start >= 4 + len => Ok(Some((self.start + 4, len))),
            _ => Ok(None),
        }
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Make room for the rest of the pending frame (or a good read) at the end.
    fn make_room(&mut self, raw: bool) {
        if raw {
            return; // raw readers empty the buffer after every read
        }
        let need = 4 + self
            .pending_len()
            .unwrap_or(0)
            .min(MAX_MESSAGE_BYTES as usize);
        if self.start > 0
            && (self.buf.len() - self.start < need || self.buf.len() - self.end < READ_BUF / 4)
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
    }

    /// One read (flags 0: blocking up to BLOCK_TIMEOUT; MSG_DONTWAIT).  EOF closes.
    fn read(&mut self, flags: libc::c_int, raw: bool) -> io::Result<usize> {
        self.make_room(raw);
        let n = sys::recv_flags(self.fd, &mut self.buf[self.end..], flags)?;
        if n == 0 {
            self.open = false;
        }
        self.end += n;
        Ok(n)
    }

    /// Write `a` then `b` completely (writev, no copy), giving up on a signal or the timeout.
    fn write_parts(
        &mut self,
        a: &[u8],
        b: &[u8],
        give_up_ns: u64,
        timeout_ms: u64,
    ) -> Result<(), DriverError> {
        let total = a.len() + b.len();
        let mut off = 0;
        while off < total {
            let r = if off < a.len() {
                self.s
                    .write_vectored(&[IoSlice::new(&a[off..]), IoSlice::new(b)])
            } else {
                self.s.write(&b[off - a.len()..])
            };
            match r {
                Ok(0) => {
                    return Err(DriverError::io(
                        "write to",
                        self.peer,
                        io::ErrorKind::WriteZero.into(),
                    ))
                }
                Ok(n) => off += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    if stop_requested() {
                        return Err(DriverError::Interrupted);
                    }
                    if now_ns() >= give_up_ns {
                        return Err(DriverError::GaveUp {
                            what: format!("writing to {}", self.peer),
                            timeout_ms,
                        });
                    }
                }
                Err(e) => return Err(DriverError::io("write to", self.peer, e)),
            }
        }
        Ok(())
    }
}

/// Connections (one per peer, or accepted from a listener) read as one source.
struct ConnSet {
    listener: Option<TcpListener>,
    conns: Vec<Conn>,
    accepted: usize,
    rr: usize,
    last_full_poll: u64,
    pfds: Vec<libc::pollfd>,
    pidx: Vec<usize>,
    nodelay: bool,
    local: String,
    give_up_ns: u64,
    timeout_ms: u64,
}

impl ConnSet {
    fn new(
        listener: Option<TcpListener>,
        conns: Vec<Conn>,
        local: String,
        nodelay: bool,
        cfg: &Config,
    ) -> Self {
        ConnSet {
            listener,
            conns,
            accepted: 0,
            rr: 0,
            last_full_poll: 0,
            pfds: Vec::new(),
            pidx: Vec::new(),
            nodelay,
            local,
            give_up_ns: cfg.give_up_ns(),
            timeout_ms: cfg.timeout_ns / 1_000_000,
        }
    }

    fn peers_closed(&self) -> bool {
        self.listener.is_some() && self.accepted > 0 && self.conns.iter().all(|c| !c.open)
    }

    fn accept_all(&mut self) {
        let Some(l) = &self.listener else { return };
        loop {
            match l.accept() {
                Ok((s, peer)) => match Conn::new(s, peer, self.nodelay) {
                    Ok(c) => {
                        tracing::debug!("accepted {peer}");
                        self.conns.push(c);
                        self.accepted += 1;
                    }
                    Err(e) => tracing::warn!("dropping connection: {e}"),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("accept on {}: {e}", self.local);
                    return;
                }
            }
        }
    }

    fn closed_on_error(c: &mut Conn, e: io::Error) {
        tracing::warn!("connection from {} ended: {e}", c.peer);
        c.open = false;
    }

    /// Wait for and read more data until `deadline_ns`.  Returns false when the
    /// deadline passed (or a signal arrived) with nothing new.
    fn pump(&mut self, deadline_ns: u64, raw: bool) -> Result<bool, DriverError> {
        let now = now_ns();
        let mut open = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.open)
            .map(|(i, _)| i);
        let first = open.next();
        let single = first.is_some() && open.next().is_none();
        // Fast path: one connection, deadline far: one blocking read (SO_RCVTIMEO bounded).
        if single
            && deadline_ns > now + FAR_NS
            && (self.listener.is_none() || now < self.last_full_poll + LISTEN_CHECK_NS)
        {
            let c = &mut self.conns[first.expect("single")];
            return match c.read(0, raw) {
                Ok(_) => Ok(true),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
                Err(e) => {
                    Self::closed_on_error(c, e);
                    Ok(true)
                }
            };
        }
        if first.is_none() && self.listener.is_none() {
            return Err(DriverError::Protocol {
                addr: self.local.clone(),
                msg: "every peer closed its connection".into(),
            });
        }
        self.pfds.clear();
        self.pidx.clear();
        if let Some(l) = &self.listener {
            self.pfds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            self.pidx.push(usize::MAX);
        }
        for (i, c) in self.conns.iter().enumerate().filter(|(_, c)| c.open) {
            self.pfds.push(libc::pollfd {
                fd: c.fd,
                events: libc::POLLIN,
                revents: 0,
            });
            self.pidx.push(i);
        }
        self.last_full_poll = now;
        let ready = sys::poll_until(&mut self.pfds, deadline_ns)
            .map_err(|e| DriverError::io("poll on", &self.local, e))?;
        if ready == 0 {
            return Ok(false);
        }
        for k in 0..self.pfds.len() {
            if self.pfds[k].revents == 0 {
                continue;
            }
            let i = self.pidx[k];
            if i == usize::MAX {
                self.accept_all();
                continue;
            }
            let c = &mut self.conns[i];
            match c.read(libc::MSG_DONTWAIT, raw) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => Self::closed_on_error(c, e),
            }
        }
        Ok(true)
    }

    /// Next framed message into `out`: (length, connection index).
    fn recv_frame(
        &mut self,
        out: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        loop {
            let n = self.conns.len();
            for k in 0..n {
                let i = (self.rr + k) % n;
                let c = &mut self.conns[i];
                if let Some((off, len)) = c.frame(out.len()).map_err(|e| match e {
                    DriverError::TooLarge { size, limit } => DriverError::Protocol {
                        addr: c.peer.to_string(),
                        msg: format!(
                            "a frame of {size} bytes, larger than the {limit} bytes expected"
                        ),
                    },
                    other => other,
                })? {
                    out[..len].copy_from_slice(&c.buf[off..off + len]);
                    c.consume(4 + len);
                    self.rr = i;
                    return Ok(Some((len, i)));
                }
            }
            if !self.pump(deadline_ns, false)? {
                return Ok(None);
            }
        }
    }

    /// Raw bytes read from any connection (bulk); None at the deadline or when all closed.
    fn recv_raw(&mut self, deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        loop {
            let mut total = 0;
            for c in self.conns.iter_mut() {
                total += c.end - c.start;
                c.start = 0;
                c.end = 0;
            }
            if total > 0 {
                return Ok(Some(total));
            }
            if self.peers_closed() || !self.pump(deadline_ns, true)? {
                return Ok(None);
            }
        }
    }

    #[inline]
    fn write_frame(&mut self, i: usize, msg: &[u8]) -> Result<(), DriverError> {
        let len = (msg.len() as u32).to_le_bytes();
        let (g, t) = (self.give_up_ns, self.timeout_ms);
        self.conns[i].write_parts(&len, msg, g, t)
    }

    fn write_all_frames(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        for i in 0..self.conns.len() {
            self.write_frame(i, msg)?;
        }
        Ok(())
    }

    /// Send `end` (if any) to every connection and shut down our side.
    fn finish(&mut self, end: Option<&[u8]>) {
        for i in 0..self.conns.len() {
            if let Some(e) = end {
                if let Err(err) = self.write_frame(i, e) {
                    tracing::debug!("end marker to {}: {err}", self.conns[i].peer);
                }
            }
            let _ = self.conns[i].s.shutdown(Shutdown::Write);
        }
    }
}

pub struct TcpSender {
    set: ConnSet,
}

impl Sender for TcpSender {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        self.set.write_all_frames(msg)?;
        Ok(0)
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        self.set.finish(Some(end));
        Ok(())
    }

    fn peers(&self) -> usize {
        self.set.conns.len()
    }
}

pub struct TcpReceiver {
    set: ConnSet,
}

impl Receiver for TcpReceiver {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        Ok(self.set.recv_frame(buf, deadline_ns)?.map(|(n, _)| n))
    }

    fn local_addr(&self) -> String {
        self.set.local.clone()
    }

    fn peers_closed(&self) -> bool {
        self.set.peers_closed()
    }
}

pub struct TcpRequester {
    set: ConnSet,
}

impl Requester for TcpRequester {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        self.set.write_all_frames(msg)?;
        Ok(0)
    }

    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        self.set.recv_frame(buf, deadline_ns)
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        self.set.finish(Some(end));
        Ok(())
    }

    fn peers(&self) -> usize {
        self.set.conns.len()
    }
}

pub struct TcpResponder {
    set: ConnSet,
    last: Option<usize>,
}

impl Responder for TcpResponder {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        Ok(self.set.recv_frame(buf, deadline_ns)?.map(|(n, i)| {
            self.last = Some(i);
            n
        }))
    }

    #[inline]
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        let i = self.last.ok_or_else(|| DriverError::Protocol {
            addr: self.set.local.clone(),
            msg: "reply before any request".into(),
        })?;
        self.set.write_frame(i, msg)
    }

    fn local_addr(&self) -> String {
        self.set.local.clone()
    }

    fn peers_closed(&self) -> bool {
        self.set.peers_closed()
    }
}

pub struct TcpBulkSender {
    set: ConnSet,
    chunk: Vec<u8>,
}

impl BulkSender for TcpBulkSender {
    #[inline]
    fn send_chunk(&mut self, _seq: u64) -> Result<(usize, u32), DriverError> {
        let (g, t) = (self.set.give_up_ns, self.set.timeout_ms);
        for c in self.set.conns.iter_mut() {
            c.write_parts(&[], &self.chunk, g, t)?;
        }
        Ok((self.chunk.len(), 0))
    }

    fn finish(&mut self, _total: u64) -> Result<(), DriverError> {
        self.set.finish(None);
        // Wait (bounded) for each receiver to close, so our exit does not cut a
        // transfer still in the send queue short of its accounting.
        let until = now_ns() + 2_000_000_000;
        let mut sink = [0u8; 64];
        for c in self.set.conns.iter_mut() {
            while now_ns() < until && !stop_requested() {
                match c.s.read(&mut sink) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::Interrupted
                        ) => {}
                    Err(_) => break,
                }
            }
        }
        Ok(())
    }

    fn sequenced(&self) -> bool {
        false
    }
}

pub struct TcpBulkReceiver {
    set: ConnSet,
}

impl BulkReceiver for TcpBulkReceiver {
    #[inline]
    fn recv_chunk(&mut self, deadline_ns: u64) -> Result<BulkEvent, DriverError> {
        match self.set.recv_raw(deadline_ns)? {
            Some(n) => Ok(BulkEvent::Data {
                bytes: n,
                seq: None,
            }),
            None if self.set.peers_closed() => Ok(BulkEvent::Closed),
            None => Ok(BulkEvent::Idle),
        }
    }

    fn local_addr(&self) -> String {
        self.set.local.clone()
    }

    fn sequenced(&self) -> bool {
        false
    }
}
