//! openraft's state machine for one group: [`RangeState`] plus the applied log id, the
//! membership, and the latest snapshot kept as a file.
//!
//! Guarantees: the state in memory is rebuilt on start from the latest snapshot file (or a
//! split child's base file, or an empty range) and then from the durable log, which openraft
//! re-applies; so the Raft log is the only write-ahead log and a write costs one fsync. A
//! snapshot file is written, synced and renamed before openraft may purge the log it covers.
//! A new group (bootstrap, or a split's child) starts from a snapshot at log id `(0, 0)`
//! holding its initial state and membership, over a log purged up to that id: openraft
//! sees it initialized, and a replica that lacks the group gets that state as a snapshot.
//! A split's child files are written (synced) inside the apply of the split entry, before
//! the entry counts as applied, so no restart can lose a child that was created.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

use crate::range::{RangeState, SplitChild};
use crate::types::{typ, GroupId, RangeDesc, Response, SnapshotData, TypeConfig};

/// File of the latest snapshot in a group's directory.
pub const SNAPSHOT_FILE: &str = "snapshot.json";
/// File of a group's Raft log.
pub const LOG_FILE: &str = "raft.log";

/// What is shared between openraft's state machine task and the node's readers.
pub struct Shared {
    pub state: RangeState,
    pub last_applied: Option<typ::LogId>,
    pub membership: typ::StoredMembership,
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
}

/// Directory of group `id` under a node's directory.
pub fn group_dir(node_dir: &Path, id: GroupId) -> PathBuf {
    node_dir.join(format!("group-{id}"))
}

fn sm_err(verb: ErrorVerb, e: impl std::fmt::Display) -> typ::StorageError {
    let e = std::io::Error::other(e.to_string());
    StorageIOError::new(ErrorSubject::StateMachine, verb, openraft::AnyError::new(&e)).into()
}

/// Writes `bytes` to `path` durably: temp file, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
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
        };
        if let Some(f) = read_json::<SnapshotFile>(&dir.join(SNAPSHOT_FILE))? {
            shared.state = RangeState::import(&f.data).map_err(std::io::Error::other)?;
            shared.last_applied = f.meta.last_log_id;
            shared.membership = f.meta.last_membership;
        }
        let shared = Arc::new(Mutex::new(shared));
        Ok(GroupSm { shared, dir, node_dir: node_dir.to_path_buf(), children })
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
    write_atomic(&dir.join(SNAPSHOT_FILE), &serde_json::to_vec(&file)?)
}

/// The marker a node leaves when it deletes its replica of group `id` (see `moves`).
pub fn tombstone_file(node_dir: &Path, id: GroupId) -> PathBuf {
    node_dir.join(format!("tombstone-{id}"))
}

/// Reads a JSON file if it exists; a file that does not decode is an error, not absence.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl RaftSnapshotBuilder<TypeConfig> for GroupSm {
    async fn build_snapshot(&mut self) -> Result<typ::Snapshot, typ::StorageError> {
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
        let bytes = serde_json::to_vec(&file).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        write_atomic(&self.dir.join(SNAPSHOT_FILE), &bytes)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
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
            let resp = match entry.payload {
                EntryPayload::Blank => Response::Done,
                EntryPayload::Membership(m) => {
                    let [voters, learners] = crate::directory::members(&m);
                    s.state.set_membership(voters, learners);
                    s.membership = typ::StoredMembership::new(Some(entry.log_id), m);
                    Response::Done
                }
                EntryPayload::Normal(cmd) => {
                    let (resp, child) = s.state.apply(&cmd);
                    drop(s);
                    if let Some(child) = child {
                        self.create_child(&child).map_err(|e| sm_err(ErrorVerb::Write, e))?;
                        let _ = self.children.send(child.desc.id);
                    }
                    resp
                }
            };
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
        let state = RangeState::import(&data).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        let file = SnapshotFile { meta: meta.clone(), data: *data };
        let bytes = serde_json::to_vec(&file).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        write_atomic(&self.dir.join(SNAPSHOT_FILE), &bytes)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        let mut s = self.shared.lock().expect("not poisoned");
        s.state = state;
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<typ::Snapshot>, typ::StorageError> {
        let f = read_json::<SnapshotFile>(&self.dir.join(SNAPSHOT_FILE))
            .map_err(|e| sm_err(ErrorVerb::Read, e))?;
        Ok(f.map(|f| Snapshot { meta: f.meta, snapshot: Box::new(f.data) }))
    }
}
