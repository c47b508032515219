//! Fences: what a non-monotonic transaction holds up on every server, and
//! their lifting.

use super::*;

impl ShardFs {
    /// Runs `body` with single-RPC operations on `paths` and below fenced off on
    /// every server (a non-monotonic transaction `txn`).
    pub(super) async fn fenced<T>(&self, txn: u64, paths: &[&NsPath], body: impl std::future::Future<Output = Res<T>>) -> Res<T> {
        self.fenced_on(0..self.n, txn, paths, body).await
    }

    /// `fenced`, on `servers` only.
    pub(super) async fn fenced_on<T>(
        &self,
        servers: impl Iterator<Item = u32>,
        txn: u64,
        paths: &[&NsPath],
        body: impl std::future::Future<Output = Res<T>>,
    ) -> Res<T> {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let servers: Vec<u32> = servers.collect();
        let fenced = self.fan_out(servers.iter().copied(), &Creds::root(), |_| Request::Fence { txn, paths: paths.clone() }).await;
        let r = match fenced.iter().find_map(|(_, r)| r.as_ref().err()) {
            Some(e) => Err(*e),
            None => body.await,
        };
        // Only where fences went up (a file rename fences two servers, not N).
        self.unfenced_after(servers.into_iter(), txn, r).await
    }

    /// Lifts transaction `txn`'s fences on `servers` once its work ended with
    /// `r`, and answers `r` (or why a fence may still stand). Work left to
    /// recovery (its outcome unknown) keeps them: its change may be half
    /// made, a request that meets a fence waits for the transaction under
    /// read locks, and recovery lifts them once it has decided.
    pub(super) async fn unfenced_after<T>(&self, servers: impl Iterator<Item = u32>, txn: u64, r: Res<T>) -> Res<T> {
        if r.as_ref().is_err_and(left_to_recovery) {
            return r;
        }
        match self.unfence_on(servers, txn).await {
            Ok(()) => r,
            // A fence may still stand: recovery lifts it.
            Err(e) => Err(after_commit("unfence", e)),
        }
    }

    /// Lifts transaction `txn`'s fences on every server. A server that refuses the
    /// connection is not running: when it starts, it fences what the transactions
    /// still open lock, and a fence of one ended since is cleared by the first
    /// operation that meets it (`under_read_locks`).
    pub(super) async fn unfence(&self, txn: u64) -> Res<()> {
        self.unfence_on(0..self.n, txn).await
    }

    /// `unfence`, on `servers` only.
    pub(super) async fn unfence_on(&self, servers: impl Iterator<Item = u32>, txn: u64) -> Res<()> {
        for (_, r) in self.fan_out(servers, &Creds::root(), |_| Request::Unfence { txn }).await {
            match r {
                Ok(_) | Err(Errno::ECONNREFUSED) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
