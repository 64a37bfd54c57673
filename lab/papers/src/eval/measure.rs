//! The measurements of the B+AVL paper's section V, generic over [`AuthStructure`]:
//! insert and search time (V-B), the proof-size distribution (V-C) and space efficiency
//! during insertion (V-D), on one shared data set.

use std::hint::black_box;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::AuthStructure;

/// Key bytes (the paper: 4-byte keys).
pub const KEY_LEN: usize = 4;
/// Value bytes: with the key, a 512-byte element (the paper: 512-byte elements).
pub const VALUE_LEN: usize = 512 - KEY_LEN;

/// The shared data set: element `i` has a distinct pseudo-random 4-byte key and a
/// pseudo-random value; every structure inserts the same elements in the same order.
pub struct Dataset {
    keys: Vec<[u8; KEY_LEN]>,
    values: Vec<u8>,
}

/// A bijection of u32 (murmur3's finaliser), so keys are distinct and look random.
fn fmix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

impl Dataset {
    pub fn new(n: usize, seed: u64) -> Self {
        let salt = seed as u32;
        let keys = (0..n as u32).map(|i| fmix32(i ^ salt).to_be_bytes()).collect();
        let mut values = vec![0u8; n * VALUE_LEN];
        ChaCha8Rng::seed_from_u64(seed).fill(&mut values[..]);
        Dataset { keys, values }
    }
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[i]
    }
    pub fn value(&self, i: usize) -> &[u8] {
        &self.values[i * VALUE_LEN..(i + 1) * VALUE_LEN]
    }
}

/// `k` distinct indices below `n` in random order.
pub fn sample(n: usize, k: usize, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut all: Vec<u32> = (0..n as u32).collect();
    for i in 0..k.min(n) {
        let j = rng.gen_range(i..n);
        all.swap(i, j);
    }
    all.truncate(k.min(n));
    all
}

/// One insert-and-search run.
#[derive(Clone, Debug, Serialize)]
pub struct PerfSample {
    pub structure: &'static str,
    pub elements: usize,
    pub chunk: usize,
    pub rep: usize,
    /// Inserting all elements, hashing every `commit_every` inserts and at the end.
    pub insert_s: f64,
    /// Searching 10% of them.
    pub search_s: f64,
}

/// Builds a structure of the first `n` elements, then searches `search`.
pub fn perf<S: AuthStructure>(
    d: &Dataset,
    n: usize,
    cap: usize,
    commit_every: usize,
    search: &[u32],
    rep: usize,
    tick: &mut dyn FnMut(u64),
) -> PerfSample {
    let mut s = S::with_capacity(cap);
    let t = Instant::now();
    for i in 0..n {
        s.insert(d.key(i), d.value(i));
        if (i + 1) % commit_every == 0 {
            black_box(s.root_hash());
            tick(commit_every as u64);
        }
    }
    black_box(s.root_hash());
    let insert_s = t.elapsed().as_secs_f64();
    tick((n % commit_every) as u64);
    let t = Instant::now();
    let mut found = 0usize;
    for &i in search {
        found += usize::from(s.get(black_box(d.key(i as usize))).is_some());
    }
    let search_s = t.elapsed().as_secs_f64();
    assert_eq!(found, search.len(), "{}: every searched key is present", S::NAME);
    PerfSample { structure: S::NAME, elements: n, chunk: cap, rep, insert_s, search_s }
}

/// Space and proof figures of one structure at one chunk size.
#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    pub structure: &'static str,
    pub chunk: usize,
    pub elements: usize,
    /// `(elements inserted, space efficiency)` every `n / samples` inserts.
    #[serde(skip)]
    pub series: Vec<(u64, f64)>,
    pub space_mean: f64,
    pub space_std: f64,
    pub space_final: f64,
    pub chunks_final: u64,
    /// Hashes in the membership proof of each sampled key.
    #[serde(skip)]
    pub proof_hashes: Vec<u32>,
    #[serde(skip)]
    pub proof_bytes: Vec<u32>,
    pub proofs_verified: usize,
}

/// Builds the first `n` elements (hashing once, at the end), recording space efficiency
/// `samples` times, then proves every key of `proof_keys` and verifies `verify` of them.
#[allow(clippy::too_many_arguments)]
pub fn sweep<S: AuthStructure>(
    d: &Dataset,
    n: usize,
    cap: usize,
    samples: usize,
    proof_keys: &[u32],
    verify: usize,
    tick: &mut dyn FnMut(u64),
) -> (SweepResult, S) {
    let mut s = S::with_capacity(cap);
    let every = (n / samples.max(1)).max(1);
    let mut series = Vec::with_capacity(samples + 1);
    for i in 0..n {
        s.insert(d.key(i), d.value(i));
        if (i + 1) % every == 0 {
            series.push(((i + 1) as u64, s.space().efficiency()));
            tick(every as u64);
        }
    }
    let root = s.root_hash();
    let effs: Vec<f64> = series.iter().map(|p| p.1).collect();
    let mean = effs.iter().sum::<f64>() / effs.len().max(1) as f64;
    let var = effs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / effs.len().max(1) as f64;
    let (mut proof_hashes, mut proof_bytes) = (Vec::new(), Vec::new());
    let mut verified = 0;
    for (j, &i) in proof_keys.iter().enumerate() {
        let key = d.key(i as usize);
        let p = s.prove(key).expect("inserted key has a proof");
        if j < verify {
            S::verify(&root, key, d.value(i as usize), &p.bytes).expect("proof verifies");
            verified += 1;
        }
        proof_hashes.push(p.hashes as u32);
        proof_bytes.push(p.bytes.len() as u32);
    }
    let space = s.space();
    let r = SweepResult {
        structure: S::NAME,
        chunk: cap,
        elements: n,
        series,
        space_mean: mean,
        space_std: var.sqrt(),
        space_final: space.efficiency(),
        chunks_final: space.chunks,
        proof_hashes,
        proof_bytes,
        proofs_verified: verified,
    };
    (r, s)
}
