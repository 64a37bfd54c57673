//! Hash accounting: how many hashes, of which kind, and how many SHA-256 compressions the
//! tree spends per key loaded, per upsert, per proof and per chunk verified.
//!
//! The same workload runs on a `Tree<Counting>` (identical digests, counted by domain
//! tag). Multiplying compressions by the measured cost of one compression gives the time
//! hashing alone must take, which [`Accounting::explain`] sets against the measured
//! throughputs: the remainder is everything else (allocation, copying, tree walks).

use std::collections::BTreeMap;

use anyhow::{ensure, Context, Result};
use bavl_core::{verify_membership, Restore, Tree};
use serde::Serialize;

use crate::hashing::{Counting, PerUnit, Tally};
use crate::measure::CapacityResult;
use crate::workload::Workload;

/// Hash work per unit, at one capacity, on the main workload.
#[derive(Clone, Debug, Serialize)]
pub struct Accounting {
    pub capacity: u32,
    /// Hashes during inserts themselves (0 when hashing is fully lazy).
    pub insert_hashes: u64,
    pub bulk_load_per_key: PerUnit,
    pub update_per_op: PerUnit,
    pub update_ops_counted: usize,
    /// Chunks rehashed by the counted block (chunk hashes computed).
    pub chunks_rehashed_per_block: u64,
    pub prove_membership_per_proof: PerUnit,
    pub verify_membership_per_proof: PerUnit,
    pub export_per_chunk: PerUnit,
    pub verify_rebuild_per_chunk: PerUnit,
    pub entries_per_chunk: f64,
    pub chunk_bytes_per_entry: f64,
    /// Compressions a plain SHA-256 over the chunk bytes needs per entry (bytes / 64).
    pub sha256_plain_compressions_per_entry: f64,
    pub verify_compressions_per_entry: f64,
    /// Estimates from compression counts times the measured cost of one compression.
    pub estimates: BTreeMap<String, f64>,
}

/// Counts the hash work of the main workload at `capacity`.
pub fn account(w: &Workload, capacity: u32) -> Result<Accounting> {
    let n = w.keys.len();
    let mut tree: Tree<Counting> = Tree::with_capacity_and_hasher(capacity)?;
    Tally::reset();
    for (i, k) in w.keys.iter().enumerate() {
        tree.insert(k, w.initial_value(i))?;
    }
    let insert_hashes: u64 = Tally::take().calls.iter().sum();
    tree.root_hash();
    let bulk = Tally::take().per(n as f64);

    // Warm-up block uncounted, then one counted block, as in the timed updates.
    let mut update = Tally::default();
    let mut counted = 0;
    for (b, block) in w.blocks.iter().take(2).enumerate() {
        Tally::reset();
        for (k, v) in block {
            tree.insert(k, w.value(*v))?;
        }
        tree.root_hash();
        if b == 1 {
            update = Tally::take();
            counted = block.len();
        }
    }
    let snap = tree.snapshot();
    let root = snap.root_hash();
    let m = snap.chunk_count();

    let sample = &w.proof_keys[..w.proof_keys.len().min(1000)];
    Tally::reset();
    let proofs: Vec<Vec<u8>> =
        sample.iter().filter_map(|k| snap.prove_membership(k).ok()).collect();
    let prove = Tally::take().per(proofs.len().max(1) as f64);
    for (k, p) in sample.iter().zip(&proofs) {
        let v = snap.get(k)?.unwrap_or_default();
        let _ =
            verify_membership::<Counting>(&root, k, v, p).context("membership proof rejected")?;
    }
    let verify_proof = Tally::take().per(proofs.len().max(1) as f64);

    let exports: Vec<Vec<u8>> = (0..m).filter_map(|i| snap.export_chunk(i).ok()).collect();
    ensure!(exports.len() as u64 == m, "a chunk could not be exported");
    let export = Tally::take().per(m as f64);
    let mut restore = Restore::<Counting>::new(root);
    for (i, e) in exports.iter().enumerate() {
        restore.add_chunk(i as u64, e)?;
    }
    drop(restore.finish(capacity)?);
    let verify = Tally::take().per(m as f64);

    let keys = snap.len() as f64;
    let bytes: usize = exports.iter().map(Vec::len).sum();
    let per_entry = bytes as f64 / keys;
    Ok(Accounting {
        capacity,
        insert_hashes,
        bulk_load_per_key: bulk,
        update_per_op: update.per(counted.max(1) as f64),
        update_ops_counted: counted,
        chunks_rehashed_per_block: update.calls[3],
        prove_membership_per_proof: prove,
        verify_membership_per_proof: verify_proof,
        export_per_chunk: export,
        entries_per_chunk: keys / m as f64,
        chunk_bytes_per_entry: per_entry,
        sha256_plain_compressions_per_entry: per_entry / 64.0,
        verify_compressions_per_entry: verify.compressions * m as f64 / keys,
        verify_rebuild_per_chunk: verify,
        estimates: BTreeMap::new(),
    })
}

impl Accounting {
    /// Fills [`Accounting::estimates`]: the time hashing alone takes per unit, from the
    /// measured cost of a 64-byte hash (two compressions), against the measured time.
    pub fn explain(&mut self, sha256_64b_per_s: f64, main: &CapacityResult) {
        let ns_per_compression = 1e9 / sha256_64b_per_s / 2.0;
        let mut e = BTreeMap::new();
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        e.insert("ns_per_compression".into(), r(ns_per_compression));
        let upd_hash_ns = self.update_per_op.compressions * ns_per_compression;
        let upd_ns = 1e9 / main.update_ops_per_s;
        e.insert("update_ns_per_op_measured".into(), r(upd_ns));
        e.insert("update_ns_per_op_in_sha256".into(), r(upd_hash_ns));
        e.insert("update_sha256_share".into(), r(upd_hash_ns / upd_ns));
        e.insert("update_ops_per_s_if_only_sha256".into(), (1e9 / upd_hash_ns).round());
        let ver_hash_ns = self.verify_compressions_per_entry * ns_per_compression;
        let ver_ns = self.chunk_bytes_per_entry / (main.verify_rebuild_mb_per_s * 1e6) * 1e9;
        e.insert("verify_ns_per_entry_measured".into(), r(ver_ns));
        e.insert("verify_ns_per_entry_in_sha256".into(), r(ver_hash_ns));
        e.insert("verify_sha256_share".into(), r(ver_hash_ns / ver_ns));
        e.insert(
            "verify_vs_sha256_ceiling".into(),
            r(self.sha256_plain_compressions_per_entry / self.verify_compressions_per_entry),
        );
        self.estimates = e;
    }
}
