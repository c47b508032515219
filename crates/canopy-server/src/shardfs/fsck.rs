//! ShardFS's part of fsck: a digest of the replicated table (equal on every
//! server), every file entry under a known directory and on its primary,
//! directory times on their primary only, and no times parked by a rename
//! that has ended. Runs under the structure lock.

use super::ShardFs;
use super::decode_entry;
use crate::core::{io, Core};
use crate::keys::{DIRTIMES, ENTRIES};
use canopy_proto::msg::FsckReport;
use canopy_proto::Errno;

impl ShardFs {
    pub(crate) fn check(&self, core: &Core, r: &mut FsckReport) -> Result<(), Errno> {
        let table = self.table.read();
        let me = core.cfg.index;
        r.dir_digest = table.digest();
        r.dirs = table.len() as u64;
        let problems = &mut r.problems;
        core.store
            .for_each(ENTRIES, b"", &mut |k, v| {
                let Some(((parent, name), _)) = decode_entry(k, v) else { return true };
                let Some(path) = table.path_of(parent).and_then(|p| p.join(&name).ok()) else {
                    problems.push(format!("server {me}: entry {name:?} in missing directory {parent:#x}"));
                    return true;
                };
                if self.primary_of(core, &path) != me {
                    problems.push(format!("server {me}: {path} belongs on server {}", self.primary_of(core, &path)));
                }
                if table.child(parent, &name).is_some() {
                    problems.push(format!("server {me}: {path} is both a file and a directory"));
                }
                true
            })
            .map_err(io)?;
        core.store
            .for_each(DIRTIMES, b"", &mut |k, _| {
                let id = k.try_into().map(u64::from_be_bytes).unwrap_or(0);
                match table.path_of(id) {
                    None => problems.push(format!("server {me}: times of missing directory {id:#x}")),
                    Some(p) if self.primary_of(core, &p) != me => {
                        problems.push(format!("server {me}: times of {p} belong on server {}", self.primary_of(core, &p)))
                    }
                    Some(_) => {}
                }
                true
            })
            .map_err(io)?;
        self.parked.check(core, |txn| self.fences.is_up(txn), problems)?;
        for id in table.ids() {
            if let Some(p) = table.path_of(id) {
                if self.primary_of(core, &p) == me && core.load_dir_times(id)?.is_none() {
                    problems.push(format!("server {me}: directory {p} has no times on its primary"));
                }
            }
        }
        Ok(())
    }
}
