//! The Raft log and the vote, kept in the member's store
//! (families [`RAFT_LOG`] and [`RAFT_STATE`]) beside the data, so one
//! RocksDB holds a member's whole durable state.
//!
//! An entry is `raft_log[index as 8 big-endian bytes] = postcard(entry)`.
//! `raft_state` holds the vote, the last purged log id and the last log id,
//! each written in the same batch as the change that moves it. The commit
//! point is not kept: a member that restarts learns it again from its
//! leader (or, alone, commits its log again), and applies from its last
//! applied entry. A write returns once it is in the store's write-ahead log, so
//! the append callback is called at once.

use crate::{GroupConfig, MemberId, RAFT_LOG, RAFT_STATE};
use canopy_store::{Batch, Store};
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, OptionalSend, RaftLogId, StorageError, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

const VOTE: &[u8] = b"vote";
const LAST_PURGED: &[u8] = b"last_purged";
const LAST_LOG: &[u8] = b"last_log";

type Error = StorageError<MemberId>;

/// How many of the newest entries are kept in memory as well: the state
/// machine reads each entry back to apply it, mostly moments after it was
/// appended, and a copy costs less than a read and a decode.
const RECENT: usize = 4096;

#[derive(Clone)]
pub struct LogStore {
    store: Arc<dyn Store>,
    recent: Arc<parking_lot::Mutex<std::collections::BTreeMap<u64, Entry<GroupConfig>>>>,
}

impl LogStore {
    pub fn new(store: Arc<dyn Store>) -> LogStore {
        LogStore { store, recent: Arc::default() }
    }

    /// The entries of `range` if memory holds them all.
    fn recent_in<RB: RangeBounds<u64>>(&self, range: &RB) -> Option<Vec<Entry<GroupConfig>>> {
        let recent = self.recent.lock();
        let first = *recent.keys().next()?;
        let last = *recent.keys().next_back()?;
        let from = first_index(range);
        let covered = from >= first
            && match range.end_bound() {
                Bound::Included(e) => *e <= last,
                Bound::Excluded(e) => *e <= last + 1,
                Bound::Unbounded => true,
            };
        covered.then(|| recent.range((range.start_bound().cloned(), range.end_bound().cloned())).map(|(_, e)| e.clone()).collect())
    }

    fn state<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, Error> {
        read_state(&*self.store, key).map_err(|e| StorageIOError::read_logs(AnyError::error(e)).into())
    }

    fn write(&self, batch: Batch) -> Result<(), Error> {
        self.store.write(batch).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)).into())
    }
}

/// Whether `store` holds any Raft state: a vote, a log entry, or what a
/// snapshot installed. A member without any never took part in its group.
pub fn holds_raft_state(store: &dyn Store) -> Result<bool, canopy_store::StoreError> {
    let mut any = false;
    for family in [RAFT_STATE, RAFT_LOG] {
        store.for_each(family, &[], &mut |_, _| {
            any = true;
            false
        })?;
    }
    Ok(any)
}

/// A value of `raft_state`, decoded.
pub(crate) fn read_state<T: DeserializeOwned>(store: &dyn Store, key: &[u8]) -> Result<Option<T>, String> {
    match store.get(RAFT_STATE, key).map_err(|e| e.to_string())? {
        None => Ok(None),
        Some(bytes) => postcard::from_bytes(&bytes).map(Some).map_err(|e| format!("raft state {key:?}: {e}")),
    }
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("a Raft value always encodes")
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn first_index<RB: RangeBounds<u64>>(range: &RB) -> u64 {
    match range.start_bound() {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    }
}

impl RaftLogReader<GroupConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<GroupConfig>>, Error> {
        if let Some(entries) = self.recent_in(&range) {
            return Ok(entries);
        }
        let mut entries = Vec::new();
        let mut after = first_index(&range).checked_sub(1).map(index_key);
        loop {
            let page = self
                .store
                .scan(RAFT_LOG, &[], after.as_ref().map(|a| &a[..]), READ_PAGE)
                .map_err(|e| StorageIOError::read_logs(AnyError::new(&e)))?;
            for (k, v) in &page {
                let index = u64::from_be_bytes(k[..].try_into().map_err(|_| bad_key(k))?);
                if !range.contains(&index) {
                    return Ok(entries);
                }
                let entry = postcard::from_bytes::<Entry<GroupConfig>>(v)
                    .map_err(|e| StorageIOError::read_logs(AnyError::error(format!("raft log entry {index}: {e}"))))?;
                entries.push(entry);
                after = Some(index_key(index));
            }
            if page.len() < READ_PAGE {
                return Ok(entries);
            }
        }
    }
}

/// How many entries one scan of the log reads.
const READ_PAGE: usize = 256;

fn bad_key(k: &[u8]) -> Error {
    StorageIOError::read_logs(AnyError::error(format!("raft log key {k:?} is not an index"))).into()
}

impl RaftLogStorage<GroupConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<GroupConfig>, Error> {
        let last_purged_log_id: Option<LogId<MemberId>> = self.state(LAST_PURGED)?;
        let last: Option<LogId<MemberId>> = self.state(LAST_LOG)?;
        Ok(LogState { last_purged_log_id, last_log_id: last.or(last_purged_log_id) })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<MemberId>) -> Result<(), Error> {
        let mut b = Batch::new();
        b.put(RAFT_STATE, VOTE, encode(vote));
        self.store.write(b).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<MemberId>>, Error> {
        read_state(&*self.store, VOTE).map_err(|e| StorageIOError::read_vote(AnyError::error(e)).into())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<GroupConfig>) -> Result<(), Error>
    where
        I: IntoIterator<Item = Entry<GroupConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut b = Batch::new();
        let mut last = None;
        let mut kept = Vec::new();
        for e in entries {
            b.put(RAFT_LOG, index_key(e.get_log_id().index), encode(&e));
            last = Some(*e.get_log_id());
            kept.push(e);
        }
        if let Some(last) = last {
            b.put(RAFT_STATE, LAST_LOG, encode(&last));
        }
        let res = self.write(b);
        if res.is_ok() {
            let mut recent = self.recent.lock();
            // Appended entries follow the last kept, or replace those after.
            if let Some(first) = kept.first().map(|e| e.get_log_id().index) {
                recent.split_off(&first);
            }
            for e in kept {
                recent.insert(e.get_log_id().index, e);
            }
            while recent.len() > RECENT {
                recent.pop_first();
            }
        }
        callback.log_io_completed(res.as_ref().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string())));
        res
    }

    async fn truncate(&mut self, log_id: LogId<MemberId>) -> Result<(), Error> {
        self.recent.lock().split_off(&log_id.index);
        let mut b = Batch::new();
        b.delete_range(RAFT_LOG, index_key(log_id.index).to_vec(), index_key(u64::MAX).to_vec());
        b.delete(RAFT_LOG, index_key(u64::MAX));
        let before = match log_id.index.checked_sub(1) {
            Some(i) => self.try_get_log_entries(i..=i).await?.first().map(|e| *e.get_log_id()),
            None => None,
        };
        match before.or(self.state(LAST_PURGED)?) {
            Some(l) => b.put(RAFT_STATE, LAST_LOG, encode(&l)),
            None => b.delete(RAFT_STATE, LAST_LOG),
        }
        self.write(b)
    }

    async fn purge(&mut self, log_id: LogId<MemberId>) -> Result<(), Error> {
        {
            let mut recent = self.recent.lock();
            *recent = recent.split_off(&(log_id.index + 1));
        }
        let mut b = Batch::new();
        b.delete_range(RAFT_LOG, index_key(0).to_vec(), index_key(log_id.index + 1).to_vec());
        b.put(RAFT_STATE, LAST_PURGED, encode(&log_id));
        let last: Option<LogId<MemberId>> = self.state(LAST_LOG)?;
        if last.is_none_or(|l| l.index < log_id.index) {
            b.put(RAFT_STATE, LAST_LOG, encode(&log_id));
        }
        self.write(b)
    }
}
