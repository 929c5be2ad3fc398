//! The sync pattern's two message kinds, after the common 32-byte header.
//!
//! | kind | body (little-endian) |
//! |---|---|
//! | 1 summary | kind u8, flags u8 (bit 0: "I have your summary"), count u16, then `count` x (start u32, length u32): the ids held |
//! | 2 bundle | kind u8, 0 u8 x3, id u32, manifest (`manifest_bytes`), payload (`bundle_payload_bytes`) |
//!
//! Manifest and payload bytes are pseudo-random from (seed, id): incompressible
//! (as a manifest that is already compressed) and checkable by the receiver.
//! Owns encoding and decoding only; no I/O.

use super::ids::IdSet;
use crate::config::{SYNC_BUNDLE_OVERHEAD, SYNC_MAX_RANGES};
use crate::message::{Header, HEADER_LEN};

pub const KIND_SUMMARY: u8 = 1;
pub const KIND_BUNDLE: u8 = 2;
/// Summary flag: the sender has received a summary from its peer.
pub const SEEN_YOURS: u8 = 1;

/// A decoded sync message body.
#[derive(Debug, PartialEq, Eq)]
pub enum Body {
    /// The ids the peer holds; `seen`: it has received one of our summaries.
    Summary { held: IdSet, seen: bool },
    /// Bundle `id`, and whether its content matched what (seed, id) gives.
    Bundle { id: u32, intact: bool },
}

/// Write a summary of `held` (its first SYNC_MAX_RANGES ranges) into `buf`; returns its length.
pub fn encode_summary(buf: &mut [u8], header: &Header, held: &IdSet, seen: bool) -> usize {
    let ranges = &held.ranges()[..held.ranges().len().min(SYNC_MAX_RANGES)];
    header.encode(buf);
    let b = &mut buf[HEADER_LEN..];
    b[0] = KIND_SUMMARY;
    b[1] = if seen { SEEN_YOURS } else { 0 };
    b[2..4].copy_from_slice(&(ranges.len() as u16).to_le_bytes());
    for (k, (start, end)) in ranges.iter().enumerate() {
        let o = 4 + 8 * k;
        b[o..o + 4].copy_from_slice(&start.to_le_bytes());
        b[o + 4..o + 8].copy_from_slice(&(end - start).to_le_bytes());
    }
    HEADER_LEN + 4 + 8 * ranges.len()
}

/// Fill `buf` (exactly one bundle message long) with bundle `id`.
pub fn encode_bundle(buf: &mut [u8], header: &Header, id: u32, seed: u64) {
    header.encode(buf);
    buf[HEADER_LEN] = KIND_BUNDLE;
    buf[HEADER_LEN + 1..HEADER_LEN + 4].fill(0);
    buf[HEADER_LEN + 4..SYNC_BUNDLE_OVERHEAD].copy_from_slice(&id.to_le_bytes());
    fill_content(&mut buf[SYNC_BUNDLE_OVERHEAD..], seed, id);
}

/// Decode the body of a message whose header was already decoded.
/// `bundle_len` is the expected bundle message length.
pub fn decode(msg: &[u8], bundle_len: usize, seed: u64) -> Result<Body, String> {
    let b = msg.get(HEADER_LEN..).unwrap_or(&[]);
    match b.first() {
        Some(&KIND_SUMMARY) => {
            if b.len() < 4 {
                return Err(format!("a summary of {} bytes (at least 4 after the header)", b.len()));
            }
            let count = u16::from_le_bytes([b[2], b[3]]) as usize;
            if count > SYNC_MAX_RANGES || b.len() != 4 + 8 * count {
                return Err(format!(
                    "a summary of {} bytes announcing {count} ranges (expected 4 + 8 x count, at most {SYNC_MAX_RANGES})",
                    b.len()
                ));
            }
            let ranges = (0..count).map(|k| {
                let o = 4 + 8 * k;
                let start = u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
                let len = u32::from_le_bytes(b[o + 4..o + 8].try_into().expect("4 bytes"));
                (start, start.saturating_add(len))
            });
            Ok(Body::Summary {
                held: IdSet::from_ranges(ranges),
                seen: b[1] & SEEN_YOURS != 0,
            })
        }
        Some(&KIND_BUNDLE) => {
            if msg.len() != bundle_len {
                return Err(format!(
                    "a bundle message of {} bytes (expected {bundle_len}: are both sides configured alike?)",
                    msg.len()
                ));
            }
            let id = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
            Ok(Body::Bundle {
                id,
                intact: content_matches(&msg[SYNC_BUNDLE_OVERHEAD..], seed, id),
            })
        }
        Some(k) => Err(format!("unknown sync message kind {k} (expected 1 summary or 2 bundle)")),
        None => Err("a sync message with no body".into()),
    }
}

/// splitmix64: the content stream of bundle `id`.
struct Content(u64);

impl Content {
    fn new(seed: u64, id: u32) -> Self {
        Content(seed ^ ((id as u64) << 32 | id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn fill_content(out: &mut [u8], seed: u64, id: u32) {
    let mut c = Content::new(seed, id);
    for chunk in out.chunks_mut(8) {
        let w = c.next().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn content_matches(got: &[u8], seed: u64, id: u32) -> bool {
    let mut c = Content::new(seed, id);
    got.chunks(8).all(|chunk| c.next().to_le_bytes()[..chunk.len()] == *chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_bundle_round_trip() {
        let h = Header::default();
        let held = IdSet::from_ranges([(0, 40), (100, 140)]);
        let mut buf = vec![0u8; 2048];
        let n = encode_summary(&mut buf, &h, &held, true);
        assert_eq!(n, HEADER_LEN + 4 + 16);
        let seen = true;
        assert_eq!(decode(&buf[..n], 0, 7), Ok(Body::Summary { held, seen }));

        let len = SYNC_BUNDLE_OVERHEAD + 200 + 13;
        let mut b = vec![0u8; len];
        encode_bundle(&mut b, &h, 77, 7);
        assert_eq!(decode(&b, len, 7), Ok(Body::Bundle { id: 77, intact: true }));
        // Another seed (or a flipped bit) is noticed; a wrong length is an error.
        assert_eq!(decode(&b, len, 8), Ok(Body::Bundle { id: 77, intact: false }));
        b[len - 1] ^= 1;
        assert_eq!(decode(&b, len, 7), Ok(Body::Bundle { id: 77, intact: false }));
        assert!(decode(&b, len + 1, 7).unwrap_err().contains("expected"));
        // Content differs between bundles (incompressible, not a repeated filler).
        let mut c = vec![0u8; len];
        encode_bundle(&mut c, &h, 78, 7);
        assert_ne!(b[SYNC_BUNDLE_OVERHEAD..], c[SYNC_BUNDLE_OVERHEAD..]);
    }

    #[test]
    fn an_oversized_set_is_announced_as_its_first_ranges() {
        let held = IdSet::from_ranges((0..100u32).map(|i| (3 * i, 3 * i + 1)));
        let mut buf = vec![0u8; crate::config::SYNC_MAX_SUMMARY_BYTES];
        let n = encode_summary(&mut buf, &Header::default(), &held, false);
        assert_eq!(n, crate::config::SYNC_MAX_SUMMARY_BYTES);
        match decode(&buf[..n], 0, 0).unwrap() {
            Body::Summary { held: s, seen } => {
                assert_eq!(s, held.truncated(SYNC_MAX_RANGES));
                assert!(!seen);
            }
            other => panic!("{other:?}"),
        }
        assert!(decode(&buf[..HEADER_LEN], 0, 0).is_err());
        buf[HEADER_LEN] = 9;
        assert!(decode(&buf[..n], 0, 0).unwrap_err().contains("unknown"));
    }
}
