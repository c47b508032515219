//! The POSIX rules that both sides of Canopy apply: a server when it decides a
//! request, and a client when it must know beforehand what a server will decide
//! (a directory setattr picks its procedure from the change, `access` of a file
//! whose inode lives on another server is checked by the client).
//!
//! - [`perm`]: permission checks over a caller and an object's owner and mode.
//! - [`setattr`]: chmod, chown, truncate and utimens as one function over an
//!   attribute record.
//! - [`batch`]: whether a file a batch commit carries is one its owner could have made.
//! - [`lockset`]: the path locks a transaction asks the lock service for.
//!
//! They live here, not in `canopy-server`, so that a client can use them without
//! linking the server and its store.
//!
//! Hard rule: pure functions over `canopy-proto` types. This crate depends on
//! nothing of Canopy but `canopy-proto`: no runtime, no store, no transport, no
//! I/O, no clock (a caller passes the time in).

pub mod batch;
pub mod lockset;
pub mod perm;
pub mod setattr;
