//! File rename. One RPC when both names are on one server, else three steps the
//! client drives under the lock service: `RenameOut` (check on the source's
//! server), `RenameIn` (check, replace and insert on the destination's),
//! `RenameOutCommit` (drop the source). Directory renames are the mode's
//! (`shardfs/rename_dir.rs`).

use crate::keys::{self, ENTRIES};
use crate::mode::{Located, Target};
use crate::ops_link::DroppedName;
use crate::server::MetaServer;
use canopy_posix::perm;
use canopy_proto::msg::Record;
use canopy_proto::{Creds, Errno, Reply};
use canopy_store::Batch;


/// What the destination side of a file rename decided.
enum InOutcome {
    /// Source and destination are the same file: nothing to do.
    SameFile,
    /// Inserted; what replacing a name left for the client to finish.
    Inserted(DroppedName),
}

impl MetaServer {
    /// Source-side checks of a file rename; returns the source's location and record.
    fn rename_out_check(&self, creds: &Creds, src: &Target, dst: &Target) -> Result<(u64, String, Record), Errno> {
        let (sp, sname, record) = match self.locate(creds, src)? {
            Located::Root => return Err(Errno::EBUSY),
            Located::Dir { .. } => return Err(Errno::EISDIR),
            Located::Absent { .. } => return Err(Errno::ENOENT),
            Located::File { parent, name, record } => (parent, name, record),
        };
        // The destination's side is checked here if this server holds its
        // directory (ShardFS: always), else by `RenameIn` on the server that
        // does (IndexFS: another partition; Giraffa: another region).
        let dst_parent = match self.locate(creds, dst) {
            Ok(Located::Root | Located::Dir { .. }) => return Err(Errno::EISDIR),
            Ok(Located::File { parent, .. } | Located::Absent { parent, .. }) => Some(parent),
            Err(Errno::ENXIO | Errno::EREMCHG) if dst.by_id() => None,
            Err(Errno::EREMOTE) if !self.mode().checks_ancestors() => None,
            Err(e) => return Err(e),
        };
        let sdir = self.dir_owner(sp)?;
        perm::require_dir_write(creds, sdir)?;
        if let Some(dp) = dst_parent {
            perm::require_dir_write(creds, self.dir_owner(dp)?)?;
        }
        perm::check_sticky(creds, sdir, self.record_uid(&record))?;
        Ok((sp, sname, record))
    }

    /// Destination-side checks and writes of a file rename, into `b`.
    fn rename_in_apply(&self, b: &mut Batch, creds: &Creds, dst: &Target, mut record: Record) -> Result<InOutcome, Errno> {
        let (dp, dname, replaced) = match self.locate(creds, dst)? {
            Located::Root | Located::Dir { .. } => return Err(Errno::EISDIR),
            Located::Absent { parent, name } => (parent, name, None),
            Located::File { parent, name, record: existing } => (parent, name, Some(existing)),
        };
        let ddir = self.dir_owner(dp)?;
        perm::require_dir_write(creds, ddir)?;
        let mut dropped = DroppedName::default();
        if let Some(existing) = replaced {
            if existing.ino() == record.ino() {
                return Ok(InOutcome::SameFile);
            }
            perm::check_sticky(creds, ddir, self.record_uid(&existing))?;
            dropped = self.drop_link(b, &existing)?;
        }
        if let Record::Inode(i) = &mut record {
            i.attr.ctime = self.now_ns();
        }
        b.put(ENTRIES, self.entry_key(dp, &dname), keys::encode(&record));
        Ok(InOutcome::Inserted(dropped))
    }

    /// `txn`: the transaction doing it, whose steps the mode may refuse
    /// (ShardFS, once recovery revoked it: checked under the entry locks,
    /// which a revoke waits for).
    pub(crate) fn rename_local(&self, creds: &Creds, src: &Target, dst: &Target, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[src, dst], true)?;
        self.mode().refuse_step(txn)?;
        let (sp, sname, record) = self.rename_out_check(creds, src, dst)?;
        let mut b = Batch::new();
        match self.rename_in_apply(&mut b, creds, dst, record)? {
            InOutcome::SameFile => Ok(DroppedName::default().into_reply()),
            InOutcome::Inserted(dropped) => {
                b.delete(ENTRIES, self.entry_key(sp, &sname));
                self.write(b)?;
                Ok(dropped.into_reply())
            }
        }
    }

    pub(crate) fn rename_out(&self, creds: &Creds, src: &Target, dst: &Target) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[src, dst], false)?;
        let (_, _, record) = self.rename_out_check(creds, src, dst)?;
        Ok(Reply::Record(record))
    }

    /// Answers `Unit` when source and destination are one file (the client must
    /// then leave the source alone), `Dropped` when inserted.
    pub(crate) fn rename_in(&self, creds: &Creds, _src: &Target, dst: &Target, record: Record, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[dst], true)?;
        self.mode().refuse_step(txn)?;
        let mut b = Batch::new();
        match self.rename_in_apply(&mut b, creds, dst, record)? {
            InOutcome::SameFile => Ok(Reply::Unit),
            InOutcome::Inserted(dropped) => {
                self.write(b)?;
                Ok(dropped.into_reply())
            }
        }
    }

    /// Refused once `txn` is revoked: recovery may have dropped the source
    /// already, and the same inode been renamed back to that name since.
    pub(crate) fn rename_out_commit(&self, src: &Target, ino: u64, txn: Option<u64>) -> Result<Reply, Errno> {
        let _g = self.lock_entries(&[src], true)?;
        self.mode().refuse_step(txn)?;
        if let Located::File { parent, name, record } = self.locate(&Creds::root(), src)? {
            if record.ino() == ino {
                let mut b = Batch::new();
                b.delete(ENTRIES, self.entry_key(parent, &name));
                self.write(b)?;
            }
        }
        Ok(Reply::Unit)
    }
}
