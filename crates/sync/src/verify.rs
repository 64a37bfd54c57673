//! Chunk verification as a job: pure, so it can run on any thread, off the network tasks.

use std::fmt;

use bavl_core::{verify_chunk, Digest, Hasher, ProofError, VerifiedChunk};

use crate::request::{RequestId, SourceId};

/// A body to verify as chunk `index` of `root`; [`VerifyJob::run`] gives the event to feed
/// back.
#[derive(Debug)]
pub struct VerifyJob {
    pub id: RequestId,
    pub source: SourceId,
    pub index: u64,
    pub root: Digest,
    pub body: Vec<u8>,
}

/// The outcome of a [`VerifyJob`]. The body is dropped where it was verified: a chunk
/// that verified carries its decoded entries, which is all a caller keeps.
pub struct Verified {
    pub id: RequestId,
    pub outcome: Result<VerifiedChunk, ProofError>,
}

impl VerifyJob {
    /// Verifies the body against the root alone.
    pub fn run<H: Hasher>(self) -> Verified {
        let outcome = verify_chunk::<H>(&self.root, self.index, &self.body);
        Verified { id: self.id, outcome }
    }
}

impl fmt::Debug for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = self.outcome.as_ref().map(|c| c.index);
        f.debug_struct("Verified").field("id", &self.id).field("outcome (index)", &outcome).finish()
    }
}
