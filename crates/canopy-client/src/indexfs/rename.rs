//! Renames within one server and between two, and hard links.

use super::*;

impl IndexFs {
    pub(super) async fn do_rename(&self, c: &Creds, s: &NsPath, d: &NsPath, txn: Txn) -> Res<()> {
        if s.is_root() || d.is_root() {
            return Err(Errno::EBUSY);
        }
        self.step(txn, || Step::Locked(Intent::Rename { src: s.to_string(), dst: d.to_string() })).await?;
        // The source first: its errors come before the destination's, as on Linux.
        let sp = self.place(c, s).await?;
        let Some((sdir, sname)) = &sp.parent else { return Err(Errno::EBUSY) };
        let moving = match self.subdir(c, sdir, sname, s).await {
            Ok(l) => Some(l.id),
            Err(Errno::ENOTDIR) => None,
            Err(e) => return Err(e),
        };
        let dp = self.place(c, d).await?;
        let Some((ddir, dname)) = &dp.parent else { return Err(Errno::EBUSY) };
        let Some(moving) = moving else {
            return match self.rename_file(c, &sp, &dp, txn, &Intent::Rename { src: s.to_string(), dst: d.to_string() }).await {
                // Onto a directory: EISDIR before any rights error (the
                // order `tests/model.rs` states). A server that cannot see the
                // destination (it is on another server, or its partition moved
                // in a split since this client placed it) checks the source's
                // rights first.
                Err(Errno::EACCES | Errno::EPERM) if self.subdir(c, ddir, dname, d).await.is_ok() => Err(Errno::EISDIR),
                renamed => renamed,
            };
        };
        if d.is_within(s) {
            return Err(Errno::EINVAL);
        }
        // A directory it replaces must be empty: seal it on its home first.
        let replaced = match self.subdir(c, ddir, dname, d).await {
            Ok(l) => Some(l),
            Err(Errno::ENOENT) => None,
            // A file there: a directory cannot replace it.
            Err(e) => return Err(e),
        };
        if let Some(r) = &replaced {
            // Rights first (EACCES, EPERM before ENOTEMPTY, as on Linux): to move
            // the source, and to replace the destination.
            if r.id != self.subdir(c, sdir, sname, s).await?.id {
                self.rpc_ix(sp.server, c, Request::IxRenameDirOut { src: sp.at.clone(), dst: dp.at.clone() }).await?;
                let check = Request::IxRmdir { dir: ddir.id, name: dname.clone(), check_only: true, client: self.client_id, txn: Some(txn.id) };
                self.rpc_ix(dp.server, c, check).await?;
            }
            // Recovery must know it: once the destination names the source,
            // nothing else leads to the sealed directory left to drop. (The
            // lease renewed first if it is due: the rights checks may have
            // waited out others' leases, and an amend past its own is refused.)
            self.keep_alive(txn).await?;
            self.amend(txn, Intent::RenameOver { src: s.to_string(), dst: d.to_string(), replaced: r.id }).await?;
            self.seal_all(r.id, txn.id).await?;
        }
        self.forget(sdir.id, sname);
        self.forget(ddir.id, dname);
        let result = if sp.server == dp.server {
            self.rpc_ix(sp.server, c, Request::IxRenameDir { src: sp.at.clone(), dst: dp.at.clone(), client: self.client_id, txn: Some(txn.id) }).await
        } else {
            self.rename_dir_between(c, &sp, &dp, txn, &Intent::Rename { src: s.to_string(), dst: d.to_string() }).await
        };
        self.forget(sdir.id, sname);
        self.forget(ddir.id, dname);
        match (result, replaced) {
            (Ok(Reply::Dir(gone)), _) => {
                self.renamed_dir_by_id(c, moving).await;
                self.drop_all(gone.id, false, txn.id).await.map_err(|e| after_commit("rename", e))?;
                Ok(())
            }
            (Ok(_), Some(r)) => {
                // Renamed onto itself: nothing replaced, nothing changed.
                self.unseal_all(r.id, txn.id).await?;
                Ok(())
            }
            (Ok(_), None) => {
                self.renamed_dir_by_id(c, moving).await;
                Ok(())
            }
            (Err(e), Some(r)) => Err(self.unseal_after(r.id, e, txn.id).await),
            (Err(e), None) => Err(e),
        }
    }

    /// A directory rename between two servers: check at the source, insert at
    /// the destination (the commit point), drop the source once its leases ran
    /// out. Answers as `IxRenameDir` does.
    pub(super) async fn rename_dir_between(&self, c: &Creds, sp: &Place, dp: &Place, txn: Txn, intent: &Intent) -> Res<Reply> {
        let intent = || intent.clone();
        let lookup = match self.rpc_ix(sp.server, c, Request::IxRenameDirOut { src: sp.at.clone(), dst: dp.at.clone() }).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        let id = lookup.id;
        let inserted = self.rpc_ix(dp.server, c, Request::IxRenameDirIn { dst: dp.at.clone(), lookup, txn: Some(txn.id) }).await?;
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        let commit = Request::IxRenameDirCommit { src: sp.at.clone(), id, client: self.client_id, txn: Some(txn.id) };
        self.place_rpc(sp, &Creds::root(), commit).await.map_err(|e| after_commit("directory rename", e))?;
        Ok(inserted)
    }

    pub(super) async fn rename_file(&self, c: &Creds, sp: &Place, dp: &Place, txn: Txn, intent: &Intent) -> Res<()> {
        if sp.server == dp.server {
            let r = self.rpc_ix(sp.server, c, Request::RenameLocal { src: sp.at.clone(), dst: dp.at.clone(), txn: Some(txn.id) }).await?;
            return self.drop_remote(r).await;
        }
        let record = match self.rpc_ix(sp.server, c, Request::RenameOut { src: sp.at.clone(), dst: dp.at.clone() }).await? {
            Reply::Record(r) => r,
            other => return Err(unexpected(other)),
        };
        let ino = record.ino();
        let inserted = self.rpc_ix(dp.server, c, Request::RenameIn { src: sp.at.clone(), dst: dp.at.clone(), record, txn: Some(txn.id) }).await?;
        if inserted == Reply::Unit {
            return Ok(());
        }
        self.step(txn, || Step::PrimaryDone(intent.clone())).await?;
        self.place_rpc(sp, &Creds::root(), Request::RenameOutCommit { src: sp.at.clone(), ino, txn: Some(txn.id) }).await.map_err(|e| after_commit("file rename", e))?;
        self.drop_remote(inserted).await
    }

    /// The source is shared first, so its errors (a directory: `EPERM`) come
    /// before the destination's, as on Linux; a destination that then fails
    /// takes the extra link back.
    /// (`ClientCore::link_steps`, as transaction `txn`.)
    pub(super) async fn do_link(&self, c: &Creds, s: &NsPath, d: &NsPath, txn: Txn) -> Result<Attr, LinkFailed> {
        let sp = self.place(c, s).await?;
        let shared = self.rpc_ix(sp.server, c, Request::LinkShare { at: sp.at, txn: Some(txn.id) }).await?;
        let intent = || Intent::Link { src: s.to_string(), dst: d.to_string() };
        let insert = |ino, home| async move {
            match self.place(c, d).await? {
                Place { parent: None, .. } => Err(Errno::EEXIST),
                dp => Ok(self.rpc_ix(dp.server, c, Request::LinkInsert { at: dp.at, ino, home, txn: Some(txn.id) }).await.map(|_| dp.server)),
            }
        };
        self.link_steps(c, shared, txn.id, self.step(txn, || Step::PrimaryDone(intent())), insert).await
    }
}
