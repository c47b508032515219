//! Mounting and unmounting: the kernel side of a Canopy mount.

use crate::dispatch::CanopyFs;
use fuser::{Config, MountOption, SessionACL};
use std::io;
use std::path::Path;

/// Mounts `fs` at `mountpoint` and serves it until it is unmounted.
pub fn serve(fs: CanopyFs, mountpoint: &Path) -> io::Result<()> {
    let opts = fs.options().clone();
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("canopy".into()), MountOption::Subtype("canopy".into())];
    if opts.default_permissions {
        config.mount_options.push(MountOption::DefaultPermissions);
    }
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = opts.threads > 1;
    let notifier = fs.notifier_slot();
    let session = fuser::Session::new(fs, mountpoint, &config)?;
    let _ = notifier.set(session.notifier());
    session.run()
}

/// True if a Canopy file system is mounted at `mountpoint` (per /proc/self/mountinfo).
pub fn is_mounted(mountpoint: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = mountpoint.canonicalize().unwrap_or_else(|_| mountpoint.to_path_buf());
    mounted_in(&info, &want.to_string_lossy())
}

/// Whether `mountinfo` lists a Canopy mount at `point`. Fields: the fifth is the
/// mount point (with spaces escaped as \040), the file system type follows " - ".
pub fn mounted_in(mountinfo: &str, point: &str) -> bool {
    let escaped = point.replace(' ', "\\040");
    mountinfo.lines().any(|l| {
        let at = l.split(' ').nth(4);
        let fstype = l.split(" - ").nth(1).and_then(|r| r.split(' ').next());
        at == Some(escaped.as_str()) && matches!(fstype, Some("fuse.canopy") | Some("fuse"))
    })
}

/// Unmounts `mountpoint`; `lazy` detaches it now and finishes when it is no
/// longer busy.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_canopy_mounts_only() {
        let info = "36 25 0:32 / /mnt/c rw,nosuid,nodev - fuse.canopy canopy rw,user_id=0\n\
                    37 25 0:33 / /mnt/other rw - ext4 /dev/sda1 rw\n\
                    38 25 0:34 / /mnt/with\\040space rw - fuse.canopy canopy rw\n";
        assert!(mounted_in(info, "/mnt/c"));
        assert!(!mounted_in(info, "/mnt/other"));
        assert!(!mounted_in(info, "/mnt"));
        assert!(mounted_in(info, "/mnt/with space"));
    }
}
