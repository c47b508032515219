//! A Giraffa directory rename: every row below the directory has its path in
//! its key, so the rename rewrites the subtree (the baseline's real cost, which
//! the paper's Giraffa avoids by renaming no directory). Under the lock
//! service, holding write locks on both names:
//!
//! 1. checks: both parents' proofs, the source's server checks permissions
//!    (`GfRenameDirCheck`), what is at the destination is removed as the
//!    caller would remove it (it must be an empty directory);
//! 2. freeze, level by level: every server refuses changes to rows under the
//!    subtree's old and new prefixes and to the directory's two rows
//!    (`GfFreeze`), and each directory's rows are read (`GfScan`); a path
//!    that would grow past `NS_PATH_MAX` stops here (`ENAMETOOLONG`), nothing
//!    written;
//! 3. copy every row under its new prefix (`GfPutRows`), the renamed
//!    directory's own row last: that write is the commit point;
//! 4. delete the old rows (`GfDeleteRows`), thaw, and move one subdirectory
//!    count from the old parent to the new.
//!
//! Recovery of a dead coordinator (`recover_dir_rename`) decides from the
//! rows: if the destination holds the source's inode the rename committed and
//! is finished from the copies; otherwise the copies are removed. Either way
//! only rows that are duplicates (same name, same inode) are deleted.

use super::Giraffa;
use crate::core::unexpected;
use crate::namespace::Res;
use crate::txn::{after_commit, Step, Txn};
use canopy_proto::giraffa::{self, DirRow, GfRow, MAX_ROWS};
use canopy_proto::msg::{DirLookup, DirTimes, Intent, Record};
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, Errno, FileKind, Reply, Request};

/// One directory of a subtree being renamed: its old path and its rows.
struct Level {
    dir: NsPath,
    rows: Vec<GfRow>,
}

fn row_ino(row: &GfRow) -> u64 {
    match row {
        GfRow::File { record: Record::Inode(i), .. } => i.attr.ino,
        GfRow::File { record: Record::Linked { ino, .. }, .. } => *ino,
        GfRow::Dir { row, .. } => row.lookup.id,
    }
}

/// `p` moved from below `from` to below `to`, checked against the path limits.
fn moved(p: &NsPath, from: &NsPath, to: &NsPath) -> Res<NsPath> {
    NsPath::parse(p.rebase(from, to).as_str())
}

impl Giraffa {
    pub(super) async fn rename_dir(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        self.step(|| Step::Locked(Intent::Rename { src: src.to_string(), dst: dst.to_string() })).await?;
        let (sp, _) = src.split().ok_or(Errno::EBUSY)?;
        let (dp, dname) = dst.split().ok_or(Errno::EBUSY)?;
        let mut proofs = vec![self.proof(c, &sp, false).await?];
        if dp != sp {
            proofs.push(self.proof(c, &dp, false).await?);
        }
        if dst.is_within(src) {
            return Err(Errno::EINVAL);
        }
        let check = Request::GfRenameDirCheck { src: src.to_string(), dst: dst.to_string(), proofs };
        let top = match self.rpc(self.row_server(src), c, check).await? {
            Reply::Dir(l) => l,
            other => return Err(unexpected(other)),
        };
        match self.stat_path(c, dst).await {
            Ok(a) if a.kind != FileKind::Dir => return Err(Errno::ENOTDIR),
            Ok(_) => self.do_rmdir(c, dst).await?,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
        let paths = vec![src.to_string(), dst.to_string()];
        let mut frozen = vec![giraffa::prefix(src), giraffa::prefix(dst)];
        self.freeze_all(&frozen, &paths, false).await?;
        let r = self.move_subtree(src, dst, &sp, &dp, dname, &top, &mut frozen, txn).await;
        if r.as_ref().is_err_and(|e| !crate::txn::outcome_unknown(e)) {
            self.freeze_all(&frozen, &paths, true).await?;
        }
        r
    }

    /// Steps 2 to 4 above, once the subtree's top is frozen.
    #[allow(clippy::too_many_arguments)]
    async fn move_subtree(&self, src: &NsPath, dst: &NsPath, sp: &NsPath, dp: &NsPath, dname: &str, top: &DirLookup, frozen: &mut Vec<u64>, txn: Txn) -> Res<()> {
        let paths = vec![src.to_string(), dst.to_string()];
        let levels = self.read_subtree(src, dst, frozen, &paths).await?;
        let own = self.own_row(src, dst, dname, top).await?;
        for level in &levels {
            self.keep_alive(txn).await?;
            let to = moved(&level.dir, src, dst)?;
            let rows = level.rows.iter().map(|r| rebased(r, src, dst)).collect::<Res<Vec<_>>>()?;
            self.put_rows(&to, rows).await?;
        }
        // The commit point: the directory's row under its new name.
        let put = Request::GfPutRows { prefix: giraffa::prefix(dp), rows: vec![own] };
        self.rpc(self.row_server(dst), &Creds::root(), put).await?;
        self.step(|| Step::PrimaryDone(Intent::Rename { src: src.to_string(), dst: dst.to_string() })).await?;
        let finish = async {
            for level in &levels {
                let names = level.rows.iter().map(|r| r.name().to_string()).collect::<Vec<_>>();
                let kept = self.entries_server(&level.dir) == self.entries_server(&moved(&level.dir, src, dst)?);
                self.delete_rows(&level.dir, names, kept).await?;
            }
            let (_, name) = src.split().ok_or(Errno::EBUSY)?;
            self.delete_rows(sp, vec![name.to_string()], self.row_server(src) == self.row_server(dst)).await?;
            self.freeze_all(frozen, &paths, true).await?;
            if sp != dp {
                self.count_subdir(sp, -1).await?;
                self.count_subdir(dp, 1).await?;
            }
            Ok(())
        };
        finish.await.map_err(|e| after_commit("directory rename", e))
    }

    /// Freezes the subtree below `src` level by level and reads its rows; every
    /// directory found is frozen (old and new prefixes) before it is read.
    async fn read_subtree(&self, src: &NsPath, dst: &NsPath, frozen: &mut Vec<u64>, paths: &[String]) -> Res<Vec<Level>> {
        let mut levels = Vec::new();
        let mut next = vec![src.clone()];
        while !next.is_empty() {
            let mut below = Vec::new();
            let mut prefixes = Vec::new();
            for dir in next {
                let rows = self.scan_all(&dir).await?;
                let to = moved(&dir, src, dst)?;
                for row in &rows {
                    to.join(row.name())?; // ENAMETOOLONG before anything is written
                    if let GfRow::Dir { name, .. } = row {
                        let child = dir.join(name)?;
                        prefixes.extend([giraffa::prefix(&child), giraffa::prefix(&moved(&child, src, dst)?)]);
                        below.push(child);
                    }
                }
                levels.push(Level { dir, rows });
            }
            if !prefixes.is_empty() {
                frozen.extend(&prefixes);
                self.freeze_all(&prefixes, paths, false).await?;
            }
            next = below;
        }
        Ok(levels)
    }

    /// The renamed directory's own row as it will be at `dst`, read from the
    /// source's server through the freeze.
    async fn own_row(&self, src: &NsPath, dst: &NsPath, name: &str, top: &DirLookup) -> Res<GfRow> {
        let a: Attr = match self.rpc(self.row_server(src), &Creds::root(), Request::RecoveryStat { at: src.to_string().into() }).await? {
            Reply::Attr(a) => a,
            other => return Err(unexpected(other)),
        };
        let lookup = DirLookup { id: top.id, mode: a.mode, uid: a.uid, gid: a.gid };
        let row = DirRow { lookup, path: dst.to_string(), subdirs: a.nlink.saturating_sub(2) as u64 };
        Ok(GfRow::Dir { name: name.to_string(), row, times: DirTimes { atime: a.atime, mtime: a.mtime, ctime: a.ctime } })
    }

    /// Every row of directory `dir`'s entries, from the server holding them.
    pub(super) async fn scan_all(&self, dir: &NsPath) -> Res<Vec<GfRow>> {
        let (server, prefix) = (self.entries_server(dir), giraffa::prefix(dir));
        let mut all: Vec<GfRow> = Vec::new();
        loop {
            let after = all.last().map(|r| r.name().to_string());
            match self.rpc(server, &Creds::root(), Request::GfScan { prefix, after, limit: MAX_ROWS as u32 }).await? {
                Reply::GfRows { rows, more } => {
                    all.extend(rows);
                    if !more {
                        return Ok(all);
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    async fn put_rows(&self, dir: &NsPath, rows: Vec<GfRow>) -> Res<()> {
        let (server, prefix) = (self.entries_server(dir), giraffa::prefix(dir));
        for chunk in rows.chunks(MAX_ROWS) {
            self.rpc(server, &Creds::root(), Request::GfPutRows { prefix, rows: chunk.to_vec() }).await?;
        }
        Ok(())
    }

    /// Deletes rows `names` of directory `dir`'s entries; `keep_times`: their
    /// copies are on the same server, which keeps directories' times.
    pub(super) async fn delete_rows(&self, dir: &NsPath, names: Vec<String>, keep_times: bool) -> Res<()> {
        let (server, prefix) = (self.entries_server(dir), giraffa::prefix(dir));
        for chunk in names.chunks(MAX_ROWS) {
            self.rpc(server, &Creds::root(), Request::GfDeleteRows { prefix, names: chunk.to_vec(), keep_times }).await?;
        }
        Ok(())
    }

    /// Freezes (or thaws) on every server.
    async fn freeze_all(&self, prefixes: &[u64], paths: &[String], thaw: bool) -> Res<()> {
        let req = Request::GfFreeze { prefixes: prefixes.to_vec(), paths: paths.to_vec(), thaw };
        for (_, r) in self.fan_out(0..self.n, &Creds::root(), |_| req.clone()).await {
            r?;
        }
        Ok(())
    }

    /// A dead coordinator's directory rename: committed if the destination
    /// holds the source's inode (then the copies finish it), else undone.
    /// Only duplicates (same name and inode on both sides) are deleted.
    pub(super) async fn recover_dir_rename(&self, src: &NsPath, dst: &NsPath, src_ino: Option<u64>, dst_ino: Option<u64>) -> Res<()> {
        let committed = dst_ino.is_some() && (src_ino.is_none() || src_ino == dst_ino);
        let (keep, drop) = if committed { (dst, src) } else { (src, dst) };
        let mut next = vec![keep.clone()];
        let mut prefixes = Vec::new();
        while let Some(dir) = next.pop() {
            prefixes.extend([giraffa::prefix(&dir), giraffa::prefix(&moved(&dir, keep, drop)?)]);
            let kept = self.scan_all(&dir).await?;
            let other = moved(&dir, keep, drop)?;
            let there = self.scan_all(&other).await?;
            let dups = there.iter().filter(|t| kept.iter().any(|k| k.name() == t.name() && row_ino(k) == row_ino(t)));
            let names: Vec<String> = dups.map(|t| t.name().to_string()).collect();
            if committed {
                // Rows the dead coordinator had not copied yet.
                let missing: Vec<GfRow> = there.iter().filter(|t| !kept.iter().any(|k| k.name() == t.name())).map(|t| rebased(t, drop, keep)).collect::<Res<_>>()?;
                self.put_rows(&dir, missing).await?;
            }
            self.delete_rows(&other, names, self.entries_server(&other) == self.entries_server(&dir)).await?;
            for row in self.scan_all(&dir).await? {
                if let GfRow::Dir { name, .. } = row {
                    next.push(dir.join(&name)?);
                }
            }
        }
        self.freeze_all(&prefixes, &[src.to_string(), dst.to_string()], true).await?;
        if committed && src_ino.is_some() {
            let (sp, name) = src.split().ok_or(Errno::EBUSY)?;
            self.delete_rows(&sp, vec![name.to_string()], self.row_server(src) == self.row_server(dst)).await?;
        }
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
