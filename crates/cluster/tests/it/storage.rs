//! openraft's own storage conformance suite run on our durable log and bavl state machine,
//! and crash-recovery of the log file.

use std::collections::BTreeSet;
use std::sync::Arc;

use bavl_cluster::log_store::{Durability, LogStore};
use bavl_cluster::sm::GroupSm;
use bavl_cluster::types::{typ, RangeDesc, TypeConfig};
use openraft::storage::RaftLogStorage;
use openraft::testing::{StoreBuilder, Suite};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, GroupSm, Arc<tempfile::TempDir>> for Builder {
    async fn build(
        &self,
    ) -> Result<(Arc<tempfile::TempDir>, LogStore, GroupSm), typ::StorageError> {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let log = LogStore::open(&dir.path().join("raft.log"), Durability::Fsync).unwrap();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let sm = GroupSm::open(dir.path(), RangeDesc::whole(1, BTreeSet::new()), tx).unwrap();
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).unwrap();
}

#[test]
fn a_torn_tail_is_cut_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.log");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut log = LogStore::open(&path, Durability::Fsync).unwrap();
        let vote = typ::Vote::new(3, 1);
        log.save_vote(&vote).await.unwrap();
        let good = std::fs::metadata(&path).unwrap().len();
        // A crash in the middle of the next record: half a frame.
        log.save_vote(&typ::Vote::new(4, 2)).await.unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let full = f.metadata().unwrap().len();
        f.set_len(good + (full - good) / 2).unwrap();
        drop(log);
        let mut log = LogStore::open(&path, Durability::Fsync).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(vote));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good, "torn tail not cut");
        // A flipped byte inside the last record is caught by its checksum too.
        log.save_vote(&typ::Vote::new(5, 2)).await.unwrap();
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let mut log = LogStore::open(&path, Durability::Fsync).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    });
}

#[test]
fn a_log_without_the_header_is_refused_and_a_torn_header_is_empty() {
    use bavl_cluster::log_store::{stored_vote, MAGIC};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.log");
    // A log of the first format: framed JSON records, no header. Refused, and left as it
    // was (replaying it as torn would have cut it to nothing).
    let payload = br#"{"Vote":{"leader_id":{"term":3,"node_id":1},"committed":false}}"#;
    let mut old = (payload.len() as u32).to_le_bytes().to_vec();
    old.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    old.extend_from_slice(payload);
    std::fs::write(&path, &old).unwrap();
    let e = LogStore::open(&path, Durability::Fsync).err().expect("an old log is refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("not a Raft log of this bavl"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), old, "the refused file was changed");
    assert!(stored_vote(&path).is_err(), "its vote is not read as none");
    // A crash while the file was being created: a strict prefix of the header.
    std::fs::write(&path, &MAGIC[..3]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut log = LogStore::open(&path, Durability::Fsync).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), None);
        assert_eq!(std::fs::read(&path).unwrap(), MAGIC, "the header is rewritten whole");
        log.save_vote(&typ::Vote::new(3, 1)).await.unwrap();
        drop(log);
        assert_eq!(stored_vote(&path).unwrap(), Some(typ::Vote::new(3, 1)));
    });
}

#[test]
fn tombstone_markers_are_read_defensively() {
    use bavl_cluster::sm::{raise_tombstone, read_tombstone, tombstone_file, MAX_TOMBSTONE_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path();
    assert_eq!(read_tombstone(node, 7).unwrap(), None);
    // An empty marker (older versions) holds no vote.
    std::fs::write(tombstone_file(node, 7), b"").unwrap();
    assert_eq!(read_tombstone(node, 7).unwrap().unwrap().vote, None);
    // A vote is kept, and only raised.
    raise_tombstone(node, 7, Some(typ::Vote::new(5, 2))).unwrap();
    raise_tombstone(node, 7, Some(typ::Vote::new(4, 1))).unwrap();
    assert_eq!(read_tombstone(node, 7).unwrap().unwrap().vote, Some(typ::Vote::new(5, 2)));
    // Damage is an error, never "no vote": bytes that do not decode, or too many of them.
    std::fs::write(tombstone_file(node, 7), b"{\"vote\":").unwrap();
    let e = read_tombstone(node, 7).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    let mut long = b"{\"vote\":null}".to_vec();
    long.resize(MAX_TOMBSTONE_BYTES as usize + 1, b' ');
    std::fs::write(tombstone_file(node, 7), &long).unwrap();
    let e = read_tombstone(node, 7).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("bytes"), "{e}");
}

/// A follower installing its leader's snapshot: openraft issues the log purge up to the
/// snapshot without waiting for the install, so the purge must wait for the snapshot file
/// (a crash between the two would leave a log starting after the file ends).
#[test]
fn a_purge_for_an_installed_snapshot_waits_for_its_file() {
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let leader_dir = tempfile::tempdir().unwrap();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let desc = RangeDesc::whole(1, BTreeSet::new());
        let mut leader = GroupSm::open(leader_dir.path(), desc.clone(), tx.clone()).unwrap();
        let data = *leader.build_snapshot().await.unwrap().snapshot;
        let at = openraft::testing::log_id(2, 1, 30);
        let meta = typ::SnapshotMeta {
            last_log_id: Some(at),
            last_membership: Default::default(),
            snapshot_id: "2-30".into(),
        };

        let dir = tempfile::tempdir().unwrap();
        let mut sm = GroupSm::open(dir.path(), desc.clone(), tx.clone()).unwrap();
        let group = bavl_cluster::sm::group_dir(dir.path(), 1);
        let log = LogStore::open(&group.join("raft.log"), Durability::Fsync)
            .unwrap()
            .with_snapshot_mark(sm.snapshot_mark());
        let purge = {
            let mut log = log.clone();
            tokio::spawn(async move { log.purge(at).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!purge.is_finished(), "the log was purged before the snapshot file was written");
        assert_eq!(log.clone().get_log_state().await.unwrap().last_purged_log_id, None);
        sm.install_snapshot(&meta, Box::new(data.clone())).await.unwrap();
        purge.await.unwrap().unwrap();
        assert_eq!(log.clone().get_log_state().await.unwrap().last_purged_log_id, Some(at));
        assert!(group.join("snapshot.json").exists());

        // An install that fails (its directory gone) ends the purge waiting on it with an
        // error, instead of leaving the group's Raft core blocked.
        let dir = tempfile::tempdir().unwrap();
        let mut sm = GroupSm::open(dir.path(), desc, tx).unwrap();
        let group = bavl_cluster::sm::group_dir(dir.path(), 1);
        let log = LogStore::open(&dir.path().join("raft.log"), Durability::Fsync)
            .unwrap()
            .with_snapshot_mark(sm.snapshot_mark());
        let purge = {
            let mut log = log.clone();
            tokio::spawn(async move { log.purge(at).await })
        };
        std::fs::remove_dir_all(&group).unwrap();
        assert!(sm.install_snapshot(&meta, Box::new(data)).await.is_err());
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), purge).await;
        let e = ended.expect("a purge outlived the failed install").unwrap().unwrap_err();
        assert!(e.to_string().contains("failed"), "{e}");
        assert_eq!(log.clone().get_log_state().await.unwrap().last_purged_log_id, None);
    });
}
