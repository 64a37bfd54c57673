//! Sweeps as PNG line plots: sync time per method and Byzantine count against the swept
//! parameter, the bandwidth floor beside them (dashed). Text needs a TrueType font
//! (`bavl_labkit::plot::ensure_font`); without one the plot is skipped.

use std::path::Path;

use anyhow::Result;
use bavl_labkit::plot::{legend, png, short, Digits, Line, BLUE, FONT, ORANGE, TICK};
use bavl_labkit::stats::median;
use plotters::prelude::*;

use crate::runner::{Method, Row};

/// One line: a label, a colour, whether dashed, and (x, y) points.
pub struct Series {
    pub label: String,
    pub color: RGBColor,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

/// The median of `y` per distinct `x` over the rows kept by `keep` (failed runs left out).
pub fn points(
    rows: &[Row],
    keep: impl Fn(&Row) -> bool,
    x: impl Fn(&Row) -> f64,
    y: impl Fn(&Row) -> f64,
) -> Vec<(f64, f64)> {
    let mut xs: Vec<f64> = rows.iter().filter(|r| keep(r) && r.ok).map(&x).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs.into_iter()
        .map(|xv| {
            let ys: Vec<f64> =
                rows.iter().filter(|r| keep(r) && r.ok && x(r) == xv).map(&y).collect();
            (xv, median(&ys))
        })
        .collect()
}

/// The usual series of a sweep: each method honest and with `byz` liars, and each
/// method's floor.
pub fn standard(rows: &[Row], x: impl Fn(&Row) -> f64 + Copy, byz: &[usize]) -> Vec<Series> {
    let mut out = Vec::new();
    let blue = [BLUE, RGBColor(90, 160, 230), RGBColor(10, 50, 110)];
    let orange = [ORANGE, RGBColor(240, 170, 80), RGBColor(140, 60, 0)];
    for (m, colors) in [(Method::Bavl, blue), (Method::Baseline, orange)] {
        for (j, &b) in byz.iter().enumerate() {
            let pts = points(rows, |r| r.method == m && r.byzantine == b, x, |r| r.seconds);
            if !pts.is_empty() {
                out.push(Series {
                    label: format!("{} ({b} Byzantine)", m.name()),
                    color: colors[j % 3],
                    dashed: false,
                    points: pts,
                });
            }
        }
        let floor = points(rows, |r| r.method == m && r.byzantine == 0, x, |r| r.floor_s);
        if !floor.is_empty() {
            out.push(Series {
                label: format!("{} bandwidth floor", m.name()),
                color: colors[0],
                dashed: true,
                points: floor,
            });
        }
    }
    out
}

/// Draws the series; `log_x` for sizes.
pub fn draw(path: &Path, title: &str, x_label: &str, series: &[Series], log_x: bool) -> Result<()> {
    draw_y(path, title, (x_label, "sync time (s)"), series, log_x)
}

/// Draws the series with the axes labelled `(x, y)`; nothing when no series has a point.
pub fn draw_y(
    path: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    log_x: bool,
) -> Result<()> {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().copied()).collect();
    if all.is_empty() {
        return Ok(());
    }
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all.iter().map(|p| p.1).filter(|y| y.is_finite()).fold(0.0, f64::max) * 1.15;
    let tx = |v: f64| if log_x { v.max(1e-9).log10() } else { v };
    let pad = ((tx(x1) - tx(x0)).abs() * 0.05).max(0.1);
    png(path, (1100, 700), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 24))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((tx(x0) - pad)..(tx(x1) + pad), 0.0..y1.max(1e-3))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|v| {
                // Linear axes label whole numbers only (peers, liars).
                if !log_x && (v - v.round()).abs() > 0.01 {
                    return String::new();
                }
                let x = if log_x { 10f64.powf(*v) } else { *v };
                short(x, Digits { plain_from: 0.0, ..TICK })
            })
            .label_style((FONT, 16))
            .draw()?;
        for s in series.iter().filter(|s| !s.points.is_empty()) {
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
            let line = Line::new(s.label.clone(), s.color, 2);
            let line = if s.dashed { line.dashed() } else { line.dots(4) };
            line.draw(&mut chart, &pts)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft, 15)
    })?;
    Ok(())
}
