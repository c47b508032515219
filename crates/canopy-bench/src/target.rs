//! What the bench runs its phases against: anything that can do the six
//! operations. A Canopy [`Client`] is one; a directory reached through system calls
//! ([`crate::posix::Posix`]) is another. Errors are only counted, so both report
//! them as `io::Error` (a Canopy errno is a Linux errno).

use crate::workload::{renamed, Op, CHMOD_MODE, DIR_MODE, FILE_MODE};
use canopy_client::Client;
use canopy_proto::Errno;
use std::future::Future;
use std::io;

/// The six operations of the bench's phases. Every worker has its own handle, so
/// a handle is cheap to clone.
pub trait BenchTarget: Clone + Send + Sync + 'static {
    fn mkdir(&self, path: &str, mode: u32) -> impl Future<Output = io::Result<()>> + Send;
    /// An exclusive create (`O_CREAT | O_EXCL`): an existing file is an error.
    fn create(&self, path: &str, mode: u32) -> impl Future<Output = io::Result<()>> + Send;
    /// lstat: a symlink is not followed.
    fn stat(&self, path: &str) -> impl Future<Output = io::Result<()>> + Send;
    fn chmod(&self, path: &str, mode: u32) -> impl Future<Output = io::Result<()>> + Send;
    fn rename(&self, from: &str, to: &str) -> impl Future<Output = io::Result<()>> + Send;
    fn rmdir(&self, path: &str) -> impl Future<Output = io::Result<()>> + Send;
}

/// Does `op` to `path`.
pub async fn apply<T: BenchTarget>(target: &T, op: Op, path: &str) -> io::Result<()> {
    match op {
        Op::Mkdir => target.mkdir(path, DIR_MODE).await,
        Op::Create => target.create(path, FILE_MODE).await,
        Op::Stat => target.stat(path).await,
        Op::Chmod => target.chmod(path, CHMOD_MODE).await,
        Op::Rename => target.rename(path, &renamed(path)).await,
        Op::Rmdir => target.rmdir(path).await,
    }
}

fn os_error(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.code())
}

// `Client::mkdir(self, ...)` and the like name the client's own (inherent)
// methods, which Rust picks over the trait's.
impl BenchTarget for Client {
    async fn mkdir(&self, path: &str, mode: u32) -> io::Result<()> {
        Client::mkdir(self, path, mode).await.map(drop).map_err(os_error)
    }

    async fn create(&self, path: &str, mode: u32) -> io::Result<()> {
        Client::create(self, path, mode).await.map(drop).map_err(os_error)
    }

    async fn stat(&self, path: &str) -> io::Result<()> {
        Client::stat(self, path).await.map(drop).map_err(os_error)
    }

    async fn chmod(&self, path: &str, mode: u32) -> io::Result<()> {
        Client::chmod(self, path, mode).await.map(drop).map_err(os_error)
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Client::rename(self, from, to).await.map_err(os_error)
    }

    async fn rmdir(&self, path: &str) -> io::Result<()> {
        Client::rmdir(self, path).await.map_err(os_error)
    }
}
