//! Requests that would break a server's invariants are refused, and nothing a
//! request carries reaches a panic.

use canopy_proto::msg::{dir_id_of_txn, DirLookup};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_server::keys::ALL_CFS;
use canopy_server::{MetaServer, ServerConfig};
use canopy_store::MemStore;
use std::sync::Arc;

fn server() -> MetaServer {
    MetaServer::open(ServerConfig { index: 0, servers: 2 }, Arc::new(MemStore::new(ALL_CFS))).unwrap()
}

fn dir(id: u64) -> Option<DirLookup> {
    Some(DirLookup { id, mode: 0o755, uid: 0, gid: 0 })
}

#[test]
fn a_directory_id_in_use_is_refused_everywhere_it_could_enter() {
    let s = server();
    let root = Creds::root();
    let id = dir_id_of_txn(77).unwrap();
    assert!(s.handle(&root, Request::DirSync { path: "/a".into(), want: dir(id), txn: None }).is_ok());
    assert_eq!(s.handle(&root, Request::DirSync { path: "/b".into(), want: dir(id), txn: None }), Err(Errno::EEXIST));
    assert_eq!(s.handle(&root, Request::DirSync { path: "/a/a".into(), want: dir(id), txn: None }), Err(Errno::EEXIST), "its own child");
    assert_eq!(s.handle(&root, Request::DirSync { path: "/c".into(), want: dir(1), txn: None }), Err(Errno::EEXIST), "the root's id");
    let mkdir = |id| Request::Mkdir { path: "/d".into(), mode: 0o755, id, fence: None };
    assert_eq!(s.handle(&root, mkdir(id)), Err(Errno::EIO), "an id the lock service handed out twice");
    assert_eq!(s.handle(&root, mkdir(1)), Err(Errno::EINVAL), "not a transaction's id");
    assert_eq!(s.handle(&root, mkdir(1 << 48)), Err(Errno::EINVAL), "a server's id space");
    // Resolution through every name still works, and fsck sees one tree.
    for p in ["/a/x", "/b/x", "/c/x", "/d/x", "/a/a/x"] {
        let r = s.handle(&root, Request::Stat { at: p.into() });
        assert!(matches!(r, Err(Errno::ENOENT | Errno::EREMOTE | Errno::ENXIO)), "{p}: {r:?}");
    }
    let Ok(Reply::Fsck(report)) = s.handle(&root, Request::Fsck) else { panic!("fsck") };
    assert_eq!(report.dirs, 2);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A replica's mkdir step fences the new directory until its transaction's
/// unfence; a step that applied nothing leaves no fence.
#[test]
fn a_replicas_mkdir_fences_the_new_directory_until_unfenced() {
    let s = server();
    let root = Creds::root();
    let mkdir = |path: &str, txn| Request::Mkdir { path: path.into(), mode: 0o755, id: dir_id_of_txn(txn).unwrap(), fence: Some(txn) };
    let stat_below = |p: &str| s.handle(&root, Request::Stat { at: format!("{p}/f").as_str().into() });
    assert!(matches!(s.handle(&root, mkdir("/x", 5)), Ok(Reply::Dir(_) | Reply::Attr(_))));
    assert_eq!(stat_below("/x"), Err(Errno::EAGAIN));
    assert_eq!(s.handle(&root, mkdir("/x", 5)).map(|_| ()), Ok(()), "a step sent again is answered again");
    assert_eq!(s.handle(&root, Request::Unfence { txn: 5 }), Ok(Reply::Unit));
    assert!(matches!(stat_below("/x"), Err(Errno::ENOENT | Errno::EREMOTE | Errno::ENXIO)));
    assert_eq!(s.handle(&root, mkdir("/x", 6)), Err(Errno::EEXIST));
    assert_eq!(s.handle(&root, mkdir("/none/y", 7)).map(|_| ()), Err(Errno::EREMOTE));
    for p in ["/x", "/none/y"] {
        assert!(matches!(stat_below(p), Err(Errno::ENOENT | Errno::EREMOTE | Errno::ENXIO)), "{p}: a refused step left its fence");
    }
}

/// A server that starts fences what the open transactions of the kinds that
/// fence may have fenced before it stopped, under the id their fences carry
/// (the original, though a recoverer holds the transaction under another),
/// and nothing for kinds that never fence (their own steps would meet it).
#[test]
fn a_starting_server_fences_what_open_transactions_may_have_fenced() {
    use canopy_proto::msg::{Intent, LockMode, TxnInfo};
    let s = server();
    let root = Creds::root();
    let open = |txn, origin, intent: Intent| {
        let locks = intent.paths().into_iter().map(|p| (p.to_string(), LockMode::Write)).collect();
        TxnInfo { txn, origin, intent, locks, expires_in_ms: 1000 }
    };
    assert!(s.needs_open_transactions());
    s.open_transactions(&[
        open(9, 5, Intent::Mkdir { path: "/m".into() }),
        open(10, 10, Intent::Rename { src: "/r".into(), dst: "/s".into() }),
        open(11, 11, Intent::Link { src: "/l".into(), dst: "/k".into() }),
        open(12, 12, Intent::Rmdir { path: "/x".into() }),
    ])
    .unwrap();
    let stat = |p: &str| s.handle(&root, Request::Stat { at: p.into() });
    for p in ["/m/f", "/r", "/s/f"] {
        assert_eq!(stat(p), Err(Errno::EAGAIN), "{p}");
    }
    for p in ["/l", "/k", "/x/f"] {
        assert!(matches!(stat(p), Err(Errno::ENOENT | Errno::EREMOTE | Errno::ENXIO)), "{p}: fenced for a kind that never fences");
    }
    assert_eq!(s.handle(&root, Request::Unfence { txn: 9 }), Ok(Reply::Unit), "the recoverer's id");
    assert_eq!(stat("/m/f"), Err(Errno::EAGAIN), "lifted by an id its fence never carried");
    s.handle(&root, Request::Unfence { txn: 5 }).unwrap();
    assert!(matches!(stat("/m/f"), Err(Errno::ENOENT | Errno::EREMOTE | Errno::ENXIO)));
}

/// A data directory of another key layout is refused with a message naming both.
#[test]
fn a_store_of_another_layout_is_refused() {
    let store = Arc::new(MemStore::new(ALL_CFS));
    drop(MetaServer::open(ServerConfig { index: 0, servers: 2 }, store.clone()).unwrap());
    let mut b = canopy_store::Batch::new();
    b.put(canopy_server::keys::META, canopy_store::LAYOUT_KEY.to_vec(), 99u32.to_be_bytes().to_vec());
    canopy_store::Store::write(&*store, b).unwrap();
    let err = MetaServer::open(ServerConfig { index: 0, servers: 2 }, store).err().unwrap();
    assert!(err.contains("layout version 99, but this program reads version 1"), "{err}");
}

/// Times come from the server's clock: a manual one makes them exact.
#[test]
fn file_times_come_from_the_injected_clock() {
    use canopy_proto::clock::ManualClock;
    use canopy_proto::msg::{IfExists, NewKind};
    let clock = ManualClock::new();
    clock.advance(1_000);
    let s = MetaServer::open_with_clock(ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS)), clock.clone()).unwrap();
    let root = Creds::root();
    let create = Request::Create { at: "/f".into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
    let Ok(Reply::Attr(a)) = s.handle(&root, create) else { panic!("create") };
    assert_eq!((a.mtime, a.ctime), (1_000_000_000, 1_000_000_000));
    clock.advance(1_500);
    let Ok(Reply::Attr(a)) = s.handle(&root, Request::SetAttr { at: "/f".into(), set: canopy_proto::SetAttr::size(3) }) else { panic!("truncate") };
    assert_eq!((a.mtime, a.ctime), (2_500_000_000, 2_500_000_000));
}

/// A mutation held inside the server (its locks taken) blocks neither a stat nor
/// a mutation in another directory; one in its own directory waits for it.
#[test]
fn a_held_mutation_blocks_only_its_own_directory() {
    use canopy_proto::msg::{IfExists, NewKind};
    use std::sync::mpsc;
    use std::time::Duration;
    let s = Arc::new(server());
    let root = Creds::root();
    let dir = |id: u64| Request::DirSync { path: format!("/d{id}"), want: Some(DirLookup { id, mode: 0o777, uid: 0, gid: 0 }), txn: None };
    s.handle(&root, dir(100)).unwrap();
    s.handle(&root, dir(101)).unwrap();
    let create = |p: &str| Request::Create { at: p.into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
    // The hook parks the first mutation of /d100 until released.
    let (parked_tx, parked_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(Some((parked_tx, release_rx)));
    s.set_mutation_hook(Some(Arc::new(move |paths: &[String]| {
        if paths.iter().any(|p| p.starts_with("/d100/")) {
            if let Some((parked, release)) = gate.lock().unwrap().take() {
                parked.send(()).unwrap();
                release.recv().unwrap();
            }
        }
    })));
    let held = {
        let s = s.clone();
        std::thread::spawn(move || s.handle(&Creds::root(), create("/d100/held")))
    };
    parked_rx.recv_timeout(Duration::from_secs(5)).expect("the first create holds its locks");
    // Another directory: a mutation and a stat complete while it is held.
    let (done_tx, done_rx) = mpsc::channel();
    let other = {
        let (s, done_tx) = (s.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let r = s.handle(&Creds::root(), create("/d101/free"));
            let st = s.handle(&Creds::root(), Request::Stat { at: "/d101/free".into() });
            done_tx.send((r.is_ok(), st.is_ok())).unwrap();
        })
    };
    assert_eq!(done_rx.recv_timeout(Duration::from_secs(5)), Ok((true, true)), "blocked by another directory's mutation");
    // Its own directory: a second create waits until the first is released.
    let same = {
        let (s, done_tx) = (s.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let r = s.handle(&Creds::root(), create("/d100/second"));
            done_tx.send((r.is_ok(), true)).unwrap();
        })
    };
    assert!(done_rx.recv_timeout(Duration::from_millis(200)).is_err(), "one directory's mutations take turns");
    release_tx.send(()).unwrap();
    assert_eq!(done_rx.recv_timeout(Duration::from_secs(5)), Ok((true, true)));
    assert!(held.join().unwrap().is_ok());
    other.join().unwrap();
    same.join().unwrap();
    let Ok(Reply::Fsck(report)) = s.handle(&root, Request::Fsck) else { panic!("fsck") };
    assert_eq!((report.files, report.problems.len()), (3, 0), "{:?}", report.problems);
}

/// A request may name an entry by (directory id, name) instead of its path: it
/// finds the same entry, with the same search checks on the directory's
/// ancestors, and a bad id or name is an errno.
#[test]
fn an_entry_is_reached_by_directory_id_and_name_as_by_path() {
    use canopy_proto::msg::{At, IfExists, NewKind};
    let s = MetaServer::open(ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS))).unwrap();
    let root = Creds::root();
    // The primary's mkdir answers the new directory's attributes.
    let Ok(Reply::Attr(top)) = s.handle(&root, Request::Mkdir { path: "/top".into(), mode: 0o700, id: dir_id_of_txn(1).unwrap(), fence: None }) else { panic!("mkdir") };
    let Ok(Reply::Attr(sub)) = s.handle(&root, Request::Mkdir { path: "/top/sub".into(), mode: 0o777, id: dir_id_of_txn(2).unwrap(), fence: None }) else { panic!("mkdir") };
    let Ok(Reply::Attr(sub_stat)) = s.handle(&root, Request::Stat { at: "/top/sub".into() }) else { panic!("stat") };
    assert_eq!(sub, sub_stat, "mkdir answers what a stat then says, times included");
    let entry = |name: &str| At::Entry { dir: sub.ino, name: name.into() };
    let create = Request::Create { at: entry("f"), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
    let Ok(Reply::Attr(made)) = s.handle(&root, create) else { panic!("create by entry") };
    let Ok(Reply::Attr(by_path)) = s.handle(&root, Request::Stat { at: "/top/sub/f".into() }) else { panic!("stat by path") };
    assert_eq!(made, by_path);
    let Ok(Reply::Attr(by_entry)) = s.handle(&root, Request::Stat { at: entry("f") }) else { panic!("stat by entry") };
    assert_eq!(by_entry, by_path);
    let Ok(Reply::Attr(d)) = s.handle(&root, Request::Stat { at: At::Entry { dir: top.ino, name: "sub".into() } }) else { panic!("dir") };
    assert_eq!(d.ino, sub.ino);
    // /top is 0700 root's: a user may not search it, however the entry is named.
    let user = Creds::user(1000, 1000);
    assert_eq!(s.handle(&user, Request::Stat { at: "/top/sub/f".into() }), Err(Errno::EACCES));
    assert_eq!(s.handle(&user, Request::Stat { at: entry("f") }), Err(Errno::EACCES));
    assert_eq!(s.handle(&user, Request::Unlink { at: entry("f") }), Err(Errno::EACCES));
    assert_eq!(s.handle(&root, Request::Stat { at: At::Entry { dir: 0xdead, name: "f".into() } }), Err(Errno::ENOENT));
    for bad in ["", ".", "..", "a/b"] {
        assert_eq!(s.handle(&root, Request::Stat { at: entry(bad) }), Err(Errno::EINVAL), "{bad:?}");
    }
    assert_eq!(s.handle(&root, Request::Unlink { at: entry("f") }).map(|_| ()), Ok(()));
    assert_eq!(s.handle(&root, Request::Stat { at: "/top/sub/f".into() }), Err(Errno::ENOENT));
}

/// A store remembers the mode that made it; a server of another mode, or of a
/// mode this build does not know, refuses to start and says why.
#[test]
fn a_store_of_another_mode_and_an_unknown_mode_are_refused() {
    use canopy_proto::clock::SystemClock;
    let cfg = ServerConfig { index: 0, servers: 1 };
    let store = Arc::new(MemStore::new(ALL_CFS));
    let s = MetaServer::open_mode("shardfs", cfg, store.clone(), SystemClock::shared()).unwrap();
    assert_eq!(s.mode_name(), "shardfs");
    drop(s);
    let err = MetaServer::open_mode("giraffe", cfg, store.clone(), SystemClock::shared()).err().unwrap();
    assert!(err.contains("unknown namespace mode \"giraffe\"") && err.contains("shardfs"), "{err}");
    let mut b = canopy_store::Batch::new();
    b.put(canopy_server::keys::META, canopy_server::keys::META_MODE.to_vec(), b"indexfs".to_vec());
    canopy_store::Store::write(&*store, b).unwrap();
    let err = MetaServer::open_mode("shardfs", cfg, store, SystemClock::shared()).err().unwrap();
    assert!(err.contains("made by a server of mode indexfs, not shardfs"), "{err}");
    // An IndexFS store of an earlier layout (no layout record) is refused too.
    let store = Arc::new(MemStore::new(ALL_CFS));
    drop(MetaServer::open_mode("indexfs", cfg, store.clone(), SystemClock::shared()).unwrap());
    drop(MetaServer::open_mode("indexfs", cfg, store.clone(), SystemClock::shared()).unwrap());
    let mut b = canopy_store::Batch::new();
    b.delete(canopy_server::keys::META, b"indexfs_layout".to_vec());
    canopy_store::Store::write(&*store, b).unwrap();
    let err = MetaServer::open_mode("indexfs", cfg, store, SystemClock::shared()).err().unwrap();
    assert!(err.contains("IndexFS layout version 1") && err.contains("reads version 2"), "{err}");
}

/// IndexFS: a chmod of a directory another client holds a lease on waits until
/// that lease runs out (by the server's clock, moved by hand here); meanwhile
/// lookups of it are answered uncacheable, and the mutating client's own lease
/// does not hold it up.
#[test]
fn an_indexfs_chmod_waits_out_other_clients_leases_only() {
    use canopy_proto::clock::ManualClock;
    use canopy_proto::SetAttr;
    use std::sync::mpsc;
    use std::time::Duration;
    let clock = ManualClock::new();
    let s = Arc::new(
        MetaServer::open_mode("indexfs", ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS)), clock.clone()).unwrap(),
    );
    let root = Creds::root();
    let Ok(Reply::Dir(d)) = s.handle(&root, Request::IxMkdir { dir: 1, name: "d".into(), mode: 0o755, txn: None }) else { panic!("mkdir") };
    s.handle(&root, Request::IxMkHeader { lookup: d.clone(), parent: 1, depth: 1, txn: None }).unwrap();
    let lookup = |client: u64| match s.handle(&root, Request::IxLookup { dir: 1, name: "d".into(), depth: 1, client }) {
        Ok(Reply::IxEntry { lease_ms, .. }) => lease_ms,
        other => panic!("{other:?}"),
    };
    // Client 7 alone holds a lease: its own chmod does not wait.
    assert_eq!(lookup(7), 1000);
    let chmod = |client: u64, mode: u32| Request::IxDirSetAttr { dir: 1, name: "d".into(), set: SetAttr::mode(mode), client, txn: None };
    assert!(matches!(s.handle(&root, chmod(7, 0o700)), Ok(Reply::Attr(a)) if a.mode & 0o7777 == 0o700));
    // Client 8's lease holds up client 7's next chmod until it runs out.
    assert_eq!(lookup(8), 1000);
    let (tx, rx) = mpsc::channel();
    let s2 = s.clone();
    let t = std::thread::spawn(move || tx.send(s2.handle(&Creds::root(), chmod(7, 0o750))).unwrap());
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "waits for client 8's lease");
    assert_eq!(lookup(9), 0, "not cacheable while a mutation waits");
    clock.advance(999);
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "1 ms of the lease is left");
    clock.advance(1);
    let done = rx.recv_timeout(Duration::from_secs(5)).expect("the lease ran out");
    assert!(matches!(&done, Ok(Reply::Attr(a)) if a.mode & 0o7777 == 0o750), "{done:?}");
    t.join().unwrap();
    assert_eq!(lookup(9), 1000, "cacheable again");
    let Ok(Reply::Stats(st)) = s.handle(&root, Request::Stats) else { panic!("stats") };
    assert!(st.counters.contains(&("lease_waits".into(), 1)), "{:?}", st.counters);
}

/// A directory rename's source primary parks the times it drops until the
/// transaction ends: an unfence drops them, an undo takes them back, and a
/// start keeps them for a transaction still open and drops them otherwise.
/// fsck reports times parked for a transaction with no fence up.
#[test]
fn a_renames_source_primary_parks_the_times_it_drops_until_the_transaction_ends() {
    use canopy_proto::msg::{Intent, LockMode, RenameDirStep, TxnInfo};
    use canopy_proto::path::NsPath;
    use canopy_proto::placement::primary;
    let cfg = ServerConfig { index: 0, servers: 2 };
    let on = |want: u32, stem: &str| (0..100).map(|i| format!("/{stem}{i}")).find(|p| primary(&NsPath::parse(p).unwrap(), 2) == want).unwrap();
    let (src, dst) = (on(0, "s"), on(1, "d"));
    let root = Creds::root();
    let store = Arc::new(MemStore::new(ALL_CFS));
    let s = MetaServer::open(cfg, store.clone()).unwrap();
    let rename = |s: &MetaServer, from: &str, to: &str, step| s.handle(&root, Request::RenameDir { src: from.into(), dst: to.into(), step });
    let fsck = |s: &MetaServer| match s.handle(&root, Request::Fsck) {
        Ok(Reply::Fsck(r)) => r.problems,
        other => panic!("fsck: {other:?}"),
    };
    let times_at = |s: &MetaServer, p: &str| match s.handle(&root, Request::Stat { at: p.into() }) {
        Ok(Reply::Attr(a)) => a.mtime,
        other => panic!("stat {p}: {other:?}"),
    };
    // A rename of `src` (times here) to `dst` (times on server 1), applied
    // here by transaction `txn` before its commit point answered.
    let apply = |s: &MetaServer, txn: u64| {
        let Ok(Reply::RenameChecked { times, .. }) = rename(s, &src, &dst, RenameDirStep::Check { txn }) else { panic!("check") };
        assert!(times.is_some(), "the source's primary has its times");
        rename(s, &src, &dst, RenameDirStep::Apply { times, unfence: None, txn: Some(txn) }).unwrap();
        assert_eq!(fsck(s), Vec::<String>::new(), "parked while the transaction's fence is up");
    };
    let undo = |s: &MetaServer, txn: u64| rename(s, &dst, &src, RenameDirStep::Undo { txn });
    let mkdir = Request::Mkdir { path: src.clone(), mode: 0o755, id: dir_id_of_txn(3).unwrap(), fence: None };
    s.handle(&root, mkdir).unwrap();
    assert!(times_at(&s, &src) > 0);

    // Committed: the unfence drops what was parked; a step of the
    // transaction that comes after its fence was lifted is refused.
    apply(&s, 5);
    s.handle(&root, Request::Unfence { txn: 5 }).unwrap();
    assert_eq!(fsck(&s), Vec::<String>::new(), "the times went to server 1");
    assert_eq!(undo(&s, 5), Err(Errno::ESTALE));
    assert_eq!(rename(&s, &dst, &src, RenameDirStep::Apply { times: None, unfence: None, txn: Some(5) }), Err(Errno::ESTALE));
    assert!(matches!(s.handle(&root, Request::Stat { at: src.as_str().into() }), Err(Errno::ENOENT)), "the late steps changed nothing");

    // Rolled back: the undo takes back the times its own transaction parked.
    // Transaction 11 committed and its unfence never came (its fence and
    // its parked times stay); 12 renamed the directory back with other
    // times; 13 parks those and is undone.
    let s = MetaServer::open(cfg, Arc::new(MemStore::new(ALL_CFS))).unwrap();
    s.handle(&root, Request::Mkdir { path: src.clone(), mode: 0o755, id: dir_id_of_txn(3).unwrap(), fence: None }).unwrap();
    apply(&s, 11);
    rename(&s, &dst, &src, RenameDirStep::Check { txn: 12 }).unwrap();
    let newer = canopy_proto::msg::DirTimes { atime: 7, mtime: 8, ctime: 9 };
    rename(&s, &dst, &src, RenameDirStep::Apply { times: Some(newer), unfence: None, txn: Some(12) }).unwrap();
    s.handle(&root, Request::Unfence { txn: 12 }).unwrap();
    apply(&s, 13);
    undo(&s, 13).unwrap();
    s.handle(&root, Request::Unfence { txn: 13 }).unwrap();
    assert_eq!(fsck(&s), Vec::<String>::new(), "11's fence is still up");
    s.handle(&root, Request::Unfence { txn: 11 }).unwrap();
    assert_eq!(times_at(&s, &src), 8, "the times transaction 13 parked, not 11's");
    assert_eq!(fsck(&s), Vec::<String>::new());

    // A start: kept for a transaction still open (under its original id), dropped for one that ended.
    let store = Arc::new(MemStore::new(ALL_CFS));
    let s = MetaServer::open(cfg, store.clone()).unwrap();
    s.handle(&root, Request::Mkdir { path: src.clone(), mode: 0o755, id: dir_id_of_txn(3).unwrap(), fence: None }).unwrap();
    apply(&s, 7);
    drop(s);
    let open = TxnInfo { txn: 8, origin: 7, intent: Intent::Rename { src: src.clone(), dst: dst.clone() }, locks: vec![(src.clone(), LockMode::Write)], expires_in_ms: 1000 };
    let restarted = MetaServer::open(cfg, store.clone()).unwrap();
    restarted.open_transactions(std::slice::from_ref(&open)).unwrap();
    undo(&restarted, 7).unwrap();
    restarted.handle(&root, Request::Unfence { txn: 7 }).unwrap();
    assert!(times_at(&restarted, &src) > 0, "an undo after the start took the times back");
    assert_eq!(fsck(&restarted), Vec::<String>::new());
    apply(&restarted, 9);
    drop(restarted);
    let restarted = MetaServer::open(cfg, store).unwrap();
    let parked_for_ended = fsck(&restarted);
    assert!(parked_for_ended.iter().any(|p| p.contains("parked for transaction 9")), "{parked_for_ended:?}");
    restarted.open_transactions(&[]).unwrap();
    assert_eq!(fsck(&restarted), Vec::<String>::new(), "dropped at the start");
}

/// Once recovery revokes a transaction here, the coordinator's steps that
/// name it are refused (a mkdir's, named by the directory id, with or
/// without a fence; an rmdir's; a directory setattr's; a fence; a rename's
/// check and apply) and change nothing, also after a restart; other
/// transactions' steps and recovery's own (an undo, an unfence) go on.
#[test]
fn a_revoked_transactions_late_steps_change_nothing() {
    use canopy_proto::msg::{Intent, LockMode, RenameDirStep, TxnInfo};
    use canopy_proto::SetAttr;
    let cfg = ServerConfig { index: 0, servers: 2 };
    let root = Creds::root();
    let store = Arc::new(MemStore::new(ALL_CFS));
    let s = MetaServer::open(cfg, store.clone()).unwrap();
    let mkdir = |path: &str, txn: u64, fence: Option<u64>| Request::Mkdir { path: path.into(), mode: 0o755, id: dir_id_of_txn(txn).unwrap(), fence };
    let probe = |s: &MetaServer, path: &str| match s.handle(&root, Request::DirProbe { path: path.into() }) {
        Ok(Reply::Probe(p)) => p,
        other => panic!("probe {path}: {other:?}"),
    };
    let rename = |s: &MetaServer, from: &str, to: &str, step| s.handle(&root, Request::RenameDir { src: from.into(), dst: to.into(), step });
    s.handle(&root, mkdir("/a", 2, None)).unwrap();
    s.handle(&root, mkdir("/b", 3, None)).unwrap();
    // Transaction 9 renames /b to /c: checked (fenced) and applied here,
    // then its coordinator dies; recovery revokes it and undoes the apply.
    rename(&s, "/b", "/c", RenameDirStep::Check { txn: 9 }).unwrap();
    rename(&s, "/b", "/c", RenameDirStep::Apply { times: None, unfence: None, txn: Some(9) }).unwrap();
    for txn in [4, 5, 6, 7, 8, 9] {
        s.handle(&root, Request::Revoke { txn }).unwrap();
    }
    s.handle(&root, Request::Revoke { txn: 9 }).unwrap();

    let refused = |s: &MetaServer| {
        let late = [
            mkdir("/m", 4, None),
            mkdir("/m", 4, Some(4)),
            Request::Rmdir { path: "/a".into(), txn: 5 },
            Request::DirSetAttr { path: "/a".into(), set: SetAttr::mode(0o700), txn: 6 },
            Request::Fence { txn: 7, paths: vec!["/a".into()] },
            Request::RenameDir { src: "/a".into(), dst: "/z".into(), step: RenameDirStep::Check { txn: 8 } },
            Request::RenameDir { src: "/c".into(), dst: "/b".into(), step: RenameDirStep::Apply { times: None, unfence: None, txn: Some(9) } },
            Request::DirSync { path: "/a".into(), want: None, txn: Some(5) },
        ];
        for req in late {
            assert_eq!(s.handle(&root, req.clone()), Err(Errno::ESTALE), "{req:?}");
        }
        assert_eq!(probe(s, "/m"), None, "no late mkdir");
        assert_eq!(probe(s, "/a").map(|l| l.mode & 0o777), Some(0o755), "no late rmdir or setattr");
        assert_eq!(probe(s, "/z"), None, "no late rename");
        for p in ["/a/f", "/m/f"] {
            assert_ne!(s.handle(&root, Request::Stat { at: p.into() }), Err(Errno::EAGAIN), "a late fence over {p}");
        }
    };
    refused(&s);
    // A file rename's steps: within this server, and the insert of one
    // across servers (its record read by `RenameOut`).
    use canopy_proto::msg::{IfExists, NewKind};
    use canopy_proto::path::NsPath;
    use canopy_proto::placement::primary;
    let here: Vec<String> = (0..).map(|i| format!("/a/f{i}")).filter(|p| primary(&NsPath::parse(p).unwrap(), 2) == 0).take(2).collect();
    let create = Request::Create { at: here[0].as_str().into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
    s.handle(&root, create).unwrap();
    let (from, to) = (here[0].as_str(), here[1].as_str());
    assert_eq!(s.handle(&root, Request::RenameLocal { src: from.into(), dst: to.into(), txn: Some(4) }), Err(Errno::ESTALE));
    let Ok(Reply::Record(record)) = s.handle(&root, Request::RenameOut { src: from.into(), dst: to.into() }) else { panic!("rename out") };
    assert_eq!(s.handle(&root, Request::RenameIn { src: from.into(), dst: to.into(), record, txn: Some(4) }), Err(Errno::ESTALE));
    assert!(s.handle(&root, Request::Stat { at: from.into() }).is_ok());
    assert_eq!(s.handle(&root, Request::Stat { at: to.into() }), Err(Errno::ENOENT), "a late file rename step landed");
    s.handle(&root, Request::RenameLocal { src: from.into(), dst: to.into(), txn: Some(10) }).unwrap();
    // A transaction not revoked goes on.
    s.handle(&root, mkdir("/n", 10, Some(10))).unwrap();
    s.handle(&root, Request::Unfence { txn: 10 }).unwrap();
    assert!(probe(&s, "/n").is_some());
    drop(s);

    // After a restart, with 9 still open (its fence put up again): still
    // refused; recovery's undo and unfence go on.
    let restarted = MetaServer::open(cfg, store).unwrap();
    let open = TxnInfo { txn: 12, origin: 9, intent: Intent::Rename { src: "/b".into(), dst: "/c".into() }, locks: vec![("/b".into(), LockMode::Write)], expires_in_ms: 1000 };
    restarted.open_transactions(std::slice::from_ref(&open)).unwrap();
    assert_eq!(restarted.handle(&root, Request::Stat { at: "/c/f".into() }), Err(Errno::EAGAIN), "9's fence is up again");
    refused(&restarted);
    rename(&restarted, "/c", "/b", RenameDirStep::Undo { txn: 9 }).unwrap();
    // Recovery's roll forward is let through as well while 9's fence is up.
    rename(&restarted, "/b", "/c", RenameDirStep::Redo { txn: 9 }).unwrap();
    assert!(probe(&restarted, "/c").is_some() && probe(&restarted, "/b").is_none(), "recovery's redo was refused");
    rename(&restarted, "/c", "/b", RenameDirStep::Undo { txn: 9 }).unwrap();
    restarted.handle(&root, Request::Unfence { txn: 9 }).unwrap();
    assert!(probe(&restarted, "/b").is_some() && probe(&restarted, "/c").is_none(), "recovery undid the rename");
    assert_eq!(rename(&restarted, "/b", "/c", RenameDirStep::Undo { txn: 9 }), Err(Errno::ESTALE), "an undo once its fence is down");
    assert_eq!(rename(&restarted, "/b", "/c", RenameDirStep::Redo { txn: 9 }), Err(Errno::ESTALE), "a redo once its fence is down");
    assert!(probe(&restarted, "/b").is_some(), "a late redo moved the directory");
    let Ok(Reply::Fsck(report)) = restarted.handle(&root, Request::Fsck) else { panic!("fsck") };
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A server remembers the newest `REVOKED_KEPT` revoked transactions: one
/// more drops the oldest, in memory and in the store, so a restart keeps the
/// same ones.
#[test]
fn a_server_keeps_the_newest_revoked_transactions() {
    use canopy_server::shardfs::REVOKED_KEPT;
    let cfg = ServerConfig { index: 0, servers: 2 };
    let root = Creds::root();
    let store = Arc::new(MemStore::new(ALL_CFS));
    let s = MetaServer::open(cfg, store.clone()).unwrap();
    let last = REVOKED_KEPT as u64 + 1;
    for txn in 1..=last {
        s.handle(&root, Request::Revoke { txn }).unwrap();
    }
    // An rmdir of nothing: ESTALE if its transaction is revoked, else ENOENT.
    let rmdir = |s: &MetaServer, txn| s.handle(&root, Request::Rmdir { path: "/none".into(), txn });
    for s in [s, MetaServer::open(cfg, store).unwrap()] {
        assert_eq!(rmdir(&s, 1), Err(Errno::ENOENT), "the oldest is dropped");
        assert_eq!(rmdir(&s, 2), Err(Errno::ESTALE));
        assert_eq!(rmdir(&s, last), Err(Errno::ESTALE));
    }
}

/// A Giraffa directory rename's freeze is durable: a server restarted while
/// it holds still refuses to change the frozen row, for what is left of the
/// freeze's lapse; a thaw, or the lapse, ends it for good.
#[test]
fn a_giraffa_freeze_outlives_a_restart_until_thawed_or_lapsed() {
    use canopy_proto::clock::ManualClock;
    use canopy_proto::SetAttr;
    use canopy_server::giraffa::FREEZE_MS;
    let cfg = ServerConfig { index: 0, servers: 1 };
    let root = Creds::root();
    let store = Arc::new(MemStore::new(ALL_CFS));
    let clock = ManualClock::new();
    clock.advance(1_000_000);
    let open = || MetaServer::open_mode("giraffa", cfg, store.clone(), clock.clone()).unwrap();
    let chmod = |s: &MetaServer| s.handle(&root, Request::GfDirSetAttr { path: "/".into(), set: SetAttr::mode(0o755) }).map(drop);
    let freeze = |s: &MetaServer, thaw| s.handle(&root, Request::GfFreeze { prefixes: vec![], paths: vec!["/".into()], thaw, txn: None }).unwrap();
    let s = open();
    chmod(&s).unwrap();
    freeze(&s, false);
    assert_eq!(chmod(&s), Err(Errno::EAGAIN));
    drop(s);
    let s = open();
    assert_eq!(chmod(&s), Err(Errno::EAGAIN), "the freeze was lost at the restart");
    freeze(&s, true);
    chmod(&s).unwrap();
    drop(s);
    let s = open();
    chmod(&s).expect("the thaw was lost at the restart");

    // Restarted halfway through its lapse: held for the half left.
    freeze(&s, false);
    drop(s);
    clock.advance(FREEZE_MS / 2);
    let s = open();
    assert_eq!(chmod(&s), Err(Errno::EAGAIN));
    clock.advance(FREEZE_MS - FREEZE_MS / 2 + 1);
    chmod(&s).expect("held past its lapse");
    drop(s);
    chmod(&open()).expect("a lapsed freeze held again at a start");
}

/// A freeze reloaded at a start holds at most a whole lapse, even if the
/// wall clock was set back meanwhile (by an hour here): it must not hold the
/// rows for the hour as well.
#[test]
fn a_reloaded_giraffa_freeze_holds_no_longer_than_a_lapse_after_the_clock_went_back() {
    use canopy_proto::clock::Clock;
    use canopy_proto::SetAttr;
    use canopy_server::giraffa::FREEZE_MS;
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    /// A clock whose wall time the test sets, apart from its monotonic time.
    #[derive(Default)]
    struct SetBack {
        ms: AtomicU64,
        wall_ms: AtomicI64,
    }
    impl Clock for SetBack {
        fn now_ms(&self) -> u64 {
            self.ms.load(Ordering::Acquire)
        }
        fn wall_ns(&self) -> i64 {
            self.wall_ms.load(Ordering::Acquire) * 1_000_000
        }
    }
    const HOUR_MS: i64 = 3_600_000;
    let cfg = ServerConfig { index: 0, servers: 1 };
    let root = Creds::root();
    let store = Arc::new(MemStore::new(ALL_CFS));
    let clock = Arc::new(SetBack::default());
    clock.wall_ms.store(10 * HOUR_MS, Ordering::Release);
    let open = || MetaServer::open_mode("giraffa", cfg, store.clone(), clock.clone()).unwrap();
    let chmod = |s: &MetaServer| s.handle(&root, Request::GfDirSetAttr { path: "/".into(), set: SetAttr::mode(0o755) }).map(drop);
    let s = open();
    s.handle(&root, Request::GfFreeze { prefixes: vec![], paths: vec!["/".into()], thaw: false, txn: None }).unwrap();
    drop(s);
    clock.wall_ms.store(9 * HOUR_MS, Ordering::Release);
    let s = open();
    assert_eq!(chmod(&s), Err(Errno::EAGAIN), "held again after the start");
    clock.ms.fetch_add(FREEZE_MS + 1, Ordering::AcqRel);
    chmod(&s).expect("held past a whole lapse because the wall clock went back");
}

/// A Giraffa server refuses the rename steps of a transaction recovery
/// revoked (`ECANCELED`: its clients ask again on `ESTALE`), also after a
/// restart; another transaction's steps, and steps naming none, go on.
#[test]
fn a_giraffa_server_refuses_a_revoked_transactions_steps() {
    use canopy_proto::clock::ManualClock;
    let cfg = ServerConfig { index: 0, servers: 1 };
    let root = Creds::root();
    let store = Arc::new(MemStore::new(ALL_CFS));
    let clock = ManualClock::new();
    let open = || MetaServer::open_mode("giraffa", cfg, store.clone(), clock.clone()).unwrap();
    let s = open();
    s.handle(&root, Request::Revoke { txn: 7 }).unwrap();
    drop(s);
    let s = open();
    let prefix = canopy_proto::giraffa::prefix(&canopy_proto::path::NsPath::parse("/").unwrap());
    let steps = |txn| {
        [
            Request::GfFreeze { prefixes: vec![], paths: vec!["/".into()], thaw: true, txn },
            Request::GfPutRows { prefix, rows: vec![], fresh: true, txn },
            Request::GfDeleteRows { prefix, names: vec![], keep_times: false, txn },
        ]
    };
    for step in steps(Some(7)) {
        assert_eq!(s.handle(&root, step.clone()), Err(Errno::ECANCELED), "{step:?}");
    }
    for step in steps(Some(8)).into_iter().chain(steps(None)) {
        assert_eq!(s.handle(&root, step.clone()), Ok(Reply::Unit), "{step:?}");
    }
}
