//! Who a connection speaks for, and how it proves it: a challenge-response over a
//! key, so no secret ever crosses the wire.
//!
//! Keys:
//! - The **cluster key** (32 random bytes, made by `canopy up`, kept with mode 0600
//!   beside the cluster file) is held by the servers, the lock service, mounts and
//!   the administrator. A connection made with it may send any request and assert
//!   any user's credentials (a mount checks its callers' rights itself).
//! - A **user key** binds a connection to one identity (uid, gid, groups). It is
//!   derived from the cluster key, `HMAC-SHA256(cluster key, "canopy user key v1" ‖
//!   identity)`, so servers keep no key database: they derive the key of the
//!   identity a client claims and check its proof. A user key reveals neither the
//!   cluster key nor any other identity's key. There is no revocation short of a
//!   new cluster key.
//!
//! The handshake, after the client's `MAGIC`/`VERSION` hello was accepted
//! (`frame::answer_handshake`):
//! 1. client → server: `u16 length ‖ postcard(Hello { identity, client_nonce })`;
//! 2. server → client: `u16 status ‖ server_nonce ‖ MAC(key, "server" ‖ transcript)`,
//!    so the client knows it talks to a holder of the cluster key;
//! 3. client → server: `MAC(key, "client" ‖ transcript)`;
//! 4. server → client: `u16 status`, and if it is `OK`, `u32` the server's idle
//!    limit in milliseconds (a connection with nothing to do for that long is
//!    closed; a client retires one idle for half of it first).
//!
//! The transcript is `client_nonce ‖ server_nonce ‖ postcard(identity)`; fresh
//! nonces on both sides make every proof good for one connection only. Pure: the
//! nonces come from the caller.

use crate::Creds;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub const KEY_LEN: usize = 32;
pub const NONCE_LEN: usize = 32;
pub const PROOF_LEN: usize = 32;
/// The largest hello a server reads (an identity with up to [`MAX_GROUPS`] groups).
pub const MAX_HELLO: usize = 1024;
pub const MAX_GROUPS: usize = 64;
/// The server's answer to a hello: status, its nonce, its proof.
pub const CHALLENGE_LEN: usize = 2 + NONCE_LEN + PROOF_LEN;

/// Handshake statuses.
pub const OK: u16 = 0;
pub const BAD_HELLO: u16 = 2;
pub const DENIED: u16 = 3;

type HmacSha256 = Hmac<Sha256>;

/// A secret key. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    pub fn from_bytes(b: [u8; KEY_LEN]) -> Key {
        Key(b)
    }

    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        self.0
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(s: &str) -> Option<Key> {
        let s = s.trim();
        if s.len() != 2 * KEY_LEN || !s.is_ascii() {
            return None;
        }
        let mut b = [0u8; KEY_LEN];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Key(b))
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    /// The key of `creds`, derived from this cluster key.
    pub fn derive_user(&self, creds: &Creds) -> Key {
        let mut m = self.mac();
        m.update(b"canopy user key v1");
        m.update(&postcard::to_stdvec(creds).expect("credentials serialise"));
        Key(m.finalize().into_bytes().into())
    }

    /// A key for one purpose (`label`), derived from this one, so a secret
    /// used to sign one kind of message never signs another.
    pub fn derive(&self, label: &[u8]) -> Key {
        let mut m = self.mac();
        m.update(b"canopy derived key v1");
        m.update(label);
        Key(m.finalize().into_bytes().into())
    }

    /// The MAC of `msg` under this key.
    pub fn sign(&self, msg: &[u8]) -> [u8; PROOF_LEN] {
        let mut m = self.mac();
        m.update(msg);
        m.finalize().into_bytes().into()
    }

    /// Whether `mac` is `msg`'s MAC under this key (compared in constant time).
    pub fn verify_signed(&self, msg: &[u8], mac: &[u8]) -> bool {
        let mut m = self.mac();
        m.update(msg);
        m.verify_slice(mac).is_ok()
    }

    /// The key a connection claiming `identity` must prove, given the cluster key.
    pub fn for_identity(&self, identity: &Identity) -> Key {
        match identity {
            Identity::Cluster => self.clone(),
            Identity::User(c) => self.derive_user(c),
        }
    }
}

/// Whom a connection speaks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Identity {
    /// A holder of the cluster key: a server, the lock service, a mount, the
    /// administrator.
    Cluster,
    /// One user: the server replaces every request's credentials with these.
    User(Creds),
}

impl Identity {
    pub fn is_cluster(&self) -> bool {
        matches!(self, Identity::Cluster)
    }

    /// The credentials a request from this peer acts with: a user key speaks for
    /// its own identity whatever the request claims; the cluster key may assert
    /// any caller's.
    pub fn acting_as(&self, claimed: Creds) -> Creds {
        match self {
            Identity::User(own) => own.clone(),
            Identity::Cluster => claimed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub identity: Identity,
    pub client_nonce: [u8; NONCE_LEN],
}

/// Which side a proof comes from; each side's proof is bound to its role, so one
/// cannot be replayed as the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// The proof `side` sends for `hello` and the server's nonce.
pub fn proof(key: &Key, side: Side, hello: &Hello, server_nonce: &[u8; NONCE_LEN]) -> [u8; PROOF_LEN] {
    transcript_mac(key, side, hello, server_nonce).finalize().into_bytes().into()
}

/// Checks a proof in constant time.
pub fn verify(key: &Key, side: Side, hello: &Hello, server_nonce: &[u8; NONCE_LEN], proof: &[u8]) -> bool {
    transcript_mac(key, side, hello, server_nonce).verify_slice(proof).is_ok()
}

fn transcript_mac(key: &Key, side: Side, hello: &Hello, server_nonce: &[u8; NONCE_LEN]) -> HmacSha256 {
    let mut m = key.mac();
    m.update(match side {
        Side::Server => b"canopy server proof v1",
        Side::Client => b"canopy client proof v1",
    });
    m.update(&hello.client_nonce);
    m.update(server_nonce);
    m.update(&postcard::to_stdvec(&hello.identity).expect("identities serialise"));
    m
}

/// `u16 length ‖ postcard(hello)`.
pub fn encode_hello(hello: &Hello) -> Vec<u8> {
    let body = postcard::to_stdvec(hello).expect("hellos serialise");
    let mut out = (body.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// The length a hello's prefix announces, if a server should read that much.
pub fn hello_len(prefix: [u8; 2]) -> Option<usize> {
    let n = u16::from_be_bytes(prefix) as usize;
    (n > 0 && n <= MAX_HELLO).then_some(n)
}

/// Decodes a hello's body; `None` if malformed or beyond the limits.
pub fn decode_hello(body: &[u8]) -> Option<Hello> {
    let (hello, rest): (Hello, &[u8]) = postcard::take_from_bytes(body).ok()?;
    match &hello.identity {
        Identity::User(c) if c.groups.len() > MAX_GROUPS => None,
        _ if !rest.is_empty() => None,
        _ => Some(hello),
    }
}

/// `status ‖ server nonce ‖ server proof`.
pub fn encode_challenge(status: u16, server_nonce: &[u8; NONCE_LEN], proof: &[u8; PROOF_LEN]) -> [u8; CHALLENGE_LEN] {
    let mut out = [0u8; CHALLENGE_LEN];
    out[..2].copy_from_slice(&status.to_be_bytes());
    out[2..2 + NONCE_LEN].copy_from_slice(server_nonce);
    out[2 + NONCE_LEN..].copy_from_slice(proof);
    out
}

pub fn decode_challenge(c: &[u8; CHALLENGE_LEN]) -> (u16, [u8; NONCE_LEN], [u8; PROOF_LEN]) {
    let mut nonce = [0u8; NONCE_LEN];
    let mut proof = [0u8; PROOF_LEN];
    nonce.copy_from_slice(&c[2..2 + NONCE_LEN]);
    proof.copy_from_slice(&c[2 + NONCE_LEN..]);
    (u16::from_be_bytes([c[0], c[1]]), nonce, proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Key {
        Key::from_bytes([7; KEY_LEN])
    }

    fn hello(identity: Identity) -> Hello {
        Hello { identity, client_nonce: [1; NONCE_LEN] }
    }

    #[test]
    fn each_identity_has_its_own_key_and_proofs_bind_everything() {
        let k = cluster();
        let alice = Identity::User(Creds::user(1000, 1000));
        let bob = Identity::User(Creds::user(2000, 2000));
        assert_ne!(k.for_identity(&alice), k.for_identity(&bob));
        assert_ne!(k.for_identity(&alice), k);
        let h = hello(alice.clone());
        let sn = [9; NONCE_LEN];
        let ka = k.for_identity(&alice);
        let p = proof(&ka, Side::Client, &h, &sn);
        assert!(verify(&ka, Side::Client, &h, &sn, &p));
        assert!(!verify(&ka, Side::Server, &h, &sn, &p), "a client proof is no server proof");
        assert!(!verify(&ka, Side::Client, &h, &[8; NONCE_LEN], &p), "bound to the server's nonce");
        assert!(!verify(&ka, Side::Client, &Hello { client_nonce: [2; NONCE_LEN], ..h.clone() }, &sn, &p), "and the client's");
        // Alice's key proves Alice only: claiming Bob with it fails.
        let as_bob = hello(bob.clone());
        assert!(!verify(&k.for_identity(&bob), Side::Client, &as_bob, &sn, &proof(&ka, Side::Client, &as_bob, &sn)));
        assert!(!verify(&k, Side::Client, &hello(Identity::Cluster), &sn, &proof(&ka, Side::Client, &hello(Identity::Cluster), &sn)));
    }

    #[test]
    fn derived_keys_sign_and_only_their_own_signatures_verify() {
        let k = cluster().derive(b"giraffa proofs");
        assert_ne!(k, cluster());
        assert_ne!(k, cluster().derive(b"other"));
        let mac = k.sign(b"message");
        assert!(k.verify_signed(b"message", &mac));
        assert!(!k.verify_signed(b"messagf", &mac));
        assert!(!cluster().verify_signed(b"message", &mac));
        assert!(!k.verify_signed(b"message", &mac[..31]));
    }

    #[test]
    fn hellos_round_trip_and_bounds_hold() {
        let h = hello(Identity::User(Creds { uid: 5, gid: 6, groups: vec![7, 8] }));
        let wire = encode_hello(&h);
        assert_eq!(hello_len([wire[0], wire[1]]), Some(wire.len() - 2));
        assert_eq!(decode_hello(&wire[2..]), Some(h));
        assert_eq!(hello_len([0, 0]), None);
        assert_eq!(hello_len(u16::MAX.to_be_bytes()), None);
        let many = hello(Identity::User(Creds { uid: 5, gid: 6, groups: (0..65).collect() }));
        assert_eq!(decode_hello(&encode_hello(&many)[2..]), None);
        assert_eq!(decode_hello(&[0xff; 40]), None);
    }

    #[test]
    fn keys_round_trip_as_hex_and_never_print() {
        let k = cluster();
        assert_eq!(Key::from_hex(&k.to_hex()), Some(k.clone()));
        assert_eq!(Key::from_hex("zz"), None);
        assert_eq!(format!("{k:?}"), "Key(..)");
    }
}
