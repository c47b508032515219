//! Bulk insertion (seed 001 "Bulk Insertion"): a client that makes many files in
//! a directory sends their names in large batches; the directory's server checks
//! each as a create would (the caller may write the directory; the name is
//! valid and free), builds the accepted ones into one sorted table and ingests
//! it whole. A batch lands atomically (one table) and its refusals are answered
//! name by name. Every name must belong to a partition held here (else the
//! whole batch is redirected: the client sends each partition its share).

use super::{ix_key, IndexFs};
use crate::core::{io, Core};
use crate::keys::{self, DIRS, ENTRIES};
use crate::mode::Target;
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::S_ISGID;
use canopy_proto::msg::{FileData, Inode, Record};
use canopy_proto::path::check_name;
use canopy_proto::{Attr, Creds, Errno, Fid, FileKind, Reply};
use std::collections::HashSet;

/// Names one request may carry (a frame bounds it too).
pub const BULK_MAX: usize = 200_000;

/// Why `name` may not be made in a directory whose keys `taken` answers for.
fn refusal(name: &str, seen: &mut HashSet<String>, taken: impl Fn(&[u8]) -> Result<bool, Errno>, key: &[u8]) -> Result<Option<Errno>, Errno> {
    if let Err(e) = check_name(name) {
        return Ok(Some(e));
    }
    if name == "." || name == ".." {
        return Ok(Some(Errno::EINVAL));
    }
    if !seen.insert(name.to_string()) || taken(key)? {
        return Ok(Some(Errno::EEXIST));
    }
    Ok(None)
}

impl IndexFs {
    pub(crate) fn bulk_insert(&self, core: &Core, creds: &Creds, dir: u64, files: Vec<(String, Fid)>, mode: u32) -> Result<Reply, Errno> {
        if files.len() > BULK_MAX {
            return Err(Errno::EMSGSIZE);
        }
        let at = Target::Dir(dir);
        let _g = core.lock_stripes(|| vec![dir], false, &[&at]);
        let (parts, known) = self.known_here(core, dir)?;
        if files.iter().any(|(name, _)| !parts.iter().any(|h| h.part == known.part_of(canopy_proto::giga::name_hash(name)))) {
            return Err(Errno::EREMCHG);
        }
        // Sealed by an rmdir, or a split of it stuck: the client retries.
        if parts.iter().any(|h| h.sealed || h.splitting.is_some()) {
            return Err(Errno::EAGAIN);
        }
        let h = &parts[0];
        let owner = Owner::of_dir(&h.lookup);
        perm::require(creds, owner, true, canopy_proto::attr::access::X)?;
        perm::require_dir_write(creds, owner)?;
        // A directory with nothing in it has no name to collide with but the
        // batch's own; one without subdirectories, none among them.
        let no_files = core.no_local_entries(dir)?;
        let no_dirs = parts.iter().all(|h| h.subdirs == 0);
        let taken = |key: &[u8]| -> Result<bool, Errno> {
            let file = !no_files && core.store.get(ENTRIES, key).map_err(io)?.is_some();
            Ok(file || (!no_dirs && core.store.get(DIRS, key).map_err(io)?.is_some()))
        };
        let now = core.now_ns();
        let gid = if owner.mode & S_ISGID != 0 { owner.gid } else { creds.gid };
        let mut seen = HashSet::with_capacity(files.len());
        let mut rejected = Vec::new();
        let mut pairs = Vec::with_capacity(files.len());
        for (name, fid) in files {
            let key = ix_key(dir, &name);
            if let Some(e) = refusal(&name, &mut seen, taken, &key)? {
                rejected.push((name, e));
                continue;
            }
            let ino = core.new_id()?;
            let attr = Attr { ino, kind: FileKind::File, mode: mode & 0o7777, uid: creds.uid, gid, size: 0, nlink: 1, rdev: 0, atime: now, mtime: now, ctime: now };
            let record = Record::Inode(Inode { attr, target: None, data: Some(FileData { fid, inline: Some(Vec::new()) }) });
            pairs.push((key, keys::encode(&record)));
        }
        let inserted = pairs.len() as u64;
        if inserted > 0 {
            pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            super::tables::ingest_pairs(core, ENTRIES, pairs)?;
            core.added_entries(inserted);
            self.splits.grew(dir, inserted);
        }
        Ok(Reply::Bulk { inserted, rejected })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_refused_as_a_create_would_refuse_them() {
        let mut seen = HashSet::new();
        let free = |_: &[u8]| Ok(false);
        assert_eq!(refusal("a", &mut seen, free, b"k"), Ok(None));
        assert_eq!(refusal("a", &mut seen, free, b"k"), Ok(Some(Errno::EEXIST)), "twice in one batch");
        assert_eq!(refusal("b", &mut seen, |_: &[u8]| Ok(true), b"k"), Ok(Some(Errno::EEXIST)), "taken");
        assert_eq!(refusal("..", &mut seen, free, b"k"), Ok(Some(Errno::EINVAL)));
        assert_eq!(refusal("x/y", &mut seen, free, b"k"), Ok(Some(Errno::EINVAL)));
        assert_eq!(refusal(&"n".repeat(256), &mut seen, free, b"k"), Ok(Some(Errno::ENAMETOOLONG)));
    }
}
