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
//! Snapshots are built only at **snapshot points**: seals whose index is a multiple of the
//! snapshot period (four seal periods), the same indexes on every replica. A replica keeps
//! its last [`POINTS_RETAINED`] points after they leave the recent seals, so the version a
//! leader's snapshot holds is still held by the followers that applied it, and a learner
//! can fetch its chunks from all of them, not from the leader alone.
//!
//! Guarantees: at most [`RETAINED`] sealed versions, [`POINTS_RETAINED`] points and the
//! version of the snapshot file are kept (they share unchanged nodes with the live tree); a
//! version is found for serving only by its exact `(index, root)`.

use std::collections::VecDeque;

use bavl_core::Sha256;

use crate::types::{typ, ChunkBytes, RangeDesc, SnapshotData};

/// Sealed versions kept besides the snapshot file's.
pub const RETAINED: usize = 8;
/// Snapshot points kept besides the recent seals (a leader's snapshot is at most two
/// snapshot periods behind before followers drop its version).
pub const POINTS_RETAINED: usize = 2;

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

/// A sealed version, and whether it lies at a snapshot point.
struct Sealed {
    v: Version,
    point: bool,
}

/// The versions a replica retains.
#[derive(Default)]
pub struct Versions {
    /// The last [`RETAINED`] seals, and before them the last [`POINTS_RETAINED`] points if
    /// older; oldest first.
    sealed: VecDeque<Sealed>,
    /// The version of the snapshot file (built or installed), kept while it is current.
    file: Option<Version>,
    /// `Attest` entries whose root differed from this replica's own.
    pub diverged: u64,
}

impl Versions {
    /// Keeps a newly sealed version, dropping the oldest beyond [`RETAINED`]; a version at
    /// a snapshot `point` is also kept among the last [`POINTS_RETAINED`] points.
    pub fn seal(&mut self, v: Version, point: bool) {
        self.sealed.push_back(Sealed { v, point });
        let n = self.sealed.len();
        // Points from this one on (itself included), counted down as `retain` goes forward.
        let mut points_on = self.sealed.iter().filter(|s| s.point).count();
        let mut i = 0;
        self.sealed.retain(|s| {
            let recent = i + RETAINED >= n;
            let kept_point = s.point && points_on <= POINTS_RETAINED;
            i += 1;
            points_on -= usize::from(s.point);
            recent || kept_point
        });
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

    fn all(&self) -> impl Iterator<Item = &Version> {
        self.sealed.iter().map(|s| &s.v).chain(self.file.as_ref())
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut Version> {
        self.sealed.iter_mut().map(|s| &mut s.v).chain(self.file.as_mut())
    }

    /// The newest sealed version (with `point`: the newest at a snapshot point).
    fn newest(&self, point: bool) -> Option<&Version> {
        self.sealed.iter().rev().find(|s| s.point || !point).map(|s| &s.v)
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

    /// The version to propose an `Attest` for, `(index, root)`: the latest snapshot point
    /// if no `Attest` has named it yet (first: snapshots are built only from attested
    /// points, and seals may come faster than the leader attests), else the latest sealed
    /// version if none has.
    pub fn to_attest(&self) -> Option<(u64, [u8; 32])> {
        let unattested = |v: &&Version| v.attested.is_none();
        let v = self.newest(true).filter(unattested).or(self.newest(false).filter(unattested))?;
        Some((v.index(), v.root()))
    }

    /// The newest attested snapshot point newer than the snapshot file's version.
    pub fn to_snapshot(&self) -> Option<Version> {
        let file = self.file_index();
        let s = self.sealed.iter().rev().find(|s| s.point && s.v.attested.is_some())?;
        let v = &s.v;
        match file {
            Some(f) if v.index() <= f => None,
            _ => Some(v.clone()),
        }
    }

    /// The newest attested version satisfying `pred` (a merge's frozen state).
    pub fn newest_attested(&self, pred: impl Fn(&Version) -> bool) -> Option<&Version> {
        self.all().filter(|v| v.attested.is_some() && pred(v)).max_by_key(|v| v.index())
    }

    /// The retained version at `index` whose root is `root` (for serving chunks).
    pub fn find(&self, index: u64, root: &[u8]) -> Option<&Version> {
        self.all().find(|v| v.index() == index && v.root().as_slice() == root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version at `index` whose tree holds `index` keys (each index has its own root).
    fn version(index: u64) -> Version {
        version_of(index, index)
    }

    fn version_of(keys: u64, index: u64) -> Version {
        let mut tree = bavl_core::Tree::with_capacity(4).unwrap();
        for i in 0..keys {
            tree.insert(&i.to_be_bytes(), b"v").unwrap();
        }
        Version {
            log_id: Some(typ::LogId::new(openraft::CommittedLeaderId::new(1, 1), index)),
            membership: Default::default(),
            desc: RangeDesc::whole(1, Default::default()),
            next_group_id: 0,
            tree: tree.snapshot(),
            attested: None,
            merge: Default::default(),
        }
    }

    fn at(index: u64) -> typ::LogId {
        typ::LogId::new(openraft::CommittedLeaderId::new(1, 1), index)
    }

    #[test]
    fn an_attested_root_that_differs_is_divergence_and_never_snapshotted() {
        let mut vs = Versions::default();
        vs.seal(version_of(10, 20), true);
        let other = version_of(11, 20).root();
        assert_eq!(vs.to_attest().map(|(i, _)| i), Some(20));
        assert!(matches!(vs.attest(20, &other, at(23)), AttestOutcome::Diverged(_)));
        assert_eq!(vs.diverged, 1);
        assert!(vs.to_snapshot().is_none(), "a version no attest matched is not snapshotted");
        let own = version_of(10, 20).root();
        assert_eq!(vs.attest(20, &own, at(23)), AttestOutcome::Matched);
        assert_eq!(vs.to_snapshot().map(|v| v.attested), Some(Some(at(23))));
        assert_eq!(vs.attest(99, &own, at(23)), AttestOutcome::Unknown);
        assert!(vs.find(20, &own).is_some() && vs.find(20, &other).is_none());
    }

    /// Seals every 10 entries, a point every 40, up to `last`.
    fn sealed_to(last: u64) -> Versions {
        let mut vs = Versions::default();
        for i in (10..=last).step_by(10) {
            vs.seal(version(i), i % 40 == 0);
        }
        vs
    }

    #[test]
    fn a_point_outlives_the_recent_seals_until_two_newer_points() {
        let mut vs = sealed_to(200);
        // Recent seals: 130..=200; points: 160, 200. Point 120 left with the recent seals.
        for i in [160, 200, 130] {
            assert!(vs.find(i, &version(i).root()).is_some(), "{i}");
        }
        assert!(vs.find(120, &version(120).root()).is_none());
        // Extra seals between the periodic ones (a merge's frozen states) crowd the recent
        // eight: 190, 200, 201..=206. Point 160 stays; 170 and 180, no points, leave.
        for i in 201..=206 {
            vs.seal(version(i), false);
        }
        assert!(vs.find(160, &version(160).root()).is_some(), "a point the seals dropped");
        for i in [170, 180] {
            assert!(vs.find(i, &version(i).root()).is_none(), "{i} is no point");
        }
        assert_eq!(vs.sealed.len(), RETAINED + 1);
        // A third point after it: 160 goes.
        vs.seal(version(240), true);
        assert!(vs.find(160, &version(160).root()).is_none());
        assert!(vs.find(200, &version(200).root()).is_some());
    }

    #[test]
    fn points_are_attested_first_and_only_points_are_snapshotted() {
        let mut vs = sealed_to(170);
        assert_eq!(vs.to_attest().map(|(i, _)| i), Some(160), "the unattested point first");
        assert_eq!(vs.attest(170, &version(170).root(), at(171)), AttestOutcome::Matched);
        assert!(vs.to_snapshot().is_none(), "an attested seal that is no point");
        assert_eq!(vs.to_attest().map(|(i, _)| i), Some(160));
        assert_eq!(vs.attest(160, &version(160).root(), at(172)), AttestOutcome::Matched);
        assert_eq!(vs.to_snapshot().map(|v| (v.index(), v.attested)), Some((160, Some(at(172)))));
        assert_eq!(vs.to_attest(), None, "both the point and the latest seal are attested");
        vs.set_file(version(160), false);
        assert!(vs.to_snapshot().is_none(), "not newer than the file");
        vs.seal(version(180), false);
        assert_eq!(vs.to_attest().map(|(i, _)| i), Some(180));
        vs.set_file(version(180), true);
        assert!(vs.find(160, &version(160).root()).is_none(), "an install drops the points");
    }
}
