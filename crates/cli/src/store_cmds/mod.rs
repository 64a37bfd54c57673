//! The durable store's operator commands: `bavl check`, `bavl stats`, `bavl get` and
//! `bavl prove`, and the helpers the load and crash tests share with them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use bavl_core::{Digest, Snapshot, MAX_KEY_LEN};
use bavl_store::meta::{classify, FileKind};
use bavl_store::{CheckpointPolicy, DirBackend, Options, Recovery, Store, StoreError, StoreStats};
use serde::Serialize;
use serde_json::json;

use crate::text::{bytes, group, human, ms, shell_word};
use crate::verify::{parse_hex, HexBytes};

mod read;
mod stats;

pub use read::{get, prove, GetArgs, ProveArgs, GET_HELP, PROVE_HELP};
pub use stats::{stats, PagingJson, RecoveryJson, StatsArgs, StatsJson, STATS_HELP};

/// Fails unless `db` is a directory holding a bavl store (so that the read-only commands
/// never create one by accident).
pub fn require_store(db: &Path) -> Result<()> {
    let meta = std::fs::metadata(db);
    match meta {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no store at {}: the directory does not exist", db.display())
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", db.display())),
        Ok(m) if !m.is_dir() => bail!("{} is not a directory", db.display()),
        Ok(_) => {}
    }
    let entries = std::fs::read_dir(db).with_context(|| format!("listing {}", db.display()))?;
    let mut store_files = 0;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", db.display()))?;
        let name = entry.file_name();
        let kind = classify(&name.to_string_lossy());
        let data = matches!(
            kind,
            FileKind::Wal(_)
                | FileKind::Checkpoint(_)
                | FileKind::Skeleton(_)
                | FileKind::Chunks(_)
        );
        // An unfinished sync or import counts: opening it is refused by the store with
        // what it is and what to do (resume, or delete the directory).
        if data || kind == FileKind::Meta || name == bavl_store::JOURNAL_FILE {
            store_files += 1;
        }
    }
    if store_files == 0 {
        bail!("{} is not a bavl store (no bavl.meta, log or checkpoint file)", db.display());
    }
    Ok(())
}

/// Adds what to do next to a store error: a damaged store names `bavl check`.
pub fn store_error(db: &Path, e: StoreError) -> anyhow::Error {
    let hint = match &e {
        StoreError::Corrupted { .. } => format!(
            "the store at {} is damaged and was not opened (`bavl check --db {}` lists every problem)",
            db.display(),
            shell_word(&db.to_string_lossy())
        ),
        StoreError::UnknownVersion { .. } => {
            return anyhow::anyhow!(
                "{e} (versions before the newest checkpoint are gone; of the later ones, \
                 --keep N retains the N newest)"
            )
        }
        // The message already ends with the OS error, which is also its source: printed
        // with the chain (`{:#}`), it would appear twice.
        StoreError::Io { .. } => return anyhow::anyhow!("{e}"),
        _ => return anyhow::Error::from(e),
    };
    anyhow::Error::from(e).context(hint)
}

/// Opens an existing store read-only (a shared lock; nothing on disk is changed, so a
/// backup, a snapshot or a read-only mount can be read), retaining the `keep` newest
/// versions, paged with a cache of [`READ_CACHE_MIB`] whether or not the store is paged
/// on disk (`docs/design.md` §8.5.1): its state is never read into memory whole.
pub fn open_existing(db: &Path, keep: u64) -> Result<Store> {
    open_existing_with(db, keep, None)
}

/// Chunk bodies a command that opens a store keeps in memory by default, MiB: the
/// library's default budget ([`bavl_store::DEFAULT_CACHE_BYTES`]).
pub const READ_CACHE_MIB: u64 = bavl_store::DEFAULT_CACHE_BYTES >> 20;

/// [`open_existing`] with a cache of `cache_mib` MiB of chunk bodies (`None`:
/// [`READ_CACHE_MIB`]). A store whose state is within the cache is read whole and never
/// evicted; a larger one runs within it plus its skeleton.
pub fn open_existing_with(db: &Path, keep: u64, cache_mib: Option<u64>) -> Result<Store> {
    require_store(db)?;
    let cache_mib = cache_mib.unwrap_or(READ_CACHE_MIB);
    // A paged store returns freed memory to the OS (`bavl_alloc::paged_memory`).
    #[cfg(feature = "mimalloc")]
    bavl_alloc::paged_memory();
    let opts = Options {
        keep_recent: keep,
        checkpoint: CheckpointPolicy::Manual,
        read_only: true,
        ..Options::paged(cache_mib << 20)
    };
    Store::open(db, opts).map_err(|e| store_error(db, e))
}

/// The memory budget of a command that opens a store (`get`, `prove`, `stats`, `check`).
#[derive(clap::Args, Clone)]
pub struct CacheArg {
    /// Keep at most M MiB of chunk bodies in memory; the others are read back from the
    /// store's files, verified, as needed, so a state larger than memory is never read
    /// whole (0 keeps none). Memory: this plus the skeleton, about 4.4 bytes a key.
    #[arg(long, value_name = "M", default_value_t = READ_CACHE_MIB,
          value_parser = clap::value_parser!(u64).range(..=1 << 30))]
    pub cache_mib: u64,
}

/// The store's directory (every store command).
#[derive(clap::Args, Clone)]
pub struct DbArg {
    /// The store's directory.
    #[arg(long, value_name = "PATH")]
    pub db: PathBuf,
}

fn parse_key(s: &str) -> Result<HexBytes, String> {
    let key = parse_hex(s)?;
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!("a key is 1..={MAX_KEY_LEN} bytes, this one is {}", key.len()));
    }
    Ok(key)
}

// ---------------------------------------------------------------------------------------
// bavl check

#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    cache: CacheArg,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub const CHECK_HELP: &str = "Examples:
  bavl check --db /var/lib/bavl
  bavl check --db /var/lib/bavl --json | jq .problems

Nothing is changed on disk, and nothing is opened for writing: a backup, a snapshot or a
read-only mount can be checked. A record cut short at the end of the log and left-over
temporary files are reported as notes (opening the store for writing discards them). The
store is checked under a shared lock: other checks, `stats`, `get` and `prove` may run at
the same time, but not a writer.

Exit status: 0 no problem found, 1 problems found (each names the file, the byte offset and
what is wrong), 2 bad arguments, no store there, the store is in use by a writer, or it is
unreadable, 141 the reader of the output went away (`| head`).";

#[derive(Serialize)]
struct ProblemJson {
    file: String,
    offset: u64,
    what: String,
}

pub fn check(args: &CheckArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    require_store(db)?;
    let backend: std::sync::Arc<dyn bavl_store::Backend> = std::sync::Arc::new(
        DirBackend::open_read_only(db)
            .with_context(|| format!("opening the store at {}", db.display()))?,
    );
    let r = bavl_store::check::check_within(&backend, args.cache.cache_mib << 20)
        .with_context(|| format!("checking the store at {}", db.display()))?;
    drop(backend);
    let problems: Vec<ProblemJson> = r
        .problems
        .iter()
        .map(|p| ProblemJson { file: p.file.clone(), offset: p.offset, what: p.what.clone() })
        .collect();
    if args.json {
        let head = r.head.map(|(v, root)| json!({ "version": v, "root": hex::encode(root) }));
        let out = json!({
            "db": db.display().to_string(),
            "ok": r.ok(),
            "problems": problems,
            "notes": r.notes,
            "checkpoints_checked": r.checkpoints_checked,
            "records_checked": r.records_checked,
            "versions_replayed": r.versions_replayed,
            "head": head,
            "keys": r.keys,
            "chunks": r.chunks,
            "elapsed_ms": ms(r.elapsed),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let mut o = Vec::new();
        o.push(format!("bavl check {}", db.display()));
        for p in &r.problems {
            let file = if p.file.is_empty() { "(store)" } else { &p.file };
            o.push(format!("  PROBLEM  {file} at byte {}: {}", p.offset, p.what));
        }
        for n in &r.notes {
            o.push(format!("  note     {n}"));
        }
        o.push(format!(
            "intact     {} checkpoint file(s) (every chunk verified against its root), {} log record(s) (checksums hold)",
            r.checkpoints_checked,
            group(r.records_checked)
        ));
        match r.head {
            Some((v, root)) => {
                o.push(format!(
                    "replayed   {} version(s) after the newest checkpoint, every recorded root matched",
                    group(r.versions_replayed)
                ));
                o.push(format!("head       version {v}, root {}", hex::encode(root)));
                o.push(format!(
                    "state      {} keys in {} chunks, invariants hold",
                    group(r.keys),
                    group(r.chunks)
                ));
            }
            None => o.push("head       not rebuilt (a file is damaged)".into()),
        }
        o.push(format!("elapsed    {}", human(r.elapsed)));
        o.push(if r.ok() {
            "result     OK: no problem found".into()
        } else {
            format!("result     {} PROBLEM(S)", r.problems.len())
        });
        println!("{}", o.join("\n"));
    }
    Ok(if r.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

// ---------------------------------------------------------------------------------------
// bavl stats
