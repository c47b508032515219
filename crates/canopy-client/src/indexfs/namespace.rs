//! The [`Namespace`] an IndexFS client is.

use crate::recover::Recovers;
use super::*;
use crate::file_data::FileData;

impl Namespace for IndexFs {
    fn mkdir<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EEXIST);
            }
            let attr = self.transacted(&p, || self.locked_as(path_locks(&[&p]), Intent::Mkdir { path: p.to_string() }, |txn| self.do_mkdir(c, &p, mode, txn))).await?;
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn rmdir<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            if p.is_root() {
                return Err(Errno::EBUSY);
            }
            self.transacted(&p, || self.locked_as(path_locks(&[&p]), Intent::Rmdir { path: p.to_string() }, |txn| self.do_rmdir(c, &p, txn))).await?;
            self.touch_parent(c, &p).await;
            Ok(())
        })
    }

    fn create<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, if_exists: IfExists) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, |at| Request::Create { at, mode, kind: NewKind::File, if_exists }).await?;
            let redirected = matches!(reply, Reply::Redirect { .. });
            let attr = self.attr_or_follow(reply).await?;
            if let (true, IfExists::Open { access }) = (redirected, if_exists) {
                perm::check_open_existing(c, &attr, access)?;
            }
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn mknod<'a>(&'a self, c: &'a Creds, path: &'a str, mode: u32, kind: FileKind, rdev: u64) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = self.single(c, &p, |at| Request::Create { at, mode, kind: NewKind::Special { kind, rdev }, if_exists: IfExists::Fail }).await?;
            let attr = self.attr_or_follow(reply).await?;
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn unlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            let reply = match self.single(c, &p, |at| Request::Unlink { at }).await {
                // A directory: its attributes are elsewhere, and unlink refuses it.
                Err(Errno::EREMOTE) => return Err(Errno::EISDIR),
                r => r?,
            };
            self.drop_remote(reply).await?;
            self.touch_parent(c, &p).await;
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
            self.optimistic(&p, || async {
                let dir = self.resolve_dir(c, &p).await?;
                self.list_page(c, dir.id, after, limit).await
            })
            .await
        })
    }

    fn rename<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            if s == d {
                return self.stat_path(c, &s).await.map(|_| ());
            }
            let intent = Intent::Rename { src: s.to_string(), dst: d.to_string() };
            self.transacted(&s, || self.locked_as(path_locks(&[&s, &d]), intent.clone(), |txn| self.do_rename(c, &s, &d, txn))).await?;
            self.touch_parent(c, &s).await;
            self.touch_parent(c, &d).await;
            Ok(())
        })
    }

    fn setattr<'a>(&'a self, c: &'a Creds, path: &'a str, set: &'a SetAttr) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move { self.do_setattr(c, &NsPath::parse(path)?, set).await })
    }

    fn symlink<'a>(&'a self, c: &'a Creds, target: &'a str, path: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            canopy_proto::path::check_symlink_target(target)?;
            let kind = NewKind::Symlink(target.to_string());
            let reply = self.single(c, &p, |at| Request::Create { at, mode: 0o777, kind: kind.clone(), if_exists: IfExists::Fail }).await?;
            let attr = self.attr_or_follow(reply).await?;
            self.touch_parent(c, &p).await;
            Ok(attr)
        })
    }

    fn readlink<'a>(&'a self, c: &'a Creds, path: &'a str) -> BoxFuture<'a, Res<String>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.single(c, &p, |at| Request::Readlink { at }).await {
                Ok(Reply::LinkTarget(t)) => Ok(t),
                Err(Errno::EREMOTE) => Err(Errno::EINVAL),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(e),
            }
        })
    }

    fn link<'a>(&'a self, c: &'a Creds, src: &'a str, dst: &'a str) -> BoxFuture<'a, Res<Attr>> {
        Box::pin(async move {
            let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
            let intent = Intent::Link { src: s.to_string(), dst: d.to_string() };
            let attr = self
                .transacted(&s, || async {
                    let txn = self.lock_recovering(path_locks(&[&s, &d]), intent.clone()).await?;
                    let steps = self.do_link(c, &s, &d, txn).await;
                    self.end_link(txn, steps).await
                })
                .await?;
            self.touch_parent(c, &d).await;
            Ok(attr)
        })
    }

    fn access<'a>(&'a self, c: &'a Creds, path: &'a str, mask: u32) -> BoxFuture<'a, Res<()>> {
        Box::pin(async move {
            let p = NsPath::parse(path)?;
            match self.single(c, &p, |at| Request::Access { at, mask }).await {
                // A directory: check it against its attributes on its home.
                Err(Errno::EREMOTE) => {
                    let a = self.stat_path(c, &p).await?;
                    if mask & 7 == access::F || perm::allows(c, Owner::of_attr(&a), true, mask & 7) {
                        Ok(())
                    } else {
                        Err(Errno::EACCES)
                    }
                }
                r => self.access_or_follow(c, r?, mask).await,
            }
        })
    }

    fn server_stats(&self) -> BoxFuture<'_, Res<Vec<ServerStats>>> {
        Box::pin(self.all_stats())
    }

    /// Servers are checked one after another, so a split that moves names
    /// between two of them meanwhile could show them twice or not at all: the
    /// check waits for splits under way and runs again if one happened.
    fn fsck(&self) -> BoxFuture<'_, Res<FsckSummary>> {
        Box::pin(async move {
            for _ in 0..100 {
                let (done, busy) = self.split_activity().await?;
                if busy > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
                let report = self.fsck_all(crate::fsck::DirLayout::Partitioned).await?;
                if self.split_activity().await? == (done, 0) {
                    return Ok(report);
                }
            }
            self.fsck_all(crate::fsck::DirLayout::Partitioned).await
        })
    }

    fn repair(&self) -> BoxFuture<'_, Res<u64>> {
        Box::pin(self.core.repair_expired(|locks| self.lock_recovering(locks, Intent::Retry { path: "/".into() })))
    }

    fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    fn drop_caches(&self) {
        self.cache().clear();
        self.forget_maps();
    }

    /// Bulk insertion: the names go in batches of [`BULK_BATCH`], each split
    /// into one share per partition's server (sent at once), checked there and
    /// ingested as one table.
    fn bulk_create<'a>(&'a self, c: &'a Creds, dir: &'a str, names: &'a [String], mode: u32) -> BoxFuture<'a, Res<BulkOutcome>> {
        Box::pin(async move {
            let p = NsPath::parse(dir)?;
            let mut out = BulkOutcome::default();
            let batches = ramped(names);
            for group in batches.chunks(IN_FLIGHT) {
                let replies = futures::future::join_all(group.iter().map(|b| self.bulk_batch(c, &p, b, mode))).await;
                for reply in replies {
                    let (created, rejected) = reply?;
                    out.created += created;
                    out.rejected.extend(rejected);
                }
            }
            if out.created > 0 {
                self.touch_dir(c, &self.resolve_dir(c, &p).await?).await;
            }
            Ok(out)
        })
    }

    /// A file's server holds its name's partition by the client's bitmap
    /// (asked afresh of every partition's server if `fresh`); chunks name
    /// the directory by id.
    fn batch_route<'a>(&'a self, c: &'a Creds, dir: &'a str, names: &'a [&'a str], fresh: bool) -> BoxFuture<'a, Res<(At, Vec<u32>)>> {
        Box::pin(async move {
            let p = NsPath::parse(dir)?;
            let d = self.optimistic(&p, || self.resolve_dir(c, &p)).await?;
            if fresh {
                self.refresh_parts(c, d.id).await;
            }
            Ok((At::Dir(d.id), names.iter().map(|n| self.server_for(d.id, n)).collect()))
        })
    }

    fn batch_call<'a>(&'a self, c: &'a Creds, server: u32, req: Request) -> BoxFuture<'a, Res<Reply>> {
        Box::pin(self.rpc(server, c, req))
    }

    fn holds_grants(&self) -> bool {
        true
    }

    fn dir_touches(&self) -> Option<Arc<DirTouches>> {
        self.touches.clone()
    }

    fn mode_name(&self) -> &'static str {
        "indexfs"
    }

    fn servers(&self) -> u32 {
        self.n
    }
}
