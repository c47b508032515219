//! Optimistic single-RPC operations (seed 000 §3.3): they take no locks; one that
//! fails in a way a replica mid-mutation could cause is retried once under read
//! locks, and the retry is counted. A coordinator is held at a transaction step by
//! a hook so the race is deterministic.

use canopy_client::txn::Step;
use canopy_proto::msg::Intent;
use canopy_client::Client;
use canopy_proto::path::NsPath;
use canopy_proto::placement::primary;
use canopy_proto::{Creds, Errno, Request};
use canopy_rpc::Daemon;
use canopy_testkit::hooks::Gate;
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

const SERVERS: u32 = 4;

/// A name in `dir` whose primary is (or is not) the primary of `dir`.
fn name_where(dir: &str, same_primary: bool) -> String {
    let d = primary(&NsPath::parse(dir).unwrap(), SERVERS);
    (0..1000)
        .map(|i| format!("{dir}/f{i}"))
        .find(|p| (primary(&NsPath::parse(p).unwrap(), SERVERS) == d) == same_primary)
        .expect("some name lands on each side")
}

fn retries(c: &Client) -> u64 {
    c.counters().snapshot().retries
}

type Held = tokio::task::JoinHandle<Result<canopy_proto::Attr, Errno>>;

/// A cluster with /d, and a mkdir of /d/x held just past its commit point (the
/// primary has it, the replicas too, fenced); release it with one permit.
async fn mkdir_held_at_commit() -> (InProcCluster, Held, Arc<Semaphore>) {
    let cluster = InProcCluster::memory(SERVERS);
    cluster.client().mkdir("/d", 0o755).await.unwrap();
    let (hook, mut reached, release) = Gate::at(Step::PrimaryDone(Intent::Mkdir { path: "/d/x".into() }));
    let coordinator = cluster.client_with_hook(hook, 30_000);
    let mkdir = tokio::spawn(async move { coordinator.mkdir("/d/x", 0o755).await });
    reached.recv().await.unwrap();
    (cluster, mkdir, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_under_a_committed_mkdir_retries_pessimistically_and_succeeds() {
    let (cluster, mkdir, release) = mkdir_held_at_commit().await;
    // The primary of the new file is a replica, which holds /d/x fenced until
    // the coordinator knows the primary's answer.
    let other = cluster.fresh_client();
    let path = name_where("/d/x", false);
    let create = tokio::spawn({
        let other = other.clone();
        async move { other.create(&path, 0o644).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!create.is_finished(), "the retry waits for the mkdir's locks");
    release.add_permits(1);
    mkdir.await.unwrap().unwrap();
    create.await.unwrap().unwrap();
    assert_eq!(retries(&other), 1);
    assert_fsck_clean(&cluster.client(), "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_of_a_new_directory_answers_without_a_retry() {
    let (cluster, mkdir, release) = mkdir_held_at_commit().await;
    // Past the commit point, a file whose primary is the directory's own sees it.
    let other = cluster.fresh_client();
    other.create(&name_where("/d/x", true), 0o644).await.unwrap();
    assert_eq!(retries(&other), 0);
    release.add_permits(1);
    mkdir.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_in_flight_makes_lookups_wait_then_fail_for_real() {
    let cluster = InProcCluster::memory(SERVERS);
    cluster.client().mkdir("/gone", 0o755).await.unwrap();
    let (hook, mut reached, release) = Gate::at(Step::ReplicasDone(Intent::Rmdir { path: "/gone".into() }));
    let coordinator = cluster.client_with_hook(hook, 30_000);
    let rmdir = tokio::spawn(async move { coordinator.rmdir("/gone").await });
    reached.recv().await.unwrap();
    // The replicas have dropped /gone, the primary not yet: a lookup below it on a
    // replica fails, retries under locks, and sees the committed result.
    let other = cluster.fresh_client();
    let path = name_where("/gone", false);
    let stat = tokio::spawn({
        let other = other.clone();
        async move { other.stat(&path).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!stat.is_finished());
    release.add_permits(1);
    rmdir.await.unwrap().unwrap();
    assert_eq!(stat.await.unwrap(), Err(Errno::ENOENT));
    assert_eq!(retries(&other), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_permission_failure_is_retried_once_and_reported() {
    let cluster = InProcCluster::memory(SERVERS);
    let root = cluster.client();
    root.mkdir("/private", 0o700).await.unwrap();
    root.create("/private/f", 0o644).await.unwrap();
    let user = cluster.fresh_client().as_user(Creds::user(1000, 1000));
    assert_eq!(user.stat("/private/f").await, Err(Errno::EACCES));
    assert_eq!(retries(&user), 1);
    // Authoritative answers are not retried.
    assert_eq!(root.stat("/private/missing").await, Err(Errno::ENOENT));
    assert_eq!(root.create("/private/f", 0o644).await.map(|_| ()), Err(Errno::EEXIST));
    assert_eq!(retries(&root), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_monotonic_change_fences_lookups_on_every_server() {
    let cluster = InProcCluster::memory(SERVERS);
    let root = cluster.client();
    root.mkdir("/d", 0o755).await.unwrap();
    let inside = name_where("/d", true);
    root.create(&inside, 0o644).await.unwrap();
    let (hook, mut reached, release) = Gate::at(Step::PrimaryDone(Intent::DirSetAttr { path: "/d".into() }));
    let coordinator = cluster.client_with_hook(hook, 30_000);
    let chown = tokio::spawn(async move { coordinator.chown("/d", Some(1000), None).await });
    reached.recv().await.unwrap();
    // The primary of /d already has the new owner, the replicas not: without the
    // fence this stat (answered by that primary) would return at once.
    let reader = cluster.fresh_client();
    let stat = tokio::spawn({
        let reader = reader.clone();
        async move { reader.stat(&inside).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!stat.is_finished(), "fenced: the stat waits for the chown");
    release.add_permits(1);
    chown.await.unwrap().unwrap();
    stat.await.unwrap().unwrap();
    assert_eq!(retries(&reader), 1);
    // After the transaction nothing is fenced.
    let after = cluster.fresh_client();
    after.stat(&name_where("/d", true)).await.unwrap();
    assert_eq!(retries(&after), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_chmod_that_meets_a_fence_still_runs_its_transaction() {
    let cluster = InProcCluster::memory(SERVERS);
    let root = cluster.client();
    root.mkdir("/p", 0o755).await.unwrap();
    root.mkdir("/p/mine", 0o755).await.unwrap();
    root.chown("/p/mine", Some(1000), Some(1000)).await.unwrap();
    let (hook, mut reached, release) = Gate::at(Step::PrimaryDone(Intent::DirSetAttr { path: "/p".into() }));
    let coordinator = cluster.client_with_hook(hook, 30_000);
    let chown = tokio::spawn(async move { coordinator.chown("/p", Some(1001), None).await });
    reached.recv().await.unwrap();
    // /p is fenced: the user's chmod of its own directory below meets EAGAIN, waits
    // under locks, and must then still run as a directory transaction.
    let user = cluster.fresh_client().as_user(Creds::user(1000, 1000));
    let chmod = tokio::spawn({
        let user = user.clone();
        async move { user.chmod("/p/mine", 0o700).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    release.add_permits(1);
    chown.await.unwrap().unwrap();
    assert_eq!(chmod.await.unwrap().map(|a| a.mode), Ok(0o700));
    assert_eq!(retries(&user), 1);
    assert_eq!(root.stat("/p/mine").await.unwrap().mode, 0o700);
    assert_fsck_clean(&root, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fence_is_cleared_by_the_retry_under_read_locks() {
    let cluster = InProcCluster::memory(SERVERS);
    cluster.client().mkdir("/d", 0o755).await.unwrap();
    // A fence whose unfence never came, and no transaction holding its locks.
    let path = name_where("/d", false);
    let server = primary(&NsPath::parse(&path).unwrap(), SERVERS);
    let fence = Request::Fence { txn: 424_242, paths: vec!["/d".into()] };
    cluster.transport().call(Daemon::Server(server), &Creds::root(), fence).await.unwrap();
    let other = cluster.fresh_client();
    other.create(&path, 0o644).await.unwrap();
    assert_eq!(retries(&other), 1, "one retry, which cleared the fence");
    other.create(&name_where("/d", false).replace("/f", "/g"), 0o644).await.unwrap();
    other.stat(&path).await.unwrap();
    assert_eq!(retries(&other), 1, "the fence is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mkdir_the_primary_refuses_is_undone_on_the_replicas_and_unfenced() {
    let cluster = InProcCluster::memory(SERVERS);
    let c = cluster.client();
    c.mkdir("/d", 0o755).await.unwrap();
    c.create("/d/f", 0o644).await.unwrap();
    // Only the primary of /d/f knows the file: the replicas apply the mkdir,
    // the primary refuses it.
    assert_eq!(c.mkdir("/d/f", 0o755).await.map(|_| ()), Err(Errno::EEXIST));
    assert_fsck_clean(&c, "").await;
    let t = cluster.transport();
    for i in 0..SERVERS {
        let probe = t.call(Daemon::Server(i), &Creds::root(), Request::DirProbe { path: "/d/f".into() }).await;
        assert_eq!(probe, Ok(canopy_proto::Reply::Probe(None)), "server {i} kept the directory");
        let below = t.call(Daemon::Server(i), &Creds::root(), Request::Stat { at: "/d/f/x".into() }).await;
        assert!(matches!(below, Err(Errno::EREMOTE | Errno::ENOENT | Errno::ENOTDIR | Errno::ENXIO)), "server {i} kept a fence: {below:?}");
    }
    assert_eq!(c.stat("/d/f/x").await.map(|_| ()), Err(Errno::ENOTDIR));
    assert_eq!(c.stat("/d/f").await.map(|a| a.kind), Ok(canopy_proto::FileKind::File));
}
