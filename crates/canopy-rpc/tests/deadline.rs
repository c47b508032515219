//! A call's timeout is its own deadline, checked by the connection's watchdog:
//! a peer that never answers gets each caller `ETIMEDOUT` after that caller's
//! timeout, not sooner, and not all at once.

use canopy_proto::auth::{Identity, Key};
use canopy_proto::msg::At;
use canopy_proto::{Creds, Errno, Request};
use canopy_rpc::conn::Connection;
use canopy_rpc::ClientAuth;
use std::time::{Duration, Instant};

/// A peer that completes the handshake, then reads nothing and answers
/// nothing, keeping the connection open until the test ends.
async fn silent_peer() -> (String, ClientAuth, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let key = Key::from_bytes([9; 32]);
    let server_key = key.clone();
    let peer = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        canopy_rpc::handshake::accept(&mut s, &server_key, std::time::Duration::from_secs(300)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(s);
    });
    (addr, ClientAuth { identity: Identity::Cluster, key }, peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_times_out_at_its_own_deadline() {
    let (addr, me, peer) = silent_peer().await;
    // A connection made with 1.6 s checks deadlines every 100 ms.
    let c = Connection::connect(&addr, &me, Duration::from_millis(1600)).await.unwrap();
    let stat = Request::Stat { at: At::Path("/".into()) };
    let start = Instant::now();
    let (short, long) = tokio::join!(
        async { (c.call(&Creds::root(), &stat, Duration::from_millis(300)).await, start.elapsed()) },
        async { (c.call(&Creds::root(), &stat, Duration::from_millis(900)).await, start.elapsed()) },
    );
    assert_eq!(short.0, Err(Errno::ETIMEDOUT));
    assert_eq!(long.0, Err(Errno::ETIMEDOUT));
    assert!(short.1 >= Duration::from_millis(300), "not before its timeout: {:?}", short.1);
    assert!(long.1 >= Duration::from_millis(900), "not before its timeout: {:?}", long.1);
    // Each on its own deadline: the short call does not end with the long
    // one (an order, not a wall-clock bound, which a shared machine breaks).
    assert!(short.1 < long.1, "the short call waited for the long one: {:?} and {:?}", short.1, long.1);
    assert!(!c.is_broken(), "a timeout leaves the connection usable");
    peer.abort();
}
