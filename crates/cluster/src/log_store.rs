//! The durable Raft log of one group: an append-only file of framed records.
//!
//! Guarantees: every `append` (one batch of entries from openraft) is one record written and
//! then, under [`Durability::Fsync`], one `fsync` before openraft is told it is flushed, so an
//! acknowledged entry survives a crash. Votes are fsynced before `save_vote` returns. The
//! committed index is written without a sync (openraft allows it to lag). Truncations and
//! purges are records too; a purge past the group's durable snapshot file waits for one that
//! covers it (see `snapmark`), so no crash can leave a log that starts after the snapshot
//! file ends; after a failed write or sync the log refuses further writes
//! (what reached the disk is unknown) until reopened; reopening replays the file and stops at the first torn or
//! corrupt record (a crash mid-write), cutting the file there.
//!
//! File: the 8-byte header [`MAGIC`], then frames `len: u32 LE | crc32(payload): u32 LE |
//! payload` where the payload is the binary encoding ([`crate::codec`]) of a `Record`
//! (entries, truncate, purge, vote, committed); a frame longer than [`MAX_RECORD`] is
//! treated as corrupt before allocating. A file that does not begin with the header (a log
//! of the first format, JSON records without a header) is refused, never replayed as torn;
//! an empty file, or a strict prefix of the header (a crash while the file was created), is
//! an empty log.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, RaftLogId, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::snapmark::{SnapshotMark, PURGE_WAIT};
use crate::types::{typ, TypeConfig};

/// The first bytes of every log file: "BAVL Raft log", format 2 (binary records).
pub const MAGIC: &[u8; 8] = b"BAVLRLG2";

/// Largest record accepted when reading the file back (64 MiB).
pub const MAX_RECORD: usize = 64 << 20;

/// Whether appends are fsynced. The simulation models process crashes (the OS keeps what
/// was written), so it may skip syncs; a real node always syncs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    Fsync,
    NoSync,
}

#[derive(Serialize, Deserialize)]
enum Record {
    Entries(Vec<typ::Entry>),
    /// Remove entries with index >= this.
    Truncate(u64),
    Purge(typ::LogId),
    Vote(typ::Vote),
    Committed(Option<typ::LogId>),
}

#[derive(Default)]
struct Inner {
    log: BTreeMap<u64, typ::Entry>,
    last_purged: Option<typ::LogId>,
    vote: Option<typ::Vote>,
    committed: Option<typ::LogId>,
    file: Option<File>,
    path: PathBuf,
    durability: Option<Durability>,
    /// Records written since the file was last rewritten compactly.
    records: u64,
    /// A write or sync failed: what reached the disk is unknown, so refuse further writes.
    poisoned: bool,
}

/// One group's durable log; cheap to clone (shared inner).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
    /// What the group's snapshot file covers; a purge past it waits (unset: no wait, for
    /// openraft's conformance suite, which purges with no snapshot at all).
    mark: Option<SnapshotMark>,
}

fn io_err(verb: ErrorVerb, e: impl std::error::Error + 'static) -> typ::StorageError {
    StorageIOError::new(ErrorSubject::Logs, verb, openraft::AnyError::new(&e)).into()
}

impl LogStore {
    /// Opens (or creates) the log file at `path`, replaying what it holds.
    pub fn open(path: &Path, durability: Durability) -> std::io::Result<Self> {
        let mut inner =
            Inner { path: path.to_path_buf(), durability: Some(durability), ..Inner::default() };
        let mut bytes = Vec::new();
        if path.exists() {
            File::open(path)?.read_to_end(&mut bytes)?;
        }
        let good = match records(path, &bytes)? {
            Some(records) => MAGIC.len() + replay(records, &mut inner),
            None => {
                create(path)?.sync_all()?;
                MAGIC.len()
            }
        };
        let file = OpenOptions::new().append(true).open(path)?;
        if (good as u64) < file.metadata()?.len() {
            file.set_len(good as u64)?;
            file.sync_all()?;
        }
        inner.file = Some(file);
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)), mark: None })
    }

    /// Makes every purge wait until the group's snapshot file covers it (see `snapmark`).
    pub fn with_snapshot_mark(mut self, mark: SnapshotMark) -> Self {
        self.mark = Some(mark);
        self
    }

    /// Saves `vote` (synced) unless the log holds a vote at least as new. Used before
    /// openraft opens the log of a replica re-created empty on a node that deleted its
    /// replica of the group: the vote it had must not be forgotten (see `moves`).
    pub async fn raise_vote(&self, vote: typ::Vote) -> std::io::Result<()> {
        let mut inner = self.inner.lock().await;
        if inner.vote.is_some_and(|v| v >= vote) {
            return Ok(());
        }
        inner.write(Record::Vote(vote), true)
    }
}

/// Writes a new group's log: empty, purged up to `upto` (the group starts from a snapshot
/// at that log id), synced.
pub fn seed(path: &Path, upto: typ::LogId) -> std::io::Result<()> {
    let mut inner =
        Inner { path: path.to_path_buf(), durability: Some(Durability::Fsync), ..Inner::default() };
    inner.file = Some(create(path)?);
    inner.write(Record::Purge(upto), true)
}

/// Creates (or empties) the log file at `path` and writes its header, unsynced: the caller
/// syncs it, or its first record's sync does.
fn create(path: &Path) -> std::io::Result<File> {
    let mut file = File::create(path)?;
    file.write_all(MAGIC)?;
    Ok(file)
}

/// The records of the log file `path` whose bytes are `bytes`: what follows the header, or
/// `None` for an empty file or a strict prefix of the header (created, not yet written).
fn records<'a>(path: &Path, bytes: &'a [u8]) -> std::io::Result<Option<&'a [u8]>> {
    if let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) {
        return Ok(Some(rest));
    }
    if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
        return Ok(None);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{} is not a Raft log of this bavl (no {:?} header): a log of the first format \
             (JSON records) or another file; this bavl cannot read it",
            path.display(),
            String::from_utf8_lossy(MAGIC)
        ),
    ))
}

/// The vote held by the log file at `path` (none if there is no file), read without
/// opening the log: for a replica being deleted, whose vote must outlive it (see `moves`).
pub fn stored_vote(path: &Path) -> std::io::Result<Option<typ::Vote>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut inner = Inner::default();
    if let Some(records) = records(path, &bytes)? {
        replay(records, &mut inner);
    }
    Ok(inner.vote)
}

/// Applies every intact record of `bytes` to `inner`; returns the length of the intact prefix.
fn replay(bytes: &[u8], inner: &mut Inner) -> usize {
    let mut at = 0;
    while bytes.len() - at >= 8 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        if len > MAX_RECORD || bytes.len() - at - 8 < len {
            break;
        }
        let payload = &bytes[at + 8..at + 8 + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Ok(record) = crate::codec::decode::<Record>(payload) else { break };
        inner.apply(record);
        at += 8 + len;
    }
    at
}

impl Inner {
    fn apply(&mut self, record: Record) {
        self.records += 1;
        match record {
            Record::Entries(entries) => {
                for e in entries {
                    self.log.insert(e.get_log_id().index, e);
                }
            }
            Record::Truncate(index) => {
                self.log.split_off(&index);
            }
            Record::Purge(id) => {
                self.last_purged = Some(id);
                self.log = self.log.split_off(&(id.index + 1));
            }
            Record::Vote(v) => self.vote = Some(v),
            Record::Committed(c) => self.committed = c,
        }
    }

    /// Frames and writes `record`, syncing if asked and the store is durable, then applies it.
    fn write(&mut self, record: Record, sync: bool) -> std::io::Result<()> {
        if self.poisoned {
            return Err(std::io::Error::other("an earlier write to this log failed; reopen it"));
        }
        let res = self.write_unpoisoned(record, sync);
        self.poisoned = res.is_err();
        res
    }

    fn write_unpoisoned(&mut self, record: Record, sync: bool) -> std::io::Result<()> {
        let frame = frame(&record)?;
        let durable = self.durability == Some(Durability::Fsync);
        let file = self.file.as_mut().expect("open log has a file");
        file.write_all(&frame)?;
        if sync && durable {
            file.sync_data()?;
        }
        self.apply(record);
        Ok(())
    }

    /// Rewrites the file as its current state (after purges) with bavl's atomic write
    /// (`bavl_store::write_file_atomic`: a temporary file synced, renamed over the log, the
    /// directory synced), so a crash leaves either the old file or the new one.
    fn compact(&mut self) -> std::io::Result<()> {
        let records: Vec<Record> = (self.last_purged.map(Record::Purge).into_iter())
            .chain(self.vote.map(Record::Vote))
            .chain([Record::Committed(self.committed)])
            .chain([Record::Entries(self.log.values().cloned().collect())])
            .collect();
        let mut bytes = MAGIC.to_vec();
        for r in &records {
            bytes.extend_from_slice(&frame(r)?);
        }
        bavl_store::write_file_atomic(&self.path, &bytes)?;
        self.file = Some(OpenOptions::new().append(true).open(&self.path)?);
        self.records = records.len() as u64;
        Ok(())
    }
}

/// `record` framed: `len: u32 LE | crc32(payload): u32 LE | payload`.
fn frame(record: &Record) -> std::io::Result<Vec<u8>> {
    let payload = crate::codec::encode(record).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(payload.len() + 8);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug>(
        &mut self,
        range: RB,
    ) -> Result<Vec<typ::Entry>, typ::StorageError> {
        let inner = self.inner.lock().await;
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, typ::StorageError> {
        let inner = self.inner.lock().await;
        let last = inner.log.values().next_back().map(|e| *e.get_log_id());
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last.or(inner.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &typ::Vote) -> Result<(), typ::StorageError> {
        self.inner
            .lock()
            .await
            .write(Record::Vote(*vote), true)
            .map_err(|e| io_err(ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<typ::Vote>, typ::StorageError> {
        Ok(self.inner.lock().await.vote)
    }

    async fn save_committed(&mut self, c: Option<typ::LogId>) -> Result<(), typ::StorageError> {
        self.inner
            .lock()
            .await
            .write(Record::Committed(c), false)
            .map_err(|e| io_err(ErrorVerb::Write, e))
    }

    async fn read_committed(&mut self) -> Result<Option<typ::LogId>, typ::StorageError> {
        Ok(self.inner.lock().await.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), typ::StorageError>
    where
        I: IntoIterator<Item = typ::Entry>,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let res = self.inner.lock().await.write(Record::Entries(entries), true);
        let echo =
            res.as_ref().map(|_| ()).map_err(|e| std::io::Error::new(e.kind(), e.to_string()));
        callback.log_io_completed(echo);
        res.map_err(|e| io_err(ErrorVerb::Write, e))
    }

    async fn truncate(&mut self, log_id: typ::LogId) -> Result<(), typ::StorageError> {
        self.inner
            .lock()
            .await
            .write(Record::Truncate(log_id.index), true)
            .map_err(|e| io_err(ErrorVerb::Write, e))
    }

    async fn purge(&mut self, log_id: typ::LogId) -> Result<(), typ::StorageError> {
        if let Some(mark) = &self.mark {
            let covered = mark.covers(log_id.index, PURGE_WAIT).await;
            covered.map_err(|e| io_err(ErrorVerb::Delete, e))?;
        }
        let mut inner = self.inner.lock().await;
        inner.write(Record::Purge(log_id), true).map_err(|e| io_err(ErrorVerb::Write, e))?;
        if inner.records > 1024 {
            if let Err(e) = inner.compact() {
                inner.poisoned = true;
                return Err(io_err(ErrorVerb::Write, e));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::storage::RaftLogStorage;

    fn blank(index: u64) -> typ::Entry {
        typ::Entry {
            log_id: openraft::testing::log_id(1, 1, index),
            payload: openraft::EntryPayload::Blank,
        }
    }

    /// Past 1024 records a purge rewrites the file compactly (with the atomic write): the
    /// reopened log holds the same vote, committed index, purge point and entries.
    #[tokio::test]
    async fn a_compacted_log_reopens_to_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft.log");
        let mut log = LogStore::open(&path, Durability::NoSync).unwrap();
        {
            let mut inner = log.inner.lock().await;
            for i in 1..=1100 {
                inner.write(Record::Entries(vec![blank(i)]), false).unwrap();
            }
        }
        let vote = typ::Vote::new(7, 2);
        log.save_vote(&vote).await.unwrap();
        let committed = Some(openraft::testing::log_id(1, 1, 900));
        log.save_committed(committed).await.unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let purged = openraft::testing::log_id(1, 1, 100);
        log.purge(purged).await.unwrap();
        assert_eq!(log.inner.lock().await.records, 4, "the file was not compacted");
        assert!(std::fs::metadata(&path).unwrap().len() < before);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(names.len(), 1, "only the log is left: {names:?}");
        // Written after the compaction, to the new file.
        log.save_vote(&typ::Vote::new(8, 3)).await.unwrap();
        drop(log);

        let mut log = LogStore::open(&path, Durability::NoSync).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(typ::Vote::new(8, 3)));
        assert_eq!(log.read_committed().await.unwrap(), committed);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(purged));
        assert_eq!(state.last_log_id, Some(blank(1100).log_id));
        let inner = log.inner.lock().await;
        let indexes: Vec<u64> = inner.log.keys().copied().collect();
        assert_eq!(indexes, (101..=1100).collect::<Vec<_>>());
    }
}
