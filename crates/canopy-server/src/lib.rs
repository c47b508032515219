//! A Canopy metadata server's logic, free of sockets.
//!
//! [`MetaServer::handle`] takes a caller's credentials and a decoded request and
//! returns the reply; the transport (TCP or in-process) lives in `canopy-rpc`.
//!
//! The server is a mode-independent [`core::Core`] plus a [`mode::Mode`]:
//! - the generic operations (`ops_*`: files, symlinks, special files, hard links,
//!   data, file renames, setattr, readdir of entries) act on an entry the mode
//!   located, with the permission rules of `canopy-posix`;
//! - a mode decides how a path or a (directory id, name) resolves, where objects
//!   live, which directory a mutation serialises on, and serves its own requests.
//!   [`shardfs`] is the replicated directory table of seed 000 §3.3;
//!   [`indexfs`] the directory partitions and leases of seed 000 §3.1;
//!   [`giraffa`] the table-partitioned baseline of seed 000 §3.2.
//!
//! The operations read and write the [`canopy_store::Store`] through the key
//! layouts in [`keys`]. Hard rule: no I/O but the store, its table files
//! (`tables`) and, for background work (an IndexFS split), calls to other
//! servers through the `Transport` it is given ([`MetaServer::start_background`]);
//! a request never panics the server. It never depends on the lock service,
//! the client or anything above them; it names `canopy-rpc` for its `Service`
//! trait, that peer `Transport` and the kernel's random bytes.

pub mod core;
pub mod counters;
mod doorbell;
mod fsck;
mod ids;
pub mod keys;
pub mod mode;
mod mutlock;
mod ops_batch;
pub mod ops_data;
mod ops_file;
mod ops_link;
mod ops_readdir;
mod ops_rename;
mod revoked;
mod server;
mod tables;

/// Each mode's server, a module a mode of the registry
/// (`canopy_proto::for_each_mode!`, `src/<mode>/`), and [`open_mode`], which
/// opens the one a cluster runs. A mode's module has
/// `fn open(&Options, &mode::Opening) -> Result<Box<dyn mode::Mode>, String>`.
macro_rules! server_of_each_mode {
    ($($name:ident => $variant:ident($options:ident)),* $(,)?) => {
        $(pub mod $name;)*

        /// The server part of the mode `opts` names.
        fn open_mode(opts: &canopy_proto::modes::ModeOptions, at: &mode::Opening) -> Result<Box<dyn mode::Mode>, String> {
            match opts {
                $(canopy_proto::modes::ModeOptions::$variant(o) => $name::open(o, at),)*
            }
        }
    };
}

canopy_proto::for_each_mode!(server_of_each_mode);

pub use crate::core::{MutationHook, ServerConfig};
pub use ids::ROOT_ID;
pub use mode::Target;
pub use indexfs::{SplitHook, SplitStep};
pub use server::{random_proof_key, MetaServer, ModeOptions, MODES};
