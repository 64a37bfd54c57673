//! A sync straight into a new store's files (`bavl_store::Ingest` as the sink), over
//! loopback sockets: the store opens paged at the version with every key, a liar among
//! the sources is banned; a sync stopped by its sink's failure (a full disk: the error a
//! kill would not even give) leaves a directory that refuses to open as a store and that
//! a second run resumes, fetching only what was not made durable.

use std::io;
use std::path::Path;
use std::time::Duration;

use bavl_core::{Snapshot, Tree, VerifiedChunk};
use bavl_store::{Ingest, IngestOptions, Options as StoreOptions, Store, StoreError};
use bavl_sync::http::{self, BaseUrl, Byzantine, Catalog, DownloadError, Server, SyncConfig};
use bavl_sync::{Held, Options, Sink, SinkError};

const VERSION: u64 = 5;

fn snapshot(keys: u32) -> Snapshot {
    let mut t = Tree::with_capacity(16).unwrap();
    for i in 0..keys {
        t.insert(&i.to_be_bytes(), format!("value {i}").as_bytes()).unwrap();
    }
    t.snapshot()
}

fn config(urls: &[String]) -> SyncConfig {
    SyncConfig {
        sources: urls.iter().map(|u| BaseUrl::parse(u).unwrap()).collect(),
        options: Options { grace: Duration::from_millis(800), ..Options::default() },
        verify_threads: 2,
        connect_timeout: Duration::from_secs(2),
    }
}

/// An honest server of `snap` and one that flips a byte of every chunk.
fn servers(snap: &Snapshot) -> (Vec<String>, Vec<bavl_sync::http::ServerHandle>) {
    let catalog = Catalog::new();
    catalog.publish(VERSION, snap.clone());
    let honest = Server::bind("127.0.0.1:0", catalog.clone()).unwrap().spawn().unwrap();
    let liar = Server::bind("127.0.0.1:0", catalog)
        .unwrap()
        .byzantine(Byzantine::WrongBytes)
        .spawn()
        .unwrap();
    (vec![liar.url(), honest.url()], vec![liar, honest])
}

/// The store in `dir`, opened paged with no body cached: at `VERSION` and `snap`'s root,
/// with every key of it.
fn check_store(dir: &Path, snap: &Snapshot, keys: u32) {
    let opts = StoreOptions { read_only: true, ..StoreOptions::paged(0) };
    let mut store = Store::open(dir, opts).unwrap();
    assert_eq!((store.version(), store.root()), (VERSION, snap.root_hash()));
    assert_eq!(store.latest().len(), u64::from(keys));
    for i in 0..keys {
        let want = format!("value {i}");
        assert_eq!(store.get(&i.to_be_bytes()).unwrap(), Some(want.as_bytes()), "key {i}");
    }
}

#[test]
fn a_sync_to_disk_opens_paged_with_every_key_and_bans_the_liar() {
    let dir = tempdir("to-disk");
    let snap = snapshot(4000);
    let (urls, _servers) = servers(&snap);
    let mut ingest =
        Ingest::open(&dir, snap.root_hash(), VERSION, IngestOptions::default()).unwrap();
    let mut written = 0;
    let done = http::download(snap.root_hash(), VERSION, &config(&urls), &mut ingest, &mut |p| {
        written = p.written;
    })
    .unwrap();
    assert_eq!((done.resumed, done.fetched), (0, snap.chunk_count()));
    assert_eq!(written, snap.chunk_count(), "the last progress shows every chunk written");
    let liar = &done.sources[0].health;
    assert!(matches!(liar, bavl_sync::Health::Banned(_)), "the liar is {liar:?}");
    assert_eq!(ingest.finish().unwrap(), (VERSION, snap.root_hash()));
    check_store(&dir, &snap, 4000);
    std::fs::remove_dir_all(&dir).ok();
}

/// Passes chunks to an [`Ingest`] until `left` runs out, then fails as a full disk does;
/// flushes once `flush_at` are left (as the transport's timer would, at a point a test
/// knows).
struct FullAfter {
    ingest: Ingest,
    left: u32,
    flush_at: u32,
}

impl Sink for FullAfter {
    fn held(&self) -> Option<Held> {
        self.ingest.held()
    }

    fn add(&mut self, chunk: VerifiedChunk) -> Result<(), SinkError> {
        if self.left == 0 {
            return Err(Box::new(StoreError::Io {
                context: "writing a chunk file".into(),
                source: io::Error::from_raw_os_error(28),
            }));
        }
        self.left -= 1;
        self.ingest.add(chunk)?;
        if self.left == self.flush_at {
            Sink::flush(&mut self.ingest)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        Sink::flush(&mut self.ingest)
    }
}

#[test]
fn a_sync_stopped_by_a_full_disk_resumes_fetching_only_what_it_lacks() {
    let dir = tempdir("full-disk");
    let snap = snapshot(6000);
    let (urls, _servers) = servers(&snap);
    let root = snap.root_hash();
    let ingest = Ingest::open(&dir, root, VERSION, IngestOptions::default()).unwrap();
    let mut full = FullAfter { ingest, left: 150, flush_at: 50 };
    let err = http::download(root, VERSION, &config(&urls), &mut full, &mut |_| {})
        .err()
        .expect("the sink failed");
    assert!(matches!(&err, DownloadError::Sink(_)), "{err}");
    assert!(err.to_string().contains("os error 28"), "{err}");
    drop(full);
    // Not a store while the sync is unfinished.
    match Store::open(&dir, StoreOptions::default()) {
        Err(StoreError::UnfinishedIngest(_)) => {}
        Err(e) => panic!("refused, but as {e}"),
        Ok(_) => panic!("a directory holding an unfinished sync opened as a store"),
    }
    // Resumed: at least the 100 chunks flushed before the failure are held (more if the
    // transport's timer flushed later ones), and nothing held is fetched again.
    let mut ingest = Ingest::open(&dir, root, VERSION, IngestOptions::default()).unwrap();
    let held = ingest.received();
    assert!((100..150).contains(&held), "{held} chunks held");
    let done = http::download(root, VERSION, &config(&urls), &mut ingest, &mut |_| {}).unwrap();
    assert_eq!(done.resumed, held);
    assert_eq!(done.fetched, snap.chunk_count() - held, "nothing fetched twice");
    assert_eq!(ingest.finish().unwrap(), (VERSION, root));
    check_store(&dir, &snap, 6000);
    std::fs::remove_dir_all(&dir).ok();
}

/// Dropped without a flush (as a kill leaves it): what the sink never made durable is
/// fetched again, and only that.
#[test]
fn an_ingest_dropped_unflushed_resumes_from_its_last_flush() {
    let dir = tempdir("drop");
    let snap = snapshot(3000);
    let root = snap.root_hash();
    let (urls, _servers) = servers(&snap);
    let count = snap.chunk_count();
    {
        let mut ingest = Ingest::open(&dir, root, VERSION, IngestOptions::default()).unwrap();
        for i in 0..count / 2 {
            let c = bavl_core::verify_chunk::<bavl_core::Sha256>(
                &root,
                i,
                &snap.export_chunk(i).unwrap(),
            )
            .unwrap();
            Sink::add(&mut ingest, c).unwrap();
            if i + 1 == count / 4 {
                Sink::flush(&mut ingest).unwrap();
            }
        }
        // Dropped: the chunks after the flush are not durable.
    }
    let mut ingest = Ingest::open(&dir, root, VERSION, IngestOptions::default()).unwrap();
    let held = ingest.held().unwrap();
    assert!(held.indices.len() as u64 >= count / 4, "{} held", held.indices.len());
    let kept = held.indices.len() as u64;
    let done =
        http::download(root, VERSION, &config(&urls[1..]), &mut ingest, &mut |_| {}).unwrap();
    assert_eq!((done.resumed, done.fetched), (kept, count - kept));
    ingest.finish().unwrap();
    check_store(&dir, &snap, 3000);
    std::fs::remove_dir_all(&dir).ok();
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bavl-sync-disk-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
