//! The lock service's sweep: recovers every transaction whose coordinator's lease
//! ran out, without waiting for a conflicting request to come along.
//!
//! Seed 000 has recovery triggered by "later lock acquisition on the same path";
//! alone, that leaves a dead coordinator's transaction holding its locks (and fsck
//! reporting it) until someone happens to need them, and makes that someone wait.
//! `canopy lockd` runs this loop beside the lock service, as a client of its own
//! cluster: recovery needs the servers' state, which only a client can read.

use crate::Client;
use std::time::Duration;

/// Recovers expired transactions every `every`, forever.
pub async fn sweep_forever(client: Client, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match client.repair().await {
            Ok(0) => {}
            Ok(n) => eprintln!("canopy-lockd: sweep recovered {n} transactions of dead coordinators"),
            // A server down: the transaction waits for the next sweep.
            Err(e) => eprintln!("canopy-lockd: sweep: {e}"),
        }
    }
}
