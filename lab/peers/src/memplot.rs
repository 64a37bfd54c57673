//! The `cgroup` subcommand's PNG: one bar per (store, key count) in six panels (durable
//! ops/s, commit p50/p99, memory peaks against the limit, bytes written and read per
//! operation, disk bytes per key). A run the OOM killer ended has no bar but the words
//! "OOM-killed" and how many keys it had loaded. Needs a font (`bavl_labkit::plot`).

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_labkit::plot::{self, human, lighter, png_titled, Area, Bars, Category, DrawResult};
use plotters::prelude::*;

use crate::memrecord::RunRecord;

/// 1M, 10M, 200k, 1.5M.
pub fn keys_label(k: u64) -> String {
    if k >= 1_000_000 && k.is_multiple_of(100_000) {
        let m = k as f64 / 1e6;
        if k.is_multiple_of(1_000_000) {
            format!("{m:.0}M")
        } else {
            format!("{m:.1}M")
        }
    } else if k >= 1000 {
        format!("{:.0}k", k as f64 / 1e3)
    } else {
        k.to_string()
    }
}

/// Store names short enough for an axis label.
fn short(store: &str) -> &str {
    match store {
        "bavl-paged-cached" => "cached",
        "bavl-paged" => "paged",
        s => s,
    }
}

fn color(r: &RunRecord) -> RGBColor {
    if r.store == "bavl" {
        plot::BLUE
    } else if r.store.starts_with("bavl") {
        RGBColor(23, 160, 190)
    } else if r.store == "nomt" {
        plot::ORANGE
    } else {
        plot::GREY
    }
}

/// One panel: a first value per run and an optional second (lighter) one; `line` draws a
/// dashed horizontal reference (the memory limit). A run that died without the first
/// value shows why, and at how many keys.
fn panel(
    area: &Area,
    title: &str,
    runs: &[RunRecord],
    values: &[(Option<f64>, Option<f64>)],
    line: Option<(f64, &str)>,
) -> DrawResult {
    let limits: std::collections::BTreeSet<u64> =
        runs.iter().map(|r| r.memory_limit_bytes).collect();
    let categories: Vec<Category> = runs
        .iter()
        .zip(values)
        .map(|(r, (a, b))| {
            let mut name = format!("{} {}", short(&r.store), keys_label(r.initial_keys));
            if limits.len() > 1 {
                name += &format!(" {}G", r.memory_limit_bytes as f64 / (1u64 << 30) as f64);
            }
            let c = color(r);
            if r.status != "ok" && a.is_none() {
                let what = if r.status == "oom-killed" { "OOM-killed" } else { r.status.as_str() };
                let at = r
                    .died_after_keys_loaded
                    .map_or(String::new(), |k| format!("at {}", keys_label(k)));
                return Category { name, note: vec![what.to_string(), at], ..Category::default() };
            }
            let bars = match (a, b) {
                (Some(a), b) => [Some((*a, c.to_rgba())), b.map(|b| (b, lighter(c)))],
                (None, b) => [b.map(|b| (b, lighter(c))), None],
            };
            Category { name, bars: bars.into_iter().flatten().collect(), ..Category::default() }
        })
        .collect();
    let value = |v: f64| human(v);
    Bars {
        title,
        caption: 20,
        labels: 14,
        y_desc: "",
        value: Some(&value),
        legend: vec![],
        line,
        categories: &categories,
    }
    .draw(area)
}

/// Draws `runs` into `path` (its directory is created).
pub fn plot(path: &Path, runs: &[RunRecord], limit: u64) -> Result<()> {
    plot::ensure_font()?;
    if runs.is_empty() {
        return Err(anyhow!("no run"));
    }
    // Six panels side by side in two rows while the bars are few; one panel a row, as
    // wide as the bars need, when there are many (their labels would overlap).
    let many = runs.len() > 10;
    let size = if many { ((runs.len() as u32 * 105).max(1800), 6 * 330) } else { (1800, 1050) };
    let title = format!(
        "Workload B inside a memory cgroup (limit {} MiB, the dashed line): bavl (in memory), bavl paged (\"paged\"; \"cached\": paged, nothing evicted) and nomt 1.0.5",
        limit >> 20
    );
    png_titled(path, size, (&title, 22), |body| {
        let areas = body.split_evenly(if many { (6, 1) } else { (2, 3) });
        let one = |f: fn(&RunRecord) -> Option<f64>| {
            runs.iter().map(|r| (f(r), None)).collect::<Vec<_>>()
        };
        let ops = one(|r| r.ops_per_s);
        panel(&areas[0], "durable ops/s (fsync per 10k-op block)", runs, &ops, None)?;
        let lat: Vec<_> = runs.iter().map(|r| (r.commit_p50_ms, r.commit_p99_ms)).collect();
        panel(&areas[1], "commit per block, ms: p50 | p99 (lighter)", runs, &lat, None)?;
        let mb = |b: Option<u64>| b.map(|b| b as f64 / 1e6);
        let mem: Vec<_> = runs
            .iter()
            .map(|r| {
                (
                    mb(r.rss_peak_bytes),
                    mb(r.cgroup_peak_before_readback_bytes.or(Some(r.cgroup_peak_bytes))),
                )
            })
            .collect();
        let lim = (limit as f64 / 1e6, "limit");
        panel(
            &areas[2],
            "peak MB: RSS | cgroup incl. page cache (lighter)",
            runs,
            &mem,
            Some(lim),
        )?;
        let written = one(|r| r.write_bytes_per_op);
        panel(&areas[3], "bytes written per operation", runs, &written, None)?;
        let read = one(|r| r.read_bytes_per_op);
        panel(&areas[4], "bytes read from disk per operation", runs, &read, None)?;
        let disk: Vec<_> =
            runs.iter().map(|r| (r.disk_bytes_per_key, r.ram_bytes_per_key)).collect();
        panel(&areas[5], "bytes per key: disk | RAM (RSS, lighter)", runs, &disk, None)
    })?;
    Ok(())
}
