//! The HTTP transport of protocol v1 (feature `http`): a blocking HTTP/1.1 client that
//! enforces every limit of `docs/sync-protocol.md` §3 while it reads (and, through
//! [`get`], serves any other small bounded `GET`), the server of a store's retained
//! versions (or of an export directory), the static export, and the sync loop that drives
//! a [`crate::Syncer`] over them with threads. Only `std::net`; why, in the protocol
//! document's transport section.
//!
//! With the feature `liars` (never enabled by the shipped `bavl`), `byzantine` adds
//! the lying server of the tests, the demo harness and the lab.

#[cfg(feature = "liars")]
pub mod byzantine;
pub mod client;
pub mod download;
pub mod export;
mod reader;
pub mod server;
pub mod wire;

#[cfg(feature = "liars")]
pub use byzantine::Byzantine;
pub use client::{get, BaseUrl, Client, GetError, Limits, Response, UrlError};
pub use download::{
    download, download_tree, DownloadError, Downloaded, Progress, SourceEvent, SyncConfig,
};
pub use export::{export, export_loading, ExportDir, ExportReport};
pub use server::{Catalog, Objects, Server, ServerHandle};
