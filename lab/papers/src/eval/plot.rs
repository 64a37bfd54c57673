//! The plots: insert/search time against tree size (Fig. 5), proof sizes against chunk size
//! and their CDF (Fig. 6), space efficiency against chunk size and during insertion (Fig. 7).
//!
//! Text needs a TrueType font (`bavl_labkit::plot::ensure_font`). Without a font the plots
//! are skipped with a warning; CSV, Markdown and JSON are unaffected.

use anyhow::Result;
use bavl_labkit::plot::{self, legend, png, short, Area, Digits, DrawResult, Line, BLUE, FONT};
use bavl_labkit::stats::{mean_std, percentile_sorted};
use plotters::prelude::*;

use super::measure::{PerfSample, SweepResult};
use super::report::ORDER;
use super::{Options, Results};

/// The structures' colours, in `ORDER`: the baseline grey, AVL* orange, the Merkle B+tree
/// green, bavl blue.
const COLORS: [RGBColor; 4] =
    [RGBColor(120, 120, 120), RGBColor(214, 120, 20), RGBColor(40, 150, 60), BLUE];

/// `(x, y, y_lo, y_hi)`.
type Point = (f64, f64, f64, f64);

/// One panel of lines (one per structure) with optional error bars, log or linear axes.
struct Lines {
    title: String,
    x_desc: &'static str,
    y_desc: &'static str,
    log_x: bool,
    log_y: bool,
    /// Per structure (index into `ORDER`): `(x, y, y_lo, y_hi)`.
    series: Vec<(usize, Vec<Point>)>,
    points: bool,
}

fn tr(v: f64, log: bool) -> f64 {
    if log {
        v.max(1e-12).log10()
    } else {
        v
    }
}

/// A tick: two decimals from 0.1 up to 10, three below, none above.
fn label(v: f64, log: bool) -> String {
    let v = if log { 10f64.powf(v) } else { v };
    let small = if v >= 0.1 { 2 } else { 3 };
    short(v, Digits { m: 0, k_from: 1e3, k: 0, plain_from: 10.0, plain: 0, small })
}

fn draw_lines(area: &Area<'_>, p: &Lines) -> DrawResult {
    let all: Vec<(f64, f64)> = p
        .series
        .iter()
        .flat_map(|(_, s)| s.iter().flat_map(|&(x, _, lo, hi)| [(x, lo), (x, hi)]))
        .map(|(x, y)| (tr(x, p.log_x), tr(y, p.log_y)))
        .collect();
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |a, v| (a.0.min(v.0), a.1.max(v.0)));
    let (y0, y1) = all.iter().fold((f64::MAX, f64::MIN), |a, v| (a.0.min(v.1), a.1.max(v.1)));
    let (xp, yp) = (((x1 - x0) * 0.05).max(0.05), ((y1 - y0) * 0.08).max(0.02));
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - xp)..(x1 + xp), (y0 - yp)..(y1 + yp + (y1 - y0) * 0.35))?;
    let (lx, ly) = (p.log_x, p.log_y);
    chart
        .configure_mesh()
        .x_desc(p.x_desc)
        .y_desc(p.y_desc)
        .x_label_formatter(&|v| label(*v, lx))
        .y_label_formatter(&|v| label(*v, ly))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, pts) in &p.series {
        let c = COLORS[*i];
        let t: Vec<(f64, f64, f64, f64)> = pts
            .iter()
            .map(|&(x, y, lo, hi)| (tr(x, lx), tr(y, ly), tr(lo, ly), tr(hi, ly)))
            .collect();
        let line: Vec<(f64, f64)> = t.iter().map(|v| (v.0, v.1)).collect();
        let dots = if p.points { 4 } else { 0 };
        Line::new(ORDER[*i], c, 2).dots(dots).draw(&mut chart, &line)?;
        if p.points {
            chart.draw_series(
                t.iter()
                    .filter(|v| v.3 > v.2)
                    .map(|v| ErrorBar::new_vertical(v.0, v.2, v.1, v.3, c.stroke_width(2), 8)),
            )?;
        }
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft, 15)
}

impl Lines {
    /// A panel titled `title`, axes described and logarithmic as given, `dots` with error
    /// bars at the points or bare lines.
    fn new(
        title: impl Into<String>,
        (x_desc, y_desc): (&'static str, &'static str),
        (log_x, log_y): (bool, bool),
        points: bool,
        series: Vec<(usize, Vec<Point>)>,
    ) -> Lines {
        Lines { title: title.into(), x_desc, y_desc, log_x, log_y, series, points }
    }
}

/// The sweep of structure `ORDER[i]` at chunk size `chunk`.
fn sweep(r: &Results, i: usize, chunk: usize) -> &SweepResult {
    r.sweeps.iter().find(|s| s.structure == ORDER[i] && s.chunk == chunk).expect("measured")
}

/// One series per structure of `structures`, a point per chunk size.
fn per_chunk(
    o: &Options,
    structures: impl Iterator<Item = usize>,
    point: impl Fn(usize, usize) -> Point,
) -> Vec<(usize, Vec<Point>)> {
    structures.map(|i| (i, o.chunks.iter().map(|&c| point(i, c)).collect())).collect()
}

fn perf_png(root: &Area<'_>, o: &Options, r: &Results) -> DrawResult {
    let areas = root.split_evenly((1, 2));
    for (area, search) in areas.iter().zip([false, true]) {
        let time = |i: usize, n: usize| {
            let of = |p: &&PerfSample| p.structure == ORDER[i] && p.elements == n;
            let ts: Vec<f64> = r
                .perf
                .iter()
                .filter(of)
                .map(|p| 1e3 * if search { p.search_s } else { p.insert_s })
                .collect();
            let (m, sd) = mean_std(&ts);
            (n as f64, m, (m - sd).max(m * 0.5), m + sd)
        };
        let series = (0..4).map(|i| (i, o.sizes.iter().map(|&n| time(i, n)).collect())).collect();
        let title = if search {
            format!("search 10% of the elements (chunk {})", o.perf_chunk)
        } else {
            format!("insert all elements, root every {} (chunk {})", o.commit_every, o.perf_chunk)
        };
        let axes = ("elements (log)", "milliseconds (log)");
        draw_lines(area, &Lines::new(title, axes, (true, true), true, series))?;
    }
    Ok(())
}

fn proof_png(root: &Area<'_>, o: &Options, r: &Results) -> DrawResult {
    let areas = root.split_evenly((1, 2));
    let series = per_chunk(o, 0..4, |i, c| {
        let mut h = sweep(r, i, c).proof_hashes.clone();
        h.sort_unstable();
        let q = |x: f64| f64::from(percentile_sorted(&h, 100.0 * x));
        // Spread the structures a little along x so the bars do not overlap.
        (c as f64 * 1.08f64.powi(i as i32 - 1), q(0.5), q(0.0), q(1.0))
    });
    let title = format!("hashes per proof, {} elements: median, min..max", o.sweep_elements);
    let axes = ("chunk size (log)", "hashes (log)");
    draw_lines(&areas[0], &Lines::new(title, axes, (true, true), true, series))?;
    let cdf_chunk = if o.chunks.contains(&1024) { 1024 } else { o.chunks[o.chunks.len() / 2] };
    let series = [0, 1, 3]
        .iter()
        .map(|&i| {
            let mut h = sweep(r, i, cdf_chunk).proof_hashes.clone();
            h.sort_unstable();
            let n = h.len() as f64;
            let mut pts = Vec::new();
            let mut j = 0;
            while j < h.len() {
                let k = h.partition_point(|&x| x <= h[j]);
                let (x, y) = (f64::from(h[j]), k as f64 / n);
                pts.push((x, j as f64 / n, j as f64 / n, j as f64 / n));
                pts.push((x, y, y, y));
                j = k;
            }
            (i, pts)
        })
        .collect();
    let title = format!("CDF of hashes per proof, chunk {cdf_chunk}");
    let axes = ("hashes", "fraction of proofs");
    draw_lines(&areas[1], &Lines::new(title, axes, (false, false), false, series))
}

fn space_png(root: &Area<'_>, o: &Options, r: &Results) -> DrawResult {
    let areas = root.split_evenly((1, 3));
    let series = per_chunk(o, 0..4, |i, c| {
        let s = sweep(r, i, c);
        (c as f64, s.space_mean, s.space_mean - s.space_std, s.space_mean + s.space_std)
    });
    let title = "mean space efficiency during insertion (± std)";
    let axes = ("chunk size (log)", "chunks / minimum");
    draw_lines(&areas[0], &Lines::new(title, axes, (true, false), true, series))?;
    let ends = [o.chunks[0], *o.chunks.last().expect("chunks")];
    for (area, c) in areas[1..].iter().zip(ends) {
        let series = (1..4)
            .map(|i| (i, sweep(r, i, c).series.iter().map(|&(n, v)| (n as f64, v, v, v)).collect()))
            .collect();
        let title = format!("space efficiency during insertion, chunk {c}");
        let axes = ("elements inserted", "chunks / minimum");
        draw_lines(area, &Lines::new(title, axes, (false, false), false, series))?;
    }
    Ok(())
}

/// Draws `perf.png`, `proof-size.png` and `space.png` into the output directory.
pub fn all(o: &Options, r: &Results) -> Result<()> {
    plot::ensure_font()?;
    png(&o.out_dir.join("perf.png"), (1500, 620), |root| perf_png(root, o, r))?;
    png(&o.out_dir.join("proof-size.png"), (1500, 620), |root| proof_png(root, o, r))?;
    png(&o.out_dir.join("space.png"), (1800, 620), |root| space_png(root, o, r))?;
    Ok(())
}
