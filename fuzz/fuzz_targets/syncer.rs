//! The sync state machine (`bavl_sync::Syncer`) driven by arbitrary events for a fixture's
//! root: each request in flight may be answered with its true body, another chunk's, a
//! short or garbage body, an over-long one, or any failure, in any order; verifications
//! come back late and out of order; time jumps. Must never panic; `buffered()` never
//! exceeds the budget; a chunk is accepted only as the exported one, and once; `Done`
//! means every chunk is in, and then the accepted chunks rebuild the fixture's tree; with
//! no adversarial op at all the sync must get there.
//!
//! Input: `[fixture, sources, early_limit, ops...]`, each op a byte pair
//! `(what, which)`; when the ops run out, every source turns honest until the sync ends or
//! stops moving.
#![no_main]

use std::time::Duration;

use bavl_core::{Restore, Sha256};
use bavl_fuzz::fixture;
use bavl_sync::{Action, Event, FailureKind, Manifest, Options, Request, Syncer, VerifyJob, Want};
use libfuzzer_sys::fuzz_target;

const VERSION: u64 = 3;

fuzz_target!(|data: &[u8]| {
    let [sel, sources, early, ops @ ..] = data else { return };
    let f = fixture(*sel);
    let opts = Options {
        max_buffered_bytes: 1 << 20,
        max_chunk_bytes: 64 << 10,
        max_manifest_bytes: 256 << 10,
        early_limit: 11 + u64::from(*early) * 64,
        ..Options::default()
    };
    let budget = opts.max_buffered_bytes;
    let max_in_flight = opts.max_in_flight as usize;
    let mut s = Syncer::<Sha256>::new(f.root, VERSION, opts).unwrap();
    let manifest = Manifest::from_snapshot(VERSION, &f.snap)
        .expect("an in-memory snapshot holds every body")
        .to_json();
    let honest = |req: &Request| -> Result<Vec<u8>, FailureKind> {
        match req.want {
            Want::Manifest => Ok(manifest.clone()),
            Want::Chunk(i) => f.chunks.get(i as usize).cloned().ok_or(FailureKind::Http(404)),
        }
    };
    let mut now = Duration::ZERO;
    for _ in 0..1 + sources % 4 {
        s.add_source(now);
    }
    let (mut flights, mut jobs) = (Vec::<Request>::new(), Vec::<VerifyJob>::new());
    let mut restore = Restore::<Sha256>::new(f.root);
    // Carries out the syncer's actions; true once it said `Done`.
    let drain = |s: &mut Syncer<Sha256>,
                 flights: &mut Vec<Request>,
                 jobs: &mut Vec<VerifyJob>,
                 restore: &mut Restore<Sha256>| {
        assert!(s.buffered() <= budget, "buffered {} over the budget", s.buffered());
        assert!(s.in_flight() <= max_in_flight, "{} requests in flight", s.in_flight());
        let mut done = false;
        while let Some(a) = s.poll_action() {
            match a {
                Action::Send(r) => flights.push(r),
                Action::Cancel(id) => flights.retain(|r| r.id != id),
                Action::Verify(j) => jobs.push(j),
                Action::Accepted { index, len, chunk, .. } => {
                    let exported = f.chunks.get(index as usize).map(|c| c.len() as u64);
                    assert_eq!(Some(len), exported, "a foreign chunk {index}");
                    assert_eq!(chunk.index, index);
                    restore.add_verified(*chunk).expect("a chunk accepted once, of the root");
                }
                Action::Done => done = true,
                Action::Failed(_) | Action::Banned { .. } | Action::Dropped { .. } => {}
            }
        }
        done
    };
    let mut done = drain(&mut s, &mut flights, &mut jobs, &mut restore);
    // The adversary's turn, then the honest end.
    let mut script = ops.chunks_exact(2).map(|p| (p[0], p[1]));
    let mut quiet = 0;
    while !done && quiet < 64 {
        let (what, which) = script.next().unwrap_or(match (flights.is_empty(), jobs.is_empty()) {
            (false, _) => (0, 0),     // answer honestly
            (true, false) => (7, 0),  // verify
            (true, true) => (9, 255), // wait 10 s (backoffs end)
        });
        let before = (flights.len(), jobs.len());
        match what % 10 {
            // Answer a request: honestly, or with a lie.
            w @ 0..=5 if !flights.is_empty() => {
                let req = flights.remove(which as usize % flights.len());
                let answer = match w {
                    0..=2 => honest(&req),
                    3 => Ok(f
                        .chunks
                        .get(which as usize % f.chunks.len().max(1))
                        .cloned()
                        .unwrap_or_default()),
                    4 => Ok(vec![which; usize::from(which) * 3]),
                    _ => honest(&req).map(|mut b| {
                        b.push(which);
                        b
                    }),
                };
                let event = match answer {
                    // What a transport's body guard does with a body over the limit; now
                    // and then the syncer is handed it anyway, to check it itself.
                    Ok(body) if body.len() as u64 > req.limit && which % 4 != 0 => {
                        Event::Failed { id: req.id, kind: FailureKind::TooLong }
                    }
                    Ok(body) => Event::Response { id: req.id, body },
                    Err(kind) => Event::Failed { id: req.id, kind },
                };
                s.handle(now, event);
            }
            6 if !flights.is_empty() => {
                let req = flights.remove(which as usize % flights.len());
                let kinds = [
                    FailureKind::Timeout,
                    FailureKind::Stalled,
                    FailureKind::TooLong,
                    FailureKind::Http(404),
                    FailureKind::Http(500),
                    FailureKind::Http(403),
                    FailureKind::Malformed,
                    FailureKind::Transport,
                    FailureKind::Truncated,
                ];
                s.handle(
                    now,
                    Event::Failed { id: req.id, kind: kinds[which as usize % kinds.len()] },
                );
            }
            7 | 8 if !jobs.is_empty() => {
                let job = jobs.remove(which as usize % jobs.len());
                s.handle(now, Event::Verified(Box::new(job.run::<Sha256>())));
            }
            _ => {
                now += Duration::from_millis(u64::from(which) * 40 + 1);
                s.tick(now);
            }
        }
        done |= drain(&mut s, &mut flights, &mut jobs, &mut restore);
        quiet =
            if (flights.len(), jobs.len()) == before && script.len() == 0 { quiet + 1 } else { 0 };
    }
    // With no adversary at all, every source is honest from the start: it must end.
    assert!(done || ops.len() >= 2, "{}: an all-honest sync did not finish", f.name);
    if done {
        let capacity = s.shape().map_or(0, |sh| sh.capacity);
        let mut tree = restore
            .finish(capacity)
            .unwrap_or_else(|e| panic!("{}: done, then the rebuild failed: {e}", f.name));
        assert_eq!(tree.root_hash(), f.root);
        assert_eq!(tree.len() as usize, f.entries.len());
    }
});
