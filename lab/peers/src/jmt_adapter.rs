//! jmt 0.12 on a real on-disk store (redb 2) and on its in-memory `MockTreeStore`.
//!
//! On redb, nodes are keyed by `version (u64 big-endian) ‖ borsh(nibble path)`, so the
//! nodes a block creates (all of its version) land next to each other — appends to the
//! B-tree rather than random page writes, the layout Aptos uses for the same tree — and
//! values by `key hash ‖ version (big-endian)`, so the newest value at or below a version
//! is one reverse range step. Each block is one write transaction committed with
//! `Durability::Immediate` (redb's default: fsync). Stale nodes are not pruned (every
//! version stays readable, as with IAVL here).

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use bavl_workload::{Key, Op};
use jmt::mock::MockTreeStore;
use jmt::storage::{LeafNode, Node, NodeKey, TreeReader, TreeWriter};
use jmt::{KeyHash, OwnedValue, Sha256Jmt, Version};
use redb::{
    Database, Durability, ReadOnlyTable, ReadableTable, ReadableTableMetadata, TableDefinition,
};

use crate::adapters::{ms2, Adapter};
use crate::stream::final_effect;

const NODES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("jmt_nodes");
const VALUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("jmt_values");

/// The block as jmt's value set: final effect per key, keys hashed with SHA-256.
fn value_set(ops: &[Op]) -> Vec<(KeyHash, Option<OwnedValue>)> {
    let mut set: Vec<(KeyHash, Option<OwnedValue>)> = final_effect(ops)
        .into_iter()
        .map(|(k, v)| (KeyHash::with::<sha2::Sha256>(k), v.map(|v| v.to_vec())))
        .collect();
    set.sort_unstable_by_key(|(h, _)| *h);
    set
}

fn node_key_bytes(key: &NodeKey) -> Result<Vec<u8>> {
    let mut b = key.version().to_be_bytes().to_vec();
    borsh::to_writer(&mut b, key.nibble_path())?;
    Ok(b)
}

fn value_key(key_hash: KeyHash, version: Version) -> [u8; 40] {
    let mut b = [0u8; 40];
    b[..32].copy_from_slice(&key_hash.0);
    b[32..].copy_from_slice(&version.to_be_bytes());
    b
}

/// A read snapshot of the two tables as of the last commit.
struct RedbReader {
    nodes: ReadOnlyTable<&'static [u8], &'static [u8]>,
    values: ReadOnlyTable<&'static [u8], &'static [u8]>,
}

impl RedbReader {
    fn open(db: &Database) -> Result<RedbReader> {
        let txn = db.begin_read()?;
        Ok(RedbReader { nodes: txn.open_table(NODES)?, values: txn.open_table(VALUES)? })
    }
}

impl TreeReader for RedbReader {
    fn get_node_option(&self, node_key: &NodeKey) -> Result<Option<Node>> {
        let k = node_key_bytes(node_key)?;
        match self.nodes.get(k.as_slice())? {
            Some(v) => Ok(Some(borsh::from_slice(v.value())?)),
            None => Ok(None),
        }
    }

    fn get_value_option(
        &self,
        max_version: Version,
        key_hash: KeyHash,
    ) -> Result<Option<OwnedValue>> {
        let lo = value_key(key_hash, 0);
        let hi = value_key(key_hash, max_version);
        let mut range = self.values.range(&lo[..]..=&hi[..])?;
        match range.next_back() {
            Some(entry) => {
                let (_, v) = entry?;
                let v = v.value();
                Ok(match v.first() {
                    Some(1) => Some(v[1..].to_vec()),
                    _ => None,
                })
            }
            None => Ok(None),
        }
    }

    /// Used only by jmt's restore, not by this benchmark: a full scan of the nodes.
    fn get_rightmost_leaf(&self) -> Result<Option<(NodeKey, LeafNode)>> {
        let mut best: Option<(NodeKey, LeafNode)> = None;
        for entry in self.nodes.iter()? {
            let (k, v) = entry?;
            if let Node::Leaf(leaf) = borsh::from_slice::<Node>(v.value())? {
                if best.as_ref().is_none_or(|(_, b)| leaf.key_hash() > b.key_hash()) {
                    let k = k.value();
                    let version = u64::from_be_bytes(k[..8].try_into()?);
                    let path = borsh::from_slice(&k[8..])?;
                    best = Some((NodeKey::new(version, path), leaf));
                }
            }
        }
        Ok(best)
    }
}

/// jmt with its nodes and values in a redb database.
pub struct JmtRedb {
    db: Database,
    reader: RedbReader,
    /// The version the next block is written as.
    next: Version,
    /// Per commit: ms in jmt (`put_value_set`), ms writing and committing to redb.
    split: Vec<(f64, f64)>,
}

impl JmtRedb {
    pub fn open(dir: &Path) -> Result<JmtRedb> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("jmt.redb");
        let db = Database::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let txn = db.begin_write()?;
        txn.open_table(NODES)?;
        txn.open_table(VALUES)?;
        txn.commit()?;
        let reader = RedbReader::open(&db)?;
        Ok(JmtRedb { db, reader, next: 0, split: Vec::new() })
    }
}

impl Adapter for JmtRedb {
    fn commit_block(&mut self, ops: &[Op]) -> Result<()> {
        let t = Instant::now();
        let set = value_set(ops);
        let (_root, batch) = Sha256Jmt::new(&self.reader).put_value_set(set, self.next)?;
        let t1 = Instant::now();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate);
        {
            let mut nodes = txn.open_table(NODES)?;
            let mut buf = Vec::with_capacity(256);
            for (k, node) in batch.node_batch.nodes() {
                buf.clear();
                borsh::to_writer(&mut buf, node)?;
                nodes.insert(node_key_bytes(k)?.as_slice(), buf.as_slice())?;
            }
            let mut values = txn.open_table(VALUES)?;
            for ((version, key_hash), value) in batch.node_batch.values() {
                buf.clear();
                match value {
                    Some(v) => {
                        buf.push(1);
                        buf.extend_from_slice(v);
                    }
                    None => buf.push(0),
                }
                values.insert(&value_key(*key_hash, *version)[..], buf.as_slice())?;
            }
        }
        txn.commit()?;
        self.reader = RedbReader::open(&self.db)?;
        self.next += 1;
        self.split.push(ms2(t1 - t, t1.elapsed()));
        Ok(())
    }

    fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        let version = self.next.checked_sub(1).ok_or_else(|| anyhow!("nothing committed"))?;
        Sha256Jmt::new(&self.reader).get(KeyHash::with::<sha2::Sha256>(key), version)
    }

    fn extra(&mut self) -> serde_json::Value {
        serde_json::json!({
            "versions": self.next,
            "node_entries": self.reader.nodes.len().unwrap_or(0),
            "value_entries": self.reader.values.len().unwrap_or(0),
            "split_note": "per commit (load commits first): ms in jmt put_value_set (tree + hashing), ms writing the batch to redb and committing",
            "tree_redb_ms": self.split,
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// jmt on its own in-memory mock store (no disk, no durability): the tree's cost alone.
#[derive(Default)]
pub struct JmtMock {
    store: MockTreeStore,
    next: Version,
}

impl Adapter for JmtMock {
    fn commit_block(&mut self, ops: &[Op]) -> Result<()> {
        let set = value_set(ops);
        let (_root, batch) = Sha256Jmt::new(&self.store).put_value_set(set, self.next)?;
        self.store.write_node_batch(&batch.node_batch)?;
        self.next += 1;
        Ok(())
    }

    fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        let version = self.next.checked_sub(1).ok_or_else(|| anyhow!("nothing committed"))?;
        Sha256Jmt::new(&self.store).get(KeyHash::with::<sha2::Sha256>(key), version)
    }

    fn extra(&mut self) -> serde_json::Value {
        serde_json::json!({ "versions": self.next, "nodes": self.store.num_nodes() })
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
