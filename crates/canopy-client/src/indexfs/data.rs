//! File contents and bulk insertion.

use super::*;

impl IndexFs {
    pub(super) async fn data_rpc(&self, c: &Creds, path: &str, make: impl Fn(FileRef) -> Request) -> Res<Reply> {
        let p = NsPath::parse(path)?;
        if p.is_root() {
            return Err(Errno::EISDIR);
        }
        let reply = self
            .single(c, &p, |at| {
                make(match at {
                    At::Entry { dir, name } => FileRef::Entry { dir, name },
                    At::Path(p) => FileRef::Path(p),
                    At::Dir(_) => FileRef::Ino(0),
                })
            })
            .await;
        match reply {
            Ok(Reply::Redirect { ino, home }) => self.rpc_ix(home, c, make(FileRef::Ino(ino))).await,
            r => r,
        }
    }

    /// One batch of a bulk insertion into `p`: (files made, names refused).
    pub(super) async fn bulk_batch(&self, c: &Creds, p: &NsPath, names: &[String], mode: u32) -> Res<(u64, Vec<(String, Errno)>)> {
        let d = self.optimistic(p, || self.resolve_dir(c, p)).await?;
        // Shares land one by one, so the batch is not sent again whole: a
        // directory gone meanwhile (its bitmap stale) is just gone.
        self.bulk_shares(c, d.id, names.to_vec(), mode).await.map_err(|e| if e == Errno::ENXIO { Errno::ENOENT } else { e })
    }
}
