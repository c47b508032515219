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
use canopy_proto::msg::{FileData, Inode, Record, BULK_MAX};
use canopy_proto::path::check_name;
use canopy_proto::{Attr, Creds, Errno, FileKind, Reply};

/// Keys looked up together in one batched collision check.
const CHECK_CHUNK: usize = 4096;

/// Why `name` may never be made, whatever the directory holds.
fn invalid(name: &str) -> Option<Errno> {
    if let Err(e) = check_name(name) {
        return Some(e);
    }
    (name == "." || name == "..").then_some(Errno::EINVAL)
}

/// Names of a batch by their entry key, with their index in the batch.
type Keyed = Vec<(Vec<u8>, usize)>;
/// Names of a batch refused, by index, with why.
type Refused = Vec<(usize, Errno)>;

/// The names `names` a create could make in `dir`, in key order, and the
/// others with why. A name given twice is made once, the first time.
fn screen(dir: u64, names: &[String]) -> (Keyed, Refused) {
    let mut refused = Vec::new();
    let mut keyed = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        match invalid(name) {
            Some(e) => refused.push((i, e)),
            None => keyed.push((ix_key(dir, name), i)),
        }
    }
    keyed.sort_unstable();
    keyed.dedup_by(|later, first| {
        let twice = later.0 == first.0;
        if twice {
            refused.push((later.1, Errno::EEXIST));
        }
        twice
    });
    (keyed, refused)
}

/// Drops from `keyed` the keys present in `cf`, refusing them with EEXIST.
fn drop_taken(core: &Core, cf: &'static str, keyed: &mut Keyed, refused: &mut Refused) -> Result<(), Errno> {
    let mut taken = Vec::with_capacity(keyed.len());
    for chunk in keyed.chunks(CHECK_CHUNK) {
        let keys: Vec<&[u8]> = chunk.iter().map(|(k, _)| &k[..]).collect();
        taken.extend(core.store.contains_each(cf, &keys).map_err(io)?);
    }
    let mut flags = taken.into_iter();
    keyed.retain(|(_, i)| {
        let is_taken = flags.next().unwrap_or(false);
        if is_taken {
            refused.push((*i, Errno::EEXIST));
        }
        !is_taken
    });
    Ok(())
}

impl IndexFs {
    pub(crate) fn bulk_insert(&self, core: &Core, creds: &Creds, dir: u64, names: Vec<String>, mode: u32) -> Result<Reply, Errno> {
        if names.len() > BULK_MAX {
            return Err(Errno::EMSGSIZE);
        }
        let at = Target::Dir(dir);
        let _g = core.lock_stripes(|| vec![dir], false, &[&at]);
        let (parts, known) = self.known_here(core, dir)?;
        if names.iter().any(|name| !parts.iter().any(|h| h.part == known.part_of(canopy_proto::giga::name_hash(name)))) {
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
        let (mut keyed, mut refused) = screen(dir, &names);
        // A directory with nothing in it has no name to collide with but the
        // batch's own; one without subdirectories, none among them.
        if !core.no_local_entries(dir)? {
            drop_taken(core, ENTRIES, &mut keyed, &mut refused)?;
        }
        if parts.iter().any(|h| h.subdirs > 0) {
            drop_taken(core, DIRS, &mut keyed, &mut refused)?;
        }
        let now = core.now_ns();
        let gid = if owner.mode & S_ISGID != 0 { owner.gid } else { creds.gid };
        let mut pairs = Vec::with_capacity(keyed.len());
        for (key, _) in keyed {
            let ino = core.new_id()?;
            let attr = Attr { ino, kind: FileKind::File, mode: mode & 0o7777, uid: creds.uid, gid, size: 0, nlink: 1, rdev: 0, atime: now, mtime: now, ctime: now };
            let record = Record::Inode(Inode { attr, target: None, data: Some(FileData { fid: core.fid_of(ino), inline: Some(Vec::new()) }) });
            pairs.push((key, keys::encode(&record)));
        }
        let inserted = pairs.len() as u64;
        if inserted > 0 {
            crate::tables::ingest_pairs(core, ENTRIES, pairs)?;
            core.added_entries(inserted);
            self.splits.grew(dir, inserted);
        }
        refused.sort_unstable_by_key(|(i, _)| *i);
        let mut names = names.into_iter().map(Some).collect::<Vec<_>>();
        let rejected = refused.into_iter().map(|(i, e)| (names[i].take().unwrap_or_default(), e)).collect();
        Ok(Reply::Bulk { inserted, rejected })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn names_are_refused_as_a_create_would_refuse_them() {
        let long = "n".repeat(256);
        let files = named(&["a", "..", "b", "a", "x/y", &long, "b", "c"]);
        let (keyed, mut refused) = screen(7, &files);
        refused.sort_unstable_by_key(|(i, _)| *i);
        assert_eq!(refused, vec![(1, Errno::EINVAL), (3, Errno::EEXIST), (4, Errno::EINVAL), (5, Errno::ENAMETOOLONG), (6, Errno::EEXIST)]);
        let mut made: Vec<usize> = keyed.iter().map(|(_, i)| *i).collect();
        assert!(keyed.windows(2).all(|w| w[0].0 < w[1].0), "keys in order, each once");
        made.sort_unstable();
        assert_eq!(made, vec![0, 2, 7], "the first of each name is made");
        assert!(keyed.iter().all(|(k, i)| *k == ix_key(7, &files[*i])));
    }
}
