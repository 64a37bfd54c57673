//! The figures of `docs/results/cluster/`: `costs.png` (measured CPU and messages per
//! operation against partitions), `model.png` (modelled throughput against partitions,
//! with the ideal line P x T(1)), `cache.png` (measured throughput and directory lookups per
//! operation with the client cache on and off). Text needs a TrueType font
//! (`bavl_labkit::plot`); without one the plots are skipped with a note.

use std::path::Path;

use anyhow::Result;
use bavl_labkit::plot::{
    self, legend, png, Area, Bars, Category, DrawResult, Line, BLUE, FONT, ORANGE,
};
use plotters::prelude::*;

use crate::experiments::Results;
use crate::load::Workload;
use crate::metrics::{metrics, Metrics};
use crate::model::Modelled;

/// One line: its legend, colour and (partitions, value) points.
type Series = (String, RGBColor, Vec<(u64, f64)>);

const WORKLOADS: [(Workload, &str, RGBColor); 4] = [
    (Workload::Search, "search", BLUE),
    (Workload::Update, "update", ORANGE),
    (Workload::Insert, "insert", RGBColor(60, 150, 60)),
    (Workload::Mixed, "mixed", RGBColor(150, 60, 160)),
];

pub fn all(dir: &Path, r: &Results, modelled: &[Modelled]) -> Result<()> {
    plot::ensure_font()?;
    png(&dir.join("costs.png"), (1200, 480), |root| costs(root, r))?;
    png(&dir.join("model.png"), (900, 520), |root| model(root, modelled))?;
    png(&dir.join("cache.png"), (1200, 480), |root| cache(root, r))?;
    Ok(())
}

/// One panel of lines against partitions (log2 x axis positions 0..3).
fn lines(
    area: &Area,
    title: &str,
    y_desc: &str,
    series: &[Series],
    dashed: Option<&[(u64, f64)]>,
) -> DrawResult {
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
        Line::new(name.clone(), *color, 2).dots(4).draw(&mut chart, &pts)?;
    }
    if let Some(d) = dashed {
        let pts: Vec<(f64, f64)> = d.iter().map(|(p, v)| (*p as f64, *v)).collect();
        Line::new("ideal P x T(1), update", BLACK, 1).dashed().draw(&mut chart, &pts)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft, 14)
}

fn costs(root: &Area, r: &Results) -> DrawResult {
    let (a, b) = root.split_horizontally(600);
    let series = |f: &dyn Fn(&Metrics) -> f64| -> Vec<Series> {
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
    lines(&b, "measured request/reply exchanges per operation", "RPCs per op", &rpcs, None)
}

fn model(root: &Area, modelled: &[Modelled]) -> DrawResult {
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
        root,
        "modelled throughput, one core per partition leader (calibrated on measured CPU per op)",
        "thousand ops per second",
        &series,
        Some(&ideal),
    )
}

fn cache(root: &Area, r: &Results) -> DrawResult {
    let offs: Vec<_> = r.sweep.iter().filter(|x| !x.cache).collect();
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
    let (on_c, off_c) = (BLUE.to_rgba(), RGBColor(200, 60, 60).to_rgba());
    let bars = |area: &Area, title: &str, y_desc: &str, f: &dyn Fn(&Metrics) -> f64| {
        let categories: Vec<Category> = vals
            .iter()
            .map(|(name, on, off)| Category {
                name: name.clone(),
                bars: vec![(f(on), on_c), (f(off), off_c)],
                ..Category::default()
            })
            .collect();
        let legend = vec![("cache on".to_string(), on_c), ("cache off".to_string(), off_c)];
        let (caption, labels, value, line) = (18, 14, None, None);
        Bars { title, caption, labels, y_desc, value, legend, line, categories: &categories }
            .draw(area)
    };
    bars(&a, "measured throughput on this 2-core machine", "ops per second", &|m| {
        m.throughput_ops_s
    })?;
    bars(&b, "measured directory lookups per operation", "lookups per op", &|m| {
        m.dir_lookups_per_op
    })
}
