//! What a run writes: one [`Row`] per state size, the headline against the targets
//! ([`headline`]), the rows as CSV and the figure (time and peak RSS against the state's
//! size, [`plot`]).
//!
//! Definitions (the JSON's fields):
//! - `sync_over_floor` = the sync's wall time / the floor's (the fastest of the floor's
//!   fetches of the same run);
//! - `budget_bytes` = the memory `bavl sync` is configured to use whatever the state:
//!   its `--budget-mib` of unverified data (128 MiB) plus the 16 MiB of verified chunks on
//!   their way to the disk (`bavl sync --help`);
//! - `rss_over_budget_bytes_per_key` = (peak RSS − budget) / keys: what the joiner holds
//!   per key beyond its configured budget (negative when it stays under it);
//! - `ok` = the sync exited 0 with the trusted root and the key count, and the synced
//!   store then opened (`bavl stats`) and checked (`bavl check`) with that root.

use std::path::Path;

use anyhow::Result;
use bavl_labkit::cgroup::CgroupStats;
use bavl_labkit::plot::{self, Line, BLUE, GREY, ORANGE, RED};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::floors::Floors;

/// The size the headline's fields are named after.
pub const HEADLINE_KEYS: u64 = 100_000_000;
/// Targets: the sync within 1.2x the floor, at most 8 bytes a key over the budget, ok.
pub const TARGET_OVER_FLOOR: f64 = 1.2;
pub const TARGET_RSS_PER_KEY: f64 = 8.0;

/// A measured child: how it ended, its time and memory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Step {
    pub ok: bool,
    pub seconds: f64,
    pub peak_rss_bytes: u64,
    pub cpu_s: f64,
    /// The memory cgroup's counters (absent when it ran outside one).
    pub cgroup: Option<CgroupStats>,
    /// Why it was not ok.
    pub error: Option<String>,
}

/// The in-memory sync of before (another `bavl` binary), beside the sync to disk.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InMemory {
    pub binary: String,
    pub step: Step,
    /// Its wall time over the floor of the same size.
    pub over_floor: f64,
}

/// One state size.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub keys: u64,
    pub capacity: u32,
    pub chunks: u64,
    /// Bytes of the import's input (`bin` records).
    pub input_bytes: u64,
    /// Generating and writing the input (not part of the import).
    pub input_write_s: f64,
    pub import: Step,
    pub import_keys_per_s: f64,
    /// The keys per second the floors allow: the store's bytes at the disk's write rate,
    /// or the input's bytes hashed once, whichever is slower.
    pub import_floor_keys_per_s: f64,
    /// The store's bytes at the disk's sequential write rate (write + fsync), as keys/s.
    pub import_disk_floor_keys_per_s: f64,
    /// The input's bytes hashed once with SHA-256 on one core, as keys/s.
    pub import_sha256_floor_keys_per_s: f64,
    /// Bytes of the imported store's files.
    pub store_bytes: u64,
    /// From starting the ten servers until all of them serve (each computes the
    /// manifest, which exports every chunk).
    pub serve_start_s: f64,
    /// Each server's peak RSS at the end (`--peer` order): paged, within its cache.
    pub server_peak_rss_bytes: Vec<u64>,
    /// The floor's fetches of every chunk (before and after the sync).
    pub floor_runs_s: Vec<f64>,
    pub floor_s: f64,
    pub floor_bytes: u64,
    pub floor_connections: usize,
    /// The sync to disk, in the memory cgroup.
    pub sync: Step,
    pub sync_over_floor: f64,
    /// From the sync's `--json` summary.
    pub fetched_bytes: u64,
    pub banned: u64,
    pub install_s: f64,
    pub budget_bytes: u64,
    pub rss_over_budget_bytes_per_key: f64,
    /// Bytes of the synced store's files.
    pub synced_store_bytes: u64,
    /// `bavl stats` and `bavl check` of the synced store, in the cgroup.
    pub stats: Step,
    pub check: Step,
    pub ok: bool,
    pub in_memory: Option<InMemory>,
}

impl Row {
    /// The import's rate and the rate its floors allow (`store_bytes` and `input_bytes`
    /// known).
    pub fn derive_import(&mut self, f: &Floors) {
        self.import_keys_per_s = self.keys as f64 / self.import.seconds.max(1e-9);
        let disk_s = self.store_bytes as f64 / f.disk_write_bytes_per_s.max(1e-9);
        let hash_s = self.input_bytes as f64 / f.sha256_bytes_per_s.max(1e-9);
        let rate = |secs: f64| self.keys as f64 / secs.max(1e-9);
        self.import_disk_floor_keys_per_s = rate(disk_s);
        self.import_sha256_floor_keys_per_s = rate(hash_s);
        self.import_floor_keys_per_s = rate(disk_s.max(hash_s));
    }

    /// Fills the ratios from the measurements.
    pub fn derive(&mut self) {
        self.floor_s = self.floor_runs_s.iter().copied().fold(f64::INFINITY, f64::min);
        self.import_keys_per_s = self.keys as f64 / self.import.seconds.max(1e-9);
        self.sync_over_floor = self.sync.seconds / self.floor_s;
        self.rss_over_budget_bytes_per_key =
            rss_over_budget(self.sync.peak_rss_bytes, self.budget_bytes, self.keys);
        self.ok = self.sync.ok && self.stats.ok && self.check.ok;
        if let Some(m) = &mut self.in_memory {
            m.over_floor = m.step.seconds / self.floor_s;
        }
    }
}

/// (peak − budget) / keys.
pub fn rss_over_budget(peak: u64, budget: u64, keys: u64) -> f64 {
    (peak as f64 - budget as f64) / keys.max(1) as f64
}

/// The headline fields: the `*_100m_*` ones from the 100M row (null when no 100M row was
/// measured), `headline_keys` the largest size measured, `largest` its figures whatever
/// its size, and which targets it met.
pub fn headline(rows: &[Row]) -> Value {
    let largest = rows.iter().max_by_key(|r| r.keys);
    let at = rows.iter().find(|r| r.keys == HEADLINE_KEYS);
    let f = |r: Option<&Row>, g: fn(&Row) -> Value| r.map_or(Value::Null, g);
    let over = |r: &Row| json!(r.sync_over_floor);
    let rss = |r: &Row| json!(r.rss_over_budget_bytes_per_key);
    let ok = |r: &Row| json!(u8::from(r.ok));
    let import = |r: &Row| json!(r.import_keys_per_s);
    json!({
        "headline_keys": largest.map(|r| r.keys),
        "sync_100m_over_floor": f(at, over),
        "sync_100m_rss_over_budget_bytes_per_key": f(at, rss),
        "sync_100m_ok": f(at, ok),
        "import_100m_keys_per_s": f(at, import),
        "largest": largest.map(|r| json!({
            "keys": r.keys,
            "sync_over_floor": r.sync_over_floor,
            "rss_over_budget_bytes_per_key": r.rss_over_budget_bytes_per_key,
            "ok": u8::from(r.ok),
            "import_keys_per_s": r.import_keys_per_s,
            "import_floor_keys_per_s": r.import_floor_keys_per_s,
            "import_disk_floor_keys_per_s": r.import_disk_floor_keys_per_s,
            "import_sha256_floor_keys_per_s": r.import_sha256_floor_keys_per_s,
            "met": {
                "sync_over_floor": r.sync_over_floor <= TARGET_OVER_FLOOR,
                "rss_over_budget_bytes_per_key": r.rss_over_budget_bytes_per_key <= TARGET_RSS_PER_KEY,
                "ok": r.ok,
            },
        })),
        "targets": {
            "sync_100m_over_floor": format!("<= {TARGET_OVER_FLOOR}"),
            "sync_100m_rss_over_budget_bytes_per_key": format!("<= {TARGET_RSS_PER_KEY}"),
            "sync_100m_ok": "1",
            "import_100m_keys_per_s": "reported, beside its floors",
        },
    })
}

/// The rows as CSV, one line per size.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "keys,capacity,chunks,import_s,import_keys_per_s,import_floor_keys_per_s,serve_start_s,floor_s,sync_s,sync_over_floor,peak_rss_bytes,cgroup_peak_bytes,budget_bytes,rss_over_budget_bytes_per_key,ok,in_memory_s,in_memory_peak_rss_bytes\n",
    );
    for r in rows {
        let cg = r.sync.cgroup.as_ref().map_or(String::new(), |c| c.max_usage_bytes.to_string());
        let (ms, mr) = r.in_memory.as_ref().map_or((String::new(), String::new()), |m| {
            (format!("{:.3}", m.step.seconds), m.step.peak_rss_bytes.to_string())
        });
        out.push_str(&format!(
            "{},{},{},{:.3},{:.0},{:.0},{:.3},{:.3},{:.3},{:.3},{},{},{},{:.3},{},{},{}\n",
            r.keys,
            r.capacity,
            r.chunks,
            r.import.seconds,
            r.import_keys_per_s,
            r.import_floor_keys_per_s,
            r.serve_start_s,
            r.floor_s,
            r.sync.seconds,
            r.sync_over_floor,
            r.sync.peak_rss_bytes,
            cg,
            r.budget_bytes,
            r.rss_over_budget_bytes_per_key,
            u8::from(r.ok),
            ms,
            mr
        ));
    }
    out
}

/// The figure: wall times (left) and peak RSS (right) against the state's size, both axes
/// logarithmic.
pub fn plot(path: &Path, rows: &[Row], limit: Option<u64>) -> Result<()> {
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| r.keys);
    let lg = |v: f64| v.max(1e-3).log10();
    let pts = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter().filter_map(|r| f(r).map(|y| (lg(r.keys as f64), lg(y)))).collect()
    };
    let times = [
        (Line::new("bavl import", GREY, 2).dots(4), pts(&|r| Some(r.import.seconds))),
        (
            Line::new("bavl sync (to disk, 3 of 10 lie)", BLUE, 3).dots(5),
            pts(&|r| Some(r.sync.seconds)),
        ),
        (Line::new("floor: plain HTTP fetch", BLUE, 2).dashed().dots(3), pts(&|r| Some(r.floor_s))),
        (
            Line::new("bavl sync of before (in memory)", ORANGE, 2).dots(4),
            pts(&|r| r.in_memory.as_ref().map(|m| m.step.seconds)),
        ),
    ];
    let mb = |b: u64| b as f64 / 1e6;
    let mut mems = vec![
        (
            Line::new("bavl sync peak RSS", BLUE, 3).dots(5),
            pts(&|r| Some(mb(r.sync.peak_rss_bytes))),
        ),
        (
            Line::new("budget (128 MiB + 16 MiB)", GREY, 2).dashed(),
            pts(&|r| Some(mb(r.budget_bytes))),
        ),
        (
            Line::new("in-memory sync peak RSS", ORANGE, 2).dots(4),
            pts(&|r| r.in_memory.as_ref().map(|m| mb(m.step.peak_rss_bytes))),
        ),
    ];
    if let Some(l) = limit {
        mems.push((Line::new("cgroup limit", RED, 2).dashed(), pts(&|_| Some(mb(l)))));
    }
    let title = "A node joins: sync to disk vs the floor, and its memory, against the state's size";
    plot::png_titled(path, (1400, 560), (title, 22), |area| {
        let (left, right) = area.split_horizontally(700);
        panel(&left, "wall time (s)", &times)?;
        panel(&right, "peak memory (MB)", &mems)?;
        Ok(())
    })?;
    Ok(())
}

fn panel(
    area: &plot::Area<'_>,
    y_desc: &str,
    series: &[(Line, Vec<(f64, f64)>)],
) -> plot::DrawResult {
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (5.0, 8.0, 0.0, 1.0);
    }
    let mut chart = ChartBuilder::on(area)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - 0.3)..(x1 + 0.3), (y0 - 0.3)..(y1 + 0.5))?;
    let pow = |v: &f64| sig3(10f64.powf(*v));
    chart
        .configure_mesh()
        .x_labels(6)
        .x_desc("keys in the state")
        .y_desc(y_desc)
        .x_label_formatter(&pow)
        .y_label_formatter(&pow)
        .label_style((plot::FONT, 15))
        .axis_desc_style((plot::FONT, 15))
        .draw()?;
    for (line, points) in series {
        if !points.is_empty() {
            line.draw(&mut chart, points)?;
        }
    }
    plot::legend(&mut chart, SeriesLabelPosition::UpperLeft, 14)
}

/// Ticks of a log axis fall between round numbers: three significant digits (63.1, 2510,
/// 31.6M).
fn sig3(v: f64) -> String {
    let (x, unit) = if v >= 1e6 { (v / 1e6, "M") } else { (v, "") };
    let decimals = (2 - x.abs().max(1e-9).log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(keys: u64, sync_s: f64, floor: &[f64], peak: u64) -> Row {
        let mut r = Row {
            keys,
            floor_runs_s: floor.to_vec(),
            budget_bytes: 144 << 20,
            sync: Step { ok: true, seconds: sync_s, peak_rss_bytes: peak, ..Step::default() },
            stats: Step { ok: true, ..Step::default() },
            check: Step { ok: true, ..Step::default() },
            import: Step { ok: true, seconds: 4.0, ..Step::default() },
            ..Row::default()
        };
        r.derive();
        r
    }

    #[test]
    fn ratios_come_from_the_fastest_floor_and_the_budget() {
        let r = row(10_000_000, 60.0, &[52.0, 50.0], (144 << 20) + 30_000_000);
        assert_eq!(r.floor_s, 50.0);
        assert!((r.sync_over_floor - 1.2).abs() < 1e-12);
        assert!((r.rss_over_budget_bytes_per_key - 3.0).abs() < 1e-12);
        assert_eq!(r.import_keys_per_s, 2_500_000.0);
        assert!(r.ok);
        let mut bad = r.clone();
        bad.check.ok = false;
        bad.derive();
        assert!(!bad.ok, "a store that does not check is not ok");
        assert!(rss_over_budget(100, 200, 10) < 0.0, "under the budget is negative");
    }

    #[test]
    fn log_ticks_keep_three_digits() {
        assert_eq!(sig3(63.0957), "63.1");
        assert_eq!(sig3(2511.9), "2512");
        assert_eq!(sig3(3.98107), "3.98");
        assert_eq!(sig3(31_622_776.6), "31.6M");
        assert_eq!(sig3(100_000_000.0), "100M");
    }

    #[test]
    fn the_import_floor_is_the_slower_of_disk_and_hash() {
        let mut r = row(1_000_000, 1.0, &[1.0], 0);
        (r.store_bytes, r.input_bytes) = (200_000_000, 128_000_000);
        let f =
            Floors { disk_write_bytes_per_s: 100e6, sha256_bytes_per_s: 1e9, ..Floors::default() };
        r.derive_import(&f);
        assert_eq!(r.import_disk_floor_keys_per_s, 500_000.0);
        assert!((r.import_sha256_floor_keys_per_s - 7_812_500.0).abs() < 1e-6);
        assert_eq!(r.import_floor_keys_per_s, 500_000.0);
        assert_eq!(r.import_keys_per_s, 250_000.0);
    }

    #[test]
    fn the_headline_names_its_size_and_is_null_without_100m() {
        let small = row(10_000_000, 10.0, &[8.0], 200 << 20);
        let h = headline(std::slice::from_ref(&small));
        assert_eq!(h["headline_keys"], 10_000_000);
        assert!(h["sync_100m_over_floor"].is_null() && h["sync_100m_ok"].is_null());
        assert_eq!(h["largest"]["keys"], 10_000_000);
        assert_eq!(h["largest"]["met"]["ok"], true);
        let big = row(HEADLINE_KEYS, 130.0, &[100.0, 101.0], 900 << 20);
        let h = headline(&[small, big]);
        assert_eq!(h["headline_keys"], HEADLINE_KEYS);
        assert!((h["sync_100m_over_floor"].as_f64().unwrap() - 1.3).abs() < 1e-12);
        assert_eq!(h["sync_100m_ok"], 1);
        assert_eq!(h["largest"]["met"]["sync_over_floor"], false);
        assert_eq!(h["largest"]["met"]["rss_over_budget_bytes_per_key"], true);
    }

    #[test]
    fn csv_has_a_line_per_size_and_the_plot_draws() {
        let mut a = row(200_000, 1.0, &[0.5], 100 << 20);
        a.in_memory = Some(InMemory {
            binary: "b".into(),
            step: Step { seconds: 0.9, ..Step::default() },
            over_floor: 0.0,
        });
        a.derive();
        let rows = [a, row(2_000_000, 9.0, &[5.0], 150 << 20)];
        let text = csv(&rows);
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().nth(1).unwrap().starts_with("200000,"));
        if plot::ensure_font().is_ok() {
            let dir =
                std::env::temp_dir().join(format!("bavl-joinlab-plot-{}", std::process::id()));
            let path = dir.join("j.png");
            super::plot(&path, &rows, Some(2 << 30)).unwrap();
            assert!(std::fs::metadata(&path).unwrap().len() > 0);
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
