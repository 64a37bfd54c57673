//! `bavl-joinlab`: a node joins with a state larger than its memory. In one run, per state
//! size: the state built by the bulk import (`bavl import`, [`pairs`] writes its input),
//! served by ten `bavl serve` processes of which three lie, synced by a fresh `bavl sync`
//! writing to disk inside a memory cgroup, beside the floor — the same bytes fetched by a
//! plain HTTP client ([`fetch`]) — and the in-memory sync of before; the disk's write rate
//! and SHA-256's rate as the import's floors ([`floors`]). [`run`] drives the processes
//! ([`proc`]); [`report`] writes `docs/results/join-to-disk.json`, its CSV and its figure.
#![forbid(unsafe_code)]

pub mod fetch;
pub mod floors;
pub mod pairs;
pub mod proc;
pub mod report;
pub mod run;
