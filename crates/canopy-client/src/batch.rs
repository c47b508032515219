//! BatchFS on the wire (seed 002): recording a batch at the servers, and
//! landing its files.
//!
//! A batch's files are grouped by the server that will hold each (the mode's
//! placement: [`Namespace::batch_route`]), cut into chunks of at most
//! [`CHUNK_MAX`] files and [`CHUNK_BYTES`], staged on their servers, then
//! applied on every server at once: each server checks its share and ingests
//! what passes as one table ([`Request::BatchApply`]). Files refused because
//! their name's partition moved meanwhile (IndexFS splits) are routed again
//! and land in another round; every other refusal is final and reported by
//! path. Landing the same files again is harmless: a server counts a file
//! already at its name with the same FID as landed.

use crate::namespace::{Client, Res};
use canopy_proto::batch::{BatchFile, BatchInfo, CHUNKS_MAX, CHUNK_MAX};
use canopy_proto::{Errno, Reply, Request};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Encoded bytes one chunk's files may take (half a frame, the rest headroom).
pub const CHUNK_BYTES: usize = canopy_proto::frame::MAX_FRAME / 2;

/// Rounds of routing again before names still refused as moved are reported.
const ROUNDS: u32 = 6;

/// Chunks staged at once over the whole cluster.
const IN_FLIGHT: usize = 8;

/// Files to make in one directory (an absolute path in the namespace).
#[derive(Debug, Clone, Default)]
pub struct DirFiles {
    pub dir: String,
    pub files: Vec<BatchFile>,
}

/// What landing a batch's files did.
#[derive(Debug, Clone, Default)]
pub struct Landed {
    /// Files made by this landing.
    pub made: u64,
    /// Files an earlier, interrupted landing had made.
    pub landed_before: u64,
    /// Each file refused, by path, with why.
    pub rejected: Vec<(String, Errno)>,
    pub chunks: u64,
    pub rounds: u32,
    /// Time staging chunks, and time the servers took to apply (the slowest).
    pub stage_time: Duration,
    pub apply_time: Duration,
}

/// Refusals that mean "this name is now held elsewhere": route it again.
fn moved(e: Errno) -> bool {
    matches!(e, Errno::EREMCHG | Errno::EINPROGRESS | Errno::EAGAIN | Errno::ENXIO)
}

/// Records batch `batch`, rooted at `root`, on every server.
pub async fn open(client: &Client, batch: u64, root: &str) -> Res<()> {
    each_server(client, |_| Request::BatchOpen { batch, root: root.to_string() }).await.map(|_| ())
}

/// Forgets batch `batch` (and what it staged) on every server.
pub async fn close(client: &Client, batch: u64) -> Res<()> {
    each_server(client, |_| Request::BatchClose { batch }).await.map(|_| ())
}

/// The batches the servers record, each once, with the files staged on all.
pub async fn list(client: &Client) -> Res<Vec<BatchInfo>> {
    let mut all: BTreeMap<u64, BatchInfo> = BTreeMap::new();
    for reply in each_server(client, |_| Request::BatchList).await? {
        let Reply::Batches(infos) = reply else { return Err(Errno::EPROTO) };
        for info in infos {
            match all.get_mut(&info.batch) {
                Some(seen) => seen.staged += info.staged,
                None => {
                    all.insert(info.batch, info);
                }
            }
        }
    }
    Ok(all.into_values().collect())
}

/// Sends `make(server)` to every server at once; the first error fails it.
async fn each_server(client: &Client, make: impl Fn(u32) -> Request) -> Res<Vec<Reply>> {
    let ns = client.namespace();
    let calls = (0..ns.servers()).map(|s| ns.batch_call(client.creds(), s, make(s)));
    futures::future::join_all(calls).await.into_iter().collect()
}

/// One chunk on its way: its directory's name on the wire, and which file of
/// `dirs` each of its files is.
struct Chunk {
    dir: canopy_proto::msg::At,
    files: Vec<(usize, usize)>,
}

/// Chunks by server; a chunk's number is its place in its server's list.
type Chunks = BTreeMap<u32, Vec<Chunk>>;

/// Lands `dirs`' files as batch `batch` (see the module doc).
pub async fn land(client: &Client, batch: u64, dirs: &[DirFiles]) -> Res<Landed> {
    let mut out = Landed::default();
    let mut todo: Vec<(usize, usize)> = dirs.iter().enumerate().flat_map(|(d, df)| (0..df.files.len()).map(move |f| (d, f))).collect();
    while !todo.is_empty() {
        out.rounds += 1;
        let last = out.rounds >= ROUNDS;
        let chunks = cut(client, dirs, &todo, out.rounds > 1).await?;
        out.chunks += chunks.values().map(|c| c.len() as u64).sum::<u64>();
        let t = Instant::now();
        stage(client, batch, dirs, &chunks).await?;
        out.stage_time += t.elapsed();
        let t = Instant::now();
        let ns = client.namespace();
        let applied = futures::future::join_all(chunks.keys().map(|s| ns.batch_call(client.creds(), *s, Request::BatchApply { batch }))).await;
        out.apply_time += t.elapsed();
        todo.clear();
        for (own, reply) in chunks.values().zip(applied) {
            let Reply::BatchApplied { inserted, landed, rejected } = reply? else { return Err(Errno::EPROTO) };
            out.made += inserted;
            out.landed_before += landed;
            for (chunk, i, e) in rejected {
                let which = own.get(chunk as usize).and_then(|c| c.files.get(i as usize)).copied().ok_or(Errno::EPROTO)?;
                if moved(e) && !last {
                    todo.push(which);
                } else {
                    let (d, f) = which;
                    out.rejected.push((path_in(&dirs[d].dir, &dirs[d].files[f].name), e));
                }
            }
        }
    }
    out.rejected.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// `todo`'s files in chunks by server and directory.
async fn cut(client: &Client, dirs: &[DirFiles], todo: &[(usize, usize)], fresh: bool) -> Res<Chunks> {
    let mut by_dir: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (d, f) in todo {
        by_dir.entry(*d).or_default().push(*f);
    }
    let mut chunks = Chunks::new();
    for (d, files) in by_dir {
        let names: Vec<&str> = files.iter().map(|f| dirs[d].files[*f].name.as_str()).collect();
        let (at, servers) = client.namespace().batch_route(client.creds(), &dirs[d].dir, &names, fresh).await?;
        let mut shares: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (f, s) in files.into_iter().zip(servers) {
            shares.entry(s).or_default().push(f);
        }
        for (server, share) in shares {
            let own = chunks.entry(server).or_default();
            let (mut cur, mut bytes) = (Vec::new(), 0);
            for f in share {
                let b = file_bytes(&dirs[d].files[f]);
                if !cur.is_empty() && (cur.len() == CHUNK_MAX || bytes + b > CHUNK_BYTES) {
                    own.push(Chunk { dir: at.clone(), files: std::mem::take(&mut cur) });
                    bytes = 0;
                }
                cur.push((d, f));
                bytes += b;
            }
            if !cur.is_empty() {
                own.push(Chunk { dir: at.clone(), files: cur });
            }
        }
    }
    if chunks.values().any(|own| own.len() > CHUNKS_MAX as usize) {
        return Err(Errno::EFBIG);
    }
    Ok(chunks)
}

/// Stages every chunk under its number; a server's chunk 0 goes first, alone,
/// since it clears what an earlier try left staged there.
async fn stage(client: &Client, batch: u64, dirs: &[DirFiles], chunks: &Chunks) -> Res<()> {
    let ns = client.namespace();
    let send = |(server, n, c): (u32, usize, &Chunk)| {
        let files = c.files.iter().map(|(d, f)| dirs[*d].files[*f].clone()).collect();
        ns.batch_call(client.creds(), server, Request::BatchStage { batch, chunk: n as u32, dir: c.dir.clone(), files })
    };
    let numbered = chunks.iter().flat_map(|(s, own)| own.iter().enumerate().map(move |(n, c)| (*s, n, c)));
    let (first, rest): (Vec<_>, Vec<_>) = numbered.partition(|(_, n, _)| *n == 0);
    for r in futures::future::join_all(first.into_iter().map(send)).await {
        r?;
    }
    for group in rest.chunks(IN_FLIGHT) {
        for r in futures::future::join_all(group.iter().copied().map(send)).await {
            r?;
        }
    }
    Ok(())
}

/// What one file adds to a chunk at most: its name, symlink target and
/// inline contents, and the fixed fields with their length prefixes.
fn file_bytes(f: &BatchFile) -> usize {
    let inline = f.inode.data.as_ref().and_then(|d| d.inline.as_ref()).map_or(0, |d| d.len());
    f.name.len() + f.inode.target.as_ref().map_or(0, |t| t.len()) + inline + 128
}

/// The path of `name` in directory `dir` (both as a batch carries them).
pub fn path_in(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_proto::msg::{FileData, Inode};
    use canopy_proto::{Attr, Fid, FileKind};

    #[test]
    fn a_file_never_takes_fewer_bytes_than_it_encodes_to() {
        let attr = Attr { ino: u64::MAX, kind: FileKind::File, mode: 0o7777, uid: u32::MAX, gid: u32::MAX, size: u64::MAX, nlink: u32::MAX, rdev: u64::MAX, atime: i64::MIN, mtime: i64::MIN, ctime: i64::MIN };
        let inode = Inode { attr, target: Some("t".repeat(300)), data: Some(FileData { fid: Fid(u128::MAX), inline: Some(vec![7; 5000]) }) };
        let f = BatchFile { name: "n".repeat(255), inode };
        assert!(postcard::to_stdvec(&f).unwrap().len() <= file_bytes(&f));
    }

    #[test]
    fn only_moved_names_are_routed_again() {
        assert!(moved(Errno::EREMCHG) && moved(Errno::EINPROGRESS));
        assert!(!moved(Errno::EEXIST) && !moved(Errno::EACCES) && !moved(Errno::ENOENT));
    }
}
