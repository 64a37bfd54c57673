//! Merges of neighbouring ranges: the deterministic steps every replica applies (this
//! module), driven by the right range's leader (`merge_driver`) and planned by the
//! directory leader (`merge_plan`). See `docs/cluster.md` section 8.3.
//!
//! `L = [a, b)` absorbs `R = [b, c)`:
//! 1. `PrepareMerge { epoch, target: L, target_version }` in R's log **freezes** R: from
//!    then on every write, split and read of R is refused (`Stale`), its `version` is bumped
//!    (writes routed by the old epoch are refused in log order), and each replica seals a
//!    version at that index, which the leader's next `Attest` names.
//! 2. `CommitMerge { target, target_version, source }` in L's log carries R's frozen state as chunks
//!    under the attested root; every L replica verifies every chunk against that root
//!    (`RangeState::import`) and that every entry lies in `[b, c)` before inserting
//!    anything; L's `end` becomes `c` and its `version` `max(L, R) + 1`. It is applied only
//!    if L is still at `target_version` (so L still ends at `b`) and not frozen itself;
//!    otherwise it is refused. **Either outcome is recorded in L's state** by R's id and
//!    frozen version (a [`Decision`]), so a repeated `CommitMerge` gets the same answer:
//!    L's log is the one place where the merge is decided.
//!    If L was itself merged away meanwhile, the range that absorbed it (R's new left
//!    neighbour) decides in its stead (see [`RangeState::commit_merge`]), so R is never
//!    left frozen for a target that no longer exists.
//! 3. If L's log refused it, `RollbackMerge` in R's log unfreezes R at `version + 1`: safe,
//!    since L can never absorb that frozen version later. If L absorbed it, R's replicas are
//!    deleted (retired).
//!
//! Guarantees: every step is a function of the state and the command (the same on every
//! replica); a refused step changes nothing except recording a refused `CommitMerge`.

use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::range::RangeState;
use crate::types::{Epoch, GroupId, RangeDesc, Response, SnapshotData};

/// Largest right range a merge takes: its keys and values plus 16 bytes an entry. The
/// whole range travels in one `CommitMerge` log entry (chunks hex-encoded in JSON, about
/// twice these bytes), which must stay well inside the transport's 64 MiB frame and the
/// log's 64 MiB record; a larger range is refused at `PrepareMerge`, before it freezes,
/// so it is never left frozen with a `CommitMerge` that cannot be sent.
pub const MAX_MERGE_SOURCE_BYTES: u64 = 8 << 20;

/// Set on a range frozen by `PrepareMerge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frozen {
    /// The left neighbour that is to absorb this range.
    pub target: GroupId,
    /// The target's `version` the merge was planned at (the target must still be at it).
    pub target_version: u64,
}

/// A merge decided in the target's log: source `source` at its frozen `version` was
/// absorbed (`committed`) or refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub source: GroupId,
    pub version: u64,
    pub committed: bool,
}

/// A range's replicated merge state (part of its snapshots).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeState {
    #[serde(default)]
    pub frozen: Option<Frozen>,
    /// Every merge this range decided as a target, in log order, and those decided by the
    /// ranges it absorbed (or, for a split's right child, its parent's).
    #[serde(default)]
    pub decided: Vec<Decision>,
    /// The groups this range absorbed, directly or through the ranges it absorbed (or, for
    /// a split's right child, its parent's): it answers a `CommitMerge` addressed to one of
    /// them in its stead.
    #[serde(default)]
    pub absorbed: Vec<GroupId>,
}

impl MergeState {
    /// What a split's right child inherits: the decisions and the absorbed groups, so that
    /// either half answers for them alike (never the frozen mark: a frozen range does not
    /// split).
    pub fn inherited(&self) -> MergeState {
        MergeState { frozen: None, decided: self.decided.clone(), absorbed: self.absorbed.clone() }
    }

    /// The decision recorded for `source` frozen at `version`, if any.
    pub fn decision(&self, source: GroupId, version: u64) -> Option<Decision> {
        self.decided.iter().copied().find(|d| d.source == source && d.version == version)
    }
}

impl RangeState {
    /// Step 1 on the right range (see the module doc).
    pub(crate) fn prepare_merge(
        &mut self,
        epoch: Epoch,
        target: GroupId,
        target_version: u64,
    ) -> Response {
        if epoch.version != self.desc.epoch.version {
            return Response::Stale(self.desc.clone());
        }
        if self.merge.frozen.is_some() {
            return Response::Refused("the range is already frozen for a merge".into());
        }
        if target == self.desc.id || self.desc.start.is_empty() {
            return Response::Refused("no left neighbour to merge into".into());
        }
        if !self.desc.learners.is_empty() {
            return Response::Refused("a move is in progress".into());
        }
        let stats = self.tree.stats();
        let bytes = stats.payload_bytes + 16 * stats.keys;
        if bytes > MAX_MERGE_SOURCE_BYTES {
            return Response::Refused(format!(
                "the range holds {bytes} bytes, over the {MAX_MERGE_SOURCE_BYTES} a merge moves"
            ));
        }
        self.merge.frozen = Some(Frozen { target, target_version });
        self.desc.epoch.version += 1;
        Response::Merge(self.desc.clone())
    }

    /// Step 2 on the left range (see the module doc), addressed to `target`: this range,
    /// or a range it absorbed (then it answers in its stead, below). Any refusal is
    /// recorded.
    ///
    /// A range `X` this range absorbed was frozen before it was absorbed, and a frozen
    /// range refuses every `CommitMerge`; so every merge `X` ever committed is among the
    /// decisions absorbed with it, and any other merge addressed to `X` is refused here,
    /// as `X` itself would have refused it. This is what frees a right range frozen for a
    /// merge into `X` after `X` was merged away (its driver asks `X`'s left neighbour).
    /// A `target` that is neither this range nor absorbed by it gets `Stale` (nothing
    /// decided: the caller's directory was out of date).
    pub(crate) fn commit_merge(
        &mut self,
        target: GroupId,
        target_version: u64,
        source: &SnapshotData,
    ) -> Response {
        let Some(src) = source.desc.clone() else {
            return Response::Refused("a merge source without descriptor".into());
        };
        let in_stead = target != self.desc.id;
        if in_stead && !self.merge.absorbed.contains(&target) {
            return Response::Stale(self.desc.clone());
        }
        match self.merge.decision(src.id, src.epoch.version) {
            Some(d) if d.committed => return Response::Merge(self.desc.clone()),
            Some(_) => return Response::Refused("this merge was refused before".into()),
            None => {}
        }
        let absorbed = if in_stead {
            Err(format!("the target {target} was merged into {} first", self.desc.id))
        } else {
            self.absorb(target_version, &src, source)
        };
        let committed = absorbed.is_ok();
        let d = Decision { source: src.id, version: src.epoch.version, committed };
        self.merge.decided.push(d);
        match absorbed {
            Ok(()) => Response::Merge(self.desc.clone()),
            Err(e) => Response::Refused(e),
        }
    }

    fn absorb(
        &mut self,
        target_version: u64,
        src: &RangeDesc,
        data: &SnapshotData,
    ) -> Result<(), String> {
        if self.merge.frozen.is_some() {
            return Err("the target is frozen for a merge of its own".into());
        }
        if target_version != self.desc.epoch.version {
            return Err(format!(
                "the target is at version {}, the merge was planned at {target_version}",
                self.desc.epoch.version
            ));
        }
        if src.id == self.desc.id || self.desc.end.is_empty() || self.desc.end != src.start {
            return Err("the source is not the target's right neighbour".into());
        }
        // Every chunk verified against the attested root, and every entry inside [b, c).
        let state = RangeState::import(data).map_err(|e| format!("merge source: {e}"))?;
        let tree = state.tree;
        let entries: Vec<(Vec<u8>, Vec<u8>)> = tree
            .range(Bound::Unbounded, Bound::Unbounded)
            .map_err(|e| e.to_string())?
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        if entries.iter().any(|(k, _)| !src.contains(k)) {
            return Err("a merge source entry lies outside its range".into());
        }
        for (k, v) in &entries {
            self.tree.insert(k, v).map_err(|e| e.to_string())?;
        }
        self.desc.end.clone_from(&src.end);
        self.desc.epoch.version = self.desc.epoch.version.max(src.epoch.version) + 1;
        // The source's decisions and absorbed groups come along (see `commit_merge`), once
        // each: a split's right child starts with a copy of its parent's, so merging it back
        // would otherwise double both lists on every split-and-merge cycle.
        for d in &data.merge.decided {
            if self.merge.decision(d.source, d.version).is_none() {
                self.merge.decided.push(*d);
            }
        }
        for g in data.merge.absorbed.iter().chain([&src.id]) {
            if !self.merge.absorbed.contains(g) {
                self.merge.absorbed.push(*g);
            }
        }
        Ok(())
    }

    /// Step 3 on the right range when the left refused: unfrozen at `version + 1`.
    pub(crate) fn rollback_merge(&mut self, epoch: Epoch) -> Response {
        if epoch.version != self.desc.epoch.version || self.merge.frozen.is_none() {
            return Response::Stale(self.desc.clone());
        }
        self.merge.frozen = None;
        self.desc.epoch.version += 1;
        Response::Merge(self.desc.clone())
    }

    /// Whether the range is frozen for a merge.
    pub fn is_frozen(&self) -> bool {
        self.merge.frozen.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Command;

    fn range(id: GroupId, start: &str, end: &str, keys: std::ops::Range<u32>) -> RangeState {
        let mut d = RangeDesc::whole(id, [1, 2, 3].into());
        d.start = start.as_bytes().to_vec();
        d.end = end.as_bytes().to_vec();
        let mut r = RangeState::new(d, 4).unwrap();
        for i in keys {
            r.tree.insert(format!("k{i:03}").as_bytes(), b"v").unwrap();
        }
        r
    }

    fn prepare(r: &mut RangeState, target: &RangeState) -> Response {
        let cmd = Command::PrepareMerge {
            epoch: r.desc.epoch,
            target: target.desc.id,
            target_version: target.desc.epoch.version,
        };
        r.apply(&cmd).0
    }

    #[test]
    fn a_merge_freezes_the_right_and_extends_the_left() {
        let mut l = range(1, "", "k050", 0..50);
        let mut r = range(2, "k050", "", 50..90);
        l.desc.epoch.version = 3;
        assert!(matches!(prepare(&mut r, &l), Response::Merge(_)));
        assert_eq!(r.desc.epoch.version, 1);
        // Frozen: writes at the new epoch, and splits, are refused.
        let put = Command::Put { epoch: r.desc.epoch, key: b"k060".to_vec(), value: vec![1] };
        assert!(matches!(r.apply(&put).0, Response::Stale(_)));
        let split = Command::Split { epoch: r.desc.epoch, key: b"k070".to_vec(), new_id: 9 };
        assert!(matches!(r.apply(&split).0, Response::Stale(_)));
        let source = Box::new(r.export());
        let commit = Command::CommitMerge { target: 1, target_version: 3, source: source.clone() };
        let Response::Merge(d) = l.apply(&commit).0 else { panic!("not merged") };
        assert_eq!(
            (d.start.as_slice(), d.end.as_slice(), d.epoch.version),
            (&b""[..], &b""[..], 4)
        );
        assert_eq!(l.tree.len(), 90);
        // Repeated: the same answer, nothing inserted twice or re-applied.
        let root = l.tree.root_hash();
        assert_eq!(l.apply(&commit).0, Response::Merge(d));
        assert_eq!(l.tree.root_hash(), root);
    }

    #[test]
    fn a_refused_merge_is_recorded_and_the_right_rolls_back() {
        let mut l = range(1, "", "k050", 0..50);
        let mut r = range(2, "k050", "", 50..90);
        assert!(matches!(prepare(&mut r, &l), Response::Merge(_)));
        // L moved on (a split) before the commit: refused, for good.
        l.desc.epoch.version += 1;
        let commit =
            Command::CommitMerge { target: 1, target_version: 0, source: Box::new(r.export()) };
        assert!(matches!(l.apply(&commit).0, Response::Refused(_)));
        l.desc.epoch.version = 0; // even if L were back at that version
        assert!(matches!(l.apply(&commit).0, Response::Refused(_)));
        assert_eq!(l.tree.len(), 50);
        assert!(matches!(
            r.apply(&Command::RollbackMerge { epoch: r.desc.epoch }).0,
            Response::Merge(_)
        ));
        assert_eq!(r.desc.epoch.version, 2);
        let put = Command::Put { epoch: r.desc.epoch, key: b"k060".to_vec(), value: vec![1] };
        assert_eq!(r.apply(&put).0, Response::Done);
    }

    #[test]
    fn a_corrupt_or_foreign_source_is_refused() {
        let mut l = range(1, "", "k050", 0..50);
        let mut r = range(2, "k050", "", 50..90);
        prepare(&mut r, &l);
        let mut bad = r.export();
        bad.chunks[0].0[10] ^= 1;
        let commit = Command::CommitMerge { target: 1, target_version: 0, source: Box::new(bad) };
        assert!(matches!(l.apply(&commit).0, Response::Refused(_)));
        assert_eq!((l.tree.len(), l.desc.end.as_slice()), (50, &b"k050"[..]));
        // A source whose entries lie outside its fences (version 2: a new decision).
        let mut other = range(3, "k050", "", 10..20);
        other.desc.epoch.version = 2;
        let commit =
            Command::CommitMerge { target: 1, target_version: 0, source: Box::new(other.export()) };
        assert!(matches!(l.apply(&commit).0, Response::Refused(_)));
        assert_eq!(l.tree.len(), 50);
    }

    #[test]
    fn a_range_too_large_to_travel_in_one_entry_is_refused_before_it_freezes() {
        let l = range(1, "", "k050", 0..50);
        let mut r = range(2, "k050", "", 50..52);
        let big = vec![7u8; MAX_MERGE_SOURCE_BYTES as usize];
        r.tree.insert(b"k060", &big).unwrap();
        let Response::Refused(why) = prepare(&mut r, &l) else { panic!("not refused") };
        assert!(why.contains("bytes"), "{why}");
        assert!(!r.is_frozen());
        assert_eq!(r.desc.epoch.version, 0);
        r.tree.remove(b"k060");
        assert!(matches!(prepare(&mut r, &l), Response::Merge(_)));
    }

    #[test]
    fn a_target_merged_away_is_answered_for_by_the_range_that_absorbed_it() {
        let mut l0 = range(1, "", "k020", 0..20);
        let mut l = range(2, "k020", "k050", 20..50);
        let mut r = range(3, "k050", "", 50..90);
        let mut s = range(4, "k030", "k050", 0..0);
        s.desc.epoch.version = 5;
        // L absorbed nothing yet but decided one merge: S's, refused (S is not adjacent).
        let commit =
            Command::CommitMerge { target: 2, target_version: 0, source: Box::new(s.export()) };
        assert!(matches!(l.apply(&commit).0, Response::Refused(_)));
        // R freezes for a merge into L; then L is merged into L0 before R's commit.
        assert!(matches!(prepare(&mut r, &l), Response::Merge(_)));
        assert!(matches!(prepare(&mut l, &l0), Response::Merge(_)));
        let commit_l =
            Command::CommitMerge { target: 1, target_version: 0, source: Box::new(l.export()) };
        assert!(matches!(l0.apply(&commit_l).0, Response::Merge(_)));
        assert_eq!(l0.merge.absorbed, vec![2]);
        // A range that did not absorb L decides nothing for it.
        let source = Box::new(r.export());
        let to_l = Command::CommitMerge { target: 2, target_version: 0, source };
        let mut other = range(5, "k090", "", 0..0);
        assert!(matches!(other.apply(&to_l).0, Response::Stale(_)));
        assert!(other.merge.decided.is_empty());
        // L0 refuses R's merge in L's stead, for good; and answers S's as L did.
        assert!(matches!(l0.apply(&to_l).0, Response::Refused(_)));
        assert_eq!(l0.merge.decision(3, 1).map(|d| d.committed), Some(false));
        assert!(matches!(l0.apply(&to_l).0, Response::Refused(_)));
        assert_eq!(l0.merge.decision(4, 5).map(|d| d.committed), Some(false));
        assert_eq!((l0.tree.len(), l0.desc.end.as_slice()), (50, &b"k050"[..]));
        // Both halves of a split of L0 answer alike.
        let split = Command::Split { epoch: l0.desc.epoch, key: b"k030".to_vec(), new_id: 6 };
        let (_, child) = l0.apply(&split);
        let mut right = RangeState::import(&child.expect("a right half").data).unwrap();
        assert!(matches!(right.apply(&to_l).0, Response::Refused(_)));
        assert_eq!(right.merge.absorbed, vec![2]);
        // The right half merged back: the records it shares with L0 are not doubled.
        assert!(matches!(prepare(&mut right, &l0), Response::Merge(_)));
        let back = Command::CommitMerge {
            target: 1,
            target_version: l0.desc.epoch.version,
            source: Box::new(right.export()),
        };
        let decided = l0.merge.decided.len();
        assert!(matches!(l0.apply(&back).0, Response::Merge(_)));
        assert_eq!(l0.merge.absorbed, vec![2, 6]);
        assert_eq!(l0.merge.decided.len(), decided + 1, "{:?}", l0.merge.decided);
        // R rolls back and serves its keys again.
        assert!(matches!(
            r.apply(&Command::RollbackMerge { epoch: r.desc.epoch }).0,
            Response::Merge(_)
        ));
        let put = Command::Put { epoch: r.desc.epoch, key: b"k060".to_vec(), value: vec![1] };
        assert_eq!(r.apply(&put).0, Response::Done);
    }

    #[test]
    fn the_directory_drops_a_merged_away_range_and_ignores_its_late_reports() {
        use crate::types::DIRECTORY_GROUP;
        let mut dir = RangeState::new(RangeDesc::whole(DIRECTORY_GROUP, [1].into()), 8).unwrap();
        let l = range(1, "", "k050", 0..0).desc;
        let mut r = range(2, "k050", "", 0..0).desc;
        dir.apply(&Command::Report { descs: vec![l.clone(), r.clone()] });
        let mut merged = l.clone();
        merged.end = Vec::new();
        merged.epoch.version = 2;
        r.epoch.version = 1; // frozen
        dir.apply(&Command::Report { descs: vec![merged.clone()] });
        assert_eq!(dir.descriptors(), vec![merged.clone()]);
        // A late report of the frozen right range, or of the left before the merge.
        dir.apply(&Command::Report { descs: vec![r.clone(), l] });
        assert_eq!(dir.descriptors(), vec![merged.clone()]);
        assert_eq!(dir.lookup(b"k070"), Some(merged));
    }
}
