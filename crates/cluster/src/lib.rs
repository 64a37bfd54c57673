//! # bavl-cluster
//!
//! Scale-out for bavl (DynaTree's design on a real Raft engine): the key space is cut into
//! ranges `[start, end)`; each range is an openraft group whose state machine is a bavl tree
//! of that range, so a replica's state moves as bavl chunks verified against the root. A
//! directory group (DynaTree's oracle) holds the range descriptors; clients cache them and
//! route by TiKV's region epochs. See `docs/cluster.md`.
//!
//! - [`range`]: the deterministic state machine of a range (and of the directory);
//! - [`sm`], [`log_store`], [`snapmark`], [`tombstone`]: openraft's state machine and
//!   durable log for one group, the snapshot mark that orders their files, the markers of
//!   deleted replicas;
//! - [`consensus`], [`propose`]: our engine trait and its openraft implementation, the
//!   leader's batching of client writes;
//! - [`directory`], [`dirroute`]: the directory's node list; descriptors following Raft
//!   membership; finding the directory from any node, wherever its replicas moved;
//! - [`node`], [`split`], [`read`]: a node hosting many groups, its leader duties, its reads;
//! - [`moves`], [`cleanup`], [`rebalance`], [`plan`]: range moves by membership change,
//!   removed replicas, the rebalancer and its plan;
//! - [`merge`], [`merge_driver`], [`merge_plan`]: merges of small neighbouring ranges;
//! - [`load`], [`liveness`]: ranges' size and load, load splits, node heartbeats and dead
//!   nodes;
//! - [`msg`], [`raftnet`], [`tcp`]: messages, openraft's network over them, TCP;
//! - [`versions`], [`fetch`]: attested versions, snapshots fetched as chunks from several
//!   replicas;
//! - [`client`]: the routing-cache client;
//! - [`local`]: a local cluster of node processes on loopback (the demo's, the lab's);
//! - `sim`, `simnet`, `simcheck`, `simcluster`: the deterministic simulation, and
//!   `history`, `lincheck`: histories and the linearizability check; all six only with the
//!   feature `sim`.
//!
//! ## Features
//!
//! - `sim` (off by default): the deterministic simulation, history recording and checking,
//!   and tokio's `test-util` (virtual time) under them. For tests and the lab only: the
//!   shipped binary never enables it. `cargo test -p bavl-cluster` turns it on (the crate
//!   is its own dev-dependency with `sim`).
#![forbid(unsafe_code)]

pub mod barrier;
pub mod cleanup;
pub mod client;
pub mod codec;
pub mod consensus;
pub mod directory;
pub mod dirroute;
pub mod fetch;
#[cfg(feature = "sim")]
pub mod history;
pub mod lease;
pub mod limits;
#[cfg(feature = "sim")]
pub mod lincheck;
pub mod liveness;
pub mod load;
pub mod local;
pub mod log_store;
pub mod merge;
pub mod merge_driver;
pub mod merge_plan;
pub mod moves;
pub mod msg;
pub mod mux;
pub mod node;
pub mod plan;
pub mod propose;
pub mod raftnet;
pub mod range;
pub mod read;
pub mod rebalance;
pub mod replicas;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "sim")]
pub mod simcheck;
#[cfg(feature = "sim")]
pub mod simcluster;
#[cfg(feature = "sim")]
pub mod simnet;
pub mod sm;
pub mod snapmark;
pub mod split;
pub mod tcp;
pub mod tombstone;
pub mod types;
pub mod versions;
