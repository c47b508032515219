//! What ShardFS directory mutations send, counted per operation (the figures
//! `docs/performance.md` reports): a change to the protocol that adds a round
//! trip shows up here.

use canopy_client::Client;
use canopy_proto::FileKind;
use canopy_testkit::InProcCluster;

const SERVERS: u64 = 4;

/// RPCs `op` sent: (to servers, to the lock service).
async fn sent<T>(c: &Client, op: impl std::future::Future<Output = T>) -> (u64, u64) {
    let before = c.counters().snapshot();
    op.await;
    let d = c.counters().snapshot().since(&before);
    (d.per_server.iter().sum(), d.lockd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_directory_rename_is_a_check_and_an_apply_on_each_server() {
    let c = InProcCluster::memory(SERVERS as u32).client();
    c.mkdir("/p1", 0o755).await.unwrap();
    c.mkdir("/p2", 0o755).await.unwrap();
    for i in 0..8 {
        let (from, to) = (format!("/p1/d{i}"), format!("/p2/e{i}"));
        c.mkdir(&from, 0o750).await.unwrap();
        c.utimens(&from, Some(canopy_proto::TimeSet::At(i)), Some(canopy_proto::TimeSet::At(i))).await.unwrap();
        // Lock and unlock; a stat of the source (not when the caller saw a
        // directory); the check (which fences) and the apply on every server
        // (this client keeps no directory times: no posted updates of the
        // parents), all at once. Nothing to migrate; the fences of the
        // servers other than the destination's primary are lifted by posts
        // (the source's primary, which applied before the commit point, drops
        // the times it parked then).
        let unfences = SERVERS - 1;
        let (cost, stat) = if i % 2 == 0 { (sent(&c, c.rename(&from, &to)).await, 1) } else { (sent(&c, c.rename_dir(&from, &to)).await, 0) };
        assert_eq!(cost, (stat + 2 * SERVERS + unfences, 2), "{from} -> {to}");
        let s = c.stat(&to).await.unwrap();
        assert_eq!((s.kind, s.mode, s.mtime, s.nlink), (FileKind::Dir, 0o750, i, 2), "{to}: the times moved with it");
        c.create(&format!("{to}/f"), 0o644).await.unwrap();
    }
    let f = c.fsck().await.unwrap();
    assert!(f.is_clean(), "{:?}", f.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_with_files_migrates_them() {
    let c = InProcCluster::memory(SERVERS as u32).client();
    c.mkdir("/m", 0o755).await.unwrap();
    for i in 0..40 {
        c.create(&format!("/m/f{i}"), 0o644).await.unwrap();
    }
    let (servers, lockd) = sent(&c, c.rename("/m", "/n")).await;
    // Beyond the empty directory's: on each server a listing of what moves,
    // the copies and the drop, then the fences lifted.
    assert!(servers > 1 + 2 * SERVERS + 1 + 2 * SERVERS, "{servers}");
    assert_eq!(lockd, 2);
    for i in 0..40 {
        assert_eq!(c.stat(&format!("/n/f{i}")).await.unwrap().kind, FileKind::File);
    }
    let f = c.fsck().await.unwrap();
    assert!(f.is_clean(), "{:?}", f.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_as_a_directory_is_renamed_as_a_file() {
    let c = InProcCluster::memory(SERVERS as u32).client();
    c.mkdir("/d", 0o755).await.unwrap();
    for i in 0..8 {
        let (from, to) = (format!("/d/f{i}"), format!("/d/g{i}"));
        c.create(&from, 0o640).await.unwrap();
        // The hint is wrong: the source's primary says so at the check, and
        // the file moves with the fences its two primaries already hold.
        c.rename_dir(&from, &to).await.unwrap();
        assert_eq!(c.stat(&from).await.map(|a| a.kind), Err(canopy_proto::Errno::ENOENT));
        assert_eq!(c.stat(&to).await.map(|a| (a.kind, a.mode)), Ok((FileKind::File, 0o640)));
    }
    // Every fence was lifted, on every server: files made below the old
    // names (now directories), whatever their primaries, need no retry.
    let before = c.counters().snapshot().retries;
    for i in 0..8 {
        c.stat(&format!("/d/g{i}")).await.unwrap();
        c.mkdir(&format!("/d/f{i}"), 0o755).await.unwrap();
        for j in 0..8 {
            c.create(&format!("/d/f{i}/x{j}"), 0o600).await.unwrap();
        }
    }
    assert_eq!(c.counters().snapshot().retries, before, "a fence was left up");
    let f = c.fsck().await.unwrap();
    assert!(f.is_clean(), "{:?}", f.problems);
}
