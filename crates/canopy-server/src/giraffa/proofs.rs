//! Directory proofs: how the server holding a directory's row lets the server
//! holding its entries check a create, an unlink or a listing against the
//! directory's permissions without asking it.
//!
//! Giraffa checks only the parent's permissions (seed 000 §3.2), and the
//! parent's row usually lives on another server: that is the second RPC of a
//! create. The client asks the row's server for a proof (`GfProof`) and hands
//! it on; the proof is signed with a key only servers hold, so a client can
//! carry one but not make or alter one, and it expires [`PROOF_LIFE_MS`] after
//! it was issued. The issuer remembers, per directory, when its last proof
//! expires: a chmod or chown that takes a right from anyone returns only
//! after that, so no proof of the old permissions is honoured once it has
//! returned (one that only adds rights need not wait: [`widens`]); an rmdir waits out the
//! proofs good for adding entries (a create's, not an unlink's), so no entry
//! appears once it found the directory empty. Like leases, this assumes the servers' clocks agree to well
//! within a proof's life.
//!
//! Pure bookkeeping: times are passed in, in ms since the Unix epoch on the
//! server's wall clock (`Clock::wall_ms`). A proof's expiry is checked by
//! another server, so it must be on a clock the servers share: on each
//! process's monotonic clock, which starts afresh with the process, a server
//! restarted alone would find every proof of the others stale, and they its
//! own.

use canopy_proto::auth::Key;
use canopy_proto::giraffa::{DirProof, PROOF_LIFE_MS};
use canopy_proto::msg::DirLookup;
use canopy_proto::Errno;
use std::collections::HashMap;

/// How many directories the issuer remembers proofs of before it forgets
/// those whose proofs have all expired.
const MAX_ISSUED: usize = 65_536;

/// When the last proofs issued for one directory expire.
#[derive(Debug, Clone, Copy, Default)]
struct Issued {
    any: u64,
    adds: u64,
}

/// Whether every caller may do under `new` at least what it could under
/// `old`: the same owner and group, no permission bit taken away, the sticky
/// bit not newly set, the other bits (setgid, which new entries inherit by)
/// as they were. A proof of `old` then lets nobody do what `new` refuses, so
/// a chmod that only widens (as `cp -a` does to each directory it made) need
/// not wait the old proofs out.
pub(crate) fn widens(old: &DirLookup, new: &DirLookup) -> bool {
    const RWX: u32 = 0o777;
    const STICKY: u32 = 0o1000;
    let same_owners = (old.uid, old.gid) == (new.uid, new.gid);
    let no_bit_taken = new.mode & old.mode & RWX == old.mode & RWX;
    let sticky_not_set = new.mode & STICKY & !old.mode == 0;
    let rest_kept = old.mode & !(RWX | STICKY) == new.mode & !(RWX | STICKY);
    same_owners && no_bit_taken && sticky_not_set && rest_kept
}

pub(crate) struct Proofs {
    key: Key,
    /// Issuer: directory ino → when its last proofs expire.
    issued: HashMap<u64, Issued>,
    /// Issuer: directories being removed (ino → until when): no proofs.
    closed: HashMap<u64, u64>,
    /// Proofs issued before this server (re)started may be live until then.
    restarted_until: u64,
}

impl Proofs {
    /// `fresh`: the store is new, so no proof of it was ever issued.
    pub(crate) fn new(key: Key, now: u64, fresh: bool) -> Proofs {
        let restarted_until = if fresh { 0 } else { now + PROOF_LIFE_MS };
        Proofs { key, issued: HashMap::new(), closed: HashMap::new(), restarted_until }
    }

    /// A proof that the directory whose entries have `prefix` is `lookup`,
    /// good for adding entries if `adds`; `EAGAIN` while it is being removed.
    pub(crate) fn issue(&mut self, prefix: u64, lookup: &DirLookup, adds: bool, now: u64) -> Result<DirProof, Errno> {
        if self.closed.get(&lookup.id).is_some_and(|until| *until > now) {
            return Err(Errno::EAGAIN);
        }
        let expires = now + PROOF_LIFE_MS;
        if self.issued.len() >= MAX_ISSUED {
            self.issued.retain(|_, i| i.any > now);
        }
        let i = self.issued.entry(lookup.id).or_default();
        i.any = expires;
        if adds {
            i.adds = expires;
        }
        let mut p = DirProof { prefix, ino: lookup.id, mode: lookup.mode, uid: lookup.uid, gid: lookup.gid, expires, adds, mac: [0; 32] };
        p.mac = self.key.sign(&p.signed_bytes());
        Ok(p)
    }

    /// What `p` vouches for: `EPERM` for a proof no server made, `ESTALE` for
    /// an expired one (the client asks for a new one).
    pub(crate) fn verify(&self, p: &DirProof, now: u64) -> Result<DirLookup, Errno> {
        if !self.key.verify_signed(&p.signed_bytes(), &p.mac) {
            return Err(Errno::EPERM);
        }
        if p.expires <= now || p.expires > now + 2 * PROOF_LIFE_MS {
            return Err(Errno::ESTALE);
        }
        Ok(DirLookup { id: p.ino, mode: p.mode, uid: p.uid, gid: p.gid })
    }

    /// When the last proof of directory `ino` this server may have issued
    /// expires (0: none is live).
    pub(crate) fn live_until(&self, ino: u64) -> u64 {
        self.issued.get(&ino).map_or(0, |i| i.any).max(self.restarted_until)
    }

    /// The same for proofs good for adding entries.
    pub(crate) fn adds_live_until(&self, ino: u64) -> u64 {
        self.issued.get(&ino).map_or(0, |i| i.adds).max(self.restarted_until)
    }

    /// Stops proofs of `ino` until `until` (a removal in progress); false if
    /// another removal holds it.
    pub(crate) fn close(&mut self, ino: u64, now: u64, until: u64) -> bool {
        if self.closed.get(&ino).is_some_and(|u| *u > now) {
            return false;
        }
        self.closed.retain(|_, u| *u > now);
        self.closed.insert(ino, until);
        true
    }

    /// Whether a removal of `ino` begun here still holds it.
    pub(crate) fn is_closed(&self, ino: u64, now: u64) -> bool {
        self.closed.get(&ino).is_some_and(|u| *u > now)
    }

    pub(crate) fn reopen(&mut self, ino: u64) {
        self.closed.remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(id: u64, mode: u32) -> DirLookup {
        DirLookup { id, mode, uid: 1000, gid: 1000 }
    }

    fn pair() -> (Proofs, Proofs) {
        let k = Key::from_bytes([3; 32]);
        (Proofs::new(k.clone(), 0, true), Proofs::new(k, 0, true))
    }

    #[test]
    fn a_proof_is_honoured_by_another_server_until_it_expires() {
        let (mut issuer, verifier) = pair();
        let p = issuer.issue(77, &dir(5, 0o755), true, 1_000).unwrap();
        assert_eq!(verifier.verify(&p, 1_001), Ok(dir(5, 0o755)));
        assert_eq!(verifier.verify(&p, 1_000 + PROOF_LIFE_MS), Err(Errno::ESTALE));
        assert_eq!(issuer.live_until(5), 1_000 + PROOF_LIFE_MS);
        assert_eq!(issuer.adds_live_until(5), 1_000 + PROOF_LIFE_MS);
        assert_eq!(issuer.live_until(6), 0);
    }

    #[test]
    fn an_rmdir_waits_only_for_proofs_that_may_add_entries() {
        let (mut issuer, _) = pair();
        issuer.issue(77, &dir(5, 0o755), true, 1_000).unwrap();
        issuer.issue(77, &dir(5, 0o755), false, 2_000).unwrap();
        assert_eq!(issuer.adds_live_until(5), 1_000 + PROOF_LIFE_MS);
        assert_eq!(issuer.live_until(5), 2_000 + PROOF_LIFE_MS, "a chmod waits for every proof");
    }

    #[test]
    fn a_changed_or_foreign_proof_is_refused() {
        let (mut issuer, verifier) = pair();
        let p = issuer.issue(77, &dir(5, 0o555), false, 1_000).unwrap();
        let mut wider = p.clone();
        wider.mode = 0o777;
        assert_eq!(verifier.verify(&wider, 1_001), Err(Errno::EPERM));
        let mut adding = p.clone();
        adding.adds = true;
        assert_eq!(verifier.verify(&adding, 1_001), Err(Errno::EPERM));
        let other = Proofs::new(Key::from_bytes([4; 32]), 0, true);
        assert_eq!(other.verify(&p, 1_001), Err(Errno::EPERM), "another cluster's key");
    }

    #[test]
    fn a_directory_being_removed_gets_no_proofs_until_reopened_or_lapsed() {
        let (mut issuer, _) = pair();
        assert!(issuer.close(5, 100, 10_000));
        assert!(!issuer.close(5, 200, 10_000), "one removal at a time");
        assert_eq!(issuer.issue(77, &dir(5, 0o755), true, 300), Err(Errno::EAGAIN));
        assert!(issuer.is_closed(5, 300));
        issuer.reopen(5);
        assert!(issuer.issue(77, &dir(5, 0o755), true, 400).is_ok());
        assert!(issuer.close(5, 500, 600));
        assert!(!issuer.is_closed(5, 600), "a stalled removal lapses");
        assert!(issuer.issue(77, &dir(5, 0o755), true, 600).is_ok());
    }

    #[test]
    fn a_restarted_issuer_counts_every_directory_as_proved_for_one_life() {
        let k = Key::from_bytes([3; 32]);
        let restarted = Proofs::new(k, 5_000, false);
        assert_eq!(restarted.live_until(9), 5_000 + PROOF_LIFE_MS);
        assert_eq!(restarted.adds_live_until(9), 5_000 + PROOF_LIFE_MS);
    }

    #[test]
    fn only_a_change_that_takes_nothing_from_anyone_widens() {
        let dir = |mode: u32, uid: u32, gid: u32| DirLookup { id: 7, mode, uid, gid };
        let old = dir(0o700, 1, 2);
        assert!(widens(&old, &old), "no change");
        assert!(widens(&old, &dir(0o755, 1, 2)), "bits added");
        assert!(!widens(&old, &dir(0o600, 1, 2)), "the owner's search bit taken");
        assert!(!widens(&dir(0o755, 1, 2), &dir(0o750, 1, 2)), "others' bits taken");
        assert!(!widens(&old, &dir(0o777, 3, 2)), "another owner");
        assert!(!widens(&old, &dir(0o777, 1, 3)), "another group");
        assert!(!widens(&old, &dir(0o1777, 1, 2)), "sticky set: unlinks narrowed");
        assert!(widens(&dir(0o1777, 1, 2), &dir(0o777, 1, 2)), "sticky cleared");
        assert!(!widens(&old, &dir(0o2700, 1, 2)), "setgid set: new entries' group changes");
        assert!(!widens(&dir(0o2700, 1, 2), &dir(0o777, 1, 2)), "setgid cleared");
    }
}
