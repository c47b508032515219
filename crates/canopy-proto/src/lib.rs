//! Canopy's wire vocabulary: everything that crosses between a client, a metadata
//! server and the lock service.
//!
//! - [`errno`]: the POSIX error contract every operation answers with.
//! - [`creds`], [`attr`]: who is asking, and what an object looks like.
//! - [`auth`]: keys and the challenge-response that binds a connection to them.
//! - [`clock`]: time behind an interface, so tests can drive it.
//! - [`fid`]: file identifiers, and where a file's contents live on back-end storage.
//! - [`path`]: the one definition of a valid Canopy path (length limits, `.`/`..`).
//! - [`giraffa`]: Giraffa's row keys, regions and directory proofs.
//! - [`modes`]: the namespace modes and each one's options (the registry).
//! - [`msg`]: the request and reply enums; one variant per operation.
//! - [`frame`]: the framed binary codec (length, request id, opcode, payload) with a
//!   size limit checked before any allocation, and decoding that tells "need more
//!   bytes" apart from "malformed".
//!
//! Hard rule: this crate does no I/O and depends on no runtime, so it can be used by
//! every other crate and fuzzed alone.

pub mod attr;
pub mod auth;
pub mod batch;
pub mod clock;
pub mod creds;
pub mod errno;
pub mod fid;
pub mod frame;
pub mod giga;
pub mod giraffa;
pub mod modes;
pub mod msg;
pub mod path;
pub mod placement;

pub use attr::{Attr, DirEntry, FileKind, SetAttr, TimeSet};
pub use creds::Creds;
pub use errno::Errno;
pub use fid::Fid;
pub use msg::{Reply, Request};
