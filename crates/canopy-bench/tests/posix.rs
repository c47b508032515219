//! The bench as system calls in a temporary directory: every phase runs without
//! errors, the tree on disk is exactly the planned one, the run's directory is
//! removed unless kept, and a bad directory is refused.

use canopy_bench::posix::{self, BenchDir};
use canopy_bench::workload::{renamed, Tree};
use canopy_bench::BenchConfig;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn config(phases: &[&str]) -> BenchConfig {
    BenchConfig { clients: 2, inflight: 4, dirs: 10, files: 200, stats: 400, phases: phases.iter().map(|s| s.to_string()).collect(), ..BenchConfig::default() }
}

/// Every path under `dir` (not `dir` itself), directories and files apart.
fn walk(dir: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut dirs, mut files) = (BTreeSet::new(), BTreeSet::new());
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path().to_str().unwrap().to_string();
        if entry.file_type().unwrap().is_dir() {
            let (d, f) = walk(&entry.path());
            dirs.insert(path);
            dirs.extend(d);
            files.extend(f);
        } else {
            files.insert(path);
        }
    }
    (dirs, files)
}

fn ops(phases: &[canopy_bench::PhaseReport]) -> Vec<(&str, u64, u64)> {
    phases.iter().map(|p| (p.name.as_str(), p.ops, p.errors)).collect()
}

#[test]
fn create_makes_exactly_the_planned_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BenchDir::create(tmp.path(), true).unwrap();
    let phases = posix::run(&dir, &config(&["mkdir", "create"])).unwrap();
    assert_eq!(ops(&phases), [("mkdir", 10, 0), ("create", 200, 0)]);
    let tree = Tree::new(dir.root(), 10, 200);
    let (dirs, files) = walk(Path::new(dir.root()));
    assert_eq!(dirs, tree.dirs.iter().cloned().collect());
    assert_eq!(files, tree.files.iter().cloned().collect());
    assert!(files.iter().all(|f| fs::metadata(f).unwrap().len() == 0));
    // Kept: still there after the run.
    let root = dir.root().to_string();
    dir.finish().unwrap();
    assert_eq!(walk(Path::new(&root)).1.len(), 200);
}

#[test]
fn every_phase_without_errors_then_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BenchDir::create(tmp.path(), false).unwrap();
    let phases = posix::run(&dir, &config(&["mkdir", "create", "stat", "chmod", "rename"])).unwrap();
    // 10 directories, 200 files, 400 stats, chmod of every directory, rename of the
    // 9 leaves (d0 is the only directory with children).
    assert_eq!(ops(&phases), [("mkdir", 10, 0), ("create", 200, 0), ("stat", 400, 0), ("chmod", 10, 0), ("rename", 9, 0)]);
    for p in &phases {
        assert!(p.rpc.is_none(), "no RPC figures for system calls");
        assert!(p.seconds > 0.0 && p.ops_per_sec > 0.0 && p.latency_us.p50 > 0.0 && p.latency_us.p99 >= p.latency_us.p50, "{p:?}");
    }
    // The leaves moved with their files, and every directory got the chmod.
    let tree = Tree::new(dir.root(), 10, 200);
    let leaves = tree.leaves();
    let moved = |p: &String| match leaves.iter().find(|l| p == *l || p.starts_with(&format!("{l}/"))) {
        Some(l) => format!("{}{}", renamed(l), &p[l.len()..]),
        None => p.clone(),
    };
    let (dirs, files) = walk(Path::new(dir.root()));
    assert_eq!(dirs, tree.dirs.iter().map(moved).collect());
    assert_eq!(files, tree.files.iter().map(moved).collect());
    for d in &dirs {
        assert_eq!(fs::metadata(d).unwrap().permissions().mode() & 0o7777, 0o775, "{d}");
    }
    dir.finish().unwrap();
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0, "the run's directory is removed");
}

#[test]
fn a_failed_system_call_is_counted_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BenchDir::create(tmp.path(), false).unwrap();
    // The first directory of the tree already exists: its mkdir fails with EEXIST.
    fs::create_dir(format!("{}/d0", dir.root())).unwrap();
    let phases = posix::run(&dir, &config(&["mkdir", "create"])).unwrap();
    assert_eq!(ops(&phases), [("mkdir", 10, 1), ("create", 200, 0)]);
}

#[test]
fn a_failed_setup_stops_the_run_and_removes_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BenchDir::create(tmp.path(), false).unwrap();
    fs::create_dir(format!("{}/d0", dir.root())).unwrap();
    // stat alone needs the tree made first, unmeasured; that must not fail.
    let err = posix::run(&dir, &config(&["stat"])).unwrap_err();
    assert_eq!(err, "1 operations of the bench's setup failed");
    drop(dir);
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn bad_directories_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let err = BenchDir::create(&missing, false).unwrap_err();
    assert_eq!(err, format!("cannot use {}: No such file or directory (os error 2)", missing.display()));
    let file = tmp.path().join("file");
    fs::write(&file, "").unwrap();
    assert_eq!(BenchDir::create(&file, false).unwrap_err(), format!("{} is not a directory", file.display()));
    // The run's directory is named after the process, so a second one here exists.
    let first = BenchDir::create(tmp.path(), false).unwrap();
    let err = BenchDir::create(tmp.path(), false).unwrap_err();
    assert_eq!(err, format!("{} already exists; remove it or bench another directory", first.root()));
    assert!(Path::new(first.root()).is_dir(), "refusing leaves the existing directory alone");
}
