//! The two figures of `docs/results/chain/`: the join time of each variant (median, with
//! every repetition as a dot), and block times under load with the snapshot heights
//! marked, bavl beside the baseline. Text needs a TrueType font (`bavl_labkit::plot`);
//! without one the plots are skipped with a note.

use std::path::Path;

use anyhow::Result;
use bavl_labkit::plot::{png, png_titled, Bars, Category, Line, BLUE, FONT, GREY, ORANGE};
use bavl_labkit::stats::median;
use plotters::prelude::*;

use crate::blocks::Throughput;
use crate::join::Join;

fn color(variant: &str) -> RGBColor {
    if variant.starts_with("null") {
        GREY
    } else if variant.starts_with("baseline") {
        ORANGE
    } else {
        BLUE
    }
}

/// Bars of the median join time per variant, in `variants` order, every repetition a dot.
pub fn joins(path: &Path, variants: &[String], runs: &[Join], title: &str) -> Result<()> {
    let categories: Vec<Category> = variants
        .iter()
        .map(|v| {
            let t: Vec<f64> =
                runs.iter().filter(|j| &j.variant == v).map(|j| j.restore_s).collect();
            let bars = if t.is_empty() { vec![] } else { vec![(median(&t), color(v).to_rgba())] };
            Category { name: v.clone(), bars, dots: t, note: vec![] }
        })
        .collect();
    let value = |m: f64| format!("{m:.2} s");
    png(path, (1000, 520), |root| {
        Bars {
            title,
            caption: 22,
            labels: 15,
            y_desc: "seconds, first offer to durable state",
            value: Some(&value),
            legend: vec![],
            line: None,
            categories: &categories,
        }
        .draw(root)
    })?;
    Ok(())
}

/// Block time per height under load, one panel per chain, snapshot heights in red.
pub fn blocks(path: &Path, runs: &[&Throughput], title: &str) -> Result<()> {
    let hi = runs
        .iter()
        .flat_map(|t| {
            t.blocks.windows(2).map(|w| (w[1].arrived_unix_ms - w[0].arrived_unix_ms) as f64)
        })
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let size = (1100, 320 * runs.len() as u32 + 40);
    png_titled(path, size, (title, 22), |body| {
        for (t, area) in runs.iter().zip(body.split_evenly((runs.len(), 1))) {
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
            let pts: Vec<(f64, f64)> = t
                .blocks
                .windows(2)
                .map(|w| (w[1].height as f64, (w[1].arrived_unix_ms - w[0].arrived_unix_ms) as f64))
                .collect();
            let line =
                Line { label: None, color: color(&t.format), width: 2, dashed: false, dots: 0 };
            line.draw(&mut chart, &pts)?;
            for b in t.blocks.iter().filter(|b| b.snapshot_ms > 0.0) {
                let x = b.height as f64;
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, hi)],
                    RED.mix(0.5),
                )))?;
            }
        }
        Ok(())
    })?;
    Ok(())
}
