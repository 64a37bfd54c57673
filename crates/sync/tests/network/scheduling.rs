//! Scheduling: memory bound, adaptive concurrency, speculation, resume, determinism.

use std::time::Duration;

use bavl_sync::{resume, Options, SourceId, Syncer, Want};

use crate::byzantine::{sim, small_opts};
use crate::sim::{Behaviour, Sim, SimSource, World, VERSION};

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
fn speculation_shortens_the_tail() {
    let run = |speculate: bool| {
        // A grace of several round trips, as the defaults have (5 s): requests queued at
        // the far source are not mistaken for a stall.
        let grace = Duration::from_secs(1);
        let mut s = sim(7, Options { speculate, grace, ..small_opts() });
        s.add(SimSource::new(Behaviour::Honest, 2, 300_000));
        s.add(SimSource::new(Behaviour::Honest, 150, 20_000)); // far and slow, above the rate
        let log = s.run();
        assert!(log.done);
        assert!(s.syncer.sources().iter().all(|r| r.health == bavl_sync::Health::Live));
        (log.end, s.status().speculative)
    };
    let (with, copies) = run(true);
    let (without, none) = run(false);
    assert_eq!(none, 0);
    assert!(copies > 0);
    assert!(with < without, "with {with:?} without {without:?}");
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
    // Chunk 0 may be asked for with the manifest; nothing else.
    assert!(log.sent.iter().any(|(_, w)| *w == Want::Manifest));
    assert!(log.sent.iter().all(|(_, w)| matches!(w, Want::Manifest | Want::Chunk(0))));
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
fn chunk_0_is_asked_for_with_the_manifests() {
    let world = World::new(600, 16);
    let root = world.truth.root_hash();
    let syncer = Syncer::new(root, VERSION, small_opts()).unwrap();
    let mut s = Sim::new(world, syncer, small_opts().max_buffered_bytes, 7);
    for _ in 0..4 {
        s.add(SimSource::new(Behaviour::Honest, 20, 1_000_000));
    }
    let log = s.run();
    assert!(log.done);
    // As the sources are added, before any answer: each one's manifest and, for the
    // first `probe` of them (whose manifests are still on their way), chunk 0.
    let probe = small_opts().probe as u32;
    let want: Vec<_> = (0..probe)
        .flat_map(|i| [(SourceId(i), Want::Manifest), (SourceId(i), Want::Chunk(0))])
        .chain([(SourceId(probe), Want::Manifest)])
        .collect();
    assert_eq!(log.sent[..want.len()], want[..]);
    assert_eq!(s.syncer.finish().unwrap().root_hash(), root);
}
