//! The two figures of `docs/results/chain/`: the join time of each variant (median, with
//! every repetition as a dot), and block times under load with the snapshot heights
//! marked, bavl beside the baseline. Text needs a TrueType font (`bavl-plotfont`);
//! without one the plots are skipped with a note.

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_plotfont::FONT;
use plotters::prelude::*;

use crate::blocks::Throughput;
use crate::join::Join;

type E = Box<dyn std::error::Error>;

fn color(variant: &str) -> RGBColor {
    if variant.starts_with("null") {
        RGBColor(140, 140, 140)
    } else if variant.starts_with("baseline") {
        RGBColor(214, 110, 20)
    } else {
        RGBColor(31, 102, 181)
    }
}

/// Bars of the median join time per variant, in `variants` order.
pub fn joins(path: &Path, variants: &[String], runs: &[Join], title: &str) -> Result<()> {
    bavl_plotfont::ensure_font().map_err(|e| anyhow!(e))?;
    draw_joins(path, variants, runs, title).map_err(|e| anyhow!("{e}"))
}

fn draw_joins(path: &Path, variants: &[String], runs: &[Join], title: &str) -> Result<(), E> {
    let root = BitMapBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let hi = runs.iter().map(|j| j.restore_s).fold(0.0, f64::max).max(1e-3) * 1.2;
    let n = variants.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 22))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.6..(n as f64 - 0.4), 0.0..hi)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            let ok = (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n;
            if ok {
                variants[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc("seconds, first offer to durable state")
        .label_style((FONT, 15))
        .draw()?;
    for (i, v) in variants.iter().enumerate() {
        let mut t: Vec<f64> =
            runs.iter().filter(|j| &j.variant == v).map(|j| j.restore_s).collect();
        if t.is_empty() {
            continue;
        }
        let m = crate::median(&mut t);
        let x = i as f64;
        let c = color(v);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - 0.3, 0.0), (x + 0.3, m)],
            c.filled(),
        )))?;
        chart.draw_series(t.iter().map(|&s| Circle::new((x, s), 4, BLACK.filled())))?;
        let label = format!("{m:.2} s");
        chart.draw_series(std::iter::once(Text::new(
            label,
            (x - 0.25, m + hi * 0.03),
            (FONT, 15).into_font(),
        )))?;
    }
    root.present()?;
    Ok(())
}

/// Block time per height under load, one panel per chain, snapshot heights in red.
pub fn blocks(path: &Path, runs: &[&Throughput], title: &str) -> Result<()> {
    bavl_plotfont::ensure_font().map_err(|e| anyhow!(e))?;
    draw_blocks(path, runs, title).map_err(|e| anyhow!("{e}"))
}

fn draw_blocks(path: &Path, runs: &[&Throughput], title: &str) -> Result<(), E> {
    let root = BitMapBackend::new(path, (1100, 320 * runs.len() as u32 + 40)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(40);
    top.titled(title, (FONT, 22))?;
    let hi = runs
        .iter()
        .flat_map(|t| {
            t.blocks.windows(2).map(|w| (w[1].arrived_unix_ms - w[0].arrived_unix_ms) as f64)
        })
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    for (t, area) in runs.iter().zip(rest.split_evenly((runs.len(), 1))) {
        let (h0, h1) = (t.blocks[0].height as f64, t.blocks[t.blocks.len() - 1].height as f64);
        let caption = format!(
            "{}: {:.0} tx/s; during snapshots / outside: throughput {:.2}, block-time p99 {:.2}",
            t.format, t.tx_per_s, t.snapshot_throughput_ratio, t.snapshot_block_time_p99_ratio
        );
        let mut chart = ChartBuilder::on(&area)
            .caption(caption, (FONT, 17))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(h0..h1 + 1.0, 0.0..hi)?;
        chart
            .configure_mesh()
            .y_desc("block time, ms")
            .x_desc("height")
            .label_style((FONT, 14))
            .draw()?;
        let pts = t
            .blocks
            .windows(2)
            .map(|w| (w[1].height as f64, (w[1].arrived_unix_ms - w[0].arrived_unix_ms) as f64));
        chart.draw_series(LineSeries::new(pts, color(&t.format).stroke_width(2)))?;
        for b in t.blocks.iter().filter(|b| b.snapshot_ms > 0.0) {
            let x = b.height as f64;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, hi)],
                RED.mix(0.5),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}
