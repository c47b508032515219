//! Recovery of an IndexFS transaction whose coordinator died, from the
//! durable state its steps left.

use super::*;
use crate::recover::Recovers;

impl Recovers for IndexFs {
    type Name = Place;

    fn name_ref(place: &Place) -> At {
        place.at.clone()
    }

    fn at_name<'a>(&'a self, place: &'a Place, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async move { self.place_rpc(place, &Creds::root(), req).await })
    }

    fn mkdir_recovered<'a>(&'a self, path: &'a str, txn: Txn, _was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let Some((parent, l)) = self.fresh_entry(&p).await? else { return Ok(()) };
            let depth = p.components().count() as u32;
            self.rpc_ix(self.home(l.id), &Creds::root(), Request::IxMkHeader { lookup: l, parent: parent.id, depth, txn: Some(txn.id) }).await?;
            Ok(())
        })
    }

    fn rmdir_recovered<'a>(&'a self, path: &'a str, txn: Txn, _was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let Some((parent, child)) = self.fresh_entry(&p).await? else { return Ok(()) };
            let name = p.name().unwrap_or_default();
            let root = Creds::root();
            match self.rpc_ix(self.home(child.id), &root, Request::Stat { at: At::Dir(child.id) }).await {
                // The header is still there: undo (unseal).
                Ok(_) => self.unseal_all(child.id, txn.id).await,
                // Dropped on its home: the directory was empty and sealed;
                // finish (its other partitions, then its entry).
                Err(Errno::ENXIO) => {
                    self.drop_all(child.id, true, txn.id).await?;
                    let req = Request::IxRmdir { dir: parent.id, name: name.to_string(), check_only: false, client: self.client_id, txn: Some(txn.id) };
                    self.entry_rpc(parent.id, name, &root, req).await.map(|_| ())
                }
                Err(e) => Err(e),
            }
        })
    }

    fn dir_attrs_recovered<'a>(&'a self, path: &'a str, txn: Txn, _was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            match self.fresh_entry(&NsPath::parse(path)?).await? {
                Some((_, l)) => self.header_set_all(&l, txn.id).await,
                None => Ok(()),
            }
        })
    }

    fn rename_recovered<'a>(&'a self, src: &'a str, dst: &'a str, replaced: Option<u64>, txn: Txn, _was: u64) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            self.cache().clear();
            let root = Creds::root();
            // A parent gone: neither name holds anything to finish.
            let (Some(sp), Some(dp)) = (unless_absent(self.place(&root, &s).await)?, unless_absent(self.place(&root, &d).await)?) else { return Ok(()) };
            let was_dir = self.recover_dir_rename(&sp, &dp, txn.id).await?;
            match replaced {
                Some(replaced) => self.recover_replaced(&dp, replaced, txn.id).await,
                None if was_dir => Ok(()),
                None => self.finish_file_rename(&sp, &dp, txn.id).await,
            }
        })
    }
}

impl IndexFs {
    /// The directory `p` names and its parent, both read afresh from the
    /// servers; None if either is gone (a transaction on it left nothing).
    async fn fresh_entry(&self, p: &NsPath) -> Res<Option<(DirLookup, DirLookup)>> {
        let Some(parent) = self.fresh_parent(p).await? else { return Ok(None) };
        let entry = unless_absent(self.fresh_lookup(parent.id, p.name().unwrap_or_default()).await)?;
        Ok(entry.map(|l| (parent, l)))
    }

    /// A directory rename between servers that died after its insert (the
    /// commit point) left one directory under both names: drop the source.
    /// One that died before it may have sealed a directory it was to replace:
    /// unseal it. False if the source is no directory (a file rename, or
    /// nothing to do).
    pub(super) async fn recover_dir_rename(&self, sp: &Place, dp: &Place, txn: u64) -> Res<bool> {
        let (Some((sdir, sname)), Some((ddir, dname))) = (&sp.parent, &dp.parent) else { return Ok(false) };
        let Some(src) = unless_absent(self.fresh_lookup(sdir.id, sname).await)? else { return Ok(false) };
        if let Some(dst) = unless_absent(self.fresh_lookup(ddir.id, dname).await)? {
            if dst.id == src.id {
                let commit = Request::IxRenameDirCommit { src: sp.at.clone(), id: src.id, client: self.client_id, txn: Some(txn) };
                self.place_rpc(sp, &Creds::root(), commit).await?;
            } else {
                self.unseal_all(dst.id, txn).await?;
            }
        }
        Ok(true)
    }

    /// The directory a rename was to replace, once the rename itself is
    /// recovered: still named by the destination, the rename did not commit
    /// and it is unsealed (if it was sealed); named no more, the rename
    /// committed (it was sealed, and empty, before the insert) and its
    /// partitions go, on every server since no bitmap is left to say where.
    pub(super) async fn recover_replaced(&self, dp: &Place, replaced: u64, txn: u64) -> Res<()> {
        let Some((ddir, dname)) = &dp.parent else { return Ok(()) };
        match unless_absent(self.fresh_lookup(ddir.id, dname).await)? {
            Some(l) if l.id == replaced => self.unseal_all(replaced, txn).await,
            _ => self.drop_all(replaced, true, txn).await,
        }
    }
}
