//! Helpers shared by the wire-core integration tests: frames carrying a sequence number,
//! draining the emulator, binomial bounds.
#![allow(dead_code)]

use roughnet_wire_core::{Emulator, Side};

pub const MS: u64 = 1_000_000;
pub const US: u64 = 1_000;

/// A frame of `len` bytes (>= 8) whose first 8 bytes are `seq` (big endian).
pub fn frame(seq: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(8)];
    f[..8].copy_from_slice(&seq.to_be_bytes());
    f
}

pub fn seq_of(f: &[u8]) -> u64 {
    u64::from_be_bytes(f[..8].try_into().unwrap())
}

/// Everything the emulator will ever send: egress at each `next_due` until empty.
pub fn drain(e: &mut Emulator) -> Vec<(Side, Vec<u8>, u64)> {
    let mut out = Vec::new();
    while let Some(t) = e.next_due() {
        e.egress(t, &mut out);
    }
    out
}

/// The 99.9 % two-sided normal-approximation interval of a Binomial(n, p) count.
pub fn binomial_999(n: u64, p: f64) -> (f64, f64) {
    let z = 3.2905; // standard normal quantile at 0.9995
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (mean - z * sd, mean + z * sd)
}
