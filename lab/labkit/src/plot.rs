//! What every figure of the lab shares: the font, the PNG file around a drawing, the
//! legend box, labelled lines, category bar panels, the palette and short numbers.
//!
//! plotters draws text with `ab_glyph` (no system font libraries), which needs a TrueType
//! font registered under a family name. [`ensure_font`] reads it at run time from
//! `BAVL_BENCH_FONT` or the usual DejaVu/Liberation paths (Debian's `fonts-dejavu-core`),
//! once per process; [`png`] calls it first, so a caller without a font gets an error
//! before any file is created and skips its plot (its JSON and CSV are unaffected).

use std::error::Error;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// The family name plots ask for.
pub const FONT: &str = "sans-serif";

/// Where the font is looked for, after `BAVL_BENCH_FONT`.
pub const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers [`FONT`] once per process; later calls return the first call's outcome.
pub fn ensure_font() -> Result<(), PlotError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var("BAVL_BENCH_FONT").ok();
        let path =
            env.iter().map(String::as_str).chain(FONT_PATHS).find(|p| Path::new(p).is_file());
        let path = path.ok_or("no TrueType font found (set BAVL_BENCH_FONT)")?;
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        // plotters keeps a registered font for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font(FONT, FontStyle::Normal, bytes)
            .map_err(|_| format!("{path}: not a usable font"))
    })
    .clone()
    .map_err(PlotError)
}

/// Why a figure was not drawn (no font, a file that could not be written, a drawing
/// error), as text; converts into `anyhow::Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotError(pub String);

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for PlotError {}

/// A drawing area of a PNG.
pub type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
/// A chart with linear `f64` axes (log axes are drawn as log10 of the values).
pub type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
/// What drawing code returns: plotters' errors are of several types.
pub type DrawResult<T = ()> = Result<T, Box<dyn Error>>;

/// bavl's colour.
pub const BLUE: RGBColor = RGBColor(31, 102, 181);
/// The peers' and baselines' colour.
pub const ORANGE: RGBColor = RGBColor(214, 110, 20);
/// Targets, limits and failures.
pub const RED: RGBColor = RGBColor(200, 30, 30);
/// Floors and stores that are not peers.
pub const GREY: RGBColor = RGBColor(140, 140, 140);
/// Distinct colours for lines that are neither bavl nor a peer (one per kind, workload,
/// store), in order: blue, orange, green, red, purple, brown, pink, grey, cyan.
pub const PALETTE: [RGBColor; 9] = [
    BLUE,
    ORANGE,
    RGBColor(44, 160, 44),
    RED,
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(110, 110, 110),
    RGBColor(23, 190, 207),
];

/// The second bar of a pair: `c` lighter (p99 beside p50, RAM beside disk).
pub fn lighter(c: RGBColor) -> RGBAColor {
    c.mix(0.45)
}

/// The `i`-th colour of [`PALETTE`], wrapping around.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Draws a PNG of `size` pixels into `path`: registers the font, creates the directory,
/// fills the picture white, lets `draw` paint it and writes the file.
pub fn png(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<(), PlotError> {
    ensure_font()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| PlotError(format!("{}: {e}", dir.display())))?;
    }
    let fail = |e: &dyn fmt::Display| PlotError(format!("plotting {}: {e}", path.display()));
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    draw(&root).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// [`png`] with a title of `font` pixels over the whole picture; `draw` gets the area
/// below it.
pub fn png_titled(
    path: &Path,
    size: (u32, u32),
    (title, font): (&str, u32),
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<(), PlotError> {
    png(path, size, |root| draw(&root.titled(title, (FONT, font))?))
}

/// The legend box of every figure: `font`-pixel labels on a translucent white box with a
/// thin grey border, at `position`.
pub fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
    font: u32,
) -> DrawResult {
    chart
        .configure_series_labels()
        .label_font((FONT, font))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(position)
        .draw()?;
    Ok(())
}

/// How a line is drawn: its legend label (none: not in the legend), colour, width,
/// whether dashed, and the radius of a dot at each point (0: none).
#[derive(Clone, Debug)]
pub struct Line {
    pub label: Option<String>,
    pub color: RGBColor,
    pub width: u32,
    pub dashed: bool,
    pub dots: u32,
}

impl Line {
    /// A solid line of `width` pixels, in the legend as `label`.
    pub fn new(label: impl Into<String>, color: RGBColor, width: u32) -> Line {
        Line { label: Some(label.into()), color, width, dashed: false, dots: 0 }
    }

    /// The same line dashed.
    pub fn dashed(mut self) -> Line {
        self.dashed = true;
        self
    }

    /// The same line with a dot of `radius` pixels at every point.
    pub fn dots(mut self, radius: u32) -> Line {
        self.dots = radius;
        self
    }

    /// Draws the line through `points` (and its legend entry, if labelled).
    pub fn draw<'a, 'b: 'a>(&self, chart: &mut Chart<'a, 'b>, points: &[(f64, f64)]) -> DrawResult {
        let style = self.color.stroke_width(self.width);
        let pts = points.to_vec();
        let anno = if self.dashed {
            chart.draw_series(DashedLineSeries::new(pts, 8, 6, style))?
        } else {
            chart.draw_series(LineSeries::new(pts, style))?
        };
        if let Some(label) = &self.label {
            anno.label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        if self.dots > 0 {
            let dot = self.color.filled();
            chart.draw_series(points.iter().map(|&p| Circle::new(p, self.dots, dot)))?;
        }
        Ok(())
    }
}

/// How [`short`] writes a number: the decimals of millions (`1.23M`), of thousands
/// (`45k`, from `k_from` up), of plain numbers (from `plain_from` up) and of smaller ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Digits {
    pub m: usize,
    pub k_from: f64,
    pub k: usize,
    pub plain_from: f64,
    pub plain: usize,
    pub small: usize,
}

/// Bar labels: 1.23M, 45k, 512, 3.5.
pub const LABEL: Digits = Digits { m: 2, k_from: 1e4, k: 0, plain_from: 100.0, plain: 0, small: 1 };
/// Axis ticks, which can be close: 1.5M, 5k, 50, 1.10.
pub const TICK: Digits = Digits { m: 1, k_from: 1e3, k: 0, plain_from: 10.0, plain: 0, small: 2 };
/// Summary tables: 1.23M, 45.3k, 512, 0.873.
pub const TABLE: Digits = Digits { m: 2, k_from: 1e4, k: 1, plain_from: 100.0, plain: 0, small: 3 };

/// `v` with an SI suffix as `d` says; `-` for what is not a number.
pub fn short(v: f64, d: Digits) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".into()
    } else if a >= 1e6 {
        format!("{:.*}M", d.m, v / 1e6)
    } else if a >= d.k_from {
        format!("{:.*}k", d.k, v / 1e3)
    } else if a >= d.plain_from {
        format!("{v:.*}", d.plain)
    } else {
        format!("{v:.*}", d.small)
    }
}

/// [`short`] for a bar label: 1.23M, 45k, 512, 3.5.
pub fn human(v: f64) -> String {
    short(v, LABEL)
}

/// [`short`] for an axis tick: 1.5M, 5k, 50, 1.10.
pub fn tick(v: f64) -> String {
    short(v, TICK)
}

/// The x range of `n` categories at 0, 1, ..., n - 1.
pub fn categories(n: usize) -> Range<f64> {
    -0.6..(n.max(1) as f64 - 0.4)
}

/// The tick label at `x` of categories named `names`: the name at whole positions, no
/// label elsewhere.
pub fn category_label(names: &[String], x: f64) -> String {
    let i = x.round();
    let whole = (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len();
    if whole {
        names[i as usize].clone()
    } else {
        String::new()
    }
}

/// One category of a [`Bars`] panel.
#[derive(Clone, Debug, Default)]
pub struct Category {
    pub name: String,
    /// One or two bars side by side: value and colour.
    pub bars: Vec<(f64, RGBAColor)>,
    /// Single measurements drawn as black dots over the bars (repetitions).
    pub dots: Vec<f64>,
    /// Words drawn in red where the category has no bar (`OOM-killed`, `at 2M`).
    pub note: Vec<String>,
}

/// A panel of bars per category: the chart of the stores' figures, the join times, the
/// cache on and off.
pub struct Bars<'a> {
    pub title: &'a str,
    /// Font size of the title, in pixels; tick labels use `labels`, values one less.
    pub caption: u32,
    pub labels: u32,
    /// The y axis' description ("" for none).
    pub y_desc: &'a str,
    /// The text over each bar (none: no text).
    pub value: Option<&'a dyn Fn(f64) -> String>,
    /// Legend swatches: label and colour (none: no legend).
    pub legend: Vec<(String, RGBAColor)>,
    /// A dashed red reference line at a value, with its label (the memory limit).
    pub line: Option<(f64, &'a str)>,
    pub categories: &'a [Category],
}

impl Bars<'_> {
    /// Draws the panel into `area`.
    pub fn draw(&self, area: &Area<'_>) -> DrawResult {
        let cats = self.categories;
        let n = cats.len();
        let values = cats.iter().flat_map(|c| c.bars.iter().map(|b| b.0).chain(c.dots.clone()));
        let top = values.chain(self.line.map(|l| l.0)).fold(0.0, f64::max);
        let hi = top.max(1e-9) * 1.22;
        let mut chart = ChartBuilder::on(area)
            .caption(self.title, (FONT, self.caption))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(categories(n), 0.0..hi)?;
        let names: Vec<String> = cats.iter().map(|c| c.name.clone()).collect();
        let (x_fmt, y_fmt) = (|x: &f64| category_label(&names, *x), |v: &f64| human(*v));
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&x_fmt)
            .y_labels(6)
            .y_label_formatter(&y_fmt)
            .label_style((FONT, self.labels))
            .axis_desc_style((FONT, self.labels))
            .light_line_style(WHITE.mix(0.0));
        if !self.y_desc.is_empty() {
            mesh.y_desc(self.y_desc);
        }
        mesh.draw()?;
        let text = |s: String, at: (f64, f64), c: &RGBColor| {
            Text::new(s, at, (FONT, self.labels - 1).into_font().color(c))
        };
        for (i, c) in cats.iter().enumerate() {
            let x = i as f64;
            if c.bars.is_empty() {
                for (j, s) in c.note.iter().enumerate() {
                    let y = hi * (0.2 - 0.08 * j as f64);
                    chart.draw_series(std::iter::once(text(s.clone(), (x - 0.3, y), &RED)))?;
                }
            }
            let slots: &[(f64, f64)] = if c.bars.len() > 1 {
                &[(x - 0.38, x), (x, x + 0.38)]
            } else {
                &[(x - 0.32, x + 0.32)]
            };
            for (j, (&(v, color), &(x0, x1))) in c.bars.iter().zip(slots).enumerate() {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, v)],
                    color.filled(),
                )))?;
                if let Some(f) = self.value {
                    let at = (x0, v + hi * (0.02 + 0.05 * j as f64));
                    chart.draw_series(std::iter::once(text(f(v), at, &BLACK)))?;
                }
            }
            chart.draw_series(c.dots.iter().map(|&s| Circle::new((x, s), 4, BLACK.filled())))?;
        }
        if let Some((y, label)) = self.line {
            let pts = vec![(-0.6, y), (n as f64 - 0.4, y)];
            chart.draw_series(DashedLineSeries::new(pts, 6, 4, RED.stroke_width(2)))?;
            chart.draw_series(std::iter::once(text(label.into(), (-0.5, y + hi * 0.03), &RED)))?;
        }
        for (label, color) in &self.legend {
            let swatch = color.filled();
            chart
                .draw_series(std::iter::once(Rectangle::new([(0.0, 0.0), (0.0, 0.0)], swatch)))?
                .label(label.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], swatch));
        }
        if !self.legend.is_empty() {
            legend(&mut chart, SeriesLabelPosition::UpperRight, self.labels)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(human(1_234_567.0), "1.23M");
        assert_eq!(human(45_300.0), "45k");
        assert_eq!(human(512.4), "512");
        assert_eq!(human(3.46), "3.5");
        assert_eq!(human(f64::NAN), "-");
        assert_eq!(tick(1_500_000.0), "1.5M");
        assert_eq!(tick(5_000.0), "5k");
        assert_eq!(tick(1.1), "1.10");
        assert_eq!(short(45_321.0, TABLE), "45.3k");
        assert_eq!(short(0.8734, TABLE), "0.873");
        assert_eq!(short(f64::INFINITY, TABLE), "-");
    }

    #[test]
    fn categories_are_named_at_whole_positions() {
        let names = vec!["bavl".to_string(), "nomt".to_string()];
        assert_eq!(category_label(&names, 1.0), "nomt");
        assert_eq!(category_label(&names, 0.5), "");
        assert_eq!(category_label(&names, 2.0), "");
        assert_eq!(category_label(&names, -1.0), "");
        assert_eq!(categories(2), -0.6..1.6);
    }

    #[test]
    fn a_panel_is_written_when_a_font_is_found() {
        if ensure_font().is_err() {
            return; // No font on this machine: plots are skipped, as in the benchmarks.
        }
        let dir = std::env::temp_dir().join(format!("bavl-labkit-{}", std::process::id()));
        let path = dir.join("sub").join("bars.png");
        let cats = [
            Category {
                name: "bavl".into(),
                bars: vec![(3.0, BLUE.to_rgba()), (4.0, lighter(BLUE))],
                ..Default::default()
            },
            Category { name: "nomt".into(), note: vec!["OOM-killed".into()], ..Default::default() },
            Category {
                name: "iavl".into(),
                bars: vec![(1.0, ORANGE.to_rgba())],
                dots: vec![0.9, 1.2],
                ..Default::default()
            },
        ];
        let value = |v: f64| human(v);
        png_titled(&path, (600, 400), ("test", 20), |area| {
            Bars {
                title: "bars",
                caption: 18,
                labels: 14,
                y_desc: "ops/s",
                value: Some(&value),
                legend: vec![("p50".into(), GREY.to_rgba())],
                line: Some((5.0, "limit")),
                categories: &cats,
            }
            .draw(area)?;
            Ok(())
        })
        .unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
