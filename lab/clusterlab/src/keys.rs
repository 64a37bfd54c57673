//! The key space of the experiments: keys `k` + 12 decimal digits of an integer `x`.
//! Preloaded keys sit at multiples of [`SPACING`], so keys inserted later (a multiple plus
//! an offset) fall evenly between them, over every range. Values are 32 bytes and, for
//! writes, unique per (client, sequence number), as the history format recommends.

use rand::Rng;

/// Distance between two preloaded keys' integers.
pub const SPACING: u64 = 1_000_000;

pub fn key(x: u64) -> Vec<u8> {
    format!("k{x:012}").into_bytes()
}

/// The integer of the `i`-th preloaded key.
pub fn preloaded(i: u64) -> u64 {
    i * SPACING
}

/// A key that was never preloaded, uniform over the key space after the preloaded keys
/// of indices `keys` (up to the next preloaded key).
pub fn fresh(rng: &mut impl Rng, keys: std::ops::Range<u64>) -> u64 {
    preloaded(rng.gen_range(keys)) + rng.gen_range(1..SPACING)
}

pub fn initial_value(i: u64) -> Vec<u8> {
    format!("{:>32}", format!("init-{i}")).into_bytes()
}

/// The value a client writes with its `seq`-th write (never written by anyone else).
pub fn written_value(client: u64, seq: u64) -> Vec<u8> {
    format!("{:>32}", format!("c{client}-s{seq}")).into_bytes()
}
