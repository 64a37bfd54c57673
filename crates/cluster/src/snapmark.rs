//! The log index a group's snapshot file durably covers, shared by the state machine (which
//! raises it once a snapshot file is written, synced and renamed) and the log store (whose
//! purge waits for it).
//!
//! Why: when a follower installs a snapshot sent by its leader, openraft 0.9 sends the
//! install to the state machine's task and issues the log purge up to the snapshot's last
//! log id at once, without waiting for the install (`following_handler::install_full_snapshot`:
//! `PurgeLog` carries no condition). Were the purge written first and the node to crash
//! before the new snapshot file, the replica would restart with a snapshot file ending
//! before its log starts: entries in between gone, which openraft cannot re-apply from. So a
//! purge past this mark waits until the state machine has written a snapshot file that
//! covers it. The wait blocks the group's Raft core only (the state machine runs in its own
//! task and needs nothing from the core to install), and ends with an error if the install
//! fails or nothing covers the purge within [`PURGE_WAIT`] (openraft then stops the group:
//! a replica that cannot write its snapshot cannot go on either). Purges openraft issues
//! after building a snapshot never wait: the file is written before the build returns.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use bavl_cluster::snapmark::SnapshotMark;
//! let mark = SnapshotMark::new(Some(10));
//! assert!(mark.covers(10, std::time::Duration::ZERO).await.is_ok());
//! mark.written(Some(40));
//! assert!(mark.covers(40, std::time::Duration::ZERO).await.is_ok());
//! assert!(mark.covers(41, std::time::Duration::from_millis(5)).await.is_err());
//! # });
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How long a purge waits for a snapshot file covering it before failing.
pub const PURGE_WAIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, Default)]
struct Mark {
    /// Last log index the newest durable snapshot file covers; `None`: no file yet.
    durable: Option<u64>,
    /// An install failed: no file is coming for the purge that waits on it.
    failed: bool,
}

/// See the module documentation. Cheap to clone (one shared channel).
#[derive(Clone, Debug)]
pub struct SnapshotMark {
    tx: Arc<watch::Sender<Mark>>,
}

impl SnapshotMark {
    /// A mark at `durable`, the index the snapshot file on disk covers (`None`: no file).
    pub fn new(durable: Option<u64>) -> Self {
        SnapshotMark { tx: Arc::new(watch::Sender::new(Mark { durable, failed: false })) }
    }

    /// A snapshot file covering `index` is durable. The mark only rises (an older file
    /// written later covers what it covers, no more than the mark already says). A newer
    /// file also clears an earlier failure.
    pub fn written(&self, index: Option<u64>) {
        self.tx.send_if_modified(|m| {
            let raised = index > m.durable;
            if raised {
                m.durable = index;
                m.failed = false;
            }
            raised
        });
    }

    /// Installing a snapshot failed: a purge waiting for it gives up (with an error).
    pub fn failed(&self) {
        self.tx.send_modify(|m| m.failed = true);
    }

    /// The index covered now.
    pub fn durable(&self) -> Option<u64> {
        self.tx.borrow().durable
    }

    /// Waits until a durable snapshot file covers `index` (returns at once if one does);
    /// an error if an install failed meanwhile or `wait` passed first.
    pub async fn covers(&self, index: u64, wait: Duration) -> std::io::Result<()> {
        let mut rx = self.tx.subscribe();
        let waited = tokio::time::timeout(
            wait,
            rx.wait_for(|m| m.durable.is_some_and(|d| d >= index) || m.failed),
        )
        .await;
        let covered = |m: &Mark| m.durable.is_some_and(|d| d >= index);
        match waited {
            Ok(Ok(m)) if covered(&m) => Ok(()),
            Ok(Ok(_)) => Err(std::io::Error::other(format!(
                "purge to index {index} refused: installing the snapshot covering it failed"
            ))),
            // The sender lives in `self`: the channel cannot close while we wait.
            Ok(Err(_)) => Err(std::io::Error::other("snapshot mark closed")),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "purge to index {index} refused: no snapshot file covers it after {wait:?} \
                     (the newest covers {:?})",
                    self.durable()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_purge_past_the_file_waits_for_the_install() {
        rt().block_on(async {
            let mark = SnapshotMark::new(Some(5));
            let waiting = {
                let mark = mark.clone();
                tokio::spawn(async move { mark.covers(30, PURGE_WAIT).await })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!waiting.is_finished(), "the purge went ahead of the snapshot file");
            mark.written(Some(20));
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!waiting.is_finished(), "a file short of the purge released it");
            mark.written(Some(30));
            waiting.await.unwrap().unwrap();
        });
    }

    #[test]
    fn a_failed_install_or_the_deadline_ends_the_wait_with_an_error() {
        rt().block_on(async {
            let mark = SnapshotMark::new(None);
            let waiting = {
                let mark = mark.clone();
                tokio::spawn(async move { mark.covers(1, PURGE_WAIT).await })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            mark.failed();
            let e = waiting.await.unwrap().unwrap_err();
            assert!(e.to_string().contains("failed"), "{e}");
            // A later file clears the failure and is believed again.
            mark.written(Some(3));
            mark.covers(3, Duration::ZERO).await.unwrap();
            // The mark never goes down.
            mark.written(Some(2));
            assert_eq!(mark.durable(), Some(3));
            let e = mark.covers(4, Duration::from_millis(10)).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        });
    }
}
