//! ShardFS's side of revoking a transaction (`crate::revoked`): what its
//! steps check. Without it, a step sent in time but arriving late could land
//! after recovery had read and decided: a mkdir's primary making a directory
//! recovery rolled back on every replica, an rmdir's primary removing one
//! recovery put back, a file rename's insert making a second name recovery
//! found no trace of, a migration's adoption putting back a moved file's old
//! record, a file rename's late `RenameOutCommit` dropping a name the same
//! inode was renamed back to after recovery. (A dead recoverer's steps name
//! its own id, which the next recoverer revokes as well.) The revoked set
//! lives beside the fences ([`Fences`]), under their lock, so no fence of a
//! revoked transaction goes up.
//!
//! [`Fences`]: super::fence::Fences

use super::ShardFs;
use crate::core::Core;
use canopy_proto::msg::txn_of_dir_id;
use canopy_proto::{Errno, Reply};

impl ShardFs {
    /// `Request::Revoke`: durable before it answers, and under the structure
    /// lock, which every directory step holds while it checks and applies
    /// (and a file rename's, shared, with its entry locks), so a step of
    /// `txn` under way ends first and a later one sees it.
    pub(crate) fn revoke(&self, core: &Core, txn: u64) -> Result<Reply, Errno> {
        let _g = core.lock_structure();
        self.fences.revoke(core, txn)?;
        Ok(Reply::Unit)
    }

    /// `ESTALE` if a coordinator's step naming transaction `txn` must not
    /// land: recovery has revoked it here.
    pub(crate) fn refuse_revoked(&self, txn: Option<u64>) -> Result<(), Errno> {
        self.fences.refuse_revoked(txn)
    }

    /// [`ShardFs::refuse_revoked`] for a mkdir's step, which names its
    /// transaction by the directory id it makes (the primary's carries no
    /// fence).
    pub(crate) fn refuse_revoked_mkdir(&self, id: u64) -> Result<(), Errno> {
        self.refuse_revoked(txn_of_dir_id(id))
    }
}
