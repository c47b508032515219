//! The replicated state: the member's store, to which committed proposals
//! are applied in log order. Each apply writes the batch and the last
//! applied log id (and membership) in one atomic write, so a member that
//! restarts resumes exactly after the last entry it applied. That write is
//! not made durable by itself: the log is, and a lost apply is redone.

use crate::log_store::encode;
use crate::snapshot::{self, applied_in, Membership, SnapshotFiles, APPLIED, MEMBERSHIP};
use crate::{Applied, Families, GroupConfig, MemberId, RAFT_STATE};
use canopy_store::{Batch, Store, StoreError};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Error = StorageError<MemberId>;

/// The snapshot a member would send now.
type Current = (SnapshotMeta<MemberId, openraft::BasicNode>, SnapshotFiles);

fn sm_write(e: StoreError) -> Error {
    StorageIOError::write_state_machine(AnyError::new(&e)).into()
}

fn sm_read(e: StoreError) -> Error {
    StorageIOError::read_state_machine(AnyError::new(&e)).into()
}

/// Called with the index of the last entry applied, after each apply.
pub type OnApplied = Arc<dyn Fn(u64) + Send + Sync>;

#[derive(Clone)]
pub struct StateMachine {
    store: Arc<dyn Store>,
    families: Families,
    /// Where snapshots are built and received.
    snapshots: PathBuf,
    current: Arc<Mutex<Option<Current>>>,
    builds: Arc<AtomicU64>,
    on_applied: Option<OnApplied>,
}

impl StateMachine {
    /// The state machine over `store`, whose data families are `families`.
    /// An install a previous run left half done is finished first.
    pub fn open(store: Arc<dyn Store>, families: Families, snapshots: PathBuf) -> Result<StateMachine, StoreError> {
        if let Some((files, applied, membership)) = snapshot::pending_install(&*store)? {
            snapshot::finish_install(&*store, &families, &files, applied, &membership)?;
        }
        // What an earlier run built or received is of no use now (a member
        // builds its snapshot again when one is asked for), and its names
        // would be taken.
        if snapshots.exists() {
            std::fs::remove_dir_all(&snapshots)?;
        }
        Ok(StateMachine {
            store,
            families,
            snapshots,
            current: Arc::default(),
            builds: Arc::default(),
            on_applied: None,
        })
    }

    /// Calls `f` after each apply with the last applied index.
    pub fn on_applied(mut self, f: OnApplied) -> StateMachine {
        self.on_applied = Some(f);
        self
    }

    fn snapshot_dir(&self, what: &str) -> PathBuf {
        self.snapshots.join(format!("{what}-{}", self.builds.fetch_add(1, Ordering::Relaxed)))
    }
}

impl RaftStateMachine<GroupConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId<MemberId>>, Membership), Error> {
        applied_in(&*self.store.snapshot()).map_err(sm_read)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, Error>
    where
        I: IntoIterator<Item = Entry<GroupConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Batch::new();
        let mut answers = Vec::new();
        let mut last = None;
        for entry in entries {
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(p) => {
                    self.ingest_tables(p).map_err(sm_write)?;
                    p.to_batch(&self.families, &mut batch).map_err(sm_write)?
                }
                EntryPayload::Membership(m) => {
                    batch.put(RAFT_STATE, MEMBERSHIP, encode(&Membership::new(Some(entry.log_id), m.clone())))
                }
            }
            answers.push(Applied { index: entry.log_id.index });
            last = Some(entry.log_id);
        }
        if let Some(last) = last {
            batch.put(RAFT_STATE, APPLIED, encode(&Some(last)));
            // Left in the store's log buffer: the Raft log holds the entries,
            // and a member that loses this write (with the applied mark in
            // it) applies them again. The next append writes it out.
            let mut res = Ok(());
            canopy_store::log_deferred(&mut || res = self.store.write(std::mem::take(&mut batch)));
            res.map_err(sm_write)?;
            if let Some(f) = &self.on_applied {
                f(last.index);
            }
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachine {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFiles>, Error> {
        let dir = self.snapshot_dir("received");
        SnapshotFiles::receiving(&dir).map(Box::new).map_err(sm_write)
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<MemberId, openraft::BasicNode>,
        files: Box<SnapshotFiles>,
    ) -> Result<(), Error> {
        snapshot::install(&*self.store, &self.families, &files, meta.last_log_id, &meta.last_membership).map_err(sm_write)?;
        self.keep_current(meta.clone(), *files);
        if let (Some(f), Some(l)) = (&self.on_applied, meta.last_log_id) {
            f(l.index);
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<GroupConfig>>, Error> {
        Ok(self
            .current
            .lock()
            .as_ref()
            .map(|(meta, files)| Snapshot { meta: meta.clone(), snapshot: Box::new(files.clone()) }))
    }
}

impl StateMachine {
    /// Ingests a proposal's table files. Done before the batch that records
    /// the entry applied, so a member that dies between the two ingests them
    /// again when it re-applies the entry, which changes nothing.
    fn ingest_tables(&self, p: &crate::Proposal) -> Result<(), StoreError> {
        for (family, bytes) in p.tables() {
            let family = self.families.named(family)?;
            let dir = self.store.scratch_dir();
            std::fs::create_dir_all(&dir)?;
            // Members of one process may share a scratch directory.
            static TABLES: AtomicU64 = AtomicU64::new(0);
            let path = dir.join(format!("replicated-{}-{}.table", std::process::id(), TABLES.fetch_add(1, Ordering::Relaxed)));
            std::fs::write(&path, bytes)?;
            let res = self.store.ingest(family, std::slice::from_ref(&path));
            let _ = std::fs::remove_file(&path);
            res?;
        }
        Ok(())
    }

    /// Makes `files` the current snapshot, removing the one it replaces.
    fn keep_current(&self, meta: SnapshotMeta<MemberId, openraft::BasicNode>, files: SnapshotFiles) {
        let old = self.current.lock().replace((meta, files));
        if let Some((_, old)) = old {
            let _ = std::fs::remove_dir_all(&old.dir);
        }
    }
}

impl RaftSnapshotBuilder<GroupConfig> for StateMachine {
    /// Writes the table files on a blocking thread: the runtime may be the
    /// daemon's serving thread, which serves meanwhile.
    async fn build_snapshot(&mut self) -> Result<Snapshot<GroupConfig>, Error> {
        let dir = self.snapshot_dir("built");
        let (store, families, into) = (self.store.clone(), self.families.clone(), dir.clone());
        let built = tokio::task::spawn_blocking(move || {
            let view = store.snapshot();
            let (applied, membership) = applied_in(&*view)?;
            let files = snapshot::build(&*store, &*view, &families, &into)?;
            Ok::<_, StoreError>((applied, membership, files))
        });
        let (applied, membership, files) = built.await.map_err(|e| sm_read(StoreError::Engine(format!("building a snapshot: {e}"))))?.map_err(sm_read)?;
        let id = format!("{}-{}", applied.map(|l| l.index).unwrap_or(0), dir.display());
        let meta = SnapshotMeta { last_log_id: applied, last_membership: membership, snapshot_id: id };
        self.keep_current(meta.clone(), files.clone());
        Ok(Snapshot { meta, snapshot: Box::new(files) })
    }
}
