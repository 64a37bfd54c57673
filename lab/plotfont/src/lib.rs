//! The font of every plot the benchmarks draw (PNG through plotters' bitmap backend, which
//! needs a TrueType font registered under a family name). The file is read at run time from
//! `BAVL_BENCH_FONT` or the usual DejaVu/Liberation paths (Debian's `fonts-dejavu-core`),
//! once per process; a caller without a font skips its plot.
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::OnceLock;

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
pub fn ensure_font() -> Result<(), String> {
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
}
