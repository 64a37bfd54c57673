//! The block stream every store replays: Workload B (`bavl_workload`) written once to a
//! file by the parent, read back by each child — the Rust adapters and the Go (IAVL)
//! program alike — so that every store sees exactly the same operations.
//!
//! Format (all integers little-endian):
//!
//! ```text
//! header:  "BAVLPEER" | u32 format (1) | u32 key_len (20) | u32 value_len (100)
//!          | u64 initial_keys | u64 warmup_blocks | u64 blocks | u64 seed
//! initial: initial_keys × (key[key_len] value[value_len])
//! blocks:  (warmup_blocks + blocks) × (u32 op_count, op_count × op)
//! op:      0x01 key value     (insert or update)
//!          0x02 key           (delete)
//! ```
//!
//! Each block's operations are applied in order (a later operation on the same key wins);
//! adapters whose store takes a batch (jmt, nomt) reduce the block to its final effect per
//! key first, as a chain's overlay would.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Bound;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use bavl_workload::{Key, Mix, Op, Value, KEY_LEN, VALUE_LEN};
use sha2::{Digest as _, Sha256};

pub const MAGIC: &[u8; 8] = b"BAVLPEER";
pub const FORMAT: u32 = 1;
const HEADER_LEN: usize = 8 + 4 * 3 + 8 * 4;
const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;

/// What a stream file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    pub initial_keys: u64,
    pub warmup_blocks: u64,
    pub blocks: u64,
    pub seed: u64,
}

/// The state after the stream, as every store must end: key count and digest (see
/// [`StateDigest`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Expected {
    pub keys: u64,
    pub digest: String,
    /// Operations in the measured blocks (after the warm-up).
    pub measured_ops: u64,
}

/// SHA-256 over every present key/value pair in ascending key order (`key ‖ value`, both
/// of fixed length), and their count.
#[derive(Default)]
pub struct StateDigest {
    hasher: Sha256,
    pub keys: u64,
}

impl StateDigest {
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        self.hasher.update(key);
        self.hasher.update(value);
        self.keys += 1;
    }
    pub fn finish(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

/// Writes the stream of `seed` to `path`, drawing each block against a reference
/// `BTreeMap` (as `bavl_workload::block` requires); returns the expected final state.
pub fn generate(
    path: &Path,
    header: Header,
    ops_per_block: u32,
    mut progress: impl FnMut(&str),
) -> Result<Expected> {
    let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    w.write_all(MAGIC)?;
    for x in [FORMAT, KEY_LEN as u32, VALUE_LEN as u32] {
        w.write_all(&x.to_le_bytes())?;
    }
    for x in [header.initial_keys, header.warmup_blocks, header.blocks, header.seed] {
        w.write_all(&x.to_le_bytes())?;
    }
    let mut state: BTreeMap<Key, Value> = BTreeMap::new();
    for (k, v) in bavl_workload::initial(header.seed).take(header.initial_keys as usize) {
        w.write_all(&k)?;
        w.write_all(&v)?;
        state.insert(k, v);
    }
    let total = header.warmup_blocks + header.blocks;
    let mut measured_ops = 0u64;
    for b in 0..total {
        // Versions as a store committing the initial state as version 1 would number them.
        let version = b + 2;
        let ops = bavl_workload::block(header.seed, version, Mix::workload_b(ops_per_block), |p| {
            state.range((Bound::Included(*p), Bound::Unbounded)).next().map(|(k, _)| *k)
        });
        w.write_all(&(ops.len() as u32).to_le_bytes())?;
        for op in &ops {
            match op {
                Op::Put(k, v) => {
                    w.write_all(&[TAG_PUT])?;
                    w.write_all(k)?;
                    w.write_all(v)?;
                    state.insert(*k, *v);
                }
                Op::Delete(k) => {
                    w.write_all(&[TAG_DELETE])?;
                    w.write_all(k)?;
                    state.remove(k);
                }
            }
        }
        if b >= header.warmup_blocks {
            measured_ops += ops.len() as u64;
        }
        progress(&format!("block {}/{total}", b + 1));
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let mut d = StateDigest::default();
    for (k, v) in &state {
        d.add(k, v);
    }
    Ok(Expected { keys: d.keys, measured_ops, digest: d.finish() })
}

/// Reads a stream file front to back without holding more than one block in memory.
pub struct Reader {
    r: BufReader<File>,
    pub header: Header,
    initial_left: u64,
    blocks_left: u64,
}

impl Reader {
    pub fn open(path: &Path) -> Result<Reader> {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut h = [0u8; HEADER_LEN];
        r.read_exact(&mut h).context("reading the stream header")?;
        ensure!(&h[..8] == MAGIC, "{} is not a block stream", path.display());
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
        ensure!(u32_at(8) == FORMAT, "stream format {} (expected {FORMAT})", u32_at(8));
        ensure!(
            u32_at(12) as usize == KEY_LEN && u32_at(16) as usize == VALUE_LEN,
            "stream has {}-byte keys and {}-byte values",
            u32_at(12),
            u32_at(16)
        );
        let header = Header {
            initial_keys: u64_at(20),
            warmup_blocks: u64_at(28),
            blocks: u64_at(36),
            seed: u64_at(44),
        };
        Ok(Reader {
            r,
            header,
            initial_left: header.initial_keys,
            blocks_left: header.warmup_blocks + header.blocks,
        })
    }

    /// The next up to `n` initial entries as insert operations (empty when done).
    pub fn initial_batch(&mut self, n: usize) -> Result<Vec<Op>> {
        let take = (n as u64).min(self.initial_left) as usize;
        let mut ops = Vec::with_capacity(take);
        for _ in 0..take {
            let mut k = [0u8; KEY_LEN];
            let mut v = [0u8; VALUE_LEN];
            self.r.read_exact(&mut k)?;
            self.r.read_exact(&mut v)?;
            ops.push(Op::Put(k, v));
        }
        self.initial_left -= take as u64;
        Ok(ops)
    }

    /// Skips the initial entries (the store holds them already).
    pub fn skip_initial(&mut self) -> Result<()> {
        let entry = (KEY_LEN + VALUE_LEN) as u64;
        let n = self.initial_left * entry;
        let skipped = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())?;
        ensure!(skipped == n, "the stream ends inside its initial entries");
        self.initial_left = 0;
        Ok(())
    }

    /// The next block (`None` after the last). The initial entries must have been read.
    pub fn next_block(&mut self) -> Result<Option<Vec<Op>>> {
        ensure!(self.initial_left == 0, "read the initial entries first");
        if self.blocks_left == 0 {
            return Ok(None);
        }
        self.blocks_left -= 1;
        let mut n = [0u8; 4];
        self.r.read_exact(&mut n)?;
        let n = u32::from_le_bytes(n) as usize;
        ensure!(n <= 100_000_000, "implausible block of {n} operations");
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            let mut tag = [0u8; 1];
            let mut k = [0u8; KEY_LEN];
            self.r.read_exact(&mut tag)?;
            self.r.read_exact(&mut k)?;
            match tag[0] {
                TAG_PUT => {
                    let mut v = [0u8; VALUE_LEN];
                    self.r.read_exact(&mut v)?;
                    ops.push(Op::Put(k, v));
                }
                TAG_DELETE => ops.push(Op::Delete(k)),
                t => bail!("unknown operation tag {t}"),
            }
        }
        Ok(Some(ops))
    }
}

/// Every key the stream ever writes, sorted and unique: the only keys a store replaying it
/// can hold, so reading each of them back checks the whole state.
pub fn universe(path: &Path) -> Result<Vec<Key>> {
    let mut r = Reader::open(path)?;
    let mut keys = Vec::with_capacity(r.header.initial_keys as usize * 9 / 8);
    loop {
        let batch = r.initial_batch(100_000)?;
        if batch.is_empty() {
            break;
        }
        keys.extend(batch.iter().map(op_key));
    }
    while let Some(ops) = r.next_block()? {
        keys.extend(ops.iter().filter(|o| matches!(o, Op::Put(..))).map(op_key));
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

fn op_key(op: &Op) -> Key {
    match op {
        Op::Put(k, _) | Op::Delete(k) => *k,
    }
}

/// A block reduced to its final effect per key, in key order (what batch-taking stores
/// are given).
pub fn final_effect(ops: &[Op]) -> BTreeMap<Key, Option<Value>> {
    let mut m = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(k, v) => m.insert(*k, Some(*v)),
            Op::Delete(k) => m.insert(*k, None),
        };
    }
    m
}
