//! The demo's report: the state, each peer's part and fate, the totals and the root
//! check. Printed for people, written as JSON for scripts.

use bavl_sync::http::{Byzantine, SourceEvent};
use serde::Serialize;

use super::SyncOutcome;
use crate::text::group;

/// Time spent in each phase, in milliseconds.
#[derive(Serialize, Default)]
pub struct Timings {
    /// Inserting every key (hashes stay stale).
    pub insert_ms: f64,
    /// `snapshot()`: hashing the whole tree.
    pub hash_ms: f64,
    /// Writing both versions as a `bavl export` directory.
    pub export_ms: f64,
    /// Starting the peer processes until each listens.
    pub peers_ms: f64,
    /// The sync over HTTP: manifests, chunks, verification, the store written and opened,
    /// its root checked.
    pub sync_ms: f64,
    /// The whole demo.
    pub total_ms: f64,
}

/// One peer: what it really was, what the syncing node made of it.
#[derive(Serialize)]
pub struct PeerReport {
    pub peer: usize,
    pub url: String,
    pub pid: u32,
    /// `honest` or the `--byzantine` kind (known to the report, never to the syncing node).
    pub behaviour: String,
    /// `live`, `banned` or `dropped`, as the syncing node judged it.
    pub health: String,
    pub reason: Option<String>,
    /// Chunks it sent that verified and were kept.
    pub chunks: u64,
    /// Bytes of its complete responses (manifests, chunks, lies).
    pub bytes: u64,
    pub requests: u64,
    pub transient_failures: u64,
}

/// The whole report.
#[derive(Serialize, Default)]
pub struct Report {
    /// The sync succeeded and the store it wrote opens with the source's root and key count.
    pub ok: bool,
    pub error: Option<String>,
    pub keys: u64,
    pub key_len: usize,
    pub value_len: usize,
    pub seed: u64,
    pub capacity: u32,
    pub chunks: u64,
    pub total_chunk_bytes: u64,
    /// Values changed in the later version the liars also hold.
    pub later_changed: u64,
    /// The version synced.
    pub version: u64,
    /// Verification threads of the syncing node.
    pub threads: usize,
    pub timings: Timings,
    /// Chunks fetched and verified, and their bytes (lies included).
    pub fetched: u64,
    pub fetched_bytes: u64,
    pub mb_per_s: f64,
    /// Chunks fetched again after a failed answer, speculative copies sent.
    pub refetches: u64,
    pub speculative: u64,
    /// Most bytes held for unverified responses at once.
    pub peak_buffered_bytes: u64,
    pub peers: Vec<PeerReport>,
    /// Peers banned, by number.
    pub banned: Vec<usize>,
    /// Peers dropped (unavailable or unreliable, not liars), by number.
    pub dropped: Vec<usize>,
    /// Every liar is banned (a 5xx one dropped), or was never needed (a staller the sync
    /// did not wait for), and no chunk of a lie was kept; no honest peer was banned or
    /// dropped.
    pub liars_caught: bool,
    pub source_root: String,
    pub synced_root: Option<String>,
    pub roots_equal: bool,
}

impl Report {
    /// Fills in the sync's part of the report.
    pub fn add_sync(&mut self, s: SyncOutcome, peers: &[(Option<Byzantine>, u32)]) {
        for (i, (&(kind, pid), url)) in peers.iter().zip(&s.urls).enumerate() {
            self.peers.push(super::peer_report(i, kind, url, pid, s.sources.get(i)));
        }
        for e in &s.events {
            match e {
                SourceEvent::Banned { source, .. } => self.banned.push(source.0 as usize),
                SourceEvent::Dropped { source, .. } => self.dropped.push(source.0 as usize),
            }
        }
        self.liars_caught = self.peers.iter().zip(peers).all(|(p, (kind, _))| match kind {
            None => p.health == "live",
            // Its chunks are the true ones (asked for before its manifest came, they
            // verify): only its manifest lies.
            Some(b) if b.lies_on_manifests() => p.health == "banned",
            Some(Byzantine::HttpError) => p.health != "banned" && p.chunks == 0,
            // Lies that show only if the sync waits for them (the grace period, a body to its
            // end, several redirects): a source that has delivered takes over what they hold
            // (docs/sync-protocol.md §4, rescue), so they end banned, dropped (outrun,
            // unproductive) or, in a sync too short to tell, live; nothing is taken from them.
            Some(Byzantine::Stall | Byzantine::Trickle | Byzantine::Endless) => p.chunks == 0,
            Some(Byzantine::RedirectLoop) => p.chunks == 0,
            Some(_) => p.health == "banned" && p.chunks == 0,
        });
        self.fetched_bytes = s.fetched_bytes;
        self.refetches = s.status.refetches;
        self.speculative = s.status.speculative;
        self.peak_buffered_bytes = s.status.peak_buffered;
        self.banned.sort_unstable();
        self.dropped.sort_unstable();
        match s.result {
            Ok(d) => {
                self.fetched = d.fetched;
                self.mb_per_s = s.fetched_bytes as f64 / 1e6 / d.seconds.max(1e-9);
                let root = hex::encode(d.root);
                self.roots_equal = root == self.source_root;
                self.ok = self.roots_equal && d.keys == self.keys;
                self.synced_root = Some(root);
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mut o = Vec::new();
        self.render_state(&mut o);
        self.render_timings(&mut o);
        self.render_peers(&mut o);
        self.render_result(&mut o);
        o.join("\n") + "\n"
    }

    fn render_state(&self, o: &mut Vec<String>) {
        let liars = self.peers.iter().filter(|p| p.behaviour != "honest").count();
        let (keys, peers) = (group(self.keys), self.peers.len());
        o.push(format!(
            "bavl-harness demo: sync {keys} keys over HTTP from {peers} peer processes ({liars} lying), \
             knowing only the root hash"
        ));
        o.push(String::new());
        o.push(format!(
            "state    {keys} keys ({}-byte keys, {}-byte values, seed {}), capacity {}, version {}",
            self.key_len, self.value_len, self.seed, self.capacity, self.version
        ));
        let average = group(self.total_chunk_bytes / self.chunks.max(1));
        o.push(format!(
            "chunks   {} chunks, {} in total ({average} B a chunk on average); a later version \
             ({} values changed) exported beside it",
            group(self.chunks),
            mb(self.total_chunk_bytes),
            group(self.later_changed)
        ));
        let pids: Vec<String> = self.peers.iter().map(|p| p.pid.to_string()).collect();
        o.push(format!(
            "peers    `bavl serve --dir` processes on 127.0.0.1, liars `bavl-harness serve-liar` (pids {})",
            pids.join(" ")
        ));
    }

    fn render_timings(&self, o: &mut Vec<String>) {
        let t = &self.timings;
        let rows = [
            ("build", t.insert_ms, format!("insert {} keys", group(self.keys))),
            ("hash", t.hash_ms, "snapshot(): hash the whole tree".into()),
            (
                "export",
                t.export_ms,
                "write both versions as files (the `bavl export` layout)".into(),
            ),
            ("peers", t.peers_ms, format!("start {} peer processes", self.peers.len())),
            (
                "sync",
                t.sync_ms,
                format!(
                    "HTTP fetch, verify on {} threads, write to disk, open, root check",
                    self.threads
                ),
            ),
            ("total", t.total_ms, String::new()),
        ];
        o.push(String::new());
        o.push("timings".into());
        for (name, ms, what) in rows {
            o.push(format!("  {name:<8} {:>9}  {what}", secs(ms)).trim_end().to_string());
        }
    }

    fn render_peers(&self, o: &mut Vec<String>) {
        o.push(String::new());
        o.push(
            "peer  behaviour        verdict   chunks        bytes  requests  reason".to_string(),
        );
        for p in &self.peers {
            o.push(
                format!(
                    "  {:<3} {:<16} {:<8} {:>7} {:>12} {:>9}  {}",
                    p.peer,
                    p.behaviour,
                    p.health,
                    group(p.chunks),
                    crate::text::bytes(p.bytes),
                    group(p.requests),
                    p.reason.as_deref().unwrap_or("")
                )
                .trim_end()
                .to_string(),
            );
        }
    }

    fn render_result(&self, o: &mut Vec<String>) {
        o.push(String::new());
        o.push(format!(
            "sync     {} chunks verified on arrival, {} fetched ({:.1} MB/s); {} refetched after \
             a failed answer, {} speculative copies; peak budget {} (request limits in flight \
             and bodies awaiting verification)",
            group(self.fetched),
            mb(self.fetched_bytes),
            self.mb_per_s,
            group(self.refetches),
            group(self.speculative),
            mb(self.peak_buffered_bytes)
        ));
        let caught = if self.liars_caught { " (every liar caught, no honest peer)" } else { "" };
        o.push(format!(
            "banned   {} peer(s): {}{caught}; dropped: {}",
            self.banned.len(),
            list(&self.banned),
            list(&self.dropped)
        ));
        o.push(format!("root     source  {}", self.source_root));
        o.push(format!("         synced  {}", self.synced_root.as_deref().unwrap_or("(none)")));
        o.push(match (&self.error, self.ok) {
            (Some(e), _) => format!("result   FAILED: {e}"),
            (None, true) => "result   OK: the synced store opens at the source root".into(),
            (None, false) => "result   FAILED: the roots differ".into(),
        });
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn secs(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

fn list<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
}
