//! IndexFS fault injection: a coordinator is killed at each step of each kind of
//! directory transaction (mkdir, rmdir, chmod, chown, a directory rename and a
//! file rename between two servers), then another client recovers it. The
//! namespace must then equal the tree before the operation or after it, the one
//! its commit point says, and fsck must be clean. Recovery meets faults too:
//! a server down while it runs, a rename's last answer lost, an insert of
//! unknown outcome over a directory the rename had sealed to replace.

use canopy_client::txn::Step;
use canopy_client::Client;
use canopy_proto::giga;
use canopy_proto::msg::Intent;
use canopy_proto::Errno;
use canopy_testkit::tree::{tree, Tree};
use canopy_testkit::hooks::DieAt;
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use std::sync::Arc;


const SERVERS: u32 = 4;
const LEASE_MS: u32 = 150;

/// /a with files and a subdirectory, /empty, and directories /p0../p7 (their
/// homes differ, so some rename between servers).
async fn populate(c: &Client) {
    c.mkdir("/a", 0o755).await.unwrap();
    c.mkdir("/a/sub", 0o755).await.unwrap();
    for i in 0..6 {
        c.create(&format!("/a/f{i}"), 0o644).await.unwrap();
        c.create(&format!("/a/sub/g{i}"), 0o644).await.unwrap();
    }
    c.mkdir("/empty", 0o755).await.unwrap();
    for i in 0..8 {
        c.mkdir(&format!("/p{i}"), 0o755).await.unwrap();
    }
}

#[derive(Clone, Debug)]
enum Op {
    Mkdir,
    Rmdir,
    Chmod,
    Chown,
    /// /a/sub into a /pN whose home is not /a's: two servers.
    RenameDir(String),
    /// /a/f0 into such a /pN.
    RenameFile(String),
}

impl Op {
    fn intent(&self) -> Intent {
        match self {
            Op::Mkdir => Intent::Mkdir { path: "/a/new".into() },
            Op::Rmdir => Intent::Rmdir { path: "/empty".into() },
            Op::Chmod | Op::Chown => Intent::DirSetAttr { path: "/a/sub".into() },
            Op::RenameDir(d) => Intent::Rename { src: "/a/sub".into(), dst: format!("{d}/sub") },
            Op::RenameFile(d) => Intent::Rename { src: "/a/f0".into(), dst: format!("{d}/f0") },
        }
    }

    async fn run(&self, c: &Client) -> Result<(), Errno> {
        match self {
            Op::Mkdir => c.mkdir("/a/new", 0o700).await.map(|_| ()),
            Op::Rmdir => c.rmdir("/empty").await,
            Op::Chmod => c.chmod("/a/sub", 0o711).await.map(|_| ()),
            Op::Chown => c.chown("/a/sub", Some(1000), Some(1000)).await.map(|_| ()),
            Op::RenameDir(d) => c.rename("/a/sub", &format!("{d}/sub")).await,
            Op::RenameFile(d) => c.rename("/a/f0", &format!("{d}/f0")).await,
        }
    }

    /// The steps a coordinator reports, and whether dying there leaves the
    /// operation committed.
    fn steps(&self) -> Vec<(Step, bool)> {
        let i = self.intent();
        let mut v = vec![(Step::Locked(i.clone()), false), (Step::PrimaryDone(i.clone()), true)];
        if let Op::Rmdir = self {
            // Sealed and its header dropped, its entry not yet removed: recovery finishes it.
            v.push((Step::ReplicasDone(i), true));
        }
        v
    }
}

/// A top-level /pN whose entries live on another server than /a's and the
/// root's (so a recovery with that server down can still resolve /pN).
async fn elsewhere(c: &Client) -> String {
    let a = giga::home(c.stat("/a").await.unwrap().ino, SERVERS);
    let root = giga::home(c.stat("/").await.unwrap().ino, SERVERS);
    assert_ne!(a, root, "/a's entries and the root's on one server");
    for i in 0..8 {
        let p = format!("/p{i}");
        if ![a, root].contains(&giga::home(c.stat(&p).await.unwrap().ino, SERVERS)) {
            return p;
        }
    }
    panic!("every /pN shares /a's home or the root's");
}

async fn expected_trees(op: &Op) -> (Tree, Tree) {
    let clean = InProcCluster::memory_manual("indexfs", SERVERS);
    let c = clean.client();
    populate(&c).await;
    let before = tree(&c).await;
    op.run(&c).await.unwrap();
    (before, tree(&c).await)
}

/// A cluster with [`populate`]'s tree, and a root client of it.
async fn populated() -> (InProcCluster, Client) {
    let cluster = InProcCluster::memory_manual("indexfs", SERVERS);
    let root = cluster.client();
    populate(&root).await;
    (cluster, root)
}

/// The /pN [`elsewhere`] finds. The same ids come out of every fresh
/// cluster, so it is on another server than /a in each.
async fn away() -> String {
    let (_, probe) = populated().await;
    elsewhere(&probe).await
}

/// Once the dead transaction's lease ran out, a fresh client recovers exactly
/// one transaction and leaves tree `want`, fsck clean.
async fn recovered_to(cluster: &InProcCluster, want: &Tree, what: &str) {
    cluster.pass(LEASE_MS as u64 + 100).await;
    assert_eq!(cluster.fresh_client().repair().await, Ok(1), "{what}");
    let reader = cluster.fresh_client();
    assert_eq!(&tree(&reader).await, want, "{what}");
    assert_fsck_clean(&reader, what).await;
}

async fn die_and_recover(op: &Op, step: Step, committed: bool, before: &Tree, after: &Tree) {
    let (cluster, _) = populated().await;
    let dying = cluster.client_with_hook(Arc::new(DieAt(step.clone())), LEASE_MS);
    assert_eq!(op.run(&dying).await, Err(Errno::ENOTCONN), "{op:?} dies at {step:?}");
    let want = if committed { after } else { before };
    recovered_to(&cluster, want, &format!("{op:?} died at {step:?}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_every_indexfs_transaction_recovers_to_all_or_nothing() {
    let away = away().await;
    for op in [Op::Mkdir, Op::Rmdir, Op::Chmod, Op::Chown, Op::RenameDir(away.clone()), Op::RenameFile(away.clone())] {
        let (before, after) = expected_trees(&op).await;
        assert_ne!(before, after, "{op:?} changes something");
        for (step, committed) in op.steps() {
            die_and_recover(&op, step, committed, &before, &after).await;
        }
    }
}

/// The server holding the names of `path`'s parent (one partition: these
/// directories hold fewer names than a split needs).
async fn server_of_name(c: &Client, path: &str) -> u32 {
    let (parent, _) = path.rsplit_once('/').unwrap();
    giga::home(c.stat(parent).await.unwrap().ino, SERVERS)
}

/// A rename between servers whose coordinator died after its commit point is
/// recovered while one of its two servers is down: the recovery cannot see
/// both names, so it must fail and leave the transaction for later (not take
/// the missing answer for "nothing there" and drop the record), and once the
/// server is back the rename is rolled forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_recovered_while_a_server_is_down_waits_for_it() {
    let away = away().await;
    for op in [Op::RenameDir(away.clone()), Op::RenameFile(away.clone())] {
        let (_, after) = expected_trees(&op).await;
        let Intent::Rename { src, dst } = op.intent() else { unreachable!() };
        for side in [&src, &dst] {
            let (cluster, root) = populated().await;
            let down = server_of_name(&root, side).await;
            let dying = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(op.intent()))), LEASE_MS);
            assert_eq!(op.run(&dying).await, Err(Errno::ENOTCONN));
            cluster.pass(LEASE_MS as u64 + 100).await;
            if let Op::RenameDir(_) = op {
                // Until recovered, fsck sees the directory under both names.
                let fsck = cluster.fresh_client().fsck().await.unwrap();
                assert!(fsck.problems.iter().any(|p| p.ends_with("has 2 names")), "{:?}", fsck.problems);
            }
            cluster.faults().down(down);
            // Its lease as short as the coordinator's, so the transaction it
            // fails to recover is soon handed over again.
            assert!(cluster.client_with_lease(LEASE_MS).repair().await.is_err(), "{op:?} recovered with the server of {side} down");
            cluster.faults().revive(down);
            recovered_to(&cluster, &after, &format!("{op:?} with {side}'s server down at first")).await;
        }
    }
}

/// A directory rename whose last step (dropping the source) was applied but
/// its answer lost is left to recovery, which finds the source gone and the
/// destination a directory (its entry away from its home answers `EREMOTE`
/// to a file's probe: no file there, not a failure to retry forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_whose_last_answer_was_lost_is_finished_by_recovery() {
    let op = Op::RenameDir(away().await);
    let (_, after) = expected_trees(&op).await;
    let (cluster, root) = populated().await;
    let src = server_of_name(&root, "/a/sub").await;
    cluster.faults().die_after(src, "IxRenameDirCommit");
    assert_eq!(op.run(&cluster.client_with_lease(LEASE_MS)).await, Err(Errno::EIO));
    cluster.faults().revive(src);
    recovered_to(&cluster, &after, "the source dropped, its answer lost").await;
}

/// A rename onto an empty directory seals that directory first; when its
/// insert's outcome is unknown (not applied) and recovery rolls it back, the
/// directory is unsealed, so it takes new entries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_rolled_back_unseals_the_directory_it_would_have_replaced() {
    let dst = format!("{}/sub", away().await);
    let (cluster, root) = populated().await;
    root.mkdir(&dst, 0o755).await.unwrap();
    let before = tree(&root).await;
    cluster.faults().refuse_next(server_of_name(&root, &dst).await, "IxRenameDirIn", Errno::ETIMEDOUT);
    assert_eq!(cluster.client_with_lease(LEASE_MS).rename("/a/sub", &dst).await, Err(Errno::EIO));
    recovered_to(&cluster, &before, "the insert's outcome unknown").await;
    root.create(&format!("{dst}/new"), 0o644).await.unwrap();
    root.mkdir(&format!("{dst}/newdir"), 0o755).await.unwrap();
}

/// The tree after `/a/sub` is renamed onto a new empty directory `dst`, on
/// a clean cluster.
async fn after_rename_over(dst: &str) -> Tree {
    let clean = InProcCluster::memory_manual("indexfs", SERVERS);
    let c = clean.client();
    populate(&c).await;
    c.mkdir(dst, 0o755).await.unwrap();
    c.rename("/a/sub", dst).await.unwrap();
    tree(&c).await
}

/// A rename onto an empty directory on another server, its coordinator dead
/// after the insert (the commit point): recovery drops the source and the
/// directory the rename replaced, which no name leads to any more. The
/// rename's intent names that directory, so its sealed header is not left
/// for good (fsck: a directory without a name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_committed_over_a_directory_drops_it_in_recovery() {
    let (cluster, _, after) = died_after_the_insert_over_a_directory().await;
    recovered_to(&cluster, &after, "died after the insert over a directory").await;
}

/// A populated cluster where `/a/sub` was renamed onto a new empty directory
/// on another server, its coordinator dead after the insert (the commit
/// point); with a root client, and the tree the rename makes.
async fn died_after_the_insert_over_a_directory() -> (InProcCluster, Client, Tree) {
    let dst = format!("{}/sub", away().await);
    let after = after_rename_over(&dst).await;
    let (cluster, root) = populated().await;
    root.mkdir(&dst, 0o755).await.unwrap();
    let dying = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(Intent::Rename { src: "/a/sub".into(), dst: dst.clone() }))), LEASE_MS);
    // The step's ENOTCONN comes back as EIO: the outcome is unknown, so the
    // sealed directory is not unsealed.
    assert_eq!(dying.rename("/a/sub", &dst).await, Err(Errno::EIO));
    (cluster, root, after)
}

/// The same, and the first recovery dies midway: its drop of the source
/// applied, its answer lost, so it fails and the transaction stays with the
/// lock service. The next recovery, once the first's lease ran out, finds
/// the source gone and still drops the directory the rename replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_over_a_directory_whose_recovery_died_midway_is_recovered_again() {
    let (cluster, root, after) = died_after_the_insert_over_a_directory().await;
    let source_server = server_of_name(&root, "/a/sub").await;
    cluster.pass(LEASE_MS as u64 + 100).await;
    cluster.faults().die_after(source_server, "IxRenameDirCommit");
    let first = cluster.client_with_lease(LEASE_MS).repair().await;
    assert!(first.is_err(), "the first recovery dies midway: {first:?}");
    assert_eq!(cluster.lock.transactions().len(), 1, "left for the next recovery");
    cluster.faults().revive(source_server);
    recovered_to(&cluster, &after, "recovered again after a recovery died midway").await;
}

/// The same within one server: the rename is one request there, its answer
/// lost (outcome unknown, left to recovery), so the coordinator never
/// dropped the directory it replaced; recovery does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_over_a_directory_whose_answer_was_lost_drops_it_in_recovery() {
    rename_over_with_answer_lost("/a/x", "IxRenameDir", "a one-server rename over a directory, its answer lost").await;
}

/// `/a/sub` renamed onto a new empty directory `dst` while the server of
/// `/a/sub`'s name applies `request` and loses its answer (the rename ends
/// `EIO`, left to recovery): recovery leaves the tree the rename makes, the
/// replaced directory gone, fsck clean.
async fn rename_over_with_answer_lost(dst: &str, request: &'static str, what: &str) {
    let after = after_rename_over(dst).await;
    let (cluster, root) = populated().await;
    root.mkdir(dst, 0o755).await.unwrap();
    let server = server_of_name(&root, "/a/sub").await;
    cluster.faults().die_after(server, request);
    assert_eq!(cluster.client_with_lease(LEASE_MS).rename("/a/sub", dst).await, Err(Errno::EIO));
    cluster.faults().revive(server);
    recovered_to(&cluster, &after, what).await;
}

/// Between servers over a directory, the source's drop applied but its
/// answer lost: the coordinator stops before dropping the directory it
/// replaced, and recovery (the source gone, the destination naming it)
/// drops that directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_over_a_directory_whose_commit_answer_was_lost_drops_it_in_recovery() {
    let dst = format!("{}/sub", away().await);
    rename_over_with_answer_lost(&dst, "IxRenameDirCommit", "the source dropped over a directory, its answer lost").await;
}

/// A link whose coordinator died after it counted the new name and before it
/// made it: recovery takes the count back, so the file keeps the count of its
/// names and fsck is clean; for an inode the link shares first, and for one
/// already shared and homed on another server. The count must not stay one
/// too high.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_coordinator_died_before_its_name_takes_its_count_back() {
    let away = away().await;
    for shared_before in [false, true] {
        let (cluster, root) = populated().await;
        let mut src = "/a/f0".to_string();
        if shared_before {
            // A second name in a directory on another server: the inode
            // stays homed on /a's, so linking through it counts there.
            src = format!("{away}/g");
            root.link("/a/f0", &src).await.unwrap();
        }
        let names = root.stat(&src).await.unwrap().nlink;
        let want = tree(&root).await;
        let at = Step::PrimaryDone(Intent::Link { src: src.clone(), dst: "/a/h".into() });
        let dying = cluster.client_with_hook(Arc::new(DieAt(at)), LEASE_MS);
        assert_eq!(dying.link(&src, "/a/h").await.map(drop), Err(Errno::ENOTCONN));
        recovered_to(&cluster, &want, &format!("shared before: {shared_before}")).await;
        assert_eq!(root.stat(&src).await.map(|a| a.nlink), Ok(names), "shared before: {shared_before}");
        assert_eq!(root.stat("/a/h").await.map(drop), Err(Errno::ENOENT));
    }
}

/// A coordinator's step held on its way until its lease ran out and another
/// client recovered its transaction is refused when it arrives: recovery
/// revoked the transaction before it read. Each case names the step held
/// and what it would do if it landed: a mkdir's entry (a directory named
/// with no header, which fsck reports), an rmdir's seal (the directory left
/// sealed, refusing new names for good, though no transaction holds it), and
/// a rename's insert at the destination (one directory under two names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_coordinators_late_step_is_refused_after_recovery() {
    let away = away().await;
    for (op, step) in [(Op::Mkdir, "IxMkdir"), (Op::Rmdir, "IxSeal"), (Op::RenameDir(away.clone()), "IxRenameDirIn")] {
        let what = format!("{op:?}'s {step} arriving late");
        let (cluster, root) = populated().await;
        let before = tree(&root).await;
        let server = match &op {
            Op::Rmdir => giga::home(root.stat("/empty").await.unwrap().ino, SERVERS),
            Op::RenameDir(d) => server_of_name(&root, &format!("{d}/sub")).await,
            _ => server_of_name(&root, "/a/new").await,
        };
        let coordinator = cluster.client_with_lease(LEASE_MS);
        let running = {
            let op = op.clone();
            async move { op.run(&coordinator).await }
        };
        let recovered = async {
            let reader = cluster.fresh_client();
            assert_eq!(tree(&reader).await, before, "{what}: recovered");
            assert_fsck_clean(&reader, &format!("{what}: recovered")).await;
        };
        let late = cluster.step_held_past_recovery(server, step, LEASE_MS, running, recovered).await;
        assert_eq!(late, Err(Errno::EIO), "{what}: the coordinator's late step was taken");
        let reader = cluster.fresh_client();
        assert_eq!(tree(&reader).await, before, "{what}");
        assert_fsck_clean(&reader, &what).await;
        reader.create("/empty/later", 0o644).await.unwrap_or_else(|e| panic!("{what}: /empty refuses new names: {e:?}"));
    }
}

/// A file rename between servers whose coordinator's last step (dropping
/// the source) arrives after recovery finished it and the file was renamed
/// back to its first name is refused (as `recovery.rs` checks for ShardFS):
/// it must not remove that name, which would leave the file with none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_of_a_file_rename_leaves_a_name_made_since() {
    let dst = format!("{}/f0", away().await);
    let (cluster, root) = populated().await;
    let ino = root.stat("/a/f0").await.unwrap().ino;
    let coordinator = cluster.client_with_lease(LEASE_MS);
    let renaming = {
        let dst = dst.clone();
        async move { coordinator.rename("/a/f0", &dst).await }
    };
    let renamed_back = async {
        assert_eq!(cluster.fresh_client().stat("/a/f0").await.map(drop), Err(Errno::ENOENT), "recovery finished the rename");
        root.rename(&dst, "/a/f0").await.unwrap();
    };
    let server = server_of_name(&root, "/a/f0").await;
    let late = cluster.step_held_past_recovery(server, "RenameOutCommit", LEASE_MS, renaming, renamed_back).await;
    assert_eq!(late, Err(Errno::EIO), "the late commit was taken");
    let reader = cluster.fresh_client();
    assert_eq!(reader.stat("/a/f0").await.map(|a| a.ino), Ok(ino), "the name made since is gone");
    assert_fsck_clean(&reader, "").await;
}
