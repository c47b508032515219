//! The client's side of GIGA+ (seed 000 §3.1): a bitmap of partitions per
//! directory, learnt only from servers' answers (no broadcast), and the
//! operations that must reach every partition of a directory (readdir, seal,
//! drop, header update), each asking the servers it knows of and learning of
//! more from their answers until none is new.

use super::IndexFs;
use crate::core::unexpected;
use crate::counters::ClientCounters;
use crate::namespace::Res;
use canopy_proto::giga::{self, PartMap};
use canopy_proto::msg::{DirLookup, BULK_MAX};
use canopy_proto::{Creds, DirEntry, Errno, Reply, Request};
use std::collections::BTreeMap;

impl IndexFs {
    fn maps(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, PartMap>> {
        self.maps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The partitions known of `dir` (partition 0 at least).
    pub(super) fn map_of(&self, dir: u64) -> PartMap {
        self.maps().get(&dir).cloned().unwrap_or_else(PartMap::new)
    }

    /// Merges what a server told of `dir`'s partitions.
    pub(super) fn learn(&self, dir: u64, parts: &PartMap) {
        if parts.len() > 1 {
            self.maps().entry(dir).or_default().merge(parts);
        }
    }

    /// Forgets every bitmap (a directory was made again under an id).
    pub(super) fn forget_maps(&self) {
        self.maps().clear();
    }

    /// The server of the partition of `dir` that `name` belongs to, as known.
    pub(super) fn server_for(&self, dir: u64, name: &str) -> u32 {
        let part = self.map_of(dir).part_of(giga::name_hash(name));
        giga::server_of(dir, part, self.n)
    }

    /// The servers holding the partitions of `dir` known, its home first.
    fn servers_of(&self, dir: u64) -> Vec<u32> {
        let mut out = vec![self.home(dir)];
        for p in self.map_of(dir).parts() {
            let s = giga::server_of(dir, p, self.n);
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// One RPC to an IndexFS server. A redirect (the name's partition moved) is
    /// learnt and answered `EREMCHG`, which `optimistic` resends.
    pub(super) async fn rpc_ix(&self, server: u32, c: &Creds, req: Request) -> Res<Reply> {
        match self.rpc(server, c, req).await? {
            Reply::IxMoved { dir, parts } => {
                self.counters.redirected();
                self.learn(dir, &parts);
                Err(Errno::EREMCHG)
            }
            other => Ok(other),
        }
    }

    /// `req` to the server of the partition of `dir` holding `name`, again
    /// after each redirect and after a pause while a split is about to move
    /// the name.
    pub(super) async fn entry_rpc(&self, dir: u64, name: &str, c: &Creds, req: Request) -> Res<Reply> {
        let mut split = SplitWait::new(&self.clock);
        loop {
            match self.rpc_ix(self.server_for(dir, name), c, req.clone()).await {
                Err(Errno::EREMCHG) => split.redirected(&self.counters).await?,
                Err(Errno::EINPROGRESS) => split.pause(&self.counters).await?,
                r => return r,
            }
        }
    }

    /// Sends `make()` to every server holding a partition of `dir`, learning
    /// of more partitions from each answer (`known` reads it), until every
    /// server known was asked. Answers the servers asked, in order, with their
    /// replies; stops at the first error.
    async fn each_partition_server(&self, dir: u64, c: &Creds, make: impl Fn() -> Request, known: impl Fn(&Reply) -> Option<&PartMap>) -> (Vec<(u32, Reply)>, Option<Errno>) {
        let mut asked: Vec<(u32, Reply)> = Vec::new();
        loop {
            let todo: Vec<u32> = self.servers_of(dir).into_iter().filter(|s| !asked.iter().any(|(a, _)| a == s)).collect();
            if todo.is_empty() {
                return (asked, None);
            }
            let replies = futures::future::join_all(todo.iter().map(|s| self.rpc_ix(*s, c, make()))).await;
            let mut failed = None;
            for (s, r) in todo.into_iter().zip(replies) {
                match r {
                    Ok(reply) => {
                        if let Some(m) = known(&reply) {
                            self.learn(dir, m);
                        }
                        asked.push((s, reply));
                    }
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let Some(e) = failed {
                return (asked, Some(e));
            }
        }
    }

    /// Learns the bitmap of `dir` every partition's server knows (a batch
    /// commit's names refused as moved). Failures leave what was known.
    pub(super) async fn refresh_parts(&self, c: &Creds, dir: u64) {
        self.each_partition_server(dir, c, || Request::IxReadDir { dir, after: None, limit: 1 }, listed_parts).await;
    }

    /// Seals every partition of `dir` (refusing new names; `ENOTEMPTY` if any
    /// holds one), as a step of transaction `txn` (as are the steps below).
    /// On failure unseals what it sealed.
    pub(super) async fn seal_all(&self, dir: u64, txn: u64) -> Res<()> {
        let root = Creds::root();
        let txn = Some(txn);
        let (sealed, failed) = self.each_partition_server(dir, &root, || Request::IxSeal { dir, seal: true, txn }, parts_of).await;
        let Some(e) = failed else { return Ok(()) };
        for (s, _) in sealed {
            if self.rpc_ix(s, &root, Request::IxSeal { dir, seal: false, txn }).await.is_err() {
                return Err(Errno::EIO);
            }
        }
        Err(e)
    }

    /// Unseals every partition of `dir` found.
    pub(super) async fn unseal_all(&self, dir: u64, txn: u64) -> Res<()> {
        let (_, failed) = self.each_partition_server(dir, &Creds::root(), || Request::IxSeal { dir, seal: false, txn: Some(txn) }, parts_of).await;
        failed.map_or(Ok(()), Err)
    }

    /// Drops every partition of a sealed `dir`: its home's first (what
    /// recovery decides by), then the other servers' that `seal_all` found, or
    /// (`everywhere`, in recovery, when no bitmap is left to tell) every
    /// server's.
    pub(super) async fn drop_all(&self, dir: u64, everywhere: bool, txn: u64) -> Res<()> {
        let root = Creds::root();
        let home = self.home(dir);
        let others: Vec<u32> = match everywhere {
            true => (0..self.n).filter(|s| *s != home).collect(),
            false => self.servers_of(dir).into_iter().filter(|s| *s != home).collect(),
        };
        let txn = Some(txn);
        self.rpc_ix(home, &root, Request::IxDropHeader { dir, txn }).await?;
        let replies = futures::future::join_all(others.iter().map(|s| self.rpc_ix(*s, &root, Request::IxDropHeader { dir, txn }))).await;
        self.maps().remove(&dir);
        replies.into_iter().find_map(Result::err).map_or(Ok(()), Err)
    }

    /// Copies `lookup` into the header of every partition of its directory.
    pub(super) async fn header_set_all(&self, lookup: &DirLookup, txn: u64) -> Res<()> {
        let make = || Request::IxHeaderSet { lookup: lookup.clone(), txn: Some(txn) };
        let (_, failed) = self.each_partition_server(lookup.id, &Creds::root(), make, parts_of).await;
        failed.map_or(Ok(()), Err)
    }

    /// One readdir page of directory `dir`: every partition's server lists the
    /// names after `after` it holds, and the page is the first `limit` of them.
    pub(super) async fn list_page(&self, c: &Creds, dir: u64, after: Option<&str>, limit: u32) -> Res<(Vec<DirEntry>, bool)> {
        let limit = limit.clamp(1, 4096);
        let make = || Request::IxReadDir { dir, after: after.map(str::to_string), limit };
        let (pages, failed) = self
            .each_partition_server(dir, c, make, |r| match r {
                Reply::IxEntries { parts, .. } => Some(parts),
                _ => None,
            })
            .await;
        if let Some(e) = failed {
            return Err(e);
        }
        let mut all: Vec<DirEntry> = Vec::new();
        let mut more = false;
        for (_, reply) in pages {
            match reply {
                Reply::IxEntries { entries, more: m, .. } => {
                    more |= m;
                    all.extend(entries);
                }
                other => return Err(unexpected(other)),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        // A split under way may show a name on both of its servers.
        all.dedup_by(|a, b| a.name == b.name);
        if all.len() > limit as usize {
            all.truncate(limit as usize);
            more = true;
        }
        Ok((all, more))
    }

    /// Bulk insertion into `dir`: each partition's server gets its share of
    /// `files` in one request (all at once); a share refused as moved is
    /// regrouped by the bitmap learnt and sent again, and one refused while
    /// its partition's split is unfinished (`EAGAIN`) is sent again after a
    /// pause. Shares land independently, so only the refused ones go again.
    pub(super) async fn bulk_shares(&self, c: &Creds, dir: u64, names: Vec<String>, mode: u32) -> Res<(u64, Vec<(String, Errno)>)> {
        let mut pending = names;
        let (mut inserted, mut rejected) = (0u64, Vec::new());
        let (mut redirects, mut pause) = (0, BULK_PAUSE_MIN);
        while !pending.is_empty() {
            let mut shares: BTreeMap<u32, Vec<String>> = BTreeMap::new();
            for name in pending.drain(..) {
                shares.entry(self.server_for(dir, &name)).or_default().push(name);
            }
            let requests = shares.into_iter().flat_map(|(s, names)| in_frames(names).into_iter().map(move |n| (s, n)));
            let sent = requests.map(|(s, names)| async move {
                let r = self.rpc_ix(s, c, Request::IxBulkInsert { dir, names: names.clone(), mode }).await;
                (names, r)
            });
            let (mut moved, mut busy) = (false, false);
            for (files, r) in futures::future::join_all(sent).await {
                match r {
                    Ok(Reply::Bulk { inserted: n, rejected: mut refused }) => {
                        inserted += n;
                        rejected.append(&mut refused);
                    }
                    Err(Errno::EREMCHG) => {
                        moved = true;
                        pending.extend(files);
                    }
                    Err(Errno::EAGAIN) => {
                        busy = true;
                        pending.extend(files);
                    }
                    Ok(other) => return Err(unexpected(other)),
                    Err(e) => return Err(e),
                }
            }
            if moved {
                redirects += 1;
                if redirects > super::MAX_REDIRECTS {
                    return Err(Errno::EIO);
                }
            }
            if busy && !moved {
                if pause > BULK_PAUSE_MAX {
                    return Err(Errno::EAGAIN);
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
        Ok((inserted, rejected))
    }
}

/// Pauses between resends of a request whose name a split is about to move
/// (`EINPROGRESS`: the split is recorded and not running, e.g. between its
/// retries): doubling from 1 ms to [`SPLIT_PAUSE_MAX`], for at most
/// [`SPLIT_WAIT_MAX`], then `EAGAIN`. The server itself answers `EAGAIN` once
/// the split has been failing for 2 s, so the bound is only a guard.
pub(super) struct SplitWait {
    clock: canopy_proto::clock::SharedClock,
    /// When the first pause began, on `clock` (milliseconds).
    since: u64,
    pause: std::time::Duration,
    redirects: u32,
}

/// Redirects one operation follows at once; past these it pauses before each
/// (see [`SplitWait::redirected`]).
const FAST_REDIRECTS: u32 = 16;

const SPLIT_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(128);
const SPLIT_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

impl SplitWait {
    pub(super) fn new(clock: &canopy_proto::clock::SharedClock) -> SplitWait {
        SplitWait { clock: clock.clone(), since: clock.now_ms(), pause: std::time::Duration::from_millis(1), redirects: 0 }
    }

    /// After a redirect: the first [`FAST_REDIRECTS`] are followed at once.
    /// More most likely mean this client learnt of a split's new partition
    /// before the server that takes it finished installing it (inferred, not
    /// traced: each answer would send it back to the same server), so they
    /// wait as a split does; `EIO` once that bound is spent. (Followed without a pause, 64 redirects came and went
    /// within one split on a busy machine, and a stat failed `EIO`.)
    pub(super) async fn redirected(&mut self, counters: &ClientCounters) -> Res<()> {
        self.redirects += 1;
        if self.redirects <= FAST_REDIRECTS {
            return Ok(());
        }
        self.pause(counters).await.map_err(|_| Errno::EIO)
    }

    /// Waits before the next resend (counted as a retry); `EAGAIN` once the
    /// bound is spent.
    pub(super) async fn pause(&mut self, counters: &ClientCounters) -> Res<()> {
        if self.clock.now_ms().saturating_sub(self.since) >= SPLIT_WAIT_MAX.as_millis() as u64 {
            return Err(Errno::EAGAIN);
        }
        counters.retried();
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(SPLIT_PAUSE_MAX);
        Ok(())
    }
}

/// Pauses before a share refused during a split goes again: doubling from
/// 1 ms, giving up (`EAGAIN`) after about 16 s, by when the servers' split
/// retries (every 500 ms) have had many chances.
const BULK_PAUSE_MIN: std::time::Duration = std::time::Duration::from_millis(1);
const BULK_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(8192);

/// What one name adds to a bulk request at most: its length prefix (a varint
/// of at most 2 bytes for a name of at most 255) and itself.
fn bulk_bytes(name: &str) -> usize {
    name.len() + 2
}

/// A share's names in requests of at most [`BULK_REQUEST_BYTES`] and
/// [`BULK_MAX`] names, so a share of long names, or one sent
/// before the directory split, still fits in frames.
fn in_frames(names: Vec<String>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut bytes = 0;
    for f in names {
        let b = bulk_bytes(&f);
        let full = out.last().is_none_or(|last| bytes + b > BULK_REQUEST_BYTES || last.len() == BULK_MAX);
        if full {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += b;
        if let Some(last) = out.last_mut() {
            last.push(f);
        }
    }
    out
}

/// Bulk request budget: half a frame, the rest for headroom.
const BULK_REQUEST_BYTES: usize = canopy_proto::frame::MAX_FRAME / 2;
impl IndexFs {
    /// Splits the servers finished, and splits queued, running or unfinished.
    pub(super) async fn split_activity(&self) -> Res<(u64, u64)> {
        let stats = self.all_stats().await?;
        let sum = |names: &[&str]| stats.iter().flat_map(|s| &s.counters).filter(|(n, _)| names.contains(&n.as_str())).map(|(_, v)| v).sum::<u64>();
        Ok((sum(&["splits"]), sum(&["splits_pending", "splits_unfinished"])))
    }
}

fn listed_parts(r: &Reply) -> Option<&PartMap> {
    match r {
        Reply::IxEntries { parts, .. } => Some(parts),
        _ => None,
    }
}

fn parts_of(r: &Reply) -> Option<&PartMap> {
    match r {
        Reply::IxParts(m) => Some(m),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_cut_into_requests_that_fit_a_frame() {
        let long = |i: usize| format!("{i:0>250}");
        let files: Vec<_> = (0..20_000).map(long).collect();
        let requests = in_frames(files.clone());
        assert!(requests.len() > 1, "20,000 long names do not fit one frame");
        for r in &requests {
            let frame = canopy_proto::frame::encode_request(&mut bytes::BytesMut::new(), 1, &Creds::root(), &Request::IxBulkInsert { dir: 2, names: r.clone(), mode: 0o644 });
            assert!(frame.is_ok(), "a request of {} names fits", r.len());
        }
        assert_eq!(requests.concat(), files, "every name once, in order");
        let short: Vec<_> = (0..450_000).map(|i| i.to_string()).collect();
        assert!(in_frames(short).iter().all(|r| r.len() <= BULK_MAX));
        assert!(in_frames(Vec::new()).is_empty());
    }
}
