//! Delegation: how a client that holds only a user key gets its operations done.
//!
//! A directory mutation's steps (replica updates, fences, migration, recovery)
//! are internal requests that need the cluster key, which ordinary users do not
//! hold. So a user's client sends each operation whole to one server
//! (`Request::Delegate`), chosen by the operation's path so the load spreads (in
//! IndexFS, one server per client, whose lookup cache it then uses); that
//! server runs it with its own cluster-key client ([`Delegating`]), acting as the
//! caller, whose credentials the connection's key fixed. The cost is one more hop
//! per operation for such clients; mounts, the bench and the administrator hold
//! the cluster key and talk to the servers directly.

use crate::counters::ClientCounters;
use crate::data::{DataRead, DataWrite};
use crate::fsck::FsckSummary;
use crate::namespace::{Namespace, Res};
use crate::core::unexpected;
use crate::Client;
use canopy_proto::msg::{IfExists, NsCall, ServerStats};
use canopy_proto::path::NsPath;
use canopy_proto::placement;
use canopy_proto::{Attr, Creds, DirEntry, FileKind, Reply, Request, SetAttr};
use canopy_rpc::{Handled, Service, Daemon, Transport};
use futures::future::BoxFuture;
use std::sync::{Arc, RwLock};

/// The client side: every operation is one `Delegate` request over `t`.
/// Administration (stats, fsck, repair) goes through the mode's own client
/// `direct`, as the servers allow it for this key.
pub struct Delegated {
    direct: Arc<dyn Namespace>,
    t: Arc<dyn Transport>,
    /// The one server this client delegates to, for a mode whose servers cache
    /// (IndexFS: one lookup cache, whose leases its own mutations need not wait
    /// for); `None`: each operation to its path's ShardFS primary.
    sticky: Option<u32>,
}

impl Delegated {
    pub(crate) fn new(direct: Arc<dyn Namespace>, t: Arc<dyn Transport>, sticky: Option<u32>) -> Delegated {
        Delegated { direct, t, sticky }
    }

    async fn delegate(&self, c: &Creds, call: NsCall) -> Res<Reply> {
        // Spread by the operation's path. A path that does not parse is refused
        // by any server with the errno the caller would get without delegation.
        let server = self.sticky.unwrap_or_else(|| NsPath::parse(call.path()).map_or(0, |p| placement::primary(&p, self.t.servers())));
        self.direct.counters().sent_to_server(server);
        self.t.call(Daemon::Server(server), c, Request::Delegate { call }).await
    }

    async fn attr(&self, c: &Creds, call: NsCall) -> Res<Attr> {
        match self.delegate(c, call).await? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    async fn unit(&self, c: &Creds, call: NsCall) -> Res<()> {
        match self.delegate(c, call).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

fn s(p: &str) -> String {
    p.to_string()
}

impl Namespace for Delegated {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Mkdir { path: s(path), mode }))
    }
    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.unit(c, NsCall::Rmdir { path: s(path) }))
    }
    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Create { path: s(path), mode, if_exists }))
    }
    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Mknod { path: s(path), mode, kind, rdev }))
    }
    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.unit(c, NsCall::Unlink { path: s(path) }))
    }
    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Stat { path: s(path) }))
    }
    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>> {
        Box::pin(async move {
            match self.delegate(c, NsCall::ReadDir { path: s(path), after: after.map(s), limit }).await? {
                Reply::Entries { entries, more } => Ok((entries, more)),
                other => Err(unexpected(other)),
            }
        })
    }
    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.unit(c, NsCall::Rename { src: s(src), dst: s(dst) }))
    }
    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::SetAttr { path: s(path), set: set.clone() }))
    }
    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Symlink { target: s(target), path: s(path) }))
    }
    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        Box::pin(async move {
            match self.delegate(c, NsCall::Readlink { path: s(path) }).await? {
                Reply::LinkTarget(t) => Ok(t),
                other => Err(unexpected(other)),
            }
        })
    }
    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Link { src: s(src), dst: s(dst) }))
    }
    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.unit(c, NsCall::Access { path: s(path), mask }))
    }
    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        Box::pin(async move {
            match self.delegate(c, NsCall::ReadData { path: s(path), offset, len }).await? {
                Reply::Data(d) => Ok(DataRead::Inline(d)),
                Reply::Backend { fid, size } => Ok(DataRead::Backend { fid, size }),
                other => Err(unexpected(other)),
            }
        })
    }
    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        Box::pin(async move {
            match self.delegate(c, NsCall::WriteData { path: s(path), offset, data: data.to_vec(), inline_max, kill_suid }).await? {
                Reply::Attr(a) => Ok(DataWrite::Written(a)),
                Reply::Backend { fid, size } => Ok(DataWrite::Backend { fid, size }),
                Reply::Spill { fid, data, size } => Ok(DataWrite::Spill { fid, data, size }),
                other => Err(unexpected(other)),
            }
        })
    }
    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Spilled { path: s(path), len, digest }))
    }
    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(self.attr(c, NsCall::Extend { path: s(path), end, kill_suid }))
    }
    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        self.direct.server_stats()
    }
    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        self.direct.fsck()
    }
    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        self.direct.repair()
    }
    fn repair_placement(&self) -> BoxFuture<'_, Res<u64>> {
        self.direct.repair_placement()
    }
    fn counters(&self) -> &ClientCounters {
        self.direct.counters()
    }
    fn drop_caches(&self) {
        self.direct.drop_caches()
    }
    fn holds_grants(&self) -> bool {
        self.direct.holds_grants()
    }
    fn dir_touches(&self) -> Option<Arc<crate::touches::DirTouches>> {
        self.direct.dir_touches()
    }
    fn mode_name(&self) -> &'static str {
        self.direct.mode_name()
    }
    fn servers(&self) -> u32 {
        self.direct.servers()
    }
}

/// The server side: a daemon's service that runs `Delegate` requests with its
/// own cluster-key client and passes everything else to the server.
pub struct Delegating {
    inner: Arc<dyn Service>,
    client: RwLock<Option<Client>>,
}

impl Delegating {
    pub fn new(inner: Arc<dyn Service>) -> Delegating {
        Delegating { inner, client: RwLock::new(None) }
    }

    /// The client delegated operations run on (until then they are answered
    /// ENOSYS). Separate from `new` because that client's transport may reach
    /// this very service.
    pub fn set_client(&self, client: Client) {
        *self.client.write().unwrap_or_else(|p| p.into_inner()) = Some(client);
    }

    /// Drops the client: an in-process cluster's client reaches this service,
    /// a cycle that would otherwise keep both (and the server's store) alive.
    pub fn clear_client(&self) {
        *self.client.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Service for Delegating {
    fn call(&self, peer: &canopy_proto::auth::Identity, creds: Creds, req: Request) -> Handled {
        match req {
            Request::Delegate { call } => match self.client.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
                None => Handled::Now(Err(canopy_proto::Errno::ENOSYS)),
                Some(c) => {
                    let as_caller = c.as_user(creds);
                    Handled::Later(Box::pin(async move { run(&as_caller, call).await }))
                }
            },
            other => self.inner.call(peer, creds, other),
        }
    }

    fn blocks(&self, req: &Request) -> bool {
        !matches!(req, Request::Delegate { .. }) && self.inner.blocks(req)
    }

    fn waits(&self, req: &Request) -> bool {
        !matches!(req, Request::Delegate { .. }) && self.inner.waits(req)
    }

    /// The server's passes, so its log is written once per pass. A delegated
    /// call answers later, through the server's own passes.
    fn in_pass(&self, handlers: &mut dyn FnMut()) -> Result<(), canopy_proto::Errno> {
        self.inner.in_pass(handlers)
    }
}

/// Runs one delegated call as `c`'s user and turns its result into a reply.
async fn run(c: &Client, call: NsCall) -> Res<Reply> {
    let (ns, who) = (c.namespace(), c.creds());
    let attr = |a: Attr| Reply::Attr(a);
    Ok(match call {
        NsCall::Mkdir { path, mode } => attr(ns.mkdir(who, &path, mode).await?),
        NsCall::Rmdir { path } => ns.rmdir(who, &path).await.map(|_| Reply::Unit)?,
        NsCall::Create { path, mode, if_exists } => attr(ns.create(who, &path, mode, if_exists).await?),
        NsCall::Mknod { path, mode, kind, rdev } => attr(ns.mknod(who, &path, mode, kind, rdev).await?),
        NsCall::Unlink { path } => ns.unlink(who, &path).await.map(|_| Reply::Unit)?,
        NsCall::Stat { path } => attr(ns.stat(who, &path).await?),
        NsCall::ReadDir { path, after, limit } => {
            let (entries, more) = ns.readdir_page(who, &path, after.as_deref(), limit).await?;
            Reply::Entries { entries, more }
        }
        NsCall::Rename { src, dst } => ns.rename(who, &src, &dst).await.map(|_| Reply::Unit)?,
        NsCall::SetAttr { path, set } => attr(ns.setattr(who, &path, &set).await?),
        NsCall::Symlink { target, path } => attr(ns.symlink(who, &target, &path).await?),
        NsCall::Readlink { path } => Reply::LinkTarget(ns.readlink(who, &path).await?),
        NsCall::Link { src, dst } => attr(ns.link(who, &src, &dst).await?),
        NsCall::Access { path, mask } => ns.access(who, &path, mask).await.map(|_| Reply::Unit)?,
        NsCall::ReadData { path, offset, len } => match ns.read_data(who, &path, offset, len).await? {
            DataRead::Inline(d) => Reply::Data(d),
            DataRead::Backend { fid, size } => Reply::Backend { fid, size },
        },
        NsCall::WriteData { path, offset, data, inline_max, kill_suid } => match ns.write_data(who, &path, offset, &data, inline_max, kill_suid).await? {
            DataWrite::Written(a) => Reply::Attr(a),
            DataWrite::Backend { fid, size } => Reply::Backend { fid, size },
            DataWrite::Spill { fid, data, size } => Reply::Spill { fid, data, size },
        },
        NsCall::Spilled { path, len, digest } => attr(ns.spilled(who, &path, len, digest).await?),
        NsCall::Extend { path, end, kill_suid } => attr(ns.extend(who, &path, end, kill_suid).await?),
    })
}
