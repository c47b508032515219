//! Giraffa (seed 000 §3.2): what the table-partitioned baseline costs per
//! operation (Table 1: one RPC for stat and chmod, two for a create), that its
//! directory proofs cannot be forged, that an rmdir never leaves an entry
//! behind in a removed directory, and that a directory rename whose
//! coordinator dies is finished or undone by recovery.

use canopy_client::txn::Step;
use canopy_client::Client;
use canopy_proto::giraffa::{self, DirProof};
use canopy_proto::msg::{IfExists, Intent, NewKind};
use canopy_proto::path::NsPath;
use canopy_proto::{Creds, Errno, FileKind, Reply, Request};
use canopy_rpc::Daemon;
use canopy_testkit::hooks::DieAt;
use canopy_testkit::tree::tree;
use canopy_proto::clock::Clock;
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use std::sync::Arc;
use std::time::Duration;

const SERVERS: u32 = 4;
const LEASE_MS: u32 = 150;

fn cluster() -> InProcCluster {
    InProcCluster::memory_manual("giraffa", SERVERS)
}

/// RPCs `c` sent while `op` ran.
async fn rpcs<F: std::future::Future>(c: &Client, op: F) -> u64 {
    let before = c.counters().snapshot().total_rpcs();
    op.await;
    c.counters().snapshot().total_rpcs() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_cost_what_table_1_says() {
    let cluster = cluster();
    let c = cluster.fresh_client();
    c.mkdir("/d", 0o755).await.unwrap();
    for i in 0..20 {
        let f = format!("/d/f{i}");
        assert_eq!(rpcs(&c, async { c.create(&f, 0o644).await.unwrap() }).await, 2, "create: the parent's proof, then the row");
        assert_eq!(rpcs(&c, async { c.stat(&f).await.unwrap() }).await, 1, "stat: the row");
        assert_eq!(rpcs(&c, async { c.chmod(&f, 0o600).await.unwrap() }).await, 1, "chmod: the row");
        assert_eq!(rpcs(&c, async { c.unlink(&f).await.unwrap() }).await, 2);
    }
    // mkdir: the parent's proof, the row, the parent's subdirectory count.
    assert_eq!(rpcs(&c, async { c.mkdir("/d/sub", 0o755).await.unwrap() }).await, 3);
    assert_eq!(rpcs(&c, async { c.stat("/d/sub").await.unwrap() }).await, 1);
    assert_eq!(c.stat("/d").await.unwrap().nlink, 3);
    assert_eq!(c.counters().snapshot().retries, 0);
    // The servers count what this client sent: a vouched request once.
    let sent = c.counters().snapshot().total_rpcs();
    let stats = c.server_stats().await.unwrap();
    let received: u64 = stats.iter().flat_map(|s| s.rpcs.iter()).filter(|(op, _)| op != "Stats").map(|(_, n)| n).sum();
    assert_eq!(received, sent);
    assert_fsck_clean(&c, "").await;
}

/// A create's server checks the parent against the proof the client brings:
/// a proof changed on the way, or one for another directory, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_misdirected_proof_is_refused() {
    let cluster = cluster();
    let c = cluster.fresh_client();
    c.mkdir("/ro", 0o555).await.unwrap();
    c.mkdir("/rw", 0o777).await.unwrap();
    let t = cluster.transport();
    let bob = Creds { uid: 2000, gid: 2000, groups: vec![] };
    let dir = NsPath::parse("/ro").unwrap();
    let proof = match t.call(Daemon::Server(giraffa::row_server(&dir, SERVERS)), &bob, Request::GfProof { path: "/ro".into(), adds: true }).await.unwrap() {
        Reply::GfProof(p) => p,
        other => panic!("{other:?}"),
    };
    let create = |name: &str| {
        let req = Request::Create { at: format!("/ro/{name}").into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
        postcard::to_stdvec(&req).unwrap()
    };
    let server = Daemon::Server(giraffa::entries_server(&dir, SERVERS));
    let send = |proof: DirProof, name: &'static str| {
        let t = t.clone();
        let bob = bob.clone();
        let inner = create(name);
        async move { t.call(server, &bob, Request::GfVouched { proofs: vec![proof], inner }).await }
    };
    assert_eq!(send(proof.clone(), "honest").await, Err(Errno::EACCES), "the real proof says bob may not write");
    let mut wider = proof.clone();
    wider.mode = 0o777;
    assert_eq!(send(wider, "forged").await, Err(Errno::EPERM), "a changed proof");
    let rw = NsPath::parse("/rw").unwrap();
    let other = match t.call(Daemon::Server(giraffa::row_server(&rw, SERVERS)), &bob, Request::GfProof { path: "/rw".into(), adds: true }).await.unwrap() {
        Reply::GfProof(p) => p,
        other => panic!("{other:?}"),
    };
    // A proof of /rw names /rw's entries, not /ro's: /ro stays unproved.
    assert!(send(other, "elsewhere").await.is_err());
    let mut removal_only = proof.clone();
    removal_only.adds = false;
    assert_eq!(send(removal_only, "weak").await, Err(Errno::EPERM), "a removal-only proof cannot be upgraded");
    let nested = Request::GfVouched { proofs: vec![proof.clone()], inner: postcard::to_stdvec(&Request::GfVouched { proofs: vec![], inner: vec![] }).unwrap() };
    assert_eq!(t.call(server, &bob, nested).await, Err(Errno::EINVAL));
    let garbage = Request::GfVouched { proofs: vec![proof], inner: vec![0xff, 0xff, 0xff] };
    assert_eq!(t.call(server, &bob, garbage).await, Err(Errno::EPROTO));
    assert_eq!(c.readdir("/ro").await.unwrap().len(), 0, "nothing was made");
}

/// An rmdir racing creates in the directory: never both succeed (an entry
/// left in a removed directory), whatever the interleaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmdir_and_a_create_in_its_directory_never_both_succeed() {
    let cluster = cluster();
    let (a, b) = (cluster.fresh_client(), cluster.fresh_client());
    for i in 0..40u64 {
        let d = format!("/d{i}");
        a.mkdir(&d, 0o777).await.unwrap();
        let (d1, b1) = (d.clone(), b.clone());
        let creator = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(i * 37 % 400)).await;
            b1.create(&format!("{d1}/f"), 0o644).await
        });
        let removed = a.rmdir(&d).await;
        let created = creator.await.unwrap();
        match (&removed, &created) {
            (Ok(()), Err(Errno::ENOENT)) => {}
            (Err(Errno::ENOTEMPTY), Ok(_)) => {}
            other => panic!("{d}: rmdir and create answered {other:?}"),
        }
    }
    assert_fsck_clean(&a, "").await;
    // Every surviving entry is in a directory that exists.
    for e in a.readdir("/").await.unwrap() {
        assert_eq!(e.kind, FileKind::Dir);
        assert_eq!(a.readdir(&format!("/{}", e.name)).await.unwrap().len(), 1);
    }
}

async fn populate(c: &Client) {
    for d in ["/a", "/a/sub", "/a/sub/deeper", "/b", "/b/victim"] {
        c.mkdir(d, 0o755).await.unwrap();
    }
    for i in 0..12 {
        c.create(&format!("/a/f{i}"), 0o644).await.unwrap();
        c.create(&format!("/a/sub/g{i}"), 0o644).await.unwrap();
    }
}

/// Renames `src` to `dst` with a client that dies at `step`, waits out its
/// lease, and has recovery finish or undo that one transaction.
async fn rename_dies_and_is_recovered(cluster: &InProcCluster, src: &str, dst: &str, step: Step) {
    // The rename's freeze waits out the proofs the creates took (up to 250
    // ms): let them expire, so the short lease is not outlived.
    cluster.pass(giraffa::PROOF_LIFE_MS + 50).await;
    let dying = cluster.client_with_hook(Arc::new(DieAt(step.clone())), LEASE_MS);
    assert_eq!(dying.rename(src, dst).await, Err(Errno::ENOTCONN), "{src} -> {dst} dies at {step:?}");
    cluster.pass(LEASE_MS as u64 + 100).await;
    assert_eq!(cluster.fresh_client().repair().await, Ok(1), "{src} -> {dst} died at {step:?}");
}

/// A directory rename's coordinator dies before the commit point (nothing
/// changed) or after it (the copy is the new tree): recovery leaves exactly
/// the tree before or the tree after, and no row frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_rename_whose_coordinator_dies_is_finished_or_undone() {
    for (src, dst) in [("/a", "/moved"), ("/a/sub", "/b/victim")] {
        let clean = cluster();
        let c = clean.fresh_client();
        populate(&c).await;
        let before = tree(&c).await;
        c.rename(src, dst).await.unwrap();
        let after = tree(&c).await;
        let intent = Intent::Rename { src: src.into(), dst: dst.into() };
        for (step, committed) in [(Step::Locked(intent.clone()), false), (Step::PrimaryDone(intent.clone()), true)] {
            let cluster = cluster();
            let root = cluster.fresh_client();
            populate(&root).await;
            rename_dies_and_is_recovered(&cluster, src, dst, step.clone()).await;
            let want = if committed { &after } else { &before };
            assert_eq!(&tree(&root).await, want, "{src} -> {dst} died at {step:?}");
            assert_fsck_clean(&root, &format!("{step:?}")).await;
            // Nothing is left frozen: a change inside the tree needs no retry.
            let writer = cluster.fresh_client();
            let top = if committed { dst } else { src };
            writer.create(&format!("{top}/after"), 0o644).await.unwrap();
            assert_eq!(writer.counters().snapshot().retries, 0, "{step:?}: a row was left frozen");
        }
    }
}

/// A recovery that outlasts its lease (here every scan of rows is slowed;
/// in life, a big subtree) renews it as it goes: the lock service hands the
/// transaction to no second recoverer meanwhile, whose thaw at its end would
/// unfreeze rows the first has yet to copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_longer_than_its_lease_keeps_it() {
    let cluster = cluster();
    let root = cluster.fresh_client();
    root.mkdir("/a", 0o755).await.unwrap();
    let mut dir = String::from("/a");
    for i in 0..8 {
        dir = format!("{dir}/d{i}");
        root.mkdir(&dir, 0o755).await.unwrap();
        root.create(&format!("{dir}/f"), 0o644).await.unwrap();
    }
    cluster.pass(giraffa::PROOF_LIFE_MS + 50).await;
    let intent = Intent::Rename { src: "/a".into(), dst: "/moved".into() };
    let dying = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(intent))), LEASE_MS);
    assert_eq!(dying.rename("/a", "/moved").await, Err(Errno::ENOTCONN));
    cluster.pass(LEASE_MS as u64 + 100).await;

    // Two scans per directory of nine, each taking a fifth of the
    // recoverer's lease (on the cluster's clock; a little real time too, so
    // the recovery is still at work when the test looks): the recovery takes
    // about four of its leases and must renew it as it goes.
    const RECOVERY_LEASE_MS: u32 = 600;
    let clock = cluster.manual_clock().expect("a manual clock");
    let scans = clock.clone();
    cluster.faults().on_each("GfScan", Arc::new(move || scans.advance(RECOVERY_LEASE_MS as u64 / 5)));
    cluster.faults().slow("GfScan", Duration::from_millis(20));
    let recoverer = || cluster.client_with_lease(RECOVERY_LEASE_MS);
    let first = recoverer();
    let start = clock.now_ms();
    let recovering = tokio::spawn(async move { first.repair().await });
    while clock.now_ms() < start + 2 * RECOVERY_LEASE_MS as u64 && !recovering.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!recovering.is_finished(), "the recovery should outlast its lease");
    assert_eq!(recoverer().repair().await, Ok(0), "handed to a second recoverer while the first was at work");
    assert_eq!(recovering.await.unwrap(), Ok(1));

    let names = tree(&root).await.into_iter().map(|entry| entry.0).collect::<Vec<_>>();
    assert!(names.iter().any(|p| p == "/moved/d0/d1/d2/d3/d4/d5/d6/d7/f"), "{names:?}");
    assert!(!names.iter().any(|p| p.starts_with("/a")), "{names:?}");
    assert_fsck_clean(&root, "").await;
}

/// A rename onto a directory that is not empty (`ENOTEMPTY`) whose
/// coordinator dies once it holds its locks: recovery undoes nothing it did
/// not do, so the destination keeps every row below it (recovery must not
/// delete them, nor its subdirectories' rows, as if they were the rename's
/// copies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_that_died_before_removing_its_destination_leaves_it_whole() {
    for (src, dst) in [("/a/sub", "/b"), ("/a", "/b")] {
        let cluster = cluster();
        let root = cluster.fresh_client();
        populate(&root).await;
        root.create("/b/victim/kept", 0o644).await.unwrap();
        let before = tree(&root).await;
        let intent = Intent::Rename { src: src.into(), dst: dst.into() };
        rename_dies_and_is_recovered(&cluster, src, dst, Step::Locked(intent)).await;
        assert_eq!(tree(&root).await, before, "{src} -> {dst} died holding its locks");
        assert_fsck_clean(&root, &format!("{src} -> {dst}")).await;
    }
}

/// A directory rename refused because a server is down (`ECONNREFUSED`:
/// certain, nothing changed) leaves nothing frozen on the servers that are
/// up. Each server in turn is down for one attempt; those the rename reaches
/// before its freeze fail it earlier. A freeze that one server refuses must
/// not return at once and leave the others frozen for a minute, every create
/// in the directory refused (`EAGAIN`) until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_rename_refused_by_a_down_server_leaves_nothing_frozen() {
    let cluster = cluster();
    let root = cluster.fresh_client();
    populate(&root).await;
    let before = tree(&root).await;
    for down in 0..SERVERS {
        cluster.faults().down(down);
        let r = root.rename("/a", "/moved").await;
        cluster.faults().revive(down);
        assert_eq!(r, Err(Errno::ECONNREFUSED), "server {down} down");
        assert_eq!(tree(&root).await, before, "server {down} down: nothing changed");
        let writer = cluster.fresh_client();
        writer.create(&format!("/a/after{down}"), 0o644).await.unwrap();
        writer.create(&format!("/a/sub/after{down}"), 0o644).await.unwrap();
        writer.mkdir(&format!("/b/after{down}"), 0o755).await.unwrap();
        assert_eq!(writer.counters().snapshot().retries, 0, "server {down} down: a row was left frozen");
        for p in [format!("/a/after{down}"), format!("/a/sub/after{down}")] {
            writer.unlink(&p).await.unwrap();
        }
        writer.rmdir(&format!("/b/after{down}")).await.unwrap();
    }
    root.rename("/a", "/moved").await.unwrap();
}

/// A directory rename that fails after its freeze, one server having gone
/// down since it took the freeze: the thaw cannot reach that server, which
/// goes on holding the frozen rows (across a restart too) for the freeze's
/// lapse. The rename is left to recovery (EIO, not unlocked), which freezes
/// and thaws every server once they all answer. The rename must not answer
/// ECONNREFUSED and unlock, which would leave the server refusing writes
/// below the directory for a minute (a stuck server `scripts/chaos` on
/// Giraffa can produce).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_rename_whose_thaw_misses_a_server_is_left_to_recovery() {
    let cluster = cluster();
    let root = cluster.fresh_client();
    populate(&root).await;
    let before = tree(&root).await;
    cluster.pass(giraffa::PROOF_LIFE_MS + 50).await;
    let at = |p: &str| NsPath::parse(p).unwrap();
    // The server holding /a's entries goes down once the freeze is on every
    // server: while the rename reads its destination's parent (the first
    // RecoveryStat it sends), from another server.
    let down = giraffa::entries_server(&at("/a"), SERVERS);
    let (dst, parent) = [("/moved", "/"), ("/b/moved", "/b"), ("/b/victim/moved", "/b/victim")]
        .into_iter()
        .find(|(_, parent)| giraffa::row_server(&at(parent), SERVERS) != down)
        .expect("a destination whose parent's row is on another server");
    let (mut held, release) = cluster.faults().hold_next(giraffa::row_server(&at(parent), SERVERS), "RecoveryStat");
    let renamer = cluster.client_with_lease(LEASE_MS);
    let rename = tokio::spawn(async move { renamer.rename("/a", dst).await });
    tokio::time::timeout(Duration::from_secs(20), held.recv()).await.expect("no RecoveryStat").unwrap();
    cluster.faults().down(down);
    release.add_permits(1);
    let r = rename.await.unwrap();
    cluster.faults().revive(down);
    assert_eq!(r, Err(Errno::EIO), "server {down} down after the freeze: left to recovery");
    cluster.pass(LEASE_MS as u64 + 100).await;
    assert_eq!(cluster.fresh_client().repair().await, Ok(1));
    assert_eq!(tree(&root).await, before, "undone");
    let writer = cluster.fresh_client();
    writer.create("/a/after", 0o644).await.unwrap();
    writer.create("/a/sub/after", 0o644).await.unwrap();
    writer.mkdir("/b/after", 0o755).await.unwrap();
    assert_eq!(writer.counters().snapshot().retries, 0, "a row was left frozen");
    assert_fsck_clean(&root, "").await;
}

/// A directory rename whose freeze is refused when renewed, after the copy
/// (a certain failure, before the commit point): the copies are taken back
/// and the rename answers that errno. They must not stay under the
/// destination's prefix, where a directory made there later would show them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_rename_refused_at_its_renewed_freeze_takes_its_copies_back() {
    let cluster = cluster();
    let root = cluster.fresh_client();
    // Files only: the copy freezes no level below, so after the first
    // freeze the next one each server sees is the renewal.
    root.mkdir("/c", 0o755).await.unwrap();
    for i in 0..12 {
        root.create(&format!("/c/f{i}"), 0o644).await.unwrap();
    }
    let before = tree(&root).await;
    cluster.pass(giraffa::PROOF_LIFE_MS + 50).await;
    let checked = giraffa::row_server(&NsPath::parse("/").unwrap(), SERVERS);
    // Held at its first RecoveryStat, the rename has frozen every server.
    let (mut held, release) = cluster.faults().hold_next(checked, "RecoveryStat");
    let renamer = cluster.fresh_client();
    let rename = tokio::spawn(async move { renamer.rename("/c", "/moved").await });
    tokio::time::timeout(Duration::from_secs(20), held.recv()).await.expect("no RecoveryStat").unwrap();
    cluster.faults().refuse_next(0, "GfFreeze", Errno::ENOSPC);
    release.add_permits(1);
    assert_eq!(rename.await.unwrap(), Err(Errno::ENOSPC));
    assert_eq!(tree(&root).await, before, "nothing changed");
    root.mkdir("/moved", 0o755).await.unwrap();
    assert_eq!(root.readdir("/moved").await.unwrap(), vec![], "copies left under the destination");
    assert_fsck_clean(&root, "").await;
}

/// A region that grows past its size splits in two on the server that held
/// it, at the directory that halves its rows (HBase's split; routing is
/// unchanged, so every row is still found); one directory alone never splits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_past_its_size_splits_and_every_row_is_still_found() {
    let opts = canopy_proto::modes::ModeOptions::Giraffa(canopy_proto::modes::GiraffaOptions { region_rows: 40 });
    let cluster = InProcCluster::memory_with(1, opts);
    let c = cluster.fresh_client();
    let counter = |s: &canopy_proto::msg::ServerStats, name: &str| s.counters.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap();
    c.mkdir("/big", 0o755).await.unwrap();
    for i in 0..100 {
        c.create(&format!("/big/f{i}"), 0o644).await.unwrap();
    }
    let stats = c.server_stats().await.unwrap();
    assert_eq!(counter(&stats[0], "region_splits"), 0, "one directory is never divided");
    for d in 0..30 {
        c.mkdir(&format!("/d{d}"), 0o755).await.unwrap();
        for i in 0..10 {
            c.create(&format!("/d{d}/f{i}"), 0o644).await.unwrap();
        }
    }
    let stats = c.server_stats().await.unwrap();
    let splits = counter(&stats[0], "region_splits");
    assert!(splits >= 2, "400 rows in regions of 40: {splits} splits");
    assert_eq!(counter(&stats[0], "regions"), giraffa::REGIONS_PER_SERVER + splits);
    for d in 0..30 {
        assert_eq!(c.readdir(&format!("/d{d}")).await.unwrap().len(), 10);
    }
    assert_eq!(c.readdir("/big").await.unwrap().len(), 100);
    assert_fsck_clean(&c, "").await;
}

/// Creates in a directory while it is renamed: each either lands before the
/// rename (and moves with it) or fails; none is left under the old name's
/// prefix, where a new directory of that name would show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_racing_a_directory_rename_move_with_it_or_fail() {
    let cluster = cluster();
    let (a, b) = (cluster.fresh_client(), cluster.fresh_client());
    for round in 0..6 {
        let (from, to) = (format!("/a{round}"), format!("/b{round}"));
        a.mkdir(&from, 0o777).await.unwrap();
        a.create(&format!("{from}/first"), 0o644).await.unwrap();
        let (b1, from1) = (b.clone(), from.clone());
        let creator = tokio::spawn(async move {
            let mut made = Vec::new();
            for i in 0..400 {
                match b1.create(&format!("{from1}/x{i}"), 0o644).await {
                    Ok(_) => made.push(format!("x{i}")),
                    Err(Errno::ENOENT) => break,
                    Err(e) => panic!("create {from1}/x{i}: {e}"),
                }
            }
            made
        });
        tokio::time::sleep(Duration::from_millis(round * 3)).await;
        a.rename(&from, &to).await.unwrap();
        let made = creator.await.unwrap();
        let listed: Vec<String> = a.readdir(&to).await.unwrap().into_iter().map(|e| e.name).collect();
        for name in &made {
            assert!(listed.contains(name), "{to}/{name} was acknowledged but is gone");
        }
        a.mkdir(&from, 0o755).await.unwrap();
        assert_eq!(a.readdir(&from).await.unwrap().len(), 0, "round {round}: rows left under the old prefix");
    }
    assert_fsck_clean(&a, "").await;
}

/// A directory whose files keep their contents inline (up to 1 MiB each) is
/// renamed in pages that fit a frame, contents and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_large_inline_files_is_renamed_with_their_contents() {
    let cluster = cluster();
    let c = cluster.fresh_client();
    c.mkdir("/big", 0o755).await.unwrap();
    let body: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
    for i in 0..10 {
        let f = format!("/big/f{i}");
        c.create(&f, 0o644).await.unwrap();
        match c.write_data(&f, 0, &body, 1 << 20, false).await.unwrap() {
            canopy_client::data::DataWrite::Written(a) => assert_eq!(a.size, body.len() as u64),
            other => panic!("{other:?}"),
        }
    }
    c.rename("/big", "/moved").await.unwrap();
    for i in 0..10 {
        match c.read_data(&format!("/moved/f{i}"), 0, body.len() as u32).await.unwrap() {
            canopy_client::data::DataRead::Inline(got) => assert!(got == body, "f{i}'s contents"),
            other => panic!("{other:?}"),
        }
    }
    assert_fsck_clean(&c, "").await;
}

/// A directory chmod waits out the live proofs of the old permissions only
/// when it takes a right from someone: `cp -a` widens each directory it
/// made once it has filled it, and must not wait 250 ms per directory for
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chmod_waits_out_old_proofs_only_when_it_narrows() {
    let cluster = cluster();
    let c = cluster.fresh_client();
    let waits = || async { canopy_proto::msg::ServerStats::total(&c.server_stats().await.unwrap(), "proof_waits") };
    c.mkdir("/d", 0o700).await.unwrap();
    c.create("/d/f", 0o644).await.unwrap();
    let before = waits().await;
    c.chmod("/d", 0o755).await.unwrap();
    c.create("/d/g", 0o644).await.unwrap();
    assert_eq!(waits().await, before, "a widening chmod waited");
    c.chmod("/d", 0o750).await.unwrap();
    assert_eq!(waits().await, before + 1, "a narrowing chmod did not wait");
    c.create("/d/h", 0o644).await.unwrap();
    c.chmod("/d", 0o2750).await.unwrap();
    assert_eq!(waits().await, before + 2, "setting setgid changes what new entries inherit");
}

/// Runs `op` (a coordinator's transaction, short lease) with its next `step`
/// to `server` held on its way until its lease has run out and a recoverer
/// has decided the transaction; then lets the step arrive, and answers what
/// `op` got.
async fn with_a_step_arriving_after_recovery<F>(cluster: &InProcCluster, server: u32, step: &'static str, op: F) -> Result<(), Errno>
where
    F: std::future::Future<Output = Result<(), Errno>> + Send + 'static,
{
    let (mut held, release) = cluster.faults().hold_next(server, step);
    let running = tokio::spawn(op);
    tokio::time::timeout(Duration::from_secs(20), held.recv()).await.expect("the step was never sent").unwrap();
    cluster.pass(LEASE_MS as u64 + 100).await;
    assert_eq!(cluster.fresh_client().repair().await, Ok(1), "recovered");
    release.add_permits(1);
    running.await.unwrap()
}

/// A directory rename's commit (the directory's row under its new name),
/// sent in time, arrives only after recovery found no such row and undid
/// the rename: it is refused, since recovery revoked the transaction first,
/// so the directory does not gain a second name, and the coordinator leaves
/// the outcome to recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_renames_commit_that_arrives_after_recovery_makes_no_second_name() {
    let cluster = cluster();
    let setup = cluster.fresh_client();
    setup.mkdir("/d", 0o755).await.unwrap();
    // Empty: the commit is the rename's only row written.
    let c = cluster.client_with_lease(LEASE_MS);
    let commit_at = giraffa::row_server(&NsPath::parse("/e").unwrap(), SERVERS);
    let got = with_a_step_arriving_after_recovery(&cluster, commit_at, "GfPutRows", async move { c.rename("/d", "/e").await }).await;
    assert_eq!(got, Err(Errno::EIO), "a step recovery had taken over was reported done");
    let fresh = cluster.fresh_client();
    assert_eq!(fresh.stat("/d").await.map(|a| a.kind), Ok(FileKind::Dir));
    assert_eq!(fresh.stat("/e").await.map(drop), Err(Errno::ENOENT), "the directory gained a second name after recovery");
    assert_fsck_clean(&fresh, "").await;
}

/// A file rename between two servers whose insert at the destination arrives
/// only after recovery found the file under its old name alone: refused, so
/// the file does not end under both names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renames_insert_that_arrives_after_recovery_makes_no_second_name() {
    let cluster = cluster();
    let setup = cluster.fresh_client();
    setup.mkdir("/d", 0o755).await.unwrap();
    setup.create("/d/a", 0o644).await.unwrap();
    // Rows are placed by their parent: into another directory, on another server.
    let server = |p: &str| giraffa::row_server(&NsPath::parse(p).unwrap(), SERVERS);
    let dst = (0..).map(|i| format!("/e{i}/b")).find(|p| server(p) != server("/d/a")).unwrap();
    setup.mkdir(NsPath::parse(&dst).unwrap().split().unwrap().0.as_str(), 0o755).await.unwrap();
    let c = cluster.client_with_lease(LEASE_MS);
    let to = dst.clone();
    // The insert, vouched for by the destination's parent's proof.
    let got = with_a_step_arriving_after_recovery(&cluster, server(&dst), "GfVouched", async move { c.rename("/d/a", &to).await }).await;
    assert_eq!(got, Err(Errno::EIO));
    let fresh = cluster.fresh_client();
    assert!(fresh.stat("/d/a").await.is_ok(), "the file left its old name");
    assert_eq!(fresh.stat(&dst).await.map(drop), Err(Errno::ENOENT), "the file gained a second name after recovery");
    assert_fsck_clean(&fresh, "").await;
}

/// A hard link whose insert's outcome the coordinator cannot know (the
/// answer lost: the insert refused before it applied, or applied and its
/// server then down) answers `EIO` and is left to recovery, which keeps the
/// count it added only if the name was made: the file's link count equals
/// its names either way and fsck is clean. Giraffa's link takes a
/// transaction so that a count whose name was never made does not stay one
/// too high.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_insert_is_lost_keeps_its_count_only_if_the_name_was_made() {
    let server = |p: &str| giraffa::row_server(&NsPath::parse(p).unwrap(), SERVERS);
    for applied in [false, true] {
        let cluster = cluster();
        let setup = cluster.fresh_client();
        setup.mkdir("/d", 0o755).await.unwrap();
        setup.create("/d/f", 0o644).await.unwrap();
        let dst = (0..).map(|i| format!("/e{i}/h")).find(|p| server(p) != server("/d/f")).unwrap();
        setup.mkdir(NsPath::parse(&dst).unwrap().split().unwrap().0.as_str(), 0o755).await.unwrap();
        // The insert, vouched for by the destination's parent's proof.
        if applied {
            cluster.faults().die_after(server(&dst), "GfVouched");
        } else {
            cluster.faults().refuse_next(server(&dst), "GfVouched", Errno::EIO);
        }
        let c = cluster.client_with_lease(LEASE_MS);
        assert_eq!(c.link("/d/f", &dst).await.map(drop), Err(Errno::EIO), "applied: {applied}");
        cluster.faults().revive(server(&dst));
        cluster.pass(LEASE_MS as u64 + 100).await;
        let fresh = cluster.fresh_client();
        assert_eq!(fresh.repair().await, Ok(1), "applied: {applied}");
        let names = if applied { 2 } else { 1 };
        assert_eq!(fresh.stat("/d/f").await.map(|a| a.nlink), Ok(names), "applied: {applied}");
        assert_eq!(fresh.stat(&dst).await.is_ok(), applied);
        assert_fsck_clean(&fresh, &format!("applied: {applied}")).await;
    }
}

/// A directory rename whose lock request is handed a dead coordinator's
/// committed rename recovers it first; when that recovery is taken over in
/// turn (its freeze held on its way until its lease ran out and the next
/// recoverer finished), the rename asks for its locks again and is done: the
/// recovery's refused step (`ECANCELED`, which a recovery's steps report as
/// `EIO`) does not fail the caller's rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_whose_recovery_was_taken_over_is_done() {
    let cluster = cluster();
    let root = cluster.fresh_client();
    root.mkdir("/d", 0o755).await.unwrap();
    root.create("/d/f", 0o644).await.unwrap();
    // The freeze waits out the proofs the creates took: let them expire.
    cluster.pass(giraffa::PROOF_LIFE_MS + 50).await;
    let intent = Intent::Rename { src: "/d".into(), dst: "/e".into() };
    let dying = cluster.client_with_hook(Arc::new(DieAt(Step::PrimaryDone(intent))), LEASE_MS);
    assert_eq!(dying.rename("/d", "/e").await, Err(Errno::ENOTCONN));
    cluster.pass(LEASE_MS as u64 + 100).await;
    let second = cluster.client_with_lease(LEASE_MS);
    let renamed = cluster.step_held_past_recovery(0, "GfFreeze", LEASE_MS, async move { second.rename("/e", "/f").await }, async {}).await;
    assert_eq!(renamed, Ok(()));
    let fresh = cluster.fresh_client();
    assert!(fresh.stat("/f/f").await.is_ok());
    for gone in ["/d", "/e"] {
        assert_eq!(fresh.stat(gone).await.map(drop), Err(Errno::ENOENT), "{gone}");
    }
    assert_fsck_clean(&fresh, "").await;
}
