//! Each lie is caught: the liar is banned (or, for transient errors, retried and
//! dropped) and the sync completes with the exact root from the honest sources.

use std::time::Duration;

use bavl_sync::{Health, Options, Syncer};
use proptest::prelude::*;

use crate::network::sim::{Behaviour, Sim, SimSource, World, LIES, VERSION};

pub fn world() -> World {
    World::new(3000, 16)
}

pub fn sim(seed: u64, opts: Options) -> Sim {
    let world = world();
    let budget = opts.max_buffered_bytes;
    let syncer = Syncer::new(world.truth.root_hash(), VERSION, opts).unwrap();
    Sim::new(world, syncer, budget, seed)
}

pub fn small_opts() -> Options {
    Options {
        max_buffered_bytes: 1 << 20,
        max_chunk_bytes: 64 << 10,
        max_manifest_bytes: 256 << 10,
        // Short enough that stalls and retries show within a sync of about half a second.
        grace: Duration::from_millis(200),
        min_rate: 4096,
        backoff_base: Duration::from_millis(2),
        backoff_max: Duration::from_millis(50),
        ..Options::default()
    }
}

/// Runs `liars` (fast, added first so they are asked first) beside two honest sources;
/// checks the rebuilt root and returns the health of each liar.
fn run_with(liars: &[Behaviour], seed: u64) -> Vec<Health> {
    let mut s = sim(seed, small_opts());
    for &b in liars {
        s.add(SimSource::new(b, 2, 50_000_000));
    }
    s.add(SimSource::new(Behaviour::Honest, 20, 300_000));
    s.add(SimSource::new(Behaviour::Honest, 30, 200_000));
    let log = s.run();
    assert!(log.done, "sync failed: {:?}", log.failed);
    let count = s.world.truth.chunk_count();
    assert_eq!(log.accepted.len() as u64, count, "every chunk accepted exactly once");
    let root = s.world.truth.root_hash();
    let reports = s.syncer.sources();
    let mut tree = s.finish();
    assert_eq!(tree.root_hash(), root);
    let honest = &reports[liars.len()..];
    // Honest sources are never banned; one that delivered nothing before the others
    // finished may end dropped as unproductive (outrun), never for anything else.
    let fine = |r: &&bavl_sync::SourceReport| match &r.health {
        Health::Live => true,
        Health::Dropped(bavl_sync::DropReason::Unproductive { .. }) => r.stats.chunks == 0,
        _ => false,
    };
    assert!(honest.iter().all(|r| fine(&r)), "honest sources: {honest:?}");
    assert!(honest.iter().any(|r| r.health == Health::Live), "honest sources: {honest:?}");
    reports[..liars.len()].iter().map(|r| r.health.clone()).collect()
}

fn assert_banned(b: Behaviour) {
    let health = run_with(&[b], 1);
    assert!(matches!(health[0], Health::Banned(_)), "{b:?} not banned: {:?}", health[0]);
}

#[test]
fn wrong_bytes() {
    assert_banned(Behaviour::WrongBytes);
}

#[test]
fn valid_chunk_of_another_index() {
    assert_banned(Behaviour::WrongIndex);
}

#[test]
fn chunk_of_another_version() {
    assert_banned(Behaviour::OtherVersion);
}

#[test]
fn chunk_of_another_tree() {
    assert_banned(Behaviour::OtherTree);
}

#[test]
fn truncated_body() {
    assert_banned(Behaviour::Truncated);
}

#[test]
fn over_long_body() {
    assert_banned(Behaviour::OverLong);
}

#[test]
fn endless_body() {
    assert_banned(Behaviour::Endless);
}

#[test]
fn manifest_with_wrong_count() {
    assert_banned(Behaviour::ManifestCount);
}

#[test]
fn manifest_with_wrong_root() {
    assert_banned(Behaviour::ManifestRoot);
}

#[test]
fn manifest_with_wrong_sizes() {
    assert_banned(Behaviour::ManifestSizes);
}

#[test]
fn manifest_claiming_an_empty_tree() {
    assert_banned(Behaviour::ManifestEmpty);
}

#[test]
fn answering_another_version() {
    assert_banned(Behaviour::WrongVersion);
}

#[test]
fn stalling_forever() {
    assert_banned(Behaviour::Stall);
}

#[test]
fn trickling_bytes() {
    assert_banned(Behaviour::Trickle);
}

#[test]
fn garbage() {
    assert_banned(Behaviour::Garbage);
}

#[test]
fn redirect_loop() {
    assert_banned(Behaviour::RedirectLoop);
}

#[test]
fn http_status_no_server_sends() {
    assert_banned(Behaviour::Http(403));
}

#[test]
fn server_errors_are_retried_then_dropped() {
    let health = run_with(&[Behaviour::Http(500)], 1);
    assert!(matches!(health[0], Health::Dropped(bavl_sync::DropReason::Unreliable { .. })));
}

#[test]
fn not_found_drops_at_once() {
    let health = run_with(&[Behaviour::Http(404)], 1);
    assert_eq!(health[0], Health::Dropped(bavl_sync::DropReason::NotFound(404)));
}

#[test]
fn transient_errors_then_honest_keep_the_source() {
    let health = run_with(&[Behaviour::Flaky(503, 3)], 1);
    assert_eq!(health[0], Health::Live);
}

#[test]
fn every_lie_at_once_beside_one_honest_source() {
    let mut s = sim(3, small_opts());
    for &b in &LIES {
        s.add(SimSource::new(b, 1, 100_000_000));
    }
    s.add(SimSource::new(Behaviour::Honest, 40, 500_000));
    let log = s.run();
    assert!(log.done, "sync failed: {:?}", log.failed);
    let root = s.world.truth.root_hash();
    let reports = s.syncer.sources();
    for (r, b) in reports.iter().zip(LIES) {
        let ok = match b {
            Behaviour::Http(500) => matches!(r.health, Health::Dropped(_)),
            _ => matches!(r.health, Health::Banned(_)),
        };
        assert!(ok, "{b:?}: {:?}", r.health);
    }
    assert_eq!(reports[LIES.len()].health, Health::Live);
    assert_eq!(s.finish().root_hash(), root);
}

#[test]
fn only_liars_fail_the_sync() {
    let mut s = sim(4, small_opts());
    for &b in &LIES[..6] {
        s.add(SimSource::new(b, 1, 100_000_000));
    }
    let log = s.run();
    assert!(!log.done);
    assert!(
        matches!(log.failed, Some(bavl_sync::SyncError::NoSources { banned: 6, .. })),
        "{:?}",
        log.failed
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any mix of liars, in any positions, with one honest source among them: the sync
    /// completes with the root and every liar is out.
    #[test]
    fn any_liars_one_honest(picks in proptest::collection::vec(0..LIES.len(), 1..6),
                            honest_at in 0usize..6, seed in 0u64..1000) {
        let mut s = sim(seed, small_opts());
        let honest_at = honest_at.min(picks.len());
        let mut kinds: Vec<Behaviour> = picks.iter().map(|&i| LIES[i]).collect();
        kinds.insert(honest_at, Behaviour::Honest);
        for (k, &b) in kinds.iter().enumerate() {
            s.add(SimSource::new(b, 1 + k as u64 * 3, 300_000));
        }
        let log = s.run();
        prop_assert!(log.done, "failed: {:?}", log.failed);
        let root = s.world.truth.root_hash();
        let reports = s.syncer.sources();
        for (r, b) in reports.iter().zip(&kinds) {
            // A server error is retried: the source may still be live at the end.
            if *b != Behaviour::Http(500) {
                prop_assert_eq!(r.health == Health::Live, *b == Behaviour::Honest, "{:?}", b);
            }
        }
        prop_assert_eq!(s.finish().root_hash(), root);
    }
}
