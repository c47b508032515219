//! What every mode's client does with answers that point elsewhere: a file
//! whose inode is shared (hard links) lives on its home server, a removed name
//! may leave a remote inode to decrement or back-end contents to reclaim. And
//! the whole-cluster reads every mode shares: stats and fsck reports.

use crate::core::{unexpected, ClientCore};
use crate::fsck::{self, FsckSummary};
use crate::namespace::Res;
use crate::txn::{outcome_unknown, stopped_for_recovery, Txn};
use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::msg::{FsckReport, ServerStats};
use canopy_proto::{Attr, Creds, Errno, Fid, Reply, Request};
use canopy_rpc::Daemon;

/// How a link's steps failed ([`ClientCore::link_steps`]).
#[derive(Debug)]
pub(crate) struct LinkFailed {
    pub errno: Errno,
    /// Nothing of the link is left on any server (the insert certainly not
    /// made, the count taken back), so its transaction may be unlocked even
    /// where `errno` (a timeout reaching the destination's directory) would
    /// read as an unknown outcome.
    pub settled: bool,
}

impl From<Errno> for LinkFailed {
    /// A failure whose errno alone says whether the outcome is known.
    fn from(errno: Errno) -> Self {
        LinkFailed { errno, settled: false }
    }
}

impl ClientCore {
    pub(crate) async fn inode_stat(&self, ino: u64, home: u32) -> Res<Attr> {
        match self.rpc(home, &Creds::root(), Request::InodeStat { ino }).await? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    /// A hard link's steps, in every mode, as transaction `txn` of the caller
    /// `c`. `shared` is the source's answer to `LinkShare`: its inode made
    /// shared (or found so), the new name counted (or to be counted on its
    /// home, `Redirect`, which checks there that `c` may link it).
    /// `between` then runs (a transaction's lease check: a coordinator held up
    /// past its lease stops before the name appears, taking back the count it
    /// certainly added for no name). Then `insert(ino, home)` adds the name;
    /// it answers `Err` for a failure before the insert was sent (finding the
    /// destination: certain), else the insert's own answer (the server that
    /// made the name, when it did).
    ///
    /// The home records the count, and the new name's server the name, as
    /// the transaction's own until they are settled: kept (posted) when the
    /// name was made; taken back here when it certainly was not, which
    /// leaves nothing of the link ([`LinkFailed::settled`]); left to recovery,
    /// which settles them from the name's record, when the insert's outcome
    /// is unknown (`EIO`: one count too low would free the inode while a name
    /// still refers to it), when taking the count back failed (`EIO`), or
    /// when the coordinator dies.
    pub(crate) async fn link_steps<I>(
        &self,
        c: &Creds,
        shared: Reply,
        txn: u64,
        between: impl std::future::Future<Output = Res<()>>,
        insert: impl FnOnce(u64, u32) -> I,
    ) -> Result<Attr, LinkFailed>
    where
        I: std::future::Future<Output = Res<Res<u32>>>,
    {
        let (ino, home) = match shared {
            Reply::Shared { ino, home } => (ino, home),
            Reply::Redirect { ino, home } => {
                self.count_link(c, ino, home, 1, Some(txn)).await?;
                (ino, home)
            }
            other => return Err(unexpected(other).into()),
        };
        if let Err(e) = between.await {
            if let Err(undo) = self.settle_link(ino, home, txn, true).await {
                eprintln!("canopy-client: inode {ino:#x} keeps a count for a link never made ({undo}); left to recovery");
            }
            return Err(e.into());
        }
        match insert(ino, home).await {
            Ok(Ok(named_at)) => {
                let servers = if named_at == home { vec![home] } else { vec![home, named_at] };
                for server in servers {
                    let settle = Request::LinkSettle { ino, txn, undo: false };
                    self.post_soon(server, &Creds::root(), settle, || format!("the settling of link transaction {txn} on server {server}")).await;
                }
                Ok(self.inode_stat(ino, home).await?)
            }
            Ok(Err(e)) if outcome_unknown(&e) => {
                eprintln!("canopy-client: a link to inode {ino:#x} may or may not have been made ({e}); its count is left as if it was");
                Err(Errno::EIO.into())
            }
            Ok(Err(e)) | Err(e) => match self.settle_link(ino, home, txn, true).await {
                Ok(()) => Err(LinkFailed { errno: e, settled: true }),
                Err(undo) => {
                    eprintln!("canopy-client: the count a link to inode {ino:#x} added for no name was not taken back ({undo}); left to recovery");
                    Err(Errno::EIO.into())
                }
            },
        }
    }

    /// Ends link transaction `txn` once its steps answered `r`: unlocked if
    /// they left nothing ([`LinkFailed::settled`], whatever the errno says),
    /// else as any transaction ([`ClientCore::finish`]). Either way a step
    /// refused because recovery took the transaction over answers `EIO`
    /// ([`stopped_for_recovery`]), never `ESTALE`.
    pub(crate) async fn end_link(&self, txn: Txn, r: Result<Attr, LinkFailed>) -> Res<Attr> {
        match r {
            Err(LinkFailed { errno, settled: true }) => {
                self.unlock(txn).await;
                stopped_for_recovery(txn, Err(errno))
            }
            r => {
                let r = stopped_for_recovery(txn, r.map_err(|f| f.errno));
                self.finish(txn, &r).await;
                r
            }
        }
    }

    /// A link whose coordinator died (revoked first, so its late steps record
    /// nothing more): each count it added is kept if its name was made,
    /// else taken back, and what it recorded is forgotten. The name's record
    /// decides, not whether the name is there now: it may have been made,
    /// then unlinked (which took its own count back).
    pub(crate) async fn recover_link(&self, was: u64) -> Res<()> {
        let mut counted = Vec::new();
        let mut named = Vec::new();
        for (server, r) in self.fan_out(0..self.n, &Creds::root(), |_| Request::LinkPending { txn: was }).await {
            let Reply::Pending { counted: c, named: n } = r? else { return Err(Errno::EPROTO) };
            counted.extend(c.into_iter().map(|ino| (server, ino)));
            named.extend(n.into_iter().map(|ino| (server, ino)));
        }
        // The counts first: a recovery that dies after them leaves only
        // names' records, which the next one forgets.
        for &(server, ino) in &counted {
            let made = named.iter().any(|(_, n)| *n == ino);
            self.settle_link(ino, server, was, !made).await?;
        }
        for (server, ino) in named {
            self.settle_link(ino, server, was, false).await?;
        }
        Ok(())
    }

    pub(crate) async fn link_delta(&self, ino: u64, home: u32, delta: i32) -> Res<()> {
        self.count_link(&Creds::root(), ino, home, delta, None).await
    }

    /// Changes inode `ino`'s count on its home by `delta`, as link
    /// transaction `txn`'s own if any; a count added is `c`'s link.
    async fn count_link(&self, c: &Creds, ino: u64, home: u32, delta: i32, txn: Option<u64>) -> Res<()> {
        let r = self.rpc(home, c, Request::InodeLinkDelta { ino, delta, txn }).await?;
        self.dropped_here(r)
    }

    /// Settles what link transaction `txn` counted on `ino` (`LinkSettle`).
    pub(crate) async fn settle_link(&self, ino: u64, home: u32, txn: u64, undo: bool) -> Res<()> {
        let r = self.rpc(home, &Creds::root(), Request::LinkSettle { ino, txn, undo }).await?;
        self.dropped_here(r)
    }

    /// A home's answer to a change of an inode's count: back-end contents
    /// its last count freed are reclaimed.
    fn dropped_here(&self, r: Reply) -> Res<()> {
        match r {
            Reply::Dropped { freed, .. } => self.reclaim(freed),
            Reply::Attr(_) => {}
            other => return Err(unexpected(other)),
        }
        Ok(())
    }

    /// Finishes dropping the name an unlink or rename removed or replaced: a
    /// remote inode reference to decrement, back-end contents to reclaim.
    pub(crate) async fn drop_remote(&self, reply: Reply) -> Res<()> {
        match reply {
            Reply::Dropped { remote: Some((ino, home)), .. } => self.link_delta(ino, home, -1).await,
            Reply::Dropped { remote: None, freed } => {
                self.reclaim(freed);
                Ok(())
            }
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) async fn attr_or_follow(&self, reply: Reply) -> Res<Attr> {
        match reply {
            Reply::Attr(a) => Ok(a),
            Reply::Redirect { ino, home } => self.inode_stat(ino, home).await,
            other => Err(unexpected(other)),
        }
    }

    /// An `Access` answer: `Unit`, or a shared inode on its home to check here.
    pub(crate) async fn access_or_follow(&self, c: &Creds, reply: Reply, mask: u32) -> Res<()> {
        match reply {
            Reply::Unit => Ok(()),
            Reply::Redirect { ino, home } => {
                let a = self.inode_stat(ino, home).await?;
                if mask & 7 == access::F || perm::allows(c, Owner::of_attr(&a), false, mask & 7) {
                    Ok(())
                } else {
                    Err(Errno::EACCES)
                }
            }
            other => Err(unexpected(other)),
        }
    }

    /// Reports back-end contents whose last name went away.
    pub(crate) fn reclaim(&self, freed: Option<Fid>) {
        if let (Some(fid), Some(r)) = (freed, &self.reclaim) {
            r.freed(fid);
        }
    }

    pub(crate) async fn all_stats(&self) -> Res<Vec<ServerStats>> {
        let mut out = Vec::new();
        for (_, r) in self.fan_out(0..self.n, &Creds::root(), |_| Request::Stats).await {
            match r? {
                Reply::Stats(s) => out.push(s),
                other => return Err(unexpected(other)),
            }
        }
        Ok(out)
    }

    pub(crate) async fn fsck_all(&self, layout: fsck::DirLayout) -> Res<FsckSummary> {
        let mut reports: Vec<FsckReport> = Vec::new();
        for (_, r) in self.fan_out(0..self.n, &Creds::root(), |_| Request::Fsck).await {
            match r? {
                Reply::Fsck(f) => reports.push(f),
                other => return Err(unexpected(other)),
            }
        }
        Ok(fsck::summarise(&reports, &self.list_txns().await?, layout))
    }

    /// Recovers every transaction whose coordinator's lease ran out, taking its
    /// locks with the mode's `lock` (which recovers what the lock service hands
    /// over); returns how many were recovered.
    pub(crate) async fn repair_expired<F, Fut>(&self, lock: F) -> Res<u64>
    where
        F: Fn(Vec<(String, canopy_proto::msg::LockMode)>) -> Fut,
        Fut: std::future::Future<Output = Res<crate::txn::Txn>>,
    {
        let txns = self.list_txns().await?;
        let before = self.counters.snapshot().recoveries;
        for t in txns.into_iter().filter(|t| t.expires_in_ms < 0) {
            // Asking for the dead transaction's own locks makes the lock
            // service hand it over; then ours are granted and dropped.
            let txn = lock(t.locks).await?;
            self.unlock(txn).await;
        }
        Ok(self.counters.snapshot().recoveries - before)
    }

    pub(crate) async fn list_txns(&self) -> Res<Vec<canopy_proto::msg::TxnInfo>> {
        self.counters.sent_to_lockd();
        match self.t.call(Daemon::Lockd, &Creds::root(), Request::ListTxns).await? {
            Reply::Txns(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }
}
