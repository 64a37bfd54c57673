//! The paged store's runtime side (`docs/design.md` §8.5.1): files of chunk bodies,
//! loading what an operation needs before it is applied, and evicting to a budget.
//!
//! Guarantees:
//! - a body read back is decoded defensively and verified against the page's count,
//!   first key and hash by the core; any difference is [`StoreError::Corrupted`] naming
//!   the file and the offset, and the operation changes nothing;
//! - eviction changes no hash and no version: only where a body lives;
//! - a writable store evicts into its chunk files (`chunks-<n>.bavl`): the writer appends
//!   to the newest, a checkpoint completes and syncs it and names its bodies in a
//!   skeleton ([`crate::durable`]); nothing is durable before that, so a crash leaves at
//!   most unnamed chunk files, which opening deletes;
//! - a read-only open evicts into a scratch file with no name (`O_TMPFILE` on Linux;
//!   elsewhere created and unlinked at once) that vanishes with the process.
//!
//! Record: `u32 len | body`. A location is `key << 40 | (offset + 1)` (never 0), `key`
//! naming a chunk file ([`DURABLE_KEY`] set) or a scratch generation. Compaction
//! (`compact.rs`) copies live bodies into a new file and retires the old one once no
//! retained version can name it.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use bavl_core::{InputError, PageRef, Snapshot, Tree};

use crate::backend::Backend;
pub(crate) use crate::pagefile::{
    durable_id, durable_key, make_loc, split_loc, PageFile, PageSet, DURABLE_KEY,
};
use crate::slack::SlackGauge;
use crate::{Store, StoreError};

/// A key and its value, copied out of the store.
pub type OwnedEntry = (Vec<u8>, Vec<u8>);

/// Makes absent, in every version of `versions` but `head`, the bodies that are on disk
/// and not bodies of `head` (`Store::unpin_retained`); returns the heap bytes they still
/// hold alone (bodies never written). Opening calls it as it replays, so that the
/// versions it rebuilds do not hold every body the replay loaded either.
pub(crate) fn unpin(versions: &mut std::collections::BTreeMap<u64, Snapshot>, head: u64) -> u64 {
    let Some(head_snap) = versions.get(&head).cloned() else { return 0 };
    unpin_beside(versions.range_mut(..head).rev().map(|(_, s)| s), head_snap)
}

/// [`unpin`] of `older` (newest first) beside `head`, which need not be one of them (the
/// working tree within a block, [`Pager::relieve`]).
pub(crate) fn unpin_beside<'a>(
    older: impl Iterator<Item = &'a mut Snapshot>,
    head_snap: Snapshot,
) -> u64 {
    // Whether the head holds a body: one descent by its first key, asked only of the
    // bodies the descents below meet where a version differs from the one after it.
    let live = |id: usize, first: &[u8]| head_snap.holds_body(id, first);
    let (mut held, mut pinned) = (std::collections::HashSet::new(), 0u64);
    // Newest first, each beside the one after it, already unpinned: a version differs
    // from it by one commit's chunks, where beside the head the oldest differed by all
    // the commits since (25 ms a version at 30M keys). What it shares with the next one
    // (in the end the head's nodes wherever it equals the head) it takes; a body the
    // next one no longer holds the head cannot hold again (a body read back is a new
    // one), and those it shares were counted with the next one.
    let mut next = head_snap.clone();
    for snap in older {
        // One descent beside it, skipping what they share: bodies on disk that the head
        // let go made absent, those never written counted (design §8.5.1).
        *snap = snap.unpinned_beside(Some(&next), live, |id, bytes| {
            if held.insert(id) {
                pinned += bytes as u64 + 16;
            }
        });
        next = snap.clone();
    }
    pinned
}

/// Reads a paged store's absent chunks back into its versions ([`Store::page_loader`]).
#[derive(Clone)]
pub struct PageLoader(PageSet);

impl PageLoader {
    /// `snap` with the chunks of `pages` resident, each read and verified: a new
    /// snapshot, `snap` unchanged (as [`Store::load_pages`]).
    pub fn load(&self, snap: &Snapshot, pages: &[PageRef]) -> Result<Snapshot, StoreError> {
        self.0.materialize(snap, pages)
    }
}

/// Counters of the pager, in [`crate::StoreStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PagingStats {
    /// Bodies read back from the page file.
    pub loads: u64,
    /// Chunks evicted from the working tree.
    pub evictions: u64,
    /// Bytes appended to the page file.
    pub spilled_bytes: u64,
    /// Heap bytes of the working tree's resident bodies after the last eviction pass.
    pub resident_bytes: u64,
    /// Heap bytes of the skeleton (inner nodes and pages) at the last eviction pass.
    pub skeleton_bytes: u64,
    /// Records appended to the page files.
    pub records: u64,
    /// Compactions: of the page file (live bodies copied to a new file), or of chunk files
    /// by checkpoints (one per file compacted).
    pub compactions: u64,
    /// Bytes of the page file being appended to.
    pub file_bytes: u64,
    /// What the budget was divided by at the last eviction, in thousandths: the memory
    /// the process gained per byte of body and skeleton counted, smoothed (1000 when
    /// [`crate::Options::cache_counts_slack`] is off, or until the bodies first fill half
    /// the budget; kept, not re-sampled, while they fill less; `crate::slack`).
    pub slack_permille: u64,
    /// Heap bytes of bodies that only retained versions hold (never written, so they
    /// cannot be made absent there), after the last commit.
    pub pinned_bytes: u64,
    /// The most heap bytes of resident bodies the working tree held when an eviction pass
    /// began (after a commit, or within a block or a replayed version when the bodies
    /// loaded and written since the last pass passed the budget): the peak of the cache.
    pub peak_resident_bytes: u64,
    /// Eviction passes run within a block or a replayed version (`docs/design.md` §8.5.1),
    /// not after a commit.
    pub mid_evictions: u64,
}

/// Loads and evicts the working tree's chunk bodies against a budget.
pub(crate) struct Pager {
    pub(crate) files: PageSet,
    /// The key of the file appended to.
    pub(crate) gen: u32,
    /// With durable chunk files: the store's backend and the number of the chunk file
    /// appended to (`docs/design.md` §8.5.1).
    pub(crate) durable: Option<(Arc<dyn Backend>, u64)>,
    /// The store's backend, once attached: its chunk files are read in place.
    pub(crate) backend: Option<Arc<dyn Backend>>,
    /// Bodies a checkpoint's compaction copied (old location to new), not yet relocated
    /// in the working tree.
    pub(crate) moved: std::collections::HashMap<u64, u64>,
    pub(crate) dir: std::path::PathBuf,
    /// Retired generations and the version from which no version names them.
    pub(crate) retiring: Vec<(u64, u32)>,
    pub(crate) budget: u64,
    /// The smallest file [`Pager::maybe_compact`] compacts.
    pub(crate) min_compact: u64,
    /// Heap bytes of the bodies only retained versions hold (none of them on disk yet),
    /// as the last commit found them ([`Store::unpin_retained`]).
    pub(crate) pinned: u64,
    /// Heap bytes of the bodies loaded since the last eviction (a block's loads).
    pub(crate) loaded_bytes: u64,
    /// What the working tree's resident bodies may have grown by since the last eviction
    /// pass: bodies loaded, and twice the bytes of every operation applied (an insert
    /// may grow a chunk's buffers by doubling them, or split it).
    pub(crate) grown: u64,
    /// Heap bytes of bodies the loads counted so far (with `stats.loads`: the mean body).
    pub(crate) loaded_total: u64,
    /// The clock hand: the next chunk index the eviction sweep looks at.
    pub(crate) hand: u64,
    /// The threads parallel loads read on (`readpool`), started by the first.
    pub(crate) pool: Option<crate::readpool::ReadPool>,
    /// The allocator's slack, counted against the budget (`crate::slack`).
    pub(crate) slack: SlackGauge,
    pub(crate) buf: Vec<u8>,
    pub(crate) stats: PagingStats,
}

impl Pager {
    pub(crate) fn new(dir: &Path, budget: u64) -> Result<Pager, StoreError> {
        let mut files = PageSet::default();
        files.0.insert(1, PageFile::create(dir)?);
        let (gen, dir, retiring, buf) = (1, dir.to_path_buf(), Vec::new(), Vec::new());
        let stats = PagingStats::default();
        let min_compact = crate::compact::MIN_FILE;
        let (pinned, loaded_bytes, grown, loaded_total) = (0, 0, 0, 0);
        Ok(Pager {
            files,
            gen,
            durable: None,
            backend: None,
            moved: Default::default(),
            dir,
            retiring,
            budget,
            min_compact,
            pinned,
            loaded_bytes,
            grown,
            loaded_total,
            hand: 0,
            pool: None,
            slack: SlackGauge::new(false),
            buf,
            stats,
        })
    }

    /// The pager [`crate::Options::cache_bytes`] asks for, if any.
    pub(crate) fn for_options(opts: &crate::Options) -> Result<Option<Pager>, StoreError> {
        let Some(budget) = opts.cache_bytes else { return Ok(None) };
        let dir = opts.page_dir.clone().unwrap_or_else(std::env::temp_dir);
        let mut pager = Pager::new(&dir, budget)?;
        pager.slack = SlackGauge::new(opts.cache_counts_slack);
        Ok(Some(pager))
    }

    /// Appends from now on to chunk files of the store, the first numbered `id` (created
    /// at its first append: an open that fails, or evicts nothing, writes no file).
    pub(crate) fn use_chunk_files(&mut self, backend: &Arc<dyn Backend>, id: u64) {
        self.gen = durable_key(id);
        self.durable = Some((backend.clone(), id));
    }

    /// The file appended to, created if it is a chunk file not created yet.
    fn appending(&mut self) -> Result<Arc<PageFile>, StoreError> {
        if let (None, Some((backend, id))) = (self.files.0.get(&self.gen), &self.durable) {
            // A location names its chunk file by 23 bits of its number: beyond them two
            // files would share a key. Refused, never aliased (design §8.5.1).
            if *id >= DURABLE_KEY as u64 {
                return Err(StoreError::Exhausted(format!(
                    "chunk file number {id} is past the {} a location can name",
                    DURABLE_KEY - 1
                )));
            }
            let f = PageFile::create_durable(backend, *id)?;
            self.files.0.insert(self.gen, f);
        }
        Ok(self.files.0[&self.gen].clone())
    }

    /// Registers the store's chunk files `files` for reading, and with `writable` starts
    /// a new one, numbered after them, for what is evicted from now on. Needs the
    /// backend attached (a pager without one keeps its scratch file: `bavl check`).
    pub(crate) fn open_chunk_files(
        &mut self,
        files: &crate::durable::ChunkFiles,
        writable: bool,
    ) -> Result<(), StoreError> {
        let Some(backend) = self.backend.clone() else { return Ok(()) };
        for (&id, &len) in files {
            self.add_chunk_file(&backend, id, len);
        }
        if writable {
            let next = files.keys().next_back().map_or(1, |id| id + 1);
            self.use_chunk_files(&backend, next);
        }
        Ok(())
    }

    /// Records how many entries were written to each chunk file (a skeleton's table).
    pub(crate) fn note_entries(&self, files: &std::collections::BTreeMap<u64, u64>) {
        for (&id, &n) in files {
            if let Some(f) = self.files.0.get(&durable_key(id)) {
                f.set_entries(n);
            }
        }
    }

    /// Gives the chunks of the working tree (equal to `version`, just taken) that a
    /// compaction copied their new locations: absent ones are relocated, resident ones
    /// get the new location. Versions taken before keep naming the old files, which the
    /// checkpoint after next deletes once they are pruned.
    pub(crate) fn relocate(&mut self, tree: &mut Tree, version: &Snapshot) {
        if self.moved.is_empty() {
            return;
        }
        let mut found = Vec::new();
        version.for_each_chunk(|c| {
            if let Some(&new) = c.location().and_then(|l| self.moved.get(&l)) {
                found.push((c.index, new));
            }
        });
        for (i, new) in found {
            if tree.is_resident(i) {
                tree.chunk_ref(i).map(|c| c.set_location(new));
            } else {
                tree.relocate(i, new);
            }
        }
        self.moved.clear();
    }

    /// Makes the existing chunk file `id` (of `len` bytes) readable.
    pub(crate) fn add_chunk_file(&mut self, backend: &Arc<dyn Backend>, id: u64, len: u64) {
        self.files.0.insert(durable_key(id), PageFile::open_durable(backend, id, len));
    }

    /// Starts the next chunk file and returns the one appended to until now, with its
    /// number (a checkpoint completes and seals it).
    pub(crate) fn rotate(&mut self) -> Result<Option<(u64, Arc<PageFile>)>, StoreError> {
        let Some((backend, id)) = self.durable.clone() else { return Ok(None) };
        let old = self.appending()?;
        self.use_chunk_files(&backend, id + 1);
        Ok(Some((id, old)))
    }

    /// The scratch page file appended to (not with durable chunk files).
    pub(crate) fn current(&self) -> &Arc<PageFile> {
        &self.files.0[&self.gen]
    }

    /// Appends a body to the current file; returns its location.
    pub(crate) fn append(&mut self, body: &[u8]) -> Result<u64, StoreError> {
        let at = self.appending()?.append(body)?;
        self.stats.spilled_bytes += body.len() as u64 + 4;
        self.stats.records += 1;
        self.stats.file_bytes = at + body.len() as u64 + 4;
        Ok(make_loc(self.gen, at))
    }

    /// Makes the chunks of `needs` resident in `tree`.
    pub(crate) fn load(&mut self, tree: &mut Tree, needs: Vec<PageRef>) -> Result<(), StoreError> {
        for p in needs {
            let body = self.files.read(&p)?;
            tree.page_in(p.index, body).map_err(|e| {
                StoreError::corrupted(&self.files.name_of(p.loc), split_loc(p.loc).1, e.to_string())
            })?;
            self.loaded(tree, p.index);
        }
        Ok(())
    }

    /// Records what retained versions hold alone ([`unpin`]), for the next eviction.
    pub(crate) fn set_pinned(&mut self, bytes: u64) {
        self.pinned = bytes;
        self.stats.pinned_bytes = bytes;
    }

    /// Counts chunk `index`, just made resident in `tree`, as loaded since the last
    /// eviction.
    pub(crate) fn loaded(&mut self, tree: &Tree, index: u64) {
        self.stats.loads += 1;
        let bytes = tree.chunk_ref(index).map_or(0, |c| c.heap_bytes() as u64 + 16);
        self.loaded_bytes += bytes;
        self.grown += bytes;
        self.loaded_total += bytes;
    }
}

impl Store {
    /// After commit `version` is durable and hashed, before its snapshot is taken (so the
    /// version shares pages, not bodies): evicts to the budget and compacts the page file
    /// if due. A failure (of the page file) poisons the store: the version is durable,
    /// its memory is no longer bounded.
    pub(crate) fn page_out(&mut self, version: u64) -> Result<(), StoreError> {
        let Some(p) = &mut self.pager else { return Ok(()) };
        let r = p.evict(&mut self.tree).and_then(|()| p.maybe_compact(&mut self.tree, version));
        if let Err(e) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }

    /// After commit `head` is retained: makes absent, in every older retained version,
    /// the bodies that are on disk and no longer in the working tree (evicted, or replaced
    /// by a copy), so that old versions do not hold in memory what the budget let go
    /// (`docs/design.md` §8.5.1); they read those chunks back like the working tree. Then
    /// counts what they still hold alone (bodies never written) for the next eviction.
    pub(crate) fn unpin_retained(&mut self) {
        let Some(p) = &mut self.pager else { return };
        p.set_pinned(unpin(&mut self.versions, self.head));
    }

    /// Reads the working state (committed versions plus uncommitted changes), loading
    /// the key's chunk first if it is paged out: a body that fails its verification is
    /// [`StoreError::Corrupted`], never an answer, and a key is never reported absent
    /// because its chunk is not in memory. Without paging it only reads.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, StoreError> {
        if let (Some(p), Err(_)) = (&mut self.pager, self.tree.try_get(key)) {
            // Reads are bounded as writes are: a read-only store never commits.
            p.relieve(&mut self.tree, &mut self.versions)?;
            if let Err(page) = self.tree.try_get(key) {
                p.load(&mut self.tree, vec![page])?;
            }
        }
        Ok(self.tree.get(key).map_err(InputError::from)?)
    }

    /// The first entry of the working state with a key within `lo` (a seek), loading
    /// the chunks it needs when paging is on; owned, so callers may go on writing.
    pub fn seek(&mut self, lo: Bound<&[u8]>) -> Result<Option<OwnedEntry>, StoreError> {
        loop {
            let missing = match self.tree.try_first_from(lo) {
                Ok(e) => return Ok(e.map(|(k, v)| (k.to_vec(), v.to_vec()))),
                Err(page) => page,
            };
            let Some(p) = &mut self.pager else {
                return Err(InputError::NotResident { index: missing.index }.into());
            };
            p.relieve(&mut self.tree, &mut self.versions)?;
            if let Err(page) = self.tree.try_first_from(lo) {
                p.load(&mut self.tree, vec![page])?;
            }
        }
    }

    /// `snap` with every absent chunk that `needs` names loaded, asked again after each
    /// load until it names none: `needs` is a read's own question, such as
    /// `|s| s.get(key).err()` or `|s| s.prove_absence(key).err()?.page().cloned()`.
    /// Then that read on the returned snapshot answers from memory. Without paging (or
    /// when nothing is absent) a clone of `snap`.
    pub fn resident_for(
        &self,
        snap: &Snapshot,
        mut needs: impl FnMut(&Snapshot) -> Option<PageRef>,
    ) -> Result<Snapshot, StoreError> {
        let mut snap = snap.clone();
        while let Some(page) = needs(&snap) {
            snap = self.load_pages(&snap, &[page])?;
        }
        Ok(snap)
    }

    /// A reader of this store's chunk files that other threads may keep (a server's
    /// catalog, an export): it reads absent chunks of this store's versions back, each
    /// verified, without the store. `None` without paging. A file deleted since (a writer
    /// in another process compacted it) makes its loads fail, never answer wrongly.
    pub fn page_loader(&self) -> Option<PageLoader> {
        self.pager.as_ref().map(|p| PageLoader(p.files.clone()))
    }

    /// `snap` (a retained version) with the chunks of `pages` read back from the page
    /// file and verified: a new snapshot, `snap` itself unchanged. Callers ask a version
    /// which absent chunks a read, proof or export needs (`Snapshot::try_get`,
    /// `absent_for_range`, `absent_chunk`) and pass them here.
    pub fn load_pages(&self, snap: &Snapshot, pages: &[PageRef]) -> Result<Snapshot, StoreError> {
        match &self.pager {
            Some(p) => p.files.materialize(snap, pages),
            None if pages.is_empty() => Ok(snap.clone()),
            None => Err(StoreError::InvalidOption("paging is off: no chunk is absent".into())),
        }
    }
}

#[cfg(test)]
#[path = "paging_tests.rs"]
mod tests;
