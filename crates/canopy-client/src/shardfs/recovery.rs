//! Recovery of a ShardFS transaction whose coordinator died (seed 000 §3.3: the
//! lock service keeps the redo record; a later conflicting lock acquisition
//! triggers recovery).
//!
//! Recovery is state-based and idempotent (and lifts the fences a non-monotonic
//! transaction left): it reads what the servers hold and
//! finishes or undoes the transaction from there, so it can itself die and be run
//! again by the next client. Before it reads, it revokes the transaction on
//! every server (`Request::Revoke`): a step the dead coordinator sent in time
//! but that arrives late is refused from then on, rather than landing behind
//! recovery's decision. A recovery that died and is run again decides the
//! same from the same commit point, so its own late steps push the same way
//! while the transaction is open; one that arrives after it ended is refused
//! too: a recoverer's `DirSync` and migration name its own id, which the lock
//! service hands the next recoverer to revoke (`Handed::lapsed`), and its
//! rename steps (`RenameDirStep::Redo`, `Undo`) need the original's fence,
//! which the last recovery lifts.
//!
//! - mkdir, rmdir, chmod/chown of a directory: the primary's state is the truth. In
//!   Procedure 1 the primary applies first (the commit point), in Procedure 2 last
//!   (so its change is the commit point too); a mkdir applies on all at once, each
//!   replica fencing the new directory until the primary's answer is known.
//!   Making every replica's entry for the path equal the primary's rolls a
//!   committed transaction forward and an uncommitted one back.
//! - directory rename: the destination's primary applies first; if it has the
//!   directory at the new name the rename committed: finish applying it on the
//!   others and run the migration again; otherwise move it back where a server
//!   already moved it, and put back a directory it had replaced.
//! - file rename: if both names now hold the same inode (inserted at the
//!   destination, not yet dropped at the source), drop the source.
//! - link: each count it added (recorded with it at the inode's home) is kept
//!   if its name was made (recorded with the name), else taken back.
//! - a pessimistic retry: nothing to repair.

use crate::namespace::Res;
use crate::recover::Recovers;
use crate::shardfs::ShardFs;
use crate::txn::Txn;
use canopy_proto::msg::{At, DirLookup, RenameDirStep};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, Reply, Request};
use futures::future::BoxFuture;

/// Who puts back what a transaction applied: recovery, whose steps a revoke
/// lets through, or the coordinator itself, whose steps it stops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    Recovery,
    Coordinator,
}

impl By {
    /// A directory rename's apply step backwards, undoing transaction `was`:
    /// the source's primary takes back the times `was` parked there.
    fn undo(self, was: u64) -> RenameDirStep {
        match self {
            By::Recovery => RenameDirStep::Undo { txn: was },
            By::Coordinator => RenameDirStep::Apply { times: None, unfence: None, txn: Some(was) },
        }
    }

    /// A directory rename's apply step as it is rolled forward, finishing
    /// transaction `was`: the directory's times and every fence are left to
    /// the migration and the unfence that follow.
    fn redo(self, was: u64) -> RenameDirStep {
        match self {
            By::Recovery => RenameDirStep::Redo { txn: was },
            By::Coordinator => RenameDirStep::Apply { times: None, unfence: None, txn: Some(was) },
        }
    }
}

fn probe_reply(r: Res<Reply>) -> Res<Option<DirLookup>> {
    match r? {
        Reply::Probe(p) => Ok(p),
        _ => Err(Errno::EPROTO),
    }
}

impl Recovers for ShardFs {
    type Name = NsPath;

    fn name_ref(path: &NsPath) -> At {
        path.to_string().into()
    }

    fn at_name<'a>(&'a self, path: &'a NsPath, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async move { self.rpc(self.primary(path), &Creds::root(), req).await })
    }

    fn mkdir_recovered<'a>(&'a self, path: &'a str, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            self.sync_replicas(&NsPath::parse(path)?, txn).await?;
            self.unfence(was).await
        })
    }

    fn rmdir_recovered<'a>(&'a self, path: &'a str, txn: Txn, _was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move { self.sync_replicas(&NsPath::parse(path)?, txn).await })
    }

    fn dir_attrs_recovered<'a>(&'a self, path: &'a str, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>> {
        self.mkdir_recovered(path, txn, was)
    }

    /// ShardFS makes no rename over a directory in one transaction (a
    /// replaced directory is restored from the destination's primary).
    fn rename_recovered<'a>(&'a self, src: &'a str, dst: &'a str, _replaced: Option<u64>, txn: Txn, was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            self.recover_rename(&NsPath::parse(src)?, &NsPath::parse(dst)?, txn, was, By::Recovery).await?;
            self.unfence(was).await
        })
    }
}

impl ShardFs {
    /// Every server's directory at `path`, by server index.
    async fn probe_all(&self, path: &NsPath) -> Res<Vec<Option<DirLookup>>> {
        let results = self.fan_out(0..self.n, &Creds::root(), |_| Request::DirProbe { path: path.to_string() }).await;
        results.into_iter().map(|(_, r)| probe_reply(r)).collect()
    }

    /// Makes every replica's directory state at `path` equal the primary's,
    /// recovering as `txn`: its steps name it, so that once another recoverer
    /// took it over (and revoked it), one arriving late changes nothing.
    async fn sync_replicas(&self, path: &NsPath, txn: Txn) -> Res<()> {
        let prim = self.primary(path);
        let want = probe_reply(self.rpc(prim, &Creds::root(), Request::DirProbe { path: path.to_string() }).await)?;
        let results = self.fan_out(self.all_but(prim), &Creds::root(), |_| Request::DirSync { path: path.to_string(), want: want.clone(), txn: Some(txn.id) }).await;
        for (_, r) in results {
            r?;
        }
        Ok(())
    }

    /// Finishes or undoes the rename of `src` to `dst` that transaction `was`
    /// (its original id) began, holding it as `txn`: recovery, or the
    /// coordinator putting back a rename its commit point refused (`by`).
    pub(crate) async fn recover_rename(&self, src: &NsPath, dst: &NsPath, txn: Txn, was: u64, by: By) -> Res<()> {
        let at_src = self.probe_all(src).await?;
        let at_dst = self.probe_all(dst).await?;
        let prim = self.primary(dst) as usize;
        let Some(moved) = at_src.iter().flatten().next().map(|l| l.id) else {
            return match &at_dst[prim] {
                // Applied everywhere; the migration may not have finished.
                Some(_) => self.migrate_all(dst, txn).await,
                None => self.finish_file_rename(src, dst, txn.id).await,
            };
        };
        let root = Creds::root();
        let committed = at_dst[prim].as_ref().is_some_and(|l| l.id == moved);
        if committed {
            for (i, l) in at_src.iter().enumerate() {
                if l.as_ref().is_some_and(|l| l.id == moved) {
                    let req = Request::RenameDir { src: src.to_string(), dst: dst.to_string(), step: by.redo(was) };
                    self.rpc(i as u32, &root, req).await?;
                }
            }
            return self.migrate_all(dst, txn).await;
        }
        // Not committed: undo where it was applied, restoring a replaced directory
        // from the destination's primary, which still has it (also where an
        // earlier recovery undid it and died before it restored it).
        let victim = at_dst[prim].clone();
        for (i, l) in at_dst.iter().enumerate() {
            let applied = l.as_ref().is_some_and(|l| l.id == moved);
            if applied {
                let back = Request::RenameDir { src: dst.to_string(), dst: src.to_string(), step: by.undo(was) };
                self.rpc(i as u32, &root, back).await?;
            }
            if victim.is_some() && (applied || *l != victim) {
                // Named as this transaction's own step (the coordinator's `was`).
                let restore = Request::DirSync { path: dst.to_string(), want: victim.clone(), txn: Some(txn.id) };
                self.rpc(i as u32, &root, restore).await?;
            }
        }
        Ok(())
    }
}
