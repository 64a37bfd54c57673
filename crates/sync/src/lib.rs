//! State sync from many untrusted sources: the wire protocol and the sans-I/O scheduler.
//!
//! The only trusted inputs are a root hash and its version. [`Syncer`] is a deterministic
//! state machine fed with [`Event`]s (responses, failures, verification outcomes, time)
//! that emits [`Action`]s (requests, cancellations, verification jobs, accepted chunks,
//! bans, completion); it hands out each chunk once it verified against the root and keeps
//! none, bans a source on its first invalid response and asks another, adapts each
//! source's concurrency to its latency, and bounds the bytes it holds for unverified
//! responses. Where accepted chunks go is the caller's: a [`Sink`] — the new store's
//! files as they arrive (`bavl_store::Ingest`, whose directory is also what a killed sync
//! resumes from), or a [`bavl_core::Restore`] rebuilding a tree in memory.
//! [`protocol`] gives the HTTP paths, documents and limits (`docs/sync-protocol.md`). A
//! transport (HTTP, or the simulated network of the tests) is a thin loop around these.
//!
//! ```
//! use std::time::Duration;
//! use bavl_core::{Restore, Sha256, Tree};
//! use bavl_sync::{Action, Event, Manifest, Options, Syncer, Want};
//!
//! let mut tree = Tree::<Sha256>::new();
//! for i in 0u32..500 {
//!     tree.insert(&i.to_be_bytes(), b"value")?;
//! }
//! let snap = tree.snapshot();
//! let mut syncer = Syncer::<Sha256>::new(snap.root_hash(), 1, Options::default())?;
//! let mut restore = Restore::<Sha256>::new(snap.root_hash());
//! let now = Duration::ZERO;
//! syncer.add_source(now);
//! let mut done = false;
//! while let Some(action) = syncer.poll_action() {
//!     match action {
//!         // A transport would GET `req.path` from the source through `req.guard()`.
//!         Action::Send(req) => {
//!             let body = match req.want {
//!                 Want::Manifest => Manifest::from_snapshot(1, &snap).unwrap().to_json(),
//!                 Want::Chunk(i) => snap.export_chunk(i).unwrap(),
//!             };
//!             syncer.handle(now, Event::Response { id: req.id, body });
//!         }
//!         Action::Verify(job) => syncer.handle(now, Event::Verified(Box::new(job.run::<Sha256>()))),
//!         // Kept by the caller: the syncer hands each chunk out once.
//!         Action::Accepted { chunk, .. } => {
//!             restore.add_verified(*chunk)?;
//!         }
//!         Action::Done => done = true,
//!         _ => {}
//!     }
//! }
//! assert!(done);
//! let capacity = syncer.shape().map_or(0, |s| s.capacity);
//! assert_eq!(restore.finish(capacity)?.root_hash(), snap.root_hash());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod books;
mod error;
mod events;
#[cfg(feature = "http")]
pub mod http;
mod options;
pub mod protocol;
mod request;
mod schedule;
mod sink;
mod source;
mod syncer;
mod verify;

pub use error::{BanReason, DropReason, ManifestError, OptionsError, SyncError};
pub use options::Options;
pub use protocol::{ListedSnapshot, Listing, Manifest, PROTOCOL_VERSION};
pub use request::{BodyGuard, FailureKind, Request, RequestId, SourceId, Verdict, Want};
pub use sink::{Held, Sink, SinkError};
pub use source::{Health, SourceReport, SourceStats};
pub use syncer::{Action, Event, Shape, Status, Syncer};
pub use verify::{Verified, VerifyJob};
