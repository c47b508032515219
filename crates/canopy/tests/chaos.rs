//! `scripts/chaos` for a short while against this build's binary, in each mode,
//! with CLI clients and a FUSE mount:
//! SIGKILLs of servers, the lock service and clients during a mixed workload,
//! then fsck clean, no acknowledged operation lost and every directory taking
//! new entries again; and once at three replicas a group, with members
//! killed, wiped and replaced. Needs root and /dev/fuse (for the mount), as
//! CI has.

use std::process::Command;

fn short_chaos_run(mode: &str, replicas: u32) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/chaos");
    let out = Command::new("bash")
        .arg(script)
        .args(["--replicas", &replicas.to_string(), "12"])
        .env("CANOPY_BIN", env!("CARGO_BIN_EXE_canopy"))
        .env("CANOPY_MODE", mode)
        .output()
        .expect("run scripts/chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(summary.starts_with(&format!("chaos ({mode}): 12s")) && summary.contains(", 0 lost, 0 applied twice, 0 directories refusing writes after; fsck clean"), "{summary}");
}

#[test]
fn short_chaos_run_loses_nothing() {
    short_chaos_run("shardfs", 1);
}

#[test]
fn short_chaos_run_at_three_replicas_loses_nothing() {
    short_chaos_run("shardfs", 3);
}

#[test]
fn short_chaos_run_loses_nothing_on_indexfs() {
    short_chaos_run("indexfs", 1);
}

#[test]
fn short_chaos_run_loses_nothing_on_giraffa() {
    short_chaos_run("giraffa", 1);
}
