//! The progress guarantee (`docs/sync-protocol.md` §5): one honest source among crowds of
//! sources that lie, stall, drip or answer fast and deliver nothing finishes within three
//! times its time alone plus the grace period, whatever their number; every delaying
//! source is banned or dropped; the budget and the requests in flight stay bounded.

use std::time::Duration;

use bavl_sync::{Health, Options, Syncer};

use crate::network::byzantine::world;
use crate::network::sim::{Behaviour, Log, Sim, SimSource, VERSION};

/// The options of these tests: the defaults, but a short grace so that a run stays short.
fn opts() -> Options {
    Options {
        grace: Duration::from_millis(500),
        request_timeout: Duration::from_secs(30),
        backoff_base: Duration::from_millis(20),
        backoff_max: Duration::from_millis(500),
        ..Options::default()
    }
}

/// The honest source: 20 ms away, 20 MB/s (a sync of about a third of a second: long
/// enough that a source holding a chunk for longer than four of its round trips and 100 ms
/// is seen to be outrun).
fn honest() -> SimSource {
    SimSource::new(Behaviour::Honest, 20, 20_000_000)
}

fn new_sim(seed: u64) -> Sim {
    let world = world();
    let opts = opts();
    let syncer = Syncer::new(world.truth.root_hash(), VERSION, opts.clone()).unwrap();
    let mut s = Sim::new(world, syncer, opts.max_buffered_bytes, seed);
    s.max_in_flight = opts.max_in_flight as usize;
    s
}

/// The honest source alone: its time.
fn alone() -> Duration {
    let mut s = new_sim(1);
    s.add(honest());
    let log = s.run();
    assert!(log.done);
    log.end
}

/// `n` sources of `liar` (fast: 1 ms, 100 MB/s), the honest source last (so every tie goes
/// to a liar), all added at once; checks the root and the time bounds; the liars' healths.
fn crowd(liar: Behaviour, n: usize, seed: u64) -> (Log, Vec<Health>) {
    let mut s = new_sim(seed);
    let mut sources: Vec<SimSource> =
        (0..n).map(|_| SimSource::new(liar, 1, 100_000_000)).collect();
    sources.push(honest());
    s.add_all(sources);
    let log = s.run();
    assert!(log.done, "{liar:?} x{n}: sync failed: {:?}", log.failed);
    // The guarantee's bound, and what the scheduler actually achieves when the sources
    // are added together: every one probed in the first round trip, so the honest one
    // proves itself at once and nothing waits for the grace.
    let bound = alone() * 3 + opts().grace;
    assert!(log.end <= bound, "{liar:?} x{n}: {:?}, over the bound {bound:?}", log.end);
    let tight = alone().mul_f64(1.5);
    assert!(log.end <= tight, "{liar:?} x{n}: {:?}, over 1.5 x alone {tight:?}", log.end);
    let root = s.world.truth.root_hash();
    let reports = s.syncer.sources();
    assert_eq!(s.finish().root_hash(), root);
    assert_eq!(reports[n].health, Health::Live, "{liar:?} x{n}: the honest source stays live");
    (log, reports[..n].iter().map(|r| r.health.clone()).collect())
}

/// Every liar of the crowd is banned or dropped.
fn all_judged(liar: Behaviour, n: usize) {
    let (_, health) = crowd(liar, n, 3);
    let live = health.iter().filter(|h| **h == Health::Live).count();
    assert_eq!(live, 0, "{liar:?} x{n}: {live} liars neither banned nor dropped");
}

#[test]
fn crowd_serving_manifests_and_never_chunk_0() {
    all_judged(Behaviour::ChunkZeroStall, 12);
    all_judged(Behaviour::ChunkZeroStall, 48);
}

#[test]
fn crowd_dripping_every_answer() {
    all_judged(Behaviour::DripAll, 12);
    all_judged(Behaviour::DripAll, 48);
}

#[test]
fn crowd_dripping_chunk_bodies() {
    all_judged(Behaviour::Trickle, 30);
    all_judged(Behaviour::Stall, 48);
}

#[test]
fn crowd_with_huge_false_manifests_stays_within_the_budget() {
    // 2.8M chunk sizes: the largest manifest the 8 MiB limit admits.
    let (log, health) = crowd(Behaviour::HugeManifest(2_800_000), 8, 5);
    assert!(health.iter().all(|h| *h != Health::Live), "{health:?}");
    assert!(log.max_buffered <= opts().max_buffered_bytes);
}

#[test]
fn crowd_of_fast_liars_of_every_kind() {
    for liar in [Behaviour::WrongBytes, Behaviour::OtherTree, Behaviour::Garbage] {
        all_judged(liar, 48);
    }
    all_judged(Behaviour::Http(503), 48);
}

#[test]
fn two_slow_liars_cannot_hold_the_last_chunk() {
    // With speculation on or off: the honest source, once it has delivered, rescues
    // whatever only unproven or overdue sources hold.
    for speculate in [true, false] {
        let world = world();
        let o = Options { speculate, ..opts() };
        let syncer = Syncer::new(world.truth.root_hash(), VERSION, o.clone()).unwrap();
        let mut s = Sim::new(world, syncer, o.max_buffered_bytes, 9);
        s.add(SimSource::new(Behaviour::Trickle, 1, 100_000_000));
        s.add(SimSource::new(Behaviour::Trickle, 1, 100_000_000));
        s.add(honest());
        let log = s.run();
        assert!(log.done);
        assert!(
            log.end <= alone() * 3,
            "speculate {speculate}: {:?} against {:?}",
            log.end,
            alone()
        );
    }
}

#[test]
fn a_source_failing_every_other_request_is_dropped() {
    let (_, health) = crowd(Behaviour::Alternate, 1, 4);
    assert!(matches!(health[0], Health::Dropped(_)), "{health:?}");
}

#[test]
fn requests_in_flight_stay_within_max_in_flight() {
    // 64 sources that answer nothing in time: the cap, not their number, bounds the
    // requests (and so the transport's threads and connections).
    let (log, _) = crowd(Behaviour::Stall, 64, 6);
    assert!(log.max_in_flight <= opts().max_in_flight as usize);
}

#[test]
fn crowd_of_slow_honest_sources_does_not_hold_the_tail() {
    // 48 honest sources far away and slow (above the minimum rate: never judged), the
    // fast one last: what the slow ones hold at the end is hedged to the fast one.
    let slow = Behaviour::Honest;
    let mut s = new_sim(8);
    let mut sources: Vec<SimSource> = (0..48).map(|_| SimSource::new(slow, 80, 30_000)).collect();
    sources.push(honest());
    s.add_all(sources);
    let log = s.run();
    assert!(log.done);
    let tight = alone().mul_f64(1.5);
    assert!(log.end <= tight, "{:?}, over 1.5 x alone {tight:?}", log.end);
    assert!(s.syncer.sources().iter().all(|r| !matches!(r.health, Health::Banned(_))));
}
