//! `bavl-synclab crowd`: many lying sources in one process, for the adversarial benchmark
//! ([`crate::adversarial`]). Binds `count` loopback ports, each a
//! `bavl_sync::http::Server::byzantine(kind)` over one `bavl export` directory (opened
//! once: the liars share its page cache), prints each URL on its own line of stdout and
//! then `ready`, and serves until its standard input ends (the parent closed the pipe or
//! died: no orphan servers) or it is killed.
//!
//! One process instead of `count` `bavl serve` processes: 48 liars cost 48 accept threads
//! and one thread per open connection, not 48 processes' memory on a two-core machine.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use bavl_sync::http::{Byzantine, ExportDir, Objects, Server, ServerHandle};

/// Starts the crowd and serves until stdin ends.
pub fn run(kind: &str, count: usize, dir: &Path, host: &str) -> Result<()> {
    let handles = start(kind, count, dir, host)?;
    let mut out = std::io::stdout().lock();
    for h in &handles {
        writeln!(out, "{}", h.url())?;
    }
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);
    let mut sink = [0u8; 256];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

/// `count` servers lying as `kind` over the export in `dir`, each on a port of its own.
pub fn start(kind: &str, count: usize, dir: &Path, host: &str) -> Result<Vec<ServerHandle>> {
    let kind: Byzantine = kind.parse()?;
    let export = ExportDir::open(dir)
        .with_context(|| format!("{} is not a `bavl export` directory", dir.display()))?;
    let objects: Arc<dyn Objects> = Arc::new(export);
    (0..count)
        .map(|_| {
            let server = Server::bind_objects(format!("{host}:0"), objects.clone())
                .with_context(|| format!("binding a port on {host}"))?;
            Ok(server.byzantine(kind).spawn()?)
        })
        .collect()
}
