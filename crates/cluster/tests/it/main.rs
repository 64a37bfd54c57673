//! The integration tests of `bavl-cluster`, one test binary (each file under `tests/` would
//! be a crate of its own, linking everything again). Each module was a test file; the
//! simulated ones need the crate's feature `sim`, which its dev-dependency on itself turns
//! on. Run one module's tests with a filter, e.g. `cargo test -p bavl-cluster --test it
//! sim::`.
//!
//! - on the simulated network ([`bavl_cluster::simcluster`], virtual time): `sim` (whole
//!   runs under faults, histories checked), `batching`, `fetch`, `lease`, `load`, `merge`,
//!   `moves`, `reads`, and the crash tests `split_crash`, `merge_crash`, `move_crash`;
//! - over real TCP on loopback (`tcpnet` is their shared setup): `tcp`, `tcp_merge`, `mux`,
//!   `limits`;
//! - no network: `range` (the range state machine), `storage` (openraft's storage suite on
//!   our log and state machine, log crash recovery).

mod batching;
mod fetch;
mod lease;
mod limits;
mod load;
mod merge;
mod merge_crash;
mod move_crash;
mod moves;
mod mux;
mod range;
mod reads;
mod sim;
mod split_crash;
mod storage;
mod tcp;
mod tcp_merge;
mod tcpnet;
