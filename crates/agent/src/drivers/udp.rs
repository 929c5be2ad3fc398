//! The `udp` driver: one datagram per message, blocking sockets, no runtime.
//!
//! Knobs: `send_buffer`, `recv_buffer` (bytes, SO_*BUFFORCE with fallback).
//! Messages above 65507 bytes (the IPv4 UDP payload limit) are a configuration
//! error.  Senders use one connected socket per peer, so an absent peer's ICMP
//! refusal is reported per peer (and counted as a send error); end markers are
//! sent 5 times 10 ms apart because any one of them may be lost.
//!
//! `broadcast` (stream and bulk): the sender sends each message once, to the broadcast
//! address of its interface's subnet on the receivers' port (SO_BROADCAST), instead of a
//! copy per peer; every peer must be in that subnet and listen on that one port (the
//! runner gives a flow's receivers one port).  Receivers bind the wildcard address on
//! their port, where broadcast datagrams arrive; header, end markers and counting are
//! unchanged, so each receiver counts what reached it.

use serde::Deserialize;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

use super::sys::{self, BLOCK_TIMEOUT};
use super::{options_error, Driver, DriverError, Receiver, Requester, Responder, Sender};
use crate::config::{Config, ConfigError, Role};

/// Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP).
pub const MAX_DATAGRAM: usize = 65_507;
/// End markers are repeated this many times ...
pub const END_COPIES: u32 = 5;
/// ... this far apart.
pub const END_GAP: std::time::Duration = std::time::Duration::from_millis(10);

const KNOBS: [&str; 3] = ["send_buffer", "recv_buffer", "broadcast"];

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpOptions {
    pub send_buffer: Option<usize>,
    pub recv_buffer: Option<usize>,
    pub broadcast: Option<bool>,
}

pub struct Udp {
    opts: UdpOptions,
}

impl Udp {
    pub fn from_config(cfg: &Config) -> Result<Udp, ConfigError> {
        let opts: UdpOptions =
            serde_json::from_value(serde_json::Value::Object(cfg.options.clone()))
                .map_err(|e| options_error("udp", &KNOBS, e))?;
        if opts.broadcast == Some(true) && matches!(cfg.role, Role::Pinger | Role::Ponger) {
            return Err(ConfigError::invalid(
                "options.broadcast",
                "true",
                "false for pattern ping / ramp (broadcast is for stream and bulk senders)",
            ));
        }
        Ok(Udp { opts })
    }

    fn broadcast(&self) -> bool {
        self.opts.broadcast == Some(true)
    }

    fn socket(&self, addr: &SocketAddr) -> Result<Socket, DriverError> {
        let s = Socket::new(Domain::for_address(*addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| DriverError::io("socket for", addr, e))?;
        if let Some(b) = self.opts.send_buffer {
            sys::set_buffer(&s, true, b).map_err(|e| DriverError::io("SO_SNDBUF for", addr, e))?;
        }
        if let Some(b) = self.opts.recv_buffer {
            sys::set_buffer(&s, false, b).map_err(|e| DriverError::io("SO_RCVBUF for", addr, e))?;
        }
        Ok(s)
    }

    fn bound(&self, cfg: &Config) -> Result<(UdpSocket, String), DriverError> {
        let listen = cfg
            .listen
            .expect("checked by config: listening roles have `listen`");
        // Broadcast datagrams reach a socket bound to the wildcard address, not to a unicast one.
        let addr = if self.broadcast() && listen.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], listen.port()))
        } else {
            listen
        };
        let s = self.socket(&addr)?;
        s.bind(&addr.into())
            .map_err(|e| DriverError::io("bind", addr, e))?;
        let sock: UdpSocket = s.into();
        sock.set_read_timeout(Some(BLOCK_TIMEOUT))
            .map_err(|e| DriverError::io("SO_RCVTIMEO on", addr, e))?;
        let local = if addr != listen {
            listen.to_string()
        } else {
            sock.local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| addr.to_string())
        };
        Ok((sock, local))
    }

    /// A receiver bound as `open_receiver` binds (`listen`; the wildcard on its port for
    /// broadcast).  `source` Some: `recv` ignores datagrams from any other address (a receiver
    /// with the `source` key); None: it takes every datagram (a host's shared receiver passes
    /// None and demultiplexes by `recv_from`'s source itself, crate::host).
    pub fn open_udp_receiver(
        &self,
        cfg: &Config,
        source: Option<IpAddr>,
    ) -> Result<UdpReceiver, DriverError> {
        let (sock, local) = self.bound(cfg)?;
        Ok(UdpReceiver {
            fd: sock.as_raw_fd(),
            sock,
            local,
            source: source.map(|ip| ip.to_canonical()),
            ignored: 0,
        })
    }

    fn connected(&self, peer: &SocketAddr) -> Result<UdpSocket, DriverError> {
        let s = self.socket(peer)?;
        s.connect(&(*peer).into())
            .map_err(|e| DriverError::io("connect", peer, e))?;
        let sock: UdpSocket = s.into();
        sock.set_read_timeout(Some(BLOCK_TIMEOUT))
            .map_err(|e| DriverError::io("SO_RCVTIMEO on", peer, e))?;
        Ok(sock)
    }
}

impl Driver for Udp {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_DATAGRAM
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        if self.broadcast() {
            let to = broadcast_address(&cfg.peers)?;
            let s = self.socket(&to)?;
            s.set_broadcast(true)
                .map_err(|e| DriverError::io("SO_BROADCAST for", to, e))?;
            s.connect(&to.into())
                .map_err(|e| DriverError::io("connect", to, e))?;
            tracing::info!("udp: broadcast to {to} for {} receivers", cfg.peers.len());
            return Ok(Box::new(UdpSender {
                socks: vec![(s.into(), to)],
                copies: cfg.peers.len() as u32,
            }));
        }
        let socks = cfg
            .peers
            .iter()
            .map(|p| Ok((self.connected(p)?, *p)))
            .collect::<Result<Vec<_>, DriverError>>()?;
        Ok(Box::new(UdpSender { socks, copies: 1 }))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        Ok(Box::new(self.open_udp_receiver(cfg, cfg.source)?))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        // One peer: a connected socket (kernel filters other sources, reports refusals).
        // Several: one unconnected socket, replies matched to peers by source address.
        let sock = if cfg.peers.len() == 1 {
            self.connected(&cfg.peers[0])?
        } else {
            let any: SocketAddr = if cfg.peers[0].is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            }
            .parse()
            .expect("literal");
            let s = self.socket(&any)?;
            s.bind(&any.into())
                .map_err(|e| DriverError::io("bind", any, e))?;
            let sock: UdpSocket = s.into();
            sock.set_read_timeout(Some(BLOCK_TIMEOUT))
                .map_err(|e| DriverError::io("SO_RCVTIMEO on", any, e))?;
            sock
        };
        Ok(Box::new(UdpRequester {
            fd: sock.as_raw_fd(),
            sock,
            peers: cfg.peers.clone(),
            refused: 0,
        }))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        let (sock, local) = self.bound(cfg)?;
        Ok(Box::new(UdpResponder {
            fd: sock.as_raw_fd(),
            sock,
            local,
            last: None,
        }))
    }
}

fn too_large(n: usize, limit: usize) -> DriverError {
    DriverError::TooLarge { size: n, limit }
}

/// The broadcast address (on the peers' port) of the subnet of the interface that reaches
/// `peers[0]`; every peer must be in that subnet and on that port.
fn broadcast_address(peers: &[SocketAddr]) -> Result<SocketAddr, DriverError> {
    let bad = |addr: &SocketAddr, msg: String| DriverError::Protocol {
        addr: addr.to_string(),
        msg,
    };
    let first = peers[0];
    if !first.is_ipv4() {
        return Err(bad(&first, "broadcast needs IPv4 peers".into()));
    }
    let probe = UdpSocket::bind("0.0.0.0:0").map_err(|e| DriverError::io("bind", first, e))?;
    probe
        .connect(first)
        .map_err(|e| DriverError::io("connect", first, e))?;
    let local = match probe.local_addr() {
        Ok(SocketAddr::V4(a)) => *a.ip(),
        _ => return Err(bad(&first, "no IPv4 address towards it".into())),
    };
    let mask = netmask_of(local).ok_or_else(|| {
        bad(
            &first,
            format!("no interface with address {local} (for its netmask)"),
        )
    })?;
    let net = u32::from(local) & mask;
    for p in peers {
        let in_net = matches!(p.ip(), std::net::IpAddr::V4(a) if u32::from(a) & mask == net);
        if !in_net || p.port() != first.port() {
            return Err(bad(
                p,
                format!(
                    "broadcast needs every receiver in the sender's subnet {}/{} on one port ({}); this one is not",
                    std::net::Ipv4Addr::from(net),
                    mask.count_ones(),
                    first.port()
                ),
            ));
        }
    }
    Ok(SocketAddr::from((
        std::net::Ipv4Addr::from(net | !mask),
        first.port(),
    )))
}

/// The netmask (host order) of the interface holding IPv4 address `ip`.
fn netmask_of(ip: std::net::Ipv4Addr) -> Option<u32> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below by freeifaddrs; the loop only
    // reads entries whose address pointers are non-null and of family AF_INET (sockaddr_in).
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return None;
        }
        let mut found = None;
        let mut cur = head;
        while !cur.is_null() {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null()
                && !ifa.ifa_netmask.is_null()
                && (*ifa.ifa_addr).sa_family as i32 == libc::AF_INET
            {
                let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                if u32::from_be(a.sin_addr.s_addr) == u32::from(ip) {
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                    found = Some(u32::from_be(m.sin_addr.s_addr));
                    break;
                }
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
        found
    }
}

pub struct UdpSender {
    socks: Vec<(UdpSocket, SocketAddr)>,
    /// Receivers each datagram stands for: 1 per socket, or every peer with one broadcast socket.
    copies: u32,
}

impl Sender for UdpSender {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        let mut failed = 0;
        for (s, addr) in &self.socks {
            match s.send(msg) {
                Ok(_) => {}
                Err(e) if sys::is_soft_send_error(&e) => failed += self.copies,
                Err(e) => return Err(DriverError::io("send to", addr, e)),
            }
        }
        Ok(failed)
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        for k in 0..END_COPIES {
            for (s, addr) in &self.socks {
                if let Err(e) = s.send(end) {
                    tracing::debug!("end marker to {addr}: {e}");
                }
            }
            if k + 1 < END_COPIES {
                std::thread::sleep(END_GAP);
            }
        }
        Ok(())
    }

    fn peers(&self) -> usize {
        self.socks.len() * self.copies as usize
    }
}

pub struct UdpReceiver {
    sock: UdpSocket,
    fd: RawFd,
    local: String,
    /// Only datagrams from this address are received (None: any); canonical (IPv4-mapped
    /// IPv6 addresses as IPv4).
    source: Option<IpAddr>,
    /// Datagrams from other addresses, ignored (with `source`).
    ignored: u64,
}

impl UdpReceiver {
    /// The next datagram into `buf` with the address it came from, or `Ok(None)` when
    /// `deadline_ns` passes first.  The length is the datagram's own (MSG_TRUNC): one above
    /// `buf.len()` means it did not fit (only `buf.len()` bytes were copied); the caller decides
    /// whose error that is.  No `source` filtering: the caller demultiplexes.
    #[inline]
    pub fn recv_from(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, SocketAddr)>, DriverError> {
        let fd = self.fd;
        sys::recv_with_deadline(fd, deadline_ns, |flags| {
            sys::recv_from_flags(fd, buf, flags | libc::MSG_TRUNC)
        })
        .map_err(|e| DriverError::io("recv on", &self.local, e))
    }

    /// Datagrams ignored so far because they came from another address than `source`.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }
}

impl Receiver for UdpReceiver {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        let fd = self.fd;
        let Some(want) = self.source else {
            let r = sys::recv_with_deadline(fd, deadline_ns, |flags| {
                sys::recv_flags(fd, buf, flags | libc::MSG_TRUNC)
            })
            .map_err(|e| DriverError::io("recv on", &self.local, e))?;
            return match r {
                Some(n) if n > buf.len() => Err(too_large(n, buf.len())),
                other => Ok(other),
            };
        };
        loop {
            match self.recv_from(buf, deadline_ns)? {
                None => return Ok(None),
                Some((n, src)) if src.ip().to_canonical() == want => {
                    return if n > buf.len() {
                        Err(too_large(n, buf.len()))
                    } else {
                        Ok(Some(n))
                    };
                }
                Some((_, src)) => {
                    // Not this flow's sender: not counted at all (not even as a bad message).
                    if self.ignored == 0 {
                        tracing::warn!(
                            "udp {}: ignoring datagrams from {src} (this receiver takes those from {want} only)",
                            self.local
                        );
                    }
                    self.ignored += 1;
                    // A stream of strangers' datagrams must not hold the caller past its deadline.
                    if crate::clock::now_ns() >= deadline_ns {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> String {
        let _ = &self.sock;
        self.local.clone()
    }

    fn extra_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        if self.ignored > 0 {
            tracing::warn!(
                "udp {}: {} datagrams in all from addresses other than the source were ignored",
                self.local,
                self.ignored
            );
        }
        serde_json::Map::new()
    }
}

pub struct UdpRequester {
    sock: UdpSocket,
    fd: RawFd,
    peers: Vec<SocketAddr>,
    refused: u64,
}

impl Requester for UdpRequester {
    #[inline]
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        let mut failed = 0;
        if self.peers.len() == 1 {
            match self.sock.send(msg) {
                Ok(_) => {}
                Err(e) if sys::is_soft_send_error(&e) => failed += 1,
                Err(e) => return Err(DriverError::io("send to", self.peers[0], e)),
            }
        } else {
            for p in &self.peers {
                match self.sock.send_to(msg, p) {
                    Ok(_) => {}
                    Err(e) if sys::is_soft_send_error(&e) => failed += 1,
                    Err(e) => return Err(DriverError::io("send to", p, e)),
                }
            }
        }
        Ok(failed)
    }

    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        let fd = self.fd;
        loop {
            let r = if self.peers.len() == 1 {
                sys::recv_with_deadline(fd, deadline_ns, |flags| {
                    sys::recv_flags(fd, buf, flags | libc::MSG_TRUNC).map(|n| (n, 0))
                })
            } else {
                let peers = &self.peers;
                sys::recv_with_deadline(fd, deadline_ns, |flags| {
                    let (n, src) = sys::recv_from_flags(fd, buf, flags | libc::MSG_TRUNC)?;
                    Ok((
                        n,
                        peers.iter().position(|p| *p == src).unwrap_or(usize::MAX),
                    ))
                })
            };
            match r {
                Ok(Some((n, _))) if n > buf.len() => return Err(too_large(n, buf.len())),
                Ok(Some((_, usize::MAX))) => continue, // a datagram from a stranger: ignore
                Ok(other) => return Ok(other),
                // An ICMP refusal from an absent ponger: the request is lost, not the run.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    self.refused += 1;
                    if crate::clock::now_ns() >= deadline_ns {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(DriverError::io("recv on", self.peers[0], e)),
            }
        }
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        for k in 0..END_COPIES {
            let _ = self.send(end);
            if k + 1 < END_COPIES {
                std::thread::sleep(END_GAP);
            }
        }
        if self.refused > 0 {
            tracing::info!("{} ICMP refusals while waiting for replies", self.refused);
        }
        Ok(())
    }

    fn peers(&self) -> usize {
        self.peers.len()
    }
}

pub struct UdpResponder {
    sock: UdpSocket,
    fd: RawFd,
    local: String,
    last: Option<SocketAddr>,
}

impl Responder for UdpResponder {
    #[inline]
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        let fd = self.fd;
        let r = sys::recv_with_deadline(fd, deadline_ns, |flags| {
            sys::recv_from_flags(fd, buf, flags | libc::MSG_TRUNC)
        })
        .map_err(|e| DriverError::io("recv on", &self.local, e))?;
        match r {
            Some((n, _)) if n > buf.len() => Err(too_large(n, buf.len())),
            Some((n, src)) => {
                self.last = Some(src);
                Ok(Some(n))
            }
            None => Ok(None),
        }
    }

    #[inline]
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        let to = self.last.ok_or_else(|| DriverError::Protocol {
            addr: self.local.clone(),
            msg: "reply before any request".into(),
        })?;
        self.sock
            .send_to(msg, to)
            .map(|_| ())
            .map_err(|e| DriverError::io("send to", to, e))
    }

    fn local_addr(&self) -> String {
        self.local.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(v: serde_json::Value) -> Config {
        let mut base = serde_json::json!({"v":1,"protocol":"udp","pattern":"stream",
            "payload_bytes":64,"messages":10,"options":{"broadcast":true}});
        for (k, x) in v.as_object().unwrap() {
            base[k] = x.clone();
        }
        Config::parse(&base.to_string()).unwrap()
    }

    #[test]
    fn broadcast_address_is_the_subnets_on_the_peers_port() {
        let peers: Vec<SocketAddr> = vec![
            "127.0.0.5:40000".parse().unwrap(),
            "127.0.0.9:40000".parse().unwrap(),
        ];
        // Loopback is 127.0.0.1/8.
        assert_eq!(
            broadcast_address(&peers).unwrap(),
            "127.255.255.255:40000".parse().unwrap()
        );
        let ports: Vec<SocketAddr> = vec![
            "127.0.0.5:40000".parse().unwrap(),
            "127.0.0.9:40001".parse().unwrap(),
        ];
        let e = broadcast_address(&ports).unwrap_err().to_string();
        assert!(
            e.contains("one port") && e.contains("127.0.0.9:40001"),
            "{e}"
        );
    }

    #[test]
    fn a_broadcast_datagram_reaches_a_receiver_bound_to_its_unicast_listen_address() {
        // The receiver's `listen` names one address; in broadcast mode it binds the wildcard, so the
        // sender's single datagram to 127.255.255.255 reaches it, counted as one send for two peers.
        let port = {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        };
        let rx_cfg =
            cfg(serde_json::json!({"role":"receiver","listen":format!("127.0.0.7:{port}")}));
        let udp = Udp::from_config(&rx_cfg).unwrap();
        let mut rx = udp.open_receiver(&rx_cfg).unwrap();
        assert_eq!(rx.local_addr(), format!("127.0.0.7:{port}"));
        let tx_cfg = cfg(serde_json::json!({"role":"sender",
            "peers":[format!("127.0.0.7:{port}"), format!("127.0.0.8:{port}")]}));
        let mut tx = Udp::from_config(&tx_cfg)
            .unwrap()
            .open_sender(&tx_cfg)
            .unwrap();
        assert_eq!(tx.peers(), 2);
        assert_eq!(tx.send(b"hello broadcast").unwrap(), 0);
        let mut buf = [0u8; 64];
        let deadline = crate::clock::now_ns() + 2_000_000_000;
        assert_eq!(rx.recv(&mut buf, deadline).unwrap(), Some(15));
        assert_eq!(&buf[..15], b"hello broadcast");
    }

    #[test]
    fn broadcast_is_refused_for_ping() {
        let v = serde_json::json!({"v":1,"protocol":"udp","pattern":"ping","role":"pinger",
            "peers":["127.0.0.1:9"],"payload_bytes":64,"messages":10,"options":{"broadcast":true}});
        let c = Config::parse(&v.to_string()).unwrap();
        let e = Udp::from_config(&c).err().expect("refused").to_string();
        assert!(e.contains("broadcast"), "{e}");
    }
}
