//! Hostile sources on real loopback sockets (`docs/sync-adversarial.md`): each
//! adversarial kind of `Server::byzantine` beside one honest `Server`, synced through
//! `bavl_sync::http::download` with a short grace. Every sync must complete with the exact
//! root within a bound set by the honest source and the grace, not by the liars; every
//! delaying or lying source must end banned (or dropped, where the policy allows it), and
//! the honest-but-unusual ones (`slow`, `early-hints`, `gzip-manifest`) must stay live.
//! Then crowds of 48 liars of the two kinds that stalled the old client longest.
//!
//! The honest source here serves one chunk at a time with a pause ([`Paced`]), so a sync
//! lasts a few grace periods: long enough that a client which waits on a liar at all has
//! to judge it, whatever its scheduling.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bavl_core::{Digest, Snapshot, Tree};
use bavl_sync::http::{
    self, BaseUrl, Byzantine, Catalog, Objects, Server, ServerHandle, SyncConfig,
};
use bavl_sync::{DropReason, Health, Options};

const VERSION: u64 = 5;
const GRACE: Duration = Duration::from_secs(1);
/// The honest source's pause per chunk: about 1.3 s for the whole tree.
const PACE: Duration = Duration::from_millis(8);
/// What a sync may take beyond the honest source's own time and the grace.
const SLACK: Duration = Duration::from_secs(4);

/// 2,000 pairs of 100-byte values at capacity 16: about 160 chunks of about 1.5 KB.
fn snapshot() -> Snapshot {
    let mut t = Tree::with_capacity(16).unwrap();
    for i in 0u32..2000 {
        t.insert(&i.to_be_bytes(), &[(i % 251) as u8; 100]).unwrap();
    }
    t.snapshot()
}

fn catalog(snap: &Snapshot) -> Arc<Catalog> {
    let c = Catalog::new();
    c.publish(VERSION, snap.clone());
    c.manifest_json(VERSION).unwrap();
    c
}

/// An honest source that serves one chunk at a time, each after a pause of `pace`.
struct Paced {
    inner: Arc<Catalog>,
    gate: Mutex<()>,
    pace: Duration,
}

impl Objects for Paced {
    fn listing(&self) -> std::io::Result<Vec<u8>> {
        self.inner.listing()
    }

    fn manifest(&self, version: u64) -> std::io::Result<Option<Arc<Vec<u8>>>> {
        self.inner.manifest(version)
    }

    fn chunk(&self, root: &Digest, index: u64) -> std::io::Result<Option<Vec<u8>>> {
        let _one_at_a_time = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::sleep(self.pace);
        self.inner.chunk(root, index)
    }
}

fn honest(snap: &Snapshot, pace: Duration) -> ServerHandle {
    let objects = Arc::new(Paced { inner: catalog(snap), gate: Mutex::new(()), pace });
    Server::bind_objects("127.0.0.1:0", objects).unwrap().spawn().unwrap()
}

fn liar(snap: &Snapshot, kind: Byzantine) -> ServerHandle {
    Server::bind("127.0.0.1:0", catalog(snap)).unwrap().byzantine(kind).spawn().unwrap()
}

fn options() -> Options {
    Options { grace: GRACE, request_timeout: Duration::from_secs(5), ..Options::default() }
}

/// Syncs from `urls`; the sources' final health and how long it took. Panics unless the
/// exact tree comes back.
fn sync(snap: &Snapshot, urls: &[String]) -> (Vec<Health>, Duration) {
    let cfg = SyncConfig {
        sources: urls.iter().map(|u| BaseUrl::parse(u).unwrap()).collect(),
        options: options(),
        verify_threads: 2,
        connect_timeout: Duration::from_secs(2),
    };
    let start = Instant::now();
    let (mut tree, done) = http::download_tree(snap.root_hash(), VERSION, &cfg, &mut |_| {})
        .unwrap_or_else(|e| panic!("the sync failed after {:?}: {e}", start.elapsed()));
    let took = start.elapsed();
    assert_eq!(tree.root_hash(), snap.root_hash(), "the exact root");
    assert_eq!(tree.len(), snap.len());
    (done.sources.into_iter().map(|s| s.health).collect(), took)
}

/// What the liar's health must be at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Banned,
    BannedOrDropped,
    Live,
}

fn expected(kind: Byzantine) -> Expect {
    match kind {
        // A huge false manifest is asked at a guess it outgrows; by the time the count
        // bounds it, its `404`s for chunks that exist have dropped the source.
        Byzantine::NoChunkZero | Byzantine::ResetTruncate | Byzantine::HugeManifest => {
            Expect::BannedOrDropped
        }
        k if k.is_honest() => Expect::Live,
        _ => Expect::Banned,
    }
}

/// One liar of `kind` beside the paced honest source.
fn one_liar(kind: Byzantine) {
    let snap = snapshot();
    let honest_alone = {
        let h = honest(&snap, PACE);
        sync(&snap, &[h.url()]).1
    };
    let (l, h) = (liar(&snap, kind), honest(&snap, PACE));
    let (health, took) = sync(&snap, &[l.url(), h.url()]);
    let bound = honest_alone + GRACE + SLACK;
    assert!(took <= bound, "{kind}: {took:?} > {bound:?} (honest alone {honest_alone:?})");
    // The paced honest source stays live, unless the other source, honest in all but
    // form, did all the work first: then it ends dropped as unproductive (outrun on every
    // chunk it was asked), never banned. Likewise the honest-in-form kinds.
    let outrun = |h: &Health| matches!(h, Health::Dropped(DropReason::Unproductive { .. }));
    let honest_ok =
        health[1] == Health::Live || (expected(kind) == Expect::Live && outrun(&health[1]));
    assert!(honest_ok, "{kind}: the honest source ended {:?}", health[1]);
    let ok = matches!(
        (expected(kind), &health[0]),
        (Expect::Banned, Health::Banned(_))
            | (Expect::Live, Health::Live | Health::Dropped(DropReason::Unproductive { .. }))
            | (Expect::BannedOrDropped, Health::Banned(_) | Health::Dropped(_))
    );
    assert!(ok, "{kind}: expected {:?}, ended {:?} (in {took:?})", expected(kind), health[0]);
}

macro_rules! one_liar_tests {
    ($($name:ident: $kind:ident,)*) => {$(
        #[test]
        fn $name() {
            one_liar(Byzantine::$kind);
        }
    )*};
}

one_liar_tests! {
    a_dripped_head_is_banned: DripHead,
    a_dripped_body_is_banned: DripBody,
    endless_trailers_are_banned: EndlessTrailers,
    a_source_without_chunk_0_is_banned_or_dropped: NoChunkZero,
    a_huge_false_manifest_is_banned_or_dropped: HugeManifest,
    a_slow_honest_source_stays_live: Slow,
    early_hints_are_skipped_not_banned: EarlyHints,
    a_gzip_manifest_is_decoded_not_banned: GzipManifest,
    a_source_resetting_every_other_chunk_is_banned_or_dropped: ResetTruncate,
}

/// 48 liars of `kind` beside the paced honest source: done within its own time, the grace
/// and a few seconds, whatever the crowd does, and no liar left live (the sync lasts
/// longer than the grace, so the client has had to judge every one it waited on).
fn crowd(kind: Byzantine) {
    let snap = snapshot();
    let honest_alone = {
        let h = honest(&snap, PACE);
        sync(&snap, &[h.url()]).1
    };
    let liars: Vec<ServerHandle> = (0..48).map(|_| liar(&snap, kind)).collect();
    let h = honest(&snap, PACE);
    let mut urls: Vec<String> = liars.iter().map(ServerHandle::url).collect();
    urls.push(h.url());
    let (health, took) = sync(&snap, &urls);
    let bound = honest_alone + GRACE + SLACK;
    assert!(took <= bound, "{kind}: 48 liars held the sync {took:?} > {bound:?}");
    assert_eq!(health[48], Health::Live, "{kind}: the honest source");
    let live = health[..48].iter().filter(|h| **h == Health::Live).count();
    assert_eq!(live, 0, "{kind}: liars never banned or dropped: {:?}", &health[..48]);
}

#[test]
fn a_crowd_of_48_without_chunk_0_does_not_stall_the_sync() {
    crowd(Byzantine::NoChunkZero);
}

#[test]
fn a_crowd_of_48_dripping_heads_does_not_stall_the_sync() {
    crowd(Byzantine::DripHead);
}
