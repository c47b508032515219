//! The client's side of file contents: what data requests answer, and the
//! hook through which freed back-end files are reported.
//!
//! The metadata service never touches back-end storage (seed 003 §IV.G: clients
//! reach it directly through their own mounts). It only says where contents are:
//! inline in the metadata, or under a FID in back-end storage, which the
//! servers issue (`canopy_proto::fid`).

use canopy_proto::{Attr, Fid};

/// 64 random bits from the kernel for this client instance's id (IndexFS's
/// servers keep leases by it); the clock and process id if that fails.
pub fn new_client_id() -> u64 {
    canopy_rpc::random::u64().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        canopy_proto::placement::mix64(t ^ ((std::process::id() as u64) << 32))
    })
}

/// What a read of file contents found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRead {
    /// Inline bytes (shorter than asked at the end of the file).
    Inline(Vec<u8>),
    /// The contents are in back-end storage.
    Backend { fid: Fid, size: u64 },
}

impl DataRead {
    /// A `ReadData` answer.
    pub(crate) fn from_reply(reply: canopy_proto::Reply) -> Result<DataRead, canopy_proto::Errno> {
        match reply {
            canopy_proto::Reply::Data(bytes) => Ok(DataRead::Inline(bytes)),
            canopy_proto::Reply::Backend { fid, size } => Ok(DataRead::Backend { fid, size }),
            other => Err(crate::core::unexpected(other)),
        }
    }
}

/// What a write of file contents did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataWrite {
    /// Written inline; the file's new attributes.
    Written(Attr),
    /// Nothing written: the contents are in back-end storage.
    Backend { fid: Fid, size: u64 },
    /// Nothing written: the write would outgrow inline storage. Copy `data` (the
    /// file is `size` bytes, zeros past `data`) to the back-end file, then confirm
    /// with `spilled`.
    Spill { fid: Fid, data: Vec<u8>, size: u64 },
}

impl DataWrite {
    /// A `WriteData` answer.
    pub(crate) fn from_reply(reply: canopy_proto::Reply) -> Result<DataWrite, canopy_proto::Errno> {
        match reply {
            canopy_proto::Reply::Attr(a) => Ok(DataWrite::Written(a)),
            canopy_proto::Reply::Backend { fid, size } => Ok(DataWrite::Backend { fid, size }),
            canopy_proto::Reply::Spill { fid, data, size } => Ok(DataWrite::Spill { fid, data, size }),
            other => Err(crate::core::unexpected(other)),
        }
    }
}

/// Told when the last name of a file with back-end contents is gone, so whoever
/// holds the back-end storage can delete (or, if the file is still open, later
/// delete) its contents.
pub trait Reclaim: Send + Sync + 'static {
    fn freed(&self, fid: Fid);
}
