//! The capacity sweep as a PNG: one panel per figure, capacity on a log2 axis, the
//! default capacity ringed, and the brief's targets as dashed red lines.
//!
//! Text needs a TrueType font (`bavl_labkit::plot::ensure_font`). Without a font the plot
//! is skipped with a warning; the JSON and CSV are unaffected.

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_labkit::plot::{
    self, legend, png_titled, tick, Area, DrawResult, Line, BLUE, FONT, ORANGE,
};
use plotters::prelude::*;

use crate::measure::CapacityResult;

/// A figure of one capacity's results.
type Figure = fn(&CapacityResult) -> f64;

/// One panel: a figure against capacity.
struct Panel {
    title: &'static str,
    get: Figure,
    /// Plot log10 of the values.
    log_y: bool,
    /// A horizontal target line and its legend.
    target: Option<(f64, &'static str)>,
    /// A second series (dashed): per-capacity reference values and legend.
    reference: Option<(Figure, &'static str)>,
}

fn panels() -> Vec<Panel> {
    let p = |title, get, log_y, target, reference| Panel { title, get, log_y, target, reference };
    vec![
        p(
            "updates/s on one core (10k blocks + root_hash)",
            |c| c.update_ops_per_s,
            false,
            Some((200e3, "target >= 200k")),
            None,
        ),
        p("gets/s (random existing keys)", |c| c.get_ops_per_s, false, None, None),
        p(
            "membership proof bytes (median)",
            |c| c.membership_proof_bytes_median as f64,
            false,
            Some((800.0, "target <= 800")),
            None,
        ),
        p(
            "space efficiency (chunks / minimum)",
            |c| c.space_efficiency,
            false,
            Some((1.25, "target <= 1.25")),
            None,
        ),
        p(
            "verify + rebuild MB/s (1 thread)",
            |c| c.verify_rebuild_mb_per_s,
            false,
            None,
            Some((|c| 0.5 * c.sha256_over_chunk_bytes_mb_per_s, "target: 0.5 x SHA-256 MB/s")),
        ),
        p("exported chunk bytes (mean)", |c| c.chunk_bytes_mean, true, None, None),
    ]
}

/// Draws the sweep into `path`.
pub fn plot(
    path: &Path,
    sweep: &[CapacityResult],
    default_capacity: u32,
    title: &str,
) -> Result<()> {
    plot::ensure_font()?;
    if sweep.is_empty() {
        return Err(anyhow!("empty sweep"));
    }
    png_titled(path, (1800, 1050), (title, 30), |body| {
        for (area, panel) in body.split_evenly((2, 3)).iter().zip(panels()) {
            sweep_panel(area, &panel, sweep, default_capacity)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// One panel of the sweep: the figure against log2 capacity, the default ringed, the
/// target or reference dashed.
fn sweep_panel(
    area: &Area,
    panel: &Panel,
    sweep: &[CapacityResult],
    default_capacity: u32,
) -> DrawResult {
    let x = |c: &CapacityResult| f64::from(c.capacity).log2();
    let (x_lo, x_hi) =
        sweep.iter().map(x).fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let ty = |v: f64| if panel.log_y { v.max(1e-9).log10() } else { v };
    let pts: Vec<(f64, f64)> = sweep.iter().map(|c| (x(c), ty((panel.get)(c)))).collect();
    let refs: Vec<(f64, f64)> = panel
        .reference
        .map(|(f, _)| sweep.iter().map(|c| (x(c), ty(f(c)))).collect())
        .unwrap_or_default();
    let mut ys: Vec<f64> = pts.iter().chain(&refs).map(|p| p.1).collect();
    ys.extend(panel.target.map(|(t, _)| ty(t)));
    let (lo, hi) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let pad = ((hi - lo) * 0.12).max(if panel.log_y { 0.05 } else { hi.abs() * 0.05 + 1e-9 });
    let lo = if panel.log_y || lo - pad > 0.0 { lo - pad } else { 0.0 };
    // Headroom above everything for the legend.
    let hi = hi + (hi - lo) * 0.3;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, (FONT, 23))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(78)
        .build_cartesian_2d((x_lo - 0.4)..(x_hi + 0.4), lo..(hi + pad))?;
    let yfmt = |v: &f64| tick(if panel.log_y { 10f64.powf(*v) } else { *v });
    let xfmt = |v: &f64| {
        if (v - v.round()).abs() < 1e-6 {
            format!("{}", 2f64.powi(v.round() as i32))
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(12)
        .y_labels(7)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .x_desc("chunk capacity (keys, log scale)")
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 17))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let line = Line { label: None, color: BLUE, width: 3, dashed: false, dots: 5 };
    line.draw(&mut chart, &pts)?;
    let dflt =
        sweep.iter().zip(&pts).filter(|(c, _)| c.capacity == default_capacity).map(|(_, p)| *p);
    chart
        .draw_series(dflt.map(|p| Circle::new(p, 11, RED.stroke_width(3))))?
        .label(format!("default capacity {default_capacity}"))
        .legend(|(x, y)| Circle::new((x + 10, y), 6, RED.stroke_width(3)));
    if let Some((t, label)) = panel.target {
        let target = [(x_lo - 0.4, ty(t)), (x_hi + 0.4, ty(t))];
        Line::new(label, plot::RED, 2).dashed().draw(&mut chart, &target)?;
    }
    if let Some((_, label)) = panel.reference {
        Line::new(label, plot::RED, 2).dashed().draw(&mut chart, &refs)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 16)
}

/// One time series of the checkpoint experiment.
pub struct Series {
    pub label: String,
    /// The blocking baseline (drawn in another colour).
    pub blocking: bool,
    /// The control: no checkpoint ran; the intervals are a bavl run's, carried over.
    pub control: bool,
    /// (time s, ops/s) at the middle of each window.
    pub points: Vec<(f64, f64)>,
    /// Checkpoint intervals: start, certain end, latest possible end (seconds).
    pub intervals: Vec<(f64, f64, f64)>,
    /// Mean throughput of the windows outside checkpoints.
    pub outside_mean: f64,
}

/// Draws throughput against time, one panel per series (same axes), checkpoint intervals
/// shaded (lighter where their end is uncertain).
pub fn plot_series(path: &Path, series: &[Series], title: &str) -> Result<()> {
    plot::ensure_font()?;
    if series.is_empty() {
        return Err(anyhow!("no series"));
    }
    let x_hi = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0).chain(s.intervals.iter().map(|c| c.2)))
        .fold(0.0f64, f64::max)
        * 1.01;
    let y_hi = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max)
        * 1.25
        / 1e3;
    let y_hi = if y_hi > 0.0 { y_hi } else { 1.0 };
    let height = 120 + 300 * series.len() as u32;
    png_titled(path, (1800, height), (title, 28), |body| {
        for (area, s) in body.split_evenly((series.len(), 1)).iter().zip(series) {
            series_panel(area, s, x_hi, y_hi)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// One run's throughput against time, its checkpoint intervals shaded.
fn series_panel(area: &Area, s: &Series, x_hi: f64, y_hi: f64) -> DrawResult {
    let shade = plot::RED;
    let color = match (s.blocking, s.control) {
        (true, _) => ORANGE,
        (_, true) => RGBColor(90, 90, 90),
        _ => BLUE,
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&s.label, (FONT, 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..x_hi, 0.0..y_hi)?;
    chart
        .configure_mesh()
        .x_labels(16)
        .y_labels(6)
        .x_desc("seconds from the first measured block")
        .y_desc("k ops/s")
        .x_label_formatter(&|v| if x_hi < 20.0 { format!("{v:.1}") } else { format!("{v:.0}") })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 17))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let label = match (s.blocking, s.control) {
        (true, _) => "writer paused: checkpoint",
        (_, true) => "none ran: the bavl run's checkpoints, block for block",
        _ => "checkpoint running",
    };
    let certain = s
        .intervals
        .iter()
        .map(|&(a, b, _)| Rectangle::new([(a, 0.0), (b, y_hi)], shade.mix(0.18).filled()));
    chart.draw_series(certain)?.label(label).legend(move |(x, y)| {
        Rectangle::new([(x, y - 6), (x + 20, y + 6)], shade.mix(0.18).filled())
    });
    let uncertain = s.intervals.iter().filter(|c| c.2 > c.1);
    chart.draw_series(
        uncertain.map(|&(_, b, c)| Rectangle::new([(b, 0.0), (c, y_hi)], shade.mix(0.07).filled())),
    )?;
    let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x, y / 1e3)).collect();
    Line::new("throughput per window", color, 2).draw(&mut chart, &pts)?;
    let m = s.outside_mean / 1e3;
    if m.is_finite() {
        let mean = Line::new("mean outside checkpoints", RGBColor(102, 102, 102), 1).dashed();
        mean.draw(&mut chart, &[(0.0, m), (x_hi, m)])?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 16)
}
