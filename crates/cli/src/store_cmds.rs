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
        if matches!(kind, FileKind::Meta | FileKind::Wal(_) | FileKind::Checkpoint(_)) {
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
/// versions.
pub fn open_existing(db: &Path, keep: u64) -> Result<Store> {
    require_store(db)?;
    let opts = Options {
        keep_recent: keep,
        checkpoint: CheckpointPolicy::Manual,
        read_only: true,
        ..Options::default()
    };
    Store::open(db, opts).map_err(|e| store_error(db, e))
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
    let backend = DirBackend::open_read_only(db)
        .with_context(|| format!("opening the store at {}", db.display()))?;
    let r = bavl_store::check::check(&backend)
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

#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    db: DbArg,
    /// How many of the newest versions to retain while opening (the report shows them).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
    /// Print the statistics as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub const STATS_HELP: &str = "Examples:
  bavl stats --db /var/lib/bavl
  bavl stats --db /var/lib/bavl --json | jq .disk_bytes

Opening the store is what a restarted node does: the newest checkpoint is read (every chunk
verified against its root) and the log after it replayed (every recorded root compared).
The report shows what that took. The store is opened read-only, under a shared lock:
nothing on disk is changed (a record cut short by a crash is skipped, not discarded;
left-over temporary files are counted, not deleted), so a backup, a snapshot or a read-only
mount can be inspected, and other readers may run at the same time, but not a writer.

Exit status: 0 success, 2 bad arguments, no store there, the store is in use by a writer or
unreadable, 3 the store is damaged and was not opened (run `bavl check` for every problem),
141 the reader of the output went away (`| head`).";

/// A file of the store and its size.
#[derive(Serialize, Clone)]
pub struct FileJson {
    pub name: String,
    pub bytes: u64,
}

/// What opening found and did, for JSON.
#[derive(Serialize, Clone)]
pub struct RecoveryJson {
    pub checkpoint: Option<u64>,
    pub versions_replayed: u64,
    /// A torn record at the end of the log (cut by a writable open, skipped by a
    /// read-only one such as `bavl stats`).
    pub discarded_bytes: u64,
    /// Left-over temporary files (deleted by a writable open, counted by a read-only one).
    pub removed_temporary: u64,
    /// Why the checkpoint before the newest one was not used, if it was there.
    pub older_checkpoint_skipped: Option<String>,
    pub load_checkpoint_ms: f64,
    pub replay_ms: f64,
}

impl From<&Recovery> for RecoveryJson {
    fn from(r: &Recovery) -> Self {
        RecoveryJson {
            checkpoint: r.checkpoint,
            versions_replayed: r.replayed,
            discarded_bytes: r.discarded_bytes,
            removed_temporary: r.removed_temporary,
            older_checkpoint_skipped: r.older_checkpoint_skipped.clone(),
            load_checkpoint_ms: ms(r.load_checkpoint),
            replay_ms: ms(r.replay),
        }
    }
}

/// `Store::stats()`, for JSON and for people.
#[derive(Serialize, Clone)]
pub struct StatsJson {
    pub head: u64,
    pub root: String,
    pub oldest_retained: u64,
    pub versions_retained: u64,
    pub keys: u64,
    pub chunks: u64,
    pub capacity: u32,
    /// Keys over the room of the chunks (keys / (chunks x capacity)).
    pub fill: f64,
    /// Chunks over the fewest chunks that could hold the keys (1.0 is perfect).
    pub space_efficiency: f64,
    pub last_checkpoint: Option<u64>,
    pub checkpoint_running: Option<u64>,
    pub checkpoints_written: u64,
    pub checkpoint_bytes_written: u64,
    pub log_bytes_written: u64,
    pub ops_committed: u64,
    pub files: Vec<FileJson>,
    pub disk_bytes: u64,
}

impl From<&StoreStats> for StatsJson {
    fn from(s: &StoreStats) -> Self {
        let room = s.chunks * s.capacity as u64;
        StatsJson {
            head: s.head,
            root: hex::encode(s.head_root),
            oldest_retained: s.oldest_retained,
            versions_retained: s.retained,
            keys: s.keys,
            chunks: s.chunks,
            capacity: s.capacity,
            fill: if room == 0 { 0.0 } else { s.keys as f64 / room as f64 },
            space_efficiency: s.space_efficiency,
            last_checkpoint: s.last_checkpoint,
            checkpoint_running: s.checkpoint_running,
            checkpoints_written: s.checkpoints_written,
            checkpoint_bytes_written: s.checkpoint_bytes_written,
            log_bytes_written: s.log_bytes_written,
            ops_committed: s.ops_committed,
            files: s.files.iter().map(|(n, b)| FileJson { name: n.clone(), bytes: *b }).collect(),
            disk_bytes: s.disk_bytes,
        }
    }
}

impl StatsJson {
    /// Lines for people.
    pub fn render(&self) -> Vec<String> {
        let mut o = vec![
            format!("head        version {}, root {}", self.head, self.root),
            format!(
                "versions    {} retained ({}..={})",
                self.versions_retained, self.oldest_retained, self.head
            ),
            format!(
                "state       {} keys in {} chunks of capacity {}: fill {:.3}, space efficiency {:.3}",
                group(self.keys),
                group(self.chunks),
                self.capacity,
                self.fill,
                self.space_efficiency
            ),
            format!(
                "checkpoint  {}",
                match self.last_checkpoint {
                    Some(v) => format!("newest of version {v}"),
                    None => "none yet".into(),
                }
            ),
            format!("disk        {} in {} files", bytes(self.disk_bytes), self.files.len()),
        ];
        for f in &self.files {
            o.push(format!("  {:<32} {:>12}", f.name, bytes(f.bytes)));
        }
        o
    }
}

fn render_recovery(r: &Recovery) -> String {
    let base = match r.checkpoint {
        Some(v) => format!("loaded the checkpoint of version {v} in {}", human(r.load_checkpoint)),
        None => "no checkpoint".into(),
    };
    let skipped = match &r.older_checkpoint_skipped {
        Some(why) => format!("; the older checkpoint was not used: {why}"),
        None => String::new(),
    };
    format!(
        "opening     {base}, replayed {} version(s) in {}, discarded {} byte(s) of a torn record, deleted {} temporary file(s){skipped}",
        group(r.replayed),
        human(r.replay),
        r.discarded_bytes,
        r.removed_temporary
    )
}

pub fn stats(args: &StatsArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing(db, args.keep)?;
    let s = store.stats().map_err(|e| store_error(db, e))?;
    let s = StatsJson::from(&s);
    if args.json {
        let mut v = serde_json::to_value(&s)?;
        v["db"] = json!(db.display().to_string());
        v["recovery"] = serde_json::to_value(RecoveryJson::from(store.recovery()))?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("bavl stats {}", db.display());
        println!("{}", s.render().join("\n"));
        println!("{}", render_recovery(store.recovery()));
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------
// bavl get / bavl prove

/// A key at a retained version: the arguments `get` and `prove` share.
#[derive(clap::Args)]
pub struct KeyAt {
    /// The key, in hex (1 to 1024 bytes).
    #[arg(long, value_name = "HEX", value_parser = parse_key)]
    key: HexBytes,
    /// A retained version (default: the latest).
    #[arg(long, value_name = "V")]
    version: Option<u64>,
    /// How many of the newest versions to retain while opening (for --version).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
}

#[derive(clap::Args)]
pub struct GetArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    at: KeyAt,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub const GET_HELP: &str = "Examples:
  bavl get --db /var/lib/bavl --key 6b3031
  bavl get --db /var/lib/bavl --key 6b3031 --version 41 --json

Prints the value in hex, or `absent`. Versions older than the newest checkpoint are gone;
of the later ones, the --keep newest are retained. The store is opened read-only (a shared
lock; nothing on disk is changed), so a backup or a read-only mount can be read.

Exit status: 0 the key is present, 1 it is absent, 2 bad arguments, no store there, the
store is in use by a writer or unreadable, or the version is not retained, 3 the store is
damaged, 141 the reader of the output went away.";

#[derive(clap::Args)]
pub struct ProveArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    at: KeyAt,
    /// Write the proof's raw bytes to FILE instead of printing it in hex.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub const PROVE_HELP: &str = "Examples:
  bavl prove --db /var/lib/bavl --key 6b3031
  bavl prove --db /var/lib/bavl --key 6b3031 --version 41 --out proof.bin
  bavl prove --db /var/lib/bavl --key 6b3031 --json | jq -r .verify_command | sh

A membership proof if the key is present at that version (it proves the value), else an
absence proof. Either verifies against the version's root alone: the output ends with the
`bavl verify` command that checks it. The store is opened read-only (a shared lock;
nothing on disk is changed).

Exit status: 0 a proof was produced, 2 bad arguments, no store there, the store is in use
by a writer or unreadable, or the version is not retained, 3 the store is damaged, 141 the
reader of the output went away.";

fn version_snapshot(db: &Path, store: &Store, version: Option<u64>) -> Result<Snapshot> {
    match version {
        None => Ok(store.latest()),
        Some(v) => store.snapshot(v).map_err(|e| store_error(db, e)),
    }
}

pub fn get(args: &GetArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing(db, args.at.keep)?;
    let snap = version_snapshot(db, &store, args.at.version)?;
    let version = args.at.version.unwrap_or(store.version());
    let value = snap.get(&args.at.key);
    if args.json {
        let out = json!({
            "version": version,
            "root": hex::encode(snap.root_hash()),
            "key": hex::encode(&args.at.key),
            "present": value.is_some(),
            "value": value.map(hex::encode),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        match value {
            Some(v) => println!("{}", hex::encode(v)),
            None => println!("absent"),
        }
    }
    Ok(if value.is_some() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The `bavl verify` command line that checks a proof.
fn verify_command(
    root: &Digest,
    kind: &str,
    key: &[u8],
    value: Option<&[u8]>,
    proof: Result<&Path, &[u8]>,
) -> String {
    let mut c = format!(
        "bavl verify --root {} --kind {kind} --key {}",
        hex::encode(root),
        hex::encode(key)
    );
    if let Some(v) = value {
        c += &format!(" --value {}", hex::encode(v));
    }
    match proof {
        Ok(path) => c += &format!(" --proof {}", shell_word(&path.to_string_lossy())),
        Err(bytes) => c += &format!(" --proof-hex {}", hex::encode(bytes)),
    }
    c
}

pub fn prove(args: &ProveArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing(db, args.at.keep)?;
    let snap = version_snapshot(db, &store, args.at.version)?;
    let version = args.at.version.unwrap_or(store.version());
    let root = snap.root_hash();
    let key = &args.at.key[..];
    let value = snap.get(key);
    let (kind, proof) = match value {
        Some(_) => ("membership", snap.prove_membership(key)),
        None => ("absence", snap.prove_absence(key)),
    };
    let Some(proof) = proof else {
        bail!("the snapshot gave no {kind} proof for key {} (a bug)", hex::encode(key));
    };
    if let Some(path) = &args.out {
        std::fs::write(path, &proof).with_context(|| format!("writing {}", path.display()))?;
    }
    let how = match &args.out {
        Some(path) => Ok(path.as_path()),
        None => Err(&proof[..]),
    };
    let command = verify_command(&root, kind, key, value, how);
    if args.json {
        let out = json!({
            "version": version,
            "root": hex::encode(root),
            "kind": kind,
            "key": hex::encode(key),
            "value": value.map(hex::encode),
            "proof": if args.out.is_none() { Some(hex::encode(&proof)) } else { None },
            "proof_file": args.out.as_ref().map(|p| p.display().to_string()),
            "proof_bytes": proof.len(),
            "verify_command": command,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("version  {version}");
        println!("root     {}", hex::encode(root));
        println!("kind     {kind}");
        println!("key      {}", hex::encode(key));
        if let Some(v) = value {
            println!("value    {}", hex::encode(v));
        }
        match &args.out {
            Some(path) => println!("proof    {} bytes written to {}", proof.len(), path.display()),
            None => println!("proof    {} ({} bytes)", hex::encode(&proof), proof.len()),
        }
        println!("verify   {command}");
    }
    Ok(ExitCode::SUCCESS)
}
