//! A synchronous wrapper around [`Client`] for programs without a runtime.

use crate::namespace::Res;
use crate::Client;
use canopy_proto::{Attr, DirEntry, SetAttr};

pub struct BlockingClient {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl BlockingClient {
    /// Wraps a client whose transport was made by `make` inside the new runtime.
    pub fn new(make: impl FnOnce() -> Client) -> std::io::Result<BlockingClient> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let client = rt.block_on(async { make() });
        Ok(BlockingClient { rt, client })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn run<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt.block_on(f)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Res<Attr> {
        self.run(self.client.mkdir(path, mode))
    }

    pub fn create(&self, path: &str, mode: u32) -> Res<Attr> {
        self.run(self.client.create(path, mode))
    }

    pub fn stat(&self, path: &str) -> Res<Attr> {
        self.run(self.client.stat(path))
    }

    pub fn readdir(&self, path: &str) -> Res<Vec<DirEntry>> {
        self.run(self.client.readdir(path))
    }

    pub fn setattr(&self, path: &str, set: &SetAttr) -> Res<Attr> {
        self.run(self.client.setattr(path, set))
    }

    pub fn unlink(&self, path: &str) -> Res<()> {
        self.run(self.client.unlink(path))
    }

    pub fn rmdir(&self, path: &str) -> Res<()> {
        self.run(self.client.rmdir(path))
    }

    pub fn rename(&self, src: &str, dst: &str) -> Res<()> {
        self.run(self.client.rename(src, dst))
    }
}
