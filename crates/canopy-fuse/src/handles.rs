//! Open files of this mount, and back-end contents waiting for their last close.
//!
//! A handle starts out `Inline`: it reads and writes through the metadata
//! service, whose answer says `Backend` if the contents already spilled. From
//! then on (or from its own spill) it reads and writes the back-end file
//! directly, by FID. It only ever moves from inline to back-end. When the last name of a file with back-end contents goes away (the
//! [`Reclaim`] hook), the contents are deleted at once, or at the last release if
//! this mount still has the file open: POSIX lets an open file outlive its names.

use crate::backend::Backends;
use canopy_client::data::Reclaim;
use canopy_proto::{Attr, Fid};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Contents {
    Inline,
    Backend { fid: Fid, file: Arc<File> },
}

#[derive(Debug)]
struct OpenFile {
    node: u64,
    contents: Contents,
}

#[derive(Default)]
struct Inner {
    next: u64,
    files: HashMap<u64, OpenFile>,
    /// Contents whose last name is gone while still open here.
    doomed: HashSet<Fid>,
    /// Attributes of open files that lost their last name, kept for fstat.
    orphans: HashMap<u64, Attr>,
}

impl Inner {
    /// True if a handle here reads and writes back-end file `fid`.
    fn backend_open(&self, fid: Fid) -> bool {
        self.files.values().any(|f| matches!(&f.contents, Contents::Backend { fid: x, .. } if *x == fid))
    }
}

pub struct Handles {
    inner: Mutex<Inner>,
    backends: Backends,
}

impl Handles {
    pub fn new(backends: Backends) -> Handles {
        Handles { inner: Mutex::new(Inner { next: 1, ..Inner::default() }), backends }
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    pub fn open(&self, node: u64, contents: Contents) -> u64 {
        let mut g = self.inner.lock();
        let fh = g.next;
        g.next += 1;
        g.files.insert(fh, OpenFile { node, contents });
        fh
    }

    /// The node and contents of handle `fh`.
    pub fn get(&self, fh: u64) -> Option<(u64, Contents)> {
        self.inner.lock().files.get(&fh).map(|f| (f.node, f.contents.clone()))
    }

    /// The contents of `node` are now in back-end file `fid`: every handle on it
    /// switches there. Returns the open back-end file.
    pub fn to_backend(&self, node: u64, fid: Fid) -> io::Result<Arc<File>> {
        let file = Arc::new(self.backends.open(fid)?);
        let mut g = self.inner.lock();
        for f in g.files.values_mut().filter(|f| f.node == node) {
            if matches!(f.contents, Contents::Inline) {
                f.contents = Contents::Backend { fid, file: file.clone() };
            }
        }
        Ok(file)
    }

    pub fn is_open(&self, node: u64) -> bool {
        self.inner.lock().files.values().any(|f| f.node == node)
    }

    /// Closes `fh`; deletes doomed contents nobody here has open any more.
    pub fn release(&self, fh: u64) {
        let mut g = self.inner.lock();
        let Some(f) = g.files.remove(&fh) else { return };
        if !g.files.values().any(|o| o.node == f.node) {
            g.orphans.remove(&f.node);
        }
        if let Contents::Backend { fid, .. } = f.contents {
            if !g.backend_open(fid) && g.doomed.remove(&fid) {
                drop(g);
                if let Err(e) = self.backends.remove(fid) {
                    eprintln!("canopy-fuse: could not delete contents {fid}: {e}");
                }
            }
        }
    }

    /// Keeps `attr` for an open file whose last name was removed.
    pub fn orphaned(&self, node: u64, attr: Attr) {
        self.inner.lock().orphans.insert(node, attr);
    }

    pub fn orphan_attr(&self, node: u64) -> Option<Attr> {
        self.inner.lock().orphans.get(&node).cloned()
    }

    /// An orphan was written to or truncated: its size as this mount sees it.
    pub fn orphan_resized(&self, node: u64, size: u64, grow_only: bool) {
        if let Some(a) = self.inner.lock().orphans.get_mut(&node) {
            a.size = if grow_only { a.size.max(size) } else { size };
        }
    }
}

impl Reclaim for Handles {
    fn freed(&self, fid: Fid) {
        let mut g = self.inner.lock();
        if g.backend_open(fid) {
            g.doomed.insert(fid);
            return;
        }
        drop(g);
        if let Err(e) = self.backends.remove(fid) {
            eprintln!("canopy-fuse: could not delete contents {fid}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn freed_contents_go_at_once_or_at_the_last_release() {
        let dir = tempfile::tempdir().unwrap();
        let h = Handles::new(Backends::new(vec![dir.path().into()]).unwrap().0);
        let (fid, other) = (Fid::new(1, 1), Fid::new(1, 2));
        let a = h.open(5, Contents::Inline);
        let b = h.open(5, Contents::Inline);
        let file = h.to_backend(5, fid).unwrap();
        (&*file).write_all(b"x").unwrap();
        assert!(matches!(h.get(a), Some((5, Contents::Backend { .. }))));
        assert!(matches!(h.get(b), Some((5, Contents::Backend { .. }))));
        h.backends().open(other).unwrap();
        h.freed(other);
        assert!(!h.backends().path(other).exists(), "not open: deleted at once");
        h.freed(fid);
        h.release(a);
        assert!(h.backends().path(fid).exists(), "still open through b");
        h.release(b);
        assert!(!h.backends().path(fid).exists(), "deleted at the last release");
        assert!(!h.is_open(5));
    }
}
