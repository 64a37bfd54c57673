//! The demo's report: what was built, how the sync went, per-peer verdicts, and whether the
//! rebuilt root equals the source root. Printed for people, written as JSON for scripts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::peer::Behaviour;
use super::sync::SyncOutcome;

/// Time spent in each phase, in milliseconds.
#[derive(Serialize, Default)]
pub struct Timings {
    /// Inserting every key (hashes stay stale).
    pub insert_ms: f64,
    /// `snapshot()`: hashing the whole tree.
    pub hash_ms: f64,
    /// Exporting every chunk once, on one thread.
    pub export_ms: f64,
    /// Fetching and verifying every chunk (wall time, all threads).
    pub sync_ms: f64,
    /// Of which, summed over worker threads: fetching (exports by the peers)...
    pub fetch_cpu_ms: f64,
    /// ...and `verify_chunk`.
    pub verify_cpu_ms: f64,
    /// `Restore::finish`: linking the chunks and checking the root.
    pub rebuild_ms: f64,
    /// The whole demo.
    pub total_ms: f64,
}

/// What the syncing side observed of one peer, and what the peer really was.
#[derive(Serialize)]
pub struct PeerReport {
    pub peer: usize,
    pub behaviour: Behaviour,
    pub served: u64,
    pub rejected: u64,
    pub banned: bool,
    pub first_error: Option<String>,
    pub errors: BTreeMap<String, u64>,
}

/// The whole report.
#[derive(Serialize, Default)]
pub struct Report {
    /// The sync succeeded and the rebuilt root equals the source root.
    pub ok: bool,
    pub error: Option<String>,
    pub keys: u64,
    pub key_len: usize,
    pub value_len: usize,
    pub seed: u64,
    pub capacity: u32,
    pub chunks: u64,
    pub total_chunk_bytes: u64,
    pub threads: usize,
    pub timings: Timings,
    pub accepted: u64,
    pub refetched: u64,
    /// Accepted chunks whose index is below that of the chunk accepted just before.
    pub out_of_order: u64,
    pub first_arrivals: Vec<u64>,
    pub peers: Vec<PeerReport>,
    pub banned: Vec<usize>,
    /// Every liar was banned and no honest peer was.
    pub liars_banned: bool,
    pub source_root: String,
    pub rebuilt_root: Option<String>,
    pub roots_equal: bool,
}

pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl Report {
    /// Fills in the sync's part of the report.
    pub fn add_sync(&mut self, s: &SyncOutcome, behaviours: &[Behaviour]) {
        self.timings.sync_ms = ms(s.wall);
        self.timings.fetch_cpu_ms = ms(s.fetch_cpu);
        self.timings.verify_cpu_ms = ms(s.verify_cpu);
        self.timings.rebuild_ms = ms(s.rebuild);
        self.accepted = s.arrivals.len() as u64;
        self.refetched = s.refetched;
        self.out_of_order = s.arrivals.windows(2).filter(|w| w[1] < w[0]).count() as u64;
        self.first_arrivals = s.arrivals.iter().take(8).copied().collect();
        for (peer, (p, &behaviour)) in s.peers.iter().zip(behaviours).enumerate() {
            self.peers.push(PeerReport {
                peer,
                behaviour,
                served: p.served,
                rejected: p.rejected,
                banned: p.banned,
                first_error: p.first_error.clone(),
                errors: p.errors.clone(),
            });
        }
        self.banned = self.peers.iter().filter(|p| p.banned).map(|p| p.peer).collect();
        self.liars_banned =
            self.peers.iter().all(|p| p.banned == (p.behaviour != Behaviour::Honest));
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
        let liars = self.peers.iter().filter(|p| p.behaviour != Behaviour::Honest).count();
        let (keys, peers) = (group(self.keys), self.peers.len());
        o.push(format!("bavl demo: sync {keys} keys from {peers} untrusted peers ({liars} lying), knowing only the root hash"));
        o.push(String::new());
        o.push(format!(
            "state    {keys} keys ({}-byte keys, {}-byte values, seed {}), capacity {}",
            self.key_len, self.value_len, self.seed, self.capacity
        ));
        let average = group(self.total_chunk_bytes / self.chunks.max(1));
        let (chunks, total) = (group(self.chunks), mb(self.total_chunk_bytes));
        o.push(format!(
            "chunks   {chunks} chunks, {total} in total ({average} B a chunk on average)"
        ));
    }

    fn render_timings(&self, o: &mut Vec<String>) {
        let t = &self.timings;
        let (fetch, verify) = (secs(t.fetch_cpu_ms), secs(t.verify_cpu_ms));
        let rows = [
            ("build", t.insert_ms, format!("insert {} keys", group(self.keys))),
            ("hash", t.hash_ms, "snapshot(): hash the whole tree".into()),
            ("export", t.export_ms, "export every chunk once, 1 thread".into()),
            (
                "sync",
                t.sync_ms,
                format!(
                    "fetch + verify on {} threads (summed: fetch {fetch}, verify {verify})",
                    self.threads
                ),
            ),
            ("rebuild", t.rebuild_ms, "Restore::finish: link the chunks, check the root".into()),
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
        o.push("peers    behaviour      served  rejected  banned  first rejection [errors]".into());
        for p in &self.peers {
            let tally: Vec<String> = p.errors.iter().map(|(k, n)| format!("{k} x{n}")).collect();
            let first = match &p.first_error {
                Some(e) => format!("{e} [{}]", tally.join(", ")),
                None => "-".into(),
            };
            let banned = if p.banned { "yes" } else { "no" };
            let (label, served) = (p.behaviour.label(), group(p.served));
            o.push(format!(
                "  {:<6} {label:<13} {served:>7}  {:>8}  {banned:<6}  {first}",
                p.peer, p.rejected
            ));
        }
    }

    fn render_result(&self, o: &mut Vec<String>) {
        let (accepted, late) = (group(self.accepted), group(self.out_of_order));
        let first = list(&self.first_arrivals);
        o.push(String::new());
        o.push(format!("sync     {accepted} chunks added in arrival order ({late} arrived after a higher index; first: {first})"));
        o.push(format!(
            "         {} chunk(s) rejected and refetched from another peer",
            self.refetched
        ));
        let all = if self.liars_banned { " (every liar, no honest peer)" } else { "" };
        o.push(format!("banned   {} peer(s): {}{all}", self.banned.len(), list(&self.banned)));
        o.push(format!("root     source  {}", self.source_root));
        o.push(format!("         rebuilt {}", self.rebuilt_root.as_deref().unwrap_or("(none)")));
        o.push(match (&self.error, self.ok) {
            (Some(e), _) => format!("result   FAILED: {e}"),
            (None, true) => "result   OK: the rebuilt root equals the source root".into(),
            (None, false) => "result   FAILED: the roots differ".into(),
        });
    }
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
    let digits = n.to_string().into_bytes();
    let groups: Vec<&str> =
        digits.rchunks(3).rev().map(|g| std::str::from_utf8(g).unwrap_or("?")).collect();
    groups.join(",")
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
