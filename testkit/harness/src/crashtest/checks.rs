//! The crash test's checks and report: the reference resynced after a failure, a copy of
//! a failing store kept for later, `check` on a store as a kill left it, and the summary
//! (printed, and written as JSON).

use std::path::Path;

use anyhow::Result;
use bavl_store::Store;
use bavl_workload::Mix;

use super::*;

/// After a failure of (b), the reference restarts from what the store has (every chunk
/// loaded, if paged), so that the later iterations check what happens next.
pub(super) fn resync(e: &mut Epoch, store: &Store, mix: Mix) -> Result<(), bavl_store::StoreError> {
    let latest = store.latest();
    let absent: Vec<_> = (0..latest.chunk_count()).filter_map(|i| latest.absent_chunk(i)).collect();
    e.reference = store.load_pages(&latest, &absent)?.to_tree();
    e.version = store.version();
    e.roots.retain(|&v, _| v < e.version);
    e.roots.insert(e.version, store.root());
    // Only blocks follow: the children, resuming a store past version 0, apply no
    // initial versions.
    e.workload = Workload::new(e.seed, 0, mix);
    Ok(())
}

pub(super) fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))
            .with_context(|| format!("copying {}", entry.path().display()))?;
    }
    Ok(())
}

/// Runs `check` on the store; reports each problem through `fail`; returns the notes.
pub(super) fn check_store(dir: &Path, when: &str, fail: &mut dyn FnMut(String)) -> usize {
    let backend: std::sync::Arc<dyn bavl_store::Backend> = match DirBackend::open_read_only(dir) {
        Ok(b) => std::sync::Arc::new(b),
        Err(e) => {
            fail(format!("check {when}: cannot lock the store: {e}"));
            return 0;
        }
    };
    match bavl_store::check::check(&backend) {
        Ok(report) => {
            for p in &report.problems {
                fail(format!("check {when}: {p}"));
            }
            report.notes.len()
        }
        Err(e) => {
            fail(format!("check {when}: {e}"));
            0
        }
    }
}

pub(super) fn report(
    args: &CrashtestArgs,
    r: &Run,
    dir: &Path,
    kept: bool,
    elapsed: Duration,
    mix: Mix,
) -> Result<()> {
    let ok = r.failures.is_empty();
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let aimed_open = r.rows.iter().filter(|row| row.aim == "open").count();
    let mut o = vec![format!(
        "bavl-harness crashtest: {} iterations, seed {}, {} initial keys (new epoch past {}), capacity {}, blocks of {} ops ({} inserts, {} updates, {} deletes)",
        args.iterations,
        args.seed,
        group(args.keys),
        group(args.max_keys),
        args.capacity,
        group(args.ops as u64),
        mix.inserts,
        mix.updates,
        mix.deletes
    )];
    o.push(format!("store        {}{}", dir.display(), if kept { "" } else { " (removed)" }));
    o.push(format!(
        "kills        {} in {} over {} epoch(s): {} aimed at the opening, the others {}..={} ms after it",
        r.rows.len(),
        human(elapsed),
        r.epochs,
        aimed_open,
        args.min_delay_ms,
        args.max_delay_ms
    ));
    o.push(format!(
        "versions     {} committed by the children, {} reported as committed before a kill",
        group(r.committed),
        group(r.printed)
    ));
    o.push(format!(
        "landed       {} while the child was opening, {} after it opened but before its first commit, {} during a checkpoint (or HEAD) write (temporary file deleted on reopen), {} in the middle of a log record (torn tail discarded)",
        r.killed_while_opening, r.before_first_commit, r.during_checkpoint, r.torn_tails
    ));
    o.push(format!(
        "recovery     mean {:.1} ms (checkpoint load + replay), max {:.1} ms; open mean {:.1} ms",
        mean(&r.recovery),
        max(&r.recovery),
        mean(&r.open)
    ));
    for f in r.failures.iter().take(20) {
        o.push(format!("  FAILURE  iteration {} (epoch {}): {}", f.iteration, f.epoch, f.what));
    }
    if r.failures.len() > 20 {
        o.push(format!("  ... and {} more", r.failures.len() - 20));
    }
    for k in &r.kept {
        o.push(format!("  a failed epoch's store was kept in {k}"));
    }
    o.push(if ok {
        "result       OK: every check held in every iteration".into()
    } else {
        format!("result       {} FAILURE(S)", r.failures.len())
    });
    println!("{}", o.join("\n"));

    if let Some(path) = &args.json {
        let report = json!({
            "command": std::env::args().collect::<Vec<_>>(),
            "ok": ok,
            "iterations": r.rows.len(),
            "failures": r.failures,
            "seed": args.seed,
            "initial_keys": args.keys,
            "max_keys": args.max_keys,
            "capacity": args.capacity,
            "block": { "inserts": mix.inserts, "updates": mix.updates, "deletes": mix.deletes },
            "checkpoint_mb": args.checkpoint_mb,
            "kill_delay_ms": [args.min_delay_ms, args.max_delay_ms],
            "open_kills_percent": args.open_kills,
            "epochs": r.epochs,
            "versions_committed": r.committed,
            "printed_commits": r.printed,
            "kills_aimed_at_opening": aimed_open,
            "kills_while_opening": r.killed_while_opening,
            "kills_before_first_commit": r.before_first_commit,
            "kills_during_checkpoint_write": r.during_checkpoint,
            "torn_tails_discarded": r.torn_tails,
            "mean_recovery_ms": mean(&r.recovery),
            "max_recovery_ms": max(&r.recovery),
            "mean_open_ms": mean(&r.open),
            "elapsed_s": elapsed.as_secs_f64(),
            "store": dir.display().to_string(),
            "kept_failed_stores": r.kept,
            "rows": r.rows,
        });
        let text = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
