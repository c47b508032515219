//! A leader's replicated store: its reads see its own pending writes,
//! nothing is acknowledged before the group applied it, and a request's
//! writes are one entry.

mod kit;

use canopy_replica::ReplicatedStore;
use canopy_store::{in_pass, Batch, Store};
use kit::*;
use std::sync::Arc;
use std::time::Duration;

fn replicated(g: &Group, id: u64, wait: Duration) -> Arc<ReplicatedStore> {
    ReplicatedStore::new(g.stores[&id].clone(), g.members[&id].raft.clone(), &tokio::runtime::Handle::current(), wait)
}

fn put(k: &str, v: &str) -> Batch {
    let mut b = Batch::new();
    b.put(DATA, k.as_bytes().to_vec(), v.as_bytes().to_vec());
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_reads_its_pending_writes_and_acknowledges_none_without_a_majority() {
    let mut g = Group::new(3, 7, test_config(10_000)).await;
    let leader = g.leader().await;
    for id in (1..=3).filter(|m| *m != leader) {
        g.kill(id).await;
    }
    let store = replicated(&g, leader, Duration::from_millis(1500));
    let inner = g.stores[&leader].clone();
    let answered = tokio::task::spawn_blocking(move || {
        in_pass(&*store, &mut || {
            store.write(put("a", "1")).unwrap();
            let mut d = Batch::new();
            d.delete_range(DATA, b"a".to_vec(), b"b".to_vec());
            d.put(DATA, b"b".to_vec(), b"2".to_vec());
            store.write(d).unwrap();
            assert_eq!(store.get(DATA, b"a").unwrap(), None, "the leader's reads see its pending range delete");
            assert_eq!(store.get(DATA, b"b").unwrap(), Some(b"2".to_vec()), "and its pending put");
            assert_eq!(store.scan(DATA, b"", None, 10).unwrap(), vec![(b"b".to_vec(), b"2".to_vec())]);
            assert_eq!(inner.get(DATA, b"b").unwrap(), None, "the store changes only when the group applies");
        })
        .map(|_| store)
    })
    .await
    .unwrap();
    assert!(answered.is_err(), "a pass was answered though no majority logged its writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_pass_acknowledges_every_member_holds() {
    let g = Group::new(3, 8, test_config(10_000)).await;
    let leader = g.leader().await;
    let store = replicated(&g, leader, Duration::from_secs(20));
    let raft = g.members[&leader].raft.clone();
    let before = raft.metrics().borrow().last_log_index.unwrap();
    let s = store.clone();
    tokio::task::spawn_blocking(move || {
        for pass in 0..20 {
            in_pass(&*s, &mut || {
                for i in 0..5 {
                    s.write(put(&format!("k{pass:02}{i}"), "v")).unwrap();
                }
            })
            .unwrap();
        }
        in_pass(&*s, &mut || {
            s.begin_request();
            s.write(put("r1", "x")).unwrap();
            s.write(put("r2", "y")).unwrap();
            assert!(s.end_request(|| put("session", "answer")).unwrap());
        })
        .unwrap();
        // A table ingested through the group.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.table");
        s.write_table(&path, &mut (0..10u8).map(|i| (vec![b'z', i], vec![i]))).unwrap();
        s.ingest(DATA, &[path])
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}: {:?}", raft.metrics().borrow().running_state));
    let last = raft.metrics().borrow().last_log_index.unwrap();
    assert!(last - before <= 100 + 1 + 1, "no more entries than proposals (those ready together share one)");
    g.applied_everywhere(last).await;
    let want = g.data(leader);
    assert_eq!(want.len(), 100 + 3 + 10);
    for id in 1..=3 {
        assert_eq!(g.data(id), want, "member {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_applies_writes_in_the_order_the_leader_made_them() {
    let g = Group::new(1, 9, test_config(10_000)).await;
    let leader = g.leader().await;
    let store = replicated(&g, leader, Duration::from_secs(20));
    let s = store.clone();
    tokio::task::spawn_blocking(move || {
        in_pass(&*s, &mut || {
            // A request writes k, then another thread writes k after it
            // (as a background thread would once the request let its locks
            // go), then the request ends: the group applies them in that order.
            s.begin_request();
            s.write(put("k", "request")).unwrap();
            let other = s.clone();
            let after = std::thread::spawn(move || other.write(put("k", "after")));
            // Its write waits for the request's entry, which comes first.
            while s.get(DATA, b"k").unwrap() != Some(b"after".to_vec()) {
                std::thread::yield_now();
            }
            assert!(s.end_request(|| put("session", "answer")).unwrap());
            after.join().unwrap().unwrap();
            // A request that clears a range, then ingests a table into it:
            // the table is applied after the clearing.
            s.begin_request();
            let mut clear = Batch::new();
            clear.delete_range(DATA, b"t".to_vec(), b"u".to_vec());
            s.write(clear).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.table");
            s.write_table(&path, &mut (0..3u8).map(|i| (vec![b't', i], vec![i]))).unwrap();
            s.ingest(DATA, &[path]).unwrap();
            assert!(s.end_request(Batch::new).unwrap());
        })
        .unwrap();
    })
    .await
    .unwrap();
    let data = g.data(leader);
    assert!(data.contains(&(b"k".to_vec(), b"after".to_vec())), "{data:?}");
    assert_eq!(data.iter().filter(|(k, _)| k[0] == b't').count(), 3, "{data:?}");
}
