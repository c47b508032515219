//! The cluster-wide consistency check behind `canopy fsck`: every server's
//! replicated directory state identical, each server's local problems, every hard
//! link's nlink equal to the names referring to it, every partitioned directory
//! named exactly once, no transaction waiting for recovery. A transaction whose
//! lease is live is in flight, not a problem: it is reported as a note, with
//! when recovery takes it over if its client is gone.

use canopy_proto::msg::{FsckReport, TxnInfo};
use std::collections::HashMap;
use std::hash::Hash;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckSummary {
    pub servers: u32,
    pub dirs: u64,
    pub files: u64,
    pub problems: Vec<String>,
    /// Transactions in flight under a live lease, worded for a person.
    pub in_flight: Vec<String>,
}

impl FsckSummary {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// How the servers hold directories: every one all of them (ShardFS: their
/// replicas must be identical), or each its own share (IndexFS: counts add up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirLayout {
    Replicated,
    Partitioned,
}

/// Combines the servers' reports and the lock service's open transactions.
pub fn summarise(reports: &[FsckReport], txns: &[TxnInfo], layout: DirLayout) -> FsckSummary {
    let mut s = FsckSummary { servers: reports.len() as u32, ..FsckSummary::default() };
    if layout == DirLayout::Partitioned {
        s.dirs = reports.iter().map(|r| r.dirs).sum();
    } else if let Some(first) = reports.first() {
        s.dirs = first.dirs;
        for r in reports {
            if r.dir_digest != first.dir_digest || r.dirs != first.dirs {
                s.problems.push(format!(
                    "server {}: directory replica differs from server {} ({} vs {} directories)",
                    r.server, first.server, r.dirs, first.dirs
                ));
            }
        }
    }
    for r in reports {
        s.files += r.files;
        s.problems.extend(r.problems.iter().cloned());
    }
    let links = tally(
        reports.iter().flat_map(|r| r.links.iter().copied()),
        reports.iter().flat_map(|r| r.inodes.iter().map(|&(ino, nlink)| ((ino, r.server), r.server, nlink))),
    );
    for ((ino, _), server, nlink, names) in links.wrong {
        s.problems.push(format!("inode {ino:#x} on server {server}: nlink {nlink} but {names} names"));
    }
    for ((ino, home), n) in links.dangling {
        s.problems.push(format!("{n} names refer to inode {ino:#x} missing from server {home}"));
    }
    check_dir_names(reports, txns, &mut s);
    for t in txns {
        if t.expires_in_ms >= 0 {
            let secs = t.expires_in_ms as f64 / 1000.0;
            s.in_flight.push(format!("transaction {} in flight: {}; recovered after {secs:.1} s if its client is gone", t.txn, t.intent));
        } else {
            let secs = -t.expires_in_ms as f64 / 1000.0;
            s.problems.push(format!("transaction {} waiting for recovery (lease ended {secs:.1} s ago): {}", t.txn, t.intent));
        }
    }
    s
}

/// Partitioned directories: each is named by exactly one entry, and every
/// entry names a directory that has its home partition. Directory
/// transactions pass through other states (a rename between servers names
/// its directory twice from its insert to its commit, an mkdir names one
/// before its header is made, an rmdir drops the header before the name), so
/// while any transaction is in flight what this finds is a note, not a
/// problem; fsck settles once none is.
fn check_dir_names(reports: &[FsckReport], txns: &[TxnInfo], s: &mut FsckSummary) {
    let dirs = tally(
        reports.iter().flat_map(|r| r.dir_names.iter().copied()),
        reports.iter().flat_map(|r| r.dir_homes.iter().map(|&id| (id, r.server, 1))),
    );
    let mut found: Vec<String> = dirs
        .wrong
        .into_iter()
        .map(|(id, server, _, names)| match names {
            0 => format!("directory {id:#x} (home on server {server}) has no name"),
            n => format!("directory {id:#x} (home on server {server}) has {n} names"),
        })
        .collect();
    for (id, n) in dirs.dangling {
        found.push(format!("{n} names refer to directory {id:#x}, whose home holds no header"));
    }
    if txns.iter().any(|t| t.expires_in_ms >= 0) {
        s.in_flight.extend(found.into_iter().map(|f| format!("{f} (a transaction is in flight)")));
    } else {
        s.problems.extend(found);
    }
}

/// References matched against the objects they refer to.
struct Tally<K> {
    /// Objects referred to other than they expect: (key, server holding it,
    /// references expected, references found).
    wrong: Vec<(K, u32, u32, u32)>,
    /// Keys referred to that no server holds, with how many references.
    dangling: Vec<(K, u32)>,
}

/// Counts `refs` (one key per reference) against `held`: each object once,
/// as (key, server holding it, references it expects).
fn tally<K: Hash + Eq>(refs: impl IntoIterator<Item = K>, held: impl IntoIterator<Item = (K, u32, u32)>) -> Tally<K> {
    let mut count: HashMap<K, u32> = HashMap::new();
    for key in refs {
        *count.entry(key).or_default() += 1;
    }
    let mut wrong = Vec::new();
    for (key, server, expected) in held {
        let found = count.remove(&key).unwrap_or(0);
        if found != expected {
            wrong.push((key, server, expected, found));
        }
    }
    Tally { wrong, dangling: count.into_iter().collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::msg::Intent;

    fn report(server: u32, digest: u64) -> FsckReport {
        FsckReport { server, dir_digest: digest, dirs: 3, ..FsckReport::default() }
    }

    #[test]
    fn clean_cluster() {
        let mut a = report(0, 7);
        a.links = vec![(9, 1)];
        let mut b = report(1, 7);
        b.links = vec![(9, 1)];
        b.inodes = vec![(9, 2)];
        assert!(summarise(&[a, b], &[], DirLayout::Replicated).is_clean());
    }

    #[test]
    fn detects_divergence_bad_nlink_and_leftover_txns() {
        let mut b = report(1, 8);
        b.inodes = vec![(9, 2)];
        let txn = TxnInfo { txn: 4, origin: 4, intent: Intent::Mkdir { path: "/x".into() }, locks: vec![], expires_in_ms: -1 };
        let s = summarise(&[report(0, 7), b], &[txn], DirLayout::Replicated);
        assert_eq!(s.problems.len(), 3, "{:?}", s.problems);
    }

    #[test]
    fn partitioned_directories_add_up_and_are_not_compared() {
        let mut b = report(1, 0);
        b.dirs = 5;
        let s = summarise(&[report(0, 0), b], &[], DirLayout::Partitioned);
        assert!(s.is_clean(), "{:?}", s.problems);
        assert_eq!(s.dirs, 8);
    }

    #[test]
    fn a_partitioned_directory_has_exactly_one_name() {
        let (mut a, mut b) = (report(0, 0), report(1, 0));
        a.dir_homes = vec![5, 6, 7];
        a.dir_names = vec![5, 6];
        b.dir_names = vec![6, 9];
        let s = summarise(&[a.clone(), b.clone()], &[], DirLayout::Partitioned);
        let mut problems = s.problems.clone();
        problems.sort();
        assert_eq!(
            problems,
            vec![
                "1 names refer to directory 0x9, whose home holds no header",
                "directory 0x6 (home on server 0) has 2 names",
                "directory 0x7 (home on server 0) has no name",
            ]
        );
        // While a transaction is in flight, they are notes.
        let rename = TxnInfo { txn: 4, origin: 4, intent: Intent::Rename { src: "/x".into(), dst: "/y".into() }, locks: vec![], expires_in_ms: 900 };
        let s = summarise(&[a, b], &[rename], DirLayout::Partitioned);
        assert!(s.is_clean(), "{:?}", s.problems);
        assert!(s.in_flight.contains(&"directory 0x6 (home on server 0) has 2 names (a transaction is in flight)".to_string()), "{:?}", s.in_flight);
    }

    #[test]
    fn a_live_transaction_is_in_flight_not_a_problem() {
        let txn = TxnInfo { txn: 4, origin: 4, intent: Intent::Rmdir { path: "/x".into() }, locks: vec![], expires_in_ms: 2500 };
        let s = summarise(&[report(0, 7)], &[txn], DirLayout::Replicated);
        assert!(s.is_clean(), "{:?}", s.problems);
        assert_eq!(s.in_flight, vec!["transaction 4 in flight: rmdir /x; recovered after 2.5 s if its client is gone"]);
    }
}
