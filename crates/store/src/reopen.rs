//! Opening a paged store without holding its state in memory (`docs/design.md` §8.5.1):
//! a checkpoint is read into a skeleton, its bodies appended to the page file as they are
//! verified, and the log replayed with the chunks each record needs loaded first.
//!
//! Guarantees: every chunk is verified against the checkpoint's root exactly as
//! [`checkpoint::read`] does, and the skeleton rebuilt from them must give that root
//! (`Tree::from_skeleton`); a repeated or missing chunk is `Corrupted`. Memory: the
//! skeleton and one chunk at a time.

use bavl_core::{Sha256, SkeletonEntry, Tree};

use crate::backend::Backend;
use crate::checkpoint::{self, Header};
use crate::paging::Pager;
use crate::StoreError;

/// Reads and verifies checkpoint `name` into a tree whose chunks are all absent, their
/// bodies appended to `pager`'s file; with no pager, only verifies it (the tree returned
/// then names no real location and must be dropped).
pub(crate) fn read_skeleton(
    backend: &dyn Backend,
    name: &str,
    mut pager: Option<&mut Pager>,
) -> Result<(Header, Tree), StoreError> {
    let mut slots: Vec<Option<SkeletonEntry>> = Vec::new();
    let header = checkpoint::read_chunks(backend, name, |header, vc, offset, i| {
        let bad =
            |what: &str| StoreError::corrupted(name, offset, format!("chunk record {i}: {what}"));
        if slots.is_empty() {
            // The count is committed by the root the chunk was verified against.
            if vc.chunk_count != header.chunks {
                return Err(bad("the chunk count differs from the header's"));
            }
            slots = vec![None; vc.chunk_count as usize];
        }
        let index = vc.index as usize;
        if slots[index].is_some() {
            return Err(bad("a chunk repeated"));
        }
        let (mut entry, body) = vc.into_skeleton::<Sha256>();
        entry.loc = match pager.as_deref_mut() {
            Some(p) => p.append(&body)?,
            None => 1,
        };
        slots[index] = Some(entry);
        Ok(())
    })?;
    let corrupt = |what: String| StoreError::corrupted(name, 0, what);
    if slots.iter().any(Option::is_none) || slots.len() as u64 != header.chunks {
        return Err(corrupt("a chunk is missing".into()));
    }
    let tree = Tree::from_skeleton(header.capacity, header.root, slots.into_iter().flatten())
        .map_err(|e| corrupt(format!("rebuilding: {e}")))?;
    if tree.len() != header.keys {
        return Err(corrupt("the header's key count differs from the chunks".into()));
    }
    Ok((header, tree))
}
