//! Directories only the daemon's own user may read: a server's or the lock
//! service's store, and the back-end directories a mount keeps file contents
//! in. Names and contents inside them are other users' (a 0600 file's bytes,
//! the names in a 0700 directory), which the metadata service's permission
//! checks guard; the OS must not hand them out beside it.
//!
//! [`make_private`] creates such a directory 0700, or, if one is already
//! there with any group or other permission bit, takes those bits off it and
//! off everything below it (directories 0700, files 0600) and says what it
//! did. Files and directories the owner then creates are made 0600 and 0700
//! ([`FILE_MODE`], [`DIR_MODE`]; a daemon also sets its umask, [`owner_only_umask`]).

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;

/// What [`make_private`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tightened {
    /// The directory's mode before, if it was looser than [`DIR_MODE`].
    pub was: Option<u32>,
    /// Directories and files below it whose group and other bits were taken off.
    pub dirs: u64,
    pub files: u64,
}

impl Tightened {
    /// A line for the log, if anything was changed.
    pub fn report(&self, dir: &Path) -> Option<String> {
        let was = self.was?;
        Some(format!(
            "{} was open to other users (mode {was:04o}): made it and everything below it private to its owner (0700 directories, 0600 files; {} directories and {} files changed below it)",
            dir.display(),
            self.dirs,
            self.files
        ))
    }
}

/// Creates `dir` (and missing parents, those with the caller's umask) as
/// [`DIR_MODE`], or makes an existing one private with everything below it.
pub fn make_private(dir: &Path) -> io::Result<Tightened> {
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
        return Ok(Tightened::default());
    }
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(Tightened::default());
    }
    let mut out = Tightened { was: Some(mode), ..Tightened::default() };
    tighten_below(dir, &mut out)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !0o077))?;
    Ok(out)
}

/// Takes the group and other bits off everything below `dir` (symlinks are
/// left alone: their own mode means nothing).
fn tighten_below(dir: &Path, out: &mut Tightened) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            tighten_below(&entry.path(), out)?;
        }
        if mode & 0o077 != 0 {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode & !0o077))?;
            if meta.is_dir() {
                out.dirs += 1;
            } else {
                out.files += 1;
            }
        }
    }
    Ok(())
}

/// Creates (or truncates) file `path` as [`FILE_MODE`], whatever mode an
/// older one had: a daemon's log, which names what it served.
pub fn create_file(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(FILE_MODE).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    Ok(f)
}

/// Sets this process's umask to 077, so everything it creates from now on is
/// its user's alone (a store's files); returns the old one. Sockets meant for
/// every local user are given their mode explicitly (`socket.rs`).
pub fn owner_only_umask() -> u32 {
    // SAFETY: umask(2) only swaps the process's creation mask.
    unsafe { libc::umask(0o077) as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_new_directory_is_private_and_an_open_one_is_closed_with_its_contents() {
        let top = tempfile::tempdir().unwrap();
        let fresh = top.path().join("a/b");
        assert_eq!(make_private(&fresh).unwrap(), Tightened::default());
        assert_eq!(mode(&fresh), 0o700);

        let open = top.path().join("open");
        std::fs::create_dir_all(open.join("sub")).unwrap();
        std::fs::write(open.join("sub/f"), b"secret").unwrap();
        std::fs::write(open.join("g"), b"x").unwrap();
        for (p, m) in [(open.clone(), 0o755), (open.join("sub"), 0o775), (open.join("sub/f"), 0o644), (open.join("g"), 0o600)] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
        }
        let t = make_private(&open).unwrap();
        assert_eq!(t, Tightened { was: Some(0o755), dirs: 1, files: 1 });
        assert!(t.report(&open).unwrap().contains("mode 0755"));
        assert_eq!((mode(&open), mode(&open.join("sub")), mode(&open.join("sub/f")), mode(&open.join("g"))), (0o700, 0o700, 0o600, 0o600));
        assert_eq!(make_private(&open).unwrap().report(&open), None, "private already: nothing to say");
    }
}
