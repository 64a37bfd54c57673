//! What a joiner writes when its state sync ends: `restore-report.json` in the
//! application's directory, for the chain experiments (`bavl-chainlab`) and for anyone
//! who wants to know how a join went without reading logs.
//!
//! The clock starts at the first `OfferSnapshot` (so CometBFT's `discovery_time` before
//! it is not counted) and stops when the restored state is durable. Counts are of what
//! the application refused: offers (a snapshot whose root is not the trusted app hash,
//! bad metadata), bundles (a chunk that did not verify: refetched elsewhere, sender
//! rejected) and whole snapshots (the baseline's mismatch after its last chunk).

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The counters of one state sync.
#[derive(Debug, Default)]
pub(crate) struct SyncReport {
    started: Option<(Instant, u128)>,
    pub(crate) offers: u64,
    pub(crate) offers_refused: u64,
    pub(crate) bundles_kept: u64,
    /// Bytes of every chunk received, kept or not, of every snapshot tried.
    pub(crate) bytes_received: u64,
    pub(crate) bundles_refused: u64,
    pub(crate) snapshots_rejected: u64,
}

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// The peak resident set of this process (`VmHWM`), in bytes; 0 where unknown.
pub fn peak_rss_bytes() -> u64 {
    peak_rss_bytes_of("self")
}

/// The peak resident set (`VmHWM`) of process `pid` ("self" for this one), in bytes; 0
/// where unknown (no such process, no /proc).
pub fn peak_rss_bytes_of(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

impl SyncReport {
    /// Counts an offer; the first one starts the clock.
    pub(crate) fn offered(&mut self, refused: bool) {
        self.started.get_or_insert_with(|| (Instant::now(), unix_ms()));
        self.offers += 1;
        self.offers_refused += u64::from(refused);
    }

    /// Writes the report (best effort: a failure is logged, the restore stands).
    pub(crate) fn write(&self, home: &Path, height: u64, mode: &str, bytes: u64) {
        let (secs, started_ms) = match self.started {
            Some((at, ms)) => (at.elapsed().as_secs_f64(), ms),
            None => (0.0, unix_ms()),
        };
        let report = serde_json::json!({
            "height": height,
            "mode": mode,
            "restore_s": secs,
            "started_unix_ms": started_ms as u64,
            "ended_unix_ms": unix_ms() as u64,
            "bytes": bytes,
            "bytes_received": self.bytes_received,
            "offers": self.offers,
            "offers_refused": self.offers_refused,
            "bundles_kept": self.bundles_kept,
            "bundles_refused": self.bundles_refused,
            "snapshots_rejected": self.snapshots_rejected,
            "peak_rss_bytes": peak_rss_bytes(),
        });
        let path = home.join("restore-report.json");
        let text = format!("{report:#}\n");
        if let Err(e) = bavl_store::write_file_atomic(&path, text.as_bytes()) {
            tracing::warn!(path = %path.display(), "writing the restore report: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_counts_and_is_written_as_json() {
        let dir = std::env::temp_dir().join(format!("bavl-abci-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = SyncReport::default();
        r.offered(true);
        r.offered(false);
        r.bundles_kept = 3;
        r.write(&dir, 40, "bavl", 1234);
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("restore-report.json")).unwrap())
                .unwrap();
        assert_eq!((v["offers"].as_u64(), v["offers_refused"].as_u64()), (Some(2), Some(1)));
        assert_eq!((v["height"].as_u64(), v["bytes"].as_u64()), (Some(40), Some(1234)));
        assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
