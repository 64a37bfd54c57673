//! Compaction of the page file (`docs/design.md` §8.5.1).
//!
//! The page file only grows: every eviction of a chunk changed since it was last written
//! appends its body, and the older copy is dead once no version names it. When the file
//! holds more than [`SLACK`] times what the working tree's pages could name (and at least
//! [`MIN_FILE`]), the live bodies are copied into a file of a new generation: every absent
//! chunk of the working tree is relocated there, and every resident chunk that has a
//! location gets a new one (its body written from memory), so that no version taken from
//! now on names the old file. Retained versions taken before may; the old file is kept
//! until the first of them is pruned (and a running checkpoint holds its own reference).
//! Guarantee: a location any retained version or running checkpoint holds always names
//! an open file.

use bavl_core::Tree;

use crate::paging::{durable_id, make_loc, split_loc, PageFile, Pager};
use crate::StoreError;

/// The file may grow to this many times the bytes of the records the tree can name.
pub(crate) const SLACK: u64 = 2;
/// No compaction below this file size.
pub(crate) const MIN_FILE: u64 = 64 << 20;

impl Pager {
    /// Compacts if the current file is mostly dead; `version` is the version about to be
    /// taken of `tree` (the first that names only the new file).
    pub(crate) fn maybe_compact(
        &mut self,
        tree: &mut Tree,
        version: u64,
    ) -> Result<(), StoreError> {
        if self.durable.is_some() {
            return self.maybe_compact_durable(tree, version);
        }
        let size = self.current().len();
        if size < self.min_compact {
            return Ok(());
        }
        // Every record: 4 + body bytes; estimate the live ones from the chunk count and
        // the mean record written so far.
        let records = self.stats.records.max(1);
        let mean = self.stats.spilled_bytes / records;
        let live = tree.chunk_count() * mean;
        if size <= SLACK * live {
            return Ok(());
        }
        let next = ((self.gen + 1) % crate::paging::DURABLE_KEY).max(1);
        if self.files.0.contains_key(&next) {
            return Ok(()); // that generation's file is still needed: try again later
        }
        self.files.0.insert(next, PageFile::create(&self.dir)?);
        let old = std::mem::replace(&mut self.gen, next);
        self.relocate_all(tree, None)?;
        self.retiring.push((version, old));
        self.stats.compactions += 1;
        Ok(())
    }

    /// The chunk file the writer appends to, between checkpoints: once it is mostly dead
    /// (the rule above), the working tree's bodies in it are copied to the next chunk
    /// file, on the writer's thread, and it is deleted when the versions taken before
    /// are pruned. Only a file no checkpoint was handed is compacted here (no skeleton
    /// names it); the files checkpoints completed are compacted by checkpoints.
    fn maybe_compact_durable(&mut self, tree: &mut Tree, version: u64) -> Result<(), StoreError> {
        let Some((backend, id)) = self.durable.clone() else { return Ok(()) };
        let Some(size) = self.files.0.get(&self.gen).map(|f| f.len()) else { return Ok(()) };
        let records = self.stats.records.max(1);
        let live = tree.chunk_count() * (self.stats.spilled_bytes / records);
        if size < self.min_compact || size <= SLACK * live {
            return Ok(());
        }
        let old = self.gen;
        self.use_chunk_files(&backend, id + 1);
        self.relocate_all(tree, Some(old))?;
        self.retiring.push((version, old));
        self.stats.compactions += 1;
        Ok(())
    }

    /// Copies the bodies of the working tree located in file `only` (every file but the
    /// current one if `None`) to the current file.
    fn relocate_all(&mut self, tree: &mut Tree, only: Option<u32>) -> Result<(), StoreError> {
        for i in 0..tree.chunk_count() {
            let Some(c) = tree.chunk_ref(i) else { break };
            let Some(loc) = c.location() else { continue };
            let key = split_loc(loc).0;
            if key == self.gen || only.is_some_and(|o| o != key) {
                continue;
            }
            if tree.is_resident(i) {
                let mut buf = Vec::new();
                c.encode_body(&mut buf);
                c.set_location(self.append(&buf)?);
            } else {
                let (gen, at) = split_loc(loc);
                let body = match self.files.0.get(&gen) {
                    Some(f) => f.read_raw(at)?,
                    None => {
                        return Err(StoreError::corrupted(
                            "the page files",
                            at,
                            "a page of no file",
                        ))
                    }
                };
                let loc = self.append(&body)?;
                tree.relocate(i, loc);
            }
        }
        Ok(())
    }

    /// Drops the retired files no retained version can name any more (every version
    /// older than `oldest_retained` is pruned).
    /// A retired chunk file is deleted from the disk too (best effort: what fails to go
    /// is an orphan that the next checkpoint or writable open deletes).
    pub(crate) fn retire(&mut self, oldest_retained: u64) {
        let files = &mut self.files.0;
        let backend = self.durable.as_ref().map(|d| d.0.clone());
        self.retiring.retain(|&(from, gen)| {
            let gone = oldest_retained >= from;
            if gone {
                files.remove(&gen);
                if let (Some(b), Some(id)) = (&backend, durable_id(make_loc(gen, 0))) {
                    let _ = b.remove(&crate::meta::chunk_file_name(id));
                }
            }
            !gone
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// 60 versions of 100 random writes on a tree paged with a budget of 0 and a tiny
    /// compaction threshold, the last three versions retained (older ones retired);
    /// `after` is called after each version. Then every retained version must read back
    /// whole, from the page files, as the model had it.
    fn drive(mut pager: Pager, seed: u64, mut after: impl FnMut(&Pager)) {
        let mut tree = Tree::with_capacity(8).unwrap();
        pager.min_compact = 16 << 10;
        let mut model = BTreeMap::new();
        let mut retained = std::collections::VecDeque::new();
        let mut x = seed;
        for version in 1..=60u64 {
            for _ in 0..100 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let key = format!("k{:04}", (x >> 33) % 800).into_bytes();
                let value = x.to_le_bytes().to_vec();
                let needs = tree.absent_for_insert(&key);
                pager.load(&mut tree, needs).unwrap();
                tree.insert(&key, &value).unwrap();
                model.insert(key, value);
            }
            tree.root_hash();
            pager.evict(&mut tree).unwrap();
            pager.maybe_compact(&mut tree, version).unwrap();
            retained.push_back((version, tree.snapshot(), model.clone()));
            if retained.len() > 3 {
                retained.pop_front();
            }
            pager.retire(retained[0].0);
            after(&pager);
        }
        assert!(pager.stats.compactions >= 3, "compacted: {:?}", pager.stats);
        for (_, snap, m) in &retained {
            let pages: Vec<_> =
                (0..snap.chunk_count()).filter_map(|i| snap.absent_chunk(i)).collect();
            let full = pager.files.materialize(snap, &pages).unwrap();
            let got: BTreeMap<Vec<u8>, Vec<u8>> =
                full.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            assert_eq!(&got, m);
        }
    }

    /// A small budget and a tiny compaction threshold: files are compacted again and
    /// again, old generations retired once the versions naming them are gone, and every
    /// value (of the working tree and of the retained versions) reads back.
    #[test]
    fn compaction_keeps_every_version_readable_and_retires_old_files() {
        let pager = Pager::new(&std::env::temp_dir(), 0).unwrap();
        drive(pager, 1, |p| {
            assert!(p.files.0.len() <= 3, "old files are retired: {}", p.files.0.len());
        });
    }

    /// The same with durable chunk files (a writable store between checkpoints): the
    /// writer's file is compacted into the next one, and a retired file is deleted from
    /// the backend once no retained version names it.
    #[test]
    fn the_writers_chunk_file_is_compacted_and_deleted() {
        let mem = crate::MemBackend::new();
        let backend: std::sync::Arc<dyn crate::Backend> = std::sync::Arc::new(mem.clone());
        let mut pager = Pager::new(&std::env::temp_dir(), 0).unwrap();
        pager.use_chunk_files(&backend, 1);
        drive(pager, 7, |_| {
            let on_disk = crate::Backend::list(&mem).unwrap().len();
            assert!(on_disk <= 4, "retired chunk files are deleted: {on_disk}");
        });
    }
}
