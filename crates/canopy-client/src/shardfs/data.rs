//! ShardFS's data requests and directory times: each is one RPC to the file's
//! primary (or, for a hard-linked file, a second one to its inode's home server).

use crate::data::{DataRead, DataWrite};
use crate::namespace::Res;
use crate::core::unexpected;
use crate::shardfs::ShardFs;
use crate::touches::TouchedDir;
use canopy_proto::msg::FileRef;
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, Reply, Request};

impl ShardFs {
    /// Sends the data request `make(at)` for the file at `path`, following a
    /// redirect to a shared inode's home server.
    async fn data_rpc(&self, c: &Creds, path: &str, make: impl Fn(FileRef) -> Request) -> Res<Reply> {
        let p = NsPath::parse(path)?;
        match self.single(c, &p, make(FileRef::Path(p.to_string()))).await? {
            Reply::Redirect { ino, home } => self.rpc(home, c, make(FileRef::Ino(ino))).await,
            reply => Ok(reply),
        }
    }

    pub(crate) async fn do_read_data(&self, c: &Creds, path: &str, offset: u64, len: u32) -> Res<DataRead> {
        DataRead::from_reply(self.data_rpc(c, path, |at| Request::ReadData { at, offset, len }).await?)
    }

    pub(crate) async fn do_write_data(&self, c: &Creds, path: &str, offset: u64, data: &[u8], inline_max: u32, kill_suid: bool) -> Res<DataWrite> {
        let make = |at| Request::WriteData { at, offset, data: data.to_vec(), inline_max, kill_suid };
        DataWrite::from_reply(self.data_rpc(c, path, make).await?)
    }

    pub(crate) async fn do_spilled(&self, c: &Creds, path: &str, len: u64, digest: u64) -> Res<Attr> {
        match self.data_rpc(c, path, |at| Request::Spilled { at, len, digest }).await? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) async fn do_extend(&self, c: &Creds, path: &str, end: u64, kill_suid: bool) -> Res<Attr> {
        match self.data_rpc(c, path, |at| Request::Extend { at, end, kill_suid }).await? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

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
