//! `bavl stats`: what a store holds (versions, keys, chunks, fill, files and sizes) and
//! what opening it recovered, for people or as JSON; opened read-only.

use super::*;

#[derive(clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    db: DbArg,
    /// How many of the newest versions to retain while opening (the report shows them).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
    #[command(flatten)]
    cache: CacheArg,
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
    /// The cache of chunk bodies, when the store was opened paged (every command does).
    pub paging: Option<PagingJson>,
}

/// The pager's counters, for JSON (`bavl_store::PagingStats`).
#[derive(Serialize, Clone)]
pub struct PagingJson {
    /// Heap bytes of chunk bodies held after the last eviction.
    pub resident_bytes: u64,
    /// The most held when an eviction began: what the cache peaked at.
    pub peak_resident_bytes: u64,
    /// Heap bytes of the skeleton (inner nodes and pages of absent chunks).
    pub skeleton_bytes: u64,
    pub loads: u64,
    pub evictions: u64,
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
            paging: s.paging.map(|p| PagingJson {
                resident_bytes: p.resident_bytes,
                peak_resident_bytes: p.peak_resident_bytes,
                skeleton_bytes: p.skeleton_bytes,
                loads: p.loads,
                evictions: p.evictions,
            }),
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
        if let Some(p) = &self.paging {
            o.push(format!(
                "memory      chunk bodies {} (peak {}), skeleton {}; {} loaded, {} evicted",
                bytes(p.resident_bytes),
                bytes(p.peak_resident_bytes),
                bytes(p.skeleton_bytes),
                group(p.loads),
                group(p.evictions)
            ));
        }
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
    let store = open_existing_with(db, args.keep, Some(args.cache.cache_mib))?;
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
