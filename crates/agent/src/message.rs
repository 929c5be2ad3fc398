//! The 32-byte message header every pattern puts in front of its payload.
//!
//! Layout (little-endian), as in docs/agent-protocol.md:
//! magic u32 "RNM1" | flags u16 | header length u16 (32) | seq u64 | intended ns u64 | actual ns u64.
//! This module only encodes and decodes; framing (TCP length prefix, one datagram
//! per message) belongs to the drivers.

use thiserror::Error;

pub const MAGIC: u32 = 0x314D_4E52;
pub const HEADER_LEN: usize = 32;

pub const FLAG_WARMUP: u16 = 1 << 0;
pub const FLAG_END: u16 = 1 << 1;
pub const FLAG_REPLY: u16 = 1 << 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub flags: u16,
    /// 0-based, warm-up messages included.  In an end marker: the number of
    /// messages sent before it (so the receiver learns the total).
    pub seq: u64,
    pub intended_ns: u64,
    pub actual_ns: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("message of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    TooShort(usize),
    #[error("bad magic 0x{0:08x} (expected 0x{MAGIC:08x}, \"RNM1\")")]
    BadMagic(u32),
    #[error("header length {0} (expected {HEADER_LEN})")]
    BadHeaderLen(u16),
}

impl Header {
    pub fn is_warmup(&self) -> bool {
        self.flags & FLAG_WARMUP != 0
    }
    pub fn is_end(&self) -> bool {
        self.flags & FLAG_END != 0
    }
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_REPLY != 0
    }

    /// Write the header into the first 32 bytes of `buf` (which must be that long).
    #[inline]
    pub fn encode(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        buf[4..6].copy_from_slice(&self.flags.to_le_bytes());
        buf[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.intended_ns.to_le_bytes());
        buf[24..32].copy_from_slice(&self.actual_ns.to_le_bytes());
    }

    #[inline]
    pub fn decode(buf: &[u8]) -> Result<Header, DecodeError> {
        if buf.len() < HEADER_LEN {
            return Err(DecodeError::TooShort(buf.len()));
        }
        let u16_at = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]);
        let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
        let magic = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let hlen = u16_at(6);
        if hlen as usize != HEADER_LEN {
            return Err(DecodeError::BadHeaderLen(hlen));
        }
        Ok(Header {
            flags: u16_at(4),
            seq: u64_at(8),
            intended_ns: u64_at(16),
            actual_ns: u64_at(24),
        })
    }
}

/// Set the reply flag in an encoded message in place (what a ponger does).
#[inline]
pub fn mark_reply(buf: &mut [u8]) {
    let flags = u16::from_le_bytes([buf[4], buf[5]]) | FLAG_REPLY;
    buf[4..6].copy_from_slice(&flags.to_le_bytes());
}

/// Fill a message buffer's payload (after the header) with a recognisable,
/// non-zero pattern, so nothing along the path can shrink it.
pub fn fill_payload(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate().skip(HEADER_LEN) {
        *b = (i % 251) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_field() {
        let h = Header {
            flags: FLAG_WARMUP | FLAG_END,
            seq: u64::MAX - 3,
            intended_ns: 123,
            actual_ns: 1 << 60,
        };
        let mut buf = vec![0u8; 100];
        h.encode(&mut buf);
        assert_eq!(&buf[0..4], b"RNM1");
        assert_eq!(Header::decode(&buf).unwrap(), h);
        assert!(h.is_warmup() && h.is_end() && !h.is_reply());
        mark_reply(&mut buf);
        let r = Header::decode(&buf).unwrap();
        assert!(r.is_reply() && r.is_warmup() && r.is_end());
        assert_eq!(r.seq, h.seq);
    }

    #[test]
    fn rejects_short_and_foreign_messages() {
        assert_eq!(Header::decode(&[0u8; 31]), Err(DecodeError::TooShort(31)));
        let mut buf = [0u8; 32];
        Header::default().encode(&mut buf);
        buf[0] = b'X';
        assert!(matches!(
            Header::decode(&buf),
            Err(DecodeError::BadMagic(_))
        ));
        Header::default().encode(&mut buf);
        buf[6] = 40;
        assert_eq!(Header::decode(&buf), Err(DecodeError::BadHeaderLen(40)));
    }

    #[test]
    fn fill_leaves_header_alone() {
        let mut buf = vec![0u8; 64];
        let h = Header {
            flags: 0,
            seq: 9,
            intended_ns: 1,
            actual_ns: 2,
        };
        h.encode(&mut buf);
        fill_payload(&mut buf);
        assert_eq!(Header::decode(&buf).unwrap(), h);
        assert!(buf[HEADER_LEN..].iter().any(|&b| b != 0));
    }
}
