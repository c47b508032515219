//! A batch's commit against the same operations done synchronously, its
//! conflicts and refusals, and commits interrupted and run again.

use canopy_batch::{begin, commit, open, OpenBatch};
use canopy_client::Client;
use canopy_proto::{Creds, Errno, FileKind};
use canopy_testkit::InProcCluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const USER: u32 = 1000;

fn user() -> Creds {
    Creds { uid: USER, gid: USER, groups: vec![] }
}

/// A directory `path` owned by the test user, mode `mode`.
async fn user_dir(root: &Client, path: &str, mode: u32) {
    root.mkdir(path, mode).await.unwrap();
    root.chown(path, Some(USER), Some(USER)).await.unwrap();
}

/// Every object under `top` by its path relative to it: kind, mode, owner,
/// size, links, symlink target and inline contents (times differ by design).
type Row = (String, FileKind, u32, u32, u32, u64, u32, Option<String>, Vec<u8>);

async fn subtree(c: &Client, top: &str) -> Vec<Row> {
    let mut out = Vec::new();
    let mut dirs = vec![top.to_string()];
    while let Some(d) = dirs.pop() {
        for e in c.readdir(&d).await.unwrap() {
            let p = format!("{d}/{}", e.name);
            let a = c.stat(&p).await.unwrap();
            let target = if a.kind == FileKind::Symlink { Some(c.readlink(&p).await.unwrap()) } else { None };
            let data = match a.kind {
                FileKind::File => match c.read_data(&p, 0, 4096).await.unwrap() {
                    canopy_client::data::DataRead::Inline(d) => d,
                    other => panic!("{p}: {other:?}"),
                },
                _ => Vec::new(),
            };
            if a.kind == FileKind::Dir {
                dirs.push(p.clone());
            }
            out.push((p[top.len()..].to_string(), a.kind, a.mode, a.uid, a.gid, a.size, a.nlink, target, data));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One random operation on relative path names, done under `top`.
async fn step(c: &Client, top: &str, rng: &mut StdRng) -> (String, Result<(), Errno>) {
    let names = ["a", "b", "c", "a/x", "a/y", "b/x", "a/x/p", "b/x/q", "c/z"];
    let mut pick = || names[rng.gen_range(0..names.len())];
    let (p, q) = (pick(), pick());
    let (p, q) = (format!("{top}/{p}"), format!("{top}/{q}"));
    let op = rng.gen_range(0..10);
    let r = match op {
        0 | 1 => c.mkdir(&p, [0o755, 0o700, 0o2775][rng.gen_range(0..3)]).await.map(|_| ()),
        2 | 3 => c.create(&p, [0o644, 0o600, 0o4755][rng.gen_range(0..3)]).await.map(|_| ()),
        4 => c.write_data(&p, rng.gen_range(0..8), b"some bytes", 4096, true).await.map(|_| ()),
        5 => c.chmod(&p, [0o640, 0o755, 0o1777][rng.gen_range(0..3)]).await.map(|_| ()),
        6 => c.unlink(&p).await,
        7 => c.rmdir(&p).await,
        8 => c.rename(&p, &q).await,
        _ => c.symlink("../t", &p).await.map(|_| ()),
    };
    (format!("{op} {p} {q}"), r)
}

async fn run_model(mode: &'static str, seed: u64) {
    let cluster = InProcCluster::memory_mode(mode, 3);
    let root = cluster.client();
    user_dir(&root, "/sync", 0o755).await;
    user_dir(&root, "/batch", 0o755).await;
    let me = root.as_user(user());
    let base = tempfile::tempdir().unwrap();
    let b = begin(&me, "/batch", base.path()).await.unwrap();
    let private = b.client();
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..80 {
        let mut r2 = rng.clone();
        let (what, sync) = step(&me, "/sync", &mut rng).await;
        let (_, batched) = step(&private, "/batch", &mut r2).await;
        assert_eq!(sync, batched, "{mode} seed {seed} step {i}: {what}");
    }
    let report = commit(b, &me).await.unwrap();
    assert!(report.rejected.is_empty(), "{mode} seed {seed}: {:?}", report.rejected);
    assert_eq!(subtree(&root, "/sync").await, subtree(&root, "/batch").await, "{mode} seed {seed}");
    let fsck = root.fsck().await.unwrap();
    assert!(fsck.is_clean(), "{mode} seed {seed}: {fsck:?}");
}

#[tokio::test]
async fn a_commit_makes_the_namespace_the_same_operations_make_synchronously() {
    for mode in ["shardfs", "indexfs"] {
        for seed in 0..12 {
            run_model(mode, seed).await;
        }
    }
}

/// `n` files `f0`.. made in the batch under its root's directory `out`.
async fn batch_of_files(b: &OpenBatch, n: usize) {
    let c = b.client();
    let root = b.meta.root.clone();
    c.mkdir(&format!("{root}/out"), 0o755).await.unwrap();
    for i in 0..n {
        c.create(&format!("{root}/out/f{i}"), 0o644).await.unwrap();
    }
}

#[tokio::test]
async fn files_taken_meanwhile_are_refused_one_by_one_and_the_rest_lands() {
    for mode in ["shardfs", "indexfs"] {
        let cluster = InProcCluster::memory_mode(mode, 3);
        let root = cluster.client();
        user_dir(&root, "/job", 0o777).await;
        let me = root.as_user(user());
        let base = tempfile::tempdir().unwrap();
        let b = begin(&me, "/job", base.path()).await.unwrap();
        batch_of_files(&b, 200).await;
        // Another user makes the directory and two of its names first.
        let other = root.as_user(Creds::user(1001, 1001));
        other.mkdir("/job/out", 0o777).await.unwrap();
        other.create("/job/out/f7", 0o600).await.unwrap();
        other.create("/job/out/f150", 0o600).await.unwrap();
        let report = commit(b, &me).await.unwrap();
        let rejected: Vec<(String, Errno)> = report.rejected.clone();
        assert_eq!(rejected, vec![("/job/out/f150".to_string(), Errno::EEXIST), ("/job/out/f7".to_string(), Errno::EEXIST)], "{mode}");
        assert_eq!((report.files.made, report.dirs_adopted), (198, 1), "{mode}");
        assert_eq!(root.readdir("/job/out").await.unwrap().len(), 200);
        assert_eq!(root.stat("/job/out/f7").await.unwrap().uid, 1001, "{mode}: the other user's file is untouched");
        assert_eq!(root.stat("/job/out/f8").await.unwrap().uid, USER);
        assert!(root.fsck().await.unwrap().is_clean());
    }
}

#[tokio::test]
async fn a_root_the_owner_may_not_write_is_refused_whole() {
    for mode in ["shardfs", "indexfs"] {
        let cluster = InProcCluster::memory_mode(mode, 3);
        let root = cluster.client();
        root.mkdir("/sys", 0o755).await.unwrap();
        user_dir(&root, "/job", 0o755).await;
        let me = root.as_user(user());
        let base = tempfile::tempdir().unwrap();
        assert_eq!(begin(&me, "/sys", base.path()).await.err(), Some(Errno::EACCES), "{mode}");
        let b = begin(&me, "/job", base.path()).await.unwrap();
        let id = b.meta.id;
        batch_of_files(&b, 10).await;
        b.close().await.unwrap();
        root.chmod("/job", 0o555).await.unwrap();
        assert_eq!(commit(b, &me).await.err(), Some(Errno::EACCES), "{mode}");
        assert!(root.readdir("/job").await.unwrap().is_empty(), "{mode}: nothing landed");
        // The batch is still there to commit once the owner may write again.
        root.chmod("/job", 0o755).await.unwrap();
        let b = open(base.path(), id).unwrap();
        let report = commit(b, &me).await.unwrap();
        assert_eq!(report.files.made, 10, "{mode}");
    }
}

#[tokio::test]
async fn a_commit_whose_server_died_after_applying_finishes_when_run_again() {
    for mode in ["shardfs", "indexfs"] {
        let cluster = InProcCluster::memory_mode(mode, 3);
        let root = cluster.client();
        user_dir(&root, "/job", 0o755).await;
        let me_on = |c: &InProcCluster| Client::new(c.client().namespace().clone(), user());
        let me = me_on(&cluster);
        let base = tempfile::tempdir().unwrap();
        let b = begin(&me, "/job", base.path()).await.unwrap();
        let id = b.meta.id;
        batch_of_files(&b, 300).await;
        b.close().await.unwrap();
        drop(b);
        // Server 1 applies its share and dies before answering.
        let faulty = Client::new(canopy_client::open_namespace(mode, cluster.transport(), Default::default()).unwrap(), user());
        cluster.faults().die_after(1, "BatchApply");
        assert!(commit(open(base.path(), id).unwrap(), &faulty).await.is_err());
        cluster.faults().revive(1);
        let report = commit(open(base.path(), id).unwrap(), &me).await.unwrap();
        assert!(report.rejected.is_empty(), "{mode}: {:?}", report.rejected);
        assert!(report.files.landed_before > 0, "{mode}: server 1's share had landed");
        assert_eq!(report.files.made + report.files.landed_before, 300, "{mode}");
        let names = root.readdir("/job/out").await.unwrap();
        assert_eq!(names.len(), 300, "{mode}: each once");
        assert!(root.fsck().await.unwrap().is_clean());
    }
}

#[tokio::test]
async fn a_commit_stopped_midway_by_its_client_finishes_when_run_again() {
    for mode in ["shardfs", "indexfs"] {
        let cluster = InProcCluster::memory_mode(mode, 3);
        let root = cluster.client();
        user_dir(&root, "/job", 0o755).await;
        // A client stopped inside a mkdir leaves its locks until its lease ends.
        let short = cluster.client_with(canopy_client::NsOptions { lease_ms: Some(200), ..Default::default() });
        let me = short.as_user(user());
        let base = tempfile::tempdir().unwrap();
        let b = begin(&me, "/job", base.path()).await.unwrap();
        let id = b.meta.id;
        batch_of_files(&b, 3_000).await;
        b.close().await.unwrap();
        drop(b);
        // The client stops (its future dropped) somewhere inside the commit.
        for cut_ms in [0u64, 1, 3, 10] {
            let _ = tokio::time::timeout(std::time::Duration::from_millis(cut_ms), commit(open(base.path(), id).unwrap(), &me)).await;
            let n = root.readdir("/job/out").await.map_or(0, |v| v.len());
            if n == 3_000 {
                break;
            }
        }
        let done = match open(base.path(), id) {
            Ok(b) => commit(b, &me).await.unwrap().files.made,
            Err(_) => 0, // an earlier try finished
        };
        assert!(done <= 3_000);
        assert_eq!(root.readdir("/job/out").await.unwrap().len(), 3_000, "{mode}: each once");
        assert!(root.fsck().await.unwrap().is_clean(), "{mode}");
    }
}
