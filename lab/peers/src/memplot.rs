//! The `cgroup` subcommand's PNG: one bar per (store, key count) in six panels (durable
//! ops/s, commit p50/p99, memory peaks against the limit, bytes written and read per
//! operation, disk bytes per key). A run the OOM killer ended has no bar but the words
//! "OOM-killed" and how many keys it had loaded. Needs a font (`bavl_plotfont`).

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_plotfont::FONT;
use plotters::prelude::*;

use crate::memrecord::RunRecord;
use crate::plot::human;

type E = Box<dyn std::error::Error>;
type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

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
        RGBColor(31, 102, 181)
    } else if r.store.starts_with("bavl") {
        RGBColor(23, 160, 190)
    } else if r.store == "nomt" {
        RGBColor(214, 110, 20)
    } else {
        RGBColor(140, 140, 140)
    }
}

/// One panel: a first value per run and an optional second (lighter) one; `line` draws a
/// dashed horizontal reference (the memory limit).
fn panel(
    area: &Area,
    title: &str,
    runs: &[RunRecord],
    values: &[(Option<f64>, Option<f64>)],
    line: Option<(f64, &str)>,
) -> Result<(), E> {
    let n = runs.len();
    let top =
        values.iter().map(|(a, b)| a.unwrap_or(0.0).max(b.unwrap_or(0.0))).fold(0.0, f64::max);
    let hi = top.max(line.map_or(0.0, |l| l.0)).max(1e-9) * 1.22;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6..(n as f64 - 0.4), 0.0..hi)?;
    let limits: std::collections::BTreeSet<u64> =
        runs.iter().map(|r| r.memory_limit_bytes).collect();
    let names: Vec<String> = runs
        .iter()
        .map(|r| {
            let mut s = format!("{} {}", short(&r.store), keys_label(r.initial_keys));
            if limits.len() > 1 {
                s += &format!(" {}G", r.memory_limit_bytes as f64 / (1u64 << 30) as f64);
            }
            s
        })
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            let ok = (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len();
            if ok {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_labels(6)
        .y_label_formatter(&|v| human(*v))
        .label_style((FONT, 14))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, (r, (a, b))) in runs.iter().zip(values).enumerate() {
        let x = i as f64;
        let c = color(r);
        if r.status != "ok" && a.is_none() {
            let what = if r.status == "oom-killed" { "OOM-killed" } else { r.status.as_str() };
            let at =
                r.died_after_keys_loaded.map_or(String::new(), |k| format!("at {}", keys_label(k)));
            let red = RGBColor(200, 30, 30);
            for (j, s) in [what.to_string(), at].into_iter().enumerate() {
                let y = hi * (0.2 - 0.08 * j as f64);
                chart.draw_series(std::iter::once(Text::new(
                    s,
                    (x - 0.3, y),
                    (FONT, 15).into_font().color(&red),
                )))?;
            }
            continue;
        }
        let two = b.is_some();
        let (x0, x1) = if two { (x - 0.38, x) } else { (x - 0.32, x + 0.32) };
        for (v, (u0, u1), shade) in [(a, (x0, x1), 1.0), (b, (x, x + 0.38), 0.45)] {
            let Some(v) = v else { continue };
            let fill = c.mix(shade).filled();
            chart.draw_series(std::iter::once(Rectangle::new([(u0, 0.0), (u1, *v)], fill)))?;
            let label = Text::new(human(*v), (u0, *v + hi * 0.02), (FONT, 13).into_font());
            chart.draw_series(std::iter::once(label))?;
        }
    }
    if let Some((y, label)) = line {
        let red = RGBColor(200, 30, 30);
        let pts = vec![(-0.6, y), (n as f64 - 0.4, y)];
        chart.draw_series(DashedLineSeries::new(pts, 6, 4, red.stroke_width(2)))?;
        let t =
            Text::new(label.to_string(), (-0.5, y + hi * 0.03), (FONT, 14).into_font().color(&red));
        chart.draw_series(std::iter::once(t))?;
    }
    Ok(())
}

fn draw(path: &Path, runs: &[RunRecord], limit: u64) -> Result<(), E> {
    // Six panels side by side in two rows while the bars are few; one panel a row, as
    // wide as the bars need, when there are many (their labels would overlap).
    let many = runs.len() > 10;
    let size = if many { ((runs.len() as u32 * 105).max(1800), 6 * 330) } else { (1800, 1050) };
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "Workload B inside a memory cgroup (limit {} MiB, the dashed line): bavl (in memory), bavl paged (\"paged\"; \"cached\": paged, nothing evicted) and nomt 1.0.5",
        limit >> 20
    );
    let body = root.titled(&title, (FONT, 22))?;
    let areas = body.split_evenly(if many { (6, 1) } else { (2, 3) });
    let one =
        |f: fn(&RunRecord) -> Option<f64>| runs.iter().map(|r| (f(r), None)).collect::<Vec<_>>();
    panel(&areas[0], "durable ops/s (fsync per 10k-op block)", runs, &one(|r| r.ops_per_s), None)?;
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
    panel(&areas[2], "peak MB: RSS | cgroup incl. page cache (lighter)", runs, &mem, Some(lim))?;
    panel(&areas[3], "bytes written per operation", runs, &one(|r| r.write_bytes_per_op), None)?;
    panel(
        &areas[4],
        "bytes read from disk per operation",
        runs,
        &one(|r| r.read_bytes_per_op),
        None,
    )?;
    let disk: Vec<_> = runs.iter().map(|r| (r.disk_bytes_per_key, r.ram_bytes_per_key)).collect();
    panel(&areas[5], "bytes per key: disk | RAM (RSS, lighter)", runs, &disk, None)?;
    root.present()?;
    Ok(())
}

/// Draws `runs` into `path` (its directory is created).
pub fn plot(path: &Path, runs: &[RunRecord], limit: u64) -> Result<()> {
    bavl_plotfont::ensure_font().map_err(|e| anyhow!(e))?;
    if runs.is_empty() {
        return Err(anyhow!("no run"));
    }
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    draw(path, runs, limit).map_err(|e| anyhow!("{e}"))
}
