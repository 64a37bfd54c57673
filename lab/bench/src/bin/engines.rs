//! The storage-engine measurement behind the store's on-disk design (docs/design.md §8.6).
//!
//! Same Workload B blocks (10k operations: 40% inserts, 50% updates, 10% deletes over a
//! state of `--keys` 20-byte keys with 100-byte values), one durable commit per block, on:
//! - `wal`: what bavl does — one log record per block, appended and `fdatasync`ed;
//! - `redb`, `fjall`, `lmdb` (heed): every key written into the engine, one durable
//!   transaction per block (how IAVL-style stores keep their nodes in an engine);
//! - `redb-blob`: the block's log record stored as one value of a redb transaction.
//!
//! It reports operations per second and bytes written to disk per operation (from
//! `/proc/self/io`), and writes `docs/results/engines.json`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use bavl_workload::{block, initial, Key, Mix, Op, Value};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Measure storage engines on Workload B blocks (durable commit per block)")]
struct Args {
    /// Keys in the initial state.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Measured blocks.
    #[arg(long, default_value_t = 30)]
    blocks: u64,
    /// Operations per block.
    #[arg(long, default_value_t = 10_000)]
    ops: u32,
    /// Working directory (on a real disk: fsync must be real).
    #[arg(long, default_value_os_t = bavl_labkit::repo_path("target/engines-bench"))]
    dir: PathBuf,
    #[arg(long, default_value_os_t = bavl_labkit::results_path("engines.json"))]
    out: PathBuf,
}

trait Engine {
    /// Applies one block and makes it durable.
    fn commit(&mut self, ops: &[Op], record: &[u8]) -> Result<()>;
}

fn write_bytes() -> u64 {
    let s = fs::read_to_string("/proc/self/io").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The block as bavl logs it (same framing size: tag, u16 key length, key, u32 value
/// length, value).
fn record(ops: &[Op]) -> Vec<u8> {
    let mut r = Vec::with_capacity(ops.len() * 128 + 64);
    r.extend_from_slice(&[0u8; 56]);
    for op in ops {
        match op {
            Op::Put(k, v) => {
                r.push(1);
                r.extend_from_slice(&(k.len() as u16).to_le_bytes());
                r.extend_from_slice(k);
                r.extend_from_slice(&(v.len() as u32).to_le_bytes());
                r.extend_from_slice(v);
            }
            Op::Delete(k) => {
                r.push(2);
                r.extend_from_slice(&(k.len() as u16).to_le_bytes());
                r.extend_from_slice(k);
            }
        }
    }
    r
}

struct Wal(fs::File);
impl Engine for Wal {
    fn commit(&mut self, _: &[Op], record: &[u8]) -> Result<()> {
        self.0.write_all(record)?;
        self.0.sync_data()?;
        Ok(())
    }
}

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("kv");
const LOG: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("log");

struct Redb(redb::Database);
impl Engine for Redb {
    fn commit(&mut self, ops: &[Op], _: &[u8]) -> Result<()> {
        let tx = self.0.begin_write()?;
        {
            let mut t = tx.open_table(TABLE)?;
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        t.insert(&k[..], &v[..])?;
                    }
                    Op::Delete(k) => {
                        t.remove(&k[..])?;
                    }
                }
            }
        }
        tx.commit()?;
        Ok(())
    }
}

struct RedbBlob(redb::Database, u64);
impl Engine for RedbBlob {
    fn commit(&mut self, _: &[Op], record: &[u8]) -> Result<()> {
        let tx = self.0.begin_write()?;
        tx.open_table(LOG)?.insert(self.1, record)?;
        tx.commit()?;
        self.1 += 1;
        Ok(())
    }
}

struct Fjall(fjall::Keyspace, fjall::PartitionHandle);
impl Engine for Fjall {
    fn commit(&mut self, ops: &[Op], _: &[u8]) -> Result<()> {
        let mut b = self.0.batch();
        for op in ops {
            match op {
                Op::Put(k, v) => b.insert(&self.1, &k[..], &v[..]),
                Op::Delete(k) => b.remove(&self.1, &k[..]),
            }
        }
        b.commit()?;
        self.0.persist(fjall::PersistMode::SyncData)?;
        Ok(())
    }
}

struct Lmdb(heed::Env, heed::Database<heed::types::Bytes, heed::types::Bytes>);
impl Engine for Lmdb {
    fn commit(&mut self, ops: &[Op], _: &[u8]) -> Result<()> {
        let mut tx = self.0.write_txn()?;
        for op in ops {
            match op {
                Op::Put(k, v) => self.1.put(&mut tx, &k[..], &v[..])?,
                Op::Delete(k) => {
                    self.1.delete(&mut tx, &k[..])?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }
}

fn open(name: &str, dir: &Path) -> Result<Box<dyn Engine>> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    Ok(match name {
        "wal" => Box::new(Wal(fs::File::create(dir.join("wal.log"))?)),
        "redb" => Box::new(Redb(redb::Database::create(dir.join("db.redb"))?)),
        "redb-blob" => Box::new(RedbBlob(redb::Database::create(dir.join("db.redb"))?, 0)),
        "fjall" => {
            let ks = fjall::Config::new(dir).open()?;
            let p = ks.open_partition("kv", fjall::PartitionCreateOptions::default())?;
            Box::new(Fjall(ks, p))
        }
        "lmdb" => {
            // SAFETY: heed requires that the environment's files are not opened twice in
            // this process and not modified by others while mapped; this directory was
            // created above and is used only by this benchmark.
            let env =
                unsafe { heed::EnvOpenOptions::new().map_size(16 << 30).max_dbs(1).open(dir)? };
            let mut tx = env.write_txn()?;
            let db = env.create_database(&mut tx, None)?;
            tx.commit()?;
            Box::new(Lmdb(env, db))
        }
        other => anyhow::bail!("unknown engine {other}"),
    })
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| {
                    let p = e.path();
                    if p.is_dir() {
                        dir_bytes(&p)
                    } else {
                        e.metadata().map(|m| m.len()).unwrap_or(0)
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let seed = 42;
    eprintln!("generating {} keys and {} blocks", args.keys, args.blocks);
    let mut state: BTreeMap<Key, Value> = initial(seed).take(args.keys).collect();
    let load: Vec<Op> = state.iter().map(|(k, v)| Op::Put(*k, *v)).collect();
    let mut blocks = Vec::new();
    for v in 1..=args.blocks {
        let ops = block(seed, v, Mix::workload_b(args.ops), |p| {
            state.range(*p..).next().map(|(k, _)| *k)
        });
        for op in &ops {
            match op {
                Op::Put(k, v) => {
                    state.insert(*k, *v);
                }
                Op::Delete(k) => {
                    state.remove(k);
                }
            }
        }
        let rec = record(&ops);
        blocks.push((ops, rec));
    }
    let mut results = Vec::new();
    for name in ["wal", "redb-blob", "lmdb", "fjall", "redb"] {
        let dir = args.dir.join(name);
        let mut e = open(name, &dir).with_context(|| format!("opening {name}"))?;
        let t = Instant::now();
        if name != "wal" && name != "redb-blob" {
            for chunk in load.chunks(100_000) {
                e.commit(chunk, &[])?;
            }
        }
        let load_s = t.elapsed().as_secs_f64();
        let w0 = write_bytes();
        let t = Instant::now();
        let mut lat = Vec::new();
        for (ops, rec) in &blocks {
            let b = Instant::now();
            e.commit(ops, rec)?;
            lat.push(b.elapsed().as_secs_f64() * 1e3);
        }
        let secs = t.elapsed().as_secs_f64();
        let written = write_bytes() - w0;
        let ops: usize = blocks.iter().map(|(o, _)| o.len()).sum();
        drop(e);
        let r = serde_json::json!({
            "engine": name,
            "ops_per_s": ops as f64 / secs,
            "commit_ms_p50": bavl_labkit::stats::percentile(&lat, 50.0),
            "commit_ms_p99": bavl_labkit::stats::percentile(&lat, 99.0),
            "bytes_written_per_op": written as f64 / ops as f64,
            "disk_bytes": dir_bytes(&dir),
            "initial_load_s": load_s,
        });
        eprintln!("{r}");
        results.push(r);
        let _ = fs::remove_dir_all(&dir);
    }
    let doc = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "keys": args.keys,
        "blocks": args.blocks,
        "ops_per_block": args.ops,
        "notes": "Per-key engines get the initial state loaded first (not timed in ops_per_s). \
                  wal and redb-blob write only the blocks' log records. bytes_written_per_op \
                  is the kernel's write_bytes delta over the measured blocks.",
        "results": results,
    });
    if let Some(p) = args.out.parent() {
        fs::create_dir_all(p)?;
    }
    fs::write(&args.out, serde_json::to_string_pretty(&doc)? + "\n")?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
