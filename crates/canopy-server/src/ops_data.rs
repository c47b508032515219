//! File contents kept inside the metadata, and their hand-over to back-end storage.
//!
//! A regular file starts inline: its bytes live in its inode (seed 001 keeps small
//! files in the metadata table). A write that would take it past the client's
//! `inline_max`, or past the servers' own [`INLINE_LIMIT`] whatever the client
//! asks, is answered `Spill`: the client copies the inline bytes to the
//! back-end file named by the file's FID and confirms with `Spilled`, carrying a
//! digest of what it copied; the server flips the file to back-end only if the
//! inline bytes are still those, so a write that slipped in between is never lost
//! (the client gets `ESTALE` and copies again). From then on the client reads and
//! writes the back-end file directly and reports growth with `Extend`.
//!
//! Every data request is checked against the file like an open: read permission
//! for `ReadData`, write permission for the others (root passes). A client
//! serving descriptors that outlive a chmod (POSIX allows that) checks at open
//! and sends its data requests as root, as the FUSE mount does.
//!
//! The byte-level rules are pure functions at the top of this file.

use crate::keys::{self, DIRTIMES, ENTRIES, INODES};
use crate::mode::{Located, Target};
use crate::server::MetaServer;
use canopy_posix::perm::{self, Owner};
use canopy_posix::setattr;
use canopy_proto::attr::access;
use canopy_proto::msg::{DirChange, DirTimes, FileRef, Inode, Record, INLINE_LIMIT, READ_REPLY_MAX};
use canopy_proto::fid::contents_digest;
use canopy_proto::{Attr, Creds, Errno, FileKind, Reply};
use canopy_store::Batch;

/// Up to `len` bytes (at most [`READ_REPLY_MAX`]) of inline contents at `offset`
/// of a file `size` bytes long; bytes past the stored ones read as zeros. A
/// file extended by truncate may be far longer than what is stored, so `len`
/// is capped, not trusted.
pub fn read_inline(stored: &[u8], size: u64, offset: u64, len: u32) -> Vec<u8> {
    let end = size.min(offset.saturating_add(len.min(READ_REPLY_MAX) as u64));
    if offset >= end {
        return Vec::new();
    }
    let mut out = vec![0u8; (end - offset) as usize];
    if let Some(have) = stored.get(offset as usize..) {
        let n = have.len().min(out.len());
        out[..n].copy_from_slice(&have[..n]);
    }
    out
}

/// Writes `data` at `offset` into inline contents; returns the new size.
pub fn write_inline(stored: &mut Vec<u8>, size: u64, offset: u64, data: &[u8]) -> u64 {
    let end = offset as usize + data.len();
    if stored.len() < end {
        stored.resize(end, 0);
    }
    stored[offset as usize..end].copy_from_slice(data);
    size.max(end as u64)
}

/// After a truncate: drops stored inline bytes past the new size.
pub fn fit_inline_to_size(inode: &mut Inode) {
    let size = inode.attr.size;
    if let Some(stored) = inode.data.as_mut().and_then(|d| d.inline.as_mut()) {
        if stored.len() as u64 > size {
            stored.truncate(size as usize);
        }
    }
}

/// A write changed the contents: mtime and ctime are now, and a writer without
/// the privilege to keep setuid and setgid (`kill`) clears them, as write(2) does.
fn contents_changed(attr: &mut Attr, kill: bool, now: i64) {
    attr.mtime = now;
    attr.ctime = now;
    if kill {
        attr.mode = setattr::drop_suid(attr.mode);
    }
}

/// Whether a data change made by `creds` clears setuid and setgid: a caller
/// other than root never keeps them; root does unless it writes for an
/// unprivileged process (`kill_suid`).
fn kills_suid(creds: &Creds, kill_suid: bool) -> bool {
    kill_suid || !creds.is_root()
}

/// Whether a write ending at `end` stays inline: within the client's `inline_max`
/// and the servers' [`INLINE_LIMIT`]. An `inline_max` of 0 asks for a spill
/// whatever the size (a file about to lose its last name while open: its
/// contents must outlive the entry).
pub fn fits_inline(end: u64, inline_max: u32) -> bool {
    inline_max != 0 && end <= inline_max.min(INLINE_LIMIT) as u64
}

/// Where a data request's inode is stored, to write it back.
enum Slot {
    Entry { parent: u64, name: String },
    Shared { ino: u64 },
}

impl MetaServer {
    /// The inode `at` names, if `creds` may access it as `want` (R or W), or
    /// `Redirect` to the home server of a shared inode (which checks it there).
    fn data_target(&self, creds: &Creds, at: &FileRef, want: u32) -> Result<Result<(Slot, Inode), Reply>, Errno> {
        let (slot, inode) = match (at, Target::of_file(at)?) {
            (FileRef::Ino(ino), _) => (Slot::Shared { ino: *ino }, self.load_inode(*ino)?),
            (_, None) => return Err(Errno::EINVAL),
            (_, Some(target)) => match self.check_placement(&target).and_then(|_| self.locate(creds, &target))? {
                Located::Root | Located::Dir { .. } => return Err(Errno::EISDIR),
                Located::Absent { .. } => return Err(Errno::ENOENT),
                Located::File { parent, name, record: Record::Inode(i) } => (Slot::Entry { parent, name }, i),
                Located::File { record: Record::Linked { ino, home }, .. } if home == self.cfg.index => {
                    (Slot::Shared { ino }, self.load_inode(ino)?)
                }
                Located::File { record: Record::Linked { ino, home }, .. } => return Ok(Err(Reply::Redirect { ino, home })),
            },
        };
        if inode.attr.kind != FileKind::File || inode.data.is_none() {
            return Err(Errno::EINVAL);
        }
        perm::require(creds, Owner::of_attr(&inode.attr), false, want)?;
        Ok(Ok((slot, inode)))
    }

    fn store_inode(&self, slot: Slot, inode: &Inode) -> Result<(), Errno> {
        let mut b = Batch::new();
        match slot {
            Slot::Entry { parent, name } => {
                b.put(ENTRIES, self.entry_key(parent, &name), keys::encode(&Record::Inode(inode.clone())))
            }
            Slot::Shared { ino } => b.put(INODES, keys::id_key(ino).to_vec(), keys::encode(inode)),
        }
        self.write(b)
    }

    pub(crate) fn read_data(&self, creds: &Creds, at: &FileRef, offset: u64, len: u32) -> Result<Reply, Errno> {
        let (_, inode) = match self.data_target(creds, at, access::R)? {
            Ok(found) => found,
            Err(redirect) => return Ok(redirect),
        };
        let data = inode.data.expect("checked by data_target");
        Ok(match &data.inline {
            Some(stored) => Reply::Data(read_inline(stored, inode.attr.size, offset, len)),
            None => Reply::Backend { fid: data.fid, size: inode.attr.size },
        })
    }

    /// Under the mutation lock: finds the file `at` names (checking write
    /// permission) and lets `change` edit its
    /// inode. `change` answers `Some(reply)` to stop with that reply and store
    /// nothing, or `None` to store the inode and answer its attributes.
    fn change_data(
        &self,
        creds: &Creds,
        at: &FileRef,
        change: impl FnOnce(&mut Inode) -> Result<Option<Reply>, Errno>,
    ) -> Result<Reply, Errno> {
        let path = Target::of_file(at)?;
        // A path may name a hard-linked file whose inode is shared: both locks.
        let _g = match &path {
            Some(p) => self.lock_entries(&[p], true)?,
            None => self.lock_inodes(),
        };
        let (slot, mut inode) = match self.data_target(creds, at, access::W)? {
            Ok(found) => found,
            Err(redirect) => return Ok(redirect),
        };
        if let Some(answer) = change(&mut inode)? {
            return Ok(answer);
        }
        self.store_inode(slot, &inode)?;
        Ok(Reply::Attr(inode.attr))
    }

    pub(crate) fn write_data(&self, creds: &Creds, at: &FileRef, offset: u64, bytes: &[u8], inline_max: u32, kill_suid: bool) -> Result<Reply, Errno> {
        let now = self.now_ns();
        self.change_data(creds, at, |inode| {
            let size = inode.attr.size;
            let data = inode.data.as_mut().expect("checked by data_target");
            let fid = data.fid;
            let Some(stored) = data.inline.as_mut() else {
                return Ok(Some(Reply::Backend { fid, size }));
            };
            let end = offset.checked_add(bytes.len() as u64).ok_or(Errno::EFBIG)?;
            if bytes.is_empty() && inline_max != 0 {
                return Ok(Some(Reply::Attr(inode.attr.clone()))); // POSIX: a zero-length write changes nothing
            }
            // Checked before anything is allocated: `offset` is the client's word.
            if !fits_inline(end, inline_max) {
                return Ok(Some(Reply::Spill { fid, data: stored.clone(), size }));
            }
            inode.attr.size = write_inline(stored, size, offset, bytes);
            contents_changed(&mut inode.attr, kills_suid(creds, kill_suid), now);
            Ok(None)
        })
    }

    pub(crate) fn spilled(&self, creds: &Creds, at: &FileRef, len: u64, digest: u64) -> Result<Reply, Errno> {
        self.change_data(creds, at, |inode| {
            let data = inode.data.as_mut().expect("checked by data_target");
            match &data.inline {
                None => return Ok(Some(Reply::Attr(inode.attr.clone()))),
                Some(stored) if stored.len() as u64 != len || contents_digest(stored) != digest => return Err(Errno::ESTALE),
                Some(_) => data.inline = None,
            }
            Ok(None)
        })
    }

    pub(crate) fn extend(&self, creds: &Creds, at: &FileRef, end: u64, kill_suid: bool) -> Result<Reply, Errno> {
        let now = self.now_ns();
        self.change_data(creds, at, |inode| {
            inode.attr.size = inode.attr.size.max(end);
            contents_changed(&mut inode.attr, kills_suid(creds, kill_suid), now);
            Ok(None)
        })
    }

    /// Records `change`, made at `at_ns`, in the times of the directory at
    /// `path` (only the server keeping a directory's times holds them).
    pub(crate) fn touch_dir(&self, creds: &Creds, path: &Target, change: DirChange, at_ns: i64) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[path], false)?;
        let id = self.times_id(self.dir_id(creds, path)?);
        let now = self.now_ns();
        let kept = self.load_dir_times(id)?.unwrap_or(DirTimes { atime: now, mtime: now, ctime: now });
        if let Some(times) = touched_times(kept, change, at_ns.min(now)) {
            let mut b = Batch::new();
            b.put(DIRTIMES, keys::id_key(id).to_vec(), keys::encode(&times));
            self.write(b)?;
        }
        Ok(Reply::Unit)
    }
}

/// A directory's times once `change`, made at `at`, is recorded; `None` if
/// it changes nothing. A touch may arrive after later changes were recorded
/// (it was owed, or came from another client): it never moves a time back,
/// and a names change older than the ctime (the directory renamed since)
/// still gives the mtime its time. (A setattr of the times made since by
/// another client may so lose to it; a client sends what it owes for a
/// directory before its own setattr of it.)
pub fn touched_times(kept: DirTimes, change: DirChange, at: i64) -> Option<DirTimes> {
    let next = match change {
        DirChange::Names if at > kept.ctime => DirTimes { mtime: at, ctime: at, ..kept },
        DirChange::Names => DirTimes { mtime: kept.mtime.max(at), ..kept },
        DirChange::Renamed => DirTimes { ctime: kept.ctime.max(at), ..kept },
    };
    (next != kept).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_size_and_fill_unstored_bytes_with_zeros() {
        assert_eq!(read_inline(b"hello", 5, 1, 3), b"ell");
        assert_eq!(read_inline(b"hello", 5, 3, 100), b"lo");
        assert_eq!(read_inline(b"hello", 5, 5, 10), b"");
        assert_eq!(read_inline(b"hi", 6, 0, 10), b"hi\0\0\0\0");
        assert_eq!(read_inline(b"", 4, 2, 1), b"\0");
    }

    #[test]
    fn reads_are_capped_whatever_the_size() {
        let huge = 1u64 << 40; // an inline file extended by truncate
        assert_eq!(read_inline(b"ab", huge, 0, u32::MAX).len(), READ_REPLY_MAX as usize);
        assert_eq!(read_inline(b"ab", huge, huge - 3, u32::MAX), vec![0u8; 3]);
    }

    #[test]
    fn the_servers_limit_bounds_every_client_limit() {
        assert!(fits_inline(10, 64));
        assert!(!fits_inline(65, 64));
        assert!(!fits_inline(1, 0), "0 asks for a spill");
        assert!(fits_inline(INLINE_LIMIT as u64, u32::MAX));
        assert!(!fits_inline(INLINE_LIMIT as u64 + 1, u32::MAX));
        assert!(!fits_inline((1 << 30) + 1, u32::MAX));
    }

    #[test]
    fn a_touch_records_the_time_of_its_change_unless_a_later_one_is_recorded() {
        let kept = DirTimes { atime: 5, mtime: 10, ctime: 10 };
        assert_eq!(touched_times(kept, DirChange::Names, 20), Some(DirTimes { atime: 5, mtime: 20, ctime: 20 }));
        assert_eq!(touched_times(kept, DirChange::Renamed, 20), Some(DirTimes { atime: 5, mtime: 10, ctime: 20 }));
        assert_eq!(touched_times(kept, DirChange::Names, 10), None, "nothing newer");
        assert_eq!(touched_times(kept, DirChange::Names, 7), None, "a late touch undoes nothing");
        assert_eq!(touched_times(kept, DirChange::Renamed, 7), None);
        let renamed = DirTimes { atime: 5, mtime: 10, ctime: 30 };
        assert_eq!(touched_times(renamed, DirChange::Names, 20), Some(DirTimes { atime: 5, mtime: 20, ctime: 30 }), "a change made before a rename still moves the mtime");
    }

    #[test]
    fn writes_extend_with_zeros_and_never_shrink() {
        let mut stored = b"abc".to_vec();
        assert_eq!(write_inline(&mut stored, 3, 5, b"xy"), 7);
        assert_eq!(stored, b"abc\0\0xy");
        assert_eq!(write_inline(&mut stored, 7, 0, b"Z"), 7);
        assert_eq!(stored, b"Zbc\0\0xy");
        // A file extended by truncate (size > stored) keeps its size.
        let mut short = b"a".to_vec();
        assert_eq!(write_inline(&mut short, 100, 0, b"b"), 100);
    }
}
