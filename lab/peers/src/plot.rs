//! The comparison as a PNG: bars per store (ops/s, commit p50/p99, peak RSS, disk, load
//! time) and the per-block commit latency of every store.
//!
//! Text needs a TrueType font (`bavl_labkit::plot::ensure_font`); without one the plot is
//! skipped.

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_labkit::plot::{
    self, color as palette, human, legend, lighter, png_titled, Area, Bars, Category, DrawResult,
    Line, BLUE, FONT, GREY, ORANGE,
};
use plotters::prelude::*;

use crate::report::Outcome;

fn color(o: &Outcome) -> RGBColor {
    if o.name == "bavl" {
        BLUE
    } else if o.peer {
        ORANGE
    } else {
        GREY
    }
}

/// One bar panel: a value per store (and optionally a second, lighter bar, the two
/// named in the legend).
fn bars(
    area: &Area,
    title: &str,
    stores: &[&Outcome],
    values: &[(f64, Option<f64>)],
    second_label: Option<(&str, &str)>,
) -> DrawResult {
    let categories: Vec<Category> = stores
        .iter()
        .zip(values)
        .map(|(o, (a, b))| {
            let c = color(o);
            let mut bars = vec![(*a, c.to_rgba())];
            bars.extend(b.map(|b| (b, lighter(c))));
            Category { name: o.name.to_string(), bars, ..Category::default() }
        })
        .collect();
    let g = RGBColor(90, 90, 90);
    let legend = second_label
        .map(|(l1, l2)| vec![(l1.to_string(), g.to_rgba()), (l2.to_string(), lighter(g))])
        .unwrap_or_default();
    let value = |v: f64| human(v);
    Bars {
        title,
        caption: 22,
        labels: 15,
        y_desc: "",
        value: Some(&value),
        legend,
        line: None,
        categories: &categories,
    }
    .draw(area)
}

fn latency(area: &Area, stores: &[&Outcome]) -> DrawResult {
    let n = stores.iter().map(|o| o.block_ms.len()).max().unwrap_or(1).max(1);
    let all = stores.iter().flat_map(|o| o.block_ms.iter().copied());
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = (lo.max(0.01).log10() - 0.1, hi.max(0.02).log10() + 0.35);
    let mut chart = ChartBuilder::on(area)
        .caption("commit latency per block (apply + durable commit), log scale", (FONT, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5..(n as f64 + 0.5), lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("measured block")
        .y_desc("ms")
        .x_labels(n.min(15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|v| human(10f64.powf(*v)))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 15))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, o) in stores.iter().enumerate() {
        let pts: Vec<(f64, f64)> = o
            .block_ms
            .iter()
            .enumerate()
            .map(|(j, v)| ((j + 1) as f64, v.max(0.01).log10()))
            .collect();
        Line::new(o.name, palette(i), 2).draw(&mut chart, &pts)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 15)
}

/// Draws the report's stores into `path`. Blue: bavl; orange: durable peers; grey: the
/// in-memory jmt and the floor.
pub fn plot(path: &Path, stores: &[&Outcome], title: &str) -> Result<()> {
    plot::ensure_font()?;
    if stores.is_empty() {
        return Err(anyhow!("no store ran"));
    }
    png_titled(path, (1800, 1050), (title, 24), |body| {
        let areas = body.split_evenly((2, 3));
        let v = |f: fn(&Outcome) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
            stores.iter().map(|o| (f(o).unwrap_or(0.0), None)).collect()
        };
        let ops = v(|o| o.ops_per_s);
        bars(&areas[0], "operations per second (higher is better)", stores, &ops, None)?;
        let lat: Vec<(f64, Option<f64>)> = stores
            .iter()
            .map(|o| (o.commit_p50_ms.unwrap_or(0.0), Some(o.commit_p99_ms.unwrap_or(0.0))))
            .collect();
        bars(&areas[1], "commit latency per block, ms", stores, &lat, Some(("p50", "p99")))?;
        latency(&areas[2], stores)?;
        bars(&areas[3], "peak RSS, MB (VmHWM)", stores, &v(|o| o.rss_mb), None)?;
        bars(&areas[4], "disk after the run, MB (allocated)", stores, &v(|o| o.disk_mb), None)?;
        bars(&areas[5], "initial load, s (commits of 100k keys)", stores, &v(|o| o.load_s), None)
    })?;
    Ok(())
}
