//! `canopy bench --posix DIR ...` as a user runs it: system calls on two
//! directories, no cluster, a table and JSON with both, and the directories left
//! as they were; a directory that cannot be used is an error before anything runs.

mod common;

use std::path::Path;
use std::process::Output;

fn canopy(args: &[&str]) -> Output {
    // No cluster may be started or used: point every way of finding one nowhere.
    common::canopy(Path::new("/nonexistent"), args)
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn two_directories_side_by_side() {
    let (a, b, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let json = out.path().join("out.json");
    let (a_s, b_s, json_s) = (a.path().to_str().unwrap(), b.path().to_str().unwrap(), json.to_str().unwrap());
    let phases = ["mkdir", "create", "stat", "chmod", "rename"];
    let run = canopy(&["bench", "--posix", a_s, "--posix", b_s, "--dirs", "5", "--files", "50", "--stats", "100", "--phases", &phases.join(","), "--json", json_s]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains(&format!("[1] {a_s}\n[2] {b_s}\n")), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| phases.iter().any(|p| l.starts_with(p))).count(), 5, "{stdout}");

    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["mode"], "posix");
    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 2);
    for (t, dir) in targets.iter().zip([a_s, b_s]) {
        assert_eq!(t["dir"], dir);
        let names: Vec<&str> = t["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, phases);
        for p in t["phases"].as_array().unwrap() {
            assert!(p["ops"].as_u64().unwrap() > 0 && p["ops_per_sec"].as_f64().unwrap() > 0.0, "{p}");
            assert_eq!(p["errors"], 0, "{p}");
            assert!(p["latency_us"]["p99"].as_f64().unwrap() > 0.0, "{p}");
            assert!(p.get("rpc_amplification").is_none() && p.get("retries").is_none(), "no Canopy figures for system calls: {p}");
        }
    }
    assert!(empty(a.path()) && empty(b.path()), "the bench's directories are removed");
}

#[test]
fn a_missing_directory_fails_before_anything_runs() {
    let a = tempfile::tempdir().unwrap();
    let missing = a.path().join("missing");
    let run = canopy(&["bench", "--posix", a.path().to_str().unwrap(), "--posix", missing.to_str().unwrap(), "--dirs", "5", "--files", "50"]);
    assert!(!run.status.success());
    assert!(run.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(stderr.trim_end(), format!("canopy: cannot use {}: No such file or directory (os error 2)", missing.display()));
    assert!(empty(a.path()), "nothing left in the directory that was fine");
}
