//! Sweeps as PNG line plots: sync time per method and Byzantine count against the swept
//! parameter, the bandwidth floor beside them (dashed). Text needs a TrueType font (the
//! DejaVu/Liberation paths, or `BAVL_BENCH_FONT`); without one the plot is skipped.

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_plotfont::FONT;
use plotters::prelude::*;

use crate::runner::{Method, Row};

/// One line: a label, a colour, whether dashed, and (x, y) points.
pub struct Series {
    pub label: String,
    pub color: RGBColor,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
            let ys = rows.iter().filter(|r| keep(r) && r.ok && x(r) == xv).map(&y).collect();
            (xv, median(ys))
        })
        .collect()
}

/// The usual series of a sweep: each method honest and with `byz` liars, and each
/// method's floor.
pub fn standard(rows: &[Row], x: impl Fn(&Row) -> f64 + Copy, byz: &[usize]) -> Vec<Series> {
    let mut out = Vec::new();
    let blue = [RGBColor(31, 102, 181), RGBColor(90, 160, 230), RGBColor(10, 50, 110)];
    let orange = [RGBColor(214, 110, 20), RGBColor(240, 170, 80), RGBColor(140, 60, 0)];
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

/// Draws the series with the axes labelled `(x, y)`.
pub fn draw_y(
    path: &Path,
    title: &str,
    labels: (&str, &str),
    series: &[Series],
    log_x: bool,
) -> Result<()> {
    bavl_plotfont::ensure_font().map_err(|e| anyhow!(e))?;
    draw_inner(path, title, labels, series, log_x).map_err(|e| anyhow!("plotting: {e}"))
}

type E = Box<dyn std::error::Error>;

fn draw_inner(
    path: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    log_x: bool,
) -> Result<(), E> {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().copied()).collect();
    if all.is_empty() {
        return Ok(());
    }
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all.iter().map(|p| p.1).filter(|y| y.is_finite()).fold(0.0, f64::max) * 1.15;
    let root = BitMapBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let tx = |v: f64| if log_x { v.max(1e-9).log10() } else { v };
    let pad = ((tx(x1) - tx(x0)).abs() * 0.05).max(0.1);
    let mut chart = ChartBuilder::on(&root)
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
            if x >= 1e6 {
                format!("{:.1}M", x / 1e6)
            } else if x >= 1e3 {
                format!("{:.0}k", x / 1e3)
            } else {
                format!("{x:.0}")
            }
        })
        .label_style((FONT, 16))
        .draw()?;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        let style = ShapeStyle { color: s.color.to_rgba(), filled: true, stroke_width: 2 };
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 8, 6, style))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, style)))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
