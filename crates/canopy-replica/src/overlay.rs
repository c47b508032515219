//! What a leader has written but its group has not yet applied: the
//! leader's reads look here first, so its decisions see its own proposals
//! (two creates of one name: the second finds the first) without waiting
//! for a consensus round, and without holding any lock across one.
//!
//! Pure: each write carries an id; [`Overlay::forget`] drops a write's
//! changes once its group applied them to the store, unless a later write
//! to the same key is still pending.

use canopy_store::{Batch, Change};
use std::collections::BTreeMap;

/// What the overlay says of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Nothing pending: the store's value stands.
    Store,
    Put(Vec<u8>),
    Deleted,
}

/// The write that changed a key last, and its value (`None`: deleted).
type Newest = (u64, Option<Vec<u8>>);
/// Visits pairs in key order while the visitor says go on.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> bool + 'a;

#[derive(Debug, Clone, Default)]
pub struct Overlay {
    /// The newest pending change of each key: the write's id and its value
    /// (`None`: deleted).
    /// By family, then key: a lookup by a borrowed key allocates nothing.
    points: BTreeMap<&'static str, BTreeMap<Vec<u8>, Newest>>,
    /// Pending range deletions: id, family, `[from, to)`.
    ranges: Vec<(u64, &'static str, Vec<u8>, Vec<u8>)>,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.points.values().all(BTreeMap::is_empty) && self.ranges.is_empty()
    }

    /// Records write `id`'s changes, in order.
    pub fn add(&mut self, id: u64, batch: &Batch) {
        for c in &batch.changes {
            match c {
                Change::Put(cf, k, v) => {
                    self.points.entry(cf).or_default().insert(k.clone(), (id, Some(v.clone())));
                }
                Change::Delete(cf, k) => {
                    self.points.entry(cf).or_default().insert(k.clone(), (id, None));
                }
                Change::DeleteRange(cf, from, to) => {
                    // A range deletes what came before it in the write too.
                    if let Some(family) = self.points.get_mut(cf) {
                        family.retain(|k, _| !(k >= from && k < to));
                    }
                    self.ranges.push((id, cf, from.clone(), to.clone()));
                }
            }
        }
    }

    /// Forgets the changes of the writes in `ids`: the store holds them now.
    pub fn forget(&mut self, ids: &[u64]) {
        let ids: std::collections::HashSet<u64> = ids.iter().copied().collect();
        for family in self.points.values_mut() {
            family.retain(|_, (id, _)| !ids.contains(id));
        }
        self.ranges.retain(|(id, ..)| !ids.contains(id));
    }

    /// The newest pending range deletion covering `key`.
    fn range_over(&self, cf: &str, key: &[u8]) -> Option<u64> {
        self.ranges.iter().filter(|(_, c, from, to)| *c == cf && key >= &from[..] && key < &to[..]).map(|r| r.0).max()
    }

    pub fn get(&self, cf: &'static str, key: &[u8]) -> Seen {
        let point = self.points.get(cf).and_then(|f| f.get(key));
        let range = self.range_over(cf, key);
        match (point, range) {
            (Some((pid, v)), r) if r.is_none_or(|r| *pid > r) => match v {
                Some(v) => Seen::Put(v.clone()),
                None => Seen::Deleted,
            },
            (_, Some(_)) => Seen::Deleted,
            _ => Seen::Store,
        }
    }

    /// Whether a store key is hidden by a pending deletion or replaced by a
    /// pending put (which [`Overlay::puts_in`] yields instead).
    pub fn hides(&self, cf: &'static str, key: &[u8]) -> bool {
        self.get(cf, key) != Seen::Store
    }

    /// The pending puts of `cf` whose keys start with `prefix`, in key order.
    pub fn puts_in(&self, cf: &'static str, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(family) = self.points.get(cf) else { return Vec::new() };
        family
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, _)| matches!(self.get(cf, k), Seen::Put(_)))
            .filter_map(|(k, (_, v))| v.clone().map(|v| (k.clone(), v)))
            .collect()
    }

    /// Calls `f` on the pairs of the store's `for_each` as this overlay
    /// changes them, in key order, until `f` says stop: the store's pairs
    /// not hidden, merged with the pending puts.
    pub fn merge(
        &self,
        cf: &'static str,
        prefix: &[u8],
        store_for_each: &mut dyn FnMut(&mut Visit),
        f: &mut Visit,
    ) {
        let puts = self.puts_in(cf, prefix);
        let mut next = 0;
        let mut going = true;
        store_for_each(&mut |k, v| {
            while next < puts.len() && puts[next].0.as_slice() < k {
                going = f(&puts[next].0, &puts[next].1);
                next += 1;
                if !going {
                    return false;
                }
            }
            if self.hides(cf, k) {
                return true;
            }
            going = f(k, v);
            going
        });
        while going && next < puts.len() {
            going = f(&puts[next].0, &puts[next].1);
            next += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CF: &str = "t";

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Delete(u8),
        Range(u8, u8),
        Apply,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..16u8, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            (0..16u8).prop_map(Op::Delete),
            (0..16u8, 0..16u8).prop_map(|(a, b)| Op::Range(a.min(b), a.max(b))),
            Just(Op::Apply),
        ]
    }

    type Map = BTreeMap<Vec<u8>, Vec<u8>>;

    fn apply(map: &mut Map, b: &Batch) {
        for c in &b.changes {
            match c {
                Change::Put(_, k, v) => {
                    map.insert(k.clone(), v.clone());
                }
                Change::Delete(_, k) => {
                    map.remove(k);
                }
                Change::DeleteRange(_, f, t) => map.retain(|k, _| !(k >= f && k < t)),
            }
        }
    }

    proptest! {
        /// Reads through the overlay over a store that lags behind always
        /// match a store that applied every write at once, whichever writes
        /// the lagging store has applied so far (in order).
        #[test]
        fn reads_through_the_overlay_match_a_store_applying_at_once(ops in proptest::collection::vec(op(), 1..60)) {
            let (mut model, mut store, mut overlay) = (Map::new(), Map::new(), Overlay::default());
            let mut pending: Vec<(u64, Batch)> = Vec::new();
            for (id, op) in ops.into_iter().enumerate() {
                let mut b = Batch::new();
                match op {
                    Op::Put(k, v) => b.put(CF, vec![k], vec![v]),
                    Op::Delete(k) => b.delete(CF, vec![k]),
                    Op::Range(f, t) => b.delete_range(CF, vec![f], vec![t]),
                    Op::Apply => {
                        if !pending.is_empty() {
                            let (id, b) = pending.remove(0);
                            apply(&mut store, &b);
                            overlay.forget(&[id]);
                        }
                        continue;
                    }
                }
                apply(&mut model, &b);
                overlay.add(id as u64, &b);
                pending.push((id as u64, b));
                for k in 0..16u8 {
                    let seen = match overlay.get(CF, &[k]) {
                        Seen::Store => store.get(&vec![k]).cloned(),
                        Seen::Put(v) => Some(v),
                        Seen::Deleted => None,
                    };
                    prop_assert_eq!(seen, model.get(&vec![k]).cloned(), "key {}", k);
                }
                let mut merged = Vec::new();
                overlay.merge(CF, &[], &mut |g| { for (k, v) in &store { if !g(k, v) { break; } } }, &mut |k, v| { merged.push((k.to_vec(), v.to_vec())); true });
                prop_assert_eq!(merged, model.clone().into_iter().collect::<Vec<_>>());
            }
        }
    }
}
