//! A Canopy metadata server's logic, free of sockets.
//!
//! [`MetaServer::handle`] takes a caller's credentials and a decoded request and
//! returns the reply; the transport (TCP or in-process) lives in `canopy-rpc`.
//! Decisions are pure modules kept apart from the store:
//! - [`dirtable`]: the replicated directory lookup state in memory;
//! - [`resolve`]: path resolution with search checks (the permission rules
//!   themselves, and those of setattr, are `canopy-posix`'s, shared with clients);
//! - [`ops_data`]: inline file contents and their spill to back-end storage.
//!
//! The operations (`ops_*`) read and write the [`canopy_store::Store`] through the
//! key layouts in [`keys`]. A server holds the whole directory table (ShardFS) and
//! the file entries whose primary it is.
//!
//! Hard rule: no I/O but the store; a request never panics the server. It never
//! depends on the lock service, the client or anything above them; it names
//! `canopy-rpc` only to implement its `Service` trait.

pub mod counters;
pub mod dirtable;
mod fsck;
mod ids;
pub mod keys;
mod mutlock;
pub mod ops_data;
mod ops_dir;
mod ops_file;
mod ops_link;
mod ops_rename;
pub mod resolve;
mod server;

pub use server::{MetaServer, MutationHook, ServerConfig};
