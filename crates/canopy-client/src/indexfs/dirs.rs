//! IndexFS's directory transactions (mkdir, rmdir, chmod/chown of a
//! directory) and directory times.

use super::*;

impl IndexFs {
    /// Directory `id` was renamed: what this client owes its times first,
    /// then its new ctime, both on its home.
    pub(super) async fn renamed_dir_by_id(&self, c: &Creds, id: u64) {
        self.send_owed_touch(|| TouchedDir::Id(id)).await;
        self.renamed_dir(c, TouchedDir::Id(id), self.home(id)).await;
    }

    /// With directory times on: after a name was added or removed in `p`'s
    /// directory, sets its mtime and ctime on its home, not waiting for it.
    pub(super) async fn touch_parent(&self, c: &Creds, p: &NsPath) {
        if !self.dir_times {
            return;
        }
        let Some((pp, _)) = p.split() else { return };
        if let Ok(parent) = self.resolve_dir(c, &pp).await {
            self.touch_dir(c, &parent).await;
        }
    }

    /// [`IndexFs::touch_parent`] of a directory already resolved: its times
    /// live on its home (`touches.rs`).
    pub(super) async fn touch_dir(&self, c: &Creds, parent: &DirLookup) {
        self.touched(c, TouchedDir::Id(parent.id), self.home(parent.id)).await;
    }

    pub(super) async fn do_mkdir(&self, c: &Creds, p: &NsPath, mode: u32, txn: Txn) -> Res<Attr> {
        let intent = || Intent::Mkdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let place = self.place(c, p).await?;
        let Some((parent, name)) = place.parent else { return Err(Errno::EEXIST) };
        let lookup = match self.rpc_ix(place.server, c, Request::IxMkdir { dir: parent.id, name, mode, txn: Some(txn.id) }).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        let depth = p.components().count() as u32;
        let header = Request::IxMkHeader { lookup: lookup.clone(), parent: parent.id, depth, txn: Some(txn.id) };
        match self.rpc_ix(self.home(lookup.id), &Creds::root(), header).await.map_err(|e| after_commit("mkdir", e))? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    pub(super) async fn do_rmdir(&self, c: &Creds, p: &NsPath, txn: Txn) -> Res<()> {
        let intent = || Intent::Rmdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let place = self.place(c, p).await?;
        let Some((parent, name)) = place.parent else { return Err(Errno::EBUSY) };
        let check = Request::IxRmdir { dir: parent.id, name: name.clone(), check_only: true, client: self.client_id, txn: Some(txn.id) };
        let child = match self.rpc_ix(place.server, c, check).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        let home = self.home(child.id);
        let root = Creds::root();
        self.seal_all(child.id, txn.id).await?;
        if let Err(e) = self.drop_all(child.id, false, txn.id).await {
            if self.rpc_ix(home, &root, Request::Stat { at: At::Dir(child.id) }).await.is_ok() {
                return Err(self.unseal_after(child.id, e, txn.id).await);
            }
            // Its home dropped it (the point recovery decides by): finish.
            return Err(after_commit("rmdir", e));
        }
        self.step(txn, || Step::ReplicasDone(intent())).await?;
        // Our own copy goes first: the server then need not wait for our lease.
        self.forget(parent.id, &name);
        let remove = Request::IxRmdir { dir: parent.id, name: name.clone(), check_only: false, client: self.client_id, txn: Some(txn.id) };
        let r = self.entry_rpc(parent.id, &name, c, remove).await;
        match r {
            Ok(_) => self.last_step(|| Step::PrimaryDone(intent())).await,
            Err(e) if outcome_unknown(&e) => Err(Errno::EIO),
            Err(e) => {
                // Refused: the directory stays; put its header back.
                let depth = p.components().count() as u32;
                let back = Request::IxMkHeader { lookup: child, parent: parent.id, depth, txn: Some(txn.id) };
                self.rpc_ix(home, &root, back).await.map_err(|_| Errno::EIO)?;
                Err(e)
            }
        }
    }

    /// A step of `txn` after sealing failed with `e`: unseal, unless its
    /// outcome is unknown.
    pub(super) async fn unseal_after(&self, dir: u64, e: Errno, txn: u64) -> Errno {
        if outcome_unknown(&e) {
            return Errno::EIO;
        }
        match self.unseal_all(dir, txn).await {
            Ok(_) => e,
            Err(_) => Errno::EIO,
        }
    }

    pub(super) async fn do_dir_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr, txn: Txn) -> Res<Attr> {
        let intent = || Intent::DirSetAttr { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let place = self.place(c, p).await?;
        match &place.parent {
            None => self.forget(0, ""),
            Some((parent, name)) => self.forget(parent.id, name),
        }
        let (dir, name) = place.parent.as_ref().map_or((0, String::new()), |(parent, name)| (parent.id, name.clone()));
        let req = Request::IxDirSetAttr { dir, name, set: set.clone(), client: self.client_id, txn: Some(txn.id) };
        // The entry's partition may have split away since `place` (splits take
        // no locks): the request follows it.
        let attr = match self.place_rpc(&place, c, req).await? {
            Reply::Attr(a) => a,
            other => return Err(unexpected(other)),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        if let Some((parent, name)) = &place.parent {
            self.forget(parent.id, name);
        }
        // The root's home header changed with its entry; its other partitions
        // (and every partition of another directory) take the copy.
        let lookup = DirLookup { id: attr.ino, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        self.header_set_all(&lookup, txn.id).await.map_err(|e| after_commit("directory setattr", e))?;
        Ok(attr)
    }

    pub(super) async fn do_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr) -> Res<Attr> {
        let r = self.single(c, p, |at| Request::SetAttr { at, set: set.clone() }).await;
        match r {
            Ok(Reply::Redirect { ino, home }) => match self.rpc_ix(home, c, Request::InodeSetAttr { ino, set: set.clone() }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            },
            Ok(other) => self.attr_or_follow(other).await,
            // A directory: times on its home; mode and owner a transaction.
            Err(Errno::EISDIR | Errno::EREMOTE) if set.size.is_none() => {
                let dir = match p.split() {
                    None => ROOT_ID,
                    Some((pp, name)) => {
                        let parent = self.resolve_dir(c, &pp).await?;
                        self.subdir(c, &parent, name, p).await?.id
                    }
                };
                if set.touches_lookup_state() {
                    let lookup = lookup_part(set);
                    self.locked_as(path_locks(&[p]), Intent::DirSetAttr { path: p.to_string() }, |txn| self.do_dir_setattr(c, p, &lookup, txn)).await?;
                }
                match times_part(set) {
                    Some(times) => {
                        // What this client owes its times first: a late touch would undo a utimens.
                        self.send_owed_touch(|| TouchedDir::Id(dir)).await;
                        self.attr_or_follow(self.rpc_ix(self.home(dir), c, Request::SetAttr { at: At::Dir(dir), set: times }).await?).await
                    }
                    None => self.stat_dir(c, dir).await,
                }
            }
            Err(e) => Err(e),
        }
    }
}
