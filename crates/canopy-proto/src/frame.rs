//! The framed binary codec.
//!
//! A connection opens with a handshake: the client sends `MAGIC` and its protocol
//! version (u16, big-endian); the server answers `MAGIC`, its version and a status
//! (0 = accepted, 1 = another protocol version). Then the client proves its key
//! (`crate::auth`), and both sides exchange frames:
//!
//! ```text
//! u32 len | u64 request id | u16 opcode | payload (len - 10 bytes)
//! ```
//!
//! all big-endian. A request's payload is postcard `(Creds, Request)`; a response
//! carries the request's id and opcode and a postcard `Result<Reply, Errno>`.
//! A request with id [`ONE_WAY`] (0) is answered with nothing, not even an
//! error: a post, whose sender waits for no answer. A response with id 0 says
//! the server could not read the client's framing and is closing.
//! `len` is checked against [`MAX_FRAME`] before anything is allocated.
//!
//! Decoding is two steps, as in mini-redis: [`check`] says whether a whole frame is
//! buffered ([`FrameError::Incomplete`] means read more) or the stream is broken
//! ([`FrameError::TooLarge`], [`FrameError::Malformed`]: answer and close, since the
//! stream cannot be resynchronised). A whole frame with a bad payload is answered with
//! an error for its request id and the connection goes on.

use crate::{Creds, Errno, Reply, Request};
use bytes::{Buf, BufMut, BytesMut};

pub const MAGIC: &[u8; 4] = b"CNPY";
/// Version 2: the key handshake (`crate::auth`) and lock sets that name paths only.
/// Version 3: requests name an entry by path or by (directory id, name) (`msg::At`).
/// Version 5: a directory rename's steps (`msg::RenameDirStep`): its check fences,
/// its apply may carry the directory's times and lift the fences.
/// Version 6: a request with id 0 is one-way ([`ONE_WAY`]).
/// Version 7: a listed transaction names its original id (`msg::TxnInfo::origin`).
/// Version 8: a directory rename's apply names its transaction (the source's
/// primary parks the times it drops; an undo takes them back).
/// Version 9: recovery revokes a transaction before it reads what it left
/// (`Request::Revoke`); rmdir and directory setattr steps name their
/// transaction; a rename's undo is a step of its own.
/// Version 10: a directory rename's migration steps (`Adopt`, `Release`) name
/// their transaction.
/// Version 11: a handover names the id whose lease ran out (`Reply::Recover`'s
/// `lapsed`), and recovery rolls a directory rename forward with its own step
/// (`RenameDirStep::Redo`); Giraffa's rename steps name their transaction;
/// a link's steps name theirs, whose count is settled (`LinkSettle`,
/// `LinkPending`).
/// Version 12: IndexFS's directory transactions' steps name their
/// transaction, refused once recovery revoked it, as does a file rename's
/// `RenameOutCommit` in every mode.
/// Version 13: servers issue FIDs (`NewKind::File` and `IxBulkInsert` carry
/// none); `TouchDir` says what changed and when; the handshake's last message
/// carries the server's idle limit; a `ReadData` answers at most
/// `msg::READ_REPLY_MAX` bytes.
pub const VERSION: u16 = 13;
/// The id of a request the server does not answer. A post's answer was read
/// and dropped by its sender: a reply written, a reader woken and a read
/// made for nothing (five a mkdir through the mount: the unlock, the
/// replicas' unfences, the parent's times).
pub const ONE_WAY: u64 = 0;
pub const HANDSHAKE_LEN: usize = 6;
pub const HANDSHAKE_REPLY_LEN: usize = 8;
/// Bytes after the length field that every frame has.
pub const HEADER_LEN: usize = 10;
/// The largest frame (`len` value) either side accepts.
pub const MAX_FRAME: usize = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Not a whole frame yet: read more bytes.
    Incomplete,
    /// The length prefix exceeds [`MAX_FRAME`].
    TooLarge(usize),
    /// The length prefix is too small to hold a header.
    Malformed,
}

/// A whole frame's header and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: u64,
    pub op: u16,
    pub payload: Vec<u8>,
}

/// Returns the total size of the frame at the front of `buf`, if it is all there.
pub fn check(buf: &[u8]) -> Result<usize, FrameError> {
    if buf.len() < 4 {
        return Err(FrameError::Incomplete);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    if len < HEADER_LEN {
        return Err(FrameError::Malformed);
    }
    if buf.len() < 4 + len {
        return Err(FrameError::Incomplete);
    }
    Ok(4 + len)
}

/// Takes the frame at the front of `buf` if a whole one is buffered.
pub fn parse(buf: &mut BytesMut) -> Result<Frame, FrameError> {
    let total = check(buf)?;
    let mut frame = buf.split_to(total);
    frame.advance(4);
    let id = frame.get_u64();
    let op = frame.get_u16();
    Ok(Frame { id, op, payload: frame.to_vec() })
}

fn put_frame(out: &mut BytesMut, id: u64, op: u16, payload: &[u8]) -> Result<(), Errno> {
    let len = HEADER_LEN + payload.len();
    if len > MAX_FRAME {
        return Err(Errno::EMSGSIZE);
    }
    out.reserve(4 + len);
    out.put_u32(len as u32);
    out.put_u64(id);
    out.put_u16(op);
    out.put_slice(payload);
    Ok(())
}

/// Appends a request frame to `out`. Fails with `EMSGSIZE` if it would be too large.
pub fn encode_request(out: &mut BytesMut, id: u64, creds: &Creds, req: &Request) -> Result<(), Errno> {
    let payload = postcard::to_stdvec(&(creds, req)).map_err(|_| Errno::EPROTO)?;
    put_frame(out, id, req.opcode(), &payload)
}

/// Appends a response frame to `out`. A reply too large to send becomes `EMSGSIZE`.
pub fn encode_response(out: &mut BytesMut, id: u64, op: u16, result: &Result<Reply, Errno>) {
    let payload = postcard::to_stdvec(result).expect("replies always serialise");
    if put_frame(out, id, op, &payload).is_err() {
        let err: Result<Reply, Errno> = Err(Errno::EMSGSIZE);
        let payload = postcard::to_stdvec(&err).expect("errors always serialise");
        put_frame(out, id, op, &payload).expect("an error reply fits in a frame");
    }
}

/// Decodes a request frame's payload. Unknown opcodes are `ENOSYS`; a payload that
/// does not decode, has trailing bytes, or disagrees with its opcode is `EPROTO`.
pub fn decode_request(frame: &Frame) -> Result<(Creds, Request), Errno> {
    if crate::msg::op_name(frame.op).is_none() {
        return Err(Errno::ENOSYS);
    }
    let (decoded, rest): ((Creds, Request), &[u8]) =
        postcard::take_from_bytes(&frame.payload).map_err(|_| Errno::EPROTO)?;
    if !rest.is_empty() || decoded.1.opcode() != frame.op {
        return Err(Errno::EPROTO);
    }
    Ok(decoded)
}

pub fn decode_response(frame: &Frame) -> Result<Reply, Errno> {
    let (decoded, rest): (Result<Reply, Errno>, &[u8]) =
        postcard::take_from_bytes(&frame.payload).map_err(|_| Errno::EPROTO)?;
    if !rest.is_empty() {
        return Err(Errno::EPROTO);
    }
    decoded
}

pub fn handshake() -> [u8; HANDSHAKE_LEN] {
    let mut h = [0u8; HANDSHAKE_LEN];
    h[..4].copy_from_slice(MAGIC);
    h[4..].copy_from_slice(&VERSION.to_be_bytes());
    h
}

/// Checks a client's handshake; returns the server's answer and whether to go on.
pub fn answer_handshake(hello: &[u8; HANDSHAKE_LEN]) -> ([u8; HANDSHAKE_REPLY_LEN], bool) {
    let ok = &hello[..4] == MAGIC && u16::from_be_bytes([hello[4], hello[5]]) == VERSION;
    let mut r = [0u8; HANDSHAKE_REPLY_LEN];
    r[..4].copy_from_slice(MAGIC);
    r[4..6].copy_from_slice(&VERSION.to_be_bytes());
    r[6..].copy_from_slice(&(if ok { 0u16 } else { 1u16 }).to_be_bytes());
    (r, ok)
}

/// Says in words why a server's handshake answer is a refusal.
pub fn describe_handshake_reply(reply: &[u8; HANDSHAKE_REPLY_LEN]) -> String {
    if &reply[..4] != MAGIC {
        return "not a Canopy daemon".to_string();
    }
    let theirs = u16::from_be_bytes([reply[4], reply[5]]);
    if theirs != VERSION {
        return format!("speaks Canopy protocol version {theirs}, this program version {VERSION}: run one release on every node");
    }
    "refused the handshake".to_string()
}

/// Checks a server's handshake answer.
pub fn check_handshake_reply(reply: &[u8; HANDSHAKE_REPLY_LEN]) -> Result<(), Errno> {
    if &reply[..4] != MAGIC {
        return Err(Errno::EPROTO);
    }
    if u16::from_be_bytes([reply[6], reply[7]]) != 0 {
        return Err(Errno::EPROTO);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::SetAttr;

    fn roundtrip(req: Request) {
        let mut buf = BytesMut::new();
        encode_request(&mut buf, 42, &Creds::user(5, 6), &req).unwrap();
        let frame = parse(&mut buf).unwrap();
        assert!(buf.is_empty());
        assert_eq!(frame.id, 42);
        let (creds, back) = decode_request(&frame).unwrap();
        assert_eq!(creds, Creds::user(5, 6));
        assert_eq!(back, req);
    }

    #[test]
    fn requests_round_trip() {
        roundtrip(Request::Stat { at: "/a".into() });
        roundtrip(Request::SetAttr { at: "/a".into(), set: SetAttr::mode(0o755) });
        roundtrip(Request::Unlock { txn: 9, ticket: 3 });
        roundtrip(Request::Amend { txn: 9, ticket: 3, intent: crate::msg::Intent::RenameOver { src: "/a".into(), dst: "/b".into(), replaced: 12 } });
        roundtrip(Request::Ping);
    }

    #[test]
    fn incomplete_is_not_malformed() {
        let mut buf = BytesMut::new();
        encode_request(&mut buf, 1, &Creds::root(), &Request::Stat { at: "/x".into() }).unwrap();
        for cut in 0..buf.len() {
            assert_eq!(check(&buf[..cut]), Err(FrameError::Incomplete), "cut {cut}");
        }
        assert_eq!(check(&buf), Ok(buf.len()));
    }

    #[test]
    fn oversized_and_short_lengths_are_rejected_before_allocation() {
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert_eq!(check(&huge), Err(FrameError::TooLarge(MAX_FRAME + 1)));
        assert_eq!(check(&u32::MAX.to_be_bytes()), Err(FrameError::TooLarge(u32::MAX as usize)));
        assert_eq!(check(&3u32.to_be_bytes()), Err(FrameError::Malformed));
    }

    #[test]
    fn bad_payloads_are_errors_not_panics() {
        let unknown = Frame { id: 1, op: 60000, payload: vec![] };
        assert_eq!(decode_request(&unknown), Err(Errno::ENOSYS));
        let garbage = Frame { id: 1, op: 1, payload: vec![0xff; 7] };
        assert_eq!(decode_request(&garbage), Err(Errno::EPROTO));
        // A valid Stat payload sent under the Ping opcode is inconsistent.
        let mut buf = BytesMut::new();
        encode_request(&mut buf, 1, &Creds::root(), &Request::Stat { at: "/".into() }).unwrap();
        let mut frame = parse(&mut buf).unwrap();
        frame.op = Request::Ping.opcode();
        assert_eq!(decode_request(&frame), Err(Errno::EPROTO));
        // Trailing bytes after a valid payload.
        frame.op = Request::Stat { at: "".into() }.opcode();
        frame.payload.push(0);
        assert_eq!(decode_request(&frame), Err(Errno::EPROTO));
    }

    #[test]
    fn handshake_checks_magic_and_version() {
        let (reply, ok) = answer_handshake(&handshake());
        assert!(ok);
        assert_eq!(check_handshake_reply(&reply), Ok(()));
        let (reply, ok) = answer_handshake(b"HTTP/1");
        assert!(!ok);
        assert_eq!(check_handshake_reply(&reply), Err(Errno::EPROTO));
        let mut old = handshake();
        old[4..].copy_from_slice(&1u16.to_be_bytes());
        let (reply, ok) = answer_handshake(&old);
        assert!(!ok, "another version is refused");
        assert_eq!(check_handshake_reply(&reply), Err(Errno::EPROTO));
        let mut newer = reply;
        newer[4..6].copy_from_slice(&(VERSION + 1).to_be_bytes());
        let said = describe_handshake_reply(&newer);
        assert!(said.contains(&format!("version {}, this program version {VERSION}", VERSION + 1)), "{said}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let mut buf = BytesMut::from(&bytes[..]);
            if let Ok(frame) = parse(&mut buf) {
                let _ = decode_request(&frame);
                let _ = decode_response(&frame);
            }
        }
    }
}
