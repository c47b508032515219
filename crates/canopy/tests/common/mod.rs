//! Running the `canopy` binary as a user does, against one cluster home.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `canopy args` with `$CANOPY_HOME` set to `home` and no `$CANOPY_CLUSTER`
/// or `$CANOPY_KEY`, so the command finds exactly that cluster (or none) and its key.
pub fn canopy(home: &Path, args: &[&str]) -> Output {
    command(home).args(args).output().expect("run canopy")
}

/// The command [`canopy`] runs, for callers that set more (a user to run as).
pub fn command(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_canopy"));
    c.env("CANOPY_HOME", home).env_remove("CANOPY_CLUSTER").env_remove("CANOPY_KEY");
    c
}

/// Runs and expects success; returns stdout.
#[allow(dead_code)] // not every test file needs it
pub fn canopy_ok(home: &Path, args: &[&str]) -> String {
    let out = canopy(home, args);
    assert!(out.status.success(), "canopy {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `f` on a new thread acting as `uid` (gid the same, no supplementary
/// groups) for file system access. The raw syscalls change only that thread's
/// credentials (glibc's wrappers would change every thread's), and a non-zero
/// fsuid drops root's file capabilities, so the kernel and a mount both see
/// an ordinary user.
#[allow(dead_code)] // not every test file needs it
pub fn as_user<T: Send + 'static>(uid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: plain syscalls on this thread's own credentials; no memory is passed
        // but a null list of zero groups.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()), 0);
            libc::syscall(libc::SYS_setfsgid, uid);
            libc::syscall(libc::SYS_setfsuid, uid);
            assert_eq!(libc::syscall(libc::SYS_setfsuid, -1i32 as u32) as u32, uid, "fsuid set");
        }
        f()
    })
    .join()
    .unwrap()
}
