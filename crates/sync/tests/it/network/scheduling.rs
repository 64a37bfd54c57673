//! Scheduling: memory bound, adaptive concurrency, speculation, resume, determinism.

use std::time::Duration;

use bavl_core::{verify_chunk, Sha256};
use bavl_sync::{Options, Shape, SourceId, Syncer, Want};

use crate::network::byzantine::{sim, small_opts};
use crate::network::sim::{Behaviour, Sim, SimSource, World, VERSION};

fn chunks_from(s: &Sim, source: u32) -> usize {
    s.log.accepted.iter().filter(|(_, src, _)| src.0 == source).count()
}

#[test]
fn memory_stays_within_the_budget() {
    let opts = Options {
        max_buffered_bytes: 24 << 10,
        max_chunk_bytes: 4 << 10,
        max_manifest_bytes: 16 << 10,
        ..small_opts()
    };
    let mut s = sim(5, opts);
    s.verify_cost = Duration::from_millis(3); // bodies pile up waiting for the verifier
    for k in 0..4 {
        s.add(SimSource::new(Behaviour::Honest, 5 + k, 10_000_000));
    }
    s.add(SimSource::new(Behaviour::Endless, 1, 10_000_000));
    let log = s.run(); // asserts buffered <= budget after every event
    assert!(log.done, "{:?}", log.failed);
    let peak = s.status().peak_buffered;
    assert!(peak <= 24 << 10);
    assert!(peak > 12 << 10, "the budget was exercised (peak {peak})");
    let root = s.world.truth.root_hash();
    assert_eq!(s.finish().root_hash(), root);
}

#[test]
fn faster_source_gets_more_work() {
    let mut s = sim(6, small_opts());
    s.add(SimSource::new(Behaviour::Honest, 40, 100_000)); // slow: far, thin link
    s.add(SimSource::new(Behaviour::Honest, 2, 20_000_000)); // fast
    let log = s.run();
    assert!(log.done);
    let (slow, fast) = (chunks_from(&s, 0), chunks_from(&s, 1));
    let reports = s.syncer.sources();
    assert!(fast > 4 * slow, "fast {fast} vs slow {slow}");
    assert!(reports[1].window >= reports[0].window, "{reports:?}");
}

#[test]
fn a_far_slow_source_never_holds_the_tail() {
    // A near, fast source and a far, slow one (above the minimum rate, so never judged):
    // whatever the slow one holds at the end is hedged to the fast one as soon as the
    // fast one would answer sooner, speculation on or off; speculation adds copies of
    // lone chunks on top. The sync is never slower than the fast source alone.
    let run = |speculate: bool, far: bool| {
        // A grace of several round trips, as the defaults have (5 s): requests queued at
        // the far source are not mistaken for a stall.
        let grace = Duration::from_secs(1);
        let mut s = sim(7, Options { speculate, grace, ..small_opts() });
        s.add(SimSource::new(Behaviour::Honest, 2, 300_000));
        if far {
            s.add(SimSource::new(Behaviour::Honest, 150, 20_000));
        }
        let log = s.run();
        assert!(log.done);
        assert!(s.syncer.sources().iter().all(|r| r.health == bavl_sync::Health::Live));
        (log.end, s.status())
    };
    let (alone, _) = run(true, false);
    let (with, st_with) = run(true, true);
    let (without, st_without) = run(false, true);
    assert_eq!(st_without.speculative, 0);
    assert!(st_with.rescues + st_with.speculative > 0 && st_without.rescues > 0);
    for t in [with, without] {
        assert!(t <= alone, "{t:?} with the far source, {alone:?} without it");
    }
}

#[test]
fn held_chunks_are_never_fetched() {
    let world = World::new(3000, 16);
    let root = world.truth.root_hash();
    let mut syncer = Syncer::new(root, VERSION, small_opts()).unwrap();
    let count = world.truth.chunk_count();
    let held: Vec<u64> = (0..count).step_by(2).collect();
    let chunks: Vec<_> = held
        .iter()
        .map(|&i| verify_chunk::<Sha256>(&root, i, &world.truth.export_chunk(i).unwrap()).unwrap())
        .collect();
    let shape = Shape::of(&chunks[0]);
    // Refused, changing nothing: an index past the end, another shape.
    assert!(syncer.add_held(shape, [count]).is_err());
    assert_eq!(syncer.shape(), None);
    assert_eq!(syncer.add_held(shape, held.iter().copied()).unwrap(), held.len() as u64);
    let other = Shape { key_count: shape.key_count.map(|k| k + 1), ..shape };
    assert!(syncer.add_held(other, [1]).is_err());
    assert_eq!(syncer.status().verified, held.len() as u64);
    let mut s = Sim::new(world, syncer, small_opts().max_buffered_bytes, 8);
    for c in chunks {
        s.restore.add_verified(c).unwrap();
    }
    s.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    // Once a source is added, no more held chunks.
    assert!(s.syncer.add_held(shape, [1]).is_err());
    let log = s.run();
    assert!(log.done);
    for (_, want) in &log.sent {
        if let Want::Chunk(i) = want {
            assert_eq!(i % 2, 1, "chunk {i} was held already");
        }
    }
    assert_eq!(log.accepted.len() as u64, count / 2);
    assert_eq!(s.finish().root_hash(), root);
}

/// A sync stopped as a kill would, then a new syncer given what the first one's sink kept
/// (the indices and the shape), beside a liar: nothing is fetched twice.
#[test]
fn killed_sync_resumes_from_what_its_sink_kept() {
    let mut first = sim(9, small_opts());
    first.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    first.add(SimSource::new(Behaviour::WrongBytes, 3, 1_000_000));
    first.run_until_accepted(100);
    let root = first.world.truth.root_hash();
    let held: Vec<u64> = first.log.accepted.iter().map(|(i, _, _)| *i).collect();
    // As a store being built keeps it: no key count (learned from the next chunk).
    let shape = Shape { key_count: None, ..first.syncer.shape().unwrap() };

    let mut syncer = Syncer::new(root, VERSION, small_opts()).unwrap();
    assert_eq!(syncer.add_held(shape, held.iter().copied()).unwrap(), held.len() as u64);
    let mut second = Sim::new(World::new(3000, 16), syncer, small_opts().max_buffered_bytes, 10);
    second.restore = std::mem::replace(&mut first.restore, bavl_core::Restore::new(root));
    second.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    second.add(SimSource::new(Behaviour::WrongBytes, 3, 1_000_000));
    let log = second.run();
    assert!(log.done);
    for (_, want) in &log.sent {
        if let Want::Chunk(i) = want {
            assert!(!held.contains(i), "chunk {i} fetched again after resuming");
        }
    }
    assert_eq!(log.banned.len(), 1, "{:?}", log.banned);
    assert_eq!(second.syncer.shape().unwrap().key_count, Some(second.world.truth.len()));
    assert_eq!(second.finish().root_hash(), root);
}

/// Every chunk held: done at once, asking for nothing.
#[test]
fn a_sync_with_every_chunk_held_is_done_at_once() {
    let world = World::new(500, 16);
    let root = world.truth.root_hash();
    let count = world.truth.chunk_count();
    let c0 = verify_chunk::<Sha256>(&root, 0, &world.truth.export_chunk(0).unwrap()).unwrap();
    let mut syncer = Syncer::<Sha256>::new(root, VERSION, small_opts()).unwrap();
    syncer.add_held(Shape::of(&c0), 0..count).unwrap();
    let mut s = Sim::new(world, syncer, small_opts().max_buffered_bytes, 3);
    s.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    let log = s.run();
    assert!(log.done);
    assert!(log.sent.iter().all(|(_, w)| !matches!(w, Want::Chunk(_))), "{:?}", log.sent);
    assert!(log.accepted.is_empty());
}

#[test]
fn runs_are_deterministic() {
    let run = || {
        let mut s = sim(11, small_opts());
        s.add(SimSource::new(Behaviour::Honest, 7, 700_000));
        s.add(SimSource::new(Behaviour::Garbage, 3, 900_000));
        s.add(SimSource::new(Behaviour::Honest, 13, 300_000));
        s.add(SimSource::new(Behaviour::Trickle, 1, 300_000));
        let log = s.run();
        (log.sent.clone(), log.end, s.status())
    };
    assert_eq!(run(), run());
}

#[test]
fn empty_tree_is_proven_by_its_root() {
    let world = World::new(0, 16);
    let root = world.truth.root_hash();
    let syncer = Syncer::new(root, VERSION, small_opts()).unwrap();
    let mut s = Sim::new(world, syncer, small_opts().max_buffered_bytes, 12);
    s.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    let log = s.run();
    assert!(log.done);
    // Chunks are asked for before the manifest says there are none; the honest `404`s
    // that answer them cost the source nothing.
    assert!(log.sent.iter().any(|(_, w)| *w == Want::Manifest));
    assert!(log.sent.iter().any(|(_, w)| *w == Want::Chunk(1)));
    assert!(log.banned.is_empty() && log.dropped.is_empty(), "{:?} {:?}", log.banned, log.dropped);
    let tree = s.finish();
    assert_eq!(tree.len(), 0);
}

#[test]
fn options_are_checked() {
    let bad = Options { max_buffered_bytes: 1000, ..Options::default() };
    assert!(Syncer::<bavl_core::Sha256>::new([0; 32], 1, bad).is_err());
    let bad = Options { initial_window: 0, ..Options::default() };
    assert!(Syncer::<bavl_core::Sha256>::new([0; 32], 1, bad).is_err());
}

#[test]
fn chunks_are_asked_for_before_any_manifest() {
    let world = World::new(600, 16);
    assert!(world.truth.chunk_count() > 24);
    let root = world.truth.root_hash();
    // A budget whose unproven shares hold a manifest guess and a full window of chunk
    // guesses for each of the four sources.
    let opts = Options { max_buffered_bytes: 16 << 20, ..small_opts() };
    let syncer = Syncer::new(root, VERSION, opts.clone()).unwrap();
    let mut s = Sim::new(world, syncer, opts.max_buffered_bytes, 7);
    for _ in 0..4 {
        s.add(SimSource::new(Behaviour::Honest, 20, 1_000_000));
    }
    let log = s.run();
    assert!(log.done);
    // As the sources are added, before any answer, each fills its window: first a chunk
    // (chunk 0 for the first `probe` of them, else the next fresh index), then its
    // manifest, then chunks 1, 2, ... in order.
    let (probe, window) = (opts.probe as u32, opts.initial_window as usize);
    let mut next = 1;
    let mut want = Vec::new();
    for i in 0..4 {
        let mut sent = Vec::new();
        if i < probe {
            sent.push(Want::Chunk(0));
        } else {
            sent.push(Want::Chunk(next));
            next += 1;
        }
        sent.push(Want::Manifest);
        while sent.len() < window {
            sent.push(Want::Chunk(next));
            next += 1;
        }
        want.extend(sent.into_iter().map(|w| (SourceId(i), w)));
    }
    assert_eq!(log.sent[..want.len()], want[..]);
    assert!(log.banned.is_empty() && log.dropped.is_empty(), "{:?} {:?}", log.banned, log.dropped);
    assert_eq!(s.finish().root_hash(), root);
}

#[test]
fn a_tree_smaller_than_the_early_range_costs_no_source() {
    let world = World::new(40, 16);
    let count = world.truth.chunk_count();
    assert!((2..6).contains(&count), "{count} chunks");
    let root = world.truth.root_hash();
    let mut s = sim_of(world, small_opts(), 8);
    for k in 0..3 {
        s.add(SimSource::new(Behaviour::Honest, 3 + 5 * k, 1_000_000));
    }
    let log = s.run();
    assert!(log.done);
    assert!(log.sent.iter().any(|(_, w)| matches!(w, Want::Chunk(i) if *i >= count)));
    assert!(log.banned.is_empty() && log.dropped.is_empty(), "{:?} {:?}", log.banned, log.dropped);
    assert_eq!(s.finish().root_hash(), root);
}

#[test]
fn a_chunk_larger_than_the_early_limit_is_no_lie() {
    let world = World::new(600, 16);
    let smallest = (0..world.truth.chunk_count())
        .map(|i| world.truth.export_chunk(i).unwrap().len())
        .min()
        .unwrap() as u64;
    let root = world.truth.root_hash();
    let opts = Options { early_limit: smallest - 1, ..small_opts() };
    let mut s = sim_of(world, opts, 9);
    for k in 0..3 {
        s.add(SimSource::new(Behaviour::Honest, 4 + k, 1_000_000));
    }
    let log = s.run();
    assert!(log.done, "{:?}", log.failed);
    assert!(log.banned.is_empty() && log.dropped.is_empty(), "{:?} {:?}", log.banned, log.dropped);
    // Every early request was cut at the limit, so chunk 0 was asked again, at the size
    // a manifest states.
    assert!(log.sent.iter().filter(|(_, w)| *w == Want::Chunk(0)).count() > opts_probe());
    assert_eq!(s.finish().root_hash(), root);
}

fn opts_probe() -> usize {
    small_opts().probe as usize
}

#[test]
fn a_source_denying_chunks_it_lists_is_dropped_not_banned() {
    // Denied before the count is known (its `404`s come first: it is the nearest), then
    // judged by its own manifest or the first verified chunk.
    for seed in 0..4 {
        let world = World::new(600, 16);
        let root = world.truth.root_hash();
        let mut s = sim_of(world, small_opts(), seed);
        s.add(SimSource::new(Behaviour::ChunksMissing, 1, 50_000_000));
        s.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
        s.add(SimSource::new(Behaviour::Honest, 9, 1_000_000));
        let log = s.run();
        assert!(log.done);
        assert!(log.banned.is_empty(), "{:?}", log.banned);
        assert!(
            matches!(log.dropped[..], [(SourceId(0), bavl_sync::DropReason::NotFound(404))]),
            "{:?}",
            log.dropped
        );
        assert_eq!(s.finish().root_hash(), root);
    }
}

fn sim_of(world: World, opts: Options, seed: u64) -> Sim {
    let root = world.truth.root_hash();
    let syncer = Syncer::new(root, VERSION, opts.clone()).unwrap();
    Sim::new(world, syncer, opts.max_buffered_bytes, seed)
}

#[test]
fn chunk_0_is_not_asked_again_while_a_copy_verifies() {
    let world = World::new(600, 16);
    let root = world.truth.root_hash();
    let mut s = sim_of(world, small_opts(), 10);
    s.verify_cost = Duration::from_millis(30); // answers come far sooner than verdicts
    s.add(SimSource::new(Behaviour::Honest, 1, 50_000_000));
    s.add(SimSource::new(Behaviour::Honest, 1, 50_000_000));
    let log = s.run();
    assert!(log.done);
    let asked = log.sent.iter().filter(|(_, w)| *w == Want::Chunk(0)).count();
    assert!(asked <= 2, "chunk 0 asked {asked} times");
    assert_eq!(s.finish().root_hash(), root);
}
