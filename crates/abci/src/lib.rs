//! # bavl-abci
//!
//! A CometBFT application (ABCI 0.38) whose state is a [`bavl_store::Store`]: the app
//! hash is the bavl root, `Query` answers with bavl membership and absence proofs, and
//! state sync moves retained versions as bundles of self-verifiable chunks, each checked
//! against the light-client-verified app hash the moment it arrives.
//!
//! ```no_run
//! use bavl_abci::{App, Config};
//! let app = App::open(Config::new("/var/lib/bavl-abci"))?;
//! // CometBFT connects with proxy_app = "tcp://127.0.0.1:26658".
//! tendermint_abci::ServerBuilder::default().bind("127.0.0.1:26658", app)?.listen()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Formats (transactions, query proofs, snapshot format 1), configuration and the
//! reasons behind them: `docs/chain.md`.
//!
//! The feature `test-rigs` (off by default, never in the shipped binary) adds what the
//! tests and the chain lab measure with: a lying snapshot server (`byzantine`), the
//! Cosmos-SDK-style baseline snapshot format (`baseline`) and the null restore.
#![forbid(unsafe_code)]

pub mod app;
#[cfg(feature = "test-rigs")]
pub mod baseline;
mod block;
#[cfg(feature = "test-rigs")]
pub mod byzantine;
pub mod genesis;
pub mod home;
pub mod light;
mod metrics;
pub mod query;
pub mod report;
pub mod restore;
pub mod rpc;
pub mod snapfile;
pub mod snapshot;
pub mod snapshots;
mod statesync;
pub mod trustless;
pub mod tx;

pub use app::{App, Config, DEFAULT_CACHE_BYTES};
#[cfg(feature = "test-rigs")]
pub use byzantine::Lie;
pub use tx::{Op, Tx, TxError};
