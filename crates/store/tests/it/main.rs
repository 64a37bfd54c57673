//! bavl-store's integration tests, one binary (each file under `tests/` would be a crate
//! of its own, linking everything again): one module per concern, the helpers in
//! [`common`].

mod bounded;
mod bulk;
mod common;
mod damage;
mod faults;
mod import;
mod ingest;
mod lock;
mod missing;
mod paged;
mod paged_reopen;
mod paged_retained;
mod power;
mod store;
