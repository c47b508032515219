//! A member that lags behind a purged log catches up from a snapshot, sent
//! in chunks, and an install cut short is finished from durable state.

mod kit;

use canopy_replica::network::{PeerCall, PeerReply};
use canopy_replica::router::Faults;
use canopy_replica::snapshot::{self, SnapshotFiles, CHUNK_BYTES};
use canopy_proto::msg::GroupChange;
use canopy_replica::{membership, Families, StateMachine};
use canopy_store::{Batch, Store};
use kit::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// Writes `n` values of 8 KiB: about `n / 128` chunks of snapshot.
async fn fill(g: &Group, from: u32, n: u32) -> u64 {
    let mut last = 0;
    for i in from..from + n {
        last = g.put(format!("k{i:05}").as_bytes(), &vec![i as u8; 8192]).await;
    }
    last
}

fn snapshot_of(g: &Group, id: u64) -> Option<u64> {
    g.members[&id].raft.metrics().borrow().snapshot.map(|l| l.index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_behind_a_purged_log_catches_up_from_a_snapshot_in_chunks() {
    let mut g = Group::new(3, 5, test_config(50)).await;
    fill(&g, 0, 10).await;
    let behind = if g.leader().await == 3 { 2 } else { 3 };
    g.kill(behind).await;
    let last = fill(&g, 10, 300).await;
    let leader = g.leader().await;
    g.members[&leader].raft.trigger().snapshot().await.unwrap();
    g.members[&leader].raft.wait(Some(Duration::from_secs(20))).snapshot(
        g.members[&leader].raft.metrics().borrow().last_applied.unwrap(), "snapshot").await.ok();
    // The snapshot is bigger than one chunk, and its sending is cut twice.
    assert!(g.data(leader).len() * 8192 > 2 * CHUNK_BYTES);
    g.router.set_faults(Faults { lose_snapshot_messages: 3, ..Faults::default() });
    g.start(behind).await;
    g.applied_everywhere(last).await;
    assert!(snapshot_of(&g, behind).is_some(), "member {behind} caught up without a snapshot");
    assert_eq!(g.data(behind), g.data(leader));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_is_replaced_without_stopping_the_group() {
    let mut g = Group::new(3, 6, test_config(50)).await;
    fill(&g, 0, 100).await;
    let leader = g.leader().await;
    let wiped = if leader == 3 { 2 } else { 3 };
    g.kill(wiped).await;
    g.stores.insert(4, new_store());
    g.start(4).await;
    let raft = &g.members[&leader].raft;
    let add = GroupChange::Add { id: 4, addr: "m4".into() };
    membership::change(raft, add.clone()).await.unwrap();
    membership::change(raft, GroupChange::Remove { id: wiped }).await.unwrap();
    // Each change made again changes nothing.
    membership::change(raft, add).await.unwrap();
    membership::change(raft, GroupChange::Remove { id: wiped }).await.unwrap();
    let voters: Vec<u64> = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
    assert_eq!(voters, [1, 2, 3, 4].into_iter().filter(|m| *m != wiped).collect::<Vec<_>>());
    let last = fill(&g, 100, 20).await;
    g.applied_everywhere(last).await;
    assert_eq!(g.data(4), g.data(leader));
    // The group now commits without the wiped member.
    let other = (1..=4).find(|m| *m != leader && *m != wiped && *m != 4).unwrap();
    g.kill(other).await;
    g.put(b"two of three", b"yes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_removes_itself_hands_the_group_on_and_the_last_voter_stays() {
    let g = Group::new(3, 8, test_config(1000)).await;
    g.put(b"a", b"1").await;
    let leader = g.leader().await;
    membership::change(&g.members[&leader].raft, GroupChange::Remove { id: leader }).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let next = loop {
        let l = g.leader().await;
        if l != leader {
            break l;
        }
        assert!(std::time::Instant::now() < deadline, "the removed leader still leads");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let last = g.put(b"b", b"2").await;
    let rest: Vec<u64> = (1..=3).filter(|m| *m != leader).collect();
    for m in &rest {
        g.members[m].raft.wait(Some(Duration::from_secs(20))).applied_index_at_least(Some(last), "b").await.unwrap();
    }
    let other = rest.into_iter().find(|m| *m != next).unwrap();
    let raft = &g.members[&next].raft;
    membership::change(raft, GroupChange::Remove { id: other }).await.unwrap();
    assert_eq!(membership::change(raft, GroupChange::Remove { id: next }).await, Err(membership::Refused::Errno(canopy_proto::Errno::EINVAL)));
    g.put(b"c", b"3").await;
}

/// A leader may begin a new stream to a member before its old one stops
/// (a replication restarted by a change of membership). Neither stream's
/// install may take in a reception the other emptied or filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_of_a_stream_a_newer_one_replaced_is_refused() {
    let g = Group::new(1, 7, test_config(50)).await;
    let peer = &g.members[&1].peer;
    let dir = tempfile::tempdir().unwrap();
    let from = new_store();
    let mut b = Batch::new();
    b.put(DATA, b"k".to_vec(), b"v".to_vec());
    from.write(b).unwrap();
    let files = snapshot::build(&*from, &*from.snapshot(), &families(), &dir.path().join("s")).unwrap();
    let meta = openraft::SnapshotMeta { last_log_id: None, last_membership: Default::default(), snapshot_id: "s".into() };
    let install = |stream| PeerCall::Install { stream, vote: Default::default(), meta: meta.clone(), tables: files.tables.clone() };
    let refused = |reply| matches!(reply, PeerReply::Install(Err(_)) | PeerReply::Chunk(Err(_)));

    // The old stream sends its file, a newer one begins, the old installs.
    assert!(!refused(peer.serve(9, PeerCall::Begin { stream: 1 }).await));
    for chunk in files.chunks() {
        assert!(!refused(peer.serve(9, PeerCall::Chunk { stream: 1, chunk: chunk.unwrap() }).await));
    }
    assert!(!refused(peer.serve(9, PeerCall::Begin { stream: 2 }).await));
    assert!(refused(peer.serve(9, install(1)).await), "an install of a replaced stream was taken");
    let chunk = files.chunks().next().unwrap().unwrap();
    assert!(refused(peer.serve(9, PeerCall::Chunk { stream: 1, chunk }).await), "a chunk of a replaced stream was taken");
    // The newer stream has no file yet: its install must not clear the data.
    assert!(!refused(peer.serve(9, PeerCall::Begin { stream: 3 }).await));
    assert!(refused(peer.serve(9, install(3)).await), "an install without its files was taken");
}

#[test]
fn an_install_cut_short_is_finished_when_the_member_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (new_store(), new_store());
    let mut b = Batch::new();
    for i in 0..1000u32 {
        b.put(DATA, i.to_be_bytes().to_vec(), vec![1; 100]);
    }
    from.write(b).unwrap();
    let mut stale = Batch::new();
    stale.put(DATA, b"stale".to_vec(), b"gone".to_vec());
    to.write(stale).unwrap();
    let files: SnapshotFiles = snapshot::build(&*from, &*from.snapshot(), &families(), &dir.path().join("s")).unwrap();
    let applied = Some(openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 1000));
    snapshot::mark_install(&*to, &files, applied, &Default::default()).unwrap();
    // The member died here; it opens again.
    StateMachine::open(to.clone(), Families::new(&[DATA]), dir.path().join("snaps")).unwrap();
    let read = |s: &dyn Store| {
        let mut out = BTreeMap::new();
        s.for_each(DATA, &[], &mut |k, v| {
            out.insert(k.to_vec(), v.to_vec());
            true
        })
        .unwrap();
        out
    };
    assert_eq!(read(&*to), read(&*from));
    assert_eq!(snapshot::applied_in(&*to.snapshot()).unwrap().0, applied);
    assert!(snapshot::pending_install(&*to).unwrap().is_none());
}
