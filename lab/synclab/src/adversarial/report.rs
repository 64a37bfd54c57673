//! The adversarial benchmark's outputs: the JSON document with the summary against the
//! targets, the CSV of every case, and one PNG per state size (each kind's sync time over
//! the honest time against the number of liars, beside the time bound).

use std::path::Path;

use anyhow::Result;
use bavl_labkit::machine::{self, Machine};
use bavl_labkit::plot::color;
use bavl_sync::http::Byzantine;
use plotters::style::BLACK;
use serde_json::{json, Value};

use super::{Case, Config, Honest, BUDGET, CAPACITY};
use crate::plot::{draw_y, Series};

/// The JSON document: command, machine, commit, date, honest figures, every case, and the
/// summary against the targets (`docs/sync-adversarial.md`).
pub fn document(cfg: &Config, honest: &[Honest], cases: &[Case], quick: bool) -> Value {
    let liar_cases = || cases.iter().filter(|c| c.liars > 0);
    let is_honest_kind = |c: &&Case| c.kind.parse::<Byzantine>().is_ok_and(Byzantine::is_honest);
    let never: usize = liar_cases().filter(|c| !is_honest_kind(c)).map(|c| c.live_liars).sum();
    let honest_kinds_caught: usize =
        liar_cases().filter(is_honest_kind).map(|c| c.banned + c.dropped).sum();
    json!({
        "what": "sync against adversarial crowds: one honest `bavl serve` beside 0, 12 or 48 sources of each adversarial kind (docs/sync-adversarial.md), synced by the real `bavl sync` on loopback; sync time over the all-honest time, the client's peak RSS, each liar's final health",
        "command": cfg.command,
        "quick": quick,
        "machine": Machine::at_end(),
        "git_commit": cfg.provenance["git_commit"],
        "at_start": cfg.provenance,
        "date": cfg.provenance["date"],
        "date_end": machine::utc_now(),
        "grace_s": cfg.grace,
        "honest_source_listed": if cfg.honest_first { "first" } else { "last" },
        "timeout_s": cfg.timeout.as_secs_f64(),
        "budget_bytes": BUDGET,
        "capacity": CAPACITY,
        "bounds": "time: 3 x honest median + grace; memory: honest median peak RSS + budget (128 MiB)",
        "honest": honest,
        "cases": cases,
        "cases_total": cases.len(),
        "cases_failed": cases.iter().filter(|c| !c.ok).count(),
        "cases_over_time_bound": cases.iter().filter(|c| c.over_time).count(),
        "cases_over_memory_bound": cases.iter().filter(|c| c.over_memory).count(),
        "liars_never_banned_or_dropped": never,
        "honest_kinds": Byzantine::ALL.iter().filter(|k| k.is_honest()).map(|k| k.name()).collect::<Vec<_>>(),
        "honest_kind_sources_banned_or_dropped": honest_kinds_caught,
        "honest_source_not_live": cases.iter().filter(|c| !c.honest_live).count(),
    })
}

/// Where the `bavl` measured comes from: the commit, the files under `crates/` that
/// differ from it (it may hold changes not yet committed), the date and the load.
pub fn provenance(note: Option<&str>) -> Value {
    json!({
        "note": note,
        "git_commit": machine::git_commit(),
        "uncommitted_changes_in_crates": uncommitted(),
        "date": machine::utc_now(),
        "load_avg": machine::load_avg(),
    })
}

fn uncommitted() -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["diff", "--name-only", "HEAD", "--", "crates"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The cases as CSV.
pub fn csv(cases: &[Case]) -> String {
    let mut out = String::from(
        "keys,kind,liars,seconds,ratio,time_bound_s,peak_rss_bytes,memory_bound_bytes,cpu_s,banned,dropped,live_liars,honest_live,ok,timed_out,over_time,over_memory\n",
    );
    for c in cases {
        out.push_str(&format!(
            "{},{},{},{:.3},{:.2},{:.3},{},{},{:.2},{},{},{},{},{},{},{},{}\n",
            c.keys,
            c.kind,
            c.liars,
            c.seconds,
            c.ratio,
            c.time_bound_s,
            c.peak_rss_bytes,
            c.memory_bound_bytes,
            c.cpu_s,
            c.banned,
            c.dropped,
            c.live_liars,
            c.honest_live,
            c.ok,
            c.timed_out,
            c.over_time,
            c.over_memory
        ));
    }
    out
}

/// One PNG per size in `dir`: `ratio-<keys>.png`.
pub fn plots(dir: &Path, honest: &[Honest], cases: &[Case], grace: f64) -> Result<()> {
    for h in honest {
        let of = |c: &&Case| c.keys == h.keys;
        let mut kinds: Vec<&str> = cases.iter().filter(of).map(|c| c.kind.as_str()).collect();
        kinds.retain(|k| *k != "none");
        kinds.dedup();
        let mut series: Vec<Series> = kinds
            .iter()
            .enumerate()
            .map(|(j, &kind)| {
                let mut points = vec![(0.0, 1.0)];
                let mine = cases.iter().filter(of).filter(|c| c.kind == kind);
                points.extend(mine.map(|c| (c.liars as f64, c.ratio)));
                Series { label: kind.to_string(), color: color(j), dashed: false, points }
            })
            .collect();
        let max_liars = cases.iter().filter(of).map(|c| c.liars).max().unwrap_or(0) as f64;
        let bound = (3.0 * h.median_s + grace) / h.median_s;
        series.push(Series {
            label: format!("bound: 3 x honest + grace ({bound:.1}x)"),
            color: BLACK,
            dashed: true,
            points: vec![(0.0, bound), (max_liars, bound)],
        });
        let title = format!(
            "{} keys: sync time over the honest {:.2} s, one honest source beside N liars",
            h.keys, h.median_s
        );
        let path = dir.join(format!("ratio-{}.png", h.keys));
        draw_y(&path, &title, ("liars", "sync time / honest time"), &series, false)?;
    }
    Ok(())
}
