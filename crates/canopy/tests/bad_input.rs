//! Hostile input over real TCP: broken handshakes, malformed, truncated and
//! oversized frames, unknown opcodes, undecodable payloads and hostile paths. Each
//! gets its error (or a closed connection), and the server keeps serving others.

use bytes::BytesMut;
use canopy_proto::frame::{self, Frame};
use canopy_proto::{Creds, Errno, Reply, Request};
use canopy_rpc::conn::Connection;
use canopy_server::keys::ALL_CFS;
use canopy_server::{MetaServer, ServerConfig};
use canopy_store::MemStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(5);

async fn start_server() -> String {
    let server = MetaServer::open(ServerConfig { index: 0, servers: 1 }, Arc::new(MemStore::new(ALL_CFS))).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(canopy_rpc::server::serve(listener, Arc::new(server)));
    addr
}

async fn raw(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&frame::handshake()).await.unwrap();
    let mut reply = [0u8; frame::HANDSHAKE_REPLY_LEN];
    s.read_exact(&mut reply).await.unwrap();
    frame::check_handshake_reply(&reply).unwrap();
    s
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
    let conn = Connection::connect(addr, T).await.unwrap();
    let r = conn.call(&Creds::root(), &Request::Ping, T).await.unwrap();
    assert_eq!(r, Reply::Pong { server: 0, servers: 1 });
}

fn raw_frame(id: u64, op: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = ((10 + payload.len()) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&op.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

#[tokio::test]
async fn wrong_handshake_is_refused() {
    let addr = start_server().await;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut reply = [0u8; frame::HANDSHAKE_REPLY_LEN];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(frame::check_handshake_reply(&reply), Err(Errno::EPROTO));
    assert!(closed(&mut s).await);
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
    s.write_all(&raw_frame(8, Request::Stat { path: String::new() }.opcode(), &[0xff; 9])).await.unwrap();
    let f = read_frame(&mut s).await.unwrap();
    assert_eq!((f.id, frame::decode_response(&f)), (8, Err(Errno::EPROTO)));
    // A valid request on the same connection still works.
    let mut buf = BytesMut::new();
    frame::encode_request(&mut buf, 9, &Creds::root(), &Request::Stat { path: "/".into() }).unwrap();
    s.write_all(&buf).await.unwrap();
    let f = read_frame(&mut s).await.unwrap();
    assert!(matches!(frame::decode_response(&f), Ok(Reply::Attr(_))));
}

#[tokio::test]
async fn hostile_paths_get_errnos() {
    let addr = start_server().await;
    let conn = Connection::connect(&addr, T).await.unwrap();
    let stat = |p: String| Request::Stat { path: p };
    let cases = vec![
        (stat(String::new()), Errno::EINVAL),
        (stat("relative".into()), Errno::EINVAL),
        (stat("/a\0b".into()), Errno::EINVAL),
        (stat("/a//b".into()), Errno::EINVAL),
        (stat(format!("/{}", "n".repeat(256))), Errno::ENAMETOOLONG),
        (stat("/x".repeat(2100)), Errno::ENAMETOOLONG),
        (stat("/../../etc/passwd".into()), Errno::ENOENT),
        (Request::Mkdir { path: "/".into(), mode: 0o777, assign: None }, Errno::EEXIST),
        (Request::LinkInsert { path: "/l".into(), ino: 5, home: 77 }, Errno::EINVAL),
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
    use canopy_rpc::{Target, TcpTransport, Transport};
    let addr = start_server().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let t = TcpTransport::new(&[addr.clone(), dead], &addr, T);
    let root = Creds::root();
    assert_eq!(t.call(Target::Server(5), &root, Request::Ping).await, Err(Errno::EINVAL));
    assert_eq!(t.call(Target::Server(1), &root, Request::Ping).await, Err(Errno::ECONNREFUSED));
    assert!(t.call(Target::Server(0), &root, Request::Ping).await.is_ok());
}
