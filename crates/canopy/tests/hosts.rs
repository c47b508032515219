//! `scripts/hosts` at a small size against this build's binary: three
//! network namespaces as hosts, each replica group's members on different
//! ones; hosts cut off and killed while a writer changes a file's mode and a
//! reader on each host reads it (no read may be older than a write
//! acknowledged before it began); then one host lost for good, and the
//! namespace serving on with nothing lost. Needs root, as CI has.

use std::process::Command;

#[test]
fn three_hosts_serve_no_stale_read_and_survive_losing_one() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/hosts");
    let out = Command::new("bash").arg(script).arg("12").env("CANOPY_BIN", env!("CARGO_BIN_EXE_canopy")).output().expect("run scripts/hosts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(summary.contains(", 0 stale;") && summary.contains("30 of 30 files made after, 0 lost; fsck clean"), "{summary}");
}
