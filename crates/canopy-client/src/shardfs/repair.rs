//! ShardFS's part of `fsck --repair` beyond recovering transactions: what
//! single-RPC requests sent to a server that was not their entry's primary
//! left behind, on a cluster whose servers took them.
//!
//! Such a request could leave a file entry away from its primary (found by
//! no stat, listed by readdir), a second file of a name its primary also
//! holds, or a file under the name a later mkdir gave a directory, whose
//! replica step it then refused, so one replica's table lacks a directory
//! the others hold. The repair, in two passes:
//! 1. Every entry and set of directory times a server holds away from its
//!    primary (`Migrate` of the root lists them) goes to its primary if
//!    nothing holds that name there, else is dropped: the primary's object
//!    is the one every stat found (a dropped file's back-end contents and
//!    hard-link count are given back as an unlink's would be).
//! 2. The transactions whose coordinators died are recovered (a mkdir whose
//!    replica step met such a file is finished once the file is gone).
//! 3. If the replicas' tables still differ, every directory is made what its
//!    primary (a directory mutation's commit point) says: added where it
//!    is missing (`DirSync`), removed where the primary has none.
//!
//! Each step is idempotent: a repair cut short is run again.

use crate::recover::Recovers;
use crate::core::unexpected;
use crate::namespace::Res;
use crate::shardfs::ShardFs;
use canopy_proto::msg::{At, DirLookup, Intent, MovedItem, Record};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, FileKind, Reply, Request};
use std::collections::{BTreeMap, HashMap};

/// Objects one `Migrate` lists at most.
const BATCH: u32 = 1024;
/// Names one listing page asks for.
const PAGE: u32 = 4096;

impl ShardFs {
    /// The three passes; answers how many objects were moved, dropped or
    /// synced (a transaction recovered is counted as `repair` counts it).
    pub(crate) async fn repair_placement(&self) -> Res<u64> {
        let mut mended = 0;
        for server in 0..self.n {
            mended += self.rehome_from(server).await?;
        }
        self.repair_expired(|locks| self.lock_recovering(locks, Intent::Retry { path: "/".into() })).await?;
        if !self.tables_agree().await? {
            mended += self.sync_tables(&NsPath::root()).await?;
        }
        Ok(mended)
    }

    /// Pass 1 on `server`: until it holds nothing away from its primary.
    async fn rehome_from(&self, server: u32) -> Res<u64> {
        let mut mended = 0;
        loop {
            let moved = match self.rpc(server, &Creds::root(), Request::Migrate { root: "/".into(), limit: BATCH }).await? {
                Reply::Moved(m) => m,
                other => return Err(unexpected(other)),
            };
            if moved.is_empty() {
                return Ok(mended);
            }
            let mut adopt: HashMap<u32, Vec<MovedItem>> = HashMap::new();
            let mut dropped = Vec::new();
            for m in &moved {
                match &m.item {
                    MovedItem::File { parent, name, record } if self.taken_at(m.target, *parent, name).await? => dropped.push(record.clone()),
                    item => adopt.entry(m.target).or_default().push(item.clone()),
                }
            }
            for (target, items) in adopt {
                self.rpc(target, &Creds::root(), Request::Adopt { items, txn: None }).await?;
            }
            let items: Vec<MovedItem> = moved.into_iter().map(|m| m.item).collect();
            mended += items.len() as u64;
            self.rpc(server, &Creds::root(), Request::Release { items, txn: None }).await?;
            for record in dropped {
                self.give_back(record).await?;
            }
        }
    }

    /// Whether `server` holds something (a file or a directory) at entry
    /// `name` of directory `parent`.
    async fn taken_at(&self, server: u32, parent: u64, name: &str) -> Res<bool> {
        match self.rpc(server, &Creds::root(), Request::RecoveryStat { at: At::Entry { dir: parent, name: name.into() } }).await {
            Ok(_) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// What an unlink of a dropped file's last name gives back.
    async fn give_back(&self, record: Record) -> Res<()> {
        match record {
            Record::Inode(i) => {
                self.reclaim(i.data.filter(|d| d.inline.is_none()).map(|d| d.fid));
                Ok(())
            }
            Record::Linked { ino, home } => self.link_delta(ino, home, -1).await,
        }
    }

    /// Whether every server's table has the same digest.
    async fn tables_agree(&self) -> Res<bool> {
        let mut digests = Vec::new();
        for (_, r) in self.fan_out(0..self.n, &Creds::root(), |_| Request::Fsck).await {
            match r? {
                Reply::Fsck(report) => digests.push(report.dir_digest),
                other => return Err(unexpected(other)),
            }
        }
        Ok(digests.windows(2).all(|w| w[0] == w[1]))
    }

    /// Pass 2 below directory `dir` (which its primary holds): each
    /// subdirectory any server lists is made what its primary says on every
    /// server, then its own subdirectories.
    async fn sync_tables(&self, dir: &NsPath) -> Res<u64> {
        let mut mended = 0;
        let mut todo = vec![dir.clone()];
        while let Some(dir) = todo.pop() {
            for (name, holders) in self.subdirs_anywhere(&dir).await? {
                let path = dir.join(&name)?;
                let prim = self.primary(&path);
                let want = match holders.contains(&prim) {
                    true => Some(self.lookup_at(prim, &path).await?),
                    false => None,
                };
                let wrong: Vec<u32> = (0..self.n).filter(|s| holders.contains(s) != want.is_some()).collect();
                for server in &wrong {
                    self.rpc(*server, &Creds::root(), Request::DirSync { path: path.to_string(), want: want.clone(), txn: None }).await?;
                }
                mended += wrong.len() as u64;
                if want.is_some() {
                    todo.push(path);
                }
            }
        }
        Ok(mended)
    }

    /// Every subdirectory of `dir` some server's table lists, with the
    /// servers that list it.
    async fn subdirs_anywhere(&self, dir: &NsPath) -> Res<BTreeMap<String, Vec<u32>>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for server in 0..self.n {
            let mut after: Option<String> = None;
            loop {
                let req = Request::ReadDir { at: dir.to_string().into(), after: after.clone(), limit: PAGE, with_dirs: true };
                let (entries, more) = match self.rpc(server, &Creds::root(), req).await {
                    Ok(Reply::Entries { entries, more }) => (entries, more),
                    Ok(other) => return Err(unexpected(other)),
                    // Not a directory on that server's table: it lists none.
                    Err(Errno::ENOENT | Errno::ENOTDIR | Errno::EREMOTE) => break,
                    Err(e) => return Err(e),
                };
                after = entries.last().map(|e| e.name.clone());
                for e in entries.into_iter().filter(|e| e.kind == FileKind::Dir) {
                    out.entry(e.name).or_default().push(server);
                }
                if !more || after.is_none() {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The lookup state `server` holds for directory `path`.
    async fn lookup_at(&self, server: u32, path: &NsPath) -> Res<DirLookup> {
        match self.rpc(server, &Creds::root(), Request::RecoveryStat { at: path.to_string().into() }).await? {
            Reply::Attr(a) if a.kind == FileKind::Dir => Ok(DirLookup { id: a.ino, mode: a.mode, uid: a.uid, gid: a.gid }),
            Reply::Attr(_) => Err(Errno::ENOTDIR),
            other => Err(unexpected(other)),
        }
    }
}
