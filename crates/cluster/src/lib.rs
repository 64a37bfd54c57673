//! # bavl-cluster
//!
//! Scale-out for bavl (DynaTree's design on a real Raft engine): the key space is cut into
//! ranges `[start, end)`; each range is an openraft group whose state machine is a bavl tree
//! of that range, so a replica's state moves as bavl chunks verified against the root. A
//! directory group (DynaTree's oracle) holds the range descriptors; clients cache them and
//! route by TiKV's region epochs. See `docs/cluster.md`.
#![forbid(unsafe_code)]

pub mod client;
pub mod consensus;
pub mod history;
pub mod lincheck;
pub mod log_store;
pub mod msg;
pub mod node;
pub mod raftnet;
pub mod range;
pub mod read;
pub mod sim;
pub mod simcheck;
pub mod simcluster;
pub mod simnet;
pub mod sm;
pub mod split;
pub mod tcp;
pub mod types;
