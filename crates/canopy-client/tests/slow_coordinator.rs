//! A coordinator that is only slow, held up between two steps of its
//! transaction past its lease, while another client recovers the transaction
//! and goes on: when it resumes, it must not act on what the recoverer now
//! decides. Before its next step it renews its lease (`ClientCore::step`),
//! finds it lost, and stops, leaving the transaction to recovery (`EIO`);
//! without that check it would apply its change after recovery had rolled
//! it back. Nor may it unlock a transaction whose lease only ran out, which
//! would drop the record of a change half made.

use canopy_client::txn::Step;
use canopy_client::Client;
use canopy_proto::msg::Intent;
use canopy_proto::path::NsPath;
use canopy_proto::placement::primary;
use canopy_proto::Errno;
use canopy_testkit::hooks::Gate;
use canopy_testkit::{assert_fsck_clean, InProcCluster};

const SERVERS: u32 = 4;
const LEASE_MS: u32 = 150;

/// A cluster of `mode` on a manual clock, so leases run out when the test
/// says.
fn cluster_of(mode: &'static str) -> InProcCluster {
    InProcCluster::memory_manual(mode, SERVERS)
}

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
    cluster.pass(LEASE_MS as u64 * 2).await;
    other.await;
    release.add_permits(1);
    held.await.expect("the coordinator's task")
}

/// A mkdir held after its locks were granted: another client makes the
/// directory and removes it (recovering the held transaction first, which
/// had applied nothing); the held mkdir, resumed, makes nothing.
async fn a_held_mkdir_makes_nothing_once_recovered(mode: &'static str) {
    let cluster = cluster_of(mode);
    let c = cluster.client();
    c.mkdir("/p", 0o755).await.unwrap();
    let other = cluster.fresh_client();
    let slow = |held: Client| tokio::spawn(async move { held.mkdir("/p/d", 0o755).await.map(drop) });
    let meanwhile = async {
        other.mkdir("/p/d", 0o700).await.expect("made after recovering the held mkdir");
        other.rmdir("/p/d").await.unwrap();
    };
    let got = held_past_its_lease(&cluster, Step::Locked(Intent::Mkdir { path: "/p/d".into() }), slow, meanwhile).await;
    assert_eq!(got, Err(Errno::EIO), "{mode}: the held mkdir went on");
    assert_eq!(c.stat("/p/d").await.map(drop), Err(Errno::ENOENT), "{mode}: made after its transaction was recovered");
    assert_fsck_clean(&c, mode).await;
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
    assert_eq!(got, Err(Errno::EIO), "the held rename went on");
    assert_eq!(c.stat("/b").await.map(drop), Err(Errno::ENOENT));
    assert!(c.stat("/c").await.is_ok());
    assert_fsck_clean(&c, "").await;
}

/// A ShardFS rmdir held after its replicas dropped the directory (the
/// primary, its commit point, still holds it), past its lease, with no other
/// client about: resumed, it finds the lease run out and leaves the
/// transaction to recovery rather than unlock it, which would have dropped
/// its record with the removal half made. The next conflicting request
/// recovers it, and the cluster is consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardfs_a_held_rmdir_whose_lease_ran_out_is_left_to_recovery() {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let c = cluster.client();
    c.mkdir("/p", 0o755).await.unwrap();
    c.mkdir("/p/d", 0o755).await.unwrap();
    let slow = |held: Client| tokio::spawn(async move { held.rmdir("/p/d").await });
    let got = held_past_its_lease(&cluster, Step::ReplicasDone(Intent::Rmdir { path: "/p/d".into() }), slow, async {}).await;
    assert_eq!(got, Err(Errno::EIO), "a half-made rmdir whose lease ran out reported as done or refused");
    let again = cluster.fresh_client().rmdir("/p/d").await;
    assert!(matches!(again, Ok(()) | Err(Errno::ENOENT)), "{again:?}");
    assert_eq!(c.stat("/p/d").await.map(drop), Err(Errno::ENOENT));
    assert_fsck_clean(&c, "the half-made rmdir was not recovered").await;
}

/// A ShardFS file rename between two servers held after its commit point
/// (the destination's server holds the file, the source's still too), past
/// its lease: resumed, it leaves the transaction to recovery with both names
/// still fenced, so nobody sees the file under both; a stat of the source
/// waits for that recovery, which finishes the rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardfs_a_held_file_rename_keeps_its_fences_for_recovery() {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let c = cluster.client();
    c.mkdir("/p", 0o755).await.unwrap();
    let on = |p: &str| primary(&NsPath::parse(p).unwrap(), SERVERS);
    let src = "/p/src".to_string();
    let dst = (0..1000).map(|i| format!("/p/dst{i}")).find(|d| on(d) != on(&src)).expect("a name on another server");
    c.create(&src, 0o644).await.unwrap();
    let (s, d) = (src.clone(), dst.clone());
    let slow = move |held: Client| tokio::spawn(async move { held.rename(&s, &d).await });
    let at = Step::PrimaryDone(Intent::Rename { src: src.clone(), dst: dst.clone() });
    let got = held_past_its_lease(&cluster, at, slow, async {}).await;
    assert_eq!(got, Err(Errno::EIO));
    let other = cluster.fresh_client();
    assert_eq!(other.stat(&src).await.map(drop), Err(Errno::ENOENT), "the file seen under its old name too");
    assert!(other.stat(&dst).await.is_ok());
    assert_fsck_clean(&c, "").await;
}

/// A link held after its source was shared and the new name counted: another
/// client renames the source (recovering the held transaction first); the
/// held link, resumed, makes no name and takes its count back.
async fn a_held_link_makes_no_name_once_recovered(mode: &'static str) {
    let cluster = cluster_of(mode);
    let c = cluster.client();
    c.mkdir("/d", 0o755).await.unwrap();
    c.create("/d/f", 0o644).await.unwrap();
    let other = cluster.fresh_client();
    let slow = |held: Client| tokio::spawn(async move { held.link("/d/f", "/d/g").await.map(drop) });
    let meanwhile = async { other.rename("/d/f", "/d/h").await.expect("renamed after recovering the held link") };
    let at = Step::PrimaryDone(Intent::Link { src: "/d/f".into(), dst: "/d/g".into() });
    let got = held_past_its_lease(&cluster, at, slow, meanwhile).await;
    assert_eq!(got, Err(Errno::EIO), "{mode}: the held link went on");
    assert_eq!(c.stat("/d/g").await.map(drop), Err(Errno::ENOENT), "{mode}: a name made after its transaction was recovered");
    assert_eq!(c.stat("/d/h").await.unwrap().nlink, 1, "{mode}");
    if mode == "giraffa" {
        // Its rename within one server takes no locks, so it recovered
        // nothing: the sweep finds the held link's transaction, and nothing
        // of it to undo.
        assert_eq!(cluster.fresh_client().repair().await, Ok(1));
        assert_eq!(c.stat("/d/h").await.unwrap().nlink, 1);
    }
    assert_fsck_clean(&c, mode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardfs_a_held_link_makes_no_name_once_recovered() {
    a_held_link_makes_no_name_once_recovered("shardfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexfs_a_held_link_makes_no_name_once_recovered() {
    a_held_link_makes_no_name_once_recovered("indexfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giraffa_a_held_link_makes_no_name_once_recovered() {
    a_held_link_makes_no_name_once_recovered("giraffa").await;
}
