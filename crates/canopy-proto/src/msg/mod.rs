//! Requests and replies. One enum for every request a Canopy daemon accepts (metadata
//! servers and the lock service share the codec; each answers `ENOSYS` to what is not
//! its own), and one for every reply.
//!
//! Wire stability: every request has an explicit opcode, grouped by family —
//! `0x00xx` generic (file operations every mode serves, data, stats, delegation),
//! `0x01xx` ShardFS (replicated directory transactions, fences, migration,
//! recovery), `0x02xx` the lock service; `0x03xx` is kept for IndexFS, `0x04xx` for
//! Giraffa, `0x05xx` for BatchFS, `0x06xx` for replica groups (members' Raft
//! messages, requests applied once, a member's view of its group). A frame whose opcode disagrees with its payload
//! is rejected. The payload is postcard, whose enum tag is the variant's position,
//! so both enums are append-only: a new request or reply goes at the end of its
//! enum, never between others, and no existing opcode changes. `tests` below pins
//! both (the opcode table and every reply's tag) and fails on any such change.


mod bounds;
mod reply;
mod request;
#[cfg(test)]
mod tests;
mod types;

pub use bounds::MAX_PAGE;
pub use reply::Reply;
pub use request::*;
pub use types::*;

use crate::attr::{Attr, DirEntry, SetAttr};
use crate::fid::Fid;
use crate::Errno;
