//! Opening a store: the newest checkpoint (or the one before it, see [`recover`]), then the
//! log after it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bavl_core::{Digest, Snapshot, Tree};

use crate::backend::{Backend, WriteFile};
use crate::blame::{check_capacity, check_head, gap, two_histories};
use crate::check::{problem, Problem};
use crate::durable::{self, ChunkKeep};
use crate::error::{IoContext, StoreError};
use crate::meta::{wal_name, Meta};
use crate::paging::Pager;
use crate::wal::{self, Next, SegmentReader};
use crate::{checkpoint, reopen, Options};

pub(crate) use crate::listing::{existing_meta, list, meta_for, Listing};

/// What opening the store found and did.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// The checkpoint the state was loaded from.
    pub checkpoint: Option<u64>,
    /// Versions replayed from the log.
    pub replayed: u64,
    /// Bytes of a record cut short by a crash, discarded from the end of the log.
    pub discarded_bytes: u64,
    /// Temporary files of interrupted writes, deleted (counted, not deleted, read-only).
    pub removed_temporary: u64,
    /// Why the checkpoint before the newest could not rebuild the versions before the
    /// newest (it was damaged, say): the state then comes from the newest alone, and the
    /// older files go at the first commit.
    pub older_checkpoint_skipped: Option<String>,
    /// The same, as the damaged file, offset and what is wrong (for `bavl check`).
    pub older_checkpoint_damage: Option<Problem>,
    /// The version `HEAD` names (every version up to it was committed), if present.
    pub head_file: Option<u64>,
    pub load_checkpoint: Duration,
    pub replay: Duration,
}

pub(crate) struct Opened {
    pub tree: Tree,
    pub head: u64,
    pub head_root: Digest,
    pub versions: BTreeMap<u64, Snapshot>,
    pub wal: Option<Box<dyn WriteFile>>,
    pub wal_first: u64,
    pub log_since_checkpoint: u64,
    pub last_checkpoint: Option<(u64, u64)>,
    pub recovery: Recovery,
    /// The store's own temporary files (left by interrupted writes), to be deleted.
    pub temporary: Vec<String>,
    /// The chunk files the skeletons read name, and the first one opening created: what
    /// a cleanup after opening keeps.
    pub chunk_keep: ChunkKeep,
}

/// Loads the newest checkpoint (or, with `older`, the one before it, when its log still
/// reaches the newest and so rebuilds older retained versions too) and replays the log.
/// With `read_only`, nothing is changed on disk (for `bavl check`) and no log file is
/// opened for writing.
pub(crate) fn recover(
    backend: &dyn Backend,
    opts: &Options,
    read_only: bool,
    mut pager: Option<&mut Pager>,
    older: bool,
) -> Result<Opened, StoreError> {
    let l = list(backend)?;
    let meta = if read_only { existing_meta(backend, &l)? } else { meta_for(backend, &l, opts)? };
    check_capacity(backend, &l, &meta)?;

    // The checkpoint before the newest one is still on disk when the newest was installed
    // while older versions were retained (someone waited for it), or when a crash came
    // between an install and the deletions after it. Its log then rebuilds those versions
    // as well, and must pass through the newest checkpoint's root; if anything about it
    // fails, the newest checkpoint alone is what counts.
    //
    // Not for a paged open (`older` false): rebuilding those versions would replay,
    // loading chunks from disk, the whole log between the two checkpoints (up to twice
    // the log the checkpoint policy allows: 25 s at 3M keys, against 1.1 s from the
    // newest), so it keeps the versions from its newest checkpoint on (design §8.5.1).
    // `check` asks for it, paged, of a store of full checkpoints, to verify that chain.
    let newest = l.checkpoints.last().copied();
    let before = match (l.checkpoints.len(), l.segments.first()) {
        _ if !older => None,
        (n, Some(&first)) if n >= 2 && first <= l.checkpoints[n - 2] + 1 => {
            Some(l.checkpoints[n - 2])
        }
        _ => None,
    };
    // A paged store reads its chunk files in place; a writable one appends what it
    // evicts to a new chunk file, numbered after every file on disk.
    if let Some(p) = pager.as_deref_mut() {
        p.open_chunk_files(&l.chunk_files, !read_only)?;
    }
    let below = pager.as_ref().and_then(|p| p.durable.as_ref()).map_or(u64::MAX, |d| d.1);
    let mut skipped = None;
    let first = before
        .map(|base| rebuild(backend, &l, &meta, opts, Some(base), newest, pager.as_deref_mut()));
    let rebuilt = match first {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            skipped = Some(e);
            rebuild(backend, &l, &meta, opts, newest, newest, pager)?
        }
        None => rebuild(backend, &l, &meta, opts, newest, newest, pager)?,
    };
    let Rebuilt {
        tree,
        head,
        head_root,
        versions,
        tail,
        log_since_checkpoint,
        mut recovery,
        named,
    } = rebuilt;
    let chunk_keep = ChunkKeep { named, below };
    recovery.removed_temporary = l.temporary.len() as u64;
    recovery.older_checkpoint_skipped = skipped.as_ref().map(|e| e.to_string());
    recovery.older_checkpoint_damage = skipped.map(problem);
    let last_checkpoint = match newest {
        Some(v) => {
            let name = l.state_name(v);
            Some((v, backend.file_len(&name).ctx(|| format!("reading {name}"))?))
        }
        None => None,
    };
    // Before anything is changed: `HEAD` names a version known committed.
    recovery.head_file = check_head(backend, &l, head)?;
    // A last segment too short to hold its header (a crash while creating it).
    let tail = match tail {
        Tail::Short(first) => {
            if !read_only {
                let name = wal_name(first);
                backend.remove(&name).ctx(|| format!("deleting {name}"))?;
            }
            None
        }
        Tail::At(first, valid) => Some((first, valid)),
        Tail::None => None,
    };
    let (wal, wal_first) = match read_only {
        true => (None, head + 1),
        false => open_log(backend, tail, head, meta.capacity)?,
    };
    Ok(Opened {
        tree,
        head,
        head_root,
        versions,
        wal,
        wal_first,
        log_since_checkpoint,
        last_checkpoint,
        recovery,
        temporary: l.temporary,
        chunk_keep,
    })
}

/// Opens the log for appending: the last segment at its last complete record, or a new
/// segment for the version after `head`.
fn open_log(
    backend: &dyn Backend,
    tail: Option<(u64, u64)>,
    head: u64,
    capacity: u32,
) -> Result<(Option<Box<dyn WriteFile>>, u64), StoreError> {
    if let Some((first, valid)) = tail {
        let name = wal_name(first);
        let f = backend.open_append(&name, valid).ctx(|| format!("opening {name}"))?;
        return Ok((Some(f), first));
    }
    let first = head + 1;
    let name = wal_name(first);
    let mut f = backend.create(&name).ctx(|| format!("creating {name}"))?;
    f.write_all(&wal::segment_header(first, capacity))
        .and_then(|()| f.sync())
        .ctx(|| format!("writing {name}"))?;
    backend.sync_dir().ctx(|| format!("syncing the directory after creating {name}"))?;
    Ok((Some(f), first))
}

/// What the last segment of the log looked like.
enum Tail {
    None,
    /// Shorter than its header: to be deleted (when writable).
    Short(u64),
    /// (first version, length of its valid records).
    At(u64, u64),
}

/// A full checkpoint is read whole by a paged open (and by `check`) only if this many
/// times its bytes fit the budget: decoded, a chunk's buffers take about 2.3 times the
/// bytes of its entries (`docs/design.md` §8.5), so the bodies stay within the budget.
pub(crate) const WHOLE: u64 = 3;

/// The state rebuilt from a checkpoint and the log after it.
struct Rebuilt {
    tree: Tree,
    head: u64,
    head_root: Digest,
    versions: BTreeMap<u64, Snapshot>,
    tail: Tail,
    log_since_checkpoint: u64,
    recovery: Recovery,
    /// The chunk files named by the skeletons read.
    named: std::collections::BTreeSet<u64>,
}

/// Reads the checkpoint of version `v`: a skeleton (its bodies stay in the chunk files
/// with a pager or when `verify_only`; an unpaged open reads them all, verified), or a
/// full checkpoint (read into a skeleton when a pager's budget is smaller than [`WHOLE`] times the
/// file; `verify_only` then only verifies it). Adds the chunk files a skeleton names to
/// `named`.
fn read_state(
    backend: &dyn Backend,
    l: &Listing,
    v: u64,
    pager: Option<&mut Pager>,
    budget: Option<u64>,
    verify_only: bool,
    named: &mut std::collections::BTreeSet<u64>,
) -> Result<(checkpoint::Header, Tree), StoreError> {
    let name = l.state_name(v);
    if l.skeletons.contains(&v) {
        let (header, mut tree, skel) = durable::load(backend, &name, &l.chunk_files)?;
        if let Some(p) = pager {
            p.note_entries(&skel.files);
        }
        if budget.is_none() && !verify_only {
            durable::load_bodies(backend, &mut tree, &skel, &l.chunk_files, true)?;
        }
        named.extend(skel.named());
        return Ok((header, tree));
    }
    let fits = |b: u64| backend.file_len(&name).is_ok_and(|l| l.saturating_mul(WHOLE) <= b);
    match budget {
        Some(b) if !fits(b) => reopen::read_skeleton(backend, &name, pager),
        _ => checkpoint::read(backend, &name),
    }
}

/// Loads checkpoint `base` (or the empty tree) and replays every version after it, in
/// order, checking each recorded root, keeping the newest `keep_recent` versions. When
/// `newest` is a later checkpoint, the replay must reach its version with its root. Reads
/// only: what to delete is for the caller.
fn rebuild(
    backend: &dyn Backend,
    l: &Listing,
    meta: &Meta,
    opts: &Options,
    base: Option<u64>,
    newest: Option<u64>,
    mut pager: Option<&mut Pager>,
) -> Result<Rebuilt, StoreError> {
    // A paged store reads a skeleton in place, and a full checkpoint into a skeleton (its
    // bodies to the page file), unless the checkpoint fits the budget WHOLE times over: then it
    // reads it whole, as an unpaged store does, and evicts later only if it must.
    let budget = pager.as_ref().map(|p| p.budget);
    let mut named = std::collections::BTreeSet::new();
    let mut recovery = Recovery::default();
    let t = Instant::now();
    // The later checkpoint the replay must pass through: read whole first (so damage to
    // it is found on open like damage to any checkpoint), then dropped.
    let through = match newest.filter(|&n| Some(n) > base) {
        Some(n) => {
            let name = l.state_name(n);
            let (header, _) = read_state(backend, l, n, None, budget, true, &mut named)?;
            if header.version != n || header.capacity != meta.capacity {
                return Err(StoreError::corrupted(&name, 0, "header disagrees with name or meta"));
            }
            Some((n, header.root, name))
        }
        None => None,
    };
    let (mut tree, base) = match base {
        Some(v) => {
            let name = l.state_name(v);
            let p = pager.as_deref_mut();
            let (header, tree) = read_state(backend, l, v, p, budget, false, &mut named)?;
            if header.version != v || header.capacity != meta.capacity {
                return Err(StoreError::corrupted(&name, 0, "header disagrees with name or meta"));
            }
            recovery.checkpoint = Some(v);
            (tree, v)
        }
        None => (Tree::with_capacity(meta.capacity)?, 0),
    };
    recovery.load_checkpoint = t.elapsed();
    let log_from = newest.unwrap_or(0).max(base);

    let t = Instant::now();
    let mut head = base;
    let mut head_root = tree.root_hash();
    let mut versions = BTreeMap::new();
    versions.insert(head, tree.snapshot());
    let keep = opts.keep_recent.max(1);
    let mut log_since_checkpoint = 0;
    let mut tail = Tail::None;
    let mut prev = None;
    for (i, &first) in l.segments.iter().enumerate() {
        let last = i + 1 == l.segments.len();
        let name = wal_name(first);
        let len = backend.file_len(&name).ctx(|| format!("reading {name}"))?;
        let r = backend.open_read(&name).ctx(|| format!("opening {name}"))?;
        let Some(mut seg) = SegmentReader::open(r, &name, len)? else {
            if !last {
                return Err(StoreError::corrupted(&name, 0, "segment shorter than its header"));
            }
            tail = Tail::Short(first);
            recovery.discarded_bytes += len;
            break;
        };
        if seg.first_version != first || seg.capacity != meta.capacity {
            return Err(StoreError::corrupted(&name, 8, "header disagrees with name or meta"));
        }
        if first > head + 1 {
            return Err(gap(&name, first, head, base, prev));
        }
        let mut expect = first;
        loop {
            match seg.next_record()? {
                Next::Record { version, offset, body } => {
                    if version != expect {
                        return Err(StoreError::corrupted(
                            &name,
                            offset,
                            format!("record of version {version} where {expect} was expected"),
                        ));
                    }
                    expect += 1;
                    if version <= head {
                        continue; // Already in the checkpoint.
                    }
                    let first_after_checkpoint =
                        version == base + 1 && recovery.checkpoint.is_some();
                    let applied = replay_record(
                        &mut tree,
                        &body,
                        &name,
                        offset,
                        pager.as_deref_mut(),
                        &mut versions,
                    );
                    let root = match applied {
                        // A delete of a key the checkpoint does not have: as a wrong root.
                        Err(StoreError::Corrupted { what, .. })
                            if first_after_checkpoint && what == wal::ABSENT_DELETE =>
                        {
                            return Err(two_histories(backend, l, base, &name, offset, &through));
                        }
                        r => r?,
                    };
                    let actual = tree.root_hash();
                    if actual != root && first_after_checkpoint {
                        return Err(two_histories(backend, l, base, &name, offset, &through));
                    }
                    if actual != root {
                        return Err(StoreError::corrupted(
                            &name,
                            offset,
                            format!("replaying version {version} does not give its recorded root"),
                        ));
                    }
                    if let Some((n, want, ckpt)) = &through {
                        if version == *n && root != *want {
                            return Err(StoreError::corrupted(
                                ckpt,
                                0,
                                format!("the log gives version {n} another root"),
                            ));
                        }
                    }
                    if version > log_from {
                        log_since_checkpoint += (wal::RECORD_HEADER_LEN + body.len() + 4) as u64;
                    }
                    head = version;
                    head_root = root;
                    if let Some(p) = pager.as_deref_mut() {
                        p.evict(&mut tree)?;
                    }
                    versions.insert(version, tree.snapshot());
                    while versions.len() as u64 > keep {
                        versions.pop_first();
                    }
                    if let Some(p) = pager.as_deref_mut() {
                        p.set_pinned(crate::paging::unpin(&mut versions, version));
                    }
                    recovery.replayed += 1;
                }
                Next::End => break,
                Next::Torn { offset } => {
                    if !last {
                        return Err(StoreError::corrupted(
                            &name,
                            offset,
                            "incomplete record before the last segment",
                        ));
                    }
                    recovery.discarded_bytes += len - offset;
                    break;
                }
            }
        }
        if last {
            tail = Tail::At(first, seg.position());
        }
        prev = Some(name);
    }
    recovery.replay = t.elapsed();
    if let Some((n, _, ckpt)) = &through {
        if head < *n {
            return Err(StoreError::corrupted(
                ckpt,
                0,
                format!("the log ends at {head}, before it"),
            ));
        }
    }
    Ok(Rebuilt { tree, head, head_root, versions, tail, log_since_checkpoint, recovery, named })
}

/// Applies a logged version to `tree`; returns the root its record names. Paged, in
/// slices of [`Pager::slice_ops`] operations: each slice's chunks are prefetched, and
/// before each operation the pager evicts if what was loaded and written since its last
/// pass may have passed the budget ([`Pager::relieve`], which also lets the retained
/// `versions` go of what it evicts). So the bodies held never depend on the size of the
/// version. The state between two slices is never a version: only the final root is
/// compared with the record's, by the caller.
fn replay_record(
    tree: &mut Tree,
    body: &[u8],
    name: &str,
    offset: u64,
    pager: Option<&mut Pager>,
    versions: &mut BTreeMap<u64, Snapshot>,
) -> Result<Digest, StoreError> {
    let Some(p) = pager else { return Ok(wal::apply(tree, body, name, offset)?.0) };
    let (root, _, mut ops) = wal::Ops::parse(body, name, offset)?;
    let mut slice = Vec::new();
    loop {
        slice.clear();
        for op in ops.by_ref().take(p.slice_ops()) {
            slice.push(op?);
        }
        if slice.is_empty() {
            break;
        }
        if slice.len() >= MIN_PREFETCH && tree.is_paged() {
            // The slice's chunks on several threads first (a record of 10,000 operations
            // reloaded one at a time took seconds).
            if !p.prefetch_fits(slice.len()) {
                p.relieve_now(tree, versions)?;
            }
            p.prefetch(tree, slice.iter().map(|op| op.key()))?;
        }
        for &op in &slice {
            p.relieve(tree, versions)?;
            p.note_op(op.bytes());
            ops.apply(tree, op, &mut |t, needs| p.load(t, needs))?;
        }
    }
    ops.finish()?;
    Ok(root)
}

/// A replayed slice shorter than this loads its chunks as its operations meet them.
const MIN_PREFETCH: usize = 16;
