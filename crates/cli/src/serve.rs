//! `bavl serve` and `bavl export`: a store's retained versions over HTTP (protocol v1,
//! `docs/sync-protocol.md`), live or as static files.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bavl_sync::http::{self, Catalog, Server};

use crate::store_cmds::{open_existing, DbArg};
use crate::text::bytes;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    db: DbArg,
    /// Address to listen on (port 0 picks a free port; the URL is printed on stdout).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070")]
    listen: String,
    /// How many of the newest versions to retain and serve.
    #[arg(long, value_name = "N", default_value_t = 4)]
    keep: u64,
}

pub const SERVE_HELP: &str = "Examples:
  bavl serve --db /var/lib/bavl --listen 0.0.0.0:7070
  curl http://127.0.0.1:7070/v1/snapshots/index.json

Paths: /v1/snapshots/index.json, /v1/snapshots/V/manifest.json, /v1/chunks/ROOT/I (chunks
are immutable: Cache-Control: public, max-age=31536000, immutable). Served from O(1)
snapshots; each version's manifest is computed once, on its first request. Runs until
killed. Prints `serving http://ADDR` on stdout once listening.

Exit status: 2 bad arguments, no store there, or the address cannot be bound; 3 the store
is damaged.";

pub fn serve(args: &ServeArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing(db, args.keep)?;
    let catalog = Catalog::new();
    let versions: Vec<u64> = store.versions().collect();
    for &v in &versions {
        catalog.publish(v, store.snapshot(v).map_err(|e| crate::store_cmds::store_error(db, e))?);
    }
    let server = Server::bind(&args.listen, catalog)
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = server.local_addr().context("reading the bound address")?;
    eprintln!(
        "bavl serve: versions {:?} of {} (newest root {})",
        versions,
        db.display(),
        hex::encode(store.root())
    );
    let mut out = std::io::stdout();
    writeln!(out, "serving http://{addr}").and_then(|()| out.flush()).context("stdout")?;
    server.run();
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    db: DbArg,
    /// The version to export (default: the newest).
    #[arg(long, value_name = "V")]
    version: Option<u64>,
    /// Directory to write the static snapshot into (created; other versions exported there
    /// before are kept and listed).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub const EXPORT_HELP: &str = "Examples:
  bavl export --db /var/lib/bavl --version 1200 --out /srv/mirror
  python3 -m http.server --directory /srv/mirror 8000     # now a sync source
  bavl sync --db new --root HEX --version 1200 --peer http://host:8000

Writes DIR/v1/snapshots/index.json, DIR/v1/snapshots/V/manifest.json and
DIR/v1/chunks/ROOT/0..N-1: exactly the paths `bavl serve` answers, so any static file
server, object store or CDN over DIR is a source.

Exit status: 0 written, 2 bad arguments, no store there, unknown version or I/O error,
3 the store is damaged.";

pub fn export(args: &ExportArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing(db, u64::MAX)?;
    let version = args.version.unwrap_or(store.version());
    let snap = store.snapshot(version).map_err(|e| crate::store_cmds::store_error(db, e))?;
    drop(store);
    let bar = indicatif::ProgressBar::new(snap.chunk_count());
    let report = http::export(&snap, version, &args.out, &mut |_| bar.inc(1))
        .with_context(|| format!("exporting to {}", args.out.display()))?;
    bar.finish_and_clear();
    println!(
        "exported version {version} (root {}, {} keys, {} chunks, {}) to {}",
        report.manifest.root,
        report.manifest.key_count,
        report.manifest.chunk_count,
        bytes(report.bytes),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
