//! The [`Namespace`] a ShardFS client is: each operation of the client API
//! as the protocol's steps.

use crate::file_data::FileData;
use crate::recover::Recovers;
use super::*;

impl Namespace for ShardFs {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EEXIST);
            }
            let r = self.locked(&[&p], Intent::Mkdir { path: p.to_string() }, |txn| self.do_mkdir(c, &p, mode, txn)).await;
            let attr = self.settle(c, &p, r).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EBUSY);
            }
            let r = self.locked(&[&p], Intent::Rmdir { path: p.to_string() }, |txn| self.do_rmdir(c, &p, txn)).await;
            self.settle(c, &p, r).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(())
        })
    }

    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let kind = NewKind::File;
            let reply = self.single(c, &p, Request::Create { at: p.to_string().into(), mode, kind, if_exists }).await?;
            let redirected = matches!(reply, Reply::Redirect { .. });
            let attr = self.attr_or_follow(reply).await?;
            if let (true, IfExists::Open { access }) = (redirected, if_exists) {
                // An existing hard-linked file whose inode lives on another
                // server: the server that answered could not check it.
                perm::check_open_existing(c, &attr, access)?;
            }
            // Without O_EXCL the file may have existed already; touching its
            // directory then is a harmless extra update, and saves asking.
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let req = Request::Create { at: p.to_string().into(), mode, kind: NewKind::Special { kind, rdev }, if_exists: IfExists::Fail };
            let attr = self.attr_or_follow(self.single(c, &p, req).await?).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, Request::Unlink { at: p.to_string().into() }).await?;
            self.drop_remote(reply).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(())
        })
    }

    fn read_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, len: u32) -> BoxFuture<'a, Res<DataRead>> {
        self.read_file(c, path, offset, len)
    }

    fn write_data<'a>(&'a self, c: &'a Creds, path: &'a str, offset: u64, data: &'a [u8], inline_max: u32, kill_suid: bool) -> BoxFuture<'a, Res<DataWrite>> {
        self.write_file(c, path, offset, data, inline_max, kill_suid)
    }

    fn spilled<'a>(&'a self, c: &'a Creds, path: &'a str, len: u64, digest: u64) -> BoxFuture<'a, Res<Attr>> {
        self.spill_file(c, path, len, digest)
    }

    fn extend<'a>(&'a self, c: &'a Creds, path: &'a str, end: u64, kill_suid: bool) -> BoxFuture<'a, Res<Attr>> {
        self.extend_file(c, path, end, kill_suid)
    }

    fn stat<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.stat_path(c, &NsPath::parse(path)?).await })
    }

    fn readdir_page<'a>(&'a self, c: &'a Creds, path: &'a str, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Res<(Vec<DirEntry>, bool)>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            self.optimistic(c, &p, || self.readdir_once(c, &p, after, limit.clamp(1, 4096))).await
        })
    }

    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.rename_as(c, src, dst, false))
    }

    fn rename_dir<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(self.rename_as(c, src, dst, true))
    }

    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.do_setattr(c, &NsPath::parse(path)?, set).await })
    }

    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let req = Request::Create { at: p.to_string().into(), mode: 0o777, kind: NewKind::Symlink(target.to_string()), if_exists: IfExists::Fail };
            let attr = self.attr_or_follow(self.single(c, &p, req).await?).await?;
            self.touch_parents(c, &[&p]).await;
            Ok(attr)
        })
    }

    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.single(c, &p, Request::Readlink { at: p.to_string().into() }).await? {
                Reply::LinkTarget(t) => Ok(t),
                other => Err(unexpected(other)),
            }
        })
    }

    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            let r = async {
                let txn = self.lock(&[&s, &d], Intent::Link { src: s.to_string(), dst: d.to_string() }).await?;
                let steps = self.do_link(c, &s, &d, txn).await;
                self.end_link(txn, steps).await
            }
            .await;
            let attr = self.settle_two(c, &s, &d, r).await?;
            self.touch_parents(c, &[&d]).await;
            Ok(attr)
        })
    }

    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, Request::Access { at: p.to_string().into(), mask }).await?;
            self.access_or_follow(c, reply, mask).await
        })
    }

    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        Box::pin(self.all_stats())
    }

    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        Box::pin(self.fsck_all(crate::fsck::DirLayout::Replicated))
    }

    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(self.core.repair_expired(|locks| self.lock_recovering(locks, Intent::Retry { path: "/".into() })))
    }

    fn repair_placement(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(ShardFs::repair_placement(self))
    }

    fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    /// A file's server is its primary; chunks name the directory by path
    /// (the server resolves it with every search check).
    fn batch_route<'a>(&'a self, _c: &'a Creds, dir: &'a str, names: &'a [&'a str], _fresh: bool) -> BoxFuture<'a, Res<(At, Vec<u32>)>> {
        Box::pin(async move {
            let d = NsPath::parse(dir)?;
            let servers = names.iter().map(|n| Ok(self.primary(&d.join(n)?))).collect::<Res<Vec<u32>>>()?;
            Ok((At::Path(d.as_str().to_string()), servers))
        })
    }

    fn batch_call<'a>(&'a self, c: &'a Creds, server: u32, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc(server, c, req))
    }

    fn dir_touches(&self) -> Option<Arc<DirTouches>> {
        self.touches.clone()
    }

    fn mode_name(&self) -> &'static str {
        "shardfs"
    }

    fn servers(&self) -> u32 {
        self.n
    }
}
