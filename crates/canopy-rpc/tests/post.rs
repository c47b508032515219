//! A posted request (sent, its answer not waited for) is served before the
//! requests the same client sends after it, over TCP, a Unix socket and in
//! process, and its dropped answer leaves the connection serving the next
//! calls.

use canopy_proto::auth::{Identity, Key};
use canopy_proto::msg::{At, DirChange};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::server::{ConnLimits, ServeOpts};
use canopy_rpc::socket::Listener;
use canopy_rpc::transport::Daemon;
use canopy_rpc::{ClientAuth, Handled, InProcTransport, Service, TcpTransport, Transport};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// Held by every test here while it runs: one of them counts this process's
/// open descriptors, which the others' sockets would change under it.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Counts `TouchDir`s; a `Stat` answers how many it has seen (as the inode
/// number), so a stat sent after a touch must see it.
#[derive(Default)]
struct Counter {
    touched: Mutex<u64>,
}

impl Service for Counter {
    fn call(&self, _peer: &Identity, _creds: Creds, req: Request) -> Handled {
        Handled::Now(match req {
            Request::TouchDir { .. } => {
                *self.touched.lock() += 1;
                Ok(Reply::Unit)
            }
            Request::Stat { .. } => Ok(Reply::Redirect { ino: *self.touched.lock(), home: 0 }),
            _ => Err(Errno::ENOSYS),
        })
    }
}

/// Posts a touch then stats, many times: every stat sees every touch posted before it.
async fn each_stat_follows_the_touches_before_it(t: &dyn Transport) {
    let root = Creds::root();
    for i in 1..=500u64 {
        t.post(Daemon::Server(0), &root, Request::TouchDir { at: At::Path("/d".into()), change: DirChange::Names, at_ns: 0 }).await.unwrap();
        let seen = t.call(Daemon::Server(0), &root, Request::Stat { at: At::Path("/d".into()) }).await;
        assert_eq!(seen, Ok(Reply::Redirect { ino: i, home: 0 }), "stat {i}");
    }
    assert_eq!(t.post(Daemon::Server(9), &root, Request::Ping).await, Err(Errno::EINVAL), "an unknown server");
}

/// Serves a fresh `Counter` on `listener`; how a client proves the cluster
/// key to it.
fn serve_counter(listener: Listener) -> ClientAuth {
    let key = Key::from_bytes([7; 32]);
    tokio::spawn(canopy_rpc::server::serve(listener, Arc::new(Counter::default()), ServeOpts { key: key.clone(), limits: ConnLimits::default() }));
    ClientAuth { identity: Identity::Cluster, key }
}

/// A fresh `Counter` served on a Unix socket in a new directory (kept while
/// the test runs): the directory, the address, how to prove the key.
fn unix_counter() -> (tempfile::TempDir, String, ClientAuth) {
    let dir = tempfile::tempdir().unwrap();
    let (addr, listener) = unix_listener(&dir);
    let me = serve_counter(listener);
    (dir, addr, me)
}

/// A transport to the one daemon at `addr`, as server 0 and as the lock service.
fn transport_to(addr: &str, me: &ClientAuth) -> TcpTransport {
    TcpTransport::new(&[addr.to_string()], addr, me.clone(), Duration::from_secs(20))
}

/// A Unix socket address in `dir` and a listener on it.
fn unix_listener(dir: &tempfile::TempDir) -> (String, Listener) {
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let listener = Listener::bind(&addr).unwrap();
    (addr, listener)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_a_posted_request_is_served_before_later_ones() {
    let _one = ONE_AT_A_TIME.lock().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let me = serve_counter(listener.into());
    let t = TcpTransport::new(std::slice::from_ref(&addr), &addr, me, Duration::from_secs(20));
    each_stat_follows_the_touches_before_it(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_posted_request_is_served_before_later_ones() {
    let _one = ONE_AT_A_TIME.lock().await;
    let counter = Arc::new(Counter::default());
    let t = InProcTransport::new(vec![counter.clone()], counter);
    each_stat_follows_the_touches_before_it(&t).await;
}

/// A burst larger than the socket takes at once (15 MB of posts, from threads
/// outside the runtime as a FUSE handler's are, over a Unix socket): what the
/// socket does not take is queued and sent in order, and a stat after the
/// burst sees every touch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_the_socket_buffer_arrives_whole_and_in_order() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_dir, addr, me) = unix_counter();
    let t = Arc::new(transport_to(&addr, &me));
    let root = Creds::root();
    let long = format!("/{}", "d".repeat(3000));
    t.post(Daemon::Server(0), &root, Request::TouchDir { at: At::Path(long.clone()), change: DirChange::Names, at_ns: 0 }).await.unwrap();
    let rt = tokio::runtime::Handle::current();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (t, rt, long) = (t.clone(), rt.clone(), long.clone());
            std::thread::spawn(move || {
                for _ in 0..2500 {
                    rt.block_on(t.post(Daemon::Server(0), &Creds::root(), Request::TouchDir { at: At::Path(long.clone()), change: DirChange::Names, at_ns: 0 })).unwrap();
                }
            })
        })
        .collect();
    tokio::task::spawn_blocking(move || threads.into_iter().for_each(|h| h.join().unwrap())).await.unwrap();
    let seen = t.call(Daemon::Server(0), &root, Request::Stat { at: At::Path("/d".into()) }).await;
    assert_eq!(seen, Ok(Reply::Redirect { ino: 5001, home: 0 }));
}

/// Open descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A dropped connection closes its socket once what it queued is sent: the
/// client's descriptor and the server's both go (nothing held per connection
/// a client ever made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_closes_its_socket() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (addr, listener) = unix_listener(&dir);
    let me = serve_counter(listener);
    let root = Creds::root();
    // The server's first connection opens what it keeps for good (a spare
    // descriptor): counted before.
    let first = canopy_rpc::conn::Connection::connect(&addr, &me, Duration::from_secs(5)).await.unwrap();
    assert!(first.call(&root, &Request::Ping, Duration::from_secs(5)).await.is_err(), "Counter knows no Ping");
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = open_fds();
    for _ in 0..20 {
        let c = canopy_rpc::conn::Connection::connect(&addr, &me, Duration::from_secs(5)).await.unwrap();
        c.post(&root, &Request::TouchDir { at: At::Path("/d".into()), change: DirChange::Names, at_ns: 0 }, Duration::from_secs(5)).await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while open_fds() > before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open_fds(), before, "every socket of the 20 dropped connections closed, both ends");
    let c = canopy_rpc::conn::Connection::connect(&addr, &me, Duration::from_secs(5)).await.unwrap();
    let seen = c.call(&root, &Request::Stat { at: At::Path("/d".into()) }, Duration::from_secs(5)).await;
    assert_eq!(seen, Ok(Reply::Redirect { ino: 20, home: 0 }), "what each had posted was sent before it closed");
}

/// A post ends only once its frame is written to the socket, so a process
/// may exit after it: to a peer that accepts but stops reading, posts go
/// through until the socket buffers are full, then one times out rather than
/// end with its frame still queued in this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_ends_when_written_not_when_queued() {
    let _one = ONE_AT_A_TIME.lock().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let key = Key::from_bytes([7; 32]);
    let (server_key, (accepted, stuck)) = (key.clone(), tokio::sync::oneshot::channel::<tokio::net::TcpStream>());
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        canopy_rpc::handshake::accept(&mut s, &server_key, std::time::Duration::from_secs(300)).await.unwrap();
        let _ = accepted.send(s);
    });
    let me = ClientAuth { identity: Identity::Cluster, key };
    let c = canopy_rpc::conn::Connection::connect(&addr, &me, Duration::from_secs(5)).await.unwrap();
    // Kept open, never read.
    let stuck = stuck.await.unwrap();
    let long = format!("/{}", "d".repeat(3000));
    let mut written = 0;
    let outcome = loop {
        match c.post(&Creds::root(), &Request::TouchDir { at: At::Path(long.clone()), change: DirChange::Names, at_ns: 0 }, Duration::from_millis(300)).await {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 100_000, "posts never stopped: they end when queued, not when written");
    };
    assert_eq!(outcome, Errno::ETIMEDOUT);
    assert!(written > 0, "the socket buffers took some before filling");
    drop(stuck);
}

/// How many touches the daemon behind `t` has seen (a plain stat).
async fn touches_seen(t: &dyn Transport) -> u64 {
    match t.call(Daemon::Server(0), &Creds::root(), Request::Stat { at: At::Path("/d".into()) }).await {
        Ok(Reply::Redirect { ino, .. }) => ino,
        other => panic!("stat: {other:?}"),
    }
}

fn touch() -> Request {
    Request::TouchDir { at: At::Path("/d".into()), change: DirChange::Names, at_ns: 0 }
}

/// Two transports sharing a box of owed posts, as a mount's threads do: a
/// touch one of them owes goes ahead of the next request either sends, and
/// not before (no flusher runs here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owed_post_goes_ahead_of_the_next_request_of_any_transport_sharing_its_box() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_dir, addr, me) = unix_counter();
    let owed = canopy_rpc::owed::Owed::new();
    let (a, b) = (transport_to(&addr, &me).owing(owed.clone()), transport_to(&addr, &me).owing(owed.clone()));
    let plain = transport_to(&addr, &me);
    let root = Creds::root();
    for i in 1..=200u64 {
        let (owes, asks) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        owes.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
        // Owed, not sent: a transport outside the box does not see it.
        assert_eq!(touches_seen(&plain).await, i - 1, "touch {i} sent before a request carried it");
        assert_eq!(touches_seen(asks).await, i, "touch {i} did not go ahead of the stat");
    }
    // A post of a transport that owes nothing goes at once.
    plain.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
    assert_eq!(touches_seen(&plain).await, 201);
    assert_eq!(owed.counts(), canopy_rpc::owed::OwedCounts { owed: 200, flushed: 0 });
}

/// With nothing to ride on, the flusher sends owed posts within a few of its
/// periods; a stopping client sends what is left at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owed_posts_with_nothing_to_ride_on_are_flushed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_dir, addr, me) = unix_counter();
    let plain = transport_to(&addr, &me);
    let owed = canopy_rpc::owed::Owed::new();
    let owing = Arc::new(transport_to(&addr, &me).owing(owed.clone()));
    let root = Creds::root();
    owing.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
    owing.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
    owing.flush_all_owed().await;
    assert_eq!(touches_seen(&plain).await, 2, "flushed when the client stops");

    let flusher = tokio::spawn(owing.clone().flush_owed());
    for round in 1..=3u64 {
        owing.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while touches_seen(&plain).await < 2 + round {
            assert!(std::time::Instant::now() < deadline, "round {round}: the flusher never sent the owed touch");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Idle between rounds: the flusher goes back to waiting for a post.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(touches_seen(&plain).await, 5);
    flusher.abort();
    // Two went when the client stopped, three by the flusher.
    assert_eq!(owed.counts(), canopy_rpc::owed::OwedCounts { owed: 5, flushed: 3 });
}

/// Owed frames that certainly were not sent go back in the box: those taken
/// by a request that failed before writing anything (too large to send)
/// ride on the next one, and those the flusher could not deliver (no daemon
/// listening yet) are tried again until it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owed_posts_not_sent_are_kept_for_later() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_dir, addr, me) = unix_counter();
    let owed = canopy_rpc::owed::Owed::new();
    let t = transport_to(&addr, &me).owing(owed.clone());
    let root = Creds::root();
    t.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
    let huge = Request::Stat { at: At::Path(format!("/{}", "d".repeat(canopy_proto::frame::MAX_FRAME))) };
    assert!(t.call(Daemon::Server(0), &root, huge).await.is_err());
    assert_eq!(touches_seen(&t).await, 1, "the owed touch was dropped with the request that failed");

    // A daemon that is not there yet.
    let dir = tempfile::tempdir().unwrap();
    let later = format!("unix:{}", dir.path().join("later.sock").display());
    let owed = canopy_rpc::owed::Owed::new();
    let t = Arc::new(transport_to(&later, &me).owing(owed.clone()));
    let flusher = tokio::spawn(t.clone().flush_owed());
    t.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(owed.counts().flushed, 0);
    let me = serve_counter(Listener::bind(&later).unwrap());
    let plain = transport_to(&later, &me);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while touches_seen(&plain).await < 1 {
        assert!(std::time::Instant::now() < deadline, "the flusher gave up on a daemon that came late");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(owed.counts().flushed, 1);
    owed.stop();
    tokio::time::timeout(Duration::from_secs(5), flusher).await.expect("the flusher stops").unwrap();
}

/// A daemon that does not answer (it takes the connection and never
/// completes the handshake, as a host that is down holds a connect) holds
/// up no other daemon's owed posts: the flusher sends each daemon's on its
/// own, again and again while that one hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_does_not_answer_holds_up_no_other_daemons_owed_posts() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_dir, good, me) = unix_counter();
    let hang_dir = tempfile::tempdir().unwrap();
    let (hang, listener) = unix_listener(&hang_dir);
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok(stream) = listener.accept().await {
            kept.push(stream);
        }
    });
    let owed = canopy_rpc::owed::Owed::new();
    let t = Arc::new(TcpTransport::new(&[hang.clone(), good.clone()], &good, me.clone(), Duration::from_secs(20)).owing(owed.clone()));
    let plain = transport_to(&good, &me);
    let flusher = tokio::spawn(t.clone().flush_owed());
    let root = Creds::root();
    for round in 1..=3u64 {
        t.post_soon(Daemon::Server(0), &root, touch()).await.unwrap();
        t.post_soon(Daemon::Server(1), &root, touch()).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while touches_seen(&plain).await < round {
            assert!(std::time::Instant::now() < deadline, "round {round}: the touch owed to the daemon that answers waited for the one that does not");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert_eq!(owed.counts().flushed, 3, "the hanging daemon's three touches are still owed");
    flusher.abort();
    held.abort();
}
