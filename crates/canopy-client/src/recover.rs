//! Recovery of a dead coordinator's transaction, the part every mode shares:
//! the dispatch on what the transaction was doing (its intent), the revoke
//! that refuses its late steps first, a link's recovery, and a file rename's
//! (one inode left under both names: the source's name goes). A mode decides
//! each of its own directory transactions from its durable state
//! ([`Recovers`]); a kind it never makes has nothing to recover.

use crate::core::ClientCore;
use crate::namespace::Res;
use crate::txn::{file_ino, Handed, Txn};
use canopy_proto::msg::{At, Intent, LockMode};
use canopy_proto::{Errno, Reply, Request};
use futures::future::BoxFuture;

/// A mode's recovery of the transactions it makes.
pub(crate) trait Recovers: std::ops::Deref<Target = ClientCore> + Sync {
    /// A name as recovery reaches it (a path, or where IndexFS placed it).
    type Name: Sync;

    /// How the server holding `name` addresses it.
    fn name_ref(name: &Self::Name) -> At;

    /// `req`, as root, to the server holding `name`.
    fn at_name<'a>(&'a self, name: &'a Self::Name, req: Request) -> BoxFuture<'a, Res<Reply>>;

    /// Whether recovering `intent` first revokes the dead coordinator's
    /// steps: every kind but a pessimistic retry, which changes nothing.
    fn revokes(&self, intent: &Intent) -> bool {
        !matches!(intent, Intent::Retry { .. })
    }

    /// A recovery's error as [`ClientCore::lock_with`] reads it (`ESTALE`:
    /// perhaps taken over by another recoverer).
    fn recovery_error(&self, e: Errno) -> Errno {
        e
    }

    /// A mkdir of `path` by transaction `was`, recovered as `txn`.
    fn mkdir_recovered<'a>(&'a self, path: &'a str, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>> {
        let _ = (path, txn, was);
        Box::pin(async { Ok(()) })
    }

    /// An rmdir of `path`.
    fn rmdir_recovered<'a>(&'a self, path: &'a str, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>> {
        let _ = (path, txn, was);
        Box::pin(async { Ok(()) })
    }

    /// A chmod, chown or utimens of the directory at `path`.
    fn dir_attrs_recovered<'a>(&'a self, path: &'a str, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>> {
        let _ = (path, txn, was);
        Box::pin(async { Ok(()) })
    }

    /// A rename of `src` to `dst`, over the directory `replaced` if it named one.
    fn rename_recovered<'a>(&'a self, src: &'a str, dst: &'a str, replaced: Option<u64>, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>>;

    /// Repairs the effects of a dead coordinator's transaction doing
    /// `intent`, which this client now holds as `txn` (renewing its lease).
    fn recover<'a>(&'a self, txn: Txn, handed: Handed, intent: &'a Intent) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let was = handed.was;
            if self.revokes(intent) {
                self.revoke(handed).await?;
            }
            match intent {
                Intent::Mkdir { path } => self.mkdir_recovered(path, txn, was).await,
                Intent::Rmdir { path } => self.rmdir_recovered(path, txn, was).await,
                Intent::DirSetAttr { path } => self.dir_attrs_recovered(path, txn, was).await,
                Intent::Rename { src, dst } => self.rename_recovered(src, dst, None, txn, was).await,
                Intent::RenameOver { src, dst, replaced } => self.rename_recovered(src, dst, Some(*replaced), txn, was).await,
                Intent::Link { .. } => self.recover_link(was).await,
                Intent::Retry { .. } => Ok(()),
            }
        })
    }

    /// Takes `locks` for `intent`, first recovering (this mode's way) a dead
    /// coordinator's transaction the lock service hands over.
    fn lock_recovering(&self, locks: Vec<(String, LockMode)>, intent: Intent) -> BoxFuture<'_, Res<Txn>> {
        Box::pin(async move {
            let recover = |txn: Txn, handed: Handed, failed: Intent| -> BoxFuture<'_, Res<()>> {
                Box::pin(async move { self.recover(txn, handed, &failed).await.map_err(|e| self.recovery_error(e)) })
            };
            self.lock_with(locks, intent, &recover).await
        })
    }

    /// The inode of the file named `name`, if a server says there is one.
    fn ino_at<'a>(&'a self, name: &'a Self::Name) -> BoxFuture<'a, Res<Option<u64>>> {
        Box::pin(async move { file_ino(self.at_name(name, Request::RecoveryStat { at: Self::name_ref(name) }).await) })
    }

    /// A file rename that died between inserting its destination and
    /// dropping its source left one inode under both names: the source's
    /// name goes. Otherwise the rename did not commit, and nothing changes.
    fn finish_file_rename<'a>(&'a self, src: &'a Self::Name, dst: &'a Self::Name, txn: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            if let (Some(a), Some(b)) = (self.ino_at(src).await?, self.ino_at(dst).await?) {
                if a == b {
                    self.at_name(src, Request::RenameOutCommit { src: Self::name_ref(src), ino: a, txn: Some(txn) }).await?;
                }
            }
            Ok(())
        })
    }
}
