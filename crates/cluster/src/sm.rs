//! openraft's state machine for one group: [`RangeState`] plus the applied log id, the
//! membership, and the latest snapshot kept as a file.
//!
//! Guarantees: the state in memory is rebuilt on start from the latest snapshot file (or a
//! split child's base file, or an empty range) and then from the durable log, which openraft
//! re-applies; so the Raft log is the only write-ahead log and a write costs one fsync. A
//! snapshot file is written, synced and renamed, its directory synced
//! (`bavl_store::write_file_atomic`), before openraft may purge the log it covers
//! (for an installed snapshot the log store waits for it: see `snapmark`).
//! A new group (bootstrap, or a split's child) starts from a snapshot at log id `(0, 0)`
//! holding its initial state and membership, over a log purged up to that id: openraft
//! sees it initialized, and a replica that lacks the group gets that state as a snapshot.
//! A split's child files are written (synced) inside the apply of the split entry, before
//! the entry counts as applied, so no restart can lose a child that was created.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bavl_store::write_file_atomic;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

use crate::range::{RangeState, SplitChild};
use crate::snapmark::SnapshotMark;
pub use crate::tombstone::{
    raise_tombstone, read_tombstone, tombstone_file, Tombstone, MAX_TOMBSTONE_BYTES,
};
use crate::types::{typ, Command, GroupId, RangeDesc, Response, SnapshotData, TypeConfig};
use crate::versions::{AttestOutcome, Version, Versions};

/// File of the latest snapshot in a group's directory.
pub const SNAPSHOT_FILE: &str = "snapshot.json";
/// File of a group's Raft log.
pub const LOG_FILE: &str = "raft.log";

/// What is shared between openraft's state machine task and the node's readers.
pub struct Shared {
    pub state: RangeState,
    pub last_applied: Option<typ::LogId>,
    pub membership: typ::StoredMembership,
    /// Sealed and snapshot versions of the state (see `versions`).
    pub versions: Versions,
}

impl Shared {
    /// The state now as a retained version (hashes the tree's changed paths).
    fn version(&mut self, attested: Option<typ::LogId>) -> Version {
        Version {
            log_id: self.last_applied,
            membership: self.membership.clone(),
            desc: self.state.desc.clone(),
            next_group_id: self.state.next_group_id,
            tree: self.state.tree.snapshot(),
            attested,
            merge: self.state.merge.clone(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: typ::SnapshotMeta,
    data: SnapshotData,
}

/// One group's state machine (cheap to clone).
#[derive(Clone)]
pub struct GroupSm {
    pub shared: Arc<Mutex<Shared>>,
    dir: PathBuf,
    node_dir: PathBuf,
    /// Told of every child group a split creates.
    children: UnboundedSender<GroupId>,
    /// `Some(n)`: seal a version every `n / 4` log indexes and build snapshots only from
    /// attested versions, when one is `n` entries past the snapshot file (see
    /// [`GroupSm::snapshot_due`]); `None` (the default): openraft's policy decides and
    /// snapshots hold the current state, unattested (openraft's storage suite runs so).
    snapshot_every: Option<u64>,
    /// Set when a snapshot build was triggered and has not run yet.
    building: Arc<AtomicBool>,
    /// What the snapshot file covers, raised after each one is written (see `snapmark`).
    mark: SnapshotMark,
}

/// Directory of group `id` under a node's directory.
pub fn group_dir(node_dir: &Path, id: GroupId) -> PathBuf {
    node_dir.join(format!("group-{id}"))
}

fn sm_err(verb: ErrorVerb, e: impl std::fmt::Display) -> typ::StorageError {
    let e = std::io::Error::other(e.to_string());
    StorageIOError::new(ErrorSubject::StateMachine, verb, openraft::AnyError::new(&e)).into()
}

impl GroupSm {
    /// Opens group `desc.id`'s state from its files; `desc` is used only for a fresh group.
    pub fn open(
        node_dir: &Path,
        desc: RangeDesc,
        children: UnboundedSender<GroupId>,
    ) -> std::io::Result<Self> {
        let dir = group_dir(node_dir, desc.id);
        std::fs::create_dir_all(&dir)?;
        let mut shared = Shared {
            state: RangeState::new(desc, crate::range::CAPACITY)
                .expect("default capacity is valid"),
            last_applied: None,
            membership: Default::default(),
            versions: Versions::default(),
        };
        if let Some(f) = read_json::<SnapshotFile>(&dir.join(SNAPSHOT_FILE))? {
            shared.state = RangeState::import(&f.data).map_err(std::io::Error::other)?;
            shared.last_applied = f.meta.last_log_id;
            shared.membership = f.meta.last_membership;
            let v = shared.version(f.data.attested);
            shared.versions.set_file(v, false);
        }
        let mark = SnapshotMark::new(shared.versions.file_index());
        let shared = Arc::new(Mutex::new(shared));
        let node_dir = node_dir.to_path_buf();
        let building = Arc::default();
        Ok(GroupSm { shared, dir, node_dir, children, snapshot_every: None, building, mark })
    }

    /// What this group's snapshot file covers; the group's log store waits on it to purge.
    pub fn snapshot_mark(&self) -> SnapshotMark {
        self.mark.clone()
    }

    /// Writes `file` as the group's snapshot file (durably), then raises the mark.
    fn write_snapshot(&self, file: &SnapshotFile) -> std::io::Result<()> {
        write_file_atomic(&self.dir.join(SNAPSHOT_FILE), &serde_json::to_vec(file)?)?;
        self.mark.written(file.meta.last_log_id.map(|l| l.index));
        Ok(())
    }

    /// Seals a version every `n / 4` log indexes and builds snapshots only from versions a
    /// committed `Attest` named (see `versions`), `n` entries apart; the node triggers the
    /// builds (openraft's own policy must be `Never`).
    pub fn with_attested_snapshots(mut self, n: u64) -> Self {
        self.snapshot_every = Some(n.max(4));
        self
    }

    fn seal_every(&self) -> Option<u64> {
        self.snapshot_every.map(|n| n / 4)
    }

    /// The snapshot period: four seal periods. Snapshots are built only from versions at
    /// its multiples (see `versions`), the same indexes on every replica.
    fn snapshot_period(&self) -> Option<u64> {
        self.seal_every().map(|s| s * 4)
    }

    /// Whether a snapshot build should be triggered now: an attested snapshot point lies a
    /// snapshot period or more past the snapshot file and no triggered build is pending. If
    /// so, the build counts as pending from now on (the caller must trigger it).
    pub fn snapshot_due(&self) -> bool {
        let Some(n) = self.snapshot_period() else { return false };
        let s = self.shared.lock().expect("not poisoned");
        let file = s.versions.file_index().unwrap_or(0);
        let due = s.versions.to_snapshot().is_some_and(|v| v.index() >= file + n);
        due && !self.building.swap(true, Ordering::SeqCst)
    }

    /// A triggered build could not be requested after all.
    pub fn snapshot_not_triggered(&self) {
        self.building.store(false, Ordering::SeqCst);
    }

    /// The descriptor held now.
    pub fn desc(&self) -> RangeDesc {
        self.shared.lock().expect("not poisoned").state.desc.clone()
    }

    /// Creates a split child's files unless the child already exists on this node.
    fn create_child(&self, child: &SplitChild) -> std::io::Result<()> {
        seed_group(&self.node_dir, &child.data)
    }
}

/// Writes the files of a new group whose initial state is `data` (its descriptor names the
/// group and its replicas): a log purged up to `(0, 0)`, then a snapshot at `(0, 0)`. The
/// snapshot file marks the group as existing, so an existing group is left alone.
pub fn seed_group(node_dir: &Path, data: &SnapshotData) -> std::io::Result<()> {
    let desc = data
        .desc
        .as_ref()
        .ok_or_else(|| std::io::Error::other("initial state without descriptor"))?;
    let dir = group_dir(node_dir, desc.id);
    if dir.join(SNAPSHOT_FILE).exists() || tombstone_file(node_dir, desc.id).exists() {
        // Exists already, or was moved away from this node: a split re-applied after a
        // restart must not bring back a removed replica with its initial membership (it
        // would vote with no memory of the group's later configurations).
        return Ok(());
    }
    std::fs::create_dir_all(&dir)?;
    let origin = typ::LogId::default();
    crate::log_store::seed(&dir.join(LOG_FILE), origin)?;
    let membership = openraft::Membership::new(vec![desc.replicas.clone()], None);
    let meta = typ::SnapshotMeta {
        last_log_id: Some(origin),
        last_membership: typ::StoredMembership::new(Some(origin), membership),
        snapshot_id: format!("group-{}-origin", desc.id),
    };
    let file = SnapshotFile { meta, data: data.clone() };
    write_file_atomic(&dir.join(SNAPSHOT_FILE), &serde_json::to_vec(&file)?)
}

/// Reads a JSON file if it exists; a file that does not decode is an error, not absence.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl GroupSm {
    /// With attested snapshots: the newest attested snapshot point newer than the file,
    /// written as the snapshot file. If there is none (a snapshot was installed between the
    /// trigger and the build), the current state, unattested: openraft requires a build to
    /// be newer than the snapshot it has, and a snapshot offer then says it is unattested.
    async fn build_attested(&self) -> Result<typ::Snapshot, typ::StorageError> {
        self.building.store(false, Ordering::SeqCst);
        let next = {
            let mut s = self.shared.lock().expect("not poisoned");
            match s.versions.to_snapshot() {
                Some(v) => v,
                None => {
                    eprintln!("group {}: no attested version to snapshot", s.state.desc.id);
                    s.version(None)
                }
            }
        };
        let v = next;
        let id = v.log_id.map_or("none".to_string(), |l| format!("{}-{}", l.leader_id, l.index));
        let meta = typ::SnapshotMeta {
            last_log_id: v.log_id,
            last_membership: v.membership.clone(),
            snapshot_id: id,
        };
        let file = SnapshotFile { meta: meta.clone(), data: v.data() };
        self.write_snapshot(&file).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.shared.lock().expect("not poisoned").versions.set_file(v, false);
        Ok(Snapshot { meta, snapshot: Box::new(file.data) })
    }

    /// Applies `Attest { index, root }` found at `at`: compares with this replica's version.
    fn attest(s: &mut Shared, index: u64, root: &[u8], at: typ::LogId) -> Response {
        match s.versions.attest(index, root, at) {
            AttestOutcome::Diverged(own) => {
                eprintln!(
                    "group {}: root at index {index} diverges: log {} here {}",
                    s.state.desc.id,
                    hex::encode(root),
                    hex::encode(own)
                );
                Response::Refused(format!("root at index {index} diverges on this replica"))
            }
            AttestOutcome::Matched | AttestOutcome::Unknown => Response::Done,
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for GroupSm {
    async fn build_snapshot(&mut self) -> Result<typ::Snapshot, typ::StorageError> {
        if self.snapshot_every.is_some() {
            return self.build_attested().await;
        }
        let (data, meta) = {
            let s = self.shared.lock().expect("not poisoned");
            let last = s.last_applied;
            let id = last.map_or("none".to_string(), |l| format!("{}-{}", l.leader_id, l.index));
            let meta = typ::SnapshotMeta {
                last_log_id: last,
                last_membership: s.membership.clone(),
                snapshot_id: id,
            };
            (s.state.export(), meta)
        };
        let file = SnapshotFile { meta: meta.clone(), data };
        self.write_snapshot(&file).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        Ok(Snapshot { meta, snapshot: Box::new(file.data) })
    }
}

impl RaftStateMachine<TypeConfig> for GroupSm {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<typ::LogId>, typ::StoredMembership), typ::StorageError> {
        let s = self.shared.lock().expect("not poisoned");
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, typ::StorageError>
    where
        I: IntoIterator<Item = typ::Entry>,
    {
        let mut out = Vec::new();
        for entry in entries {
            let mut s = self.shared.lock().expect("not poisoned");
            s.last_applied = Some(entry.log_id);
            // A merge's frozen state is sealed at the `PrepareMerge` index, for `Attest`.
            let mut seal = self.seal_every().is_some_and(|n| entry.log_id.index % n == 0);
            let resp = match entry.payload {
                EntryPayload::Blank => {
                    drop(s);
                    Response::Done
                }
                EntryPayload::Membership(m) => {
                    let [voters, learners] = crate::directory::members(&m);
                    s.state.set_membership(voters, learners);
                    s.membership = typ::StoredMembership::new(Some(entry.log_id), m);
                    drop(s);
                    Response::Done
                }
                EntryPayload::Normal(Command::Attest { index, root }) => {
                    let r = Self::attest(&mut s, index, &root, entry.log_id);
                    drop(s);
                    r
                }
                EntryPayload::Normal(cmd) => {
                    let (resp, child) = s.state.apply(&cmd);
                    drop(s);
                    let frozen = matches!(cmd, Command::PrepareMerge { .. });
                    seal |=
                        frozen && self.seal_every().is_some() && matches!(resp, Response::Merge(_));
                    if let Some(child) = child {
                        self.create_child(&child).map_err(|e| sm_err(ErrorVerb::Write, e))?;
                        let _ = self.children.send(child.desc.id);
                    }
                    resp
                }
            };
            // Every arm released the lock.
            if seal {
                let point = self.snapshot_period().is_some_and(|p| entry.log_id.index % p == 0);
                let mut s = self.shared.lock().expect("not poisoned");
                let v = s.version(None);
                s.versions.seal(v, point);
            }
            out.push(resp);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, typ::StorageError> {
        Ok(Box::default())
    }

    async fn install_snapshot(
        &mut self,
        meta: &typ::SnapshotMeta,
        data: Box<SnapshotData>,
    ) -> Result<(), typ::StorageError> {
        // Whatever fails, a purge waiting for this snapshot's file must hear of it.
        let state = RangeState::import(&data)
            .map_err(|e| sm_err(ErrorVerb::Read, e))
            .inspect_err(|_| self.mark.failed())?;
        let file = SnapshotFile { meta: meta.clone(), data: *data };
        self.write_snapshot(&file)
            .map_err(|e| sm_err(ErrorVerb::Write, e))
            .inspect_err(|_| self.mark.failed())?;
        let mut s = self.shared.lock().expect("not poisoned");
        s.state = state;
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        let v = s.version(file.data.attested);
        s.versions.set_file(v, true);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<typ::Snapshot>, typ::StorageError> {
        let f = read_json::<SnapshotFile>(&self.dir.join(SNAPSHOT_FILE))
            .map_err(|e| sm_err(ErrorVerb::Read, e))?;
        Ok(f.map(|f| Snapshot { meta: f.meta, snapshot: Box::new(f.data) }))
    }
}
