//! Retained versions of a group's state: what a snapshot is built from and what a replica
//! serves chunks of to a learner fetching a snapshot (see `fetch`).
//!
//! A replica **seals** a version after applying every entry whose log index is a multiple
//! of its seal period: it takes a copy-on-write `bavl_core::Snapshot` of its tree (O(1) plus
//! hashing the paths changed since the last seal) with the descriptor, the membership and
//! the root. Because the state at an index is a function of the committed log, every
//! replica that applied that index seals the same root. The leader then proposes
//! `Command::Attest { index, root }`; a replica applying it compares the root with its own
//! sealed one (a mismatch is divergence: counted and reported, never silent) and marks the
//! version attested by the entry's log id. Snapshots are built only from attested versions.
//!
//! Guarantees: at most [`RETAINED`] sealed versions plus the version of the snapshot file
//! are kept (they share unchanged nodes with the live tree); a version is found for serving
//! only by its exact `(index, root)`.

use std::collections::VecDeque;

use bavl_core::Sha256;

use crate::types::{typ, ChunkBytes, RangeDesc, SnapshotData};

/// Sealed versions kept besides the snapshot file's.
pub const RETAINED: usize = 8;

/// One retained version of a group's state.
#[derive(Clone)]
pub struct Version {
    /// The log id of the last entry the version includes.
    pub log_id: Option<typ::LogId>,
    pub membership: typ::StoredMembership,
    pub desc: RangeDesc,
    pub next_group_id: u64,
    pub tree: bavl_core::Snapshot<Sha256>,
    /// The log id of the committed `Attest` entry naming this version's root.
    pub attested: Option<typ::LogId>,
    /// The range's merge state at this version (see `merge`).
    pub merge: crate::merge::MergeState,
}

impl Version {
    /// The log index of the version (0 for a group's origin).
    pub fn index(&self) -> u64 {
        self.log_id.map_or(0, |l| l.index)
    }

    pub fn root(&self) -> [u8; 32] {
        self.tree.root_hash()
    }

    /// The version as snapshot data: every chunk exported from the retained tree.
    pub fn data(&self) -> SnapshotData {
        let chunks = (0..self.tree.chunk_count())
            .map(|i| ChunkBytes(self.tree.export_chunk(i).expect("a resident version")))
            .collect();
        SnapshotData {
            desc: Some(self.desc.clone()),
            root: self.root().to_vec(),
            capacity: self.tree.capacity(),
            chunks,
            next_group_id: self.next_group_id,
            attested: self.attested,
            merge: self.merge.clone(),
        }
    }
}

/// What applying an `Attest` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttestOutcome {
    /// This replica's version at the index has the attested root.
    Matched,
    /// This replica's version at the index has another root: one of the two is corrupt.
    Diverged([u8; 32]),
    /// This replica holds no version at the index (it installed a snapshot past it, or
    /// dropped it); nothing to compare.
    Unknown,
}

/// The versions a replica retains.
#[derive(Default)]
pub struct Versions {
    sealed: VecDeque<Version>,
    /// The version of the snapshot file (built or installed), kept while it is current.
    file: Option<Version>,
    /// `Attest` entries whose root differed from this replica's own.
    pub diverged: u64,
}

impl Versions {
    /// Keeps a newly sealed version, dropping the oldest beyond [`RETAINED`].
    pub fn seal(&mut self, v: Version) {
        self.sealed.push_back(v);
        while self.sealed.len() > RETAINED {
            self.sealed.pop_front();
        }
    }

    /// Records the snapshot file's version (after a build, an install or on open); an
    /// install also forgets sealed versions, which belong to the replaced state.
    pub fn set_file(&mut self, v: Version, installed: bool) {
        if installed {
            self.sealed.clear();
        }
        self.file = Some(v);
    }

    /// The index of the snapshot file's version, if any.
    pub fn file_index(&self) -> Option<u64> {
        self.file.as_ref().map(Version::index)
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut Version> {
        self.sealed.iter_mut().chain(self.file.as_mut())
    }

    /// Applies a committed `Attest { index, root }` found at log id `at`.
    pub fn attest(&mut self, index: u64, root: &[u8], at: typ::LogId) -> AttestOutcome {
        let mut outcome = AttestOutcome::Unknown;
        for v in self.all_mut().filter(|v| v.log_id.is_some() && v.index() == index) {
            let own = v.root();
            if own.as_slice() == root {
                v.attested.get_or_insert(at);
                outcome = AttestOutcome::Matched;
            } else {
                outcome = AttestOutcome::Diverged(own);
            }
        }
        if matches!(outcome, AttestOutcome::Diverged(_)) {
            self.diverged += 1;
        }
        outcome
    }

    /// The latest sealed version if no `Attest` has named it yet: `(index, root)`.
    pub fn to_attest(&self) -> Option<(u64, [u8; 32])> {
        let v = self.sealed.back()?;
        v.attested.is_none().then(|| (v.index(), v.root()))
    }

    /// The newest attested version newer than the snapshot file's.
    pub fn to_snapshot(&self) -> Option<Version> {
        let file = self.file_index();
        let v = self.sealed.iter().rev().find(|v| v.attested.is_some())?;
        match file {
            Some(f) if v.index() <= f => None,
            _ => Some(v.clone()),
        }
    }

    /// The newest attested version satisfying `pred` (a merge's frozen state).
    pub fn newest_attested(&self, pred: impl Fn(&Version) -> bool) -> Option<&Version> {
        self.sealed
            .iter()
            .chain(self.file.as_ref())
            .filter(|v| v.attested.is_some() && pred(v))
            .max_by_key(|v| v.index())
    }

    /// The retained version at `index` whose root is `root` (for serving chunks).
    pub fn find(&self, index: u64, root: &[u8]) -> Option<&Version> {
        self.sealed
            .iter()
            .chain(self.file.as_ref())
            .find(|v| v.index() == index && v.root().as_slice() == root)
    }
}
