//! A coordinator that is only slow, held up between two steps of its
//! transaction past its lease, while another client recovers the transaction
//! and goes on: when it resumes, it must not act on what the recoverer now
//! decides. Before its next step it renews its lease (`ClientCore::step`),
//! finds the transaction handed over, and stops with `ESTALE`; without that
//! check it would apply its change after recovery had rolled it back.

use canopy_client::txn::Step;
use canopy_client::Client;
use canopy_proto::msg::Intent;
use canopy_proto::Errno;
use canopy_testkit::hooks::Gate;
use canopy_testkit::InProcCluster;
use std::time::Duration;

const SERVERS: u32 = 4;
const LEASE_MS: u32 = 150;

/// Holds `slow`'s transaction at `at`, lets its lease run out, runs `other`
/// (which conflicts with it, so it recovers it first), then lets `slow` go
/// on and answers what `slow` got.
async fn held_past_its_lease<T: Send + 'static>(
    cluster: &InProcCluster,
    at: Step,
    slow: impl FnOnce(Client) -> tokio::task::JoinHandle<Result<T, Errno>>,
    other: impl std::future::Future<Output = ()>,
) -> Result<T, Errno> {
    let (hook, mut reached, release) = Gate::at(at);
    let held = slow(cluster.client_with_hook(hook, LEASE_MS));
    reached.recv().await.expect("the coordinator reached the step");
    tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 * 2)).await;
    other.await;
    release.add_permits(1);
    held.await.expect("the coordinator's task")
}

/// A mkdir held after its locks were granted: another client makes the
/// directory and removes it (recovering the held transaction first, which
/// had applied nothing); the held mkdir, resumed, makes nothing.
async fn a_held_mkdir_makes_nothing_once_recovered(mode: &'static str) {
    let cluster = InProcCluster::memory_mode(mode, SERVERS);
    let c = cluster.client();
    c.mkdir("/p", 0o755).await.unwrap();
    let other = cluster.fresh_client();
    let slow = |held: Client| tokio::spawn(async move { held.mkdir("/p/d", 0o755).await.map(drop) });
    let meanwhile = async {
        other.mkdir("/p/d", 0o700).await.expect("made after recovering the held mkdir");
        other.rmdir("/p/d").await.unwrap();
    };
    let got = held_past_its_lease(&cluster, Step::Locked(Intent::Mkdir { path: "/p/d".into() }), slow, meanwhile).await;
    assert_eq!(got, Err(Errno::ESTALE), "{mode}: the held mkdir went on");
    assert_eq!(c.stat("/p/d").await.map(drop), Err(Errno::ENOENT), "{mode}: made after its transaction was recovered");
    assert!(c.fsck().await.unwrap().is_clean(), "{mode}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardfs_a_held_mkdir_makes_nothing_once_recovered() {
    a_held_mkdir_makes_nothing_once_recovered("shardfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexfs_a_held_mkdir_makes_nothing_once_recovered() {
    a_held_mkdir_makes_nothing_once_recovered("indexfs").await;
}

/// Giraffa's transaction is a directory rename: held after its locks were
/// granted while another client renames the source elsewhere, it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giraffa_a_held_rename_stops_once_recovered() {
    let cluster = InProcCluster::memory_mode("giraffa", SERVERS);
    let c = cluster.client();
    c.mkdir("/a", 0o755).await.unwrap();
    let other = cluster.fresh_client();
    let slow = |held: Client| tokio::spawn(async move { held.rename("/a", "/b").await });
    let meanwhile = async { other.rename("/a", "/c").await.expect("renamed after recovering the held rename") };
    let got = held_past_its_lease(&cluster, Step::Locked(Intent::Rename { src: "/a".into(), dst: "/b".into() }), slow, meanwhile).await;
    assert_eq!(got, Err(Errno::ESTALE), "the held rename went on");
    assert_eq!(c.stat("/b").await.map(drop), Err(Errno::ENOENT));
    assert!(c.stat("/c").await.is_ok());
    assert!(c.fsck().await.unwrap().is_clean());
}
