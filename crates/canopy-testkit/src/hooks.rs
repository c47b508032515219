//! Step hooks for transaction tests.

use canopy_client::txn::{Step, StepAction, StepHook};
use futures::future::BoxFuture;

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
