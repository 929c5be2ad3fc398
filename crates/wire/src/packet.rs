//! AF_PACKET sockets bound to one interface each: open (promiscuous, own sends ignored), receive frames in
//! batches (recvmmsg) into pooled buffers with optional kernel RX timestamps, send frames in batches
//! (sendmmsg), and read the kernel's drop counter. It knows nothing about impairments or scheduling.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::errors::WireError;

/// Frames per recvmmsg/sendmmsg call (MEASUREMENTS.md: batching of 64 was the change that mattered).
pub const BATCH: usize = 64;
/// Room for an Ethernet header and one VLAN tag beyond the interface MTU.
const L2_HEADER_ROOM: usize = 18;
/// Largest frame a receive buffer is ever sized for (GSO is off on roughnet's veths).
pub const MAX_FRAME: usize = 65_536 + L2_HEADER_ROOM;
/// Smallest receive buffer, so that a tiny MTU still holds a full minimum-size Ethernet frame.
const MIN_FRAME: usize = 1_536;
/// Kernel receive buffer asked for with SO_RCVBUFFORCE (absorbs bursts while the loop is busy).
const RCVBUF_BYTES: libc::c_int = 16 << 20;
/// Kernel send buffer asked for with SO_SNDBUFFORCE.
const SNDBUF_BYTES: libc::c_int = 8 << 20;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, since Linux 4.20); not in every libc crate version.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Size of the control buffer for one frame's SO_TIMESTAMPNS message.
const CMSG_SPACE: usize = 64;

/// One AF_PACKET socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    pub ifname: String,
    pub ifindex: i32,
    pub mtu: usize,
    /// Bytes each receive buffer holds: MTU plus L2 header room.
    pub frame_room: usize,
    pub rx_timestamps: bool,
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passing a pointer to a live c_int and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// The MTU of `ifname` (SIOCGIFMTU) via the given socket.
fn interface_mtu(fd: RawFd, ifname: &str) -> io::Result<usize> {
    // SAFETY: ifreq is plain old data; the name is copied in bounded and NUL-terminated.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes().take(libc::IFNAMSIZ - 1)) {
            *dst = src as libc::c_char;
        }
        cvt(libc::ioctl(fd, libc::SIOCGIFMTU as _, &mut req))?;
        Ok(req.ifr_ifru.ifru_mtu as usize)
    }
}

impl PacketSocket {
    /// Open a raw packet socket on `ifname`: bound, promiscuous, ignoring its own sends, large buffers.
    /// With `receive == false` the socket only sends (bound with protocol 0: the kernel queues nothing to it).
    pub fn open(ifname: &str, rx_timestamps: bool, receive: bool) -> Result<Self, WireError> {
        let io_err = |what: &str, e: io::Error| WireError::Io(format!("interface {ifname}: {what}: {e}"));
        if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
            return Err(WireError::Config(format!(
                "interface name {ifname:?} is not a valid Linux interface name (1 to {} bytes expected)",
                libc::IFNAMSIZ - 1
            )));
        }
        let cname = std::ffi::CString::new(ifname)
            .map_err(|_| WireError::Config(format!("interface name {ifname:?} contains a NUL byte")))?;
        // SAFETY: plain FFI call with a NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(WireError::Config(format!(
                "interface {ifname:?} does not exist in this network namespace (expected one of the link namespace's veth ends)"
            )));
        }
        // Protocol 0 at creation: the socket sees no traffic until bind() names the interface, so no frame of
        // another interface can slip into its queue in between.
        // SAFETY: plain FFI call; the returned descriptor is owned right away.
        let raw = cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
            .map_err(|e| io_err("socket(AF_PACKET) (root or CAP_NET_RAW needed)", e))?;
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mtu = interface_mtu(raw, ifname).map_err(|e| io_err("SIOCGIFMTU", e))?;
        let frame_room = (mtu + L2_HEADER_ROOM).clamp(MIN_FRAME, MAX_FRAME);

        // Large kernel buffers; FORCE passes net.core.rmem_max (which cannot be raised in a child namespace).
        for (force, plain, bytes) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, RCVBUF_BYTES),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SNDBUF_BYTES),
        ] {
            if setsockopt_int(raw, libc::SOL_SOCKET, force, bytes).is_err() {
                let _ = setsockopt_int(raw, libc::SOL_SOCKET, plain, bytes);
            }
        }
        if let Err(e) = setsockopt_int(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1) {
            // Older kernels: the pkttype check in recv_batch still filters our own sends.
            tracing::debug!(ifname, "PACKET_IGNORE_OUTGOING unavailable: {e}");
        }
        if rx_timestamps {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
                .map_err(|e| io_err("SO_TIMESTAMPNS", e))?;
        }

        // SAFETY: sockaddr_ll is plain old data, passed with its size.
        unsafe {
            let mut addr: libc::sockaddr_ll = std::mem::zeroed();
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_protocol = if receive { (libc::ETH_P_ALL as u16).to_be() } else { 0 };
            addr.sll_ifindex = ifindex;
            cvt(libc::bind(
                raw,
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            ))
            .map_err(|e| io_err("bind", e))?;

            if !receive {
                return Ok(Self { fd, ifname: ifname.to_string(), ifindex, mtu, frame_room, rx_timestamps });
            }
            // Promiscuous: forward every frame, whatever its destination MAC (broadcast, multicast, the far host).
            let mut mreq: libc::packet_mreq = std::mem::zeroed();
            mreq.mr_ifindex = ifindex;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            cvt(libc::setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mreq as *const libc::packet_mreq as *const libc::c_void,
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            ))
            .map_err(|e| io_err("PACKET_ADD_MEMBERSHIP promiscuous", e))?;
        }
        Ok(Self { fd, ifname: ifname.to_string(), ifindex, mtu, frame_room, rx_timestamps })
    }

    /// The interface this socket is bound to still exists with the same index.
    pub fn still_exists(&self) -> bool {
        let Ok(cname) = std::ffi::CString::new(self.ifname.as_str()) else { return false };
        // SAFETY: plain FFI call with a NUL-terminated string.
        unsafe { libc::if_nametoindex(cname.as_ptr()) as i32 == self.ifindex }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Frames the kernel dropped because our receive queue was full, since the previous call
    /// (PACKET_STATISTICS resets on read).
    pub fn take_kernel_drops(&self) -> u64 {
        let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: pointer and length of a live tpacket_stats.
        let r = unsafe {
            libc::getsockopt(
                self.raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            st.tp_drops as u64
        } else {
            0
        }
    }

    /// Send `frames` in sendmmsg batches. Returns the number sent; frames the kernel refuses (for example
    /// EMSGSIZE beyond the egress MTU, ENETDOWN) are skipped and counted in `errors`.
    pub fn send_all(&self, frames: &[&[u8]], errors: &mut SendErrors) -> usize {
        let mut sent = 0;
        let mut i = 0;
        while i < frames.len() {
            let chunk = &frames[i..frames.len().min(i + BATCH)];
            let mut iov: [libc::iovec; BATCH] = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; BATCH];
            // SAFETY: mmsghdr is plain old data; zeroed means no name, no control data.
            let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for (k, f) in chunk.iter().enumerate() {
                iov[k] = libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() };
                hdrs[k].msg_hdr.msg_iov = &mut iov[k];
                hdrs[k].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: hdrs[..chunk.len()] point at iovecs that point at live frames.
            let r = unsafe { libc::sendmmsg(self.raw_fd(), hdrs.as_mut_ptr(), chunk.len() as libc::c_uint, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The first frame of the chunk failed: count it and go on with the next one.
                errors.record(&e);
                i += 1;
            } else {
                sent += r as usize;
                i += r as usize;
            }
        }
        sent
    }
}

/// Send failures by errno, for the stats line.
#[derive(Default, Debug, Clone)]
pub struct SendErrors {
    pub msgsize: u64,
    pub netdown: u64,
    pub nobufs: u64,
    pub other: u64,
}

impl SendErrors {
    fn record(&mut self, e: &io::Error) {
        match e.raw_os_error() {
            Some(libc::EMSGSIZE) => self.msgsize += 1,
            Some(libc::ENETDOWN) | Some(libc::ENXIO) => self.netdown += 1,
            Some(libc::ENOBUFS) | Some(libc::EAGAIN) => self.nobufs += 1,
            _ => {
                self.other += 1;
                tracing::debug!("sendmmsg: {e}");
            }
        }
    }
}

/// Reusable receive state for one socket: buffers, addresses, control space, and a pool of frame buffers
/// that sent frames come back to (so steady state allocates nothing).
pub struct RxBatch {
    slots: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_ll>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    cmsg: Vec<[u64; CMSG_SPACE / 8]>,
    frame_room: usize,
    pool: Vec<Vec<u8>>,
    /// Frames longer than the receive buffer (cut by the kernel), dropped.
    pub truncated: u64,
}

// SAFETY: the raw pointers in `iov` and `hdrs` point into this struct's own vectors and are rewritten
// before every recvmmsg; nothing is shared, so moving the batch to another thread (a direction thread of
// split.rs) is sound.
unsafe impl Send for RxBatch {}

/// Largest number of spare buffers kept for reuse.
const POOL_MAX: usize = 4096;

impl RxBatch {
    pub fn new(frame_room: usize) -> Self {
        Self {
            slots: (0..BATCH).map(|_| Vec::with_capacity(frame_room)).collect(),
            // SAFETY: plain old data.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            iov: vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; BATCH],
            // SAFETY: plain old data.
            hdrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            cmsg: vec![[0u64; CMSG_SPACE / 8]; BATCH],
            frame_room,
            pool: Vec::new(),
            truncated: 0,
        }
    }

    /// Spare buffers in the pool now.
    pub fn spare(&self) -> usize {
        self.pool.len()
    }

    /// Give a sent frame's buffer back for reuse (only buffers big enough for any frame are kept).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() >= self.frame_room && self.pool.len() < POOL_MAX {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// Receive up to BATCH frames without blocking. Each frame is appended to `out` with its arrival time
    /// (kernel timestamp mapped to CLOCK_MONOTONIC when enabled, else `now_ns`). Returns how many frames
    /// the kernel handed over (including skipped ones), 0 when the queue is empty.
    pub fn recv(
        &mut self,
        sock: &PacketSocket,
        now_ns: u64,
        rt_offset_ns: i64,
        out: &mut Vec<(u64, Vec<u8>)>,
    ) -> io::Result<usize> {
        for k in 0..BATCH {
            if self.slots[k].capacity() < self.frame_room {
                self.slots[k] = self.pool.pop().unwrap_or_else(|| Vec::with_capacity(self.frame_room));
            }
            self.iov[k] = libc::iovec {
                iov_base: self.slots[k].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.frame_room,
            };
            let h = &mut self.hdrs[k].msg_hdr;
            h.msg_name = &mut self.addrs[k] as *mut libc::sockaddr_ll as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[k];
            h.msg_iovlen = 1;
            if sock.rx_timestamps {
                h.msg_control = self.cmsg[k].as_mut_ptr() as *mut libc::c_void;
                h.msg_controllen = CMSG_SPACE as _;
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            h.msg_flags = 0;
            self.hdrs[k].msg_len = 0;
        }
        // SAFETY: every header points at a live buffer of `frame_room` bytes, a sockaddr_ll and control space.
        let r = unsafe {
            libc::recvmmsg(
                sock.raw_fd(),
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = r as usize;
        for k in 0..n {
            let h = &self.hdrs[k].msg_hdr;
            if h.msg_flags & libc::MSG_TRUNC != 0 {
                self.truncated += 1;
                continue;
            }
            if self.addrs[k].sll_pkttype == libc::PACKET_OUTGOING {
                continue; // our own send on this interface, seen by the tap
            }
            let len = self.hdrs[k].msg_len as usize;
            let ts = if sock.rx_timestamps { rx_timestamp(h, rt_offset_ns).unwrap_or(now_ns) } else { now_ns };
            let mut buf = std::mem::take(&mut self.slots[k]);
            // SAFETY: the kernel wrote `len` <= frame_room <= capacity bytes into this buffer.
            unsafe { buf.set_len(len) };
            // A kernel timestamp is never later than now; clamp in case the offset moved.
            out.push((ts.min(now_ns), buf));
        }
        Ok(n)
    }
}

/// The SO_TIMESTAMPNS control message of a received frame, mapped to CLOCK_MONOTONIC.
fn rx_timestamp(h: &libc::msghdr, rt_offset_ns: i64) -> Option<u64> {
    // SAFETY: walking the control messages the kernel wrote, with the libc CMSG macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                let real = ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64;
                return u64::try_from(real - rt_offset_ns).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}
