//! Back-end storage for file contents (seed 003 §IV.G): one or more directories
//! (a local disk, an NFS or Lustre mount), each file under the path its FID maps
//! to. Every client computes the same place, so none asks anyone where data is.

use canopy_proto::Fid;
use canopy_rpc::private_dir::{make_private, DIR_MODE, FILE_MODE};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Backends {
    dirs: Vec<PathBuf>,
}

impl Backends {
    /// Checks that each directory exists and is a directory, and makes it
    /// private to this process's user (`canopy_rpc::private_dir`): the
    /// contents below are every user's files, which only the metadata
    /// service's checks may hand out. Answers what had to be closed, a line
    /// per directory, for the log.
    pub fn new(dirs: Vec<PathBuf>) -> io::Result<(Backends, Vec<String>)> {
        if dirs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "at least one data directory is needed"));
        }
        let mut said = Vec::new();
        for d in &dirs {
            if !std::fs::metadata(d)?.is_dir() {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a directory", d.display())));
            }
            said.extend(make_private(d)?.report(d));
        }
        Ok((Backends { dirs }, said))
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    pub fn path(&self, fid: Fid) -> PathBuf {
        self.dirs[fid.backend(self.dirs.len())].join(fid.relative_path())
    }

    /// Opens the contents of `fid` for reading and writing, creating the file (and
    /// its directories) if it does not exist yet, private to this user.
    pub fn open(&self, fid: Fid) -> io::Result<File> {
        let path = self.path(fid);
        let open = |p: &Path| OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(FILE_MODE).open(p);
        match open(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(path.parent().expect("FID paths have parents"))?;
                open(&path)
            }
            other => other,
        }
    }

    /// Deletes the contents of `fid`; a file already gone is not an error.
    pub fn remove(&self, fid: Fid) -> io::Result<()> {
        match std::fs::remove_file(self.path(fid)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Space figures of the first directory, for statfs.
    pub fn statvfs(&self) -> io::Result<libc::statvfs> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(self.dirs[0].as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid NUL-terminated path and `out` a properly sized struct.
        unsafe {
            let mut out: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(c.as_ptr(), &mut out) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn contents_live_where_the_fid_says_and_are_removed_once() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let be = Backends::new(vec![a.path().into(), b.path().into()]).unwrap().0;
        let mut used = [false; 2];
        for counter in 0..16 {
            let fid = Fid::new(42, counter);
            be.open(fid).unwrap().write_all(b"data").unwrap();
            let p = be.path(fid);
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "private to the mount's user");
            assert_eq!(std::fs::metadata(p.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
            assert!(p.starts_with(&be.dirs()[fid.backend(2)]));
            used[fid.backend(2)] = true;
            let mut s = String::new();
            be.open(fid).unwrap().read_to_string(&mut s).unwrap();
            assert_eq!(s, "data", "open does not truncate");
            be.remove(fid).unwrap();
            assert!(!p.exists());
            be.remove(fid).unwrap();
        }
        assert_eq!(used, [true, true], "both directories are used");
    }

    #[test]
    fn a_missing_directory_is_refused() {
        assert!(Backends::new(vec![]).is_err());
        assert!(Backends::new(vec!["/nonexistent/canopy".into()]).is_err());
    }
}
