//! Hard links. A file's inode is inline in its entry until it gains a second name;
//! then it moves to the `inodes` column family of its home server (the primary of
//! the name it had) and every name holds `Record::Linked { ino, home }`.
//! Link is two RPCs (share on the source's primary, insert on the destination's);
//! operations through a name whose inode is homed elsewhere answer `Redirect` and
//! the client asks the home server.
//!
//! A link under a transaction (every mode's client sends one) records, in the same writes, that it
//! added a count (on the inode's home: `meta` [`COUNTED`] ‖ txn ‖ ino) and
//! that it made the name (on that name's server: [`NAMED`] ‖ txn ‖ ino),
//! until it is settled: by the coordinator once the name is made (or
//! certainly not), or by recovery, which finds what a dead coordinator
//! recorded (`LinkPending`) and takes the count back unless the name was
//! made. The name's own record decides, not whether the name is there: it
//! may have been made and unlinked since. So a coordinator that dies
//! between its two steps leaves no count too high, and a settle sent twice,
//! or late, changes nothing.

use crate::keys::{self, ENTRIES, INODES, META};
use crate::mode::{Located, Target};
use crate::server::MetaServer;
use canopy_posix::perm;
use canopy_posix::setattr;
use canopy_proto::msg::{Inode, Record};
use canopy_proto::{Creds, Errno, Fid, FileKind, Reply, SetAttr};
use canopy_store::Batch;

/// What dropping one name left for the client to finish.
#[derive(Debug, Default)]
pub(crate) struct DroppedName {
    /// A shared inode on another server, to decrement there.
    pub remote: Option<(u64, u32)>,
    /// Back-end contents whose last name went, to delete.
    pub freed: Option<Fid>,
}

impl DroppedName {
    pub(crate) fn into_reply(self) -> Reply {
        Reply::Dropped { remote: self.remote, freed: self.freed }
    }
}

const COUNTED: &[u8] = b"link-counted/";
const NAMED: &[u8] = b"link-named/";

/// The most inodes one `LinkPending` answers of each kind (a link records one).
const PENDING_MAX: usize = 64;

fn txn_prefix(kind: &[u8], txn: u64) -> Vec<u8> {
    let mut k = kind.to_vec();
    k.extend_from_slice(&txn.to_be_bytes());
    k
}

fn txn_key(kind: &[u8], txn: u64, ino: u64) -> Vec<u8> {
    let mut k = txn_prefix(kind, txn);
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

/// Adds to `b` that link transaction `txn` (if any) did `kind` for `ino` here.
fn record_for(b: &mut Batch, kind: &[u8], txn: Option<u64>, ino: u64) {
    if let Some(t) = txn {
        b.put(META, txn_key(kind, t, ino), Vec::new());
    }
}

/// The back-end file of an inode whose contents spilled out of the metadata.
pub(crate) fn backend_fid(inode: &Inode) -> Option<Fid> {
    inode.data.as_ref().filter(|d| d.inline.is_none()).map(|d| d.fid)
}

impl MetaServer {
    /// Adds to `b` the effect of dropping one name of `record`; returns what the
    /// client must finish (a remote inode to decrement, back-end data to delete).
    pub(crate) fn drop_link(&self, b: &mut Batch, record: &Record) -> Result<DroppedName, Errno> {
        match record {
            Record::Inode(i) => Ok(DroppedName { remote: None, freed: backend_fid(i) }),
            Record::Linked { ino, home } if *home == self.cfg.index => {
                let inode = self.link_delta_into(b, *ino, -1)?;
                let freed = if inode.attr.nlink == 0 { backend_fid(&inode) } else { None };
                Ok(DroppedName { remote: None, freed })
            }
            Record::Linked { ino, home } => Ok(DroppedName { remote: Some((*ino, *home)), freed: None }),
        }
    }

    fn link_delta_into(&self, b: &mut Batch, ino: u64, delta: i32) -> Result<Inode, Errno> {
        let mut inode = self.load_inode(ino)?;
        let nlink = inode.attr.nlink as i64 + delta as i64;
        if nlink > u32::MAX as i64 {
            return Err(Errno::EMLINK);
        }
        inode.attr.nlink = nlink.max(0) as u32;
        inode.attr.ctime = self.now_ns();
        if inode.attr.nlink == 0 {
            b.delete(INODES, keys::id_key(ino).to_vec());
        } else {
            b.put(INODES, keys::id_key(ino).to_vec(), keys::encode(&inode));
        }
        Ok(inode)
    }

    pub(crate) fn link_share(&self, creds: &Creds, path: &Target, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[path], true)?;
        self.mode().refuse_step(txn)?;
        let (parent, name, record) = match self.locate(creds, path)? {
            Located::Root | Located::Dir { .. } => return Err(Errno::EPERM),
            Located::Absent { .. } => return Err(Errno::ENOENT),
            Located::File { parent, name, record } => (parent, name, record),
        };
        let mut b = Batch::new();
        let me = self.cfg.index;
        match record {
            Record::Inode(mut inode) => {
                // Symlinks cannot be hard-linked here: their target lives inline.
                if inode.attr.kind == FileKind::Symlink {
                    return Err(Errno::EPERM);
                }
                perm::check_hardlink(creds, &inode.attr)?;
                let ino = inode.attr.ino;
                inode.attr.nlink += 1;
                inode.attr.ctime = self.now_ns();
                b.put(INODES, keys::id_key(ino).to_vec(), keys::encode(&inode));
                b.put(ENTRIES, self.entry_key(parent, &name), keys::encode(&Record::Linked { ino, home: me }));
                record_for(&mut b, COUNTED, txn, ino);
                self.write(b)?;
                Ok(Reply::Shared { ino, home: me })
            }
            Record::Linked { ino, home } if home == me => {
                perm::check_hardlink(creds, &self.load_inode(ino)?.attr)?;
                self.link_delta_into(&mut b, ino, 1)?;
                record_for(&mut b, COUNTED, txn, ino);
                self.write(b)?;
                Ok(Reply::Shared { ino, home })
            }
            Record::Linked { ino, home } => Ok(Reply::Redirect { ino, home }),
        }
    }

    pub(crate) fn link_insert(&self, creds: &Creds, path: &Target, ino: u64, home: u32, txn: Option<u64>) -> Result<Reply, Errno> {
        if home >= self.cfg.servers {
            return Err(Errno::EINVAL);
        }
        let _g = self.lock_entries(&[path], true)?;
        self.mode().refuse_step(txn)?;
        let (parent, name) = match self.locate(creds, path)? {
            Located::Absent { parent, name } => (parent, name),
            _ => return Err(Errno::EEXIST),
        };
        perm::require_dir_write(creds, self.dir_owner(parent)?)?;
        let mut b = Batch::new();
        b.put(ENTRIES, self.entry_key(parent, &name), keys::encode(&Record::Linked { ino, home }));
        record_for(&mut b, NAMED, txn, ino);
        self.write(b)?;
        self.mode().grew(self, parent, 1);
        Ok(Reply::Unit)
    }

    pub(crate) fn inode_stat(&self, ino: u64) -> Result<Reply, Errno> {
        Ok(Reply::Attr(self.load_inode(ino)?.attr))
    }

    pub(crate) fn inode_set_attr(&self, creds: &Creds, ino: u64, set: &SetAttr) -> Result<Reply, Errno> {
        let _g = self.lock_inodes();
        self.inode_set_attr_locked(creds, ino, set)
    }

    pub(crate) fn inode_set_attr_locked(&self, creds: &Creds, ino: u64, set: &SetAttr) -> Result<Reply, Errno> {
        let mut inode = self.load_inode(ino)?;
        setattr::apply(creds, &mut inode.attr, set, self.now_ns())?;
        crate::ops_data::fit_inline_to_size(&mut inode);
        let mut b = Batch::new();
        b.put(INODES, keys::id_key(ino).to_vec(), keys::encode(&inode));
        self.write(b)?;
        Ok(Reply::Attr(inode.attr))
    }

    /// A count added (`delta` > 0) is a link made by `creds`, whose right to
    /// link the inode is checked here, where the inode is.
    pub(crate) fn inode_link_delta(&self, creds: &Creds, ino: u64, delta: i32, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = self.lock_inodes();
        self.mode().refuse_step(txn)?;
        if delta > 0 {
            perm::check_hardlink(creds, &self.load_inode(ino)?.attr)?;
        }
        let mut b = Batch::new();
        let inode = self.link_delta_into(&mut b, ino, delta)?;
        if delta > 0 {
            record_for(&mut b, COUNTED, txn, ino);
        }
        self.write(b)?;
        let freed = if inode.attr.nlink == 0 { backend_fid(&inode) } else { None };
        Ok(DroppedName { remote: None, freed }.into_reply())
    }

    /// `Request::LinkSettle`: forgets what transaction `txn` recorded for
    /// `ino` here, taking back the count it added if `undo`.
    pub(crate) fn link_settle(&self, ino: u64, txn: u64, undo: bool) -> Result<Reply, Errno> {
        let _g = self.lock_inodes();
        let mut b = Batch::new();
        let mut freed = None;
        let counted = txn_key(COUNTED, txn, ino);
        if self.store.get(META, &counted).map_err(crate::core::io)?.is_some() {
            b.delete(META, counted);
            if undo {
                let inode = self.link_delta_into(&mut b, ino, -1)?;
                freed = if inode.attr.nlink == 0 { backend_fid(&inode) } else { None };
            }
        }
        b.delete(META, txn_key(NAMED, txn, ino));
        self.write(b)?;
        Ok(DroppedName { remote: None, freed }.into_reply())
    }

    /// `Request::LinkPending`: what transaction `txn` recorded here and has
    /// not settled.
    pub(crate) fn link_pending(&self, txn: u64) -> Result<Reply, Errno> {
        Ok(Reply::Pending { counted: self.recorded(COUNTED, txn)?, named: self.recorded(NAMED, txn)? })
    }

    fn recorded(&self, kind: &[u8], txn: u64) -> Result<Vec<u64>, Errno> {
        let prefix = txn_prefix(kind, txn);
        let mut inos = Vec::new();
        self.store
            .for_each(META, &prefix, &mut |k, _| {
                if let Some(ino) = k.strip_prefix(prefix.as_slice()).and_then(|r| r.try_into().ok()).map(u64::from_be_bytes) {
                    inos.push(ino);
                }
                inos.len() < PENDING_MAX
            })
            .map_err(crate::core::io)?;
        Ok(inos)
    }
}
