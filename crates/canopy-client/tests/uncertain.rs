//! Transactions that meet a failed server. When a step's outcome is unknown (the
//! server applied it and died before answering), the coordinator must not guess:
//! it leaves the transaction to recovery, which decides from the primary's durable
//! state. When the outcome is certain (nothing was sent, or every applied step was
//! undone), the transaction ends at once. The lock service's sweep recovers a left
//! transaction without waiting for a conflicting request.
//!
//! Failures come from `FaultyTransport`: deterministic, no timing involved but the
//! lease of the dead coordinator's transaction.

use canopy_client::txn::{Step, StepAction, StepHook};
use canopy_client::Client;
use canopy_proto::path::NsPath;
use canopy_proto::placement::primary;
use canopy_proto::msg::{DirLookup, Intent};
use canopy_proto::{Creds, Errno, FileKind, Reply, Request, TimeSet};
use canopy_server::MetaServer;
use canopy_testkit::polls;
use canopy_testkit::hooks::Gate;
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

const SERVERS: u32 = 4;
const LEASE_MS: u32 = 300;

struct NoHook;

impl StepHook for NoHook {
    fn reached(&self, _: Step) -> BoxFuture<'_, StepAction> {
        Box::pin(async { StepAction::Continue })
    }
}

fn prim(path: &str) -> u32 {
    primary(&NsPath::parse(path).unwrap(), SERVERS)
}

/// A name in `dir` whose primary is not `avoid`.
fn name_not_on(dir: &str, avoid: u32) -> String {
    (0..).map(|i| format!("{dir}/f{i}")).find(|p| prim(p) != avoid).unwrap()
}

/// What each server but `skip` holds for directory `path`.
fn replicas(cluster: &InProcCluster, path: &str, skip: u32) -> Vec<Option<DirLookup>> {
    let probe = |s: &Arc<MetaServer>| match s.handle(&Creds::root(), Request::DirProbe { path: path.into() }) {
        Ok(Reply::Probe(p)) => p,
        other => panic!("probe: {other:?}"),
    };
    cluster.servers.iter().filter(|s| s.index() != skip).map(probe).collect()
}

/// A coordinator (short lease) held where it has locked, checked and fenced a
/// rename of `src` to `dst` and applied nothing yet: the test sets a fault,
/// then lets it go on.
fn held_before_rename_applies(cluster: &InProcCluster, src: &str, dst: &str) -> (Client, mpsc::UnboundedReceiver<()>, Arc<Semaphore>) {
    let (gate, at, release) = Gate::at(Step::Locked(Intent::Rename { src: src.into(), dst: dst.into() }));
    (cluster.client_with_hook(gate, LEASE_MS), at, release)
}

/// `/s/x` holding `files` files: a directory rename's subject.
async fn dir_with_files(c: &Client, files: usize) {
    c.mkdir("/s", 0o755).await.unwrap();
    c.mkdir("/s/x", 0o755).await.unwrap();
    for i in 0..files {
        c.create(&format!("/s/x/f{i}"), 0o644).await.unwrap();
    }
}

/// The names below `dir`, sorted.
async fn names(c: &Client, dir: &str) -> Vec<String> {
    let mut n: Vec<String> = c.readdir(dir).await.unwrap().into_iter().map(|e| e.name).collect();
    n.sort();
    n
}

/// A coordinator with a short lease, so a transaction left for recovery is soon
/// recoverable.
fn coordinator(cluster: &InProcCluster) -> Client {
    cluster.client_with_hook(Arc::new(NoHook), LEASE_MS)
}

/// Waits until the lock service holds no transaction and fsck is clean.
async fn settled(cluster: &InProcCluster) {
    let c = cluster.fresh_client();
    polls::until_async("recovered and fsck clean", || async {
        let fsck = c.fsck().await;
        cluster.lock.transactions().is_empty() && fsck.is_ok_and(|f| f.is_clean() && f.in_flight.is_empty())
    })
    .await;
}

/// Brings server `p` back and lets the lock service's sweep recover what was
/// left, with no other request to trigger it.
async fn revive_and_sweep(cluster: &InProcCluster, p: u32) {
    cluster.faults().revive(p);
    let sweeper = cluster.start_sweeper(Duration::from_millis(100));
    settled(cluster).await;
    sweeper.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_whose_primary_died_after_commit_is_rolled_forward() {
    let cluster = InProcCluster::memory(SERVERS);
    let c = coordinator(&cluster);
    c.mkdir("/a", 0o777).await.unwrap();
    c.mkdir("/a/x", 0o777).await.unwrap();
    let p = prim("/a/x");
    cluster.faults().die_after(p, "Rmdir");
    assert_eq!(c.rmdir("/a/x").await, Err(Errno::EIO));
    assert_eq!(cluster.lock.transactions().len(), 1, "left for recovery, not unlocked");
    // The replicas were not rolled back, so no server lets a file into the removed
    // directory while its primary is down (the client cannot confirm the miss
    // with the primary down, so it reports that).
    assert_eq!(replicas(&cluster, "/a/x", p), vec![None; 3]);
    let f = name_not_on("/a/x", p);
    assert_eq!(c.create(&f, 0o644).await.map(|_| ()), Err(Errno::ECONNREFUSED));
    revive_and_sweep(&cluster, p).await;
    let fresh = cluster.fresh_client();
    assert_eq!(fresh.stat("/a/x").await.map(|_| ()), Err(Errno::ENOENT));
    assert!(fresh.readdir("/a").await.unwrap().is_empty());
    fresh.mkdir("/a/x", 0o755).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chmod_whose_primary_died_after_commit_grants_nothing_it_removed() {
    let cluster = InProcCluster::memory(SERVERS);
    let c = coordinator(&cluster);
    c.mkdir("/g", 0o777).await.unwrap();
    let p = prim("/g");
    cluster.faults().die_after(p, "DirSetAttr");
    assert_eq!(c.chmod("/g", 0o755).await.map(|_| ()), Err(Errno::EIO));
    let bob = c.as_user(Creds::user(2000, 2000));
    assert!(replicas(&cluster, "/g", p).iter().all(|l| l.as_ref().unwrap().mode & 0o777 == 0o755), "no replica rolled back to 0777");
    let f = name_not_on("/g", p);
    assert!(bob.create(&f, 0o644).await.is_err());
    revive_and_sweep(&cluster, p).await;
    assert_eq!(cluster.fresh_client().stat("/g").await.unwrap().mode & 0o777, 0o755);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_sent_nothing_or_undid_everything_is_unlocked() {
    let cluster = InProcCluster::memory(SERVERS);
    let c = coordinator(&cluster);
    c.mkdir("/a", 0o755).await.unwrap();
    c.mkdir("/a/x", 0o755).await.unwrap();
    // A replica is down: the others apply the rmdir, then it is undone on them.
    let down = (0..SERVERS).find(|i| *i != prim("/a/x")).unwrap();
    cluster.faults().down(down);
    assert_eq!(c.rmdir("/a/x").await, Err(Errno::ECONNREFUSED));
    assert!(cluster.lock.transactions().is_empty(), "certain outcome: unlocked");
    // The primary is down: a mkdir sends nothing else.
    let d = name_not_on("/a", u32::MAX);
    cluster.faults().revive(down);
    cluster.faults().down(prim(&d));
    assert_eq!(c.mkdir(&d, 0o755).await.map(|_| ()), Err(Errno::ECONNREFUSED));
    assert!(cluster.lock.transactions().is_empty());
    cluster.faults().revive(prim(&d));
    let fsck = c.fsck().await.unwrap();
    assert!(fsck.is_clean() && fsck.in_flight.is_empty(), "{fsck:?}");
    assert_eq!(c.stat("/a/x").await.unwrap().kind, FileKind::Dir);
    c.rmdir("/a/x").await.unwrap();
    c.mkdir(&d, 0o755).await.unwrap();
}

/// An rmdir of a file: the replicas know no such directory, and only the
/// primary can tell a file (ENOTDIR) from nothing (ENOENT). A primary that does
/// not answer is reported as that, never as ENOENT; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmdir_whose_primary_does_not_answer_is_not_called_absent() {
    let cluster = InProcCluster::memory(SERVERS);
    let c = coordinator(&cluster);
    c.mkdir("/a", 0o755).await.unwrap();
    c.create("/a/f", 0o644).await.unwrap();
    cluster.faults().refuse_next(prim("/a/f"), "Stat", Errno::ECONNREFUSED);
    assert_eq!(c.rmdir("/a/f").await, Err(Errno::ECONNREFUSED));
    assert!(cluster.lock.transactions().is_empty(), "certain outcome: unlocked");
    assert_eq!(c.rmdir("/a/f").await, Err(Errno::ENOTDIR));
    assert_eq!(c.rmdir("/a/g").await, Err(Errno::ENOENT));
    assert_eq!(c.stat("/a/f").await.unwrap().kind, FileKind::File);
}

/// The destination's primary, the commit point, refuses a directory rename's
/// apply after every check passed (it did not apply it): the servers that
/// applied it are put back at once, the error is the commit point's, and the
/// lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_rename_its_commit_point_refuses_is_put_back() {
    let cluster = InProcCluster::memory(SERVERS);
    dir_with_files(&cluster.fresh_client(), 5).await;
    let (c, mut at, release) = held_before_rename_applies(&cluster, "/s/x", "/s/y");
    let renaming = tokio::spawn(async move { c.rename("/s/x", "/s/y").await });
    at.recv().await.unwrap();
    cluster.faults().refuse_next(prim("/s/y"), "RenameDir", Errno::ENOSPC);
    release.add_permits(1);
    assert_eq!(renaming.await.unwrap(), Err(Errno::ENOSPC));
    assert!(cluster.lock.transactions().is_empty(), "certain outcome: unlocked");
    let fresh = cluster.fresh_client();
    assert_eq!(fresh.stat("/s/y").await.map(|_| ()), Err(Errno::ENOENT));
    assert_eq!(names(&fresh, "/s").await, ["x"]);
    assert_eq!(names(&fresh, "/s/x").await, ["f0", "f1", "f2", "f3", "f4"]);
    assert_eq!(replicas(&cluster, "/s/y", u32::MAX), vec![None; SERVERS as usize], "no server kept the new name");
    settled(&cluster).await;
    fresh.rename("/s/x", "/s/y").await.unwrap();
    assert_eq!(names(&fresh, "/s/y").await.len(), 5);
}

/// The commit point applies a directory rename and dies before answering: the
/// coordinator cannot know whether it committed, so it leaves the transaction
/// to recovery, which finds it committed on the primary and rolls it forward
/// (the files below move to their new primaries). The source's primary's
/// apply is lost too, so recovery applies it there, and the directory's
/// times, still on the source's primary, reach the new one unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_rename_whose_commit_points_answer_is_lost_is_rolled_forward() {
    let cluster = InProcCluster::memory(SERVERS);
    let setup = cluster.fresh_client();
    dir_with_files(&setup, 5).await;
    setup.utimens("/s/x", Some(TimeSet::At(4_000)), Some(TimeSet::At(4_000))).await.unwrap();
    // A destination whose primary is not the source's.
    let dst = (0..).map(|i| format!("/s/y{i}")).find(|d| prim(d) != prim("/s/x")).unwrap();
    let (c, mut at, release) = held_before_rename_applies(&cluster, "/s/x", &dst);
    let to = dst.clone();
    let renaming = tokio::spawn(async move { c.rename("/s/x", &to).await });
    at.recv().await.unwrap();
    let p = prim(&dst);
    cluster.faults().die_after(p, "RenameDir");
    cluster.faults().refuse_next(prim("/s/x"), "RenameDir", Errno::ETIMEDOUT);
    release.add_permits(1);
    assert_eq!(renaming.await.unwrap(), Err(Errno::EIO));
    assert_eq!(cluster.lock.transactions().len(), 1, "left for recovery, not unlocked");
    revive_and_sweep(&cluster, p).await;
    let fresh = cluster.fresh_client();
    assert_eq!(fresh.stat("/s/x").await.map(|_| ()), Err(Errno::ENOENT));
    assert_eq!(names(&fresh, "/s").await, [&dst["/s/".len()..]]);
    assert_eq!(names(&fresh, &dst).await, ["f0", "f1", "f2", "f3", "f4"]);
    for i in 0..5 {
        assert_eq!(fresh.stat(&format!("{dst}/f{i}")).await.unwrap().kind, FileKind::File);
    }
    assert_eq!(fresh.stat(&dst).await.unwrap().mtime, 4_000, "the directory's times");
}

/// A fence outlives a restart of its server. A mkdir's commit point does not
/// answer (nothing applied there), so the replicas keep the new directory,
/// fenced, and the transaction is left to recovery. Every server then restarts:
/// a file made below the directory must not land on a replica before recovery
/// decides, since recovery rolls the directory back (its primary never had it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_outlives_a_restart_of_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let p = prim("/a/x");
    {
        let cluster = InProcCluster::rocks(SERVERS, dir.path());
        let c = coordinator(&cluster);
        c.mkdir("/a", 0o777).await.unwrap();
        cluster.faults().refuse_next(p, "Mkdir", Errno::ETIMEDOUT);
        assert_eq!(c.mkdir("/a/x", 0o777).await.map(|_| ()), Err(Errno::EIO));
        assert_eq!(cluster.lock.transactions().len(), 1, "left for recovery, not unlocked");
        drop(c);
        cluster.crash();
    }
    let cluster = InProcCluster::rocks(SERVERS, dir.path());
    assert!(replicas(&cluster, "/a/x", p).iter().all(Option::is_some), "the replicas applied the mkdir");
    let fresh = cluster.fresh_client();
    let f = name_not_on("/a/x", p);
    assert_eq!(fresh.create(&f, 0o644).await.map(|_| ()), Err(Errno::ENOENT), "a file made below a directory recovery removes");
    settled(&cluster).await;
    assert_eq!(fresh.stat("/a/x").await.map(|_| ()), Err(Errno::ENOENT));
    assert!(names(&fresh, "/a").await.is_empty());
    let files: u64 = fresh.server_stats().await.unwrap().iter().map(|s| s.files).sum();
    assert_eq!(files, 0, "no file left behind");
}

/// A link whose name was inserted but whose answer was lost: the coordinator
/// cannot know whether the name exists, so it answers `EIO` and leaves the
/// count as if it does. Taking it back would leave the inode counting one
/// name too few, freed when the other name goes while this one still
/// refers to it. Every server is tried as the one that dies.
async fn a_link_whose_insert_answer_is_lost_keeps_its_count(mode: &'static str) {
    for server in 0..SERVERS {
        let cluster = InProcCluster::memory_mode(mode, SERVERS);
        let c = coordinator(&cluster);
        c.mkdir("/d", 0o755).await.unwrap();
        c.create("/d/f", 0o644).await.unwrap();
        // Giraffa sends the insert with the parent's proof, inside `GfVouched`.
        cluster.faults().die_after(server, if mode == "giraffa" { "GfVouched" } else { "LinkInsert" });
        match c.link("/d/f", "/d/g").await {
            Ok(_) => continue,
            Err(e) => assert_eq!(e, Errno::EIO, "{mode}"),
        }
        revive_and_sweep(&cluster, server).await;
        let fresh = cluster.fresh_client();
        assert_eq!(fresh.stat("/d/g").await.unwrap().nlink, 2, "{mode}: the name made is counted");
        fresh.unlink("/d/f").await.unwrap();
        assert_eq!(fresh.stat("/d/g").await.unwrap().nlink, 1, "{mode}: the inode outlives the other name");
        settled(&cluster).await;
        return;
    }
    panic!("{mode}: no server took the insert");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardfs_a_link_whose_insert_answer_is_lost_keeps_its_count() {
    a_link_whose_insert_answer_is_lost_keeps_its_count("shardfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexfs_a_link_whose_insert_answer_is_lost_keeps_its_count() {
    a_link_whose_insert_answer_is_lost_keeps_its_count("indexfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giraffa_a_link_whose_insert_answer_is_lost_keeps_its_count() {
    a_link_whose_insert_answer_is_lost_keeps_its_count("giraffa").await;
}

/// A link whose insert was never sent (Giraffa: fetching the proof of the
/// destination's directory timed out) takes its count back: nothing can
/// have been made, so its transaction ends at once, though its errno alone
/// would read as an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_insert_was_never_sent_takes_its_count_back() {
    for server in 0..SERVERS {
        let cluster = InProcCluster::memory_mode("giraffa", SERVERS);
        let c = cluster.client();
        c.mkdir("/d", 0o755).await.unwrap();
        c.create("/d/f", 0o644).await.unwrap();
        cluster.faults().refuse_next(server, "GfProof", Errno::ETIMEDOUT);
        match c.link("/d/f", "/d/g").await {
            Ok(_) => continue,
            Err(e) => assert_eq!(e, Errno::ETIMEDOUT),
        }
        assert_eq!(c.stat("/d/g").await.map(drop), Err(Errno::ENOENT));
        assert_eq!(c.stat("/d/f").await.unwrap().nlink, 1);
        settled(&cluster).await;
        return;
    }
    panic!("no server was asked for the proof");
}

/// A link whose insert was refused and whose count could then not be taken
/// back (the inode's home down) is left to recovery (`EIO`), which takes the
/// count back once the home is up. Answering the insert's errno and
/// unlocking would leave the count one too high for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_cannot_take_its_count_back_leaves_it_to_recovery() {
    let cluster = InProcCluster::memory(SERVERS);
    let setup = cluster.client();
    setup.mkdir("/d", 0o755).await.unwrap();
    setup.create("/d/f", 0o644).await.unwrap();
    let home = prim("/d/f");
    let dst = (0..).map(|i| format!("/d/g{i}")).find(|p| prim(p) != home).unwrap();
    let (gate, mut at, release) = Gate::at(Step::PrimaryDone(Intent::Link { src: "/d/f".into(), dst: dst.clone() }));
    let c = cluster.client_with_hook(gate, LEASE_MS);
    let to = dst.clone();
    let linking = tokio::spawn(async move { c.link("/d/f", &to).await.map(drop) });
    at.recv().await.unwrap();
    cluster.faults().refuse_next(prim(&dst), "LinkInsert", Errno::EACCES);
    cluster.faults().down(home);
    release.add_permits(1);
    assert_eq!(linking.await.unwrap(), Err(Errno::EIO));
    revive_and_sweep(&cluster, home).await;
    assert_eq!(setup.stat("/d/f").await.map(|a| a.nlink), Ok(1));
    assert_eq!(setup.stat(&dst).await.map(drop), Err(Errno::ENOENT));
}

/// A stale fence over a file (its unfence lost with a connection, or put back
/// by a restarted server for the very transaction that meets it) does not
/// fail a rename or a link with `EAGAIN`: under their locks no transaction
/// that fenced it can still run, so they lift it, as a retried single
/// operation does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_or_a_link_lifts_a_stale_fence_over_its_names() {
    let cluster = InProcCluster::memory(SERVERS);
    let c = cluster.client();
    let stale_fence = |path: &str| {
        let fence = Request::Fence { txn: 999, paths: vec![path.into()] };
        cluster.servers[prim(path) as usize].handle(&Creds::root(), fence).unwrap();
    };
    c.mkdir("/d", 0o755).await.unwrap();
    c.create("/d/f", 0o644).await.unwrap();
    stale_fence("/d/f");
    c.rename("/d/f", "/d/g").await.unwrap();
    assert_eq!(c.stat("/d/g").await.unwrap().kind, FileKind::File);
    assert_eq!(c.stat("/d/f").await.map(drop), Err(Errno::ENOENT));
    stale_fence("/d/g");
    stale_fence("/d/h");
    assert_eq!(c.link("/d/g", "/d/h").await.unwrap().nlink, 2);
    assert_fsck_clean(&c, "").await;
}

/// Runs `op` (a coordinator's transaction) with the next request named
/// `step` to `server` held on its way, until the coordinator's lease has run
/// out, the sweep has recovered the transaction and `meanwhile` has run; then
/// lets the step arrive, and answers what `op` got.
async fn with_a_step_arriving_after_recovery<F>(
    cluster: &InProcCluster,
    server: u32,
    step: &'static str,
    op: F,
    meanwhile: impl std::future::Future<Output = ()>,
) -> Result<(), Errno>
where
    F: std::future::Future<Output = Result<(), Errno>> + Send + 'static,
{
    let (mut held, release) = cluster.faults().hold_next(server, step);
    let running = tokio::spawn(op);
    tokio::time::timeout(Duration::from_secs(20), held.recv()).await.expect("the step was never sent").unwrap();
    let sweeper = cluster.start_sweeper(Duration::from_millis(100));
    settled(cluster).await;
    sweeper.abort();
    meanwhile.await;
    release.add_permits(1);
    running.await.unwrap()
}

/// An rmdir's step to its primary (the commit point), sent in time, arrives
/// only after recovery has read the primary (which still had the directory)
/// and put the replicas back: it is refused, since recovery revoked the
/// transaction first, so the directory stays on every server, and the
/// coordinator leaves the outcome to recovery rather than report it done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmdir_step_that_arrives_after_recovery_changes_nothing() {
    let cluster = InProcCluster::memory(SERVERS);
    let setup = cluster.fresh_client();
    setup.mkdir("/p", 0o755).await.unwrap();
    setup.mkdir("/p/d", 0o755).await.unwrap();
    let c = coordinator(&cluster);
    let got = with_a_step_arriving_after_recovery(&cluster, prim("/p/d"), "Rmdir", async move { c.rmdir("/p/d").await }, async {}).await;
    assert_eq!(got, Err(Errno::EIO), "a step recovery had taken over was reported done");
    assert!(replicas(&cluster, "/p/d", u32::MAX).iter().all(Option::is_some), "a server dropped /p/d after recovery kept it");
    assert_fsck_clean(&cluster.fresh_client(), "").await;
    setup.rmdir("/p/d").await.unwrap();
}

/// A mkdir's step to its primary arrives only after recovery found the
/// directory missing there and removed it from the replicas: it is refused,
/// so no server makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mkdir_step_that_arrives_after_recovery_makes_nothing() {
    let cluster = InProcCluster::memory(SERVERS);
    cluster.fresh_client().mkdir("/p", 0o755).await.unwrap();
    let c = coordinator(&cluster);
    let got = with_a_step_arriving_after_recovery(&cluster, prim("/p/d"), "Mkdir", async move { c.mkdir("/p/d", 0o755).await.map(drop) }, async {}).await;
    assert_eq!(got, Err(Errno::EIO), "a step recovery had taken over was reported done");
    assert_eq!(replicas(&cluster, "/p/d", u32::MAX), vec![None; SERVERS as usize], "a server made /p/d after recovery rolled it back");
    let fresh = cluster.fresh_client();
    assert_fsck_clean(&fresh, "").await;
    fresh.mkdir("/p/d", 0o755).await.unwrap();
}

/// A coordinator's own rollback is a step too: a mkdir its primary refused
/// (for certain) is put back on the replicas, and one of those undos arrives
/// only after recovery has removed the directory and another client has made
/// it again, with another id. It is refused, so the new directory stays on
/// every server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_that_arrives_after_recovery_removes_nothing() {
    let cluster = InProcCluster::memory(SERVERS);
    let other = cluster.fresh_client();
    other.mkdir("/p", 0o755).await.unwrap();
    let replica = (0..SERVERS).find(|i| *i != prim("/p/d")).unwrap();
    cluster.faults().refuse_next(prim("/p/d"), "Mkdir", Errno::ENOSPC);
    let c = coordinator(&cluster);
    let again = async {
        other.mkdir("/p/d", 0o700).await.expect("made again once recovered");
    };
    let got = with_a_step_arriving_after_recovery(&cluster, replica, "DirSync", async move { c.mkdir("/p/d", 0o755).await.map(drop) }, again).await;
    assert_eq!(got, Err(Errno::EIO), "a rollback recovery had taken over was reported refused");
    let made = replicas(&cluster, "/p/d", u32::MAX);
    assert!(made.iter().all(|l| l.as_ref().is_some_and(|l| l.mode & 0o777 == 0o700)), "{made:?}");
    assert_fsck_clean(&cluster.fresh_client(), "").await;
}

/// A file rename between two servers whose insert at the destination arrives
/// only after recovery found the file under its old name alone: it is
/// refused, so the file does not end under both names, and the coordinator
/// leaves the outcome to recovery (`EIO`, not the server's `ESTALE`, which
/// the kernel would retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renames_insert_that_arrives_after_recovery_makes_no_second_name() {
    let cluster = InProcCluster::memory(SERVERS);
    let setup = cluster.fresh_client();
    setup.mkdir("/d", 0o755).await.unwrap();
    setup.create("/d/a", 0o644).await.unwrap();
    let dst = name_not_on("/d", prim("/d/a"));
    let c = coordinator(&cluster);
    let to = dst.clone();
    let got = with_a_step_arriving_after_recovery(&cluster, prim(&dst), "RenameIn", async move { c.rename("/d/a", &to).await }, async {}).await;
    assert_eq!(got, Err(Errno::EIO));
    let fresh = cluster.fresh_client();
    assert!(fresh.stat("/d/a").await.is_ok(), "the file left its old name");
    assert_eq!(fresh.stat(&dst).await.map(drop), Err(Errno::ENOENT), "the file gained a second name after recovery");
    assert_fsck_clean(&fresh, "").await;
}

/// A directory rename's migration step (`Adopt`, a moved file's record at
/// its new primary) arrives only after recovery finished the migration and a
/// chmod changed the file there: it is refused, so the chmod stays and the
/// coordinator leaves the outcome to recovery. Let through, the late copy
/// would put the file's old record back (its old mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_step_that_arrives_after_recovery_overwrites_nothing() {
    let cluster = InProcCluster::memory(SERVERS);
    let setup = cluster.fresh_client();
    setup.mkdir("/d", 0o755).await.unwrap();
    // One file below, whose primary changes with the rename, to a server
    // that is not the new directory's own: the only adoption there is it.
    let (dst, file) = (0..)
        .map(|i| format!("/e{i}"))
        .find_map(|e| {
            let (old, new) = ("/d/f".to_string(), format!("{e}/f"));
            (prim(&old) != prim(&new) && prim(&e) != prim(&new)).then_some((e, new))
        })
        .unwrap();
    setup.create("/d/f", 0o644).await.unwrap();
    let c = coordinator(&cluster);
    let to = dst.clone();
    let chmod = {
        let file = file.clone();
        let fresh = cluster.fresh_client();
        async move {
            fresh.chmod(&file, 0o600).await.unwrap();
        }
    };
    let got = with_a_step_arriving_after_recovery(&cluster, prim(&file), "Adopt", async move { c.rename("/d", &to).await }, chmod).await;
    assert_eq!(got, Err(Errno::EIO));
    let fresh = cluster.fresh_client();
    assert_eq!(fresh.stat(&file).await.map(|a| a.mode & 0o777), Ok(0o600), "the late copy put the old record back");
    assert_eq!(fresh.stat("/d").await.map(drop), Err(Errno::ENOENT));
    assert_fsck_clean(&fresh, "").await;
}
