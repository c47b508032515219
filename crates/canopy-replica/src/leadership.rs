//! Following who leads: a member that becomes leader opens its service
//! over a fresh [`ReplicatedStore`] once it has applied everything
//! committed before its term (so its service loads the group's state, as a
//! restarted server loads its own); a member that stops leading closes it,
//! failing what was pending.

use crate::service::{Leading, ReplicatedService};
use crate::ReplicatedStore;
use canopy_rpc::Service;
use canopy_store::SharedStore;
use std::sync::Arc;
use std::time::Duration;

/// Opens the daemon's service over a store (a metadata server, the lock
/// service). May block (it may wait for other daemons).
pub type Open = Arc<dyn Fn(SharedStore) -> Result<Arc<dyn Service>, String> + Send + Sync>;

/// How often leadership is looked at besides when it changes.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Runs for the member's life: opens and closes `svc`'s leading service as
/// its Raft's leadership comes and goes. `data` is the member's own store.
pub async fn follow(svc: Arc<ReplicatedService>, data: SharedStore, open: Open, commit_wait: Duration) {
    let raft = svc.raft().clone();
    let mut metrics = raft.metrics();
    loop {
        let (leads, term) = {
            let m = metrics.borrow_and_update();
            (m.state.is_leader(), m.current_term)
        };
        if !leads {
            svc.stop_leading("another member leads");
        } else if svc.leading_term() != Some(term) {
            svc.stop_leading("a newer term began");
            if let Err(why) = begin_term(&svc, &data, &open, term, commit_wait).await {
                eprintln!("canopy: member {} cannot lead term {term}: {why}", svc.member);
                tokio::time::sleep(LOOK_EVERY).await;
                continue;
            }
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

async fn begin_term(svc: &Arc<ReplicatedService>, data: &SharedStore, open: &Open, term: u64, commit_wait: Duration) -> Result<(), String> {
    let raft = svc.raft().clone();
    // Everything committed before this term, applied.
    raft.ensure_linearizable().await.map_err(|e| e.to_string())?;
    let store = ReplicatedStore::new(data.clone(), raft, &tokio::runtime::Handle::current(), commit_wait);
    let open = open.clone();
    let shared: SharedStore = store.clone();
    let service = tokio::task::spawn_blocking(move || open(shared)).await.map_err(|e| e.to_string())??;
    svc.lead(Leading { term, store, service });
    eprintln!("canopy: member {} leads its group in term {term}", svc.member);
    Ok(())
}
