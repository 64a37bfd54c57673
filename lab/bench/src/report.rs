//! The report: JSON document, targets and whether they are met, the summary table printed
//! to stdout, and the capacity sweep as CSV.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::accounting::Accounting;
use crate::machine::Machine;
use crate::measure::CapacityResult;

/// Parameters of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Params {
    pub quick: bool,
    pub keys: usize,
    pub capacity: u32,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub seed: u64,
    pub update_block_size: usize,
    pub update_blocks_measured: usize,
    pub update_blocks_unpinned: usize,
    pub lookups_per_pass: usize,
    pub proof_samples: usize,
    pub repetitions: usize,
    pub verify_threads: usize,
    pub sweep_keys: usize,
    pub sweep_capacities: Vec<u32>,
    /// Longest wait for a quiet machine before each measurement.
    pub wait_quiet_s: f64,
    pub sweep_rounds: usize,
}

/// The figures at the default capacity.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub sha256_64b_hashes_per_s: f64,
    pub sha256_bulk_mb_per_s: f64,
    #[serde(flatten)]
    pub main: CapacityResult,
}

/// A target: `value op threshold` must hold.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub op: &'static str,
    pub threshold: f64,
    pub value: f64,
    pub what: &'static str,
}

impl Target {
    pub fn met(&self) -> bool {
        match self.op {
            ">=" => self.value >= self.threshold,
            _ => self.value <= self.threshold,
        }
    }
}

/// The targets of the brief, checked against the default-capacity figures.
pub fn targets(r: &CapacityResult) -> BTreeMap<&'static str, Target> {
    let t = |op, threshold, value, what| Target { op, threshold, value, what };
    BTreeMap::from([
        (
            "update_ops_per_s",
            t(
                ">=",
                200_000.0,
                r.update_ops_per_s,
                "upserts/s on one core incl. root_hash per 10k block",
            ),
        ),
        (
            "get_vs_btreemap",
            t(
                ">=",
                1.0 / 1.5,
                r.get_vs_btreemap.unwrap_or(0.0),
                "BTreeMap/bavl get time: bavl within 1.5x",
            ),
        ),
        (
            "membership_proof_bytes_median",
            t("<=", 800.0, r.membership_proof_bytes_median as f64, "median membership proof bytes"),
        ),
        ("space_efficiency", t("<=", 1.25, r.space_efficiency, "chunks / ceil(keys / capacity)")),
        (
            "verify_rebuild_vs_sha256",
            t(">=", 0.5, r.verify_rebuild_vs_sha256, "verify+rebuild MB/s over SHA-256 MB/s"),
        ),
    ])
}

/// The whole JSON document.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub command: String,
    pub date: String,
    pub wall_time_s: f64,
    pub machine: Machine,
    pub params: Params,
    pub results: Results,
    pub targets: BTreeMap<&'static str, Target>,
    pub met: BTreeMap<&'static str, bool>,
    pub hash_accounting: Accounting,
    pub capacity_sweep: Vec<CapacityResult>,
    pub notes: Vec<String>,
}

fn fmt_num(x: f64) -> String {
    bavl_labkit::plot::short(x, bavl_labkit::plot::TABLE)
}

/// The summary table: every figure at the default capacity, then the sweep.
pub fn summary(rep: &Report) -> String {
    let r = &rep.results.main;
    let mut rows: Vec<(&str, f64)> = vec![
        ("sha256_64b_hashes_per_s", rep.results.sha256_64b_hashes_per_s),
        ("sha256_bulk_mb_per_s", rep.results.sha256_bulk_mb_per_s),
        ("bulk_load_ops_per_s", r.bulk_load_ops_per_s),
        ("bulk_load_hash_share", r.bulk_load_hash_share),
        ("update_ops_per_s", r.update_ops_per_s),
        ("update_ops_per_s_median_block", r.update_ops_per_s_median_block),
        ("update_ops_per_s_unpinned", r.update_ops_per_s_unpinned),
        ("update_block_ms_p50", r.update_block_ms_p50),
        ("update_block_ms_p99", r.update_block_ms_p99),
        ("update_hash_share", r.update_hash_share),
        ("get_ops_per_s", r.get_ops_per_s),
        ("btreemap_get_ops_per_s", r.btreemap_get_ops_per_s.unwrap_or(f64::NAN)),
        ("get_vs_btreemap", r.get_vs_btreemap.unwrap_or(f64::NAN)),
        ("membership_proof_bytes_median", r.membership_proof_bytes_median as f64),
        ("membership_proof_bytes_p99", r.membership_proof_bytes_p99 as f64),
        ("membership_proof_bytes_max", r.membership_proof_bytes_max as f64),
        ("membership_proof_with_kv_bytes_median", r.membership_proof_with_kv_bytes_median as f64),
        ("prove_membership_ops_per_s", r.prove_membership_ops_per_s),
        ("verify_membership_ops_per_s", r.verify_membership_ops_per_s),
        ("space_efficiency", r.space_efficiency),
        ("chunk_bytes_mean", r.chunk_bytes_mean),
        ("export_mb_per_s", r.export_mb_per_s),
        ("verify_rebuild_mb_per_s", r.verify_rebuild_mb_per_s),
        ("verify_rebuild_parallel_mb_per_s", r.verify_rebuild_parallel_mb_per_s),
        ("sha256_over_chunk_bytes_mb_per_s", r.sha256_over_chunk_bytes_mb_per_s),
        ("verify_rebuild_vs_sha256", r.verify_rebuild_vs_sha256),
    ];
    rows.push(("others_busy_cores", r.others_busy_cores));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "bavl core benchmark: {} keys, capacity {}, {} ({} cores), commit {}",
        r.keys,
        r.capacity,
        rep.machine.cpu,
        rep.machine.nproc,
        rep.machine.short_commit(10)
    );
    let _ = writeln!(s, "{:<40} {:>12}  {:<12} met", "figure", "value", "target");
    for (name, v) in rows {
        let (target, met) = match rep.targets.get(name) {
            Some(t) => {
                (format!("{} {}", t.op, fmt_num(t.threshold)), if t.met() { "yes" } else { "NO" })
            }
            None => (String::new(), ""),
        };
        let _ = writeln!(s, "{name:<40} {:>12}  {target:<12} {met}", fmt_num(v));
    }
    let _ = writeln!(s, "\ncapacity sweep ({} keys):", rep.params.sweep_keys);
    let _ = writeln!(
        s,
        "{:>8} {:>9} {:>10} {:>10} {:>8} {:>7} {:>10} {:>10} {:>6}",
        "capacity",
        "chunks",
        "update/s",
        "get/s",
        "proof_md",
        "space",
        "verify_MBs",
        "chunk_B",
        "height"
    );
    for c in &rep.capacity_sweep {
        let _ = writeln!(
            s,
            "{:>8} {:>9} {:>10} {:>10} {:>8} {:>7.3} {:>10.1} {:>10.0} {:>6}",
            c.capacity,
            c.chunks,
            fmt_num(c.update_ops_per_s),
            fmt_num(c.get_ops_per_s),
            c.membership_proof_bytes_median,
            c.space_efficiency,
            c.verify_rebuild_mb_per_s,
            c.chunk_bytes_mean,
            c.height
        );
    }
    s
}

/// Columns of the sweep CSV.
const CSV_HEADER: &str =
    "capacity,keys,chunks,height,update_ops_per_s,update_block_ms_p50,update_block_ms_p99,\
get_ops_per_s,membership_proof_bytes_median,membership_proof_bytes_p99,space_efficiency,\
verify_rebuild_mb_per_s,verify_rebuild_parallel_mb_per_s,sha256_over_chunk_bytes_mb_per_s,\
verify_rebuild_vs_sha256,chunk_bytes_mean,export_mb_per_s,bulk_load_ops_per_s,others_busy_cores";

/// Writes the sweep as CSV.
pub fn write_csv(path: &Path, sweep: &[CapacityResult]) -> Result<()> {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for c in sweep {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.0},{:.3},{:.3},{:.0},{},{},{:.4},{:.2},{:.2},{:.2},{:.4},{:.1},{:.2},{:.0},{:.2}",
            c.capacity,
            c.keys,
            c.chunks,
            c.height,
            c.update_ops_per_s,
            c.update_block_ms_p50,
            c.update_block_ms_p99,
            c.get_ops_per_s,
            c.membership_proof_bytes_median,
            c.membership_proof_bytes_p99,
            c.space_efficiency,
            c.verify_rebuild_mb_per_s,
            c.verify_rebuild_parallel_mb_per_s,
            c.sha256_over_chunk_bytes_mb_per_s,
            c.verify_rebuild_vs_sha256,
            c.chunk_bytes_mean,
            c.export_mb_per_s,
            c.bulk_load_ops_per_s,
            c.others_busy_cores
        );
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_compare_in_the_right_direction() {
        let r = CapacityResult {
            update_ops_per_s: 250_000.0,
            get_vs_btreemap: Some(0.6),
            membership_proof_bytes_median: 800,
            space_efficiency: 1.3,
            verify_rebuild_vs_sha256: 0.5,
            ..Default::default()
        };
        let t = targets(&r);
        assert!(t["update_ops_per_s"].met());
        assert!(!t["get_vs_btreemap"].met());
        assert!(t["membership_proof_bytes_median"].met());
        assert!(!t["space_efficiency"].met());
        assert!(t["verify_rebuild_vs_sha256"].met());
    }

    #[test]
    fn csv_has_one_row_per_capacity() {
        let dir = std::env::temp_dir().join(format!("bavl-bench-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.csv");
        let rows =
            vec![CapacityResult { capacity: 16, ..Default::default() }, CapacityResult::default()];
        write_csv(&p, &rows).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert_eq!(text.lines().nth(1).unwrap().split(',').count(), CSV_HEADER.split(',').count());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
