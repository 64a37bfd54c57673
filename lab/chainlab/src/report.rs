//! `docs/results/chain.json` and its CSV and PNG: the figures of `docs/chain.md` §11, the runs
//! they come from, the machine, the command and the CometBFT settings that bound them.

use std::path::Path;

use anyhow::{Context, Result};
use bavl_labkit::stats::median;
use bavl_labkit::Machine;
use serde_json::{json, Value};

use crate::blocks::Throughput;
use crate::join::Join;
use crate::net::Bins;
use crate::Setup;

pub struct Report {
    /// Experiments that could not run to the end (the figures of the others stand).
    pub errors: Vec<String>,
    setup: Setup,
    cometbft: String,
    lies: Vec<&'static str>,
    /// Probed when the run starts; the load average is read again when it is written.
    machine: Machine,
    pub joins: Vec<Join>,
    pub throughput: Vec<Throughput>,
}

impl Report {
    pub fn new(setup: &Setup, bins: &Bins, lies: &[&'static str]) -> Report {
        let v = std::process::Command::new(&bins.cometbft).arg("version").output();
        let cometbft =
            v.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
        Report {
            errors: vec![],
            setup: setup.clone(),
            cometbft,
            lies: lies.to_vec(),
            machine: Machine::probe(),
            joins: vec![],
            throughput: vec![],
        }
    }

    /// The restored runs of `variant` (failed ones are counted apart).
    fn runs(&self, variant: &str) -> Vec<&Join> {
        self.joins.iter().filter(|j| j.variant == variant && j.restored).collect()
    }

    fn failed(&self, variant: &str) -> usize {
        self.joins.iter().filter(|j| j.variant == variant && !j.restored).count()
    }

    fn median_of(&self, variant: &str, f: impl Fn(&Join) -> f64) -> Option<f64> {
        let v: Vec<f64> = self.runs(variant).into_iter().map(f).collect();
        (!v.is_empty()).then(|| median(&v))
    }

    fn variants(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for j in &self.joins {
            if !v.contains(&j.variant) {
                v.push(j.variant.clone());
            }
        }
        v
    }

    fn join_json(&self) -> Value {
        let byz = |f: &str, lie: &str| format!("{f}+1-{lie}");
        let t = |v: &str| self.median_of(v, |j| j.restore_s);
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b.max(1e-9));
        let per_variant: Value = self
            .variants()
            .iter()
            .map(|v| {
                let runs = self.runs(v);
                let max = |f: fn(&Join) -> u64| runs.iter().map(|j| f(j)).max().unwrap_or(0);
                (
                    v.clone(),
                    json!({
                        "restore_s_median": t(v),
                        "from_start_s_median": self.median_of(v, |j| j.from_start_s),
                        "bytes_restored_median": self.median_of(v, |j| j.bytes as f64),
                        "bytes_received_median": self.median_of(v, |j| j.bytes_received as f64),
                        "app_peak_rss_bytes_max": max(|j| j.app_peak_rss_bytes),
                        "node_peak_rss_bytes_max": max(|j| j.node_peak_rss_bytes),
                        "runs": runs.len(),
                        "failed_runs": self.failed(v),
                    }),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        let per_lie: serde_json::Map<String, Value> = self
            .lies
            .iter()
            .map(|&l| {
                let (a, b) = (t(&byz("bavl", l)), t(&byz("baseline", l)));
                (
                    l.to_string(),
                    json!({"join_s_bavl": a, "join_s_baseline": b, "join_speedup": ratio(b, a)}),
                )
            })
            .collect();
        let first = self.lies.first().copied().unwrap_or("forged");
        json!({
            "join_s_bavl": t("bavl"),
            "join_s_baseline": t("baseline"),
            "join_s_null": t("null"),
            "join_speedup_honest": ratio(t("baseline"), t("bavl")),
            "join_over_null": ratio(t("bavl"), t("null")),
            "one_byzantine_lie": first,
            "join_s_bavl_one_byzantine": t(&byz("bavl", first)),
            "join_s_baseline_one_byzantine": t(&byz("baseline", first)),
            "join_speedup_one_byzantine": ratio(t(&byz("baseline", first)), t(&byz("bavl", first))),
            "one_byzantine_by_lie": per_lie,
            "variants": per_variant,
        })
    }

    fn throughput_json(&self) -> Value {
        let by = |f: &str| self.throughput.iter().find(|t| t.format == f);
        json!({
            "snapshot_throughput_ratio": by("bavl").map(|t| t.snapshot_throughput_ratio),
            "snapshot_block_time_p99_ratio": by("bavl").map(|t| t.snapshot_block_time_p99_ratio),
            "baseline_snapshot_throughput_ratio": by("baseline").map(|t| t.snapshot_throughput_ratio),
            "baseline_snapshot_block_time_p99_ratio": by("baseline").map(|t| t.snapshot_block_time_p99_ratio),
            "bavl_share_of_block_time": by("bavl").map(|t| t.bavl_share),
            "runs": self.throughput,
        })
    }

    /// Writes chain.json, chain/join.csv, chain/blocks-FORMAT.csv and the PNGs.
    pub fn write(&self, out: &Path, command: &str) -> Result<()> {
        let dir = out.join("chain");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let s = &self.setup;
        let mut machine = self.machine.clone();
        machine.finish();
        let doc = json!({
            "what": "the AVL* paper's chain experiments on a real CometBFT network",
            "command": command,
            "machine": machine,
            "cometbft": self.cometbft,
            "setup": {
                "keys": s.keys, "key_bytes": 20, "value_bytes": 100, "validators": 4,
                "snapshot_interval_join": s.interval, "snapshot_keep_join": s.snapshot_keep, "reps": s.reps,
                "byzantine": format!("validator 3 serves lying snapshots: {} (one pair of networks each)", self.lies.join(", ")),
                "bavl_bundle_bytes": bavl_abci::snapshot::TARGET_BUNDLE_BYTES,
                "baseline_chunk_bytes": bavl_abci::baseline::CHUNK_BYTES,
                "cometbft_config": "defaults of `cometbft testnet` (statesync chunk_fetchers 4, chunk_request_timeout 10s; p2p send_rate and recv_rate 5120000 B/s per connection) except timeout_commit 300ms, timeout_propose 1s, statesync discovery_time 5s",
                "snapshot_interval_load": s.load_interval, "load_seconds": s.load_s,
                "load_warmup_seconds": s.load_warmup_s,
                "load_threads": s.load_threads, "ops_per_tx": 10,
            },
            "errors": self.errors,
            "join": self.join_json(),
            "throughput": self.throughput_json(),
            "targets": {
                "join_speedup_one_byzantine": ">= 5", "join_speedup_honest": ">= 1",
                "join_over_null": "<= 1.25", "snapshot_throughput_ratio": ">= 0.97",
                "snapshot_block_time_p99_ratio": "<= 1.1",
            },
        });
        let path = out.join("chain.json");
        std::fs::write(&path, format!("{doc:#}\n"))?;
        let mut csv = String::from("variant,rep,snapshot_height,restored,restore_s,from_start_s,bytes,bytes_received,bundles_kept,bundles_refused,offers_refused,snapshots_rejected,app_peak_rss_bytes,node_peak_rss_bytes\n");
        for j in &self.joins {
            csv.push_str(&format!(
                "{},{},{},{:.3},{:.3},{},{},{},{},{},{},{},{}\n",
                j.variant,
                j.rep,
                j.snapshot_height,
                j.restore_s,
                j.from_start_s,
                j.bytes,
                j.bytes_received,
                j.bundles_kept,
                j.bundles_refused,
                j.offers_refused,
                j.snapshots_rejected,
                j.app_peak_rss_bytes,
                j.node_peak_rss_bytes
            ));
        }
        if !self.joins.is_empty() {
            std::fs::write(dir.join("join.csv"), csv)?;
            let title = format!(
                "Join time, {} keys, 4 snapshot servers (CometBFT {})",
                s.keys, self.cometbft
            );
            note(crate::plot::joins(&dir.join("join.png"), &self.variants(), &self.joins, &title));
        }
        for t in &self.throughput {
            let mut csv =
                String::from("height,arrived_unix_ms,txs,ops,finalize_ms,commit_ms,snapshot_ms\n");
            for b in &t.blocks {
                csv.push_str(&format!(
                    "{},{},{},{},{:.3},{:.3},{:.3}\n",
                    b.height,
                    b.arrived_unix_ms,
                    b.txs,
                    b.ops,
                    b.finalize_ms,
                    b.commit_ms,
                    b.snapshot_ms
                ));
            }
            std::fs::write(dir.join(format!("blocks-{}.csv", t.format)), csv)?;
        }
        if !self.throughput.is_empty() {
            let runs: Vec<&Throughput> = self.throughput.iter().collect();
            let title = format!(
                "Block times under load, {} keys, snapshots every {} heights",
                s.keys, s.load_interval
            );
            note(crate::plot::blocks(&dir.join("blocks.png"), &runs, &title));
        }
        eprintln!("chainlab: wrote {} and {}", path.display(), dir.display());
        println!("{}", serde_json::to_string_pretty(&doc["join"])?);
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "snapshot_throughput_ratio": doc["throughput"]["snapshot_throughput_ratio"],
                "snapshot_block_time_p99_ratio": doc["throughput"]["snapshot_block_time_p99_ratio"],
                "baseline_snapshot_throughput_ratio": doc["throughput"]["baseline_snapshot_throughput_ratio"],
                "bavl_share_of_block_time": doc["throughput"]["bavl_share_of_block_time"],
            }))?
        );
        Ok(())
    }
}

fn note(r: Result<()>) {
    if let Err(e) = r {
        eprintln!("chainlab: plot skipped: {e}");
    }
}
