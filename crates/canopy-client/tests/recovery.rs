//! Fault injection: a coordinator is killed at each step of each kind of directory
//! transaction (before and after the commit point, between the replicas and the
//! primary), then another client recovers it. The namespace must then equal either
//! the tree before the operation or the tree after it (as a cluster without faults
//! makes it), exactly the one the commit point says, and fsck must be clean.

use canopy_client::txn::Step;
use canopy_client::Client;
use canopy_proto::msg::Intent;
use canopy_proto::path::NsPath;
use canopy_proto::placement::primary;
use canopy_proto::{Errno, FileKind, TimeSet};
use canopy_testkit::tree::{tree, Tree};
use canopy_testkit::hooks::{DieAt, Gate};
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use std::sync::Arc;
use std::time::Duration;

const SERVERS: u32 = 4;
/// The dying coordinator's lease: short, so the test need not wait long.
const LEASE_MS: u32 = 150;

/// The starting namespace: enough files below /a that renaming it migrates some.
async fn populate(c: &Client) {
    c.mkdir("/a", 0o755).await.unwrap();
    c.mkdir("/a/sub", 0o755).await.unwrap();
    c.mkdir("/a/sub/deeper", 0o755).await.unwrap();
    c.mkdir("/b", 0o755).await.unwrap();
    c.mkdir("/b/victim", 0o755).await.unwrap();
    for i in 0..12 {
        c.create(&format!("/a/f{i}"), 0o644).await.unwrap();
        c.create(&format!("/a/sub/g{i}"), 0o644).await.unwrap();
    }
    c.mkdir("/empty", 0o755).await.unwrap();
    for (dir, mtime) in RENAMED_DIR_MTIMES {
        c.utimens(dir, Some(TimeSet::At(mtime)), Some(TimeSet::At(mtime))).await.unwrap();
    }
}

/// The directories the renames move, with the times `populate` gives them:
/// after recovery, whichever name a directory has, it has these times.
const RENAMED_DIR_MTIMES: [(&str, i64); 3] = [("/a", 1_000), ("/a/sub", 2_000), ("/empty", 3_000)];

#[derive(Clone, Copy, Debug)]
enum Op {
    Mkdir,
    Rmdir,
    /// Removes permission: Procedure 2.
    ChmodDir,
    /// Adds permission: Procedure 1.
    ChmodDirAdd,
    /// Non-monotonic: fenced.
    ChownDir,
    RenameDir,
    RenameDirOverEmpty,
    /// Nothing below it: its times travel with the apply step (the
    /// destination's primary lifts its fence as it applies); to a name on
    /// another primary, so the times move.
    RenameEmptyDir,
    RenameFile,
}

impl Op {
    fn intent(self) -> Intent {
        let (s, d) = match self {
            Op::Mkdir => return Intent::Mkdir { path: "/a/new".into() },
            Op::Rmdir => return Intent::Rmdir { path: "/empty".into() },
            Op::ChmodDir | Op::ChmodDirAdd | Op::ChownDir => return Intent::DirSetAttr { path: "/a/sub".into() },
            Op::RenameDir => ("/a", "/moved"),
            Op::RenameDirOverEmpty => ("/a/sub", "/b/victim"),
            Op::RenameEmptyDir => return Intent::Rename { src: "/empty".into(), dst: other_primary("/empty", "/b/moved") },
            Op::RenameFile => return Intent::Rename { src: "/a/f3".into(), dst: cross_server_dst() },
        };
        Intent::Rename { src: s.into(), dst: d.into() }
    }

    async fn run(self, c: &Client) -> Result<(), Errno> {
        match self {
            Op::Mkdir => c.mkdir("/a/new", 0o700).await.map(|_| ()),
            Op::Rmdir => c.rmdir("/empty").await,
            Op::ChmodDir => c.chmod("/a/sub", 0o711).await.map(|_| ()),
            Op::ChmodDirAdd => c.chmod("/a/sub", 0o777).await.map(|_| ()),
            Op::ChownDir => c.chown("/a/sub", Some(1000), Some(1000)).await.map(|_| ()),
            Op::RenameDir => c.rename("/a", "/moved").await,
            Op::RenameDirOverEmpty => c.rename("/a/sub", "/b/victim").await,
            Op::RenameEmptyDir => c.rename("/empty", &other_primary("/empty", "/b/moved")).await,
            Op::RenameFile => c.rename("/a/f3", &cross_server_dst()).await,
        }
    }
}

/// A new name for /a/f3 on another server, so the rename takes three steps.
fn cross_server_dst() -> String {
    other_primary("/a/f3", "/b/renamed")
}

/// The first of `stem`0, `stem`1, ... whose primary is not `src`'s.
fn other_primary(src: &str, stem: &str) -> String {
    let src = primary(&NsPath::parse(src).unwrap(), SERVERS);
    (0..100)
        .map(|i| format!("{stem}{i}"))
        .find(|d| primary(&NsPath::parse(d).unwrap(), SERVERS) != src)
        .expect("some name lands elsewhere")
}

/// Whether dying at `step` leaves the operation committed (true) or not.
fn committed_after(op: Op, step: &Step) -> bool {
    match (op, step) {
        (_, Step::Locked(_)) => false,
        // Procedure 2: the replicas go first; the primary is the commit point.
        (Op::Rmdir | Op::ChmodDir, Step::ReplicasDone(_) | Step::ReplicaDone(..)) => false,
        // mkdir: all at once, the replicas (fenced) before the primary under a hook.
        (Op::Mkdir, Step::ReplicaDone(..)) => false,
        // A directory rename: every server but the destination's primary
        // applies before the commit point (the source's primary parking the
        // times it drops, which an undo takes back).
        (Op::RenameDir | Op::RenameDirOverEmpty | Op::RenameEmptyDir, Step::ReplicaDone(..)) => false,
        _ => true,
    }
}

/// Every step of `op`'s transaction, including between two replicas.
fn steps(op: Op) -> Vec<Step> {
    let i = op.intent();
    let mut v = vec![Step::Locked(i.clone()), Step::PrimaryDone(i.clone())];
    if matches!(op, Op::RenameDir | Op::RenameDirOverEmpty | Op::RenameEmptyDir) {
        // Each server's step before the commit point, one at a time.
        let (_, prim) = replica_and_primary(&i);
        v.extend((0..SERVERS).filter(|s| *s != prim).map(|s| Step::ReplicaDone(i.clone(), s)));
        v.push(Step::ReplicasDone(i));
    } else if !matches!(op, Op::RenameFile) {
        let (first_replica, prim) = replica_and_primary(&i);
        assert_ne!(first_replica, prim);
        v.push(Step::ReplicaDone(i.clone(), first_replica));
        v.push(Step::ReplicasDone(i));
    }
    v
}

/// The first non-primary server of a directory transaction, and its primary.
fn replica_and_primary(i: &Intent) -> (u32, u32) {
    let path = match i {
        Intent::Mkdir { path } | Intent::Rmdir { path } | Intent::DirSetAttr { path } => path,
        Intent::Rename { dst, .. } => dst,
        other => panic!("{other:?} has no replicas"),
    };
    let prim = primary(&NsPath::parse(path).unwrap(), SERVERS);
    ((0..SERVERS).find(|s| *s != prim).unwrap(), prim)
}

async fn expected_trees(op: Op) -> (Tree, Tree) {
    let clean = InProcCluster::memory_manual("shardfs", SERVERS);
    let c = clean.client();
    populate(&c).await;
    let before = tree(&c).await;
    op.run(&c).await.unwrap();
    (before, tree(&c).await)
}

/// A populated cluster where `op`'s coordinator died at `step` and its lease
/// has run out; a root client of it.
async fn died_at(op: Op, step: &Step) -> (InProcCluster, Client) {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    populate(&root).await;
    let dying = cluster.client_with_hook(Arc::new(DieAt(step.clone())), LEASE_MS);
    assert_eq!(op.run(&dying).await, Err(Errno::ENOTCONN), "{op:?} dies at {step:?}");
    cluster.pass(LEASE_MS as u64 + 100).await;
    (cluster, root)
}

async fn die_and_recover(op: Op, step: Step, before: &Tree, after: &Tree) {
    let (cluster, root) = died_at(op, &step).await;
    let recovering = cluster.fresh_client();
    assert_eq!(recovering.repair().await, Ok(1), "{op:?} at {step:?}");
    let want = if committed_after(op, &step) { after } else { before };
    assert_eq!(&tree(&root).await, want, "{op:?} died at {step:?}");
    assert_fsck_clean(&root, &format!("{op:?} died at {step:?}")).await;
    if let Intent::Rename { src, dst } = op.intent() {
        // A directory's times are kept on one server: whichever name it has
        // now, its primary has them, as they were (a server keeping none
        // answers zero; one keeping a stale copy, other times).
        if let Some((_, mtime)) = RENAMED_DIR_MTIMES.iter().find(|(d, _)| *d == src) {
            let a = root.stat(&src).await.or(root.stat(&dst).await).unwrap();
            assert_eq!(a.mtime, *mtime, "{op:?} died at {step:?}: the directory's times were lost or changed");
        }
    }
    // No fence is left behind: a walk that stats every object needs no retry.
    let reader = cluster.fresh_client();
    tree(&reader).await;
    assert_eq!(reader.counters().snapshot().retries, 0, "{op:?} died at {step:?}: a fence was left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_every_transaction_recovers_to_all_or_nothing() {
    for op in [Op::Mkdir, Op::Rmdir, Op::ChmodDir, Op::ChmodDirAdd, Op::ChownDir, Op::RenameDir, Op::RenameDirOverEmpty, Op::RenameEmptyDir, Op::RenameFile] {
        let (before, after) = expected_trees(op).await;
        assert_ne!(before, after, "{op:?} changes something");
        for step in steps(op) {
            die_and_recover(op, step, &before, &after).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_conflicting_operation_triggers_recovery() {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    populate(&root).await;
    let intent = Intent::Mkdir { path: "/a/new".into() };
    let (replica, _) = replica_and_primary(&intent);
    let dying = cluster.client_with_hook(Arc::new(DieAt(Step::ReplicaDone(intent, replica))), LEASE_MS);
    assert_eq!(dying.mkdir("/a/new", 0o755).await.map(|_| ()), Err(Errno::ENOTCONN));
    // Half applied: one replica has it (fenced), not the primary, and the lock
    // service holds the record.
    assert!(!root.fsck().await.unwrap().is_clean());
    cluster.pass(LEASE_MS as u64 + 100).await;
    let next = cluster.fresh_client();
    assert_eq!(next.mkdir("/a/new", 0o700).await.map(|a| a.mode & 0o777), Ok(0o700), "rolled back, then made anew");
    assert_eq!(next.counters().snapshot().recoveries, 1);
    next.create("/a/new/f", 0o644).await.unwrap();
    assert_fsck_clean(&root, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recoverer_that_dies_is_recovered_in_turn() {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    populate(&root).await;
    let rename = Intent::Rename { src: "/a".into(), dst: "/moved".into() };
    let first = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(rename))), LEASE_MS);
    assert_eq!(first.rename("/a", "/moved").await, Err(Errno::ENOTCONN));
    cluster.pass(LEASE_MS as u64 + 100).await;
    // The second client takes the transaction over, then dies before finishing
    // its own mkdir (recovery itself completed; its own transaction did not).
    let mkdir = Intent::Mkdir { path: "/moved/x".into() };
    let second = cluster.client_with_hook(Arc::new(DieAt(Step::Locked(mkdir))), LEASE_MS);
    assert_eq!(second.mkdir("/moved/x", 0o755).await.map(|_| ()), Err(Errno::ENOTCONN));
    cluster.pass(LEASE_MS as u64 + 100).await;
    assert_eq!(cluster.fresh_client().repair().await, Ok(1));
    assert_eq!(root.stat("/moved/sub/g3").await.map(|a| a.kind), Ok(FileKind::File));
    assert_fsck_clean(&root, "").await;
}

/// A recoverer that dies right after its revoke (every server now refuses
/// the dead coordinator's late steps; nothing is read or put back yet)
/// leaves the transaction to the next, which revokes it again and finishes
/// it: for each kind of transaction that revokes, dead once before its
/// commit point and once after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recoverer_dead_right_after_its_revoke_leaves_the_transaction_to_the_next() {
    for op in [Op::Mkdir, Op::Rmdir, Op::ChmodDir, Op::ChmodDirAdd, Op::ChownDir, Op::RenameDir, Op::RenameDirOverEmpty, Op::RenameEmptyDir, Op::RenameFile] {
        let (before, after) = expected_trees(op).await;
        let i = op.intent();
        let (_, prim) = replica_and_primary(&i);
        // The last step before the commit point, and the commit point.
        let uncommitted = steps(op).into_iter().rev().find(|s| !committed_after(op, s)).unwrap();
        for step in [uncommitted, Step::PrimaryDone(i.clone())] {
            let want = if committed_after(op, &step) { &after } else { &before };
            let (cluster, root) = died_at(op, &step).await;
            // Every recovery that revokes reads the directory state next: at
            // its primary, or (a rename) at every server.
            let (mut held, release) = cluster.faults().hold_next(prim, "DirProbe");
            let first = cluster.client_with_lease(LEASE_MS);
            let recovering = tokio::spawn(async move { first.repair().await });
            tokio::time::timeout(Duration::from_secs(20), held.recv()).await.expect("recovery never read after its revoke").unwrap();
            recovering.abort();
            release.add_permits(1);
            assert!(recovering.await.unwrap_err().is_cancelled());
            cluster.pass(LEASE_MS as u64 + 100).await;
            assert_eq!(cluster.fresh_client().repair().await, Ok(1), "{op:?} at {step:?}");
            assert_eq!(&tree(&root).await, want, "{op:?} died at {step:?}, then its first recoverer");
            assert_fsck_clean(&root, &format!("{op:?} at {step:?}")).await;
            let reader = cluster.fresh_client();
            tree(&reader).await;
            assert_eq!(reader.counters().snapshot().retries, 0, "{op:?} at {step:?}: a fence was left");
        }
    }
}

/// A recoverer that dies while it migrates a committed directory rename (its
/// adoption of a moved file at the file's new primary held on its way, under
/// the recoverer's own id) leaves the transaction to the next, which revokes
/// the dead recoverer's id as well as the original. The held `Adopt`,
/// arriving after the next recoverer finished the migration and a chmod
/// changed the file, is refused, so the chmod stays. Were only the original
/// id revoked, the late copy would put the file's old record back (its old
/// mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_recoverers_late_migration_step_overwrites_nothing() {
    let prim = |p: &str| primary(&NsPath::parse(p).unwrap(), SERVERS);
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    root.mkdir("/d", 0o755).await.unwrap();
    // One file below, whose primary changes with the rename, to a server
    // that is not the new directory's own: the only adoption there is it.
    let (dst, file) = (0..)
        .map(|i| format!("/e{i}"))
        .find_map(|e| {
            let new = format!("{e}/f");
            (prim("/d/f") != prim(&new) && prim(&e) != prim(&new)).then_some((e, new))
        })
        .unwrap();
    root.create("/d/f", 0o644).await.unwrap();
    let rename = Intent::Rename { src: "/d".into(), dst: dst.clone() };
    let coordinator = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(rename))), LEASE_MS);
    assert_eq!(coordinator.rename("/d", &dst).await, Err(Errno::ENOTCONN));
    cluster.pass(LEASE_MS as u64 + 100).await;

    let late = after_the_next_recoverer(&cluster, prim(&file), "Adopt", async {
        root.chmod(&file, 0o600).await.unwrap();
    })
    .await;
    assert_eq!(late, Ok(0), "the first recoverer's late step was taken as done");
    assert_eq!(root.stat(&file).await.map(|a| a.mode & 0o777), Ok(0o600), "the dead recoverer's late copy put the old record back");
    assert_eq!(root.stat("/d").await.map(drop), Err(Errno::ENOENT));
    assert_fsck_clean(&root, "").await;
}

/// A recoverer that dies as it rolls a committed mkdir forward (its `DirSync`
/// to a replica held on its way) leaves the transaction to the next. The held
/// step, arriving after the next recoverer finished and the directory was
/// removed, is refused: it names the dead recoverer's id, which the next one
/// revoked. A step that named no transaction would make the removed
/// directory again on that replica alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_recoverers_late_sync_makes_nothing() {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    let replica = mkdir_of_p_d_left_to_recovery(&cluster).await;
    let late = after_the_next_recoverer(&cluster, replica, "DirSync", async {
        root.rmdir("/p/d").await.expect("removed once recovered");
    })
    .await;
    assert_eq!(late, Ok(0), "the first recoverer's late step was taken as done");
    for s in &cluster.servers {
        let probe = s.handle(&canopy_proto::Creds::root(), canopy_proto::Request::DirProbe { path: "/p/d".into() });
        assert_eq!(probe, Ok(canopy_proto::Reply::Probe(None)), "server {} made /p/d again", s.index());
    }
    assert_fsck_clean(&root, "").await;
}

/// A recoverer that dies as it rolls a committed directory rename forward
/// (its apply on a server the coordinator's apply failed on, held on its
/// way) leaves the transaction to the next. The held step, arriving after
/// the next recoverer finished and the directory was renamed back, is
/// refused: the transaction's fence is down. A step that named no
/// transaction would move the directory on that server alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_recoverers_late_apply_moves_nothing() {
    let prim = |p: &str| primary(&NsPath::parse(p).unwrap(), SERVERS);
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    root.mkdir("/d", 0o755).await.unwrap();
    // Committed, but one server's apply failed: left to recovery, which
    // applies it there.
    let behind = (0..SERVERS).find(|s| *s != prim("/e")).unwrap();
    let (gate, mut at, release) = Gate::at(Step::Locked(Intent::Rename { src: "/d".into(), dst: "/e".into() }));
    let coordinator = cluster.client_with_hook(gate, LEASE_MS);
    let renaming = tokio::spawn(async move { coordinator.rename("/d", "/e").await });
    at.recv().await.unwrap();
    cluster.faults().refuse_next(behind, "RenameDir", Errno::EIO);
    release.add_permits(1);
    assert_eq!(renaming.await.unwrap(), Err(Errno::EIO));
    cluster.pass(LEASE_MS as u64 + 100).await;

    let late = after_the_next_recoverer(&cluster, behind, "RenameDir", async {
        root.rename("/e", "/d").await.expect("renamed back once recovered");
    })
    .await;
    assert_eq!(late, Ok(0), "the first recoverer's late step was taken as done");
    assert_fsck_clean(&root, "").await;
    let reader = cluster.fresh_client();
    assert!(reader.stat("/d").await.is_ok());
    assert_eq!(reader.stat("/e").await.map(drop), Err(Errno::ENOENT));
}

/// A mkdir whose lock request is handed a dead coordinator's mkdir recovers
/// it first; when that recovery is taken over in turn (its step to a
/// replica held on its way until its lease ran out and the next recoverer
/// finished), the mkdir asks for its locks again and answers for itself:
/// `EEXIST`, since the recovered mkdir made the name. It does not pass on
/// its recovery's `ESTALE`, which is not about the caller's path at all
/// (the kernel takes it for a stale handle and retries the lookup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_whose_recovery_was_taken_over_answers_for_itself() {
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    let replica = mkdir_of_p_d_left_to_recovery(&cluster).await;
    let second = cluster.client_with_lease(LEASE_MS);
    let made = cluster
        .step_held_past_recovery(replica, "DirSync", LEASE_MS, async move { second.mkdir("/p/d", 0o700).await.map(|a| a.mode) }, async {})
        .await;
    assert_eq!(made, Err(Errno::EEXIST));
    assert_eq!(root.stat("/p/d").await.map(|a| a.mode & 0o777), Ok(0o755), "the dead coordinator's mkdir, rolled forward");
    assert_fsck_clean(&root, "").await;
}

/// A link whose insert, sent in time, arrives after recovery took the
/// transaction over and found no name (so took the count back) is refused
/// and makes no name; the coordinator's own taking back then finds it
/// done, and the link answers `EIO` (recovery decided), never `ESTALE`,
/// which the kernel would take for a stale handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_links_late_insert_makes_no_name_and_answers_eio() {
    let prim = |p: &str| primary(&NsPath::parse(p).unwrap(), SERVERS);
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    root.mkdir("/d", 0o755).await.unwrap();
    root.create("/d/f", 0o644).await.unwrap();
    let coordinator = cluster.client_with_lease(LEASE_MS);
    let linked = cluster.step_held_past_recovery(prim("/d/g"), "LinkInsert", LEASE_MS, async move { coordinator.link("/d/f", "/d/g").await.map(drop) }, async {}).await;
    assert_eq!(linked, Err(Errno::EIO));
    assert_eq!(root.stat("/d/g").await.map(drop), Err(Errno::ENOENT));
    assert_eq!(root.stat("/d/f").await.map(|a| a.nlink), Ok(1));
    assert_fsck_clean(&root, "").await;
}

/// Makes /p (mode 755), then a mkdir of /p/d (mode 755) whose coordinator
/// dies after its primary applied it, and waits its lease out; answers a
/// replica of /p/d, to which a recovery rolling it forward sends `DirSync`.
async fn mkdir_of_p_d_left_to_recovery(cluster: &InProcCluster) -> u32 {
    cluster.client().mkdir("/p", 0o755).await.unwrap();
    let mkdir = Intent::Mkdir { path: "/p/d".into() };
    let coordinator = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(mkdir))), LEASE_MS);
    assert_eq!(coordinator.mkdir("/p/d", 0o755).await.map(drop), Err(Errno::ENOTCONN));
    cluster.pass(LEASE_MS as u64 + 100).await;
    let primary_of_d = primary(&NsPath::parse("/p/d").unwrap(), SERVERS);
    (0..SERVERS).find(|s| *s != primary_of_d).unwrap()
}

/// Starts a recoverer (short lease) of the cluster's expired transaction and
/// holds its next `step` to `server` on its way until its lease has run out,
/// the next recoverer has finished the transaction and `meanwhile` has run;
/// then lets the step arrive, and answers what the first recoverer got: how
/// many transactions it recovered (none, if its late step was refused and
/// the next recoverer's work stood).
async fn after_the_next_recoverer(cluster: &InProcCluster, server: u32, step: &'static str, meanwhile: impl std::future::Future<Output = ()>) -> Result<u64, Errno> {
    let first = cluster.client_with_lease(LEASE_MS);
    cluster.step_held_past_recovery(server, step, LEASE_MS, async move { first.repair().await }, meanwhile).await
}

/// A link whose coordinator died after it counted the new name and before
/// it made it is recovered to no link: the count is taken back (recorded
/// with the transaction on the inode's home), so the file keeps the count of
/// the names it has and fsck is clean; for a file whose inode the link
/// shares first, and for one shared already and homed on another server
/// (counted there). The count must not stay one too high: fsck reports
/// that, and nothing repairs it. (A link whose name was made and whose
/// answer was lost keeps its count: `uncertain.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_coordinator_died_before_its_name_takes_its_count_back() {
    let prim = |p: &str| primary(&NsPath::parse(p).unwrap(), SERVERS);
    for shared_before in [false, true] {
        let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
        let root = cluster.client();
        root.mkdir("/d", 0o755).await.unwrap();
        root.create("/d/f", 0o644).await.unwrap();
        let mut src = "/d/f".to_string();
        if shared_before {
            // A second name on another server: the inode stays homed on
            // /d/f's, so linking through it counts there.
            src = (0..).map(|i| format!("/d/g{i}")).find(|g| prim(g) != prim("/d/f")).unwrap();
            root.link("/d/f", &src).await.unwrap();
        }
        let names = root.stat(&src).await.unwrap().nlink;
        let at = Step::PrimaryDone(Intent::Link { src: src.clone(), dst: "/d/h".into() });
        let dying = cluster.client_with_hook(Arc::new(DieAt(at)), LEASE_MS);
        assert_eq!(dying.link(&src, "/d/h").await.map(drop), Err(Errno::ENOTCONN));
        cluster.pass(LEASE_MS as u64 + 100).await;
        assert_eq!(cluster.fresh_client().repair().await, Ok(1));
        assert_eq!(root.stat(&src).await.map(|a| a.nlink), Ok(names), "shared before: {shared_before}");
        assert_eq!(root.stat("/d/h").await.map(drop), Err(Errno::ENOENT));
        assert_fsck_clean(&root, &format!("shared before: {shared_before}")).await;
    }
}

/// A file rename between servers whose coordinator's last step (dropping
/// the source) arrives after recovery finished the rename and the file was
/// renamed back to its first name is refused: recovery revoked it. Let
/// through, it would remove that name (it still names the same inode),
/// leaving the file with none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_of_a_file_rename_leaves_a_name_made_since() {
    let prim = |p: &str| primary(&NsPath::parse(p).unwrap(), SERVERS);
    let cluster = InProcCluster::memory_manual("shardfs", SERVERS);
    let root = cluster.client();
    root.mkdir("/d", 0o755).await.unwrap();
    root.create("/d/f", 0o644).await.unwrap();
    let ino = root.stat("/d/f").await.unwrap().ino;
    let dst = (0..).map(|i| format!("/d/g{i}")).find(|g| prim(g) != prim("/d/f")).unwrap();
    let coordinator = cluster.client_with_lease(LEASE_MS);
    let renaming = {
        let dst = dst.clone();
        async move { coordinator.rename("/d/f", &dst).await }
    };
    let renamed_back = async {
        assert_eq!(cluster.fresh_client().stat("/d/f").await.map(drop), Err(Errno::ENOENT), "recovery finished the rename");
        root.rename(&dst, "/d/f").await.unwrap();
    };
    let late = cluster.step_held_past_recovery(prim("/d/f"), "RenameOutCommit", LEASE_MS, renaming, renamed_back).await;
    assert_eq!(late, Err(Errno::EIO), "the late commit was taken");
    let reader = cluster.fresh_client();
    assert_eq!(reader.stat("/d/f").await.map(|a| a.ino), Ok(ino), "the name made since is gone");
    assert_fsck_clean(&reader, "").await;
}
