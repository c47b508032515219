//! IndexFS fault injection: a coordinator is killed at each step of each kind of
//! directory transaction (mkdir, rmdir, chmod, chown, a directory rename and a
//! file rename between two servers), then another client recovers it. The
//! namespace must then equal the tree before the operation or after it, the one
//! its commit point says, and fsck must be clean.

use canopy_client::txn::Step;
use canopy_client::Client;
use canopy_proto::giga;
use canopy_proto::msg::Intent;
use canopy_proto::Errno;
use canopy_testkit::tree::{tree, Tree};
use canopy_testkit::hooks::DieAt;
use canopy_testkit::InProcCluster;
use std::sync::Arc;
use std::time::Duration;

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

/// A top-level /pN whose entries live on another server than /a's.
async fn elsewhere(c: &Client) -> String {
    let a = giga::home(c.stat("/a").await.unwrap().ino, SERVERS);
    for i in 0..8 {
        let p = format!("/p{i}");
        if giga::home(c.stat(&p).await.unwrap().ino, SERVERS) != a {
            return p;
        }
    }
    panic!("every /pN shares /a's home");
}

async fn expected_trees(op: &Op) -> (Tree, Tree) {
    let clean = InProcCluster::memory_mode("indexfs", SERVERS);
    let c = clean.client();
    populate(&c).await;
    let before = tree(&c).await;
    op.run(&c).await.unwrap();
    (before, tree(&c).await)
}

async fn die_and_recover(op: &Op, step: Step, committed: bool, before: &Tree, after: &Tree) {
    let cluster = InProcCluster::memory_mode("indexfs", SERVERS);
    let root = cluster.client();
    populate(&root).await;
    let dying = cluster.client_with_hook(Arc::new(DieAt(step.clone())), LEASE_MS);
    assert_eq!(op.run(&dying).await, Err(Errno::ENOTCONN), "{op:?} dies at {step:?}");
    tokio::time::sleep(Duration::from_millis(LEASE_MS as u64 + 100)).await;
    let recovering = cluster.fresh_client();
    assert_eq!(recovering.repair().await, Ok(1), "{op:?} at {step:?}");
    let reader = cluster.fresh_client();
    let want = if committed { after } else { before };
    assert_eq!(&tree(&reader).await, want, "{op:?} died at {step:?}");
    let fsck = reader.fsck().await.unwrap();
    assert!(fsck.is_clean(), "{op:?} died at {step:?}: {:?}", fsck.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_every_indexfs_transaction_recovers_to_all_or_nothing() {
    // The same ids come out of every fresh cluster, so the /pN found here is
    // on another server than /a in each.
    let probe = InProcCluster::memory_mode("indexfs", SERVERS);
    populate(&probe.client()).await;
    let away = elsewhere(&probe.client()).await;
    for op in [Op::Mkdir, Op::Rmdir, Op::Chmod, Op::Chown, Op::RenameDir(away.clone()), Op::RenameFile(away.clone())] {
        let (before, after) = expected_trees(&op).await;
        assert_ne!(before, after, "{op:?} changes something");
        for (step, committed) in op.steps() {
            die_and_recover(&op, step, committed, &before, &after).await;
        }
    }
}
