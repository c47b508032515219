//! The regions of Giraffa's table held by one server, as HBase keeps them: the
//! table is pre-split (`canopy_proto::giraffa::region_server`) and a region
//! that grows past a size splits in two at the middle of its key range. As in
//! HBase, both daughters stay on the server that held the region (moving one
//! is the balancer's work, which the paper's setup avoids by pre-splitting),
//! so routing never changes; what a split changes is how this server's share
//! is cut, which `Stats` reports (`regions`, `region_splits`). Splits happen at
//! prefix granularity, so one directory is never divided (HBase could cut
//! inside a 10 GB directory; the paper notes Giraffa rarely splits one): a
//! region splits at the prefix that halves its rows, and a region holding
//! one directory only does not split.
//!
//! Pure bookkeeping: sizes are counted rows per prefix (written since the
//! server started, plus those found at start), boundaries are key prefixes.

use canopy_proto::giraffa::{PREFIX_BIT, REGIONS_PER_SERVER};
use std::collections::BTreeMap;

pub(crate) struct Regions {
    /// Rows counted under each prefix held here.
    rows: BTreeMap<u64, u64>,
    /// Rows counted in each region (start → rows).
    totals: BTreeMap<u64, u64>,
    /// Where each region ends (exclusive; `None`: the end of the key space).
    ends: BTreeMap<u64, Option<u64>>,
    threshold: u64,
    splits: u64,
}

impl Regions {
    /// The pre-split regions server `me` of `servers` holds, or `starts` if
    /// the server recorded its own (after splits).
    pub(crate) fn new(me: u32, servers: u32, threshold: u64, recorded: Option<Vec<(u64, Option<u64>)>>) -> Regions {
        let n = servers.max(1) as u64;
        let count = REGIONS_PER_SERVER * n;
        let width = (1u64 << 63) / count + 1;
        let bounds = recorded.unwrap_or_else(|| {
            (0..count)
                .filter(|i| i % n == me as u64)
                .map(|i| {
                    // Region 0 also holds the root's row (prefix 0).
                    let start = if i == 0 { 0 } else { PREFIX_BIT | (i * width) };
                    (start, (i + 1 < count).then(|| PREFIX_BIT | ((i + 1) * width)))
                })
                .collect()
        });
        Regions { rows: BTreeMap::new(), totals: BTreeMap::new(), ends: bounds.into_iter().collect(), threshold: threshold.max(2), splits: 0 }
    }

    /// The start of the region holding `prefix`, if this server holds it.
    fn region_of(&self, prefix: u64) -> Option<u64> {
        let (start, end) = self.ends.range(..=prefix).next_back()?;
        end.is_none_or(|e| prefix < e).then_some(*start)
    }

    /// `n` rows were written under `prefix`; the boundaries to record if that
    /// split its region.
    pub(crate) fn grew(&mut self, prefix: u64, n: u64) -> Option<Vec<(u64, Option<u64>)>> {
        let start = self.region_of(prefix)?;
        *self.rows.entry(prefix).or_default() += n;
        let total = {
            let t = self.totals.entry(start).or_default();
            *t += n;
            *t
        };
        if total <= self.threshold {
            return None;
        }
        // Past the size: find the middle (once per split, so O(prefixes) then).
        let end = self.ends[&start];
        let range = || self.rows.range(start..end.unwrap_or(u64::MAX)).chain(self.rows.range(u64::MAX..).filter(|_| end.is_none()));
        // The first prefix at which at least half the rows lie below.
        let mut below = 0;
        let mid = range().find(|(_, r)| {
            below += **r;
            below * 2 >= total
        })?;
        let (mid, first) = (*mid.0, *range().next()?.0);
        // Both daughters hold rows: the lower one at least the first prefix.
        let split_at = if mid > first { mid } else { *range().nth(1)?.0 };
        let upper: u64 = range().filter(|(p, _)| **p >= split_at).map(|(_, r)| r).sum();
        self.totals.insert(start, total - upper);
        self.totals.insert(split_at, upper);
        self.ends.insert(start, Some(split_at));
        self.ends.insert(split_at, end);
        self.splits += 1;
        Some(self.bounds())
    }

    pub(crate) fn bounds(&self) -> Vec<(u64, Option<u64>)> {
        self.ends.iter().map(|(s, e)| (*s, *e)).collect()
    }

    /// (regions held, splits since start).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.ends.len() as u64, self.splits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::giraffa::region_server;

    #[test]
    fn a_server_holds_the_pre_split_regions_routing_sends_it() {
        for me in 0..4 {
            let r = Regions::new(me, 4, 1_000, None);
            assert_eq!(r.counts(), (REGIONS_PER_SERVER, 0));
            for k in [0u64, PREFIX_BIT | 12345, u64::MAX, PREFIX_BIT | (1 << 62)] {
                assert_eq!(r.region_of(k).is_some(), region_server(k, 4) == me, "key {k:#x} on server {me}");
            }
        }
    }

    #[test]
    fn a_region_past_its_size_splits_at_the_prefix_that_halves_it() {
        let mut r = Regions::new(0, 2, 10, None);
        let (a, b, c) = (PREFIX_BIT | 5, PREFIX_BIT | 9, PREFIX_BIT | 13);
        assert_eq!(r.grew(a, 4), None);
        assert_eq!(r.grew(b, 4), None);
        let bounds = r.grew(c, 3).expect("11 rows past 10: a split");
        assert_eq!(r.counts(), (REGIONS_PER_SERVER + 1, 1));
        assert!(bounds.iter().any(|(s, _)| *s == b), "{bounds:?}");
        assert_eq!(r.region_of(a), Some(0));
        assert_eq!(r.region_of(b), Some(b), "the upper daughter starts at the middle prefix");
        assert_eq!(r.region_of(c), Some(b));
        // The daughters cover what the region covered: each key still here.
        let again = Regions::new(0, 2, 10, Some(bounds));
        for k in [0u64, a, b, c, PREFIX_BIT | (1 << 58)] {
            assert_eq!(again.region_of(k).is_some(), region_server(k, 2) == 0);
        }
        assert_eq!(r.grew(PREFIX_BIT | (1 << 62) | 1, 5), None, "another server's key is not counted here");
    }

    #[test]
    fn a_region_holding_one_directory_does_not_split() {
        let mut r = Regions::new(0, 1, 10, None);
        assert_eq!(r.grew(PREFIX_BIT | 7, 1_000), None);
        assert_eq!(r.counts(), (REGIONS_PER_SERVER, 0));
    }
}
