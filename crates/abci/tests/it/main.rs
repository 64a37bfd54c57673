//! bavl-abci's integration tests, one binary (each file under `tests/` would be a crate of
//! its own, linking everything again): one module per concern, the shared chain driver and
//! model in [`support`]. They drive the `test-rigs` feature (lying servers, the baseline,
//! the null restore), which the crate's dev-dependency on itself turns on.

mod baseline;
mod blocks;
mod genesis;
mod light;
mod restore;
mod snapshots;
mod statesync;
mod support;
