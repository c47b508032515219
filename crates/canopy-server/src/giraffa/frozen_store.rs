//! A directory rename's freezes, kept durably so a server restarted in the
//! middle of a rename still holds its rows still: without them, a row
//! changed after the rename copied it and before it deleted the old one
//! would be lost with the old row.
//!
//! Kept in the `meta` family, under [`PREFIX`] ‖ `p` ‖ row prefix (u64 BE)
//! or [`PREFIX`] ‖ `n` ‖ path, each valued with when the freeze lapses in
//! milliseconds since the Unix epoch (the in-memory lapse runs on the
//! process's monotonic clock, which starts afresh at a restart). A start
//! freezes again for what is left of each lapse and drops what has lapsed;
//! a thaw deletes.

use crate::core::{io, Core};
use crate::keys::META;
use canopy_proto::Errno;
use canopy_store::Batch;

const PREFIX: &[u8] = b"giraffa-frozen/";

fn prefix_key(prefix: u64) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.push(b'p');
    k.extend_from_slice(&prefix.to_be_bytes());
    k
}

fn path_key(path: &str) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.push(b'n');
    k.extend_from_slice(path.as_bytes());
    k
}

/// What one stored freeze holds still.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Held {
    Prefix(u64),
    Path(String),
}

fn split(k: &[u8]) -> Option<Held> {
    match k.strip_prefix(PREFIX)?.split_first()? {
        (b'p', rest) => Some(Held::Prefix(u64::from_be_bytes(rest.try_into().ok()?))),
        (b'n', rest) => Some(Held::Path(String::from_utf8(rest.to_vec()).ok()?)),
        _ => None,
    }
}

/// Adds to `b` the freeze of `prefixes` and `paths` until `wall_until`.
pub(crate) fn put(b: &mut Batch, prefixes: &[u64], paths: &[String], wall_until: u64) {
    let until = wall_until.to_be_bytes().to_vec();
    for p in prefixes {
        b.put(META, prefix_key(*p), until.clone());
    }
    for p in paths {
        b.put(META, path_key(p), until.clone());
    }
}

/// Adds to `b` the thaw of `prefixes` and `paths`.
pub(crate) fn delete(b: &mut Batch, prefixes: &[u64], paths: &[String]) {
    for p in prefixes {
        b.delete(META, prefix_key(*p));
    }
    for p in paths {
        b.delete(META, path_key(p));
    }
}

/// The freezes still to hold at `wall_now`, with the milliseconds left of
/// each; lapsed and unreadable records are deleted.
pub(crate) fn load(core: &Core, wall_now: u64) -> Result<Vec<(Held, u64)>, Errno> {
    let mut held = Vec::new();
    let mut gone = Batch::new();
    core.store
        .for_each(META, PREFIX, &mut |k, v| {
            let until = v.try_into().ok().map(u64::from_be_bytes);
            match (split(k), until) {
                (Some(h), Some(until)) if until > wall_now => held.push((h, until - wall_now)),
                _ => gone.delete(META, k.to_vec()),
            }
            true
        })
        .map_err(io)?;
    if !gone.is_empty() {
        core.write(gone)?;
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frozen_key_names_a_prefix_or_a_path() {
        assert_eq!(split(&prefix_key(0x1234)), Some(Held::Prefix(0x1234)));
        assert_eq!(split(&path_key("/a/b")), Some(Held::Path("/a/b".into())));
        assert_eq!(split(b"giraffa-frozen/p123"), None, "a short prefix");
        assert_eq!(split(b"giraffa-frozen/x"), None);
        assert_eq!(split(b"giraffa_regions"), None);
    }
}
