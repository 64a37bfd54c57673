//! Structure-aware attack on the verifiers' kind rules. A proof hashes to the trusted root
//! only if it is the real tree with some subtrees pruned, so random bytes never get past
//! the root check; this target writes exactly such proofs — every pattern of expanded
//! nodes, leaf runs and leaf kinds (the independent prover in `src/forge.rs`), as a
//! malicious prover who knows the tree could — and checks the verifiers against the truth:
//!
//! - soundness: anything accepted is true of the fixture tree (membership, absence, the
//!   exact range, the chunk at its index) and is byte for byte the honest proof (the
//!   encoding is canonical);
//! - completeness: when the input asks for the honest proof (all choices zero) of a
//!   statement the core's own prover proves, the emitted proof is byte for byte the
//!   prover's, and the verifier accepts it.
#![no_main]

use std::ops::Bound;

use bavl_core::{verify_absence, verify_chunk, verify_membership, verify_range, Sha256};
use bavl_fuzz::forge::{Emitter, L_HASH, L_SUBJECT, L_VALUE};
use bavl_fuzz::{decode_forge_input, fixture, variant_key, Fixture, Forge};
use libfuzzer_sys::fuzz_target;

fn bound(kind: u8, key: &[u8]) -> Bound<&[u8]> {
    match kind {
        0 => Bound::Included(key),
        1 => Bound::Excluded(key),
        _ => Bound::Unbounded,
    }
}

fn below(k: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Unbounded => false,
        Bound::Included(a) => k < a,
        Bound::Excluded(a) => k <= a,
    }
}

fn above(k: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Unbounded => false,
        Bound::Included(b) => k > b,
        Bound::Excluded(b) => k >= b,
    }
}

/// The honest run for a range: the entries within the bounds plus one neighbour each side.
fn range_run(f: &Fixture, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> (u64, u64, u64, u64) {
    let n = f.entries.len() as u64;
    let s = f.entries.iter().filter(|(k, _)| below(k, lo)).count() as u64;
    let e = f.entries.iter().filter(|(k, _)| !above(k, hi)).count() as u64;
    if e < s {
        // (Excluded(a), Excluded(a)) with `a` present: `a` alone shows the range empty.
        return (s, s, s - 1, s);
    }
    (s, e, s.saturating_sub(1), if e < n { e + 1 } else { n })
}

fn entries_of(f: &Fixture, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
    f.entries.iter().filter(|(k, _)| !below(k, lo) && !above(k, hi)).cloned().collect()
}

fuzz_target!(|data: &[u8]| {
    let mut inp = decode_forge_input(data);
    let f = fixture(inp.fixture);
    let n = f.entries.len() as u64;
    // Whether this input asks for exactly the honest proof.
    let honest = inp.dlo == 0 && inp.dhi == 0 && inp.choices.0.iter().all(|&b| b == 0);
    let shift = |x: u64, d: i64| x.saturating_add_signed(d).min(n);

    // The statement, its honest run and the natural leaf kinds.
    let mut subject = (Vec::new(), Vec::new());
    let (mut lo_key, mut hi_key) = (Vec::new(), Vec::new());
    let (mut lo_kind, mut hi_kind) = (2, 2);
    let mut index = 0u64;
    let (kind, run, inside, prover) = match inp.forge {
        Forge::Membership { j, alter } => {
            if n == 0 {
                return;
            }
            let j = u64::from(j) % n;
            let (k, v) = &f.entries[j as usize];
            subject = (k.clone(), v.clone());
            if alter & 1 == 1 {
                subject.1.push(0);
            }
            if alter & 2 == 2 {
                subject.0.push(0);
            }
            (
                1,
                (j, j + 1),
                (j, j + 1),
                if alter == 0 { f.snap.prove_membership(k).ok() } else { None },
            )
        }
        Forge::Absence { j, variant } => {
            lo_key = variant_key(&f.entries, j, variant);
            (lo_kind, hi_kind) = (0, 0);
            hi_key = lo_key.clone();
            let (lo, hi) = (bound(0, &lo_key), bound(0, &hi_key));
            let (s, e, a, b) = range_run(f, lo, hi);
            (2, (a, b), (s, e), f.snap.prove_absence(&lo_key).ok())
        }
        Forge::Range { lo, hi } => {
            (lo_kind, hi_kind) = (lo.0, hi.0);
            lo_key = variant_key(&f.entries, lo.1, lo.2);
            hi_key = variant_key(&f.entries, hi.1, hi.2);
            let (lo, hi) = (bound(lo_kind, &lo_key), bound(hi_kind, &hi_key));
            let (s, e, a, b) = range_run(f, lo, hi);
            (2, (a, b), (s, e), f.snap.prove_range(lo, hi).ok())
        }
        Forge::Chunk { i } => {
            let cc = f.chunks.len() as u64;
            index = u64::from(i) % (cc + 1);
            let (before, len) = f.chunk_spans.get(index as usize).copied().unwrap_or((n, 0));
            (3, (before, before + len), (before, before + len), f.snap.export_chunk(index).ok())
        }
    };
    let (lo, hi) = (shift(run.0, inp.dlo), shift(run.1, inp.dhi));
    let natural = |i: u64| match kind {
        1 => L_SUBJECT,
        2 if i >= inside.0 && i < inside.1 => L_VALUE,
        2 => L_HASH,
        _ => L_VALUE,
    };
    let proof =
        Emitter { out: Vec::new(), lo, hi, free: inp.free, natural, choices: &mut inp.choices }
            .emit(kind, f.capacity, f.mirror.as_ref());

    let accepted = match inp.forge {
        Forge::Membership { .. } => {
            let (k, v) = (&subject.0, &subject.1);
            match verify_membership::<Sha256>(&f.root, k, v, &proof) {
                Ok(m) => {
                    let i = f.index_of(k).unwrap_or_else(|| {
                        panic!("{}: membership of an absent key verified", f.name)
                    });
                    assert_eq!(
                        &f.entries[i].1, v,
                        "{}: membership with a wrong value verified",
                        f.name
                    );
                    assert_eq!((m.index, m.key_count), (i as u64, n));
                    assert_eq!(
                        f.snap.prove_membership(k).ok(),
                        Some(proof.clone()),
                        "non-canonical membership proof accepted"
                    );
                    true
                }
                Err(_) => false,
            }
        }
        Forge::Absence { .. } => match verify_absence::<Sha256>(&f.root, &lo_key, &proof) {
            Ok(a) => {
                assert!(
                    f.index_of(&lo_key).is_none(),
                    "{}: absence of a present key verified",
                    f.name
                );
                assert_eq!(a.key_count, n);
                assert_eq!(
                    f.snap.prove_absence(&lo_key).ok(),
                    Some(proof.clone()),
                    "non-canonical absence proof accepted"
                );
                true
            }
            Err(_) => false,
        },
        Forge::Range { .. } => {
            let (lo, hi) = (bound(lo_kind, &lo_key), bound(hi_kind, &hi_key));
            match verify_range::<Sha256>(&f.root, lo, hi, &proof) {
                Ok(r) => {
                    assert_eq!(
                        r.entries,
                        entries_of(f, lo, hi),
                        "{}: range verified with wrong entries",
                        f.name
                    );
                    assert_eq!(r.key_count, n);
                    assert_eq!(
                        f.snap.prove_range(lo, hi).ok(),
                        Some(proof.clone()),
                        "non-canonical range proof accepted"
                    );
                    true
                }
                Err(_) => false,
            }
        }
        Forge::Chunk { .. } => match verify_chunk::<Sha256>(&f.root, index, &proof) {
            Ok(vc) => {
                assert_eq!(
                    f.chunks.get(index as usize),
                    Some(&proof),
                    "{}: forged chunk {index} accepted",
                    f.name
                );
                assert_eq!(
                    (vc.index, vc.chunk_count, vc.key_count),
                    (index, f.chunks.len() as u64, n)
                );
                true
            }
            Err(_) => false,
        },
    };
    if let (true, Some(honest_proof)) = (honest, prover) {
        assert_eq!(
            proof, honest_proof,
            "fuzz/src/forge.rs no longer emits what the core prover does (format change?)"
        );
        assert!(
            accepted,
            "{}: the core prover's own proof was rejected by its verifier ({:?})",
            f.name, inp.forge
        );
    }
});
