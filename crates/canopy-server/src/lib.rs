//! A Canopy metadata server's logic, free of sockets.
//!
//! [`MetaServer::handle`] takes a caller's credentials and a decoded request and
//! returns the reply; the transport (TCP or in-process) lives in `canopy-rpc`.
//! Decisions are pure modules kept apart from the store:
//! - [`dirtable`]: the replicated directory lookup state in memory;
//! - [`resolve`]: path resolution with search checks;
//! - [`perm`], [`setattr`]: POSIX permission and attribute-change rules;
//! - [`ops_data`]: inline file contents and their spill to back-end storage.
//!
//! The operations (`ops_*`) read and write the [`canopy_store::Store`] through the
//! key layouts in [`keys`]. A server holds the whole directory table (ShardFS) and
//! the file entries whose primary it is.
//!
//! Hard rule: no I/O but the store; a request never panics the server.

pub mod counters;
pub mod dirtable;
mod fsck;
mod ids;
pub mod keys;
pub mod ops_data;
mod ops_dir;
mod ops_file;
mod ops_link;
mod ops_rename;
pub mod perm;
pub mod resolve;
mod server;
pub mod setattr;

pub use server::{MetaServer, ServerConfig};
