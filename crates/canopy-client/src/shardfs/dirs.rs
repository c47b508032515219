//! ShardFS's directory transactions: mkdir (Procedure 1 on every server at
//! once), rmdir (Procedure 2) and chmod/chown of a directory (by the procedure
//! its change needs, `monotonic.rs`).

use super::*;

impl ShardFs {
    /// mkdir as transaction `txn` (Procedure 1 with the primary and the replicas
    /// at once): the new directory's id comes from `txn`, so every server can
    /// apply it in the same round trip; each replica fences it until the
    /// primary's answer (the commit point) is known, so no file is made below
    /// a directory that may yet be rolled back.
    pub(super) async fn do_mkdir(&self, c: &Creds, p: &NsPath, mode: u32, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let id = dir_id_of_txn(txn.id).ok_or(Errno::ENOSPC)?;
        let path = p.to_string();
        let intent = || Intent::Mkdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let req = |i: u32| Request::Mkdir { path: path.clone(), mode, id, fence: (i != prim).then_some(txn.id) };
        let results = self.with_commit_point(txn, self.all_but(prim), prim, c, &intent(), req).await?;
        let applied: Vec<u32> = results.iter().filter(|(i, r)| *i != prim && r.is_ok()).map(|(i, _)| *i).collect();
        let made = match results.iter().find(|(i, _)| *i == prim).map(|(_, r)| r) {
            Some(Ok(Reply::Attr(a))) if a.kind == FileKind::Dir => a.clone(),
            Some(Ok(other)) => return Err(unexpected(other.clone())),
            _ => return self.mkdir_refused(p, prim, txn.id, results, applied).await,
        };
        self.last_step(|| Step::PrimaryDone(intent())).await?;
        if let Some(e) = pick_error(&results, prim) {
            eprintln!("canopy-client: mkdir {p} committed but a replica failed: {e}");
            return Err(Errno::EIO);
        }
        self.last_step(|| Step::ReplicasDone(intent())).await?;
        self.post_unfence(applied, txn.id).await;
        Ok(made)
    }

    /// A mkdir the primary did not apply: the replicas that did are put back
    /// and their fences lifted, and the primary's error answered; if an answer
    /// was lost, recovery decides.
    pub(super) async fn mkdir_refused(&self, p: &NsPath, prim: u32, txn: u64, results: Vec<(u32, Res<Reply>)>, applied: Vec<u32>) -> Res<Attr> {
        if let Some((i, e)) = first_unknown(&results) {
            return Err(self.undecided(p, i, e));
        }
        let err = pick_error(&results, prim).unwrap_or(Errno::EIO);
        let err = self.roll_back(p, txn, applied.iter().map(|i| (*i, None)), err).await;
        if !outcome_unknown(&err) {
            self.post_unfence(applied, txn).await;
        }
        Err(err)
    }

    /// Lifts transaction `txn`'s fences on `servers` without waiting, and
    /// perhaps a little late (with this client's next request to each:
    /// `Transport::post_soon`): this client's later requests to them are
    /// served after it. Another client may still meet such a fence for a
    /// moment (or for good, if the post is lost with its connection): it
    /// retries under read locks, which prove the transaction over, and clears
    /// it then (`under_read_locks`).
    pub(super) async fn post_unfence(&self, servers: Vec<u32>, txn: u64) {
        for i in servers {
            self.post_soon(i, &Creds::root(), Request::Unfence { txn }, || format!("the unfence of transaction {txn} to server {i}")).await;
        }
    }

    pub(super) async fn do_rmdir(&self, c: &Creds, p: &NsPath, txn: Txn) -> Res<()> {
        let prim = self.primary(p);
        let path = p.to_string();
        let intent = || Intent::Rmdir { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let mut results = self.on_replicas(txn, prim, c, &intent(), |_| Request::Rmdir { path: path.clone(), txn: txn.id }).await?;
        self.step(txn, || Step::ReplicasDone(intent())).await?;
        if pick_error(&results, prim).is_none() {
            let r = self.rpc(prim, c, Request::Rmdir { path: path.clone(), txn: txn.id }).await;
            if r.is_ok() {
                return self.last_step(|| Step::PrimaryDone(intent())).await;
            }
            results.push((prim, r));
        }
        if let Some((i, e)) = first_unknown(&results) {
            return Err(self.undecided(p, i, e));
        }
        let Some(mut err) = pick_error(&results, prim) else { return Err(Errno::EIO) };
        if err == Errno::ENOENT && !results.iter().any(|(i, _)| *i == prim) {
            err = self.rmdir_absent(c, p).await;
        }
        let removed = results.iter().filter_map(|(i, r)| match r {
            Ok(Reply::Dir(l)) => Some((*i, Some(l.clone()))),
            _ => None,
        });
        Err(self.roll_back(p, txn.id, removed, err).await)
    }

    /// Procedure 2 met a server whose answer was lost: whether the primary (the
    /// commit point) applied the change is unknown, so nothing is rolled back by
    /// guess. EIO leaves the transaction to recovery, which reads the primary's
    /// durable state and rolls forward or back from it.
    pub(super) fn undecided(&self, p: &NsPath, server: u32, e: Errno) -> Errno {
        eprintln!("canopy-client: {p}: server {server} answered {e}; outcome unknown, left to recovery");
        Errno::EIO
    }

    /// Procedure 2's rollback: puts each server that applied the change back to
    /// its old lookup state, and answers `err`. If an undo fails, the outcome is
    /// uncertain: EIO, so the transaction is left to recovery (which makes the
    /// replicas equal the unchanged primary) instead of being unlocked.
    /// Each undo names transaction `txn`, so a server where recovery has
    /// taken it over refuses it (recovery decides there).
    pub(super) async fn roll_back(&self, p: &NsPath, txn: u64, applied: impl Iterator<Item = (u32, Option<DirLookup>)>, err: Errno) -> Errno {
        for (i, old) in applied {
            let undo = Request::DirSync { path: p.to_string(), want: old, txn: Some(txn) };
            if let Err(e) = self.rpc(i, &Creds::root(), undo).await {
                eprintln!("canopy-client: rollback of {p} on server {i} failed: {e}; left to recovery");
                return Errno::EIO;
            }
        }
        err
    }

    /// The error of an rmdir whose replicas found no directory: they know only
    /// directories, so a file of that name (ENOTDIR) lives on the primary alone.
    /// Only the primary's own answer tells: a stat it did not answer (down,
    /// connection lost) is that error, not a guess of ENOENT. Nothing was
    /// applied either way.
    pub(super) async fn rmdir_absent(&self, c: &Creds, p: &NsPath) -> Errno {
        match self.rpc(self.primary(p), c, Request::Stat { at: p.to_string().into() }).await {
            Ok(Reply::Attr(_) | Reply::Redirect { .. }) => Errno::ENOTDIR,
            Ok(other) => unexpected(other),
            Err(e) => e,
        }
    }

    /// chmod/chown of a directory, holding its lock: picks the procedure by how
    /// the change moves the permitted operations.
    pub(super) async fn do_dir_setattr(&self, c: &Creds, p: &NsPath, set: &SetAttr, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let old = match self.rpc(prim, &Creds::root(), Request::DirProbe { path: p.to_string() }).await? {
            Reply::Probe(Some(l)) => l,
            // Missing here: the primary-first path reports the caller's error.
            Reply::Probe(None) => return self.dir_setattr_primary_first(c, p, set, txn).await,
            other => return Err(unexpected(other)),
        };
        let mut attr = dir_attr_from(&old);
        if setattr::apply(c, &mut attr, set, 0).is_err() {
            return self.dir_setattr_primary_first(c, p, set, txn).await; // refused on the primary
        }
        let new = DirLookup { id: old.id, mode: attr.mode, uid: attr.uid, gid: attr.gid };
        match monotonic::classify(&old, &new) {
            Change::Neutral | Change::Increasing => self.dir_setattr_primary_first(c, p, set, txn).await,
            Change::Decreasing => self.dir_setattr_replicas_first(c, p, set, &old, txn).await,
            Change::NonMonotonic => self.fenced(txn.id, &[p], self.dir_setattr_primary_first(c, p, set, txn)).await,
        }
    }

    /// Procedure 1: the primary (the commit point), then every replica.
    pub(super) async fn dir_setattr_primary_first(&self, c: &Creds, p: &NsPath, set: &SetAttr, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let path = p.to_string();
        let intent = || Intent::DirSetAttr { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let attr = match self.rpc(prim, c, Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await? {
            Reply::Attr(a) => a,
            other => return Err(unexpected(other)),
        };
        self.step(txn, || Step::PrimaryDone(intent())).await?;
        let results = self.on_replicas(txn, prim, c, &intent(), |_| Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await?;
        if let Some(e) = pick_error(&results, prim) {
            eprintln!("canopy-client: setattr of directory {p} committed but a replica failed: {e}");
            return Err(Errno::EIO);
        }
        self.last_step(|| Step::ReplicasDone(intent())).await?;
        Ok(attr)
    }

    /// Procedure 2: every replica, then the primary (the commit point); on any
    /// failure the replicas are put back to `old`.
    pub(super) async fn dir_setattr_replicas_first(&self, c: &Creds, p: &NsPath, set: &SetAttr, old: &DirLookup, txn: Txn) -> Res<Attr> {
        let prim = self.primary(p);
        let path = p.to_string();
        let intent = || Intent::DirSetAttr { path: p.to_string() };
        self.step(txn, || Step::Locked(intent())).await?;
        let mut results = self.on_replicas(txn, prim, c, &intent(), |_| Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await?;
        self.step(txn, || Step::ReplicasDone(intent())).await?;
        if pick_error(&results, prim).is_none() {
            match self.rpc(prim, c, Request::DirSetAttr { path: path.clone(), set: set.clone(), txn: txn.id }).await {
                Ok(Reply::Attr(a)) => {
                    self.last_step(|| Step::PrimaryDone(intent())).await?;
                    return Ok(a);
                }
                Ok(other) => return Err(unexpected(other)),
                Err(e) => results.push((prim, Err(e))),
            }
        }
        if let Some((i, e)) = first_unknown(&results) {
            return Err(self.undecided(p, i, e));
        }
        let Some(err) = pick_error(&results, prim) else { return Err(Errno::EIO) };
        let applied = results.iter().filter(|(_, r)| r.is_ok()).map(|(i, _)| (*i, Some(old.clone())));
        Err(self.roll_back(p, txn.id, applied, err).await)
    }
}
