//! Directory rename: the replicated table changes on every server (`RenameDir`,
//! first as a check on all, then applied); the client then migrates the objects
//! below whose primary changed (`migrate.rs`).

use super::ShardFs;
use crate::core::{io, Core};
use crate::keys::{self, DIRS, DIRTIMES, ENTRIES};
use crate::mode::Located;
use canopy_posix::perm;
use canopy_proto::attr::access;
use canopy_proto::path::{NsPath, NS_PATH_MAX};
use canopy_proto::{Creds, Errno, Reply};
use canopy_store::Batch;

impl ShardFs {
    pub(crate) fn rename_dir(&self, core: &Core, creds: &Creds, src: &NsPath, dst: &NsPath, check_only: bool) -> Result<Reply, Errno> {
        if src.is_root() || dst.is_root() {
            return Err(Errno::EBUSY);
        }
        let _g = core.lock_structure();
        let (sp, sname, sid) = match self.locate_path(core, creds, src)? {
            Located::Dir { parent, name, id } => (parent, name, id),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            _ => return Err(Errno::ENOENT),
        };
        let dst_at = self.locate_path(core, creds, dst)?;
        // Only once both paths resolved (a missing or non-directory ancestor of the
        // destination reports first, as on Linux).
        if dst.is_within(src) && dst != src {
            return Err(Errno::EINVAL);
        }
        let (dp, dname, replaced) = match dst_at {
            Located::Dir { id, .. } if id == sid => return Ok(Reply::Unit),
            Located::Dir { parent, name, id } => (parent, name, Some(id)),
            Located::File { .. } => return Err(Errno::ENOTDIR),
            Located::Absent { parent, name } => (parent, name, None),
            Located::Root => return Err(Errno::EBUSY),
        };
        let sdir = self.dir_owner(sp)?;
        let ddir = self.dir_owner(dp)?;
        let moved = self.dir_lookup(sid)?;
        perm::require_dir_write(creds, sdir)?;
        perm::require_dir_write(creds, ddir)?;
        perm::check_sticky(creds, sdir, moved.uid)?;
        if sp != dp {
            // Its ".." changes: POSIX asks for write permission on the moved directory.
            perm::require(creds, perm::Owner::of_dir(&moved), true, access::W)?;
        }
        if let Some(did) = replaced {
            let victim = self.dir_lookup(did)?;
            perm::check_sticky(creds, ddir, victim.uid)?;
            if self.has_subdirs(did) || !core.no_local_entries(did)? {
                return Err(Errno::ENOTEMPTY);
            }
        }
        // Objects are named and placed by their full path: one made longer than
        // NS_PATH_MAX could be neither reached nor migrated.
        let grows = dst.as_str().len().saturating_sub(src.as_str().len());
        if grows > 0 && self.longest_below(core, sid)? + grows > NS_PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if check_only {
            return Ok(Reply::Unit);
        }
        let mut b = Batch::new();
        b.delete(DIRS, keys::entry_key(sp, &sname));
        if let Some(did) = replaced {
            b.delete(DIRTIMES, keys::id_key(did).to_vec());
        }
        b.put(DIRS, keys::entry_key(dp, &dname), keys::encode(&moved));
        core.write(b)?;
        let mut table = self.table.write();
        if let Some(did) = replaced {
            table.remove(did);
        }
        table.move_dir(sid, dp, &dname);
        Ok(Reply::Unit)
    }

    /// The length of the longest path this server holds at or below directory
    /// `id`: its subdirectories and its own file entries.
    fn longest_below(&self, core: &Core, id: u64) -> Result<usize, Errno> {
        let table = self.table.read();
        let mut longest = 0;
        for dir in table.subtree(id) {
            let dir_len = table.path_of(dir).ok_or(Errno::EIO)?.as_str().len();
            let mut name_max = None;
            core.store
                .for_each(ENTRIES, &dir.to_be_bytes(), &mut |k, _| {
                    name_max = name_max.max(Some(k.len() - 8));
                    true
                })
                .map_err(io)?;
            longest = longest.max(name_max.map_or(dir_len, |n| dir_len + 1 + n));
        }
        Ok(longest)
    }
}
