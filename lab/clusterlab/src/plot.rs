//! The figures of `docs/results/cluster/`: `costs.png` (measured CPU and messages per
//! operation against partitions), `model.png` (modelled throughput against partitions,
//! with the ideal line P x T(1)), `cache.png` (measured throughput and directory lookups per
//! operation with the client cache on and off). Text needs a TrueType font
//! (`bavl-plotfont`); without one the plots are skipped with a note.

use std::path::Path;

use anyhow::{anyhow, Result};
use bavl_plotfont::FONT;
use plotters::prelude::*;

use crate::experiments::Results;
use crate::load::Workload;
use crate::metrics::metrics;
use crate::model::Modelled;

type E = Box<dyn std::error::Error>;
/// One line: its legend, colour and (partitions, value) points.
type Series = (String, RGBColor, Vec<(u64, f64)>);

const WORKLOADS: [(Workload, &str, RGBColor); 4] = [
    (Workload::Search, "search", RGBColor(31, 102, 181)),
    (Workload::Update, "update", RGBColor(214, 110, 20)),
    (Workload::Insert, "insert", RGBColor(60, 150, 60)),
    (Workload::Mixed, "mixed", RGBColor(150, 60, 160)),
];

pub fn all(dir: &Path, r: &Results, modelled: &[Modelled]) -> Result<()> {
    bavl_plotfont::ensure_font().map_err(|e| anyhow!(e))?;
    costs(&dir.join("costs.png"), r).map_err(|e| anyhow!("{e}"))?;
    model(&dir.join("model.png"), modelled).map_err(|e| anyhow!("{e}"))?;
    cache(&dir.join("cache.png"), r).map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// One panel of lines against partitions (log2 x axis positions 0..3).
fn lines(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    series: &[Series],
    dashed: Option<&[(u64, f64)]>,
) -> Result<(), E> {
    let hi = series.iter().flat_map(|s| s.2.iter().map(|p| p.1)).fold(0.0, f64::max).max(1e-9);
    let hi = dashed.map_or(hi, |d| d.iter().map(|p| p.1).fold(hi, f64::max)) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.8f64..8.5f64, 0.0..hi)?;
    chart
        .configure_mesh()
        .x_desc("partitions")
        .y_desc(y_desc)
        .x_labels(8)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && [1.0, 2.0, 4.0, 8.0].contains(&i) {
                format!("{i}")
            } else {
                String::new()
            }
        })
        .label_style((FONT, 14))
        .draw()?;
    for (name, color, pts) in series {
        let pts: Vec<(f64, f64)> = pts.iter().map(|(p, v)| (*p as f64, *v)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    if let Some(d) = dashed {
        let pts: Vec<(f64, f64)> = d.iter().map(|(p, v)| (*p as f64, *v)).collect();
        chart
            .draw_series(DashedLineSeries::new(pts, 6, 4, BLACK.stroke_width(1)))?
            .label("ideal P x T(1), update")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

fn costs(path: &Path, r: &Results) -> Result<(), E> {
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (a, b) = root.split_horizontally(600);
    let series = |f: &dyn Fn(&crate::metrics::Metrics) -> f64| -> Vec<Series> {
        WORKLOADS
            .iter()
            .map(|(w, name, c)| {
                let pts = r
                    .sweep
                    .iter()
                    .filter(|x| x.cache && x.setting == "default" && x.workload == *w)
                    .map(|x| (x.partitions, f(&metrics(&x.throughput, Some(&x.background)))))
                    .collect();
                (name.to_string(), *c, pts)
            })
            .collect()
    };
    let cpu = series(&|m| m.cpu_s_per_op * 1e6);
    lines(
        &a,
        "measured CPU per operation (nodes + client)",
        "CPU microseconds per op",
        &cpu,
        None,
    )?;
    let rpcs = series(&|m| m.rpcs_per_op);
    lines(&b, "measured request/reply exchanges per operation", "RPCs per op", &rpcs, None)?;
    root.present()?;
    Ok(())
}

fn model(path: &Path, modelled: &[Modelled]) -> Result<(), E> {
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let series: Vec<Series> = WORKLOADS
        .iter()
        .map(|(w, name, c)| {
            let pts: Vec<(u64, f64)> = modelled
                .iter()
                .filter(|m| m.cache && m.workload == *w)
                .map(|m| (m.partitions, m.throughput_ops_s / 1000.0))
                .collect();
            let eff = modelled
                .iter()
                .find(|m| m.cache && m.workload == *w && m.partitions == 8)
                .and_then(|m| m.efficiency)
                .map_or(String::new(), |e| format!(" (efficiency at 8: {e:.2})"));
            (format!("{name}{eff}"), *c, pts)
        })
        .collect();
    let ideal: Vec<(u64, f64)> = modelled
        .iter()
        .find(|m| m.cache && m.workload == Workload::Update && m.partitions == 1)
        .map(|one| {
            [1, 2, 4, 8].iter().map(|&p| (p, p as f64 * one.throughput_ops_s / 1000.0)).collect()
        })
        .unwrap_or_default();
    lines(
        &root,
        "modelled throughput, one core per partition leader (calibrated on measured CPU per op)",
        "thousand ops per second",
        &series,
        Some(&ideal),
    )?;
    root.present()?;
    Ok(())
}

fn cache(path: &Path, r: &Results) -> Result<(), E> {
    let offs: Vec<_> = r.sweep.iter().filter(|x| !x.cache).collect();
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (a, b) = root.split_horizontally(600);
    let mut vals = Vec::new();
    for off in &offs {
        let Some(on) = r.sweep.iter().find(|x| {
            x.cache
                && x.setting == "default"
                && x.partitions == off.partitions
                && x.workload == off.workload
        }) else {
            continue;
        };
        let (mo, mf) = (metrics(&on.throughput, None), metrics(&off.throughput, None));
        let name = format!("{:?} {}P", off.workload, off.partitions).to_lowercase();
        vals.push((name, mo, mf));
    }
    let bars = |area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
                title: &str,
                y: &str,
                f: &dyn Fn(&crate::metrics::Metrics) -> f64|
     -> Result<(), E> {
        let n = vals.len().max(1);
        let hi = vals.iter().map(|(_, a, b)| f(a).max(f(b))).fold(0.0, f64::max).max(1e-9) * 1.2;
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.6..(n as f64 - 0.4), 0.0..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < vals.len() {
                    vals[i as usize].0.clone()
                } else {
                    String::new()
                }
            })
            .y_desc(y)
            .label_style((FONT, 14))
            .draw()?;
        for (i, (_, on, off)) in vals.iter().enumerate() {
            let x = i as f64;
            let on_c = RGBColor(31, 102, 181);
            let off_c = RGBColor(200, 60, 60);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.3, 0.0), (x, f(on))],
                on_c.filled(),
            )))?;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, 0.0), (x + 0.3, f(off))],
                off_c.filled(),
            )))?;
        }
        chart.draw_series(std::iter::once(Text::new(
            "blue: cache on, red: cache off",
            (-0.5, hi * 0.95),
            (FONT, 14).into_font(),
        )))?;
        Ok(())
    };
    bars(&a, "measured throughput on this 2-core machine", "ops per second", &|m| {
        m.throughput_ops_s
    })?;
    bars(&b, "measured directory lookups per operation", "lookups per op", &|m| {
        m.dir_lookups_per_op
    })?;
    root.present()?;
    Ok(())
}
