//! The comparison as a PNG: bars per store (ops/s, commit p50/p99, peak RSS, disk, load
//! time) and the per-block commit latency of every store.
//!
//! Text needs a TrueType font, read at run time from `BAVL_BENCH_FONT` or the usual
//! DejaVu/Liberation paths (Debian's `fonts-dejavu-core`); without one the plot is skipped.

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_plotfont::FONT;
use plotters::prelude::*;

use crate::report::Outcome;

fn color(o: &Outcome) -> RGBColor {
    if o.name == "bavl" {
        RGBColor(31, 102, 181)
    } else if o.peer {
        RGBColor(214, 110, 20)
    } else {
        RGBColor(140, 140, 140)
    }
}

/// 1.23M, 45k, 512, 3.5: a value short enough for a bar label.
pub fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

type E = Box<dyn std::error::Error>;

/// One bar panel: a value per store (and optionally a second, hatched-lighter bar).
fn bars(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    stores: &[&Outcome],
    values: &[(f64, Option<f64>)],
    second_label: Option<(&str, &str)>,
) -> Result<(), E> {
    let n = stores.len();
    let hi =
        values.iter().map(|(a, b)| a.max(b.unwrap_or(0.0))).fold(0.0, f64::max).max(1e-9) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6..(n as f64 - 0.4), 0.0..hi)?;
    let names: Vec<&str> = stores.iter().map(|o| o.name).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .y_labels(6)
        .y_label_formatter(&|v| human(*v))
        .label_style((FONT, 15))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let two = second_label.is_some();
    for (i, (o, (a, b))) in stores.iter().zip(values).enumerate() {
        let x = i as f64;
        let c = color(o);
        let (x0, x1) = if two { (x - 0.38, x) } else { (x - 0.32, x + 0.32) };
        chart.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x1, *a)], c.filled())))?;
        chart.draw_series(std::iter::once(Text::new(
            human(*a),
            (x0, *a + hi * 0.02),
            (FONT, 14).into_font(),
        )))?;
        if let Some(b) = b {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, 0.0), (x + 0.38, *b)],
                c.mix(0.45).filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                human(*b),
                (x, *b + hi * 0.07),
                (FONT, 14).into_font(),
            )))?;
        }
    }
    if let Some((l1, l2)) = second_label {
        let g = RGBColor(90, 90, 90);
        chart
            .draw_series(std::iter::once(Rectangle::new([(0.0, 0.0), (0.0, 0.0)], g.filled())))?
            .label(l1)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], g.filled()));
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, 0.0), (0.0, 0.0)],
                g.mix(0.45).filled(),
            )))?
            .label(l2)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], g.mix(0.45).filled())
            });
        chart
            .configure_series_labels()
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}

fn latency(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    stores: &[&Outcome],
) -> Result<(), E> {
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
    let palette = [
        RGBColor(31, 102, 181),
        RGBColor(214, 110, 20),
        RGBColor(44, 160, 44),
        RGBColor(200, 30, 30),
        RGBColor(148, 103, 189),
        RGBColor(120, 120, 120),
        RGBColor(23, 190, 207),
    ];
    for (i, o) in stores.iter().enumerate() {
        let c = palette[i % palette.len()];
        let pts: Vec<(f64, f64)> = o
            .block_ms
            .iter()
            .enumerate()
            .map(|(j, v)| ((j + 1) as f64, v.max(0.01).log10()))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(o.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

fn draw(path: &Path, stores: &[&Outcome], title: &str) -> Result<(), E> {
    let root = BitMapBackend::new(path, (1800, 1050)).into_drawing_area();
    root.fill(&WHITE)?;
    let body = root.titled(title, (FONT, 24))?;
    let areas = body.split_evenly((2, 3));
    let v = |f: fn(&Outcome) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        stores.iter().map(|o| (f(o).unwrap_or(0.0), None)).collect()
    };
    bars(&areas[0], "operations per second (higher is better)", stores, &v(|o| o.ops_per_s), None)?;
    let lat: Vec<(f64, Option<f64>)> = stores
        .iter()
        .map(|o| (o.commit_p50_ms.unwrap_or(0.0), Some(o.commit_p99_ms.unwrap_or(0.0))))
        .collect();
    bars(&areas[1], "commit latency per block, ms", stores, &lat, Some(("p50", "p99")))?;
    latency(&areas[2], stores)?;
    bars(&areas[3], "peak RSS, MB (VmHWM)", stores, &v(|o| o.rss_mb), None)?;
    bars(&areas[4], "disk after the run, MB (allocated)", stores, &v(|o| o.disk_mb), None)?;
    bars(&areas[5], "initial load, s (commits of 100k keys)", stores, &v(|o| o.load_s), None)?;
    root.present()?;
    Ok(())
}

/// Draws the report's stores into `path`. Blue: bavl; orange: durable peers; grey: the
/// in-memory jmt and the floor.
pub fn plot(path: &Path, stores: &[&Outcome], title: &str) -> Result<()> {
    bavl_plotfont::ensure_font().map_err(|e| anyhow!(e))?;
    if stores.is_empty() {
        return Err(anyhow!("no store ran"));
    }
    draw(path, stores, title).map_err(|e| anyhow!("{e}"))
}
