//! `bavl serve` and `bavl export`: a store's retained versions over HTTP (protocol v1,
//! `docs/sync-protocol.md`), live or as static files.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use bavl_sync::http::{self, Catalog, ExportDir, Objects, Server};

use crate::store_cmds::{open_existing_with, DbArg};
use crate::text::bytes;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The store's directory.
    #[arg(long, value_name = "PATH", required_unless_present = "dir", conflicts_with = "dir")]
    db: Option<PathBuf>,
    /// Serve a `bavl export` directory instead of a store (read-only; any number of
    /// processes can serve one directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port; the URL is printed on stdout).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070")]
    listen: String,
    /// How many of the newest versions to retain and serve.
    #[arg(long, value_name = "N", default_value_t = 4)]
    keep: u64,
    /// Keep at most M MiB of chunk bodies in memory and read the others from the store's
    /// files per request, so a state larger than memory is never read whole [default:
    /// 256].
    #[arg(long, value_name = "M")]
    cache_mib: Option<u64>,
    /// Exit when standard input reaches its end (a parent that spawned this server with a
    /// pipe dies or closes it: no orphan servers).
    #[arg(long, hide = true)]
    exit_on_eof: bool,
}

pub const SERVE_HELP: &str = "Examples:
  bavl serve --db /var/lib/bavl --listen 0.0.0.0:7070
  bavl serve --dir /srv/mirror --listen 0.0.0.0:8000      # a `bavl export` directory
  curl http://127.0.0.1:7070/v1/snapshots/index.json

Paths: /v1/snapshots/index.json, /v1/snapshots/V/manifest.json, /v1/chunks/ROOT/I (chunks
are immutable: Cache-Control: public, max-age=31536000, immutable). Served from O(1)
snapshots; each version's manifest is computed once, before `serving` is printed. Runs until
killed. Prints `serving http://ADDR` on stdout once listening.

Exit status: 2 bad arguments, no store there, or the address cannot be bound; 3 the store
is damaged.";

pub fn serve(args: &ServeArgs) -> Result<ExitCode> {
    serve_with(args, "", |server| server)
}

/// [`serve`], with `adapt` applied to the bound server before it runs and `label` added
/// to the line on stderr that says what is served (the harness's lying server:
/// `Server::byzantine`, feature `liars` of bavl-sync, which `bavl` never enables).
pub fn serve_with(
    args: &ServeArgs,
    label: &str,
    adapt: impl FnOnce(Server) -> Server,
) -> Result<ExitCode> {
    // Like `bavl sync`, a response buffer per chunk on many connection threads: with huge
    // pages each first touch zeroes 2 MiB (measured in the netlab, 10 peers: their first
    // sync served cost 1.6 CPU-s, the ones after 0.4; `docs/sync-protocol.md` §8).
    #[cfg(feature = "mimalloc")]
    bavl_alloc::no_transparent_huge_pages();
    // The store (if any) stays open, and locked, while serving.
    let (objects, _store, what): (Arc<dyn Objects>, _, String) = match (&args.db, &args.dir) {
        (Some(db), _) => {
            let store = open_existing_with(db, args.keep, args.cache_mib)?;
            let catalog = match loader(&store) {
                Some(l) => Catalog::with_loader(l),
                None => Catalog::new(),
            };
            let versions: Vec<u64> = store.versions().collect();
            for &v in &versions {
                let snap = store.snapshot(v).map_err(|e| crate::store_cmds::store_error(db, e))?;
                catalog.publish(v, snap);
                // Computed now, not on the first request: every syncing node asks for it
                // first, and ten peers computing it at once on a small machine held the
                // first chunk back by 0.2 s (docs/sync-protocol.md §8).
                catalog
                    .manifest_json(v)
                    .with_context(|| format!("reading version {v}'s chunks in {}", db.display()))?;
            }
            let what = format!(
                "versions {versions:?} of {} (newest root {})",
                db.display(),
                hex::encode(store.root())
            );
            (catalog, Some(store), what)
        }
        (None, Some(dir)) => {
            let export = ExportDir::open(dir)
                .with_context(|| format!("{} is not a `bavl export` directory", dir.display()))?;
            let versions = export.versions().context("reading the listing")?;
            let what = format!("versions {versions:?} exported in {}", dir.display());
            (Arc::new(export), None, what)
        }
        (None, None) => anyhow::bail!("--db or --dir is required"),
    };
    let server = Server::bind_objects(&args.listen, objects)
        .with_context(|| format!("listening on {}", args.listen))?;
    let server = adapt(server);
    let addr = server.local_addr().context("reading the bound address")?;
    eprintln!("bavl serve: {what}{label}");
    let mut out = std::io::stdout();
    writeln!(out, "serving http://{addr}").and_then(|()| out.flush()).context("stdout")?;
    if args.exit_on_eof {
        std::thread::spawn(|| {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            std::process::exit(0);
        });
    }
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
    /// Keep at most M MiB of chunk bodies in memory, reading the others one at a time, so
    /// a state larger than memory is never read whole [default: 256].
    #[arg(long, value_name = "M")]
    cache_mib: Option<u64>,
}

/// A chunk loader over `store`'s files, for a paged store.
fn loader(store: &bavl_store::Store) -> Option<bavl_sync::protocol::ChunkLoader> {
    let l = store.page_loader()?;
    Some(Arc::new(move |snap, pages| l.load(snap, pages).map_err(std::io::Error::other)))
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
    let store = open_existing_with(db, u64::MAX, args.cache_mib)?;
    let version = args.version.unwrap_or(store.version());
    let snap = store.snapshot(version).map_err(|e| crate::store_cmds::store_error(db, e))?;
    let load = loader(&store);
    let bar = indicatif::ProgressBar::new(snap.chunk_count());
    let report =
        http::export_loading(&snap, version, &args.out, load.as_ref(), &mut |_| bar.inc(1))
            .with_context(|| format!("exporting to {}", args.out.display()))?;
    drop(store);
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
