//! The Canopy client library.
//!
//! [`Client`] is the one API applications, the CLI, the bench and the FUSE mount
//! use. Behind it a namespace strategy ([`Namespace`]) decides routing,
//! replication and caching: ShardFS (`shardfs`, seed 000 §3.3), IndexFS
//! (`indexfs`, §3.1) and Giraffa (`giraffa`, §3.2), held to the same semantics
//! suite (Giraffa with its relaxed permission checks). [`open_namespace`] builds the one a cluster's mode names;
//! nothing outside it names a mode's type.
//!
//! - [`core`]: what every mode's client holds (transport, counters, FIDs, reclaim,
//!   directory times, options); [`txn`]: transactions under the lock service and
//!   the named steps tests stop them at. `core`, `txn`, [`touches`], [`data`]
//!   and `namespace` import each other on purpose: `ClientCore` holds the
//!   transaction hooks, the directory touches and the reclaim list that act
//!   on it, and `namespace::Res` is the result type of all of them; the five
//!   are one layer, each file one part of it.
//! - [`batch`]: BatchFS on the wire: recording a batch at the servers and
//!   landing its files in staged, verified, per-server tables.
//! - [`cluster`]: cluster files (where the servers and lock service listen) and how a
//!   command finds one.
//! - [`counters`]: RPCs sent per server, retries and lock waits, for amplification
//!   and load figures.
//! - [`data`]: FIDs, and what reads and writes of file contents answer.
//! - [`delegate`]: operations a server runs for a client that holds a user key.
//! - [`keyfile`]: key files (cluster and user keys) and where a command finds one.
//! - [`sweep`]: the lock service's loop that recovers expired transactions.
//! - [`touches`]: one directory-times update per directory per window in a
//!   burst of changes (ShardFS with directory times on).
//! - [`blocking`]: a synchronous wrapper.
//!
//! Hard rule: this crate never depends on `canopy-server`, `canopy-lock` or
//! `canopy-store`. Every program that talks to a cluster links it, and a mount,
//! a bench or an application should not have to link a server or RocksDB. The
//! rules it shares with the servers are `canopy-posix`'s; the in-process cluster
//! its tests run against is `canopy-testkit`'s.

pub mod batch;
pub mod blocking;
pub mod cluster;
pub mod core;
pub mod counters;
pub mod data;
pub mod delegate;
mod factory;
mod file_data;
mod follow;
pub mod fsck;
pub mod keyfile;
mod monotonic;
mod namespace;
mod recover;
pub mod sweep;
pub mod touches;
pub mod txn;

/// Each mode's client, a module a mode of the registry
/// (`canopy_proto::for_each_mode!`, `src/<mode>/`), and `open_mode`, which
/// [`open_namespace`] asks for the one a cluster runs. A mode's module has
/// `fn open(&Options, Backend, &NsOptions) -> Result<Arc<dyn Namespace>, String>`.
macro_rules! client_of_each_mode {
    ($($name:ident => $variant:ident($options:ident)),* $(,)?) => {
        $(mod $name;)*

        /// The client of the mode `opts` names, over `backend`.
        fn open_mode(opts: &cluster::ModeOptions, backend: Backend, ns: &NsOptions) -> Result<std::sync::Arc<dyn Namespace>, String> {
            match opts {
                $(cluster::ModeOptions::$variant(o) => $name::open(o, backend, ns),)*
            }
        }
    };
}

canopy_proto::for_each_mode!(client_of_each_mode);

pub use crate::core::NsOptions;
pub use factory::{open_namespace, Backend};
pub use namespace::{BulkOutcome, Client, Namespace};
