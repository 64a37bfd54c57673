//! Writes the differential corpus that the Rust, Go and TypeScript verifiers must agree on
//! (`scripts/verifiers.sh`), and the Rust verifier's verdict on every case.
//!
//! `cargo run --release --no-default-features --example diff_corpus -- CORPUS VERDICTS`
//! (from `fuzz/`, or with `--manifest-path fuzz/Cargo.toml`).
//!
//! Bases are proofs or chunks with the inputs of the verifier they are meant for: valid
//! ones of every kind from trees of several sizes and capacities (the fuzz fixtures plus
//! two larger trees), valid proofs offered with wrong inputs, and forged proofs from the
//! `forge` target's independent prover (`src/forge.rs`): the real tree with any pattern of
//! expanded subtrees, leaf runs and leaf kinds, so they hash to the true root and reach
//! the kind rules. Cases are bases as they are or mutated: every byte flipped and set to a
//! small value (0..=4), every truncation, one byte appended. The file format is in
//! `docs/verifiers.md`; each verdict line is `CASE ok SUMMARY` or `CASE err KIND`
//! (`docs/design.md` §3).

use std::fmt::Write as _;
use std::ops::Bound;

use bavl_core::{
    verify_absence, verify_chunk, verify_membership, verify_range, Digest, ProofError, Sha256,
    Snapshot, Tree,
};
use bavl_fuzz::forge::{mirror, Choices, Emitter, MNode, L_HASH, L_SUBJECT, L_VALUE};
use bavl_fuzz::{fixtures, Rng};

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Clone)]
enum B {
    Unbounded,
    Included(Vec<u8>),
    Excluded(Vec<u8>),
}

impl B {
    fn get(&self) -> Bound<&[u8]> {
        match self {
            B::Unbounded => Bound::Unbounded,
            B::Included(k) => Bound::Included(k),
            B::Excluded(k) => Bound::Excluded(k),
        }
    }
    fn json(&self) -> String {
        match self {
            B::Unbounded => r#"{"kind":"unbounded"}"#.into(),
            B::Included(k) => format!(r#"{{"kind":"included","key":"{}"}}"#, hex(k)),
            B::Excluded(k) => format!(r#"{{"kind":"excluded","key":"{}"}}"#, hex(k)),
        }
    }
}

#[derive(Clone)]
enum Q {
    Membership(Vec<u8>, Vec<u8>),
    Absence(Vec<u8>),
    Range(B, B),
    Chunk(u64),
}

struct Base {
    q: Q,
    root: Digest,
    proof: Vec<u8>,
    origin: String,
}

enum Case {
    AsIs(usize),
    Flip(usize, usize, u8),
    Truncate(usize, usize),
    Append(usize, u8),
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::with_capacity(2 * b.len()), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// A tree of the corpus.
struct T {
    name: String,
    snap: Snapshot,
    root: Digest,
    capacity: u32,
    entries: Entries,
    spans: Vec<(u64, u64)>,
    mirror: Option<MNode>,
}

fn tree(name: &str, snap: Snapshot) -> T {
    let root = snap.root_hash();
    let capacity = snap.capacity();
    let chunks: Vec<Vec<u8>> =
        (0..snap.chunk_count()).map(|i| snap.export_chunk(i).expect("in range")).collect();
    let entries: Entries =
        snap.iter().expect("resident").map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    let mut spans = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let v = verify_chunk::<Sha256>(&root, i as u64, c).expect("an exported chunk verifies");
        spans.push((v.keys_before, v.len() as u64));
    }
    let mirror = mirror(&root, capacity, &chunks);
    T { name: name.into(), snap, root, capacity, entries, spans, mirror }
}

fn trees() -> Vec<T> {
    let mut out: Vec<T> = fixtures().iter().map(|f| tree(f.name, f.snap.clone())).collect();
    let mut rng = Rng(18);
    for (name, capacity, n, removals) in
        [("binary-cap16", 16, 300u64, 40), ("cap64", 64, 1500, 100)]
    {
        let mut t = Tree::with_capacity(capacity).expect("capacity");
        let mut keys = Vec::new();
        for j in 0..n {
            let key = rng.next_u64().to_be_bytes()[..1 + (j % 8) as usize].to_vec();
            let value = vec![(j % 251) as u8; (rng.below(40)) as usize];
            t.insert(&key, &value).expect("entry");
            keys.push(key);
        }
        for _ in 0..removals {
            t.remove(&keys[rng.below(keys.len() as u64) as usize]);
        }
        out.push(tree(name, t.snapshot()));
    }
    out
}

/// Runs the Rust verifier on one case: the verdict line's text.
fn verdict(root: &Digest, q: &Q, proof: &[u8]) -> String {
    let ents = |es: &mut dyn Iterator<Item = (&[u8], &[u8])>| {
        es.map(|(k, v)| format!("{}:{}", hex(k), hex(v))).collect::<Vec<_>>().join(",")
    };
    let r: Result<String, ProofError> = match q {
        Q::Membership(k, v) => verify_membership::<Sha256>(root, k, v, proof)
            .map(|m| format!("index={} keys={}", m.index, m.key_count)),
        Q::Absence(k) => {
            verify_absence::<Sha256>(root, k, proof).map(|a| format!("keys={}", a.key_count))
        }
        Q::Range(lo, hi) => verify_range::<Sha256>(root, lo.get(), hi.get(), proof).map(|r| {
            let mut it = r.entries.iter().map(|(k, v)| (&k[..], &v[..]));
            format!("keys={} entries={}", r.key_count, ents(&mut it))
        }),
        Q::Chunk(i) => verify_chunk::<Sha256>(root, *i, proof).map(|c| {
            format!(
                "index={} chunks={} keys={} before={} height={} capacity={} entries={}",
                c.index,
                c.chunk_count,
                c.key_count,
                c.keys_before,
                c.key_height,
                c.capacity,
                ents(&mut c.entries())
            )
        }),
    };
    match r {
        Ok(s) => format!("ok {s}"),
        Err(e) => format!("err {}", e.kind()),
    }
}

/// Valid proofs and chunks of tree `t`, and valid proofs offered with wrong inputs.
fn valid_bases(t: &T, out: &mut Vec<Base>) {
    let (n, root) = (t.entries.len(), t.root);
    let mut add = |q: Q, proof: Option<Vec<u8>>, origin: String| {
        if let Some(proof) = proof {
            out.push(Base { q, root, proof, origin: format!("{}: {origin}", t.name) });
        }
    };
    let key = |i: usize| t.entries[i.min(n.saturating_sub(1))].0.clone();
    for i in [0, n / 2, n.saturating_sub(1)].into_iter().filter(|&i| i < n).take(if n > 1 {
        3
    } else {
        1
    }) {
        let (k, v) = t.entries[i].clone();
        let p = t.snap.prove_membership(&k).ok();
        add(Q::Membership(k.clone(), v.clone()), p.clone(), format!("membership of key {i}"));
        add(Q::Membership(k.clone(), [v, vec![0]].concat()), p.clone(), "wrong value".into());
        add(Q::Membership(Vec::new(), Vec::new()), p.clone(), "empty key (Input)".into());
        if n > 1 {
            add(
                Q::Membership(key(i + 1), t.entries[(i + 1).min(n - 1)].1.clone()),
                p,
                "another key".into(),
            );
        }
    }
    let absent = if n == 0 {
        vec![b"absent".to_vec()]
    } else {
        vec![vec![0], [key(n / 2), vec![0]].concat(), [key(n), vec![0xff]].concat()]
    };
    for k in absent {
        let p = t.snap.prove_absence(&k).ok();
        add(Q::Absence(k.clone()), p.clone(), "absence".into());
        if n > 0 {
            add(Q::Absence(key(n / 2)), p, "absence of a present key".into());
        }
    }
    let mut ranges =
        vec![(B::Unbounded, B::Unbounded), (B::Included(vec![0]), B::Included(vec![1]))];
    if n > 0 {
        let (a, b) = (key(n / 4), key(n / 2));
        ranges.extend([
            (B::Included(a.clone()), B::Included(b.clone())),
            (B::Excluded(a.clone()), B::Excluded(b.clone())),
            (B::Excluded(b.clone()), B::Excluded(b.clone())),
            (B::Excluded(b.clone()), B::Included(b.clone())),
            (B::Unbounded, B::Excluded(a.clone())),
            (B::Included([b.clone(), vec![0]].concat()), B::Unbounded),
        ]);
    }
    for (lo, hi) in ranges {
        let p = t.snap.prove_range(lo.get(), hi.get()).ok();
        add(Q::Range(lo.clone(), hi.clone()), p.clone(), "range".into());
        add(Q::Range(lo.clone(), B::Unbounded), p.clone(), "range, wider upper bound".into());
        add(Q::Range(hi.clone(), lo.clone()), p.clone(), "range, bounds swapped".into());
        add(Q::Range(B::Excluded(vec![7; 1025]), hi), p, "range, 1025-byte bound (Input)".into());
    }
    let m = t.spans.len() as u64;
    for i in [0, m / 2, m.saturating_sub(1)].into_iter().filter(|&i| i < m) {
        let c = t.snap.export_chunk(i).ok();
        add(Q::Chunk(i), c.clone(), format!("chunk {i}"));
        add(Q::Chunk(i + 1), c.clone(), "chunk at the next index".into());
        add(Q::Chunk(u64::MAX), c, "chunk at index 2^64-1".into());
    }
}

/// Forged proofs of tree `t`: the independent prover with random choices.
fn forged_bases(t: &T, rng: &mut Rng, count: usize, out: &mut Vec<Base>) {
    let n = t.entries.len() as u64;
    for f in 0..count {
        // Sparse choices: mostly the honest (zero) choice, so that most forgeries differ from
        // the honest proof in one or two places and reach the later kind rules.
        let density = [0, 8, 4, 2][f % 4];
        let choices: Vec<u8> = (0..64)
            .map(|_| if density > 0 && rng.below(density) == 0 { rng.next_u64() as u8 } else { 0 })
            .collect();
        let kind = [1u8, 2, 3][f % 3];
        let pick = |rng: &mut Rng| if n == 0 { 0 } else { rng.below(n) as usize };
        let (q, run, inside) = match kind {
            1 => {
                let j = pick(rng);
                let (k, v) = t.entries.get(j).cloned().unwrap_or_default();
                (Q::Membership(k, v), (j as u64, j as u64 + 1), (0, 0))
            }
            2 => {
                let mk = |rng: &mut Rng, t: &T| {
                    let k = t.entries.get(pick(rng)).map_or(vec![1], |e| e.0.clone());
                    match rng.below(4) {
                        0 => B::Included(k),
                        1 => B::Excluded(k),
                        2 => B::Included([k, vec![0]].concat()),
                        _ => B::Unbounded,
                    }
                };
                let (mut lo, mut hi) = (mk(rng, t), mk(rng, t));
                if let (B::Included(a) | B::Excluded(a), B::Included(b) | B::Excluded(b)) =
                    (&lo, &hi)
                {
                    if a > b {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                }
                let below = |k: &[u8]| match &lo {
                    B::Included(a) => k < &a[..],
                    B::Excluded(a) => k <= &a[..],
                    B::Unbounded => false,
                };
                let above = |k: &[u8]| match &hi {
                    B::Included(b) => k > &b[..],
                    B::Excluded(b) => k >= &b[..],
                    B::Unbounded => false,
                };
                let s = t.entries.iter().filter(|(k, _)| below(k)).count() as u64;
                let e = t.entries.iter().filter(|(k, _)| !above(k)).count() as u64;
                let run = if e < s {
                    (s - 1, s)
                } else {
                    (s.saturating_sub(1), if e < n { e + 1 } else { n })
                };
                (Q::Range(lo.clone(), hi.clone()), run, (s, e.max(s)))
            }
            _ => {
                let i = if t.spans.is_empty() { 0 } else { rng.below(t.spans.len() as u64) };
                let (before, len) = t.spans.get(i as usize).copied().unwrap_or((n, 0));
                let index = if rng.below(4) == 0 { i + 1 } else { i };
                (Q::Chunk(index), (before, before + len), (0, 0))
            }
        };
        let shift = |x: u64, rng: &mut Rng| x.saturating_add_signed(rng.below(5) as i64 - 2).min(n);
        let (lo, hi) = if rng.below(2) == 0 { run } else { (shift(run.0, rng), shift(run.1, rng)) };
        let natural = |i: u64| match kind {
            1 => L_SUBJECT,
            2 if i >= inside.0 && i < inside.1 => L_VALUE,
            2 => L_HASH,
            _ => L_VALUE,
        };
        let mut ch = Choices(&choices);
        let free = rng.below(3) != 0;
        let proof = Emitter { out: Vec::new(), lo, hi, free, natural, choices: &mut ch }.emit(
            kind,
            t.capacity,
            t.mirror.as_ref(),
        );
        let origin = format!("{}: forged #{f} (kind {kind}, run {lo}..{hi}, free {free})", t.name);
        out.push(Base { q, root: t.root, proof, origin });
    }
}

/// Every case: bases as they are, and the mutants of the valid ones of at most `limit`
/// bytes (every byte flipped and set to a small value, every truncation, one byte appended).
fn cases(bases: &[Base], mutate: &[bool], limit: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for (b, base) in bases.iter().enumerate() {
        out.push(Case::AsIs(b));
        if !mutate[b] || base.proof.len() > limit {
            continue;
        }
        for at in 0..base.proof.len() {
            out.push(Case::Flip(b, at, 1 << (at % 8)));
            // A small value (a tag, a short length or count) in its place, a fault the
            // specification's order of checks must classify the same everywhere.
            let set = (at % 5) as u8;
            if base.proof[at] != set {
                out.push(Case::Flip(b, at, base.proof[at] ^ set));
            }
        }
        out.extend((0..base.proof.len()).map(|len| Case::Truncate(b, len)));
        out.push(Case::Append(b, 0));
    }
    out
}

fn q_json(q: &Q) -> String {
    match q {
        Q::Membership(k, v) => {
            format!(r#""kind":"membership","key":"{}","value":"{}""#, hex(k), hex(v))
        }
        Q::Absence(k) => format!(r#""kind":"absence","key":"{}""#, hex(k)),
        Q::Range(lo, hi) => format!(r#""kind":"range","lo":{},"hi":{}"#, lo.json(), hi.json()),
        Q::Chunk(i) => format!(r#""kind":"chunk","index":"{i}""#),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [corpus, verdicts] = &args[..] else {
        eprintln!("usage: diff_corpus CORPUS.json VERDICTS.txt");
        std::process::exit(2);
    };
    let mut rng = Rng(0x18);
    let (mut bases, mut mutate) = (Vec::new(), Vec::new());
    for t in trees() {
        let before = bases.len();
        valid_bases(&t, &mut bases);
        // The valid ones are mutated (the wrong-input variants would add nothing).
        for b in &bases[before..] {
            let valid = verdict(&b.root, &b.q, &b.proof).starts_with("ok");
            mutate.push(valid && !b.origin.contains("Input"));
        }
        let before = bases.len();
        forged_bases(&t, &mut rng, 300, &mut bases);
        mutate.resize(mutate.len() + bases.len() - before, false);
    }
    let cases = cases(&bases, &mutate, 4096);
    let mut json = String::from(
        "{\n\"description\": \"bavl differential corpus: see docs/verifiers.md\",\n\"bases\": [\n",
    );
    for (i, b) in bases.iter().enumerate() {
        let sep = if i + 1 < bases.len() { "," } else { "" };
        let _ = writeln!(
            json,
            r#"{{{},"root":"{}","proof":"{}","origin":"{}"}}{sep}"#,
            q_json(&b.q),
            hex(&b.root),
            hex(&b.proof),
            b.origin.replace('"', "'")
        );
    }
    json.push_str("],\n\"cases\": [\n");
    let mut out = String::new();
    for (i, c) in cases.iter().enumerate() {
        let (b, proof, text) = match *c {
            Case::AsIs(b) => (b, bases[b].proof.clone(), format!(r#"[{b},"asis"]"#)),
            Case::Flip(b, at, x) => {
                let mut p = bases[b].proof.clone();
                p[at] ^= x;
                (b, p, format!(r#"[{b},"flip",{at},{x}]"#))
            }
            Case::Truncate(b, len) => {
                (b, bases[b].proof[..len].to_vec(), format!(r#"[{b},"truncate",{len}]"#))
            }
            Case::Append(b, x) => {
                (b, [&bases[b].proof[..], &[x]].concat(), format!(r#"[{b},"append",{x}]"#))
            }
        };
        let sep = if i + 1 < cases.len() { "," } else { "" };
        let _ = writeln!(json, "{text}{sep}");
        let _ = writeln!(out, "{i} {}", verdict(&bases[b].root, &bases[b].q, &proof));
    }
    json.push_str("]\n}\n");
    std::fs::write(corpus, json).expect("write the corpus");
    std::fs::write(verdicts, &out).expect("write the verdicts");
    let accepted = out.lines().filter(|l| l.contains(" ok ")).count();
    eprintln!(
        "diff_corpus: {} bases ({} forged), {} cases, {accepted} accepted by bavl_core",
        bases.len(),
        bases.iter().filter(|b| b.origin.contains("forged")).count(),
        cases.len()
    );
}
