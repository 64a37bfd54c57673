//! Today's stores beside bavl on Workload B: bavl's durable store, `jmt` 0.12
//! (on redb and on its in-memory mock), `nomt` 1.0.5, IAVL v1.2.4 (a Go program,
//! `iavl-go/`) and a `BTreeMap` + SHA-256 floor replay the same generated block stream,
//! each in its own child process and directory.
//!
//! - [`stream`]: the block stream file every store reads (also read by the Go program);
//! - [`adapters`]: one adapter per Rust store (`jmt` and `nomt` behind the cargo features
//!   of the same names);
//! - [`child`]: what each child process does and reports;
//! - [`cgroup`]: the cgroup v1 memory group a child can be run in (`cgroup` subcommand;
//!   the lab kit's `bavl_labkit::cgroup`).
//!
//! Run it with `cargo run --release -p bavl-peers --features all -- run` (see `--help`).
#![forbid(unsafe_code)]

pub mod adapters;
pub mod child;
pub use bavl_labkit::cgroup;
pub mod stream;

#[cfg(feature = "jmt")]
pub mod jmt_adapter;
#[cfg(feature = "nomt")]
pub mod nomt_adapter;
