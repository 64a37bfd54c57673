//! The integration tests of bavl-sync, one binary (each file under `tests/` would be a
//! crate of its own, linking everything again): one module per subject.
//!
//! - [`network`]: the syncer on a simulated network (Byzantine sources, scheduling,
//!   memory, resume);
//! - [`disk`]: a sync straight into a new store's files, stopped and resumed;
//! - [`http`]: the HTTP transport on loopback sockets (a server, a static export behind a
//!   plain HTTP server, lying servers);
//! - [`hostile`]: the adversarial kinds of the lying server against the real client;
//! - [`threads`]: the fetch threads are bounded (re-run alone in a process of its own).
//!
//! The lying server is the test rig of the feature `liars`, enabled for these tests by
//! the crate's dev-dependency on itself.

mod disk;
mod hostile;
mod http;
mod network;
mod threads;
