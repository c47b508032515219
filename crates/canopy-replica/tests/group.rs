//! A replica group's members keep the same data through failures.

mod kit;

use canopy_replica::router::Faults;
use kit::*;
use std::collections::BTreeMap;
use std::time::Duration;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn as_model(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Model {
    pairs.into_iter().collect()
}

async fn put_many(g: &Group, model: &mut Model, from: u32, to: u32) -> u64 {
    let mut last = 0;
    for i in from..to {
        let (k, v) = (format!("k{i:05}").into_bytes(), format!("v{i}").into_bytes());
        last = g.put(&k, &v).await;
        model.insert(k, v);
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_member_group_applies_what_it_commits() {
    let g = Group::new(1, 1, test_config(10_000)).await;
    let mut model = Model::new();
    let last = put_many(&g, &mut model, 0, 50).await;
    g.applied_everywhere(last).await;
    assert_eq!(as_model(g.data(1)), model);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_acknowledged_writes_survive_and_it_catches_up() {
    let mut g = Group::new(3, 2, test_config(10_000)).await;
    let mut model = Model::new();
    put_many(&g, &mut model, 0, 40).await;
    let old = g.leader().await;
    g.kill(old).await;
    let last = put_many(&g, &mut model, 40, 80).await;
    assert_ne!(g.leader().await, old);
    g.start(old).await;
    g.applied_everywhere(last).await;
    for id in 1..=3 {
        assert_eq!(as_model(g.data(id)), model, "member {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leaders_uncommitted_write_is_undone() {
    let g = Group::new(3, 3, test_config(10_000)).await;
    let mut model = Model::new();
    put_many(&g, &mut model, 0, 10).await;
    let old = g.leader().await;
    g.router.partition(&[old]);
    // The cut-off leader takes a write it can never commit.
    let lonely = {
        let raft = g.members[&old].raft.clone();
        let mut b = canopy_store::Batch::new();
        b.put(DATA, b"lonely".to_vec(), b"never".to_vec());
        tokio::spawn(async move { raft.client_write(canopy_replica::Proposal::of_batch(&b)).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let new = loop {
        let l = g.leader().await;
        if l != old {
            break l;
        }
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut b = canopy_store::Batch::new();
    b.put(DATA, b"after".to_vec(), b"yes".to_vec());
    g.members[&new].raft.client_write(canopy_replica::Proposal::of_batch(&b)).await.unwrap();
    model.insert(b"after".to_vec(), b"yes".to_vec());
    g.router.heal();
    let last = put_many(&g, &mut model, 10, 20).await;
    g.applied_everywhere(last).await;
    assert!(lonely.await.unwrap().is_err(), "a write the group never committed was acknowledged");
    for id in 1..=3 {
        assert_eq!(as_model(g.data(id)), model, "member {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_duplicated_and_delayed_messages_lose_and_repeat_nothing() {
    let g = Group::new(3, 4, test_config(10_000)).await;
    g.router.set_faults(Faults { drop_request: 100, drop_reply: 100, duplicate: 100, delay_max: Duration::from_millis(5), ..Faults::default() });
    // Each write appends to one list, so an entry applied twice shows.
    let mut list = Vec::new();
    let mut last = 0;
    for i in 0..60u32 {
        list.extend_from_slice(&i.to_be_bytes());
        let mut b = canopy_store::Batch::new();
        b.put(DATA, b"list".to_vec(), list.clone());
        b.put(DATA, format!("n{i:03}").into_bytes(), vec![]);
        last = g.propose(canopy_replica::Proposal::of_batch(&b)).await;
    }
    g.router.set_faults(Faults::default());
    g.applied_everywhere(last).await;
    for id in 1..=3 {
        let data = as_model(g.data(id));
        assert_eq!(data.get(&b"list"[..]), Some(&list), "member {id}");
        assert_eq!(data.len(), 61, "member {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_took_part_holds_raft_state_and_a_new_one_does_not() {
    let g = Group::new(3, 11, test_config(1000)).await;
    let last = g.put(b"k", b"v").await;
    g.applied_everywhere(last).await;
    for (id, store) in &g.stores {
        assert!(canopy_replica::holds_raft_state(&**store).unwrap(), "member {id}");
    }
    assert!(!canopy_replica::holds_raft_state(&*new_store()).unwrap());
}
