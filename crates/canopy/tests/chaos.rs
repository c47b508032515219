//! `scripts/chaos` for a short while against this build's binary: SIGKILLs of
//! servers, the lock service and clients during a mixed workload, then fsck clean
//! and no acknowledged operation lost.

use std::process::Command;

#[test]
fn short_chaos_run_loses_nothing() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/chaos");
    let out = Command::new("bash")
        .arg(script)
        .arg("12")
        .env("CANOPY_BIN", env!("CARGO_BIN_EXE_canopy"))
        .output()
        .expect("run scripts/chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(summary.starts_with("chaos: 12s") && summary.contains(", 0 lost; fsck clean"), "{summary}");
}
