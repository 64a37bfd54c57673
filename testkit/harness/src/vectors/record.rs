//! Recording one tree's vectors: each proof is produced by the snapshot, verified with
//! `bavl_core`'s verifiers, and its expected results checked before it is written down;
//! each negative vector is checked to be rejected.

use anyhow::{ensure, Context, Result};
use bavl_core::{
    verify_absence, verify_chunk, verify_membership, verify_range, Digest, Sha256, Snapshot,
};

use super::rules;
use super::trees::{Op, Spec};
use super::{Absence, BoundJson, Chunk, Entry, Membership, Negative, OpJson, Range, TreeVectors};
use crate::verify::{check, Kind, OwnedBound, Query};

pub(super) type Entries = [(Vec<u8>, Vec<u8>)];

fn entry((k, v): &(Vec<u8>, Vec<u8>)) -> Entry {
    Entry { key: hex::encode(k), value: hex::encode(v) }
}

fn bound(b: &OwnedBound) -> BoundJson {
    let (kind, key) = match b {
        OwnedBound::Unbounded => ("unbounded", None),
        OwnedBound::Included(k) => ("included", Some(hex::encode(k))),
        OwnedBound::Excluded(k) => ("excluded", Some(hex::encode(k))),
    };
    BoundJson { kind, key }
}

fn op(op: &Op) -> OpJson {
    match op {
        Op::Insert(k, v) => OpJson::Insert { key: hex::encode(k), value: hex::encode(v) },
        Op::Remove(k) => OpJson::Remove { key: hex::encode(k) },
    }
}

/// Every vector of one tree.
pub(super) fn record(spec: &Spec) -> Result<TreeVectors> {
    let (snap, previous) = spec.build()?;
    let entries: Vec<(Vec<u8>, Vec<u8>)> =
        snap.iter()?.map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    let chunks = chunks(&snap, &entries).with_context(|| format!("chunks of {}", spec.name))?;
    let mut probes = vec![0, entries.len() / 2, entries.len().saturating_sub(1)];
    probes.extend(chunks.get(1).map(|c| c.keys_before as usize));
    probes.sort_unstable();
    probes.dedup();
    probes.retain(|&i| i < entries.len());
    Ok(TreeVectors {
        name: spec.name,
        description: spec.description,
        capacity: spec.capacity,
        operations: spec.ops.iter().map(op).collect(),
        entries: entries.iter().map(entry).collect(),
        root: hex::encode(snap.root_hash()),
        key_count: snap.len(),
        chunk_count: snap.chunk_count(),
        membership: probes
            .iter()
            .map(|&i| membership(&snap, &entries[i], i))
            .collect::<Result<_>>()?,
        absence: absences(&snap, &entries)?,
        range: range_cases(&entries)
            .iter()
            .map(|(lo, hi)| range(&snap, lo, hi))
            .collect::<Result<_>>()?,
        chunks,
        negative: negatives(&snap, previous.as_ref(), &entries)
            .with_context(|| format!("negatives of {}", spec.name))?,
    })
}

fn membership(
    snap: &Snapshot,
    (key, value): &(Vec<u8>, Vec<u8>),
    index: usize,
) -> Result<Membership> {
    let proof = snap.prove_membership(key).context("a present key has a membership proof")?;
    let m = verify_membership::<Sha256>(&snap.root_hash(), key, value, &proof)?;
    ensure!(
        m.index == index as u64 && m.key_count == snap.len(),
        "membership proof of key {index} misverified"
    );
    Ok(Membership {
        key: hex::encode(key),
        value: hex::encode(value),
        proof: hex::encode(proof),
        index: m.index,
        key_count: m.key_count,
    })
}

/// Absent keys worth proving: below the first key, between two keys, above the last.
fn absent_keys(entries: &Entries) -> Vec<(&'static str, Vec<u8>)> {
    let Some((last, _)) = entries.last() else {
        return vec![("any key of the empty tree", b"absent".to_vec())];
    };
    let mut out = vec![("below the first key", vec![0u8])];
    if entries.len() >= 2 {
        let mut between = entries[(entries.len() - 1) / 2].0.clone();
        between.push(0);
        out.push(("between two adjacent keys", between));
    }
    let mut above = last.clone();
    above.push(0xff);
    out.push(("above the last key", above));
    out
}

fn absences(snap: &Snapshot, entries: &Entries) -> Result<Vec<Absence>> {
    let root = snap.root_hash();
    let mut out = Vec::new();
    for (description, key) in absent_keys(entries) {
        let proof = snap.prove_absence(&key).context("an absent key has an absence proof")?;
        let a = verify_absence::<Sha256>(&root, &key, &proof)?;
        ensure!(a.key_count == snap.len(), "absence proof misverified");
        let (key, proof) = (hex::encode(key), hex::encode(proof));
        out.push(Absence { description, key, proof, key_count: a.key_count });
    }
    Ok(out)
}

/// Bounds worth proving: everything, closed and open ranges, prefixes, suffixes, empty
/// ranges between keys and before the first.
fn range_cases(entries: &Entries) -> Vec<(OwnedBound, OwnedBound)> {
    use OwnedBound::{Excluded as E, Included as I, Unbounded as U};
    let n = entries.len();
    if n == 0 {
        return vec![(U, U), (I(b"a".to_vec()), I(b"z".to_vec()))];
    }
    let k = |i: usize| entries[i.min(n - 1)].0.clone();
    let between = |i: usize| [k(i), vec![0]].concat();
    let mut out = vec![
        (U, U),
        (I(k(n / 4)), I(k(n / 2))),
        (E(k(n / 4)), E(k(n / 2))),
        (U, E(k(n / 3))),
        (I(between(n / 2)), U),
        (I(vec![0]), I(vec![1])),
    ];
    if n / 2 + 1 < n {
        out.push((I(between(n / 2)), E(k(n / 2 + 1))));
    }
    // The key alone proves the empty range on both sides of it.
    out.push((E(k(n / 2)), E(k(n / 2))));
    out
}

fn range(snap: &Snapshot, lo: &OwnedBound, hi: &OwnedBound) -> Result<Range> {
    let proof = snap.prove_range(lo.as_bound(), hi.as_bound())?;
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        snap.range(lo.as_bound(), hi.as_bound())?.map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    let r = verify_range::<Sha256>(&snap.root_hash(), lo.as_bound(), hi.as_bound(), &proof)?;
    ensure!(r.entries == expected && r.key_count == snap.len(), "range proof misverified");
    Ok(Range {
        lo: bound(lo),
        hi: bound(hi),
        proof: hex::encode(proof),
        entries: expected.iter().map(entry).collect(),
        key_count: r.key_count,
    })
}

fn chunks(snap: &Snapshot, entries: &Entries) -> Result<Vec<Chunk>> {
    let mut out = Vec::new();
    let mut keys_before = 0u64;
    for index in 0..snap.chunk_count() {
        let bytes = snap.export_chunk(index).context("every index below the count exports")?;
        let c = verify_chunk::<Sha256>(&snap.root_hash(), index, &bytes)?;
        let start = keys_before as usize;
        let expected = entries.get(start..start + c.len()).context("chunk beyond the entries")?;
        ensure!(
            c.entries().eq(expected.iter().map(|(k, v)| (&k[..], &v[..]))),
            "chunk {index} entries differ"
        );
        ensure!(
            c.keys_before == keys_before && c.chunk_count == snap.chunk_count(),
            "chunk {index} misplaced"
        );
        ensure!(
            (index == 0) == (c.key_height == 0),
            "chunk {index} has key-height {}",
            c.key_height
        );
        out.push(Chunk {
            index,
            bytes: hex::encode(&bytes),
            key_height: c.key_height,
            keys_before: c.keys_before,
            len: c.len(),
            chunk_count: c.chunk_count,
            key_count: c.key_count,
        });
        keys_before += c.len() as u64;
    }
    ensure!(keys_before == snap.len(), "chunks do not cover the entries");
    Ok(out)
}

/// The proof with its middle byte flipped, and a description of the change.
fn flip(proof: &[u8]) -> (Vec<u8>, String) {
    let mut p = proof.to_vec();
    let at = p.len() / 2;
    p[at] ^= 0x01;
    (p, format!("byte {at} of {} flipped (xor 0x01)", proof.len()))
}

/// Checks that `q` rejects `proof` against `root` and writes the negative vector.
fn reject(root: &Digest, description: String, q: Query, proof: Vec<u8>) -> Result<Negative> {
    let Err(e) = check(root, &q, &proof) else {
        anyhow::bail!("negative vector accepted: {description}");
    };
    let opt = |b: &[u8], used: bool| used.then(|| hex::encode(b));
    let kind = q.kind;
    Ok(Negative {
        description,
        kind: kind.name(),
        key: opt(&q.key, matches!(kind, Kind::Membership | Kind::Absence)),
        value: opt(&q.value, kind == Kind::Membership),
        lo: (kind == Kind::Range).then(|| bound(&q.lo)),
        hi: (kind == Kind::Range).then(|| bound(&q.hi)),
        index: (kind == Kind::Chunk).then_some(q.index),
        proof: hex::encode(proof),
        expected: "reject",
        error: e.kind(),
    })
}

/// [`reject`], checking that the rejection is of the error kind `kind`.
pub(super) fn reject_as(
    kind: &str,
    root: &Digest,
    description: String,
    q: Query,
    proof: Vec<u8>,
) -> Result<Negative> {
    let n = reject(root, description, q, proof)?;
    ensure!(n.error == kind, "{}: rejected as {}, not {kind}", n.description, n.error);
    Ok(n)
}

pub(super) fn query(kind: Kind, key: &[u8], value: &[u8]) -> Query {
    Query { key: key.to_vec(), value: value.to_vec(), ..Query::new(kind) }
}

fn negatives(
    snap: &Snapshot,
    previous: Option<&Snapshot>,
    entries: &Entries,
) -> Result<Vec<Negative>> {
    let root = snap.root_hash();
    let n = entries.len();
    let Some((key, value)) = entries.get(n / 2) else {
        return empty_negatives(snap);
    };
    let member = query(Kind::Membership, key, value);
    let mp = snap.prove_membership(key).context("present")?;
    let (flipped, how) = flip(&mp);
    let mut out = vec![
        reject(&root, format!("membership proof, {how}"), member.clone(), flipped)?,
        reject(
            &root,
            "membership proof with a wrong value".into(),
            query(Kind::Membership, key, b"wrong"),
            mp.clone(),
        )?,
    ];
    if n >= 2 {
        let (k0, v0) = &entries[0];
        let q = query(Kind::Membership, k0, v0);
        out.push(reject(&root, "membership proof of another key".into(), q, mp.clone())?);
    }
    let between = [key.clone(), vec![0]].concat();
    let ap = snap.prove_absence(&between).context("absent")?;
    let q = query(Kind::Absence, key, b"");
    out.push(reject(
        &root,
        "absence claimed for a present key (proof of a neighbouring absent key)".into(),
        q,
        ap,
    )?);
    out.extend(range_negatives(snap, entries)?);
    out.extend(rules::boundary_negatives(snap, entries)?);
    out.extend(rules::input_negatives(snap, entries, &mp)?);
    if n == 1 {
        out.extend(rules::decoder_bound_negatives(&root)?);
    }
    out.extend(chunk_negatives(snap, previous, &mp)?);
    Ok(out)
}

fn empty_negatives(snap: &Snapshot) -> Result<Vec<Negative>> {
    let root = snap.root_hash();
    let proof = snap.prove_absence(b"absent").context("the empty tree proves absence")?;
    let (flipped, how) = flip(&proof);
    let description = "an absence proof offered as a membership proof (wrong kind)".into();
    Ok(vec![
        reject(
            &root,
            format!("absence proof, {how}"),
            query(Kind::Absence, b"absent", b""),
            flipped,
        )?,
        reject(&root, description, query(Kind::Membership, b"absent", b""), proof)?,
    ])
}

fn range_negatives(snap: &Snapshot, entries: &Entries) -> Result<Vec<Negative>> {
    let (root, n) = (snap.root_hash(), entries.len());
    let (lo, hi) = (
        OwnedBound::Included(entries[n / 4].0.clone()),
        OwnedBound::Included(entries[n / 2].0.clone()),
    );
    let proof = snap.prove_range(lo.as_bound(), hi.as_bound())?;
    let (flipped, how) = flip(&proof);
    let q = Query { lo: lo.clone(), hi: hi.clone(), ..Query::new(Kind::Range) };
    let mut out = vec![reject(&root, format!("range proof, {how}"), q, flipped)?];
    if n >= 3 {
        let q = Query { lo, hi: OwnedBound::Unbounded, ..Query::new(Kind::Range) };
        let description =
            "range proof checked against a wider upper bound (would omit entries)".into();
        out.push(reject(&root, description, q, proof)?);
    }
    Ok(out)
}

fn chunk_negatives(
    snap: &Snapshot,
    previous: Option<&Snapshot>,
    membership: &[u8],
) -> Result<Vec<Negative>> {
    let root = snap.root_hash();
    let chunk = snap.export_chunk(0).context("a non-empty tree has chunk 0")?;
    let at = |index| Query { index, ..Query::new(Kind::Chunk) };
    let (flipped, how) = flip(&chunk);
    let mut out = vec![
        reject(&root, "chunk 0 verified as chunk 1 (wrong index)".into(), at(1), chunk.clone())?,
        reject(&root, format!("chunk 0, {how}"), at(0), flipped)?,
        reject(
            &root,
            "chunk 0 without its last byte (truncated)".into(),
            at(0),
            chunk[..chunk.len() - 1].to_vec(),
        )?,
        reject(
            &root,
            "a membership proof offered as chunk 0 (wrong kind)".into(),
            at(0),
            membership.to_vec(),
        )?,
    ];
    if let Some(old) = previous.and_then(|p| p.export_chunk(0).ok()) {
        let description =
            "chunk 0 of the version before the last operation (another version)".into();
        out.push(reject(&root, description, at(0), old)?);
    }
    Ok(out)
}
