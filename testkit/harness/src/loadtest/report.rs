//! The load test's summary: per-block timings and sizes reduced to the figures people
//! read (throughput, commit latency percentiles, bytes per key), rendered as text.

use super::*;

pub(super) fn summarize(
    rows: &[BlockRow],
    first_version: u64,
    busy: Duration,
    wall: Duration,
    stats: &bavl_store::StoreStats,
    proofs: bool,
    loads_before: u64,
) -> Summary {
    let col = |f: fn(&BlockRow) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
    let ops: u64 = rows.iter().map(|r| r.ops).sum();
    let log_bytes: u64 = rows.iter().map(|r| r.log_bytes).sum();
    let proofs = proofs.then(|| {
        let samples: Vec<ProofSample> = rows.iter().filter_map(|r| r.proofs).collect();
        let proved: u64 = samples.iter().map(|p| p.proved).sum();
        let total_bytes: f64 = samples.iter().map(|p| p.mean_bytes * p.proved as f64).sum();
        ProofSample {
            proved,
            prove_ms: mean(&samples.iter().map(|p| p.prove_ms).collect::<Vec<_>>()),
            verify_ms: mean(&samples.iter().map(|p| p.verify_ms).collect::<Vec<_>>()),
            mean_bytes: if proved == 0 { 0.0 } else { total_bytes / proved as f64 },
            failures: samples.iter().map(|p| p.failures).sum(),
        }
    });
    Summary {
        blocks: rows.len() as u64,
        first_version,
        last_version: rows.last().map_or(first_version - 1, |r| r.version),
        ops,
        ops_per_s: if busy.is_zero() { 0.0 } else { ops as f64 / busy.as_secs_f64() },
        busy_ms: ms(busy),
        wall_ms: ms(wall),
        commit: Latency::of(&col(|r| r.commit_ms)),
        mean_generate_ms: mean(&col(|r| r.generate_ms)),
        mean_prefetch_ms: mean(&col(|r| r.prefetch_ms)),
        mean_apply_ms: mean(&col(|r| r.apply_ms)),
        mean_hash_ms: mean(&col(|r| r.hash_ms)),
        mean_persist_ms: mean(&col(|r| r.persist_ms)),
        mean_commit_rest_ms: mean(&col(|r| r.commit_ms - r.hash_ms - r.persist_ms)),
        log_bytes,
        log_bytes_per_op: if ops == 0 { 0.0 } else { log_bytes as f64 / ops as f64 },
        checkpoints_written: stats.checkpoints_written,
        checkpoint_bytes_written: stats.checkpoint_bytes_written,
        proofs,
        paging: stats.paging.as_ref().map(|p| PagingJson {
            loads: p.loads,
            block_loads: p.loads - loads_before.min(p.loads),
            loads_per_op: if ops == 0 {
                0.0
            } else {
                (p.loads - loads_before.min(p.loads)) as f64 / ops as f64
            },
            pinned_bytes: p.pinned_bytes,
            evictions: p.evictions,
            spilled_bytes: p.spilled_bytes,
            resident_bytes: p.resident_bytes,
            skeleton_bytes: p.skeleton_bytes,
            compactions: p.compactions,
            page_file_bytes: p.file_bytes,
            slack_factor: p.slack_permille as f64 / 1000.0,
        }),
    }
}

/// The pager's counters (`bavl_store::PagingStats`) as the report gives them.
#[derive(Serialize)]
pub(super) struct PagingJson {
    /// Chunk bodies read back from disk (each verified), over the whole open (the
    /// initial load included).
    pub loads: u64,
    /// Of those, the loads of the blocks.
    pub block_loads: u64,
    /// Loads per operation of the blocks.
    pub loads_per_op: f64,
    /// Heap bytes only retained versions hold (bodies never written), after the last
    /// commit.
    pub pinned_bytes: u64,
    pub evictions: u64,
    pub spilled_bytes: u64,
    /// Heap bytes of resident bodies after the last eviction.
    pub resident_bytes: u64,
    pub skeleton_bytes: u64,
    pub compactions: u64,
    pub page_file_bytes: u64,
    /// What the budget was divided by at the last eviction: the memory the process gained
    /// per byte of body and skeleton counted (`Options::cache_counts_slack`; 1 when off).
    pub slack_factor: f64,
}

pub(super) fn render(
    args: &LoadtestArgs,
    opts: &Options,
    opened_at: u64,
    open_time: Duration,
    initial: Option<&InitialLoad>,
    s: &Summary,
    f: &StatsJson,
) -> String {
    let mut o = vec![format!(
        "bavl-harness loadtest {}: seed {}, capacity {}, keep {}",
        args.db.display(),
        args.seed,
        f.capacity,
        args.keep
    )];
    o.push(format!("checkpoints   {}", describe_policy(opts)));
    o.push(match opened_at {
        0 => format!("opened        a new store in {}", human(open_time)),
        v => format!("opened        at version {v} in {}", human(open_time)),
    });
    if let Some(i) = initial {
        o.push(format!(
            "initial load  {} keys in {} versions, {:.2} s ({}), commit p50 {:.1} ms, max {:.1} ms",
            group(i.keys),
            i.versions,
            i.elapsed_ms / 1e3,
            rate(i.keys as f64, Duration::from_secs_f64(i.elapsed_ms / 1e3)),
            i.commit.p50_ms,
            i.commit.max_ms
        ));
    }
    if s.blocks == 0 {
        o.push("blocks        none".into());
    } else {
        o.push(format!(
            "blocks        {} versions ({}..={}) of {} ops ({} inserts, {} updates, {} deletes): {} ops",
            s.blocks,
            s.first_version,
            s.last_version,
            group(args.inserts as u64 + args.updates as u64 + args.deletes as u64),
            args.inserts,
            args.updates,
            args.deletes,
            group(s.ops)
        ));
        o.push(format!(
            "throughput    {} ops/s (prefetch + apply + commit: {:.2} s; wall {:.2} s)",
            group(s.ops_per_s.round() as u64),
            s.busy_ms / 1e3,
            s.wall_ms / 1e3
        ));
        o.push(format!(
            "commit        p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (the whole commit() call)",
            s.commit.p50_ms, s.commit.p99_ms, s.commit.max_ms
        ));
        o.push(format!(
            "per block     generate {:.2} ms, prefetch {:.2} ms, apply {:.2} ms, hash {:.2} ms, persist {:.2} ms (log append + fdatasync), rest of commit {:.2} ms (means)",
            s.mean_generate_ms, s.mean_prefetch_ms, s.mean_apply_ms, s.mean_hash_ms, s.mean_persist_ms, s.mean_commit_rest_ms
        ));
        o.push(format!(
            "log           {} appended, {:.1} bytes per operation",
            bytes(s.log_bytes),
            s.log_bytes_per_op
        ));
        if let Some(p) = &s.proofs {
            o.push(format!(
                "proofs        {} proved and verified ({} per block): prove {:.2} ms, verify {:.2} ms per block, {:.0} bytes mean, {} failure(s)",
                group(p.proved),
                PROOFS_PER_BLOCK,
                p.prove_ms,
                p.verify_ms,
                p.mean_bytes,
                p.failures
            ));
        }
    }
    if let Some(p) = &s.paging {
        o.push(format!(
            "paging        {} chunks loaded by the blocks ({:.3} per op), {} evicted, {} resident, {} only in retained versions, skeleton {}, page file {} ({} compactions), budget divided by {:.2} for slack",
            group(p.block_loads),
            p.loads_per_op,
            group(p.evictions),
            bytes(p.resident_bytes),
            bytes(p.pinned_bytes),
            bytes(p.skeleton_bytes),
            bytes(p.page_file_bytes),
            p.compactions,
            p.slack_factor
        ));
    }
    o.push(format!(
        "checkpoints   {} written during the run ({})",
        s.checkpoints_written,
        bytes(s.checkpoint_bytes_written)
    ));
    o.push("final state".into());
    o.extend(f.render().into_iter().map(|l| format!("  {l}")));
    o.join("\n")
}
