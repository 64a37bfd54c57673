//! Scheduling: memory bound, adaptive concurrency, speculation, resume, determinism.

use std::time::Duration;

use bavl_sync::{resume, Options, SourceId, Syncer, Want};

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
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
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
fn resume_from_a_partial_set_fetches_only_the_rest() {
    let world = World::new(3000, 16);
    let mut syncer = Syncer::new(world.truth.root_hash(), VERSION, small_opts()).unwrap();
    let count = world.truth.chunk_count();
    for i in (0..count).step_by(2) {
        syncer.add_local_chunk(i, &world.truth.export_chunk(i).unwrap()).unwrap();
    }
    // A damaged local chunk is refused (and will be fetched).
    let mut bad = world.truth.export_chunk(1).unwrap();
    bad[20] ^= 1;
    assert!(syncer.add_local_chunk(1, &bad).is_err());
    let mut s = Sim::new(world, syncer, small_opts().max_buffered_bytes, 8);
    s.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    let log = s.run();
    assert!(log.done);
    for (_, want) in &log.sent {
        if let Want::Chunk(i) = want {
            assert_eq!(i % 2, 1, "chunk {i} was held already");
        }
    }
    assert_eq!(log.accepted.len() as u64, count / 2);
    let root = s.world.truth.root_hash();
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
}

#[test]
fn killed_sync_resumes_from_its_file() {
    let mut first = sim(9, small_opts());
    first.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    first.add(SimSource::new(Behaviour::WrongBytes, 3, 1_000_000));
    first.run_until_accepted(100);
    let root = first.world.truth.root_hash();
    let mut file = resume::header(&root, VERSION);
    for (_, _, body) in &first.log.accepted {
        file.extend(resume::record(body));
    }
    file.extend(&resume::record(b"torn by the kill")[..9]);
    let held: Vec<u64> = first.log.accepted.iter().map(|(i, _, _)| *i).collect();

    let read = resume::read(&file, &root, VERSION).unwrap();
    assert_eq!(read.chunks.len(), held.len());
    let mut syncer = Syncer::new(root, VERSION, small_opts()).unwrap();
    for ((_, body), want) in read.chunks.iter().zip(&held) {
        // The index comes from the chunk's own proof.
        assert_eq!(syncer.add_local_chunk_unindexed(body).unwrap(), *want);
    }
    // Again: a duplicate, refused.
    assert!(syncer.add_local_chunk_unindexed(read.chunks[0].1).is_err());
    let mut second = Sim::new(World::new(3000, 16), syncer, small_opts().max_buffered_bytes, 10);
    second.add(SimSource::new(Behaviour::Honest, 5, 1_000_000));
    let log = second.run();
    assert!(log.done);
    for (_, want) in &log.sent {
        if let Want::Chunk(i) = want {
            assert!(!held.contains(i), "chunk {i} fetched again after resuming");
        }
    }
    assert_eq!(second.syncer.finish().unwrap().root_hash(), root);
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
    let tree = s.syncer.finish().unwrap();
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
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
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
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
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
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
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
        assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
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
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
}
