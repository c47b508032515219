//! Hostile clients over real TCP: broken handshakes, wrong keys, malformed,
//! truncated and oversized frames, unknown opcodes, undecodable payloads, hostile
//! paths, internal requests without the cluster key, forged credentials, and
//! connection floods. Each gets its error (or a closed connection), the server
//! keeps serving others, its memory stays bounded and fsck stays clean.

use bytes::BytesMut;
use canopy_proto::auth::{Identity, Key};
use canopy_proto::frame::{self, Frame};
use canopy_proto::msg::{DirLookup, Intent, LockMode, RenameDirStep};
use canopy_proto::{Creds, Errno, Reply, Request, SetAttr};
use canopy_rpc::conn::Connection;
use canopy_rpc::server::{ConnLimits, ServeOpts};
use canopy_rpc::ClientAuth;
use canopy_server::keys::ALL_CFS;
use canopy_server::{MetaServer, ServerConfig};
use canopy_store::MemStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(5);

fn cluster_key() -> Key {
    Key::from_bytes([42; 32])
}

/// The cluster key's holder.
fn admin() -> ClientAuth {
    ClientAuth { identity: Identity::Cluster, key: cluster_key() }
}

/// A user key's holder.
fn user(uid: u32) -> ClientAuth {
    let identity = Identity::User(Creds::user(uid, uid));
    ClientAuth { key: cluster_key().for_identity(&identity), identity }
}

async fn start_with(limits: ConnLimits) -> String {
    let server = MetaServer::open(ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS))).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(canopy_rpc::server::serve(listener.into(), Arc::new(server), ServeOpts { key: cluster_key(), limits }));
    addr
}

async fn start_server() -> String {
    start_with(ConnLimits::default()).await
}

/// A connection past the handshake, proving `me`, on which the test writes raw bytes.
async fn raw_as(addr: &str, me: &ClientAuth) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    canopy_rpc::handshake::connect(&mut s, me, addr).await.unwrap();
    s
}

async fn raw(addr: &str) -> TcpStream {
    raw_as(addr, &admin()).await
}

async fn connect(addr: &str, me: &ClientAuth) -> Connection {
    Connection::connect(addr, me, T).await.unwrap()
}

/// Reads one response frame (None if the server closed the connection).
async fn read_frame(s: &mut TcpStream) -> Option<Frame> {
    let mut buf = BytesMut::new();
    loop {
        if let Ok(f) = frame::parse(&mut buf) {
            return Some(f);
        }
        let n = tokio::time::timeout(T, s.read_buf(&mut buf)).await.expect("server answers in time").ok()?;
        if n == 0 {
            return None;
        }
    }
}

async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(tokio::time::timeout(T, s.read(&mut b)).await, Ok(Ok(0)) | Ok(Err(_)))
}

async fn still_serves(addr: &str) {
    let conn = connect(addr, &admin()).await;
    let r = conn.call(&Creds::root(), &Request::Ping, T).await.unwrap();
    assert_eq!(r, Reply::Pong { server: 0, servers: 1 });
    assert!(matches!(conn.call(&Creds::root(), &Request::Stat { at: "/".into() }, T).await, Ok(Reply::Attr(_))));
}

fn raw_frame(id: u64, op: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = ((10 + payload.len()) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&op.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Sends `hello` as a connection's first bytes; the server must refuse the
/// protocol and close.
async fn refused_hello(addr: &str, hello: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(hello).await.unwrap();
    let mut reply = [0u8; frame::HANDSHAKE_REPLY_LEN];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(frame::check_handshake_reply(&reply), Err(Errno::EPROTO));
    assert!(closed(&mut s).await);
}

#[tokio::test]
async fn wrong_handshake_is_refused() {
    let addr = start_server().await;
    refused_hello(&addr, b"GET / HTTP/1.1\r\n\r\n").await;
    still_serves(&addr).await;
}

#[tokio::test]
async fn oversized_frame_gets_emsgsize_and_close() {
    let addr = start_server().await;
    let mut s = raw(&addr).await;
    s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    let f = read_frame(&mut s).await.expect("an error frame");
    assert_eq!((f.id, frame::decode_response(&f)), (0, Err(Errno::EMSGSIZE)));
    assert!(closed(&mut s).await);
    still_serves(&addr).await;
}

#[tokio::test]
async fn length_shorter_than_header_is_malformed() {
    let addr = start_server().await;
    let mut s = raw(&addr).await;
    s.write_all(&3u32.to_be_bytes()).await.unwrap();
    let f = read_frame(&mut s).await.expect("an error frame");
    assert_eq!(frame::decode_response(&f), Err(Errno::EPROTO));
    assert!(closed(&mut s).await);
    still_serves(&addr).await;
}

#[tokio::test]
async fn truncated_frame_then_hangup_harms_nobody() {
    let addr = start_server().await;
    let mut s = raw(&addr).await;
    let whole = raw_frame(1, Request::Ping.opcode(), &[0, 0, 0]);
    s.write_all(&whole[..whole.len() - 2]).await.unwrap();
    drop(s);
    still_serves(&addr).await;
}

#[tokio::test]
async fn unknown_opcode_and_garbage_payload_get_errors_and_the_connection_goes_on() {
    let addr = start_server().await;
    let mut s = raw(&addr).await;
    s.write_all(&raw_frame(7, 9999, b"")).await.unwrap();
    let f = read_frame(&mut s).await.unwrap();
    assert_eq!((f.id, frame::decode_response(&f)), (7, Err(Errno::ENOSYS)));
    s.write_all(&raw_frame(8, Request::Stat { at: "".into() }.opcode(), &[0xff; 9])).await.unwrap();
    let f = read_frame(&mut s).await.unwrap();
    assert_eq!((f.id, frame::decode_response(&f)), (8, Err(Errno::EPROTO)));
    // A valid request on the same connection still works.
    let mut buf = BytesMut::new();
    frame::encode_request(&mut buf, 9, &Creds::root(), &Request::Stat { at: "/".into() }).unwrap();
    s.write_all(&buf).await.unwrap();
    let f = read_frame(&mut s).await.unwrap();
    assert!(matches!(frame::decode_response(&f), Ok(Reply::Attr(_))));
}

/// A one-way request (id 0) is served but never answered, not even a bad
/// one: the first answer on the connection is that of the call after them,
/// which sees the one-way mkdir applied.
#[tokio::test]
async fn one_way_requests_get_no_answer_and_are_applied() {
    let addr = start_server().await;
    let mut s = raw(&addr).await;
    let mut buf = BytesMut::new();
    let mkdir = Request::Mkdir { path: "/one-way".into(), mode: 0o755, id: canopy_proto::msg::dir_id_of_txn(5).unwrap(), fence: None };
    frame::encode_request(&mut buf, frame::ONE_WAY, &Creds::root(), &mkdir).unwrap();
    buf.extend_from_slice(&raw_frame(frame::ONE_WAY, 9999, b""));
    buf.extend_from_slice(&raw_frame(frame::ONE_WAY, Request::Stat { at: "".into() }.opcode(), &[0xff; 9]));
    frame::encode_request(&mut buf, 11, &Creds::root(), &Request::Stat { at: "/one-way".into() }).unwrap();
    s.write_all(&buf).await.unwrap();
    let f = read_frame(&mut s).await.unwrap();
    assert_eq!(f.id, 11, "the first answer is the call's");
    assert!(matches!(frame::decode_response(&f), Ok(Reply::Attr(a)) if a.kind == canopy_proto::FileKind::Dir));
}

#[tokio::test]
async fn hostile_paths_get_errnos() {
    let addr = start_server().await;
    let conn = connect(&addr, &admin()).await;
    let stat = |p: String| Request::Stat { at: p.into() };
    let entry = |dir: u64, name: &str| Request::Stat { at: canopy_proto::msg::At::Entry { dir, name: name.into() } };
    let cases = vec![
        (stat(String::new()), Errno::EINVAL),
        (stat("relative".into()), Errno::EINVAL),
        (stat("/a\0b".into()), Errno::EINVAL),
        (stat("/a//b".into()), Errno::EINVAL),
        (stat(format!("/{}", "n".repeat(256))), Errno::ENAMETOOLONG),
        (stat("/x".repeat(2100)), Errno::ENOENT),
        (stat("/x".repeat(canopy_proto::path::NS_PATH_MAX / 2 + 1)), Errno::ENAMETOOLONG),
        (stat("/../../etc/passwd".into()), Errno::ENOENT),
        (Request::Mkdir { path: "/".into(), mode: 0o777, id: canopy_proto::msg::dir_id_of_txn(9).unwrap(), fence: None }, Errno::EEXIST),
        (Request::Mkdir { path: "/m".into(), mode: 0o777, id: 77, fence: None }, Errno::EINVAL),
        (Request::LinkInsert { at: "/l".into(), ino: 5, home: 77, txn: None }, Errno::EINVAL),
        // Entries named by (directory id, name): an unknown id, and names no path could hold.
        (entry(u64::MAX, "f"), Errno::ENOENT),
        (entry(1, ".."), Errno::EINVAL),
        (entry(1, "a/b"), Errno::EINVAL),
        (entry(1, "a\0b"), Errno::EINVAL),
        (entry(1, &"n".repeat(1 << 16)), Errno::ENAMETOOLONG),
        (Request::ReadData { at: canopy_proto::msg::FileRef::Entry { dir: 0, name: "f".into() }, offset: 0, len: 1 }, Errno::ENOENT),
        (Request::Lock { locks: vec![], intent: canopy_proto::msg::Intent::Retry { path: "/".into() }, lease_ms: 1, wait_ms: 1 }, Errno::ENOSYS),
    ];
    for (req, want) in cases {
        let got = conn.call(&Creds::root(), &req, T).await;
        assert_eq!(got, Err(want), "{req:?}");
    }
    still_serves(&addr).await;
}

#[tokio::test]
async fn requests_to_unknown_servers_and_dead_peers_are_errors() {
    use canopy_rpc::{Daemon, TcpTransport, Transport};
    let addr = start_server().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let t = TcpTransport::new(&[addr.clone(), dead], &addr, admin(), T);
    let root = Creds::root();
    assert_eq!(t.call(Daemon::Server(5), &root, Request::Ping).await, Err(Errno::EINVAL));
    assert_eq!(t.call(Daemon::Server(1), &root, Request::Ping).await, Err(Errno::ECONNREFUSED));
    assert!(t.call(Daemon::Server(0), &root, Request::Ping).await.is_ok());
}

#[tokio::test]
async fn a_wrong_key_or_a_bad_hello_is_refused() {
    let addr = start_server().await;
    let forged = ClientAuth { identity: Identity::Cluster, key: Key::from_bytes([1; 32]) };
    assert_eq!(Connection::connect(&addr, &forged, T).await.err(), Some(Errno::EACCES));
    // A user key claiming another user's identity.
    let claims_root = ClientAuth { identity: Identity::User(Creds::root()), key: user(1000).key };
    assert_eq!(Connection::connect(&addr, &claims_root, T).await.err(), Some(Errno::EACCES));
    for bad_len in [0u16, u16::MAX] {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let mut hello = frame::handshake().to_vec();
        hello.extend_from_slice(&bad_len.to_be_bytes());
        s.write_all(&hello).await.unwrap();
        let mut reply = [0u8; frame::HANDSHAKE_REPLY_LEN + canopy_proto::auth::CHALLENGE_LEN];
        s.read_exact(&mut reply).await.unwrap();
        assert_eq!(u16::from_be_bytes([reply[8], reply[9]]), canopy_proto::auth::BAD_HELLO);
        assert!(closed(&mut s).await);
    }
    // An older protocol version is refused before anything else.
    let mut old = frame::handshake();
    old[4..].copy_from_slice(&1u16.to_be_bytes());
    refused_hello(&addr, &old).await;
    still_serves(&addr).await;
}

/// Every internal request, as a user key sends it: refused, and nothing changes.
#[tokio::test]
async fn internal_requests_need_the_cluster_key() {
    let addr = start_server().await;
    let alice = connect(&addr, &user(1000)).await;
    let dir = DirLookup { id: 77, mode: 0o777, uid: 1000, gid: 1000 };
    let internal = vec![
        Request::DirSync { path: "/x".into(), want: Some(dir.clone()), txn: None },
        Request::Mkdir { path: "/x".into(), mode: 0o777, id: canopy_proto::msg::dir_id_of_txn(9).unwrap(), fence: None },
        Request::Mkdir { path: "/x".into(), mode: 0o777, id: canopy_proto::msg::dir_id_of_txn(9).unwrap(), fence: Some(1) },
        Request::ClearFences { path: "/".into() },
        Request::Rmdir { path: "/x".into(), txn: 1 },
        Request::DirSetAttr { path: "/".into(), set: SetAttr::mode(0o777), txn: 1 },
        Request::Revoke { txn: 1 },
        Request::RenameDir { src: "/a".into(), dst: "/b".into(), step: RenameDirStep::Apply { times: None, unfence: None, txn: None } },
        Request::RenameDir { src: "/a".into(), dst: "/b".into(), step: RenameDirStep::Check { txn: 1 } },
        Request::Fence { txn: 1, paths: vec!["/".into()] },
        Request::Unfence { txn: 1 },
        Request::Migrate { root: "/".into(), limit: 10 },
        Request::Adopt { items: vec![], txn: None },
        Request::Release { items: vec![], txn: None },
        Request::DirProbe { path: "/".into() },
        Request::RecoveryStat { at: "/".into() },
        Request::InodeLinkDelta { ino: 5, delta: 1, txn: None },
        Request::LinkSettle { ino: 5, txn: 1, undo: true },
        Request::LinkPending { txn: 1 },
        Request::RenameDir { src: "/a".into(), dst: "/b".into(), step: RenameDirStep::Redo { txn: 1 } },
        Request::InodeSetAttr { ino: 5, set: SetAttr::mode(0o777) },
        Request::RenameOutCommit { src: "/f".into(), ino: 5, txn: None },
        Request::TouchDir { at: "/".into(), change: canopy_proto::msg::DirChange::Names, at_ns: 0 },
        Request::Fsck,
        Request::Lock { locks: vec![("/".into(), LockMode::Write)], intent: Intent::Retry { path: "/".into() }, lease_ms: 1, wait_ms: 1 },
        Request::Unlock { txn: 1, ticket: 1 },
        Request::Amend { txn: 1, ticket: 1, intent: Intent::Retry { path: "/".into() } },
    ];
    for req in internal {
        assert_eq!(alice.call(&Creds::root(), &req, T).await, Err(Errno::EPERM), "{req:?}");
    }
    // The fence on / was refused: the root still answers everyone.
    still_serves(&addr).await;
    let root = connect(&addr, &admin()).await;
    let Ok(Reply::Fsck(report)) = root.call(&Creds::root(), &Request::Fsck, T).await else { panic!("fsck") };
    assert_eq!((report.dirs, report.problems.len()), (1, 0));
}

/// An IndexFS server over TCP: its own requests need the cluster key; a user key
/// may not name entries by directory id (the server would check only that
/// directory, not its ancestors); a bulk insertion past its cap is refused whole,
/// and absurd names one by one.
#[tokio::test]
async fn indexfs_requests_are_bounded_and_need_the_cluster_key() {
    // The last step of a split of directory `dir` into partition `part`, with
    // `table` as its file entries.
    fn split_in(dir: u64, part: u32, table: Vec<u8>) -> Request {
        let mut parts = canopy_proto::giga::PartMap::new();
        parts.insert(part);
        let lookup = DirLookup { id: dir, mode: 0o755, uid: 0, gid: 0 };
        Request::IxSplitIn { dir, part, lookup, parent: 1, depth: 1, subdirs: 0, parts, chunk: 0, last: true, entries: table, dirs: Vec::new() }
    }
    use canopy_proto::msg::{At, FileRef};
    let server = MetaServer::open_mode("indexfs", ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS)), canopy_proto::clock::SystemClock::shared()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(canopy_rpc::server::serve(listener.into(), Arc::new(server), ServeOpts { key: cluster_key(), limits: ConnLimits::default() }));
    let alice = connect(&addr, &user(1000)).await;
    let root = connect(&addr, &admin()).await;
    let dir = DirLookup { id: 77, mode: 0o777, uid: 1000, gid: 1000 };
    let refused = vec![
        Request::IxLookup { dir: 1, name: "x".into(), depth: 1, client: 1 },
        Request::IxMkdir { dir: 1, name: "x".into(), mode: 0o777, txn: None },
        Request::IxMkHeader { lookup: dir.clone(), parent: 1, depth: 1, txn: None },
        Request::IxSeal { dir: 1, seal: true, txn: None },
        Request::IxRmdir { dir: 1, name: "x".into(), check_only: false, client: 1, txn: None },
        Request::IxDropHeader { dir: 1, txn: None },
        Request::IxDirSetAttr { dir: 0, name: String::new(), set: SetAttr::mode(0o777), client: 1, txn: None },
        Request::IxHeaderSet { lookup: dir.clone(), txn: None },
        Request::IxRenameDir { src: At::Entry { dir: 1, name: "a".into() }, dst: At::Entry { dir: 1, name: "b".into() }, client: 1, txn: None },
        Request::IxRenameDirOut { src: At::Entry { dir: 1, name: "a".into() }, dst: At::Entry { dir: 1, name: "b".into() } },
        Request::IxRenameDirIn { dst: At::Entry { dir: 1, name: "b".into() }, lookup: dir.clone(), txn: None },
        Request::IxRenameDirCommit { src: At::Entry { dir: 1, name: "a".into() }, id: 77, client: 1, txn: None },
        Request::IxBulkInsert { dir: 1, names: vec!["f".into()], mode: 0o644 },
        split_in(1, 1, b"x".to_vec()),
        Request::IxReadDir { dir: 1, after: None, limit: 10 },
        Request::IxRenew { items: vec![(1, "x".into(), 1)], client: 1 },
        // Generic requests, but naming by id.
        Request::Stat { at: At::Dir(1) },
        Request::Stat { at: At::Entry { dir: 1, name: "x".into() } },
        Request::ReadData { at: FileRef::Entry { dir: 1, name: "x".into() }, offset: 0, len: 1 },
    ];
    for req in refused {
        assert_eq!(alice.call(&Creds::root(), &req, T).await, Err(Errno::EPERM), "{req:?}");
    }
    let too_many = (0..canopy_proto::msg::BULK_MAX + 1).map(|_| String::new()).collect();
    assert_eq!(root.call(&Creds::root(), &Request::IxBulkInsert { dir: 1, names: too_many, mode: 0o644 }, T).await, Err(Errno::EMSGSIZE));
    let absurd = vec![String::new(), "a/b".into(), "n".repeat(300), "ok".into()];
    let Ok(Reply::Bulk { inserted, rejected }) = root.call(&Creds::root(), &Request::IxBulkInsert { dir: 1, names: absurd, mode: 0o644 }, T).await else { panic!("bulk") };
    assert_eq!(inserted, 1);
    assert_eq!(rejected.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![Errno::EINVAL, Errno::EINVAL, Errno::ENAMETOOLONG]);
    assert_eq!(root.call(&Creds::root(), &Request::IxBulkInsert { dir: 999, names: vec!["f".into()], mode: 0o644 }, T).await, Err(Errno::ENXIO));
    // Renewals: bounded, and answered one by one.
    let too_many = vec![(1, "x".to_string(), 1); canopy_proto::msg::MAX_RENEW + 1];
    assert_eq!(root.call(&Creds::root(), &Request::IxRenew { items: too_many, client: 1 }, T).await, Err(Errno::EMSGSIZE));
    let items = vec![(999, "x".to_string(), 1), (1, "nope".to_string(), 1), (1, "a/b".to_string(), 1)];
    let Ok(Reply::IxRenewed(answers)) = root.call(&Creds::root(), &Request::IxRenew { items, client: 1 }, T).await else { panic!("renew") };
    assert_eq!(answers.iter().map(|a| a.as_ref().err().copied()).collect::<Vec<_>>(), vec![Some(Errno::ENXIO), Some(Errno::ENOENT), Some(Errno::EINVAL)]);
    // A split step that names partition 0, another directory's state, or
    // carries no table is refused, and changes nothing.
    assert_eq!(root.call(&Creds::root(), &split_in(55, 0, Vec::new()), T).await, Err(Errno::EINVAL));
    let mut wrong_dir = split_in(55, 1, Vec::new());
    if let Request::IxSplitIn { lookup, .. } = &mut wrong_dir {
        lookup.id = 56;
    }
    assert_eq!(root.call(&Creds::root(), &wrong_dir, T).await, Err(Errno::EINVAL));
    assert_eq!(root.call(&Creds::root(), &split_in(55, 1, b"not a table".to_vec()), T).await, Err(Errno::EIO));
    let Ok(Reply::Fsck(report)) = root.call(&Creds::root(), &Request::Fsck, T).await else { panic!("fsck") };
    assert_eq!((report.dirs, report.files, report.problems.len()), (1, 1, 0), "{:?}", report.problems);
}

/// A Giraffa server over TCP: its servers check only what a request's proofs
/// vouch for, so a user key is served through delegation only; its own
/// requests need the cluster key; bounded requests and bad rows are refused.
#[tokio::test]
async fn giraffa_requests_need_the_cluster_key_and_are_bounded() {
    use canopy_proto::giraffa::{DirRow, GfRow, MAX_ROWS};
    use canopy_proto::msg::DirTimes;
    let server = MetaServer::open_mode("giraffa", ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS)), canopy_proto::clock::SystemClock::shared()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(canopy_rpc::server::serve(listener.into(), Arc::new(server), ServeOpts { key: cluster_key(), limits: ConnLimits::default() }));
    let alice = connect(&addr, &user(1000)).await;
    let root = connect(&addr, &admin()).await;
    let create = Request::Create { at: "/x".into(), mode: 0o644, kind: canopy_proto::msg::NewKind::Special { kind: canopy_proto::FileKind::Fifo, rdev: 0 }, if_exists: canopy_proto::msg::IfExists::Fail };
    let refused = vec![
        create.clone(),
        Request::Stat { at: "/".into() },
        Request::GfProof { path: "/".into(), adds: true },
        Request::GfEmpty { prefix: 1 },
        Request::GfScan { prefix: 1, after: None, limit: 1 },
        Request::GfFreeze { prefixes: vec![1], paths: vec![], thaw: false, txn: None },
    ];
    for req in refused {
        assert_eq!(alice.call(&Creds::root(), &req, T).await, Err(Errno::EPERM), "{req:?}");
    }
    assert!(matches!(alice.call(&Creds::root(), &Request::Ping, T).await, Ok(Reply::Pong { .. })));
    // Without a proof (or the parent's row on this server) a create has no
    // parent to check against.
    let orphan = Request::Create { at: "/nodir/x".into(), mode: 0o644, kind: canopy_proto::msg::NewKind::Special { kind: canopy_proto::FileKind::Fifo, rdev: 0 }, if_exists: canopy_proto::msg::IfExists::Fail };
    assert_eq!(root.call(&Creds::root(), &orphan, T).await, Err(Errno::ENOENT));
    let row = |name: &str, path: &str| GfRow::Dir {
        name: name.into(),
        row: DirRow { lookup: canopy_proto::msg::DirLookup { id: 99, mode: 0o755, uid: 0, gid: 0 }, path: path.into(), subdirs: 0 },
        times: DirTimes { atime: 0, mtime: 0, ctime: 0 },
    };
    let root_prefix = canopy_proto::giraffa::prefix(&canopy_proto::path::NsPath::root());
    let too_many = vec![row("a", "/a"); MAX_ROWS + 1];
    assert_eq!(root.call(&Creds::root(), &Request::GfPutRows { prefix: root_prefix, rows: too_many, fresh: false, txn: None }, T).await, Err(Errno::EINVAL));
    let elsewhere = vec![row("a", "/b/a")];
    assert_eq!(root.call(&Creds::root(), &Request::GfPutRows { prefix: root_prefix, rows: elsewhere, fresh: false, txn: None }, T).await, Err(Errno::EINVAL), "a row whose path is not its key");
    let bad_name = vec![row("a/b", "/a/b")];
    assert_eq!(root.call(&Creds::root(), &Request::GfPutRows { prefix: root_prefix, rows: bad_name, fresh: false, txn: None }, T).await, Err(Errno::EINVAL));
    let nested = Request::GfVouched { proofs: vec![], inner: vec![1, 2, 3] };
    assert!(root.call(&Creds::root(), &nested, T).await.is_err());
    let Ok(Reply::Fsck(report)) = root.call(&Creds::root(), &Request::Fsck, T).await else { panic!("fsck") };
    assert_eq!((report.dirs, report.problems.len()), (1, 0), "only the root: {:?}", report.problems);
}

/// BatchFS requests over TCP: the cluster key's only; a chunk past its caps,
/// a badly named file, an unknown batch or another user's are refused and
/// stage nothing; files their owner could not have made are refused one by
/// one at apply, and the rest lands.
#[tokio::test]
async fn batch_requests_need_the_cluster_key_and_are_bounded() {
    use canopy_proto::batch::{BatchFile, CHUNKS_MAX, CHUNK_MAX};
    use canopy_proto::msg::{At, FileData, Inode};
    let addr = start_server().await;
    let alice = connect(&addr, &user(1000)).await;
    let root = connect(&addr, &admin()).await;
    let file = |name: &str, uid: u32| {
        let attr = canopy_proto::Attr { ino: 0, kind: canopy_proto::FileKind::File, mode: 0o644, uid, gid: 1000, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
        BatchFile { name: name.into(), inode: Inode { attr, target: None, data: Some(FileData { fid: canopy_proto::Fid::new(7, uid as u64), inline: Some(Vec::new()) }) } }
    };
    let stage = |batch: u64, chunk: u32, files: Vec<BatchFile>| Request::BatchStage { batch, chunk, dir: At::Path("/job".into()), files };
    for req in [Request::BatchOpen { batch: 5, root: "/job".into() }, Request::BatchList, stage(5, 0, vec![]), Request::BatchApply { batch: 5 }, Request::BatchClose { batch: 5 }] {
        assert_eq!(alice.call(&Creds::root(), &req, T).await, Err(Errno::EPERM), "{req:?}");
    }
    let owner = Creds::user(1000, 1000);
    assert_eq!(root.call(&Creds::root(), &Request::Mkdir { path: "/job".into(), mode: 0o777, id: canopy_proto::msg::dir_id_of_txn(9).unwrap(), fence: None }, T).await.map(|_| ()), Ok(()));
    assert_eq!(root.call(&owner, &Request::BatchOpen { batch: 5, root: "no/slash".into() }, T).await, Err(Errno::EINVAL));
    assert_eq!(root.call(&owner, &Request::BatchOpen { batch: 5, root: "/job".into() }, T).await, Ok(Reply::Unit));
    assert_eq!(root.call(&Creds::user(1001, 1001), &Request::BatchOpen { batch: 5, root: "/job".into() }, T).await, Err(Errno::EEXIST), "another user's number");
    assert_eq!(root.call(&owner, &stage(6, 0, vec![file("a", 1000)]), T).await, Err(Errno::ENOENT), "no such batch");
    assert_eq!(root.call(&Creds::user(1001, 1001), &stage(5, 0, vec![file("a", 1001)]), T).await, Err(Errno::EPERM), "not the owner");
    assert_eq!(root.call(&owner, &stage(5, CHUNKS_MAX, vec![file("a", 1000)]), T).await, Err(Errno::EMSGSIZE));
    assert_eq!(root.call(&owner, &stage(5, 0, vec![file("a", 1000); CHUNK_MAX + 1]), T).await, Err(Errno::EMSGSIZE));
    assert_eq!(root.call(&owner, &stage(5, 0, vec![file("a/b", 1000)]), T).await, Err(Errno::EINVAL));
    assert_eq!(root.call(&owner, &stage(5, 0, vec![file("..", 1000)]), T).await, Err(Errno::EINVAL));
    let Ok(Reply::Batches(listed)) = root.call(&Creds::root(), &Request::BatchList, T).await else { panic!("list") };
    assert_eq!(listed.iter().map(|b| (b.batch, b.uid, b.staged)).collect::<Vec<_>>(), vec![(5, 1000, 0)], "nothing refused was staged");
    // Given away, twice in one batch, and one good file.
    assert_eq!(root.call(&owner, &stage(5, 0, vec![file("x", 0), file("ok", 1000), file("ok", 1000)]), T).await, Ok(Reply::Unit));
    let applied = root.call(&owner, &Request::BatchApply { batch: 5 }, T).await;
    assert_eq!(applied, Ok(Reply::BatchApplied { inserted: 1, landed: 0, rejected: vec![(0, 0, Errno::EPERM), (0, 2, Errno::EEXIST)] }));
    assert_eq!(root.call(&owner, &Request::BatchClose { batch: 5 }, T).await, Ok(Reply::Unit));
    assert_eq!(root.call(&owner, &Request::BatchApply { batch: 5 }, T).await, Err(Errno::ENOENT), "closed");
    let Ok(Reply::Fsck(report)) = root.call(&Creds::root(), &Request::Fsck, T).await else { panic!("fsck") };
    assert_eq!((report.files, report.problems.len()), (1, 0), "{:?}", report.problems);
}

/// A user key's requests carry its identity, whatever credentials they claim.
#[tokio::test]
async fn forged_credentials_are_replaced_by_the_keys() {
    let addr = start_server().await;
    let root = connect(&addr, &admin()).await;
    let create = |p: &str| Request::Create { at: p.into(), mode: 0o644, kind: canopy_proto::msg::NewKind::Special { kind: canopy_proto::FileKind::Fifo, rdev: 0 }, if_exists: canopy_proto::msg::IfExists::Fail };
    assert!(root.call(&Creds::root(), &create("/roots"), T).await.is_ok());
    let alice = connect(&addr, &user(1000)).await;
    // `/` is root's and 0755: creating there needs root, which alice claims.
    assert_eq!(alice.call(&Creds::root(), &create("/mine"), T).await, Err(Errno::EACCES));
    assert_eq!(alice.call(&Creds::root(), &Request::SetAttr { at: "/roots".into(), set: SetAttr::mode(0o777) }, T).await, Err(Errno::EPERM));
    // A chmod of / by the cluster key acting as alice is alice's too.
    assert_eq!(root.call(&Creds::user(1000, 1000), &Request::Unlink { at: "/roots".into() }, T).await, Err(Errno::EACCES));
    let Ok(Reply::Attr(a)) = alice.call(&Creds::root(), &Request::Stat { at: "/roots".into() }, T).await else { panic!("stat") };
    assert_eq!((a.uid, a.mode & 0o777), (0, 0o644));
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    kb.trim().trim_end_matches(" kB").trim().parse::<u64>().unwrap() * 1024
}

/// A real `canopy server` process, so that its memory is its own to measure,
/// with the lock service it asks for open transactions before it serves.
struct ServerProcess {
    child: std::process::Child,
    lockd: std::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        for c in [&mut self.child, &mut self.lockd] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

async fn server_process(max_conns: usize) -> ServerProcess {
    let dir = tempfile::tempdir().unwrap();
    let (addr, lockd) = (free_addr(), free_addr());
    let cluster = dir.path().join("cluster.json");
    std::fs::write(&cluster, format!(r#"{{"mode": "shardfs", "servers": ["{addr}"], "lockd": "{lockd}"}}"#)).unwrap();
    canopy_client::keyfile::save(&dir.path().join("cluster.key"), &Identity::Cluster, &cluster_key()).unwrap();
    let daemon = |args: &[&str], data: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_canopy"))
            .args(args)
            .arg("--data")
            .arg(dir.path().join(data))
            .arg("--cluster")
            .arg(&cluster)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let lockd = daemon(&["lockd"], "lockd");
    let child = daemon(&["server", "--index", "0", "--max-conns", &max_conns.to_string()], "s0");
    let p = ServerProcess { child, lockd, addr, _dir: dir };
    let start = std::time::Instant::now();
    while Connection::connect(&p.addr, &admin(), T).await.is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "the server did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p
}

/// Many idle connections, authenticated or not, neither exhaust a server process
/// nor keep a legitimate client out: the idlest are closed to make room, and the
/// server's memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_leaves_room_for_legitimate_clients() {
    let server = server_process(64).await;
    let addr = server.addr.clone();
    let pid = server.child.id();
    let before = rss(pid);
    let mut flood = Vec::new();
    for i in 0..300 {
        let s = if i % 2 == 0 { raw_as(&addr, &user(2000)).await } else { TcpStream::connect(&addr).await.unwrap() };
        flood.push(s);
    }
    let start = std::time::Instant::now();
    still_serves(&addr).await;
    assert!(start.elapsed() < Duration::from_secs(2), "a legitimate client waited {:?}", start.elapsed());
    // Most of the flood was closed to make room.
    let mut open = 0;
    for s in &mut flood {
        let mut b = [0u8; 1];
        if tokio::time::timeout(Duration::from_millis(20), s.read(&mut b)).await.is_err() {
            open += 1;
        }
    }
    assert!(open <= 64, "{open} flood connections still open");
    let grown = rss(pid).saturating_sub(before);
    eprintln!("flood: the server's memory grew {grown} bytes");
    assert!(grown < 32 << 20, "memory grew {grown} bytes");
}

/// A connection that goes quiet with nothing in flight is closed after the idle
/// limit; one whose handshake never finishes is closed too.
#[tokio::test]
async fn idle_connections_are_closed() {
    let addr = start_with(ConnLimits { max_conns: 64, idle: Duration::from_millis(300), ..ConnLimits::default() }).await;
    let mut quiet = raw(&addr).await;
    assert!(closed(&mut quiet).await, "an idle connection stays open");
    still_serves(&addr).await;
}

/// Absurd offsets and sizes in data requests, from a user's own file: nothing is
/// allocated for them, and the file stays cheap to stat.
#[tokio::test]
async fn oversized_offsets_allocate_nothing() {
    use canopy_proto::msg::{FileRef, IfExists, NewKind};
    let addr = start_server().await;
    let alice = connect(&addr, &user(1000)).await;
    let root = connect(&addr, &admin()).await;
    root.call(&Creds::root(), &Request::DirSetAttr { path: "/".into(), set: SetAttr::mode(0o777), txn: 1 }, T).await.unwrap();
    let create = Request::Create { at: "/f".into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
    alice.call(&Creds::root(), &create, T).await.unwrap();
    for offset in [1u64 << 30, u64::MAX - 1] {
        let write = Request::WriteData { at: FileRef::Path("/f".into()), offset, data: vec![1; 16], inline_max: u32::MAX, kill_suid: false };
        match alice.call(&Creds::root(), &write, T).await {
            Ok(Reply::Spill { data, .. }) => assert!(data.is_empty(), "at {offset}"),
            Err(Errno::EFBIG) => assert!(offset.checked_add(16).is_none(), "EFBIG only past the largest offset"),
            other => panic!("at {offset}: {other:?}"),
        }
    }
    let read = Request::ReadData { at: FileRef::Path("/f".into()), offset: 0, len: u32::MAX };
    assert!(matches!(alice.call(&Creds::root(), &read, T).await, Ok(Reply::Data(d)) if d.is_empty()));
    let start = std::time::Instant::now();
    let Ok(Reply::Attr(a)) = alice.call(&Creds::root(), &Request::Stat { at: "/f".into() }, T).await else { panic!("stat") };
    assert_eq!(a.size, 0);
    assert!(start.elapsed() < Duration::from_secs(1));
    // Bob's key cannot read or write Alice's 0600 file.
    root.call(&Creds::root(), &Request::SetAttr { at: "/f".into(), set: SetAttr::mode(0o600) }, T).await.unwrap();
    let bob = connect(&addr, &user(2000)).await;
    assert_eq!(bob.call(&Creds::root(), &read, T).await, Err(Errno::EACCES));
    let write = Request::WriteData { at: FileRef::Path("/f".into()), offset: 0, data: vec![1], inline_max: 100, kill_suid: false };
    assert_eq!(bob.call(&Creds::root(), &write, T).await, Err(Errno::EACCES));
}
