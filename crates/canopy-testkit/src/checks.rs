//! Assertions on a whole namespace that many tests end with.

use canopy_client::Client;

/// Asserts that fsck, run as `c`, finds no problem; `what` names the case in
/// the failure message (empty: none to name).
pub async fn assert_fsck_clean(c: &Client, what: &str) {
    let fsck = c.fsck().await.expect("fsck");
    let sep = if what.is_empty() { "" } else { ": " };
    assert!(fsck.is_clean(), "{what}{sep}fsck problems: {:#?}", fsck.problems);
}
