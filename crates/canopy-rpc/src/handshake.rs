//! Both sides of the connection handshake: protocol version (`frame`), then the
//! challenge-response of `canopy_proto::auth`. Nothing is allocated from what a
//! peer announces beyond [`auth::MAX_HELLO`] bytes, and the server side runs under
//! a time limit set by its caller.

use crate::random;
use canopy_proto::auth::{self, Hello, Identity, Key, Side};
use canopy_proto::frame;
use canopy_proto::Errno;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What a client proves: an identity and the key for it (the cluster key, or the
/// user key issued for that identity).
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub identity: Identity,
    pub key: Key,
}

/// Server side: the identity the peer proved, or `None` (the peer was told why
/// where the protocol allows, and must be dropped). A peer that proved itself
/// is told `idle`: how long the server keeps a connection with nothing to
/// do, so a client retires one before the server closes it under a request.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, cluster: &Key, idle: std::time::Duration) -> Option<Identity> {
    let mut hello = [0u8; frame::HANDSHAKE_LEN];
    s.read_exact(&mut hello).await.ok()?;
    let (answer, ok) = frame::answer_handshake(&hello);
    s.write_all(&answer).await.ok()?;
    if !ok {
        return None;
    }
    let mut prefix = [0u8; 2];
    s.read_exact(&mut prefix).await.ok()?;
    let Some(len) = auth::hello_len(prefix) else { return refuse(s, auth::BAD_HELLO).await };
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    let Some(hello) = auth::decode_hello(&body) else { return refuse(s, auth::BAD_HELLO).await };
    let key = cluster.for_identity(&hello.identity);
    let server_nonce = random::nonce().ok()?;
    let proof = auth::proof(&key, Side::Server, &hello, &server_nonce);
    s.write_all(&auth::encode_challenge(auth::OK, &server_nonce, &proof)).await.ok()?;
    let mut theirs = [0u8; auth::PROOF_LEN];
    s.read_exact(&mut theirs).await.ok()?;
    let good = auth::verify(&key, Side::Client, &hello, &server_nonce, &theirs);
    let status = if good { auth::OK } else { auth::DENIED };
    let mut last = status.to_be_bytes().to_vec();
    if good {
        last.extend_from_slice(&idle_ms(idle).to_be_bytes());
    }
    s.write_all(&last).await.ok()?;
    good.then_some(hello.identity)
}

async fn refuse<S: AsyncWrite + Unpin>(s: &mut S, status: u16) -> Option<Identity> {
    let _ = s.write_all(&auth::encode_challenge(status, &[0; auth::NONCE_LEN], &[0; auth::PROOF_LEN])).await;
    None
}

/// An idle limit as the handshake carries it: milliseconds, at least one.
fn idle_ms(idle: std::time::Duration) -> u32 {
    idle.as_millis().clamp(1, u32::MAX as u128) as u32
}

/// Client side: the server's idle limit ([`accept`]). `EPROTO`: not a Canopy
/// daemon of this protocol version (said on stderr); `EACCES`: the daemon
/// refused our key, or could not prove it holds the cluster key itself.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, me: &ClientAuth, addr: &str) -> Result<std::time::Duration, Errno> {
    let lost = |_| Errno::ENOTCONN;
    let hello = Hello { identity: me.identity.clone(), client_nonce: random::nonce().map_err(|_| Errno::EIO)? };
    let mut first = frame::handshake().to_vec();
    first.extend_from_slice(&auth::encode_hello(&hello));
    s.write_all(&first).await.map_err(lost)?;
    let mut reply = [0u8; frame::HANDSHAKE_REPLY_LEN];
    s.read_exact(&mut reply).await.map_err(lost)?;
    if let Err(e) = frame::check_handshake_reply(&reply) {
        eprintln!("canopy: {addr}: {}", frame::describe_handshake_reply(&reply));
        return Err(e);
    }
    let mut challenge = [0u8; auth::CHALLENGE_LEN];
    s.read_exact(&mut challenge).await.map_err(lost)?;
    let (status, server_nonce, server_proof) = auth::decode_challenge(&challenge);
    if status != auth::OK {
        eprintln!("canopy: {addr} refused the handshake (status {status})");
        return Err(Errno::EPROTO);
    }
    if !auth::verify(&me.key, Side::Server, &hello, &server_nonce, &server_proof) {
        eprintln!("canopy: {addr} does not hold this cluster's key (or ours is not this cluster's)");
        return Err(Errno::EACCES);
    }
    s.write_all(&auth::proof(&me.key, Side::Client, &hello, &server_nonce)).await.map_err(lost)?;
    let mut status = [0u8; 2];
    s.read_exact(&mut status).await.map_err(lost)?;
    if u16::from_be_bytes(status) != auth::OK {
        eprintln!("canopy: {addr} refused our key");
        return Err(Errno::EACCES);
    }
    let mut idle = [0u8; 4];
    s.read_exact(&mut idle).await.map_err(lost)?;
    Ok(std::time::Duration::from_millis(u32::from_be_bytes(idle).max(1) as u64))
}
