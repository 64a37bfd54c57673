//! The integration tests of bavl-cli, one binary, one module per subject: the command
//! line itself ([`cli`]), `bavl import` ([`import`]), `bavl serve`, `bavl export` and
//! `bavl sync` as processes ([`sync`]), a paged store served and exported chunk by chunk
//! ([`paged`]), the store commands within their cache whatever the store and a missing
//! `bavl.meta` as damage ([`bounded`]). The commands that moved to `bavl-harness` (demo,
//! crashtest, loadtest, vectors, the lying server) are tested there, with the `bavl`
//! commands they drive (check, stats, get, prove).

mod bounded;
mod cli;
mod common;
mod import;
mod paged;
mod sync;
