//! ShardFS's data requests and directory times: each is one RPC to the file's
//! primary (or, for a hard-linked file, a second one to its inode's home server).

use crate::data::{DataRead, DataWrite};
use crate::namespace::Res;
use crate::core::unexpected;
use crate::shardfs::ShardFs;
use crate::touches::post_touch;
use canopy_proto::msg::FileRef;
use canopy_proto::path::NsPath;
use canopy_proto::{Attr, Creds, Reply, Request};

impl ShardFs {
    /// Sends the data request `make(at)` for the file at `path`, following a
    /// redirect to a shared inode's home server.
    async fn data_rpc(&self, c: &Creds, path: &str, make: impl Fn(FileRef) -> Request) -> Res<Reply> {
        let p = NsPath::parse(path)?;
        match self.single(c, &p, make(FileRef::Path(p.to_string()))).await? {
            Reply::Redirect { ino, home } => self.rpc(home, c, make(FileRef::Ino(ino))).await,
            reply => Ok(reply),
        }
    }

    pub(crate) async fn do_read_data(&self, c: &Creds, path: &str, offset: u64, len: u32) -> Res<DataRead> {
        DataRead::from_reply(self.data_rpc(c, path, |at| Request::ReadData { at, offset, len }).await?)
    }

    pub(crate) async fn do_write_data(&self, c: &Creds, path: &str, offset: u64, data: &[u8], inline_max: u32, kill_suid: bool) -> Res<DataWrite> {
        let make = |at| Request::WriteData { at, offset, data: data.to_vec(), inline_max, kill_suid };
        DataWrite::from_reply(self.data_rpc(c, path, make).await?)
    }

    pub(crate) async fn do_spilled(&self, c: &Creds, path: &str, len: u64, digest: u64) -> Res<Attr> {
        match self.data_rpc(c, path, |at| Request::Spilled { at, len, digest }).await? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) async fn do_extend(&self, c: &Creds, path: &str, end: u64, kill_suid: bool) -> Res<Attr> {
        match self.data_rpc(c, path, |at| Request::Extend { at, end, kill_suid }).await? {
            Reply::Attr(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    /// With directory times on: after a name was added or removed in `dirs`,
    /// sets their mtime and ctime on their primaries, without waiting for the
    /// answers (one round trip less per change; this client's later requests,
    /// a stat of the parent among them, are served after the update). A
    /// failure here would not undo the change, so nobody waits for it. In a
    /// burst of changes to one directory, one touch per window covers them
    /// (`touches.rs`).
    pub(crate) async fn touch_parents(&self, c: &Creds, paths: &[&NsPath]) {
        if !self.dir_times {
            return;
        }
        let mut parents: Vec<NsPath> = paths.iter().filter_map(|p| p.split().map(|(parent, _)| parent)).collect();
        parents.dedup();
        for parent in parents {
            if self.touches.as_ref().is_none_or(|t| t.changed(&parent, c)) {
                self.touch(c, &parent).await;
            }
        }
    }

    /// Before a stat of `dir`: sends the touch owed for it, if any, so this
    /// client sees its own changes in the directory's times.
    pub(crate) async fn send_owed_touch(&self, dir: &NsPath) {
        if let Some(c) = self.touches.as_ref().and_then(|t| t.take(dir)) {
            self.touch(&c, dir).await;
        }
    }

    /// Before `dir` is renamed: sends the touches owed for it and the
    /// directories below, which would otherwise go to their old names (to
    /// nothing, or to a directory made there since) once the window is over.
    pub(crate) async fn send_owed_touches_below(&self, dir: &NsPath) {
        let owed = self.touches.as_ref().map(|t| t.take_below(dir)).unwrap_or_default();
        for (d, c) in owed {
            self.touch(&c, &d).await;
        }
    }

    async fn touch(&self, c: &Creds, dir: &NsPath) {
        // A coordinator a test hook killed sends nothing more (`ClientCore::post`).
        if !self.is_dead() {
            post_touch(self.t.as_ref(), &self.counters, c, dir).await;
        }
    }
}
