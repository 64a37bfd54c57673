//! bavl-core's integration tests, one binary (each file under `tests/` would be a crate
//! of its own, linking everything again): one module per concern.

mod inputs;
mod model;
mod mutation;
mod paging;
mod readme;
mod restore;
mod spec_tree;
mod walk_from;
