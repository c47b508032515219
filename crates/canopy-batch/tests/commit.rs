//! A batch's commit against the same operations done synchronously, its
//! conflicts and refusals, and commits interrupted and run again.

use canopy_batch::{begin, begin_with, commit, open, CommitReport, OpenBatch, Start};
use canopy_client::Client;
use canopy_proto::{Creds, Errno, FileKind, SetAttr};
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const USER: u32 = 1000;

fn user() -> Creds {
    Creds { uid: USER, gid: USER, groups: vec![] }
}

/// A 3-server cluster of `mode` with a directory `/job` of the test user's,
/// mode `perm`; root's client and the user's.
async fn job(mode: &'static str, perm: u32) -> (InProcCluster, Client, Client) {
    let cluster = InProcCluster::memory_mode(mode, 3);
    let root = cluster.client();
    user_dir(&root, "/job", perm).await;
    let me = root.as_user(user());
    (cluster, root, me)
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
    let op = rng.gen_range(0..11);
    let r = match op {
        0 | 1 => c.mkdir(&p, [0o755, 0o700, 0o2775][rng.gen_range(0..3)]).await.map(|_| ()),
        2 | 3 => c.create(&p, [0o644, 0o600, 0o4755][rng.gen_range(0..3)]).await.map(|_| ()),
        4 => c.write_data(&p, rng.gen_range(0..8), b"some bytes", 4096, true).await.map(|_| ()),
        5 => c.chmod(&p, [0o640, 0o755, 0o1777][rng.gen_range(0..3)]).await.map(|_| ()),
        6 => c.unlink(&p).await,
        7 => c.rmdir(&p).await,
        8 => c.rename(&p, &q).await,
        10 => c.setattr(&p, &SetAttr { size: Some(rng.gen_range(0..12)), ..SetAttr::default() }).await.map(|_| ()),
        _ => c.symlink("../t", &p).await.map(|_| ()),
    };
    (format!("{op} {p} {q}"), r)
}

/// `ops` random operations done synchronously under both `/sync` and `/batch`.
async fn same_start(me: &Client, seed: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    for _ in 0..ops {
        let mut r2 = rng.clone();
        let (what, a) = step(me, "/sync", &mut rng).await;
        let (_, b) = step(me, "/batch", &mut r2).await;
        assert_eq!(a, b, "{what}");
    }
}

/// What a commit did to the base: moved, removed, modified.
async fn run_model(mode: &'static str, seed: u64, start: Start) -> (u64, u64, u64) {
    let cluster = InProcCluster::memory_mode(mode, 3);
    let root = cluster.client();
    user_dir(&root, "/sync", 0o755).await;
    user_dir(&root, "/batch", 0o755).await;
    let me = root.as_user(user());
    if start == Start::Snapshot {
        same_start(&me, seed, 40).await;
    }
    let base = tempfile::tempdir().unwrap();
    let b = begin_with(&me, "/batch", base.path(), start).await.unwrap();
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
    (report.moved, report.removed, report.modified)
}

#[tokio::test]
async fn a_commit_makes_the_namespace_the_same_operations_make_synchronously() {
    for mode in ["shardfs", "indexfs"] {
        for seed in 0..12 {
            run_model(mode, seed, Start::Empty).await;
        }
    }
}

#[tokio::test]
async fn a_batch_from_a_snapshot_commits_what_the_same_operations_do_to_the_same_tree() {
    for mode in ["shardfs", "indexfs"] {
        let mut did = (0, 0, 0);
        for seed in 0..20 {
            let (m, r, c) = run_model(mode, seed, Start::Snapshot).await;
            did = (did.0 + m, did.1 + r, did.2 + c);
        }
        // The sequences did move, remove and change what the batch began with.
        assert!(did.0 >= 3 && did.1 >= 10 && did.2 >= 5, "{mode}: moved, removed, modified {did:?}");
    }
}

/// Renames the cluster could not do in the private order one at a time (a
/// swap, a directory moved below its former child's new place) land as the
/// private namespace has them, and an entry changed meanwhile by someone
/// else is refused, not touched.
#[tokio::test]
async fn a_snapshot_batch_lands_swaps_and_refuses_what_changed_meanwhile() {
    for mode in ["shardfs", "indexfs"] {
        let (_cluster, root, me) = job(mode, 0o755).await;
        for d in ["/job/a", "/job/b", "/job/a/x"] {
            me.mkdir(d, 0o755).await.unwrap();
        }
        for f in ["/job/a/f", "/job/b/g", "/job/keep", "/job/gone", "/job/theirs"] {
            me.create(f, 0o644).await.unwrap();
        }
        me.write_data("/job/keep", 0, b"old", 4096, false).await.unwrap();
        for f in ["/job/empty", "/job/holes", "/job/linked"] {
            me.create(f, 0o644).await.unwrap();
            me.write_data(f, 0, b"abcdef", 4096, false).await.unwrap();
        }
        let base = tempfile::tempdir().unwrap();
        let b = begin_with(&me, "/job", base.path(), Start::Snapshot).await.unwrap();
        let p = b.client();
        assert_eq!(p.read_data("/job/keep", 0, 10).await.unwrap(), canopy_client::data::DataRead::Inline(b"old".to_vec()));
        // Swap a and b; move x out and its old parent below it.
        p.rename("/job/a", "/job/t").await.unwrap();
        p.rename("/job/b", "/job/a").await.unwrap();
        p.rename("/job/t", "/job/b").await.unwrap();
        p.rename("/job/b/x", "/job/x").await.unwrap();
        p.rename("/job/b", "/job/x/b").await.unwrap();
        p.write_data("/job/keep", 0, b"new!", 4096, false).await.unwrap();
        p.chmod("/job/keep", 0o600).await.unwrap();
        p.unlink("/job/gone").await.unwrap();
        p.rename("/job/theirs", "/job/mine").await.unwrap();
        p.create("/job/x/b/new", 0o644).await.unwrap();
        let size = |n: u64| SetAttr { size: Some(n), ..SetAttr::default() };
        p.setattr("/job/empty", &size(0)).await.unwrap();
        p.setattr("/job/holes", &size(3)).await.unwrap();
        p.setattr("/job/holes", &size(6)).await.unwrap();
        p.link("/job/linked", "/job/x/linked2").await.unwrap();
        // Meanwhile /job/theirs is replaced by another file of the owner's.
        me.unlink("/job/theirs").await.unwrap();
        me.create("/job/theirs", 0o600).await.unwrap();
        // And someone lays a trap where the commit stages its moves.
        let other = root.as_user(Creds::user(1001, 1001));
        root.chmod("/job", 0o777).await.unwrap();
        let stage = format!("/job/.canopy-batch-{}", canopy_batch::id_text(b.meta.id));
        other.mkdir(&stage, 0o777).await.unwrap();
        let id = b.meta.id;
        drop(p);
        assert_eq!(commit(b, &me).await.err(), Some(Errno::EEXIST), "{mode}: the stage is not the owner's");
        other.rmdir(&stage).await.unwrap();
        root.chmod("/job", 0o755).await.unwrap();
        let report = commit(open(base.path(), id).unwrap(), &me).await.unwrap();
        let linked = [("/job/linked".to_string(), Errno::EMLINK), ("/job/x/linked2".to_string(), Errno::EMLINK)];
        assert_eq!(report.rejected, [vec![linked[0].clone(), ("/job/mine".to_string(), Errno::ESTALE)], vec![linked[1].clone()]].concat(), "{mode}");
        let names = |v: Vec<canopy_proto::DirEntry>| {
            let mut n: Vec<String> = v.into_iter().map(|e| e.name).collect();
            n.sort();
            n
        };
        assert_eq!(names(root.readdir("/job").await.unwrap()), ["a", "empty", "holes", "keep", "linked", "theirs", "x"], "{mode}: the stage is gone");
        let read = |path: &'static str| {
            let root = root.clone();
            async move {
                match root.read_data(path, 0, 100).await.unwrap() {
                    canopy_client::data::DataRead::Inline(d) => (d, root.stat(path).await.unwrap().size),
                    other => panic!("{other:?}"),
                }
            }
        };
        assert_eq!(read("/job/empty").await, (vec![], 0), "{mode}");
        assert_eq!(read("/job/holes").await, (b"abc\0\0\0".to_vec(), 6), "{mode}");
        assert_eq!(read("/job/linked").await, (b"abcdef".to_vec(), 6), "{mode}: a file linked in the batch stays");
        assert_eq!(names(root.readdir("/job/a").await.unwrap()), ["g"], "{mode}");
        assert_eq!(names(root.readdir("/job/x/b").await.unwrap()), ["f", "new"], "{mode}");
        assert_eq!(root.read_data("/job/keep", 0, 10).await.unwrap(), canopy_client::data::DataRead::Inline(b"new!".to_vec()));
        assert_eq!(root.stat("/job/keep").await.unwrap().mode & 0o7777, 0o600);
        assert_eq!(root.stat("/job/theirs").await.unwrap().mode & 0o7777, 0o600, "{mode}: the new file is untouched");
        assert_fsck_clean(&root, mode).await;
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
        let (_cluster, root, me) = job(mode, 0o777).await;
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
        assert_fsck_clean(&root, "").await;
    }
}

#[tokio::test]
async fn a_root_the_owner_may_not_write_is_refused_whole() {
    for mode in ["shardfs", "indexfs"] {
        let (_cluster, root, me) = job(mode, 0o755).await;
        root.mkdir("/sys", 0o755).await.unwrap();
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
        let (cluster, root, me) = job(mode, 0o755).await;
        let base = tempfile::tempdir().unwrap();
        let b = begin(&me, "/job", base.path()).await.unwrap();
        let id = b.meta.id;
        batch_of_files(&b, 300).await;
        b.close().await.unwrap();
        drop(b);
        let report = commit_after_server_1_died_applying(&cluster, mode, base.path(), id, &me).await;
        assert!(report.rejected.is_empty(), "{mode}: {:?}", report.rejected);
        assert!(report.files.landed_before > 0, "{mode}: server 1's share had landed");
        assert_eq!(report.files.made + report.files.landed_before, 300, "{mode}");
        let names = root.readdir("/job/out").await.unwrap();
        assert_eq!(names.len(), 300, "{mode}: each once");
        assert_fsck_clean(&root, "").await;
    }
}

/// [`job`], with the user's client on short leases (a client stopped inside
/// a mkdir leaves its locks until its lease ends).
async fn job_with_short_leases(mode: &'static str) -> (InProcCluster, Client, Client) {
    let (cluster, root, _) = job(mode, 0o755).await;
    let me = cluster.client_with_lease(200).as_user(user());
    (cluster, root, me)
}

/// Commits batch `id` through a client whose server 1 applies its share and
/// dies before answering (the commit fails), then again once it is back: the
/// second commit's report.
async fn commit_after_server_1_died_applying(cluster: &InProcCluster, mode: &'static str, base: &std::path::Path, id: u64, me: &Client) -> CommitReport {
    let faulty = Client::new(canopy_client::open_namespace(&canopy_client::cluster::ModeOptions::named(mode).unwrap(), canopy_client::Backend::Cluster(cluster.transport()), Default::default()).unwrap(), user());
    cluster.faults().die_after(1, "BatchApply");
    assert!(commit(open(base, id).unwrap(), &faulty).await.is_err());
    cluster.faults().revive(1);
    commit(open(base, id).unwrap(), me).await.unwrap()
}

/// Commits batch `id` stopped (its future dropped) after each of a growing
/// run of delays, then once whole if it is still there: its report then.
async fn commit_stopped_then_again(base: &std::path::Path, id: u64, me: &Client) -> Option<CommitReport> {
    for cut_ms in [0u64, 5, 10, 15, 20, 30, 45, 70, 100, 150, 220] {
        let Ok(b) = open(base, id) else { return None }; // a try finished it
        let _ = tokio::time::timeout(std::time::Duration::from_millis(cut_ms), commit(b, me)).await;
        // What the stopped commit had in flight ends and lets go of the private store.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let b = open(base, id).ok()?;
    Some(commit(b, me).await.unwrap())
}

#[tokio::test]
async fn a_commit_stopped_midway_by_its_client_finishes_when_run_again() {
    for mode in ["shardfs", "indexfs"] {
        let (_cluster, root, me) = job_with_short_leases(mode).await;
        let base = tempfile::tempdir().unwrap();
        let b = begin(&me, "/job", base.path()).await.unwrap();
        let id = b.meta.id;
        batch_of_files(&b, 3_000).await;
        b.close().await.unwrap();
        drop(b);
        if let Some(report) = commit_stopped_then_again(base.path(), id, &me).await {
            assert!(report.rejected.is_empty() && report.files.made <= 3_000, "{mode}: {report:?}");
        }
        assert_eq!(root.readdir("/job/out").await.unwrap().len(), 3_000, "{mode}: each once");
        assert_fsck_clean(&root, mode).await;
    }
}

/// Directory `dir` with files `f0`.. (`gone` of them) removed and made
/// again with files `g0`.. (`new` of them).
async fn remake(p: &Client, dir: &str, gone: usize, new: usize) {
    for i in 0..gone {
        p.unlink(&format!("{dir}/f{i}")).await.unwrap();
    }
    p.rmdir(dir).await.unwrap();
    p.mkdir(dir, 0o755).await.unwrap();
    for i in 0..new {
        p.create(&format!("{dir}/g{i}"), 0o644).await.unwrap();
    }
}

#[tokio::test]
async fn a_snapshot_commit_stopped_midway_finishes_when_run_again() {
    for mode in ["shardfs", "indexfs"] {
        let (_cluster, root, me) = job_with_short_leases(mode).await;
        me.mkdir("/job/in", 0o755).await.unwrap();
        me.mkdir("/job/old", 0o755).await.unwrap();
        for i in 0..200 {
            me.create(&format!("/job/in/f{i}"), 0o644).await.unwrap();
        }
        for i in 0..10 {
            me.create(&format!("/job/old/f{i}"), 0o644).await.unwrap();
        }
        let base = tempfile::tempdir().unwrap();
        let b = begin_with(&me, "/job", base.path(), Start::Snapshot).await.unwrap();
        let id = b.meta.id;
        // in → done; f0..f99 into a new directory; f100..f149 removed;
        // f150..f199 chmod'ed; 500 new files.
        let p = b.client();
        p.rename("/job/in", "/job/done").await.unwrap();
        p.mkdir("/job/out", 0o755).await.unwrap();
        for i in 0..200 {
            match i {
                0..=99 => p.rename(&format!("/job/done/f{i}"), &format!("/job/out/f{i}")).await.unwrap(),
                100..=149 => p.unlink(&format!("/job/done/f{i}")).await.unwrap(),
                _ => p.chmod(&format!("/job/done/f{i}"), 0o600).await.map(|_| ()).unwrap(),
            }
        }
        for i in 0..500 {
            p.create(&format!("/job/out/n{i}"), 0o644).await.unwrap();
        }
        remake(&p, "/job/old", 10, 100).await;
        b.close().await.unwrap();
        drop((p, b));
        if let Some(report) = commit_stopped_then_again(base.path(), id, &me).await {
            assert!(report.rejected.is_empty(), "{mode}: {:?}", report.rejected);
        }
        let mut top: Vec<String> = root.readdir("/job").await.unwrap().into_iter().map(|e| e.name).collect();
        top.sort();
        assert_eq!(top, ["done", "old", "out"], "{mode}");
        assert_eq!(root.readdir("/job/old").await.unwrap().len(), 100, "{mode}: the new old");
        assert_eq!(root.readdir("/job/out").await.unwrap().len(), 600, "{mode}: each once");
        let done = root.readdir("/job/done").await.unwrap();
        assert_eq!(done.len(), 50, "{mode}");
        for e in done {
            assert_eq!(root.stat(&format!("/job/done/{}", e.name)).await.unwrap().mode & 0o777, 0o600, "{mode}");
        }
        assert_fsck_clean(&root, mode).await;
    }
}

/// A directory of the snapshot removed and made again in the batch: a rerun
/// after a commit that got past the removal must not take the new directory
/// for someone else's.
#[tokio::test]
async fn a_rerun_knows_a_name_it_removed_and_made_again() {
    for mode in ["shardfs", "indexfs"] {
        let (cluster, root, me) = job(mode, 0o755).await;
        me.mkdir("/job/old", 0o755).await.unwrap();
        me.create("/job/old/f0", 0o644).await.unwrap();
        let base = tempfile::tempdir().unwrap();
        let b = begin_with(&me, "/job", base.path(), Start::Snapshot).await.unwrap();
        let id = b.meta.id;
        let p = b.client();
        remake(&p, "/job/old", 1, 300).await;
        b.close().await.unwrap();
        drop((p, b));
        // The first try removes and makes old, then a server dies applying.
        let report = commit_after_server_1_died_applying(&cluster, mode, base.path(), id, &me).await;
        assert!(report.rejected.is_empty(), "{mode}: {:?}", report.rejected);
        assert_eq!(root.readdir("/job/old").await.unwrap().len(), 300, "{mode}");
        assert_fsck_clean(&root, mode).await;
    }
}

/// What a batch carries for a regular file never names back-end contents:
/// a file landed by a user's batch gets a FID its server issues (bound to its
/// inode), not the one the private namespace gave it, so a batch cannot
/// point its files at another user's contents; and contents already in
/// back-end storage are refused (`EFBIG`), as for a modified base file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_lands_files_under_fids_the_servers_issue() {
    use canopy_client::batch::{land, open as record, DirFiles};
    use canopy_client::data::DataWrite;
    use canopy_proto::batch::BatchFile;
    use canopy_proto::msg::{FileData, Inode};
    for mode in ["shardfs", "indexfs"] {
        let (_cluster, root, me) = job(mode, 0o755).await;
        root.create("/victim", 0o600).await.unwrap();
        // The FID the victim's contents spill under (a spill asked for, not made).
        let DataWrite::Spill { fid: victim, .. } = root.write_data("/victim", 0, b"secret", 0, false).await.unwrap() else { panic!("a spill") };
        let file = |name: &str, fid, inline: Option<Vec<u8>>| {
            let size = inline.as_ref().map_or(6, |b| b.len() as u64);
            let attr = canopy_proto::Attr { ino: 0, kind: FileKind::File, mode: 0o644, uid: USER, gid: USER, size, nlink: 1, rdev: 0, atime: 1, mtime: 1, ctime: 1 };
            BatchFile { name: name.into(), inode: Inode { attr, target: None, data: Some(FileData { fid, inline }) } }
        };
        let batch = 0x5eed;
        record(&me, batch, "/job").await.unwrap();
        let files = vec![file("alias", victim, Some(b"mine".to_vec())), file("spilled", canopy_proto::Fid::new(1, 2), None)];
        let landed = land(&me, batch, &[DirFiles { dir: "/job".into(), files: files.clone() }]).await.unwrap();
        assert_eq!(landed.made, 1, "{mode}");
        assert_eq!(landed.rejected, vec![("/job/spilled".to_string(), Errno::EFBIG)], "{mode}");
        let ino = me.stat("/job/alias").await.unwrap().ino;
        // Spill it: the FID it spills under is the one the server issued.
        let DataWrite::Spill { fid, .. } = me.write_data("/job/alias", 0, b"x", 0, false).await.unwrap() else { panic!("a spill") };
        assert_ne!(fid, victim, "{mode}: landed under the FID the batch carried");
        assert_eq!(fid.counter(), ino, "{mode}: issued for its inode");
        // Landing the same files again (a commit run again) makes nothing twice.
        let again = land(&me, batch, &[DirFiles { dir: "/job".into(), files }]).await.unwrap();
        assert_eq!((again.made, again.landed_before), (0, 1), "{mode}");
        assert_fsck_clean(&root, mode).await;
    }
}

/// Each `canopy batch exec` opens the private namespace anew: a mkdir in a
/// later one gets an id of its own (its transaction number is not handed out
/// again), so it is made, and both directories land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_made_in_separate_openings_of_a_batch_each_land() {
    let (_cluster, root, me) = job("shardfs", 0o755).await;
    let base = tempfile::tempdir().unwrap();
    let id = begin(&me, "/job", base.path()).await.unwrap().meta.id;
    for name in ["a", "b", "c"] {
        let b = open(base.path(), id).unwrap();
        b.client().mkdir(&format!("/job/{name}"), 0o755).await.unwrap();
    }
    let report = commit(open(base.path(), id).unwrap(), &me).await.unwrap();
    assert_eq!((report.dirs_made, report.rejected.len()), (3, 0), "{:?}", report.rejected);
    assert_eq!(root.readdir("/job").await.unwrap().len(), 3);
    assert_fsck_clean(&root, "").await;
}

/// A private namespace is its user's to edit (its store is in their own
/// directory): an entry named `..` there would join to a path outside the
/// batch's root. The commit lands nothing outside the root, and lists what
/// it refused; a server refuses a file staged outside the batch's root too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_lands_outside_the_batchs_root() {
    use canopy_client::batch::{land, open as record, DirFiles};
    use canopy_proto::msg::{DirLookup, FileData, Inode, Record};
    use canopy_server::keys;
    use canopy_store::Batch;
    let (_cluster, root, me) = job("shardfs", 0o755).await;
    user_dir(&root, "/other", 0o777).await;
    let base = tempfile::tempdir().unwrap();
    let b = begin(&me, "/job", base.path()).await.unwrap();
    b.client().mkdir("/job/ok", 0o755).await.unwrap();
    let attr = canopy_proto::Attr { ino: 77, kind: FileKind::File, mode: 0o644, uid: USER, gid: USER, size: 0, nlink: 1, rdev: 0, atime: 1, mtime: 1, ctime: 1 };
    let file = Record::Inode(Inode { attr, target: None, data: Some(FileData { fid: canopy_proto::Fid::new(3, 3), inline: Some(Vec::new()) }) });
    let up = DirLookup { id: canopy_proto::msg::dir_id_of_txn(1 << 40).unwrap(), mode: 0o777, uid: USER, gid: USER };
    let mut w = Batch::new();
    // `/job/../other/planted`, and `/job/../escaped` as a file.
    w.put(keys::DIRS, keys::entry_key(canopy_server::ROOT_ID, ".."), keys::encode(&up));
    w.put(keys::ENTRIES, keys::entry_key(up.id, "planted"), keys::encode(&file));
    w.put(keys::ENTRIES, keys::entry_key(canopy_server::ROOT_ID, ".."), keys::encode(&file));
    let id = b.meta.id;
    drop(b);
    // Written into the private store as its user could, between two openings.
    let store = canopy_store::RocksStore::open(&base.path().join(canopy_batch::id_text(id)).join("store"), keys::ALL_CFS, canopy_store::Durability::Wal).unwrap();
    canopy_store::Store::write(&store, w).unwrap();
    drop(store);
    let report = commit(open(base.path(), id).unwrap(), &me).await.unwrap();
    assert!(report.rejected.iter().any(|(_, e)| *e == Errno::EXDEV), "listed: {:?}", report.rejected);
    assert!(root.readdir("/other").await.unwrap().is_empty(), "landed outside the root");
    assert_eq!(root.readdir("/").await.unwrap().len(), 2, "/job and /other only");
    assert_eq!(root.readdir("/job").await.unwrap().len(), 1);
    // The servers too: a file staged in a directory outside the batch's root.
    record(&me, 0xbad, "/job").await.unwrap();
    let Record::Inode(inode) = file else { unreachable!() };
    let staged = DirFiles { dir: "/other".into(), files: vec![canopy_proto::batch::BatchFile { name: "f".into(), inode }] };
    let landed = land(&me, 0xbad, &[staged]).await.unwrap();
    assert_eq!(landed.rejected, vec![("/other/f".to_string(), Errno::EXDEV)]);
    assert_fsck_clean(&root, "").await;
}
