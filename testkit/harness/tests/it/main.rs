//! The integration tests of bavl-harness, one binary, one module per subject: its command
//! line ([`cli`]), the store
//! commands driven by the load test ([`store`], [`hardening`]), the crash soak
//! ([`crash`]), the demo ([`demo`]), `bavl sync` against lying servers ([`byzantine`]),
//! and the known-answer vectors ([`vectors_check`], [`vectors_reverify`]). They run
//! `bavl-harness` and the shipped `bavl` built beside it ([`common`]).

mod byzantine;
mod cli;
mod common;
mod crash;
mod demo;
mod hardening;
mod store;
mod vectors_check;
mod vectors_reverify;
