//! Classes of directory lookup-state changes (seed 000 §3.3). Which procedure a
//! change runs depends on how it moves the set of permitted operations:
//! only adding (Procedure 1, primary first), only removing (Procedure 2, replicas
//! first), or both (non-monotonic: conflicting operations are fenced off on every
//! server for its duration). Pure: old and new lookup state in, class out.

use canopy_proto::attr::S_ISVTX;
use canopy_proto::msg::DirLookup;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing that path resolution looks at changes.
    Neutral,
    Increasing,
    Decreasing,
    NonMonotonic,
}

/// Classifies changing a directory's lookup state from `old` to `new`.
/// A new owner or group moves callers between permission classes, so it is
/// non-monotonic; the sticky bit restricts removal, so adding it decreases.
pub fn classify(old: &DirLookup, new: &DirLookup) -> Change {
    if old.uid != new.uid || old.gid != new.gid {
        return Change::NonMonotonic;
    }
    let added = new.mode & !old.mode & 0o777 != 0 || (old.mode & S_ISVTX != 0 && new.mode & S_ISVTX == 0);
    let removed = old.mode & !new.mode & 0o777 != 0 || (old.mode & S_ISVTX == 0 && new.mode & S_ISVTX != 0);
    match (added, removed) {
        (false, false) => Change::Neutral,
        (true, false) => Change::Increasing,
        (false, true) => Change::Decreasing,
        (true, true) => Change::NonMonotonic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(mode: u32, uid: u32, gid: u32) -> DirLookup {
        DirLookup { id: 9, mode, uid, gid }
    }

    #[test]
    fn classes() {
        assert_eq!(classify(&dir(0o755, 0, 0), &dir(0o775, 0, 0)), Change::Increasing);
        assert_eq!(classify(&dir(0o755, 0, 0), &dir(0o700, 0, 0)), Change::Decreasing);
        assert_eq!(classify(&dir(0o750, 0, 0), &dir(0o705, 0, 0)), Change::NonMonotonic);
        assert_eq!(classify(&dir(0o755, 0, 0), &dir(0o755, 1, 0)), Change::NonMonotonic);
        assert_eq!(classify(&dir(0o755, 0, 0), &dir(0o755, 0, 7)), Change::NonMonotonic);
        assert_eq!(classify(&dir(0o755, 0, 0), &dir(0o2755, 0, 0)), Change::Neutral);
        assert_eq!(classify(&dir(0o777, 0, 0), &dir(0o1777, 0, 0)), Change::Decreasing, "sticky restricts");
        assert_eq!(classify(&dir(0o1777, 0, 0), &dir(0o777, 0, 0)), Change::Increasing);
    }
}
