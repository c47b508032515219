//! Hard links and setattr of a name.

use super::*;

impl ShardFs {
    /// A hard link as transaction `txn` (`ClientCore::link_steps`).
    pub(super) async fn do_link(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Result<Attr, LinkFailed> {
        let shared = self.under_own_locks(c, src, Request::LinkShare { at: src.to_string().into(), txn: Some(txn.id) }).await?;
        let intent = || Intent::Link { src: src.to_string(), dst: dst.to_string() };
        let insert = |ino, home| async move {
            let made = self.under_own_locks(c, dst, Request::LinkInsert { at: dst.to_string().into(), ino, home, txn: Some(txn.id) }).await;
            Ok(made.map(|_| self.primary(dst)))
        };
        self.link_steps(c, shared, txn.id, self.step(txn, || Step::PrimaryDone(intent())), insert).await
    }

    pub(super) async fn do_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr) -> Res<Attr> {
        // What this client owes a directory's times goes first: a late touch
        // would undo a utimens (`tar` sets a directory's times last).
        self.send_owed_touch(|| TouchedDir::Path(p.clone())).await;
        match self.single(c, p, Request::SetAttr { at: p.to_string().into(), set: set.clone() }).await {
            Ok(Reply::Redirect { ino, home }) => match self.rpc(home, c, Request::InodeSetAttr { ino, set: set.clone() }).await? {
                Reply::Attr(a) => Ok(a),
                other => Err(unexpected(other)),
            },
            Ok(other) => self.attr_or_follow(other).await,
            // A directory's mode and owner are replicated: a transaction.
            Err(Errno::EISDIR) if set.size.is_none() && set.touches_lookup_state() => {
                let intent = Intent::DirSetAttr { path: p.to_string() };
                let lookup = lookup_part(set);
                let attr = self.locked(&[p], intent, |txn| self.do_dir_setattr(c, p, &lookup, txn)).await?;
                match times_part(set) {
                    None => Ok(attr),
                    Some(times) => {
                        let r = self.rpc(self.primary(p), c, Request::SetAttr { at: p.to_string().into(), set: times }).await?;
                        self.attr_or_follow(r).await
                    }
                }
            }
            Err(e) => Err(e),
        }
    }
}
