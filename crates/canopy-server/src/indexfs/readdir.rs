//! readdir of a partitioned directory: each server lists the partitions of it
//! that it holds, and says which partitions it knows, so the client reading
//! them all finds every partition, even ones split since it last looked.

use super::IndexFs;
use crate::core::Core;
use crate::mode::Mode;
use crate::ops_readdir::{sorted_page, MAX_PAGE};
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::{Creds, Errno, Reply};

impl IndexFs {
    pub(crate) fn read_dir(&self, core: &Core, creds: &Creds, dir: u64, after: Option<&str>, limit: u32) -> Result<Reply, Errno> {
        let (parts, _) = self.known_here(core, dir)?;
        perm::require(creds, Owner::of_dir(&parts[0].lookup), true, access::R)?;
        let limit = limit.clamp(1, MAX_PAGE) as usize;
        let dirs = self.subdirs(core, dir, None, usize::MAX)?;
        let (entries, more) = sorted_page(core, &super::ix_name, dir, after, limit, dirs)?;
        // The bitmap is read after the entries (reads hold no lock): had a
        // split moved some away meanwhile, it names the partition they went
        // to, and the client reads that too (dropping any name seen twice).
        let (_, known) = self.known_here(core, dir)?;
        Ok(Reply::IxEntries { entries, more, parts: known })
    }
}
