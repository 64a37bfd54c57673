//! The HTTP transport of protocol v1 (feature `http`): a blocking HTTP/1.1 client that
//! enforces every limit of `docs/sync-protocol.md` §3 while it reads, the server of a
//! store's retained versions, the static export, and the sync loop that drives a
//! [`crate::Syncer`] over them with threads. Only `std::net`; why, in the protocol
//! document's transport section.

pub mod client;
pub mod download;
pub mod export;
pub mod server;
pub mod wire;

pub use client::{BaseUrl, Client, UrlError};
pub use download::{download, DownloadError, Downloaded, SourceEvent, SyncConfig};
pub use export::{export, ExportReport};
pub use server::{Catalog, Server, ServerHandle};
