//! The deterministic heart of a group: applying one [`Command`] to a range's bavl tree, and
//! moving a tree as verified chunks.
//!
//! Guarantees: [`RangeState::apply`] depends only on the state and the command, so every
//! replica that applies the same log holds the same tree (the same root). A command that is
//! refused (stale epoch, key outside the fence keys, invalid entry) changes nothing. A batch
//! is validated whole before its first write, so it applies entirely or not at all.

use std::ops::Bound;

use bavl_core::{Restore, Sha256, Tree, MAX_KEY_LEN, MAX_VALUE_LEN};

use crate::types::{BatchOp, ChunkBytes, Command, GroupId, RangeDesc, Response, SnapshotData};

/// Default chunk capacity of range trees (a cluster picks its own at bootstrap; split
/// children inherit their parent's).
pub const CAPACITY: u32 = bavl_core::DEFAULT_CAPACITY;

/// Key prefix of range descriptors in the directory's tree (followed by the start key).
pub const DIR_RANGE_PREFIX: &[u8] = b"r";

/// Errors moving a tree as chunks.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    #[error("snapshot root is not 32 bytes")]
    BadRoot,
    #[error("snapshot carries no range descriptor")]
    NoDescriptor,
    #[error("chunk rejected: {0}")]
    Restore(#[from] bavl_core::RestoreError),
    #[error("an empty snapshot's root differs from the empty tree's")]
    EmptyMismatch,
    #[error("chunk capacity {0} out of bounds")]
    Capacity(u32),
}

/// The replicated state of one group: its descriptor and its tree.
#[derive(Clone)]
pub struct RangeState {
    pub desc: RangeDesc,
    /// The range's entries, always in memory: nothing in this crate pages a chunk out
    /// (`Tree::page_out`), so its reads never meet an absent chunk.
    pub tree: Tree,
    /// The directory's id counter (unused by range groups).
    pub next_group_id: u64,
    /// Range groups: frozen for a merge, and the merges this range decided (see `merge`).
    pub merge: crate::merge::MergeState,
}

/// A group created by a split: its descriptor and initial tree.
pub struct SplitChild {
    pub desc: RangeDesc,
    pub data: SnapshotData,
}

fn check_entry(key: &[u8], value: &[u8]) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || value.len() > MAX_VALUE_LEN {
        return Err(format!(
            "entry out of bounds: key {} bytes, value {} bytes",
            key.len(),
            value.len()
        ));
    }
    Ok(())
}

impl RangeState {
    /// An empty range; `capacity` must lie in bavl's bounds.
    pub fn new(desc: RangeDesc, capacity: u32) -> Result<Self, bavl_core::InputError> {
        let tree = Tree::with_capacity(capacity)?;
        Ok(RangeState { desc, tree, next_group_id: 1, merge: Default::default() })
    }

    pub fn is_directory(&self) -> bool {
        self.desc.id == crate::types::DIRECTORY_GROUP
    }

    /// Applies one command; a split also returns the new right-hand group.
    pub fn apply(&mut self, cmd: &Command) -> (Response, Option<SplitChild>) {
        match cmd {
            // Checked against the replica's sealed versions by the state machine (`sm`).
            Command::Attest { .. } => (Response::Done, None),
            Command::Report { descs } => (self.report(descs), None),
            Command::AllocGroupId if self.is_directory() => {
                self.next_group_id += 1;
                (Response::GroupId(self.next_group_id - 1), None)
            }
            Command::AddNode { node } if self.is_directory() => (self.add_node(node), None),
            Command::Drain { id } if self.is_directory() => (self.drain(*id), None),
            Command::RemoveNode { id } if self.is_directory() => (self.remove_node(*id), None),
            _ if self.is_directory() => {
                (Response::Refused("data command sent to the directory".into()), None)
            }
            Command::AllocGroupId
            | Command::AddNode { .. }
            | Command::Drain { .. }
            | Command::RemoveNode { .. } => {
                (Response::Refused("directory command sent to a range".into()), None)
            }
            Command::PrepareMerge { epoch, target, target_version } => {
                (self.prepare_merge(*epoch, *target, *target_version), None)
            }
            Command::CommitMerge { target, target_version, source } => {
                (self.commit_merge(*target, *target_version, source), None)
            }
            Command::RollbackMerge { epoch } => (self.rollback_merge(*epoch), None),
            Command::Proposals(cmds) => {
                let each = cmds.iter().map(|c| match c {
                    Command::Put { .. } | Command::Delete { .. } | Command::Batch { .. } => {
                        self.apply(c).0
                    }
                    _ => Response::Refused("only client writes are proposed together".into()),
                });
                (Response::Each(each.collect()), None)
            }
            // A range frozen for a merge takes no write and no split (see `merge`).
            Command::Put { .. }
            | Command::Delete { .. }
            | Command::Batch { .. }
            | Command::Split { .. }
                if self.merge.frozen.is_some() =>
            {
                (Response::Stale(self.desc.clone()), None)
            }
            Command::Put { epoch, key, .. }
            | Command::Delete { epoch, key }
            | Command::Split { epoch, key, .. }
                if epoch.version != self.desc.epoch.version || !self.desc.contains(key) =>
            {
                (Response::Stale(self.desc.clone()), None)
            }
            Command::Put { key, value, .. } => match check_entry(key, value) {
                Err(e) => (Response::Refused(e), None),
                Ok(()) => {
                    self.tree.insert(key, value).expect("entry checked");
                    (Response::Done, None)
                }
            },
            Command::Delete { key, .. } => {
                self.tree.remove(key);
                (Response::Done, None)
            }
            Command::Batch { epoch, ops } => (self.batch(epoch.version, ops), None),
            Command::Split { key, new_id, .. } => self.split(key, *new_id),
        }
    }

    fn batch(&mut self, version: u64, ops: &[BatchOp]) -> Response {
        if version != self.desc.epoch.version || ops.iter().any(|op| !self.desc.contains(op.key()))
        {
            return Response::Stale(self.desc.clone());
        }
        for op in ops {
            let value = match op {
                BatchOp::Put(_, v) => v.as_slice(),
                BatchOp::Delete(_) => &[],
            };
            if let Err(e) = check_entry(op.key(), value) {
                return Response::Refused(e);
            }
        }
        for op in ops {
            match op {
                BatchOp::Put(k, v) => {
                    self.tree.insert(k, v).expect("entry checked");
                }
                BatchOp::Delete(k) => {
                    self.tree.remove(k);
                }
            }
        }
        Response::Done
    }

    fn split(&mut self, key: &[u8], new_id: GroupId) -> (Response, Option<SplitChild>) {
        if !self.desc.can_split_at(key) || new_id == self.desc.id {
            return (Response::Refused("split key or new id invalid".into()), None);
        }
        if !self.desc.learners.is_empty() {
            // A move is under way: the child would have to carry the learner too. Refused
            // deterministically (the learners are part of the replicated descriptor).
            return (Response::Refused("a move is in progress".into()), None);
        }
        let moved: Vec<(Vec<u8>, Vec<u8>)> = self
            .tree
            .range(Bound::Included(key), Bound::Unbounded)
            .expect("a range's tree is resident")
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        let mut right_tree = Tree::with_capacity(self.tree.capacity()).expect("capacity of a tree");
        for (k, v) in &moved {
            self.tree.remove(k);
            right_tree.insert(k, v).expect("entry came from a tree");
        }
        self.desc.epoch.version += 1;
        let right = RangeDesc {
            id: new_id,
            start: key.to_vec(),
            end: std::mem::replace(&mut self.desc.end, key.to_vec()),
            epoch: self.desc.epoch,
            replicas: self.desc.replicas.clone(),
            learners: Default::default(),
        };
        let child = RangeState {
            desc: right.clone(),
            tree: right_tree,
            next_group_id: 0,
            merge: self.merge.inherited(),
        };
        let data = child.export();
        (
            Response::Split { left: self.desc.clone(), right: right.clone() },
            Some(SplitChild { desc: right, data }),
        )
    }

    /// Directory: keeps each reported half unless what is held for its start key is newer.
    pub(crate) fn report(&mut self, descs: &[RangeDesc]) -> Response {
        if !self.is_directory() {
            return Response::Refused("directory command sent to a range".into());
        }
        // Decoded once per report (not once per reported descriptor), kept equal to the
        // tree's descriptors as the loop changes them.
        let mut all = self.descriptors();
        for d in descs {
            if d.id == crate::types::DIRECTORY_GROUP {
                // The directory's own descriptor is no range (see `dirroute`).
                continue;
            }
            let key = dir_key(&d.start);
            let held = all.iter().find(|h| h.start == d.start);
            if held.is_some_and(|h| h.id == d.id && !d.epoch.is_newer_than(&h.epoch)) {
                continue;
            }
            // Versions grow along every key's history (a split's halves and a merge's result
            // are newer than what they replace): an overlapping descriptor of another group
            // at a higher version supersedes `d` (a late report of a merged-away range).
            if all
                .iter()
                .any(|h| h.id != d.id && overlap(h, d) && h.epoch.version > d.epoch.version)
            {
                continue;
            }
            // And `d` supersedes the older descriptors it covers beyond its own start key
            // (the right range of a merge).
            let covered = |h: &RangeDesc| {
                h.id != d.id
                    && h.start > d.start
                    && overlap(h, d)
                    && h.epoch.version < d.epoch.version
            };
            for h in all.iter().filter(|h| covered(h)) {
                self.tree.remove(&dir_key(&h.start));
            }
            let value = serde_json::to_vec(d).expect("descriptors serialize");
            self.tree.insert(&key, &value).expect("descriptor fits");
            all.retain(|h| h.start != d.start && !covered(h));
            all.push(d.clone());
        }
        Response::Done
    }

    /// The directory's descriptors, ordered by start key.
    pub fn descriptors(&self) -> Vec<RangeDesc> {
        self.tree
            .range(Bound::Included(DIR_RANGE_PREFIX), Bound::Unbounded)
            .expect("the directory's tree is resident")
            .take_while(|(k, _)| k.starts_with(DIR_RANGE_PREFIX))
            .filter_map(|(_, v)| serde_json::from_slice(v).ok())
            .collect()
    }

    /// Directory: the descriptor held for the range containing `key`.
    pub fn lookup(&self, key: &[u8]) -> Option<RangeDesc> {
        let probe = dir_key(key);
        let below = self.tree.range(Bound::Included(DIR_RANGE_PREFIX), Bound::Included(&probe));
        let (k, v) = below.expect("the directory's tree is resident").last()?;
        let d: RangeDesc = serde_json::from_slice(v).ok()?;
        (k.starts_with(DIR_RANGE_PREFIX) && d.contains(key)).then_some(d)
    }

    /// Directory: records `d` unconditionally (bootstrap).
    pub fn put_descriptor(&mut self, d: &RangeDesc) {
        let value = serde_json::to_vec(d).expect("descriptors serialize");
        self.tree.insert(&dir_key(&d.start), &value).expect("descriptor fits");
    }

    /// The state as chunks under its root.
    pub fn export(&self) -> SnapshotData {
        let mut tree = self.tree.clone();
        let snap = tree.snapshot();
        let chunks = (0..snap.chunk_count())
            .map(|i| ChunkBytes(snap.export_chunk(i).expect("index below count")))
            .collect();
        SnapshotData {
            desc: Some(self.desc.clone()),
            root: snap.root_hash().to_vec(),
            capacity: snap.capacity(),
            chunks,
            next_group_id: self.next_group_id,
            attested: None,
            merge: self.merge.clone(),
        }
    }

    /// Rebuilds the state from chunks, each verified against the snapshot's root.
    pub fn import(data: &SnapshotData) -> Result<Self, ChunkError> {
        let desc = data.desc.clone().ok_or(ChunkError::NoDescriptor)?;
        let root: [u8; 32] = data.root.as_slice().try_into().map_err(|_| ChunkError::BadRoot)?;
        let mut tree = if data.chunks.is_empty() {
            Tree::with_capacity(data.capacity).map_err(|_| ChunkError::Capacity(data.capacity))?
        } else {
            let mut restore = Restore::<Sha256>::new(root);
            for (i, c) in data.chunks.iter().enumerate() {
                restore.add_chunk(i as u64, &c.0)?;
            }
            restore.finish(data.capacity)?
        };
        if tree.root_hash() != root {
            return Err(ChunkError::EmptyMismatch);
        }
        let merge = data.merge.clone();
        Ok(RangeState { desc, tree, next_group_id: data.next_group_id, merge })
    }

    /// A split key at a chunk boundary near the middle of the tree, if the tree has at
    /// least two chunks.
    pub fn split_key(&self) -> Option<Vec<u8>> {
        let mut tree = self.tree.clone();
        let snap = tree.snapshot();
        let count = snap.chunk_count();
        if count < 2 {
            return None;
        }
        let bytes = snap.export_chunk(count / 2).ok()?;
        let chunk = bavl_core::verify_chunk::<Sha256>(&snap.root_hash(), count / 2, &bytes).ok()?;
        let key = chunk.entries().next()?.0.to_vec();
        self.desc.can_split_at(&key).then_some(key)
    }
}

/// Whether two descriptors' key ranges intersect.
pub fn overlap(a: &RangeDesc, b: &RangeDesc) -> bool {
    let below = |x: &RangeDesc, y: &RangeDesc| !x.end.is_empty() && x.end <= y.start;
    !below(a, b) && !below(b, a)
}

pub(crate) fn dir_key(start: &[u8]) -> Vec<u8> {
    [DIR_RANGE_PREFIX, start].concat()
}
