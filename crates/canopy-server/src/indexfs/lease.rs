//! IndexFS's stateless leases (seed 000 §3.2; seed 001 "Timeout Based Lease"):
//! a server remembers, per directory entry, only the latest expiry it granted,
//! never which client holds what. A mutation of the entry waits until that
//! expiry has passed; while it waits, lookups of the entry get a lease of 0 (not
//! cacheable), so the wait is bounded by the longest lease. Pure: times are
//! milliseconds of the server's clock, passed in.

use std::collections::HashMap;

pub use canopy_proto::modes::LeasePolicy;

#[derive(Debug, Default, Clone)]
struct Entry {
    expiry: u64,
    reads: u64,
    writes: u64,
    mutating: u32,
    /// The one client holding every live lease, if only one does.
    holder: Option<u64>,
}

/// The leases one server granted, by directory id of the entry.
#[derive(Debug)]
pub struct Leases {
    policy: LeasePolicy,
    entries: HashMap<u64, Entry>,
    /// No mutation before this: a restarted server does not know what it
    /// granted before it stopped.
    floor: u64,
}

/// Past this many remembered entries, expired ones are forgotten.
const PRUNE_AT: usize = 1 << 20;

impl Leases {
    /// A table for a server starting at `now`: mutations wait out the longest
    /// lease an earlier run could have granted (none if its store is `fresh`).
    pub fn new(policy: LeasePolicy, now: u64, fresh: bool) -> Leases {
        let floor = if fresh { now } else { now + policy.longest_ms() as u64 };
        Leases { policy, entries: HashMap::new(), floor }
    }

    pub fn policy(&self) -> LeasePolicy {
        self.policy
    }

    /// A lookup of entry `id` (a directory at `depth`, the root's children at 1)
    /// by `client` at `now`: the lease granted, 0 while a mutation of it waits.
    pub fn grant(&mut self, id: u64, depth: u32, now: u64, client: u64) -> u32 {
        if self.entries.len() >= PRUNE_AT {
            self.entries.retain(|_, e| e.mutating > 0 || e.expiry > now);
        }
        let e = self.entries.entry(id).or_default();
        e.reads += 1;
        if e.mutating > 0 {
            return 0;
        }
        let ms = self.policy.lease_ms(depth, e.reads, e.writes);
        e.holder = match e.holder {
            _ if e.expiry <= now => Some(client),
            Some(h) if h == client => Some(client),
            _ => None,
        };
        e.expiry = e.expiry.max(now + ms as u64);
        ms
    }

    /// A mutation of entry `id` by `client` begins: until [`Leases::end`],
    /// lookups of it are not cacheable. Returns the time it must wait for: the
    /// latest lease granted, unless `client` alone holds them (it dropped its
    /// copy before asking), and never before the restart floor.
    pub fn begin(&mut self, id: u64, client: u64) -> u64 {
        let floor = self.floor;
        let e = self.entries.entry(id).or_default();
        e.writes += 1;
        e.mutating += 1;
        if e.holder == Some(client) {
            return floor;
        }
        e.expiry.max(floor)
    }

    /// Entry `id` arrived from another server (a split moved it) at `now`:
    /// that server may have granted leases on it, whoever holds them, as long
    /// as the longest lease. A mutation waits them out.
    pub fn adopt(&mut self, id: u64, now: u64) {
        let e = self.entries.entry(id).or_default();
        e.expiry = e.expiry.max(now + self.policy.longest_ms() as u64);
        e.holder = None;
    }

    pub fn end(&mut self, id: u64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.mutating = e.mutating.saturating_sub(1);
        }
    }

    /// How many entries are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutation_waits_for_the_latest_lease_and_lookups_meanwhile_are_not_cacheable() {
        let mut l = Leases::new(LeasePolicy::Fixed { ms: 1000 }, 0, false);
        assert_eq!(l.grant(7, 1, 5_000, A), 1000);
        assert_eq!(l.grant(7, 1, 5_400, B), 1000);
        let until = l.begin(7, A);
        assert_eq!(until, 6_400, "the latest expiry granted");
        assert_eq!(l.grant(7, 1, 5_500, A), 0, "not cacheable while it waits");
        assert_eq!(l.begin(7, B), 6_400, "a second mutation waits as long");
        l.end(7);
        assert_eq!(l.grant(7, 1, 5_600, A), 0, "one mutation still running");
        l.end(7);
        assert_eq!(l.grant(7, 1, 6_500, A), 1000);
        assert_eq!(l.begin(8, A), 1000, "never granted: only the restart floor");
    }

    const A: u64 = 0xa;
    const B: u64 = 0xb;

    #[test]
    fn the_only_holder_of_live_leases_does_not_wait_for_its_own() {
        let mut l = Leases::new(LeasePolicy::Fixed { ms: 1000 }, 0, false);
        l.grant(7, 1, 5_000, A);
        l.grant(7, 1, 5_100, A);
        assert_eq!(l.begin(7, A), 1000, "only A holds leases on it");
        l.end(7);
        assert_eq!(l.begin(7, B), 6_100, "B must wait for A's");
        l.end(7);
        l.grant(7, 1, 5_200, B);
        assert_eq!(l.begin(7, A), 6_200, "two holders: everyone waits");
        l.end(7);
        // Once every lease expired, the next grantee holds alone again.
        l.grant(7, 1, 9_000, B);
        assert_eq!(l.begin(7, B), 1000);
    }

    #[test]
    fn a_restarted_server_waits_out_the_longest_lease() {
        let mut l = Leases::new(LeasePolicy::Depth { k_ms: 4000 }, 10_000, false);
        assert_eq!(l.begin(1, A), 14_000);
        l.end(1);
        l.grant(1, 1, 10_000, A);
        assert_eq!(l.begin(1, A), 14_000, "even its only holder waits out the restart");
        let mut fresh = Leases::new(LeasePolicy::Depth { k_ms: 4000 }, 10_000, true);
        assert_eq!(fresh.begin(1, A), 10_000, "a new store granted nothing before");
    }

    #[test]
    fn policies_follow_depth_and_read_write_rate() {
        let mut d = Leases::new(LeasePolicy::Depth { k_ms: 4000 }, 0, false);
        assert_eq!(d.grant(1, 1, 0, A), 4000);
        assert_eq!(d.grant(2, 4, 0, A), 1000);
        assert_eq!(d.grant(3, 0, 0, A), 4000, "the root counts as depth 1");
        let mut r = Leases::new(LeasePolicy::Rate { l_ms: 2000 }, 0, false);
        assert_eq!(r.grant(5, 1, 0, A), 2000, "only reads so far");
        r.begin(5, A);
        r.end(5);
        assert_eq!(r.grant(5, 1, 0, A), 1333, "2 reads, 1 write");
        for _ in 0..6 {
            r.begin(5, A);
            r.end(5);
        }
        assert_eq!(r.grant(5, 1, 0, A), 600, "3 reads, 7 writes");
    }

    #[test]
    fn policies_parse_with_and_without_lengths() {
        assert_eq!(LeasePolicy::parse("fixed"), Ok(LeasePolicy::Fixed { ms: 1000 }));
        assert_eq!(LeasePolicy::parse("depth:8000"), Ok(LeasePolicy::Depth { k_ms: 8000 }));
        assert_eq!(LeasePolicy::parse("rate"), Ok(LeasePolicy::Rate { l_ms: 2000 }));
        assert!(LeasePolicy::parse("lru").unwrap_err().contains("fixed[:MS]"));
        assert!(LeasePolicy::parse("fixed:x").is_err());
    }

    #[test]
    fn an_entry_moved_in_waits_out_the_longest_lease_whoever_holds_it() {
        let mut l = Leases::new(LeasePolicy::Fixed { ms: 1000 }, 0, true);
        l.adopt(7, 5_000);
        assert_eq!(l.begin(7, 42), 6_000, "even for a client that held the only lease it knows of");
        l.end(7);
    }
}
