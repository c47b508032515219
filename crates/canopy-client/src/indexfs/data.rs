//! File contents and bulk insertion.

use super::*;
use crate::file_data::{FileData, MakeRequest};

impl FileData for IndexFs {
    fn at_name<'a>(&'a self, c: &'a Creds, p: &'a NsPath, make: MakeRequest<'a>) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async move {
            if p.is_root() {
                return Err(Errno::EISDIR);
            }
            let at_file = |at| match at {
                At::Entry { dir, name } => FileRef::Entry { dir, name },
                At::Path(p) => FileRef::Path(p),
                At::Dir(_) => FileRef::Ino(0),
            };
            self.single(c, p, |at| make(at_file(at))).await
        })
    }

    fn at_server<'a>(&'a self, server: u32, c: &'a Creds, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc_ix(server, c, req))
    }
}

impl IndexFs {
    /// One batch of a bulk insertion into `p`: (files made, names refused).
    pub(super) async fn bulk_batch(&self, c: &Creds, p: &NsPath, names: &[String], mode: u32) -> Res<(u64, Vec<(String, Errno)>)> {
        let d = self.optimistic(p, || self.resolve_dir(c, p)).await?;
        // Shares land one by one, so the batch is not sent again whole: a
        // directory gone meanwhile (its bitmap stale) is just gone.
        self.bulk_shares(c, d.id, names.to_vec(), mode).await.map_err(|e| if e == Errno::ENXIO { Errno::ENOENT } else { e })
    }
}
