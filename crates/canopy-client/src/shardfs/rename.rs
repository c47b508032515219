//! Renames: a file's (one server, or out of one and into another), a
//! directory's (checked and applied on every server, then the objects whose
//! primary changed migrated).

use super::*;

impl ShardFs {
    /// A directory rename under transaction `txn`'s locks, once `checks` (one
    /// per server, each fencing both names) found it a directory.
    pub(super) async fn rename_dir(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn, checks: Vec<(u32, Res<Reply>)>) -> Res<()> {
        let found = match rename_checks(checks, self.primary(src), self.primary(dst)) {
            Ok(found) => found,
            Err(e) => return self.unfenced_after(0..self.n, txn.id, Err(e)).await,
        };
        match self.rename_dir_apply(c, src, dst, txn, found).await {
            Ok(Fences::Lifted) => Ok(()),
            Ok(Fences::Up) => self.unfenced_after(0..self.n, txn.id, Ok(())).await,
            // Whether it committed, or finished, is for recovery to find out
            // from the servers' state; it lifts the fences too.
            Err(e) if left_to_recovery(&e) => Err(e),
            Err(e) => self.unfenced_after(0..self.n, txn.id, Err(e)).await,
        }
    }

    /// Applies a checked directory rename: every server at once. The
    /// destination's primary is the commit point recovery rolls forward
    /// from; the others keep their fences until it answered. The source's
    /// primary drops the directory's times, which the destination's primary
    /// keeps from now on, but parks them until the transaction ends there, so
    /// an undo can take them back (the server's `parked.rs`). Then the
    /// objects below whose primary changed migrate. When nothing is below (a
    /// leaf without files), the fences still up are lifted by posts: the lock,
    /// the check and one fan-out.
    pub(super) async fn rename_dir_apply(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn, found: Vec<(u32, Checked)>) -> Res<Fences> {
        let (s, d) = (src.to_string(), dst.to_string());
        let (prim, old_prim) = (self.primary(dst), self.primary(src));
        let below = found.iter().any(|(_, k)| k.below);
        let times = found.iter().find(|(i, _)| *i == old_prim).and_then(|(_, k)| k.times);
        let req = |i: u32| {
            let step = RenameDirStep::Apply { times, unfence: (i == prim && !below).then_some(txn.id), txn: Some(txn.id) };
            Request::RenameDir { src: s.clone(), dst: d.clone(), step }
        };
        let intent = || Intent::Rename { src: s.clone(), dst: d.clone() };
        self.step(txn, || Step::Locked(intent())).await?;
        let early: Vec<u32> = self.all_but(prim).collect();
        let mut applied = self.with_commit_point(txn, early.iter().copied(), prim, c, &intent(), &req).await?;
        let at_prim = match applied.iter().position(|(i, _)| *i == prim).map(|k| applied.remove(k).1) {
            Some(Ok(r)) => checked(r)?,
            Some(Err(e)) if left_to_recovery(&e) => return Err(self.undecided(dst, prim, e)),
            // Refused after all: put back the servers that applied it (if
            // that fails, EIO leaves the transaction to recovery).
            Some(Err(e)) => {
                return match self.recover_rename(src, dst, txn, txn.id, By::Coordinator).await {
                    Ok(()) => Err(e),
                    Err(_) => Err(Errno::EIO),
                }
            }
            None => return Err(Errno::EIO),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        if let Some(e) = pick_error(&applied, prim) {
            eprintln!("canopy-client: rename {src} -> {dst} passed its checks but failed on a server: {e}");
            return Err(Errno::EIO);
        }
        self.last_step(|| Step::ReplicasDone(intent())).await?;
        // A server that found something below after all kept its fence.
        let found_below = at_prim.below || applied.into_iter().any(|(_, r)| r.ok().and_then(|r| checked(r).ok()).is_some_and(|k| k.below));
        if !below && !found_below {
            self.post_unfence(early, txn.id).await;
            return Ok(Fences::Lifted);
        }
        self.migrate_all(dst, txn).await.map_err(|e| after_commit("directory rename", e))?;
        Ok(Fences::Up)
    }

    /// Moves the objects below `root` whose primary changed, from every server
    /// at once. Idempotent: recovery runs it again after a coordinator died
    /// mid-way.
    pub(super) async fn migrate_all(&self, root: &NsPath, txn: Txn) -> Res<()> {
        join_all((0..self.n).map(|server| self.migrate_from(server, root, txn))).await.into_iter().collect()
    }

    /// Moves the objects below `root` on `server` whose primary changed: each
    /// batch is copied to its new primaries at once, then dropped here.
    pub(super) async fn migrate_from(&self, server: u32, root: &NsPath, txn: Txn) -> Res<()> {
        let root_s = root.to_string();
        let txn_id = Some(txn.id);
        loop {
            self.keep_alive(txn).await?;
            let moved = match self.rpc(server, &Creds::root(), Request::Migrate { root: root_s.clone(), limit: MIGRATE_BATCH }).await? {
                Reply::Moved(m) => m,
                other => return Err(unexpected(other)),
            };
            // A server also stops short of the limit by bytes (inline file
            // contents): only an empty answer says it has listed all.
            if moved.is_empty() {
                return Ok(());
            }
            let mut by_target: HashMap<u32, Vec<MovedItem>> = HashMap::new();
            for m in &moved {
                by_target.entry(m.target).or_default().push(m.item.clone());
            }
            let root = Creds::root();
            let adopted = join_all(by_target.into_iter().map(|(target, items)| self.rpc(target, &root, Request::Adopt { items, txn: txn_id }))).await;
            for r in adopted {
                r?;
            }
            let items = moved.into_iter().map(|m| m.item).collect();
            self.rpc(server, &Creds::root(), Request::Release { items, txn: txn_id }).await?;
        }
    }

    pub(super) async fn do_rename_file(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        let (a, b) = (self.primary(src), self.primary(dst));
        let (s, d) = (src.to_string(), dst.to_string());
        if a == b {
            let r = self.rpc(a, c, Request::RenameLocal { src: s.into(), dst: d.into(), txn: Some(txn.id) }).await?;
            return self.drop_remote(r).await;
        }
        let record = match self.rpc(a, c, Request::RenameOut { src: s.clone().into(), dst: d.clone().into() }).await? {
            Reply::Record(r) => r,
            other => return Err(unexpected(other)),
        };
        let ino = record.ino();
        let intent = || Intent::Rename { src: s.clone(), dst: d.clone() };
        self.step(txn, || Step::Locked(intent())).await?;
        let inserted = self.rpc(b, c, Request::RenameIn { src: s.clone().into(), dst: d.clone().into(), record, txn: Some(txn.id) }).await?;
        if inserted == Reply::Unit {
            return Ok(()); // Both names are links to one file: POSIX says do nothing.
        }
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        self.rpc(a, &Creds::root(), Request::RenameOutCommit { src: s.into(), ino, txn: Some(txn.id) }).await.map_err(|e| after_commit("file rename", e))?;
        self.drop_remote(inserted).await
    }

    /// `seen_dir`: the caller saw `src` as a directory, so no stat goes
    /// first (a directory rename is a round trip shorter); else a file is
    /// renamed touching its two primaries only.
    pub(super) async fn do_rename(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn, seen_dir: bool) -> Res<()> {
        if src.is_root() || dst.is_root() {
            return Err(Errno::EBUSY);
        }
        if !seen_dir {
            // The transaction holds this path's locks: no optimistic retry here (it would
            // wait for its own locks); an EREMOTE is settled after unlocking.
            let reply = self.under_own_locks(c, src, Request::Stat { at: src.to_string().into() }).await?;
            if self.attr_or_follow(reply).await?.kind != FileKind::Dir {
                return self.rename_file(c, src, dst, txn).await;
            }
        }
        // One fan-out fences both names everywhere and checks a directory
        // rename; the source's primary says instead if the source is a file.
        let (s, d) = (src.to_string(), dst.to_string());
        let check = RenameDirStep::Check { txn: txn.id };
        let checks = self.fan_out(0..self.n, c, |_| Request::RenameDir { src: s.clone(), dst: d.clone(), step: check }).await;
        if checks.iter().any(|(_, r)| *r == Err(Errno::ESTALE)) {
            return Err(Errno::ESTALE); // recovery has taken it over
        }
        if checks.iter().any(|(_, r)| matches!(r, Ok(Reply::RenameOfFile))) {
            self.rename_file_fenced(c, src, dst, txn).await
        } else {
            self.rename_dir(c, src, dst, txn, checks).await
        }
    }

    /// A file rename: one atomic RPC when both names have one primary; else
    /// its steps with both primaries fenced (between them the file is under
    /// both names, and no single-RPC operation may see that).
    pub(super) async fn rename_file(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        let (a, b) = (self.primary(src), self.primary(dst));
        if a == b {
            return self.do_rename_file(c, src, dst, txn).await;
        }
        self.fenced_on([a, b].into_iter(), txn.id, &[src, dst], self.do_rename_file(c, src, dst, txn)).await
    }

    /// A file rename, once the checks fenced both names everywhere: only the
    /// two primaries keep their fences (between its steps the file is under
    /// both names, and no single-RPC operation may see that); one primary
    /// for both names renames in one atomic RPC and keeps none.
    pub(super) async fn rename_file_fenced(&self, c: &Creds, src: &NsPath, dst: &NsPath, txn: Txn) -> Res<()> {
        let (a, b) = (self.primary(src), self.primary(dst));
        let keep = |i: &u32| a != b && (*i == a || *i == b);
        self.post_unfence((0..self.n).filter(|i| !keep(i)).collect(), txn.id).await;
        let r = self.do_rename_file(c, src, dst, txn).await;
        if a == b {
            return r;
        }
        self.unfenced_after([a, b].into_iter(), txn.id, r).await
    }

    pub(super) async fn rename_as(&self, c: &Creds, src: &str, dst: &str, seen_dir: bool) -> Res<()> {
        let (s, d) = (NsPath::parse(src)?, NsPath::parse(dst)?);
        if s == d {
            return self.stat_path(c, &s).await.map(|_| ());
        }
        // On this client's connections, so each is served before the rename.
        self.send_owed_touches_below(&s).await;
        let intent = Intent::Rename { src: s.to_string(), dst: d.to_string() };
        let r = self.locked(&[&s, &d], intent, |txn| self.do_rename(c, &s, &d, txn, seen_dir)).await;
        self.settle_two(c, &s, &d, r).await?;
        self.touch_parents(c, &[&s, &d]).await;
        Ok(())
    }
}


/// Whether a directory rename's fences are still up when its steps end.
pub(super) enum Fences {
    /// Lifted, or their lifting posted (nothing migrated).
    Lifted,
    Up,
}

/// One server's answer to a directory rename's step.
pub(super) struct Checked {
    below: bool,
    times: Option<DirTimes>,
}

/// Every server's check of a directory rename, or the error to answer: the
/// destination's primary's first (it alone knows whether a file has the new
/// name), unless the source's primary did not answer at all (it alone knows
/// whether the source is a file).
fn rename_checks(checks: Vec<(u32, Res<Reply>)>, src_primary: u32, dst_primary: u32) -> Res<Vec<(u32, Checked)>> {
    let unanswered = |e: &Errno| outcome_unknown(e) || *e == Errno::ECONNREFUSED;
    if let Some((_, Err(e))) = checks.iter().find(|(i, r)| *i == src_primary && r.as_ref().is_err_and(unanswered)) {
        return Err(*e);
    }
    if let Some(e) = pick_error(&checks, dst_primary) {
        return Err(e);
    }
    checks.into_iter().map(|(i, r)| Ok((i, checked(r?)?))).collect()
}

fn checked(r: Reply) -> Res<Checked> {
    match r {
        Reply::RenameChecked { below, times } => Ok(Checked { below, times }),
        // The destination already names the moved directory: the server
        // changed nothing, its fences included, so they are lifted after.
        Reply::Unit => Ok(Checked { below: true, times: None }),
        other => Err(unexpected(other)),
    }
}
