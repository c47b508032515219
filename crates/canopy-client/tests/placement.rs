//! Where entries live: a server refuses a single-RPC operation on an entry
//! that belongs on another server (in every mode), and `fsck --repair`
//! mends what such requests left on a cluster whose servers did not refuse
//! them: entries on a server that is not their primary, a second file of one
//! name, a file under a directory's name that kept a mkdir off one replica.

use canopy_proto::msg::{dir_id_of_txn, At, DirLookup, IfExists, NewKind, Record};
use canopy_proto::placement;
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, FileKind, Request};
use canopy_server::keys::{self, ENTRIES};
use canopy_store::{Batch, Durability, RocksStore, Store};
use canopy_testkit::{assert_fsck_clean, InProcCluster};

/// How `mode` names entry `name` of directory `dir` (whose id is `id`) in a
/// single-RPC request.
fn at(mode: &str, dir: &str, id: u64, name: &str) -> At {
    match mode {
        "indexfs" => At::Entry { dir: id, name: name.into() },
        _ => At::Path(format!("{dir}/{name}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_sent_to_a_server_that_does_not_hold_its_name_is_refused() {
    for mode in ["shardfs", "indexfs", "giraffa"] {
        let cluster = InProcCluster::memory_mode(mode, 4);
        let c = cluster.client();
        let id = c.mkdir("/d", 0o777).await.unwrap().ino;
        for i in 0..16 {
            let name = format!("f{i}");
            let create = Request::Create { at: at(mode, "/d", id, &name), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
            let mut made = 0;
            for (s, server) in cluster.servers.iter().enumerate() {
                match server.handle(&Creds::root(), create.clone()) {
                    Ok(_) => made += 1,
                    Err(Errno::ENXIO | Errno::EREMOTE | Errno::EREMCHG) => {}
                    other => panic!("{mode}: {name} on server {s}: {other:?}"),
                }
            }
            assert!(made <= 1, "{mode}: {name} made on {made} servers");
            // Whatever was made is what every client finds: one name, or none.
            let listed = c.readdir("/d").await.unwrap().into_iter().filter(|e| e.name == name).count();
            assert_eq!(listed, made, "{mode}: {name}");
            assert_eq!(c.stat(&format!("/d/{name}")).await.is_ok(), made == 1, "{mode}: {name}");
        }
        assert_fsck_clean(&c, mode).await;
    }
}

/// A file record for `name`, as a server that took a create would store it.
fn planted(ino: u64) -> Vec<u8> {
    let attr = canopy_proto::Attr { ino, kind: FileKind::File, mode: 0o644, uid: 0, gid: 0, size: 0, nlink: 1, rdev: 0, atime: 1, mtime: 1, ctime: 1 };
    let data = Some(canopy_proto::msg::FileData { fid: canopy_proto::Fid::new(7, ino), inline: Some(Vec::new()) });
    keys::encode(&Record::Inode(canopy_proto::msg::Inode { attr, target: None, data }))
}

/// The lease of the client whose mkdir a misplaced file stops.
const LEASE_MS: u32 = 200;

/// A server other than `path`'s primary in a cluster of `n`.
fn not_primary(path: &str, n: u32) -> u32 {
    (placement::primary(&NsPath::parse(path).unwrap(), n) + 1) % n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_repair_mends_what_misplaced_creates_left() {
    let dir = tempfile::tempdir().unwrap();
    let n = 4;
    let cluster = InProcCluster::rocks(n, dir.path());
    let c = cluster.client();
    let d = c.mkdir("/d", 0o777).await.unwrap().ino;
    c.create("/d/dup", 0o644).await.unwrap();
    c.mkdir("/d/half", 0o755).await.unwrap();
    cluster.crash();
    drop(c);
    // What creates sent to the wrong servers left, written as those servers
    // did: a file away from its primary, a second "dup", and a file under
    // the name a directory is about to take.
    for (name, ino) in [("lost", 0x7001), ("dup", 0x7002), ("sub", 0x7003)] {
        let server = not_primary(&format!("/d/{name}"), n);
        let store = RocksStore::open(&dir.path().join(format!("server-{server}")), keys::ALL_CFS, Durability::Wal).unwrap();
        let mut b = Batch::new();
        b.put(ENTRIES, keys::entry_key(d, name), planted(ino));
        store.write(b).unwrap();
    }
    // Replicas' tables that differ: a directory one replica lacks, and one
    // that only a replica holds (its primary, the commit point, has none).
    for (name, present) in [("half", false), ("ghost", true)] {
        let server = not_primary(&format!("/d/{name}"), n);
        let store = RocksStore::open(&dir.path().join(format!("server-{server}")), keys::ALL_CFS, Durability::Wal).unwrap();
        let mut b = Batch::new();
        match present {
            true => b.put(keys::DIRS, keys::entry_key(d, name), keys::encode(&DirLookup { id: dir_id_of_txn(999).unwrap(), mode: 0o755, uid: 0, gid: 0 })),
            false => b.delete(keys::DIRS, keys::entry_key(d, name)),
        }
        store.write(b).unwrap();
    }
    let cluster = InProcCluster::rocks_manual("shardfs", n, dir.path());
    let c = cluster.client();
    // The mkdir meets the file on one replica: committed on its primary,
    // left to recovery, which the file stops too.
    assert_eq!(cluster.client_with_lease(LEASE_MS).mkdir("/d/sub", 0o755).await.map(|_| ()), Err(Errno::EIO));
    let past_lease = || cluster.pass(LEASE_MS as u64 + 100);
    past_lease().await;
    assert!(cluster.client_with_lease(LEASE_MS).repair().await.is_err(), "recovery alone cannot finish the mkdir");
    past_lease().await;
    let before = c.fsck().await.unwrap();
    assert!(!before.problems.is_empty(), "fsck sees what was left");
    assert_eq!(c.repair_placement().await, Ok(5), "three entries moved or dropped, the mkdir recovered, two replicas' tables synced");
    assert_fsck_clean(&c, "after --repair").await;
    let mut names: Vec<(String, FileKind)> = c.readdir("/d").await.unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let expected = [("dup", FileKind::File), ("half", FileKind::Dir), ("lost", FileKind::File), ("sub", FileKind::Dir)];
    assert_eq!(names, expected.map(|(n, k)| (n.to_string(), k)));
    assert_eq!(c.stat("/d/lost").await.unwrap().ino, 0x7001, "moved to its primary");
    assert_ne!(c.stat("/d/dup").await.unwrap().ino, 0x7002, "the primary's file kept");
    // The namespace works there again.
    c.mkdir("/d/sub/x", 0o755).await.unwrap();
    c.create("/d/sub/x/f", 0o644).await.unwrap();
    c.rmdir("/d/sub/x").await.unwrap_err();
    c.unlink("/d/sub/x/f").await.unwrap();
    c.rmdir("/d/sub/x").await.unwrap();
    c.rmdir("/d/sub").await.unwrap();
    assert_fsck_clean(&c, "at the end").await;
}
