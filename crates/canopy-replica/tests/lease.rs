//! A leader cut off from its group stops answering reads once its lease
//! runs out: it never answers from state a newer leader may have changed.

mod kit;

use canopy_proto::auth::Identity;
use canopy_proto::clock::{ManualClock, SystemClock};
use canopy_proto::{Creds, Reply, Request};
use canopy_store::Store;
use canopy_rpc::{Handled, Service};
use kit::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Answers every request `Pong`: what matters is whether it is asked.
struct Answers;

impl Service for Answers {
    fn call(&self, _peer: &Identity, _creds: Creds, _req: Request) -> Handled {
        Handled::Now(Ok(Reply::Pong { server: 0, servers: 1 }))
    }
}

/// Answers, and says a `Mkdir` blocks and a `Rmdir` waits.
struct Classifies;

impl Service for Classifies {
    fn call(&self, _peer: &Identity, _creds: Creds, _req: Request) -> Handled {
        Handled::Now(Ok(Reply::Unit))
    }

    fn blocks(&self, req: &Request) -> bool {
        matches!(req, Request::Mkdir { .. })
    }

    fn waits(&self, req: &Request) -> bool {
        matches!(req, Request::Rmdir { .. })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_stops_answering_reads_within_its_lease() {
    let g = Group::new(3, 11, test_config(10_000)).await;
    let leader = g.leader().await;
    let (svc, _, _) = g.lead(leader, SystemClock::shared(), |_| Arc::new(Answers));
    // Before its lease is first renewed, a read waits for a round.
    let (answer, now) = serve(&svc, Request::Ping).await;
    assert!(matches!(answer, Ok(Reply::Pong { .. })) && !now, "a leader with its group answers, after a round: {answer:?}");
    let (answer, now) = serve(&svc, Request::Ping).await;
    assert!(matches!(answer, Ok(Reply::Pong { .. })) && now, "and then at once, under the lease that round gave: {answer:?}");
    tokio::spawn(svc.clone().keep_lease());
    g.router.partition(&[leader]);
    let cut = Instant::now();
    // The lease is half the election timeout's upper end (150 ms here):
    // once it has run out, and a round cannot be made, nothing is answered.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (answer, _) = serve(&svc, Request::Ping).await;
    assert!(matches!(answer, Ok(Reply::NotLeader { .. })), "a leader cut off {:?} ago answered {answer:?}", cut.elapsed());
}

/// The leader forgets, through its group, the sessions unheard of for the
/// TTL, and keeps the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_forgets_old_sessions_on_every_member() {
    use canopy_replica::sessions::{self, SessionRecord, SESSIONS, SESSION_TTL};
    let g = Group::new(3, 12, test_config(10_000)).await;
    let leader = g.leader().await;
    let clock = ManualClock::new();
    clock.advance(2_000_000_000);
    let (svc, store, _) = g.lead(leader, clock.clone(), |_| Arc::new(Answers));
    let now = canopy_proto::clock::Clock::wall_ms(&*clock);
    let heard = |session: u64, at: u64| sessions::record(SessionRecord::default(), session, b"c", 0, 0, &Ok(Reply::Unit), at);
    let s2 = store.clone();
    let ttl = SESSION_TTL.as_millis() as u64;
    tokio::task::spawn_blocking(move || {
        s2.write(heard(1, now - ttl - 1_000)).unwrap();
        s2.write(heard(2, now - 1_000)).unwrap();
    })
    .await
    .unwrap();
    let s = svc.clone();
    assert_eq!(tokio::task::spawn_blocking(move || s.forget_sessions()).await.unwrap(), Ok(1));
    let last = g.put(b"after", b"1").await;
    g.applied_everywhere(last).await;
    for (id, st) in &g.stores {
        let mut left = Vec::new();
        st.for_each(SESSIONS, &[], &mut |k, _| {
            left.push(u64::from_be_bytes(k[..8].try_into().unwrap()));
            true
        })
        .unwrap();
        assert_eq!(left, [2], "member {id}");
    }
}

/// A mutation numbered in a session is answered apart from its pass when
/// the request it wraps would be: one that waits for a lease must not hold
/// up the requests read with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numbered_request_blocks_and_waits_as_the_one_it_wraps() {
    let g = Group::new(1, 13, test_config(10_000)).await;
    let leader = g.leader().await;
    let (svc, _, _) = g.lead(leader, SystemClock::shared(), |_| Arc::new(Classifies));
    let once = |r: &Request| Request::Once { session: 1, seq: 0, done_below: 0, inner: postcard::to_allocvec(r).unwrap() };
    let mkdir = Request::Mkdir { path: "/a".into(), mode: 0o755, id: 2, fence: None };
    let rmdir = Request::Rmdir { path: "/a".into(), txn: 1 };
    assert!(svc.blocks(&once(&mkdir)) && !svc.waits(&once(&mkdir)));
    assert!(svc.waits(&once(&rmdir)) && !svc.blocks(&once(&rmdir)));
    assert!(!svc.blocks(&once(&Request::Ping)) && !svc.waits(&once(&Request::Ping)));
    assert!(svc.blocks(&mkdir) && svc.waits(&rmdir), "unwrapped, as they are");
}
