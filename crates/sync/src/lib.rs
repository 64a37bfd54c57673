//! State sync from many untrusted sources: the wire protocol and the sans-I/O scheduler.
//!
//! The only trusted inputs are a root hash and its version. [`Syncer`] is a deterministic
//! state machine fed with [`Event`]s (responses, failures, verification outcomes, time)
//! that emits [`Action`]s (requests, cancellations, verification jobs, bans, completion);
//! it owns the [`bavl_core::Restore`], keeps only chunks that verified against the root,
//! bans a source on its first invalid response and asks another, adapts each source's
//! concurrency to its latency, and bounds the bytes it holds for unverified responses.
//! [`protocol`] gives the HTTP paths, documents and limits (`docs/sync-protocol.md`),
//! [`resume`] the file that makes a sync resumable. A transport (HTTP, or the simulated
//! network of the tests) is a thin loop around these.
//!
//! ```
//! use std::time::Duration;
//! use bavl_core::{Sha256, Tree};
//! use bavl_sync::{Action, Event, Manifest, Options, Syncer, Want};
//!
//! let mut tree = Tree::<Sha256>::new();
//! for i in 0u32..500 {
//!     tree.insert(&i.to_be_bytes(), b"value")?;
//! }
//! let snap = tree.snapshot();
//! let mut syncer = Syncer::<Sha256>::new(snap.root_hash(), 1, Options::default())?;
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
//!         Action::Done => done = true,
//!         _ => {}
//!     }
//! }
//! assert!(done);
//! assert_eq!(syncer.finish()?.root_hash(), snap.root_hash());
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
pub mod resume;
mod schedule;
mod source;
mod syncer;
mod verify;

pub use error::{BanReason, DropReason, ManifestError, OptionsError, ResumeError, SyncError};
pub use options::Options;
pub use protocol::{ListedSnapshot, Listing, Manifest, PROTOCOL_VERSION};
pub use request::{BodyGuard, FailureKind, Request, RequestId, SourceId, Verdict, Want};
pub use source::{Health, SourceReport, SourceStats};
pub use syncer::{Action, Event, Status, Syncer};
pub use verify::{Verified, VerifyJob};
