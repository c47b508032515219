//! Calls to other daemons from a plain thread (a server's background work, such
//! as an IndexFS split sending a partition to its new server). The caller owns a
//! current-thread runtime: a TCP connection's tasks run while a call waits.

use crate::transport::{Daemon, Transport};
use crate::RpcResult;
use canopy_proto::{Creds, Errno, Request};
use std::sync::Arc;

pub struct BlockingCaller {
    rt: tokio::runtime::Runtime,
    transport: Arc<dyn Transport>,
}

impl BlockingCaller {
    pub fn new(transport: Arc<dyn Transport>) -> Result<BlockingCaller, Errno> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|_| Errno::EIO)?;
        Ok(BlockingCaller { rt, transport })
    }

    /// `req` to metadata server `server`, as root over the caller's key; waits.
    pub fn call(&self, server: u32, req: Request) -> RpcResult {
        let root = Creds::root();
        self.rt.block_on(self.transport.call(Daemon::Server(server), &root, req))
    }

    pub fn servers(&self) -> u32 {
        self.transport.servers()
    }
}
