//! The handlers of what is open: reads, writes, fsync and release of files,
//! and directory listings; and statfs. They wait on nothing but back-end
//! files and the metadata service's data requests.

use super::*;

/// The handlers that wait on nothing or read and write back-end files: run on
/// the FUSE thread that read their request, or on the blocking pool.
impl Core {
    pub(crate) fn read(&self, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        answer!(reply, self.read_at(ino.0, fh.0, offset, size), |data| reply.data(&data))
    }

    /// A write by a caller that may not keep setuid and setgid may clear them
    /// at the servers (`FUSE_HANDLE_KILLPRIV`), which the kernel cannot know:
    /// it is told to ask again, so a stat right after shows the bits gone.
    pub(crate) fn write(&self, req: &Caller, ino: INodeNo, fh: FileHandle, offset: u64, data: &[u8], reply: ReplyWrite) {
        let kill_suid = !self.privileged(req);
        let written = self.write_at(ino.0, fh.0, offset, data, kill_suid);
        if kill_suid && written.is_ok() {
            self.kernel_forgets_attrs(ino);
        }
        answer!(reply, written, |n| reply.written(n))
    }

    pub(crate) fn release(&self, fh: FileHandle, reply: ReplyEmpty) {
        self.handles.release(fh.0);
        reply.ok();
    }

    pub(crate) fn fsync(&self, fh: FileHandle, reply: ReplyEmpty) {
        answer!(reply, self.sync_handle(fh.0), |_v| reply.ok())
    }

    pub(crate) fn readdir(&self, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let entries = match self.listing(fh) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let dots = [(ino.0, FileType::Directory, "."), (ROOT, FileType::Directory, "..")];
        let named = entries.iter().map(|e| (e.ino, convert::file_type(e.kind), e.name.as_str()));
        for (i, (id, kind, name)) in dots.into_iter().chain(named).enumerate().skip(offset as usize) {
            if reply.add(INodeNo(id), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    pub(crate) fn releasedir(&self, fh: FileHandle, reply: ReplyEmpty) {
        self.dirs.lock().open.remove(&fh.0);
        reply.ok();
    }

    pub(crate) fn statfs(&self, reply: ReplyStatfs) {
        answer!(reply, self.statfs_of(), |s| reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            u64::MAX >> 1,
            u64::MAX >> 1,
            s.f_bsize as u32,
            canopy_proto::path::NAME_MAX as u32,
            s.f_frsize as u32
        ))
    }
}
