//! ShardFS's data requests and directory times: each is one RPC to the file's
//! primary (or, for a hard-linked file, a second one to its inode's home server).

use crate::file_data::{FileData, MakeRequest};
use crate::namespace::Res;
use crate::shardfs::ShardFs;
use crate::touches::TouchedDir;
use canopy_proto::msg::FileRef;
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Reply, Request};
use futures::future::BoxFuture;

impl FileData for ShardFs {
    fn at_name<'a>(&'a self, c: &'a Creds, p: &'a NsPath, make: MakeRequest<'a>) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.single(c, p, make(FileRef::Path(p.to_string()))))
    }

    fn at_server<'a>(&'a self, server: u32, c: &'a Creds, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc(server, c, req))
    }
}

impl ShardFs {
    /// After a name was added or removed in the parents of `paths`: their
    /// times, on their primaries (`touches.rs`).
    pub(crate) async fn touch_parents(&self, c: &Creds, paths: &[&NsPath]) {
        if !self.dir_times {
            return;
        }
        let mut parents: Vec<NsPath> = paths.iter().filter_map(|p| p.split().map(|(parent, _)| parent)).collect();
        parents.dedup();
        for parent in parents {
            let server = canopy_proto::placement::primary(&parent, self.n);
            self.touched(c, TouchedDir::Path(parent), server).await;
        }
    }
}
