//! Single-RPC operations on files and symlinks, run on the path's primary server:
//! stat, create, unlink, setattr, readlink, access.

use crate::ROOT_ID;
use crate::keys::{self, DIRTIMES, ENTRIES};
use crate::mode::{Located, Target};
use crate::server::MetaServer;
use canopy_posix::perm::{self, Owner};
use canopy_posix::setattr;
use canopy_proto::attr::S_ISGID;
use canopy_proto::msg::{DirTimes, FileData, IfExists, Inode, NewKind, Record};
use canopy_proto::{Attr, Creds, Errno, FileKind, Reply, SetAttr};
use canopy_store::Batch;

impl MetaServer {
    /// The attributes behind a file record, or where to find them.
    pub(crate) fn record_attr(&self, record: &Record) -> Result<Reply, Errno> {
        match record {
            Record::Inode(i) => Ok(Reply::Attr(i.attr.clone())),
            Record::Linked { ino, home } if *home == self.cfg.index => Ok(Reply::Attr(self.load_inode(*ino)?.attr)),
            Record::Linked { ino, home } => Ok(Reply::Redirect { ino: *ino, home: *home }),
        }
    }

    /// The owner of a record's inode for sticky-bit checks; `u32::MAX` (nobody)
    /// when the inode lives on another server, so only root or the directory's
    /// owner pass.
    pub(crate) fn record_uid(&self, record: &Record) -> u32 {
        match record {
            Record::Inode(i) => i.attr.uid,
            Record::Linked { ino, home } if *home == self.cfg.index => {
                self.load_inode(*ino).map(|i| i.attr.uid).unwrap_or(u32::MAX)
            }
            Record::Linked { .. } => u32::MAX,
        }
    }

    pub(crate) fn stat(&self, creds: &Creds, path: &Target) -> Result<Reply, Errno> {
        match self.locate(creds, path)? {
            Located::Root => self.dir_attr(ROOT_ID).map(Reply::Attr),
            Located::Dir { id, .. } => self.dir_attr(id).map(Reply::Attr),
            Located::File { record, .. } => self.record_attr(&record),
            Located::Absent { .. } => Err(Errno::ENOENT),
        }
    }

    pub(crate) fn create(&self, creds: &Creds, path: &Target, mode: u32, kind: NewKind, if_exists: IfExists) -> Result<Reply, Errno> {
        // Bad arguments are reported before the path is looked at (as a bad path is).
        match &kind {
            NewKind::Symlink(target) => canopy_proto::path::check_symlink_target(target)?,
            NewKind::Special { kind, .. } if !kind.is_special() => return Err(Errno::EINVAL),
            _ => {}
        }
        // Only a regular file is ever opened instead of created.
        let open = match (if_exists, &kind) {
            (IfExists::Open { access }, NewKind::File { .. }) => Some(access),
            _ => None,
        };
        let _g = self.lock_entries(&[path], false)?;
        let (parent, name) = match self.locate(creds, path)? {
            Located::Root | Located::Dir { .. } if open.is_some() => return Err(Errno::EISDIR),
            Located::Root | Located::Dir { .. } => return Err(Errno::EEXIST),
            Located::File { record, .. } => return self.open_existing(creds, &record, open.ok_or(Errno::EEXIST)?),
            Located::Absent { parent, name } => (parent, name),
        };
        let dir = self.dir_owner(parent)?;
        perm::require_dir_write(creds, dir)?;
        if let NewKind::Special { kind, .. } = &kind {
            perm::require_may_make(creds, *kind)?;
        }
        let ino = self.new_id()?;
        let now = self.now_ns();
        let (file_kind, mode, rdev, target, data) = match kind {
            NewKind::File => (FileKind::File, mode & 0o7777, 0, None, Some(FileData { fid: self.fid_of(ino), inline: Some(Vec::new()) })),
            NewKind::Symlink(target) => (FileKind::Symlink, 0o777, 0, Some(target), None),
            NewKind::Special { kind, rdev } => (kind, mode & 0o7777, rdev, None, None),
        };
        let size = target.as_ref().map_or(0, |t| t.len() as u64);
        let gid = if dir.mode & S_ISGID != 0 { dir.gid } else { creds.gid };
        let attr = Attr { ino, kind: file_kind, mode, uid: creds.uid, gid, size, nlink: 1, rdev, atime: now, mtime: now, ctime: now };
        let mut b = Batch::new();
        let inode = Inode { attr: attr.clone(), target, data };
        b.put(ENTRIES, self.entry_key(parent, &name), keys::encode(&Record::Inode(inode)));
        self.write_new_entry(b)?;
        self.mode().grew(self, parent, 1);
        Ok(Reply::Attr(attr))
    }

    /// A create found `record` at its name and may open it for `access`: its
    /// attributes if the caller may, or where a shared inode lives (the client
    /// checks that one, as for `access`).
    fn open_existing(&self, creds: &Creds, record: &Record, access: u32) -> Result<Reply, Errno> {
        let reply = self.record_attr(record)?;
        if let Reply::Attr(attr) = &reply {
            perm::check_open_existing(creds, attr, access)?;
        }
        Ok(reply)
    }

    pub(crate) fn unlink(&self, creds: &Creds, path: &Target) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[path], true)?;
        let (parent, name, record) = match self.locate(creds, path)? {
            Located::Root | Located::Dir { .. } => return Err(Errno::EISDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
            Located::File { parent, name, record } => (parent, name, record),
        };
        let dir = self.dir_owner(parent)?;
        perm::require_dir_write(creds, dir)?;
        perm::check_sticky(creds, dir, self.record_uid(&record))?;
        let mut b = Batch::new();
        b.delete(ENTRIES, self.entry_key(parent, &name));
        let dropped = self.drop_link(&mut b, &record)?;
        self.write(b)?;
        Ok(dropped.into_reply())
    }

    pub(crate) fn set_attr(&self, creds: &Creds, path: &Target, set: &SetAttr) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[path], false)?;
        match self.locate(creds, path)? {
            Located::Absent { .. } => Err(Errno::ENOENT),
            Located::Root => self.set_dir_times(creds, ROOT_ID, set),
            Located::Dir { id, .. } => self.set_dir_times(creds, id, set),
            Located::File { parent, name, record: Record::Inode(mut inode) } => {
                setattr::apply(creds, &mut inode.attr, set, self.now_ns())?;
                crate::ops_data::fit_inline_to_size(&mut inode);
                let attr = inode.attr.clone();
                let mut b = Batch::new();
                b.put(ENTRIES, self.entry_key(parent, &name), keys::encode(&Record::Inode(inode)));
                self.write(b)?;
                Ok(Reply::Attr(attr))
            }
            Located::File { record: Record::Linked { ino, home }, .. } if home == self.cfg.index => {
                self.inode_set_attr_locked(creds, ino, set)
            }
            Located::File { record: Record::Linked { ino, home }, .. } => Ok(Reply::Redirect { ino, home }),
        }
    }

    /// setattr on a directory through its primary: only times. Size is EISDIR, and
    /// so is mode or ownership, which are replicated state: the client answers that
    /// EISDIR with a DirSetAttr transaction.
    fn set_dir_times(&self, creds: &Creds, id: u64, set: &SetAttr) -> Result<Reply, Errno> {
        if set.touches_lookup_state() || set.size.is_some() {
            return Err(Errno::EISDIR);
        }
        let mut attr = self.dir_attr(id)?;
        setattr::apply(creds, &mut attr, set, self.now_ns())?;
        let mut b = Batch::new();
        let times = DirTimes { atime: attr.atime, mtime: attr.mtime, ctime: attr.ctime };
        b.put(DIRTIMES, keys::id_key(attr.ino).to_vec(), keys::encode(&times));
        self.write(b)?;
        Ok(Reply::Attr(attr))
    }

    pub(crate) fn readlink(&self, creds: &Creds, path: &Target) -> Result<Reply, Errno> {
        match self.locate(creds, path)? {
            Located::Absent { .. } => Err(Errno::ENOENT),
            Located::File { record: Record::Inode(Inode { target: Some(t), .. }), .. } => Ok(Reply::LinkTarget(t)),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn access(&self, creds: &Creds, path: &Target, mask: u32) -> Result<Reply, Errno> {
        let attr = match self.stat(creds, path)? {
            Reply::Attr(a) => a,
            other => return Ok(other),
        };
        if mask & 7 == 0 || perm::allows(creds, Owner::of_attr(&attr), attr.kind == FileKind::Dir, mask & 7) {
            Ok(Reply::Unit)
        } else {
            Err(Errno::EACCES)
        }
    }
}
