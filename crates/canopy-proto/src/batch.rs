//! BatchFS (seed 002): what a batch commit carries on the wire.
//!
//! A batch is a private namespace a client worked in without RPCs. Its commit
//! sends each server the files that server will hold, in chunks it keeps
//! (`BatchStage`) until the client asks it to verify and ingest them all at
//! once (`BatchApply`): a server's share lands whole or not at all.

use crate::fid::Fid;
use crate::msg::Inode;
use crate::Errno;
use serde::{Deserialize, Serialize};

/// The most files one `BatchStage` chunk may carry (a frame bounds it too).
pub const CHUNK_MAX: usize = 8192;

/// Chunks one batch may stage on one server: with frames of at most 4 MiB, a
/// batch holds at most 1 GiB of a server's store, and its apply as much memory.
pub const CHUNKS_MAX: u32 = 256;

/// Open batches one user may have recorded on a server.
pub const OPEN_MAX: usize = 64;

/// One file, symlink or special file a commit makes: its name in the chunk's
/// directory and the inode the private namespace gave it. The server assigns
/// the inode number; everything else must be what its owner could have made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFile {
    pub name: String,
    pub inode: Inode,
}

impl BatchFile {
    /// The FID that identifies this file across repeated commits (a file
    /// already holding it at its name was landed by an earlier try).
    pub fn fid(&self) -> Option<Fid> {
        self.inode.data.as_ref().map(|d| d.fid)
    }
}

/// A batch as a server records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    pub batch: u64,
    pub uid: u32,
    pub gid: u32,
    /// The directory the batch's private namespace is rooted at.
    pub root: String,
    /// When it was opened (ns since the epoch, server clock).
    pub opened_ns: u64,
    /// Files staged here and not yet applied.
    pub staged: u64,
}

/// One staged file an apply refused: its chunk, its index in the chunk, why.
pub type Rejected = (u32, u32, Errno);
