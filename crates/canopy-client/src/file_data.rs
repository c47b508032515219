//! A file's contents, the same in every mode: each data request goes to where
//! the file's name lives, and on to its inode's home server when that name is
//! a hard link (the server answers `Redirect`). A mode says only how it
//! reaches a name and a server ([`FileData`]); the requests are made here.

use crate::core::ClientCore;
use crate::data::{DataRead, DataWrite};
use crate::namespace::Res;
use canopy_proto::msg::FileRef;
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, Reply, Request};
use futures::future::BoxFuture;

/// Builds a data request for the file a [`FileRef`] names.
pub(crate) type MakeRequest<'a> = &'a (dyn Fn(FileRef) -> Request + Sync);

/// How a mode reaches a file for its contents.
pub(crate) trait FileData: std::ops::Deref<Target = ClientCore> + Sync {
    /// `make(at)` sent to where the name `p` lives, `at` naming the file there.
    fn at_name<'a>(&'a self, c: &'a Creds, p: &'a NsPath, make: MakeRequest<'a>) -> BoxFuture<'a, Res<Reply>>;

    /// `req` sent to server `server` (a shared inode's home).
    fn at_server<'a>(&'a self, server: u32, c: &'a Creds, req: Request) -> BoxFuture<'a, Res<Reply>>;

    /// The request `make` builds for the file at `path`, following a hard
    /// link's redirect to its inode's home.
    fn data_rpc<'a>(&'a self, c: &'a Creds, path: &'a str, make: MakeRequest<'a>) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.at_name(c, &p, make).await? {
                Reply::Redirect { ino, home } => self.at_server(home, c, make(FileRef::Ino(ino))).await,
                reply => Ok(reply),
            }
        })
    }

    fn read_file<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        Box::pin(async move { DataRead::from_reply(self.data_rpc(c, path, &|at| Request::ReadData { at, offset, len }).await?) })
    }

    fn write_file<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        Box::pin(async move {
            let make = |at| Request::WriteData { at, offset, data: data.to_vec(), inline_max, kill_suid };
            DataWrite::from_reply(self.data_rpc(c, path, &make).await?)
        })
    }

    /// Records that the file's contents went to back-end storage.
    fn spill_file<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.attr_or_follow(self.data_rpc(c, path, &|at| Request::Spilled { at, len, digest }).await?).await })
    }

    /// Grows the file's recorded size to at least `end`.
    fn extend_file<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.attr_or_follow(self.data_rpc(c, path, &|at| Request::Extend { at, end, kill_suid }).await?).await })
    }
}
