//! `bavl import`: a new store from a stream of key-value pairs (`bavl_store::import`,
//! `docs/design.md` §8.9), in O(n) time and bounded memory, with a progress bar and a
//! summary (keys, chunks, version, root, time, keys per second).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use bavl_store::import::{import, Format, ImportOptions, ImportProgress};

use crate::text::{bytes, group, human};

#[derive(clap::Args)]
pub struct ImportArgs {
    /// Directory of the new store: absent or empty. A failed import deletes what it
    /// wrote; one killed midway leaves a directory that never opens as a store (delete it).
    #[arg(long, value_name = "PATH")]
    db: PathBuf,
    /// The input: a file, or - for standard input.
    #[arg(value_name = "FILE")]
    input: String,
    /// The input is in strictly increasing key order: no sort (a record out of order is
    /// an error naming it).
    #[arg(long)]
    sorted: bool,
    /// The input's format (see below).
    #[arg(long, value_enum, default_value = "bin")]
    format: FormatArg,
    /// The version the store opens at (its only one; commits go on after it).
    #[arg(long, value_name = "V", default_value_t = 1)]
    version: u64,
    /// Chunk capacity of the new store (4..=65536).
    #[arg(long, value_name = "N", default_value_t = bavl_core::DEFAULT_CAPACITY)]
    capacity: u32,
    /// Memory for sorting unsorted input, in MiB (runs of this size are spilled).
    #[arg(long, value_name = "M", default_value_t = 256)]
    cache_mib: u64,
    /// Directory for the sort's temporary runs (default: the parent of --db).
    #[arg(long, value_name = "DIR")]
    tmp: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FormatArg {
    /// Records `u32 klen | key | u32 vlen | value`, little-endian, back to back.
    Bin,
    /// Lines `hex(key) TAB hex(value) LF`.
    Hex,
}

pub const IMPORT_HELP: &str = "Input formats (docs/design.md §8.9):
  bin  records back to back: u32 key length | key | u32 value length | value, the lengths
       little-endian; the input ends after a whole record
  hex  one record per line: the key in hex, one TAB, the value in hex (may be empty), LF
       (either case; the last line may lack its LF)
Keys are 1..=1024 bytes, values at most 16 MiB, no key twice. Records are numbered from 1;
an error names the record and the byte of the input it starts at.

The store is exactly the tree that inserting the pairs into an empty store in increasing
key order makes (the same root): the import is deterministic in the set of pairs.

Examples:
  bavl import --db state --sorted --format hex pairs.txt
  producer | bavl import --db state --cache-mib 1024 --version 100 -";

/// Runs `bavl import`.
pub fn run(args: &ImportArgs) -> Result<ExitCode> {
    let input: Box<dyn Read> = match args.input.as_str() {
        "-" => Box::new(std::io::stdin().lock()),
        path => Box::new(std::fs::File::open(path).with_context(|| format!("opening {path}"))?),
    };
    let total = (args.input != "-").then(|| std::fs::metadata(&args.input).map(|m| m.len()).ok());
    let opts = ImportOptions {
        capacity: args.capacity,
        version: args.version,
        sorted: args.sorted,
        format: match args.format {
            FormatArg::Bin => Format::Bin,
            FormatArg::Hex => Format::Hex,
        },
        sort_bytes: usize::try_from(args.cache_mib << 20).unwrap_or(usize::MAX),
        tmp_dir: args.tmp.clone(),
    };
    let bar = progress_bar(args.quiet, total.flatten());
    let start = Instant::now();
    let done = import(&args.db, input, &opts, &mut |p| update_bar(&bar, p))
        .with_context(|| format!("importing into {}", args.db.display()));
    bar.finish_and_clear();
    let done = done?;
    let took = start.elapsed();
    let root: String = done.root.iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "imported {} keys in {} chunks into {}",
        group(done.keys),
        group(done.chunks),
        args.db.display()
    );
    println!("version {} root {root}", done.version);
    let per_s = done.keys as f64 / took.as_secs_f64().max(1e-9);
    println!("took {} ({} keys/s)", human(took), group(per_s as u64));
    Ok(ExitCode::SUCCESS)
}

fn progress_bar(quiet: bool, total: Option<u64>) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
    let template = match total {
        Some(_) => "{spinner} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} {msg}",
        None => "{spinner} [{elapsed_precise}] {bytes} read {msg}",
    };
    let style = indicatif::ProgressStyle::with_template(template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

fn update_bar(bar: &indicatif::ProgressBar, p: &ImportProgress) {
    bar.set_position(p.bytes);
    let runs = match p.runs {
        0 => String::new(),
        n => format!(", {n} sorted runs"),
    };
    bar.set_message(format!(
        "{} records{runs}, {} keys in {} chunks written ({} in)",
        group(p.records),
        group(p.keys),
        group(p.chunks),
        bytes(p.bytes)
    ));
}
