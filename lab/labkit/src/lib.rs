//! The lab's report kit: what every benchmark of `lab/` writes beside its figures.
//!
//! - [`machine`]: one [`Machine`] block (CPU, cores, memory, kernel, toolchain, commit and
//!   dirty flag, date, command line, load), the same in every result file.
//! - [`stats`]: percentiles and medians under one rule (nearest rank), mean and standard
//!   deviation.
//! - [`plot`]: the font registered once, PNG files, legends, category bar panels and the
//!   palette the figures share.
//! - [`cgroup`]: a cgroup v1 memory group for a measured child process (root).
//! - [`procstat`]: a live child's peak resident set and CPU time, from `/proc`.
//! - [`paths`]: the repository's root and its `docs/results/`, where default outputs go
//!   whatever the working directory.
//!
//! Nothing here measures the store; a caller that cannot find a font skips its plots
//! (see [`plot::ensure_font`]).
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod machine;
pub mod paths;
pub mod plot;
pub mod procstat;
pub mod stats;

pub use machine::Machine;
pub use paths::{repo_path, repo_root, results_path};
