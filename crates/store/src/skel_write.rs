//! Writing a paged checkpoint (`docs/design.md` §8.5.1, "A paged checkpoint of version
//! c"): the bodies of a version that are not yet in a completed chunk file are appended to
//! the chunk file the writer handed over (and the live bodies of mostly dead files copied
//! there: compaction), the file synced, then the skeleton written, synced and renamed into
//! place. The formats are in `durable.rs`.
//!
//! The version is held only while it is walked: records copied from disk for a compaction
//! are copied after it is let go, so that the writer's evictions meanwhile free memory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bavl_core::{ChunkRef, Snapshot};

use crate::backend::Backend;
use crate::checkpoint::{CheckpointReport, Header};
use crate::durable::{
    encode_entry, encode_header, END_MAGIC, ENTRY_FIXED, ENTRY_LOC_AT, SKEL_HEADER_LEN,
};
use crate::error::{IoContext, StoreError};
use crate::meta::{skeleton_name, TMP_SUFFIX};
use crate::pace::Pacer;
use crate::paging::{durable_id, durable_key, make_loc, split_loc, PageFile, PageSet};

/// What a paged checkpoint wrote and which chunk files its skeleton names.
pub(crate) struct Written {
    pub report: CheckpointReport,
    pub named: BTreeSet<u64>,
    /// The chunk file it completed (files up to it not named are obsolete).
    pub file: u64,
    /// The chunk files it compacted: their live bodies were copied into `file`.
    pub compacted: BTreeSet<u64>,
    /// Where each copied body was and is now: the writer relocates its chunks.
    pub moved: HashMap<u64, u64>,
}

/// A chunk file is compacted when fewer than this fraction of the entries written to it
/// are still named by the version checkpointed. Each compaction copies less than half of
/// what the file was written with, so the bytes copied stay below the bytes written: a
/// write amplification of 2 at most (the page file's rule, §8.5.1).
pub(crate) const COMPACT_LIVE: f64 = 0.5;

/// The chunk files up to `id` (excluded) that the chunks of `snap` name but that are
/// mostly dead.
fn to_compact(snap: &Snapshot, pages: &PageSet, id: u64) -> BTreeSet<u64> {
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    snap.for_each_chunk(|c| {
        if let Some(f) = c.location().and_then(durable_id).filter(|&f| f < id) {
            *live.entry(f).or_default() += c.len() as u64;
        }
    });
    live.into_iter()
        .filter(|&(f, live)| {
            let written = pages.0.get(&durable_key(f)).map_or(0, |pf| pf.entries());
            (live as f64) < COMPACT_LIVE * written as f64
        })
        .map(|(f, _)| f)
        .collect()
}

/// Writes the checkpoint of `version` of a paged store: every body of `snap` without a
/// location in a chunk file numbered up to `id` is appended to `file` (chunk file `id`,
/// handed over by the writer, which appends to the next one meanwhile), and so is every
/// body in a mostly dead file (compaction, off the writer's thread); `file` is synced,
/// then the skeleton is written to a temporary file, synced, and renamed into place
/// once `pacer` allows it. `Ok(None)` if `stop` became true.
pub(crate) fn write_checkpoint(
    backend: &dyn Backend,
    version: u64,
    snap: Snapshot,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
    pages: &PageSet,
    (id, file): (u64, Arc<PageFile>),
) -> Result<Option<Written>, StoreError> {
    let start = Instant::now();
    let root = snap.root_hash();
    let count = snap.chunk_count();
    let header =
        Header { version, root, capacity: snap.capacity(), keys: snap.len(), chunks: count };
    let compacted = to_compact(&snap, pages, id);
    let mut w = Walk {
        id,
        file: &file,
        compacted: &compacted,
        moved: HashMap::new(),
        entries: Vec::with_capacity(count as usize * (ENTRY_FIXED + 24)),
        named: BTreeSet::new(),
        deferred: Vec::new(),
        body: Vec::new(),
    };
    // The chunks are visited in place, never collected: a list of them (32 bytes each,
    // 17 MB at 30M keys) added to the memory of every block the walk overlapped.
    let (mut i, mut end) = (0u64, None);
    snap.for_each_chunk(|c| {
        if end.is_some() {
            return;
        }
        if i % 256 == 0 && stop.load(Ordering::Relaxed) {
            end = Some(Ok(()));
            return;
        }
        i += 1;
        if let Err(e) = w.visit(&c) {
            end = Some(Err(e));
        }
    });
    match end {
        Some(Ok(())) => return Ok(None),
        Some(Err(e)) => return Err(e),
        None => {}
    }
    // The version is let go before the copies from disk (a compaction can take seconds):
    // holding it meanwhile kept alive every body the writer evicted since it was taken
    // (about 100 MB at 10M keys under a 256 MiB budget; design §8.5.1).
    drop(snap);
    let Walk { mut moved, mut entries, named, deferred, .. } = w;
    for (at, old) in deferred {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let (key, off) = split_loc(old);
        let f = pages
            .0
            .get(&key)
            .ok_or_else(|| StoreError::corrupted("the page files", off, "a page of no file"))?;
        let loc = make_loc(durable_key(id), file.append(&f.read_raw(off)?)?);
        moved.insert(old, loc);
        entries[at..at + 8].copy_from_slice(&loc.to_le_bytes());
    }
    file.seal()?;
    // The chunk file table: the entries written to each file named.
    entries.extend_from_slice(&(named.len() as u32).to_le_bytes());
    for &f in &named {
        let written = pages.0.get(&durable_key(f)).map_or(0, |pf| pf.entries());
        let written = if f == id { file.entries() } else { written };
        entries.extend_from_slice(&f.to_le_bytes());
        entries.extend_from_slice(&written.to_le_bytes());
    }
    let encoding = start.elapsed();
    let name = skeleton_name(version);
    let tmp = format!("{name}{TMP_SUFFIX}");
    let mut out = backend.create(&tmp).ctx(|| format!("creating {tmp}"))?;
    let mut trailer = END_MAGIC.to_vec();
    trailer.extend_from_slice(&header.chunks.to_le_bytes());
    trailer.extend_from_slice(&crc32fast::hash(&entries).to_le_bytes());
    let crc = crc32fast::hash(&trailer);
    trailer.extend_from_slice(&crc.to_le_bytes());
    let skel_bytes = (SKEL_HEADER_LEN + entries.len() + trailer.len()) as u64;
    out.write_all(&encode_header(&header))
        .and_then(|()| out.write_all(&entries))
        .and_then(|()| out.write_all(&trailer))
        .ctx(|| format!("writing {tmp}"))?;
    out.sync().ctx(|| format!("syncing {tmp}"))?;
    drop(out);
    if !crate::checkpoint::install(backend, &tmp, &name, version, stop, pacer)? {
        return Ok(None);
    }
    let report = CheckpointReport {
        version,
        root,
        chunks: header.chunks,
        bytes: skel_bytes + file.len(),
        elapsed: start.elapsed(),
        encoding,
    };
    Ok(Some(Written { report, named, file: id, compacted, moved }))
}

/// A paged checkpoint's walk over its version: what it has written and named so far.
struct Walk<'a> {
    /// The chunk file appended to.
    id: u64,
    file: &'a PageFile,
    compacted: &'a BTreeSet<u64>,
    moved: HashMap<u64, u64>,
    /// The skeleton's entries, encoded.
    entries: Vec<u8>,
    named: BTreeSet<u64>,
    /// Absent chunks in a file being compacted: where their skeleton entry is and their
    /// old location. They are copied after the walk, once the version is let go.
    deferred: Vec<(usize, u64)>,
    body: Vec<u8>,
}

impl Walk<'_> {
    /// Appends `c`'s body unless a completed chunk file holds it, and its entry.
    fn visit(&mut self, c: &ChunkRef<'_>) -> Result<(), StoreError> {
        let old = c.location();
        let durable = old.filter(|&l| {
            durable_id(l).is_some_and(|f| f <= self.id && !self.compacted.contains(&f))
        });
        let loc = match durable {
            Some(loc) => loc,
            None => {
                self.body.clear();
                if c.encode_body(&mut self.body) {
                    let loc = make_loc(durable_key(self.id), self.file.append(&self.body)?);
                    match old {
                        Some(old) if old != loc => drop(self.moved.insert(old, loc)),
                        _ => drop(c.set_location(loc)),
                    }
                    loc
                } else {
                    // Absent: its record is copied below, the entry's location patched.
                    self.deferred.push((self.entries.len() + ENTRY_LOC_AT, old.unwrap_or(0)));
                    make_loc(durable_key(self.id), 0)
                }
            }
        };
        self.named.insert(durable_id(loc).expect("durable"));
        encode_entry(&mut self.entries, &c.skeleton_entry(loc));
        Ok(())
    }
}
