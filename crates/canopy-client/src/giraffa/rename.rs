//! A Giraffa directory rename: every row below the directory has its path in
//! its key, so the rename rewrites the subtree (the baseline's real cost, which
//! the paper's Giraffa avoids by renaming no directory). Under the lock
//! service, holding write locks on both names:
//!
//! 1. checks: both parents' proofs, the source's server checks permissions
//!    (`GfRenameDirCheck`), what is at the destination is removed as the
//!    caller would remove it (it must be an empty directory);
//! 2. freeze: every server refuses changes to the rows of both names and
//!    both parents and issues no proof of them (`GfFreeze`); then the
//!    destination's parent must be the one checked and its name free;
//! 3. level by level, each directory's old and new prefixes are frozen, its
//!    rows read in pages (`GfScan`) and written under the new prefix
//!    (`GfPutRows`); a failure here (`ENAMETOOLONG` for a path past
//!    `NS_PATH_MAX`) deletes the copies made;
//! 4. the renamed directory's own row under its new name, refused if the name
//!    is taken: the commit point;
//! 5. delete the old rows (`GfDeleteRows`), thaw, and move one subdirectory
//!    count from the old parent to the new.
//!
//! Recovery of a dead coordinator (`recover_dir_rename`) decides from the
//! rows, freezing each directory on both sides before reading it: if the
//! destination holds the source's inode the rename committed (rows the copy
//! missed are copied, the old ones deleted); otherwise the copies are deleted
//! (rows at the destination naming the same directory or inode as the
//! source's), and nothing else there.

use super::Giraffa;
use crate::core::unexpected;
use crate::namespace::Res;
use crate::txn::{after_commit, Step, Txn};
use canopy_proto::giraffa::{self, DirRow, GfRow, MAX_ROWS, ROW_BYTES};
use canopy_proto::msg::{DirLookup, DirTimes, Intent};
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, Errno, FileKind, Reply, Request};

/// Rows of one directory, as a rename copied them: the directory's old and
/// new paths and the names copied.
struct Copied {
    from: NsPath,
    to: NsPath,
    names: Vec<String>,
}

/// `p` moved from below `from` to below `to`, checked against the path limits.
fn moved(p: &NsPath, from: &NsPath, to: &NsPath) -> Res<NsPath> {
    NsPath::parse(p.rebase(from, to).as_str())
}

impl Giraffa {
    pub(super) async fn rename_dir(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        self.step(txn, || Step::Locked(Intent::Rename { src: src.to_string(), dst: dst.to_string() })).await?;
        let (sp, _) = src.split().ok_or(Errno::EBUSY)?;
        let (dp, dname) = dst.split().ok_or(Errno::EBUSY)?;
        let mut proofs = vec![self.proof(c, &sp, false).await?];
        if dp != sp {
            proofs.push(self.proof(c, &dp, false).await?);
        }
        let dp_ino = proofs.last().map(|p| p.ino);
        if dst.is_within(src) {
            return Err(Errno::EINVAL);
        }
        let check = Request::GfRenameDirCheck { src: src.to_string(), dst: dst.to_string(), proofs };
        let top = match self.rpc(self.row_server(src), c, check).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        match self.stat_row(c, dst).await {
            Ok(a) if a.kind != FileKind::Dir => return Err(Errno::ENOTDIR),
            Ok(_) => self.do_rmdir(c, dst).await?,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
        let mut paths: Vec<String> = [src, dst, &sp, &dp].iter().map(|p| p.to_string()).collect();
        paths.dedup();
        let mut frozen = vec![giraffa::prefix(src), giraffa::prefix(dst)];
        // Every step from the freeze on ends here, so a failure is thawed.
        let mut unfrozen = Vec::new();
        let r = async {
            self.freeze_noting(&frozen, &paths, &mut unfrozen, txn).await?;
            // Held still from here: the destination's parent must be the one
            // checked, and nobody may have taken the destination's name.
            match (self.attr_at(&dp).await?.map(|a| a.ino) == dp_ino, self.attr_at(dst).await?) {
                (false, _) => Err(Errno::ENOENT),
                (true, Some(a)) => Err(if a.kind == FileKind::Dir { Errno::ENOTEMPTY } else { Errno::ENOTDIR }),
                (true, None) => self.move_subtree(src, dst, &sp, &dp, dname, &top, &mut frozen, &paths, txn).await,
            }
        }
        .await;
        // A certain failure changed nothing, but some servers may hold the
        // freeze (one refused it while the others took it): thawed now, not
        // a minute later. An unknown outcome leaves that to recovery, and so
        // does a thaw that did not reach a server that may hold the freeze
        // (one that went down after it took the freeze holds it, across a
        // restart, for the lapse): recovery freezes and thaws them all once
        // they answer.
        if r.as_ref().is_err_and(|e| !crate::txn::outcome_unknown(e)) {
            for (server, t) in self.freeze_each(&frozen, &paths, true, txn).await {
                let Err(e) = t else { continue };
                if !unfrozen.contains(&server) {
                    eprintln!("canopy-client: a failed directory rename of {src} could not thaw server {server} ({e}); left to recovery");
                    return Err(Errno::EIO);
                }
            }
        }
        r
    }

    /// Copies the subtree, commits, and cleans up, once its top is frozen.
    #[allow(clippy::too_many_arguments)]
    async fn move_subtree(&self, src: &NsPath, dst: &NsPath, sp: &NsPath, dp: &NsPath, dname: &str, top: &DirLookup, frozen: &mut Vec<u64>, paths: &[String], txn: Txn) -> Res<()> {
        let mut copied = Vec::new();
        let subdirs = match self.copy_subtree(src, dst, frozen, paths, &mut copied, txn).await {
            Ok(n) => n,
            Err(e) => return Err(self.undo_copies(&copied, e, txn).await),
        };
        // Renewed for what follows; a failure before the commit point takes
        // the copies back, as the copy's own does.
        let own = async {
            self.freeze_all(frozen, paths, false, txn).await?;
            self.own_row(src, dst, dname, top, subdirs).await
        };
        let own = match own.await {
            Ok(own) => own,
            Err(e) => return Err(self.undo_copies(&copied, e, txn).await),
        };
        // The commit point: the directory's row under its new name.
        let put = Request::GfPutRows { prefix: giraffa::prefix(dp), rows: vec![own], fresh: true, txn: Some(txn.id) };
        if let Err(e) = self.step_rpc(self.row_server(dst), put).await {
            let e = if e == Errno::EEXIST { Errno::ENOTEMPTY } else { e };
            return Err(self.undo_copies(&copied, e, txn).await);
        }
        self.step(txn, || Step::PrimaryDone(Intent::Rename { src: src.to_string(), dst: dst.to_string() })).await?;
        let finish = async {
            for level in &copied {
                self.delete_rows(&level.from, level.names.clone(), self.entries_server(&level.from) == self.entries_server(&level.to), txn).await?;
            }
            let (_, name) = src.split().ok_or(Errno::EBUSY)?;
            self.delete_rows(sp, vec![name.to_string()], self.row_server(src) == self.row_server(dst), txn).await?;
            self.freeze_all(frozen, paths, true, txn).await?;
            if sp != dp {
                self.count_subdir(sp, -1).await;
                self.count_subdir(dp, 1).await;
            }
            Ok(())
        };
        finish.await.map_err(|e| after_commit("directory rename", e))
    }

    /// Freezes the subtree below `src` level by level and copies each
    /// directory's rows under its new prefix, page by page (a row may carry
    /// 1 MiB of contents); every directory is frozen (old and new prefixes)
    /// before it is read. Answers how many subdirectories `src` has.
    async fn copy_subtree(&self, src: &NsPath, dst: &NsPath, frozen: &mut Vec<u64>, paths: &[String], copied: &mut Vec<Copied>, txn: Txn) -> Res<u64> {
        let mut next = vec![src.clone()];
        let mut top_subdirs = 0;
        while !next.is_empty() {
            self.keep_alive(txn).await?;
            let (mut below, mut prefixes) = (Vec::new(), Vec::new());
            for dir in next {
                let to = moved(&dir, src, dst)?;
                copied.push(Copied { from: dir.clone(), to: to.clone(), names: Vec::new() });
                let mut after = None;
                loop {
                    let (rows, more) = self.scan_page(&dir, after.take()).await?;
                    for row in &rows {
                        to.join(row.name())?; // ENAMETOOLONG: undone by the caller
                        if let GfRow::Dir { name, .. } = row {
                            let child = dir.join(name)?;
                            prefixes.extend([giraffa::prefix(&child), giraffa::prefix(&moved(&child, src, dst)?)]);
                            below.push(child);
                            top_subdirs += (dir == *src) as u64;
                        }
                    }
                    let moved_rows = rows.iter().map(|r| rebased(r, src, dst)).collect::<Res<Vec<_>>>()?;
                    after = rows.last().map(|r| r.name().to_string());
                    if let Some(level) = copied.last_mut() {
                        level.names.extend(rows.iter().map(|r| r.name().to_string()));
                    }
                    self.put_rows(&to, moved_rows, txn).await?;
                    if !more {
                        break;
                    }
                }
            }
            if !prefixes.is_empty() {
                frozen.extend(&prefixes);
                self.freeze_all(&prefixes, paths, false, txn).await?;
            }
            next = below;
        }
        Ok(top_subdirs)
    }

    /// Deletes the copies a rename made before it failed with `e` (certain
    /// failures only: an unknown outcome is left to recovery); answers `e`.
    async fn undo_copies(&self, copied: &[Copied], e: Errno, txn: Txn) -> Errno {
        if crate::txn::outcome_unknown(&e) {
            return e;
        }
        for level in copied {
            let same = self.entries_server(&level.from) == self.entries_server(&level.to);
            if let Err(undo) = self.delete_rows(&level.to, level.names.clone(), same, txn).await {
                eprintln!("canopy-client: a failed directory rename's copies under {} stay: {undo}", level.to);
                return Errno::EIO;
            }
        }
        e
    }

    /// The renamed directory's own row as it will be at `dst`, read from the
    /// source's server through the freeze.
    async fn own_row(&self, src: &NsPath, dst: &NsPath, name: &str, top: &DirLookup, subdirs: u64) -> Res<GfRow> {
        let a: Attr = match self.rpc(self.row_server(src), &Creds::root(), Request::RecoveryStat { at: src.to_string().into() }).await? {
            Reply::Attr(a) => a,
            other => return Err(unexpected(other)),
        };
        let lookup = DirLookup { id: top.id, mode: a.mode, uid: a.uid, gid: a.gid };
        let row = DirRow { lookup, path: dst.to_string(), subdirs };
        Ok(GfRow::Dir { name: name.to_string(), row, times: DirTimes { atime: a.atime, mtime: a.mtime, ctime: a.ctime } })
    }

    /// A rename step (one naming its transaction) to `server`, as root.
    async fn step_rpc(&self, server: u32, req: Request) -> Res<Reply> {
        self.rpc(server, &Creds::root(), req).await.map_err(taken_over)
    }

    /// One page of directory `dir`'s rows, names after `after`.
    async fn scan_page(&self, dir: &NsPath, after: Option<String>) -> Res<(Vec<GfRow>, bool)> {
        let req = Request::GfScan { prefix: giraffa::prefix(dir), after, limit: MAX_ROWS as u32 };
        match self.rpc(self.entries_server(dir), &Creds::root(), req).await? {
            Reply::GfRows { rows, more } => Ok((rows, more)),
            other => Err(unexpected(other)),
        }
    }

    /// Every row of directory `dir`'s entries, from the server holding them.
    pub(super) async fn scan_all(&self, dir: &NsPath) -> Res<Vec<GfRow>> {
        let mut all: Vec<GfRow> = Vec::new();
        loop {
            let (rows, more) = self.scan_page(dir, all.last().map(|r| r.name().to_string())).await?;
            all.extend(rows);
            if !more {
                return Ok(all);
            }
        }
    }

    /// Writes `rows` under directory `dir`'s prefix, in chunks of at most
    /// `MAX_ROWS` rows and about `ROW_BYTES` bytes, as a step of `txn`.
    async fn put_rows(&self, dir: &NsPath, rows: Vec<GfRow>, txn: Txn) -> Res<()> {
        let (server, prefix) = (self.entries_server(dir), giraffa::prefix(dir));
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for row in rows {
            let size = giraffa::row_bytes(&row);
            if !chunk.is_empty() && (chunk.len() == MAX_ROWS || bytes + size > ROW_BYTES) {
                self.step_rpc(server, Request::GfPutRows { prefix, rows: std::mem::take(&mut chunk), fresh: false, txn: Some(txn.id) }).await?;
                bytes = 0;
            }
            bytes += size;
            chunk.push(row);
        }
        if !chunk.is_empty() {
            self.step_rpc(server, Request::GfPutRows { prefix, rows: chunk, fresh: false, txn: Some(txn.id) }).await?;
        }
        Ok(())
    }

    /// Deletes rows `names` of directory `dir`'s entries; `keep_times`: their
    /// copies are on the same server, which keeps directories' times. A step
    /// of `txn`.
    async fn delete_rows(&self, dir: &NsPath, names: Vec<String>, keep_times: bool, txn: Txn) -> Res<()> {
        let (server, prefix) = (self.entries_server(dir), giraffa::prefix(dir));
        for chunk in names.chunks(MAX_ROWS) {
            self.step_rpc(server, Request::GfDeleteRows { prefix, names: chunk.to_vec(), keep_times, txn: Some(txn.id) }).await?;
        }
        Ok(())
    }

    /// Freezes on every server, as [`Self::freeze_all`], noting in
    /// `unfrozen` each that certainly did not take the freeze.
    async fn freeze_noting(&self, prefixes: &[u64], paths: &[String], unfrozen: &mut Vec<u32>, txn: Txn) -> Res<()> {
        let mut first = Ok(());
        for (server, r) in self.freeze_each(prefixes, paths, false, txn).await {
            if let Err(e) = r {
                if !crate::txn::outcome_unknown(&e) {
                    unfrozen.push(server);
                }
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Freezes (freezing again renews) or thaws on every server.
    async fn freeze_all(&self, prefixes: &[u64], paths: &[String], thaw: bool, txn: Txn) -> Res<()> {
        for (_, r) in self.freeze_each(prefixes, paths, thaw, txn).await {
            r?;
        }
        Ok(())
    }

    /// Each server's answer to freezing (or thawing) what a rename, as
    /// transaction `txn`, names.
    async fn freeze_each(&self, prefixes: &[u64], paths: &[String], thaw: bool, txn: Txn) -> Vec<(u32, Res<Reply>)> {
        let req = Request::GfFreeze { prefixes: prefixes.to_vec(), paths: paths.to_vec(), thaw, txn: Some(txn.id) };
        let each = self.fan_out(0..self.n, &Creds::root(), |_| req.clone()).await;
        each.into_iter().map(|(i, r)| (i, r.map_err(taken_over))).collect()
    }

    /// A dead coordinator's directory rename: committed if the destination
    /// holds the source's inode (then rows the copy missed are copied and the
    /// old rows deleted), else the copies are deleted and nothing else at the
    /// destination. Each directory is frozen, on both sides, before it is read.
    /// The lease of `txn` (handed over by the lock service) is renewed as each
    /// directory is taken up, as the rename's own copy does: a recovery that
    /// outlasted it would be handed to a second recoverer, whose thaw at its
    /// end would unfreeze rows this one has yet to copy.
    pub(super) async fn recover_dir_rename(&self, src: &NsPath, dst: &NsPath, src_ino: Option<u64>, dst_ino: Option<u64>, txn: Txn) -> Res<()> {
        let committed = dst_ino.is_some() && (src_ino.is_none() || src_ino == dst_ino);
        let (keep, drop) = if committed { (dst, src) } else { (src, dst) };
        let mut paths = vec![src.to_string(), dst.to_string()];
        paths.extend([src.split(), dst.split()].into_iter().flatten().map(|(p, _)| p.to_string()));
        let mut frozen = vec![giraffa::prefix(keep), giraffa::prefix(drop)];
        self.freeze_all(&frozen, &paths, false, txn).await?;
        let mut next = vec![keep.clone()];
        while let Some(dir) = next.pop() {
            self.keep_alive(txn).await?;
            let other = moved(&dir, keep, drop)?;
            let (kept, mut there) = (self.scan_all(&dir).await?, self.scan_all(&other).await?);
            if !committed {
                // Undone: only the copies go. A destination the rename had not
                // yet removed (it died before its rmdir) is another directory
                // whose rows are no copies, and neither is anything made there
                // after a dead coordinator's freeze ran out.
                there.retain(|t| kept.iter().any(|k| is_copy(t, k)));
            }
            let mut children = Vec::new();
            for row in kept.iter().chain(&there) {
                if let GfRow::Dir { name, .. } = row {
                    let child = dir.join(name)?;
                    if !children.contains(&child) {
                        children.push(child);
                    }
                }
            }
            let prefixes: Vec<u64> = children.iter().map(|c| moved(c, keep, drop).map(|o| [giraffa::prefix(c), giraffa::prefix(&o)])).collect::<Res<Vec<_>>>()?.concat();
            if !prefixes.is_empty() {
                frozen.extend(&prefixes);
                self.freeze_all(&prefixes, &paths, false, txn).await?;
            }
            if committed {
                let missing: Vec<GfRow> = there.iter().filter(|t| !kept.iter().any(|k| k.name() == t.name())).map(|t| rebased(t, drop, keep)).collect::<Res<_>>()?;
                self.put_rows(&dir, missing, txn).await?;
            }
            let names = there.iter().map(|t| t.name().to_string()).collect();
            self.delete_rows(&other, names, self.entries_server(&other) == self.entries_server(&dir), txn).await?;
            next.extend(children);
        }
        if committed && src_ino.is_some() {
            let (sp, name) = src.split().ok_or(Errno::EBUSY)?;
            self.delete_rows(&sp, vec![name.to_string()], self.row_server(src) == self.row_server(dst), txn).await?;
        }
        self.freeze_all(&frozen, &paths, true, txn).await?;
        for parent in [src.split().map(|(p, _)| p), dst.split().map(|(p, _)| p)].into_iter().flatten() {
            self.recount(&parent).await?;
        }
        Ok(())
    }

    /// Sets directory `dir`'s subdirectory count from its rows.
    async fn recount(&self, dir: &NsPath) -> Res<()> {
        let n = self.scan_all(dir).await?.iter().filter(|r| matches!(r, GfRow::Dir { .. })).count() as u64;
        let req = Request::GfSetSubdirs { path: dir.to_string(), subdirs: n };
        match self.rpc(self.row_server(dir), &Creds::root(), req).await {
            Ok(_) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A transaction step's error (a rename's, a link's) as its coordinator
/// sees it: refused because recovery took the transaction over (revoked
/// it, `ECANCELED`), it is `EIO`, which
/// leaves the transaction to recovery as an unknown outcome does (a rename
/// undoes and thaws nothing; a link's count taken back is settled once,
/// whoever settles it first; an unlock of a transaction handed over does
/// nothing).
pub(super) fn taken_over(e: Errno) -> Errno {
    if e == Errno::ECANCELED {
        eprintln!("canopy-client: a transaction's step was refused: recovery took the transaction over and decides its outcome");
        return Errno::EIO;
    }
    e
}

/// Whether `row` is a rename's copy of `of`: the same name for the same
/// directory or inode.
fn is_copy(row: &GfRow, of: &GfRow) -> bool {
    row.name() == of.name() && object_of(row) == object_of(of)
}

/// What a row names: (a directory?, its id or inode number).
fn object_of(row: &GfRow) -> (bool, u64) {
    match row {
        GfRow::Dir { row, .. } => (true, row.lookup.id),
        GfRow::File { record, .. } => (false, record.ino()),
    }
}

/// `row` of a directory below `from`, as it will be below `to` (a
/// subdirectory's row names its new path).
fn rebased(row: &GfRow, from: &NsPath, to: &NsPath) -> Res<GfRow> {
    match row {
        GfRow::Dir { name, row: r, times } => {
            let path = moved(&NsPath::parse(&r.path)?, from, to)?;
            Ok(GfRow::Dir { name: name.clone(), row: DirRow { path: path.to_string(), ..r.clone() }, times: *times })
        }
        file => Ok(file.clone()),
    }
}
