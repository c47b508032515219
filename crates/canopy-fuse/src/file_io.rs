//! Reading and writing open files: inline contents through the metadata service,
//! back-end contents straight from their file, and the spill from one to the
//! other (see `canopy-server/src/ops_data.rs` for the server's half).

use crate::convert::io_errno;
use crate::fs::{Core, R};
use crate::handles::Contents;
use canopy_client::data::{DataRead, DataWrite};
use canopy_proto::fid::contents_digest;
use canopy_proto::{Attr, Errno, Fid};
use fuser::FileHandle;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A spill races only with another writer of the same file; give up after this
/// many rounds rather than spin.
const SPILL_ROUNDS: usize = 16;

fn ebadf() -> fuser::Errno {
    fuser::Errno::from_i32(libc::EBADF)
}

fn read_file_at(file: &File, offset: u64, size: u32) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; size as usize];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

impl Core {
    /// The path of an open file's node, None once it has no name left.
    fn open_path(&self, node: u64) -> Option<String> {
        self.nodes.lock().path(node).map(str::to_string)
    }

    pub(crate) fn read_at(&self, node: u64, fh: u64, offset: u64, size: u32) -> R<Vec<u8>> {
        for _ in 0..SPILL_ROUNDS {
            let (_, contents) = self.handles.get(fh).ok_or_else(ebadf)?;
            match contents {
                Contents::Backend { file, .. } => return read_file_at(&file, offset, size).map_err(|e| io_errno(&e)),
                Contents::Inline => {
                    let path = self.open_path(node).ok_or_else(ebadf)?;
                    match self.run(self.client.read_data(&path, offset, size))? {
                        DataRead::Inline(bytes) => return Ok(bytes),
                        DataRead::Backend { fid, .. } => {
                            self.handles.to_backend(node, fid).map_err(|e| io_errno(&e))?;
                        }
                    }
                }
            }
        }
        Err(fuser::Errno::from_i32(libc::EIO))
    }

    /// Writes through handle `fh`; `kill_suid`: the writer may not keep setuid and
    /// setgid (the kernel leaves clearing them to us: FUSE_HANDLE_KILLPRIV).
    pub(crate) fn write_at(&self, node: u64, fh: u64, offset: u64, data: &[u8], kill_suid: bool) -> R<u32> {
        let end = offset.checked_add(data.len() as u64).ok_or(fuser::Errno::from_i32(libc::EFBIG))?;
        for _ in 0..SPILL_ROUNDS {
            let (_, contents) = self.handles.get(fh).ok_or_else(ebadf)?;
            let path = self.open_path(node);
            match contents {
                Contents::Backend { file, .. } => {
                    file.write_all_at(data, offset).map_err(|e| io_errno(&e))?;
                    self.grown(node, path.as_deref(), end, kill_suid)?;
                    return Ok(data.len() as u32);
                }
                Contents::Inline => {
                    // Orphans spilled before they lost their name, so have a path here.
                    let path = path.ok_or_else(ebadf)?;
                    match self.run(self.client.write_data(&path, offset, data, self.opts.inline_max, kill_suid))? {
                        DataWrite::Written(_) => return Ok(data.len() as u32),
                        DataWrite::Backend { fid, .. } => {
                            self.handles.to_backend(node, fid).map_err(|e| io_errno(&e))?;
                        }
                        DataWrite::Spill { fid, data: old, size } => self.spill(node, &path, fid, &old, size)?,
                    }
                }
            }
        }
        Err(fuser::Errno::from_i32(libc::EIO))
    }

    /// Back-end bytes were written up to `end`: the metadata learns the new size.
    fn grown(&self, node: u64, path: Option<&str>, end: u64, kill_suid: bool) -> R<()> {
        match path {
            None => {
                self.handles.orphan_resized(node, end, true);
                Ok(())
            }
            Some(p) => match self.run(self.client.extend(p, end, kill_suid)) {
                // Removed by another client meanwhile: the bytes are written anyway.
                Err(e) if e.code() == libc::ENOENT => Ok(()),
                other => other.map(|_| ()),
            },
        }
    }

    /// Copies inline contents to the back-end file and confirms; a confirmation
    /// refused because the contents changed (ESTALE) is left for the caller's
    /// next round.
    fn spill(&self, node: u64, path: &str, fid: Fid, old: &[u8], size: u64) -> R<()> {
        let file = self.handles.backends().open(fid).map_err(|e| io_errno(&e))?;
        file.write_all_at(old, 0).and_then(|_| file.set_len(size)).map_err(|e| io_errno(&e))?;
        match self.rt.block_on(self.client.spilled(path, old.len() as u64, contents_digest(old))) {
            Ok(_) => self.handles.to_backend(node, fid).map(|_| ()).map_err(|e| io_errno(&e)),
            Err(Errno::ESTALE) => Ok(()),
            Err(e) => Err(crate::convert::errno(e)),
        }
    }

    /// Moves the contents of the file at `path` to back-end storage now.
    pub(crate) fn spill_now(&self, node: u64, path: &str) -> R<()> {
        for _ in 0..SPILL_ROUNDS {
            match self.run(self.client.write_data(path, 0, &[], 0, false))? {
                DataWrite::Written(_) => return Err(fuser::Errno::from_i32(libc::EIO)),
                DataWrite::Backend { fid, .. } => {
                    return self.handles.to_backend(node, fid).map(|_| ()).map_err(|e| io_errno(&e));
                }
                DataWrite::Spill { fid, data, size } => self.spill(node, path, fid, &data, size)?,
            }
        }
        Err(fuser::Errno::from_i32(libc::EIO))
    }

    /// After a truncate in the metadata: the back-end file follows, if there is one.
    pub(crate) fn truncate_backend(&self, path: &str, size: u64) -> R<()> {
        if let DataRead::Backend { fid, .. } = self.run(self.client.read_data(path, 0, 0))? {
            let file = self.handles.backends().open(fid).map_err(|e| io_errno(&e))?;
            file.set_len(size).map_err(|e| io_errno(&e))?;
        }
        Ok(())
    }

    /// ftruncate of an open file with no name left: only its back-end file and
    /// this mount's view of it change.
    pub(crate) fn truncate_orphan(&self, node: u64, fh: Option<FileHandle>, size: Option<u64>) -> R<Attr> {
        let enoent = fuser::Errno::from_i32(libc::ENOENT);
        let (Some(fh), Some(size)) = (fh, size) else { return Err(enoent) };
        if let Some((_, Contents::Backend { file, .. })) = self.handles.get(fh.0) {
            file.set_len(size).map_err(|e| io_errno(&e))?;
            self.handles.orphan_resized(node, size, false);
        }
        self.handles.orphan_attr(node).ok_or(enoent)
    }

    pub(crate) fn sync_handle(&self, fh: u64) -> R<()> {
        match self.handles.get(fh) {
            Some((_, Contents::Backend { file, .. })) => file.sync_all().map_err(|e| io_errno(&e)),
            Some((_, Contents::Inline)) => Ok(()),
            None => Err(ebadf()),
        }
    }
}
