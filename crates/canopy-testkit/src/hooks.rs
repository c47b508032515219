//! Step hooks for transaction tests.

use canopy_client::txn::{Step, StepAction, StepHook};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};

/// Kills the coordinator when it reaches one step, as a crash there would.
pub struct DieAt(pub Step);

impl StepHook for DieAt {
    fn reached(&self, step: Step) -> BoxFuture<'_, StepAction> {
        Box::pin(async move {
            if step == self.0 {
                StepAction::Die
            } else {
                StepAction::Continue
            }
        })
    }
}

/// Holds the coordinator at one step until the test releases it, so the test
/// can act (race a request, set a fault) exactly there.
pub struct Gate {
    at: Step,
    reached: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

impl Gate {
    /// A gate at `at`; the receiver hears each time a coordinator is held
    /// there, and each permit added to the semaphore lets one go on.
    pub fn at(at: Step) -> (Arc<Gate>, mpsc::UnboundedReceiver<()>, Arc<Semaphore>) {
        let (reached, rx) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        (Arc::new(Gate { at, reached, release: release.clone() }), rx, release)
    }
}

impl StepHook for Gate {
    fn reached(&self, step: Step) -> BoxFuture<'_, StepAction> {
        Box::pin(async move {
            if step == self.at {
                let _ = self.reached.send(());
                let _ = self.release.acquire().await.map(|p| p.forget());
            }
            StepAction::Continue
        })
    }
}
