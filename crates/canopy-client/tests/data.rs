//! File contents in the metadata: inline data and its reference model,
//! truncate, the spill handshake, FIDs across renames, reclaim of back-end
//! contents, hard-linked contents, special files (mknod) and directory times.
//!
//! Every case runs against the in-process cluster over memory stores and over
//! RocksDB. Clients that need a `Reclaim` hook or directory times are built here
//! from the cluster's servers and lock service (`InProcCluster` does not expose
//! its transport, so an equal one is made from its public parts).
//!
//! Back-end storage is modelled by [`Backend`]: a map from FID to bytes that plays
//! the client's part of the protocol (copy on `Spill`, write and `extend` on
//! `Backend`), so whole-file contents can be compared with a plain `Vec<u8>`.

use canopy_client::data::{DataRead, DataWrite, Reclaim};
use canopy_client::NsOptions;
use canopy_client::Client;
use canopy_proto::msg::INLINE_LIMIT;
use canopy_proto::path::NsPath;
use canopy_proto::placement;
use canopy_proto::{Attr, Errno, Fid, FileKind};
use canopy_proto::fid::contents_digest as inline_digest;
use canopy_testkit::{assert_fsck_clean, InProcCluster};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SERVERS: u32 = 4;
/// The inline limit most cases write with.
const MAX: u32 = 64;

/// One in-process cluster, and the directory its RocksDB stores live in.
struct Kit {
    name: &'static str,
    cluster: InProcCluster,
    _dir: Option<tempfile::TempDir>,
}

/// The cluster stops before its directory goes.
impl Drop for Kit {
    fn drop(&mut self) {
        self.cluster.shut_down();
    }
}

impl Kit {
    /// A root client with its own FID generator.
    fn client(&self) -> Client {
        self.cluster.fresh_client()
    }

    /// A root client with a reclaim hook and/or directory times.
    fn client_with(&self, reclaim: Option<Arc<Recorder>>, dir_times: bool) -> Client {
        let reclaim = reclaim.map(|r| r as Arc<dyn canopy_client::data::Reclaim>);
        self.cluster.client_with(NsOptions { reclaim, dir_times, ..NsOptions::default() })
    }
}

/// ShardFS over both stores, IndexFS and Giraffa over RocksDB.
fn each_cluster() -> Vec<Kit> {
    let dir = tempfile::tempdir().expect("tempdir");
    let rocks = InProcCluster::rocks(SERVERS, dir.path());
    let ix_dir = tempfile::tempdir().expect("tempdir");
    let indexfs = InProcCluster::rocks_mode("indexfs", SERVERS, ix_dir.path());
    let gf_dir = tempfile::tempdir().expect("tempdir");
    let giraffa = InProcCluster::rocks_mode("giraffa", SERVERS, gf_dir.path());
    vec![
        Kit { name: "shardfs, memory", cluster: InProcCluster::memory(SERVERS), _dir: None },
        Kit { name: "shardfs, rocks", cluster: rocks, _dir: Some(dir) },
        Kit { name: "indexfs, rocks", cluster: indexfs, _dir: Some(ix_dir) },
        Kit { name: "giraffa, rocks", cluster: giraffa, _dir: Some(gf_dir) },
    ]
}

/// One `#[tokio::test]` per case, running it against every cluster kind.
macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        mod run {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    for kit in super::each_cluster() {
                        eprintln!("--- {} on {}", stringify!($case), kit.name);
                        super::$case(&kit).await;
                    }
                }
            )*
        }
    };
}

cases!(
    inline_writes_match_a_reference,
    inline_reads_past_eof_are_short,
    empty_write_past_eof_changes_nothing,
    truncate_inline_shrinks_and_extends_with_zeros,
    spill_handshake_then_backend,
    stale_spill_answers_eagain_and_stays_inline,
    spill_of_a_file_extended_by_truncate,
    writes_across_spill_match_a_reference,
    concurrent_writes_during_spill,
    fids_are_unique_per_file,
    fid_survives_file_renames,
    fid_survives_parent_directory_rename,
    reclaim_on_unlink,
    reclaim_on_rename_over,
    reclaim_with_hard_links,
    hard_linked_contents_are_shared,
    mknod_special_files,
    data_requests_on_non_files,
    dir_times_follow_name_changes,
    dir_times_of_a_burst_reach_other_clients,
    an_owed_touch_goes_with_its_directory_when_renamed,
    a_utimens_after_changes_keeps_the_times_it_sets,
    dir_times_off_by_default,
    data_changes_clear_setuid_as_write_does,
    data_requests_check_permission,
    the_server_bounds_inline_contents,
);

/// Asserts that `$e` (a `Result`) failed with exactly `$errno`.
macro_rules! assert_errno {
    ($e:expr, $errno:expr $(, $why:expr)?) => {
        match $e {
            Err(got) => assert_eq!(got, $errno, "{} {}", stringify!($e), concat!($($why)?)),
            Ok(v) => panic!("{} succeeded with {:?}, expected {:?} {}", stringify!($e), v, $errno, concat!($($why)?)),
        }
    };
}

/// Records every FID a client reports freed.
#[derive(Default)]
struct Recorder(Mutex<Vec<Fid>>);

impl Reclaim for Recorder {
    fn freed(&self, fid: Fid) {
        self.0.lock().unwrap().push(fid);
    }
}

impl Recorder {
    fn take(&self) -> Vec<Fid> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn primary(p: &str) -> u32 {
    placement::primary(&NsPath::parse(p).unwrap(), SERVERS)
}

/// The first `{prefix}{i}` whose primary satisfies `want`.
fn name_where(prefix: &str, want: impl Fn(u32) -> bool) -> String {
    (0..10_000).map(|i| format!("{prefix}{i}")).find(|p| want(primary(p))).expect("a name with that primary")
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The whole contents of an inline file.
async fn read_inline_all(c: &Client, path: &str) -> Vec<u8> {
    match c.read_data(path, 0, 1 << 20).await.unwrap() {
        DataRead::Inline(b) => b,
        other => panic!("{path}: expected inline contents, got {other:?}"),
    }
}

/// A write that must stay inline.
async fn write_inline(c: &Client, path: &str, offset: u64, data: &[u8]) -> Attr {
    match c.write_data(path, offset, data, MAX, false).await.unwrap() {
        DataWrite::Written(a) => a,
        other => panic!("{path}: write of {} bytes at {offset} expected inline, got {other:?}", data.len()),
    }
}

/// The FID of a regular file, asked without changing it: any write past an
/// inline limit of 0 is answered `Spill` (or `Backend`) and writes nothing.
async fn fid_of(c: &Client, path: &str) -> Fid {
    match c.write_data(path, 0, b"?", 0, false).await.unwrap() {
        DataWrite::Spill { fid, .. } | DataWrite::Backend { fid, .. } => fid,
        DataWrite::Written(a) => panic!("{path}: a write past inline_max 0 was written inline: {a:?}"),
    }
}

/// Moves a file's contents out of inline storage (the copy itself is not kept).
async fn spill(c: &Client, path: &str) -> Fid {
    let (fid, data, size) = match c.write_data(path, 0, b"?", 0, false).await.unwrap() {
        DataWrite::Spill { fid, data, size } => (fid, data, size),
        other => panic!("{path}: expected Spill, got {other:?}"),
    };
    let a = c.spilled(path, data.len() as u64, inline_digest(&data)).await.unwrap();
    assert_eq!(a.size, size, "{path}: spilled keeps the size");
    assert_eq!(c.read_data(path, 0, 1).await.unwrap(), DataRead::Backend { fid, size });
    fid
}

/// Back-end storage as a client would reach it: FID -> bytes. Clones share it,
/// so concurrent clients can play the protocol against one store.
#[derive(Default, Clone)]
struct Backend(Arc<Mutex<HashMap<Fid, Vec<u8>>>>);

impl Backend {
    /// Writes `data` at `offset` through the whole protocol; returns the size.
    async fn write(&self, c: &Client, path: &str, offset: u64, data: &[u8], inline_max: u32) -> u64 {
        for _ in 0..100 {
            match c.write_data(path, offset, data, inline_max, false).await.unwrap() {
                DataWrite::Written(a) => return a.size,
                DataWrite::Spill { fid, data: inline, size } => {
                    assert!(inline.len() as u64 <= size, "{path}: Spill data {} longer than size {size}", inline.len());
                    let mut copy = inline.clone();
                    copy.resize(size as usize, 0);
                    self.0.lock().unwrap().insert(fid, copy);
                    match c.spilled(path, inline.len() as u64, inline_digest(&inline)).await {
                        Ok(_) | Err(Errno::ESTALE) => {} // copied, or changed meanwhile: ask again
                        Err(e) => panic!("{path}: spilled failed: {e:?}"),
                    }
                }
                DataWrite::Backend { fid, .. } => {
                    let end = offset as usize + data.len();
                    {
                        let mut files = self.0.lock().unwrap();
                        let f = files.get_mut(&fid).unwrap_or_else(|| panic!("{path}: Backend names unknown {fid}"));
                        if f.len() < end {
                            f.resize(end, 0);
                        }
                        f[offset as usize..end].copy_from_slice(data);
                    }
                    return c.extend(path, end as u64, false).await.unwrap().size;
                }
            }
        }
        panic!("{path}: write did not settle");
    }

    /// Reads through the whole protocol.
    async fn read(&self, c: &Client, path: &str, offset: u64, len: u32) -> Vec<u8> {
        match c.read_data(path, offset, len).await.unwrap() {
            DataRead::Inline(b) => b,
            DataRead::Backend { fid, size } => {
                let files = self.0.lock().unwrap();
                let f = &files[&fid];
                let end = size.min(offset + len as u64);
                (offset..end.max(offset)).map(|i| f.get(i as usize).copied().unwrap_or(0)).collect()
            }
        }
    }

    /// truncate(2): the metadata size, and the back-end file if there is one.
    async fn truncate(&self, c: &Client, path: &str, size: u64) {
        c.truncate(path, size).await.unwrap();
        if let DataRead::Backend { fid, .. } = c.read_data(path, 0, 0).await.unwrap() {
            self.0.lock().unwrap().get_mut(&fid).expect("known fid").resize(size as usize, 0);
        }
    }
}

/// A reference write: zeros fill any hole.
fn model_write(model: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

/// A small deterministic generator (no extra dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------
// 1. Inline data

async fn inline_writes_match_a_reference(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/d", 0o755).await.unwrap();
    for (i, path) in ["/d/a", "/d/b", "/d/c", "/top"].into_iter().enumerate() {
        let created = c.create(path, 0o644).await.unwrap();
        assert_eq!(created.size, 0);
        assert_eq!(read_inline_all(&c, path).await, b"", "{path}: a new file is empty and inline");
        let mut model: Vec<u8> = Vec::new();
        let mut last = created.clone();
        let writes: Vec<(u64, &[u8])> = vec![(0, b"hello"), (10, b"world"), (3, b"XY"), (20, b"!"), (0, b"H"), (19, b"??")];
        for (offset, data) in writes {
            sleep_ms(2).await;
            let a = write_inline(&c, path, offset, data).await;
            model_write(&mut model, offset as usize, data);
            assert_eq!(a.size, model.len() as u64, "{path}: size after writing {data:?} at {offset}");
            assert!(a.mtime > last.mtime, "{path}: mtime {} -> {} after a write", last.mtime, a.mtime);
            assert!(a.ctime > last.ctime, "{path}: ctime {} -> {} after a write", last.ctime, a.ctime);
            assert_eq!((a.ino, a.kind, a.nlink), (created.ino, FileKind::File, 1));
            let s = c.stat(path).await.unwrap();
            assert_eq!((s.size, s.mtime, s.ctime), (a.size, a.mtime, a.ctime), "{path}: stat agrees with the write's attributes");
            assert_eq!(read_inline_all(&c, path).await, model, "{path}: contents after writing {data:?} at {offset}");
            last = a;
        }
        assert_eq!(&model[5..10], &[0u8; 5], "the hole reads as zeros");
        // Every window reads as the same window of the model.
        let mut rng = Lcg(i as u64 + 1);
        for _ in 0..40 {
            let off = rng.below(model.len() as u64 + 4);
            let len = rng.below(12) as u32;
            let want: Vec<u8> = model.iter().skip(off as usize).take(len as usize).copied().collect();
            assert_eq!(c.read_data(path, off, len).await.unwrap(), DataRead::Inline(want), "{path}: read {len} at {off}");
        }
    }
    // Pseudo-random writes within the inline limit, checked after each.
    c.create("/d/rand", 0o644).await.unwrap();
    let mut model = Vec::new();
    let mut rng = Lcg(99);
    for step in 0..60 {
        let len = rng.below(9) as usize + 1;
        let off = rng.below(MAX as u64 - len as u64 + 1) as usize;
        let data: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        let a = write_inline(&c, "/d/rand", off as u64, &data).await;
        model_write(&mut model, off, &data);
        assert_eq!(a.size, model.len() as u64, "step {step}");
        assert_eq!(read_inline_all(&c, "/d/rand").await, model, "step {step}");
    }
    // Exactly inline_max stays inline.
    c.create("/d/full", 0o644).await.unwrap();
    let full = vec![7u8; MAX as usize];
    assert_eq!(write_inline(&c, "/d/full", 0, &full).await.size, MAX as u64);
    assert_eq!(read_inline_all(&c, "/d/full").await, full);
    // An offset whose end overflows is EFBIG, and writes nothing.
    assert_errno!(c.write_data("/d/full", u64::MAX, b"xy", MAX, false).await, Errno::EFBIG);
    assert_eq!(c.stat("/d/full").await.unwrap().size, MAX as u64);
    assert_fsck_clean(&c, "").await;
}

async fn inline_reads_past_eof_are_short(kit: &Kit) {
    let c = kit.client();
    c.create("/f", 0o644).await.unwrap();
    write_inline(&c, "/f", 0, b"0123456789").await;
    let read = |off: u64, len: u32| {
        let c = c.clone();
        async move { c.read_data("/f", off, len).await.unwrap() }
    };
    assert_eq!(read(0, 10).await, DataRead::Inline(b"0123456789".to_vec()));
    assert_eq!(read(7, 10).await, DataRead::Inline(b"789".to_vec()), "a read across EOF is short");
    assert_eq!(read(9, 1).await, DataRead::Inline(b"9".to_vec()));
    assert_eq!(read(10, 10).await, DataRead::Inline(vec![]), "a read at EOF is empty");
    assert_eq!(read(11, 10).await, DataRead::Inline(vec![]), "a read past EOF is empty");
    assert_eq!(read(1 << 40, 10).await, DataRead::Inline(vec![]));
    assert_eq!(read(u64::MAX, u32::MAX).await, DataRead::Inline(vec![]));
    assert_eq!(read(3, 0).await, DataRead::Inline(vec![]), "a zero-length read");
    assert_eq!(read(0, u32::MAX).await, DataRead::Inline(b"0123456789".to_vec()));
}

/// POSIX write(2): a zero-length write to a regular file "shall return zero and
/// have no other results" — it must not extend the file.
async fn empty_write_past_eof_changes_nothing(kit: &Kit) {
    let c = kit.client();
    c.create("/e", 0o644).await.unwrap();
    write_inline(&c, "/e", 0, b"abc").await;
    let before = c.stat("/e").await.unwrap();
    let a = write_inline(&c, "/e", 10, b"").await;
    assert_eq!(a.size, 3, "a zero-length write at offset 10 of a 3-byte file changed its size");
    assert_eq!(c.stat("/e").await.unwrap().size, before.size);
    assert_eq!(read_inline_all(&c, "/e").await, b"abc");
}

// ---------------------------------------------------------------------------
// 2. Truncate

async fn truncate_inline_shrinks_and_extends_with_zeros(kit: &Kit) {
    let c = kit.client();
    c.create("/t", 0o644).await.unwrap();
    let mut model = b"abcdefgh".to_vec();
    write_inline(&c, "/t", 0, &model).await;
    let steps: &[u64] = &[3, 10, 0, 6, 6, 2, 40];
    for (i, &size) in steps.iter().enumerate() {
        let before = c.stat("/t").await.unwrap();
        sleep_ms(2).await;
        let a = c.truncate("/t", size).await.unwrap();
        model.resize(size as usize, 0);
        assert_eq!(a.size, size, "step {i}");
        assert!(a.mtime > before.mtime && a.ctime > before.ctime, "step {i}: truncate sets mtime and ctime");
        assert_eq!(c.stat("/t").await.unwrap().size, size, "step {i}");
        assert_eq!(read_inline_all(&c, "/t").await, model, "step {i}: truncate to {size}");
        // Something written after each step, to catch stale bytes coming back.
        let at = (i as u64 * 3) % (size + 1);
        write_inline(&c, "/t", at, b"Q").await;
        model_write(&mut model, at as usize, b"Q");
        assert_eq!(read_inline_all(&c, "/t").await, model, "step {i}: write after truncate");
    }
    // The classic: bytes cut off by a shrink must not reappear on an extend.
    c.create("/u", 0o644).await.unwrap();
    write_inline(&c, "/u", 0, b"secret!!").await;
    c.truncate("/u", 2).await.unwrap();
    c.truncate("/u", 8).await.unwrap();
    assert_eq!(read_inline_all(&c, "/u").await, b"se\0\0\0\0\0\0");
    assert_eq!(c.read_data("/u", 4, 2).await.unwrap(), DataRead::Inline(vec![0, 0]));
    assert_fsck_clean(&c, "").await;
}

// ---------------------------------------------------------------------------
// 3. Spill

async fn spill_handshake_then_backend(kit: &Kit) {
    let c = kit.client();
    c.create("/s", 0o644).await.unwrap();
    let first = write_inline(&c, "/s", 0, b"0123456789").await;
    sleep_ms(2).await;
    let (fid, data, size) = match c.write_data("/s", 60, b"0123456789", MAX, false).await.unwrap() {
        DataWrite::Spill { fid, data, size } => (fid, data, size),
        other => panic!("a write ending at 70 > {MAX} must be answered Spill, got {other:?}"),
    };
    assert_eq!((data.as_slice(), size), (&b"0123456789"[..], 10), "Spill carries the current contents");
    // Nothing was written: still inline, same size and times.
    let s = c.stat("/s").await.unwrap();
    assert_eq!((s.size, s.mtime), (10, first.mtime), "Spill writes nothing");
    assert_eq!(read_inline_all(&c, "/s").await, b"0123456789");
    // Asking again answers the same.
    assert_eq!(
        c.write_data("/s", 70, b"x", MAX, false).await.unwrap(),
        DataWrite::Spill { fid, data: data.clone(), size: 10 }
    );
    let a = c.spilled("/s", data.len() as u64, inline_digest(&data)).await.unwrap();
    assert_eq!(a.size, 10);
    assert_eq!(c.read_data("/s", 0, 100).await.unwrap(), DataRead::Backend { fid, size: 10 });
    assert_eq!(c.read_data("/s", 1000, 1).await.unwrap(), DataRead::Backend { fid, size: 10 });
    // Writes now go to the back end, of any size.
    assert_eq!(c.write_data("/s", 0, b"z", MAX, false).await.unwrap(), DataWrite::Backend { fid, size: 10 });
    assert_eq!(c.write_data("/s", 0, b"z", u32::MAX, false).await.unwrap(), DataWrite::Backend { fid, size: 10 });
    // A second confirmation is harmless.
    assert_eq!(c.spilled("/s", 10, inline_digest(&data)).await.unwrap().size, 10);
    assert_eq!(c.spilled("/s", 0, 0).await.unwrap().size, 10);
    // Extend grows the size, never shrinks it, and sets the times.
    let before = c.stat("/s").await.unwrap();
    sleep_ms(2).await;
    let e = c.extend("/s", 70, false).await.unwrap();
    assert_eq!(e.size, 70);
    assert!(e.mtime > before.mtime && e.ctime > before.ctime, "extend sets mtime and ctime");
    assert_eq!(c.extend("/s", 5, false).await.unwrap().size, 70, "extend never shrinks");
    assert_eq!(c.extend("/s", 70, false).await.unwrap().size, 70);
    assert_eq!(c.stat("/s").await.unwrap().size, 70);
    assert_eq!(c.read_data("/s", 0, 1).await.unwrap(), DataRead::Backend { fid, size: 70 });
    // Truncate of a spilled file sets its size (the back end is the client's).
    assert_eq!(c.truncate("/s", 3).await.unwrap().size, 3);
    assert_eq!(c.read_data("/s", 0, 1).await.unwrap(), DataRead::Backend { fid, size: 3 });
    assert_eq!(c.extend("/s", 4, false).await.unwrap().size, 4);
    // Spilled requires a file.
    c.mkdir("/dir", 0o755).await.unwrap();
    assert_errno!(c.spilled("/dir", 0, 0).await, Errno::EISDIR);
    assert_errno!(c.extend("/dir", 1, false).await, Errno::EISDIR);
    assert_errno!(c.spilled("/missing", 0, 0).await, Errno::ENOENT);
    assert_errno!(c.extend("/missing", 1, false).await, Errno::ENOENT);
    // An empty file spills with empty data.
    c.create("/empty", 0o644).await.unwrap();
    match c.write_data("/empty", 100, b"x", MAX, false).await.unwrap() {
        DataWrite::Spill { data, size, .. } => assert_eq!((data, size), (vec![], 0)),
        other => panic!("expected Spill, got {other:?}"),
    }
    assert_fsck_clean(&c, "").await;
}

async fn stale_spill_answers_eagain_and_stays_inline(kit: &Kit) {
    let c = kit.client();
    let other = kit.client();
    // Same length, different bytes: the digest catches it.
    c.create("/r", 0o644).await.unwrap();
    write_inline(&c, "/r", 0, b"aaaa").await;
    let DataWrite::Spill { fid, data, .. } = c.write_data("/r", 0, &[1u8; 100], MAX, false).await.unwrap() else { panic!("expected Spill") };
    assert_eq!(data, b"aaaa");
    write_inline(&other, "/r", 0, b"bb").await; // slips in between
    assert_errno!(c.spilled("/r", 4, inline_digest(&data)).await, Errno::ESTALE);
    assert_eq!(read_inline_all(&c, "/r").await, b"bbaa", "a refused spill leaves the file inline with the newer bytes");
    assert_eq!(write_inline(&c, "/r", 0, b"c").await.size, 4, "still written inline");
    assert_eq!(read_inline_all(&c, "/r").await, b"cbaa");
    // Different length (a write that grew the file).
    let DataWrite::Spill { data, .. } = c.write_data("/r", 0, &[1u8; 100], MAX, false).await.unwrap() else { panic!("expected Spill") };
    write_inline(&other, "/r", 4, b"ZZ").await;
    assert_errno!(c.spilled("/r", data.len() as u64, inline_digest(&data)).await, Errno::ESTALE);
    // A shrink between Spill and Spilled.
    let DataWrite::Spill { data, .. } = c.write_data("/r", 0, &[1u8; 100], MAX, false).await.unwrap() else { panic!("expected Spill") };
    other.truncate("/r", 1).await.unwrap();
    assert_errno!(c.spilled("/r", data.len() as u64, inline_digest(&data)).await, Errno::ESTALE);
    assert_eq!(read_inline_all(&c, "/r").await, b"c");
    // A wrong length with the right digest is refused too.
    assert_errno!(c.spilled("/r", 2, inline_digest(b"c")).await, Errno::ESTALE);
    // Copying again with what is there now succeeds.
    let DataWrite::Spill { fid: again, data, size } = c.write_data("/r", 0, &[1u8; 100], MAX, false).await.unwrap() else { panic!("expected Spill") };
    assert_eq!((again, data.as_slice(), size), (fid, &b"c"[..], 1));
    c.spilled("/r", 1, inline_digest(&data)).await.unwrap();
    assert_eq!(c.read_data("/r", 0, 1).await.unwrap(), DataRead::Backend { fid, size: 1 });
}

async fn spill_of_a_file_extended_by_truncate(kit: &Kit) {
    let c = kit.client();
    c.create("/x", 0o644).await.unwrap();
    write_inline(&c, "/x", 0, b"ab").await;
    c.truncate("/x", 1000).await.unwrap();
    // Still inline: the extension stores nothing and reads as zeros.
    let all = read_inline_all(&c, "/x").await;
    assert_eq!(all.len(), 1000);
    assert_eq!(&all[..2], b"ab");
    assert!(all[2..].iter().all(|b| *b == 0));
    // A small write inside the inline limit keeps the size.
    assert_eq!(write_inline(&c, "/x", 5, b"c").await.size, 1000);
    // One past the limit spills what is stored, and the size.
    let be = Backend::default();
    assert_eq!(be.write(&c, "/x", 500, b"d", MAX).await, 1000);
    let mut model = vec![0u8; 1000];
    model_write(&mut model, 0, b"ab");
    model_write(&mut model, 5, b"c");
    model_write(&mut model, 500, b"d");
    assert_eq!(be.read(&c, "/x", 0, 2000).await, model);
}

async fn writes_across_spill_match_a_reference(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/w", 0o755).await.unwrap();
    for seed in 1..=4u64 {
        let path = format!("/w/f{seed}");
        c.create(&path, 0o644).await.unwrap();
        let be = Backend::default();
        let mut model: Vec<u8> = Vec::new();
        let mut rng = Lcg(seed);
        for step in 0..50 {
            if rng.below(8) == 0 {
                let size = rng.below(2 * MAX as u64);
                be.truncate(&c, &path, size).await;
                model.resize(size as usize, 0);
            } else {
                let len = rng.below(12) as usize + 1;
                let off = rng.below(MAX as u64 + 16) as usize;
                let data: Vec<u8> = (0..len).map(|_| rng.below(255) as u8 + 1).collect();
                let size = be.write(&c, &path, off as u64, &data, MAX).await;
                model_write(&mut model, off, &data);
                assert_eq!(size, model.len() as u64, "{path} step {step}: size after write");
            }
            assert_eq!(c.stat(&path).await.unwrap().size, model.len() as u64, "{path} step {step}");
            assert_eq!(be.read(&c, &path, 0, 4 * MAX).await, model, "{path} step {step}");
        }
        assert!(matches!(c.read_data(&path, 0, 1).await.unwrap(), DataRead::Backend { .. }), "{path}: the sequence spilled");
    }
}

/// Inline writes from one client race another client's spill: the digest check
/// must make the spill copy the bytes that are there when it commits, so no write
/// is lost.
async fn concurrent_writes_during_spill(kit: &Kit) {
    let (a, b) = (kit.client(), kit.client());
    a.mkdir("/cw", 0o755).await.unwrap();
    for round in 0..12 {
        let path = format!("/cw/f{round}");
        a.create(&path, 0o644).await.unwrap();
        let be = Backend::default();
        let small = {
            let (b, be, path) = (b.clone(), be.clone(), path.clone());
            tokio::spawn(async move {
                for i in 0..48u8 {
                    be.write(&b, &path, i as u64, &[i + 1], MAX).await;
                }
            })
        };
        let big = {
            let (a, be, path) = (a.clone(), be.clone(), path.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(50 * round)).await;
                be.write(&a, &path, 60, &[0xee; 20], MAX).await;
            })
        };
        small.await.unwrap();
        big.await.unwrap();
        let mut model: Vec<u8> = (1..=48).collect();
        model_write(&mut model, 60, &[0xee; 20]);
        assert_eq!(a.stat(&path).await.unwrap().size, 80, "{path}");
        assert_eq!(be.read(&a, &path, 0, 1000).await, model, "{path}: a write was lost around the spill");
    }
}

// ---------------------------------------------------------------------------
// 4. FIDs

/// FIDs are the servers' to issue: unique per file, bound to the inode
/// (its number is the FID's low half), whichever client made it.
async fn fids_are_unique_per_file(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/ids", 0o755).await.unwrap();
    let mut seen = HashSet::new();
    let mut fids = Vec::new();
    for i in 0..24 {
        let p = format!("/ids/f{i}");
        let ino = c.create(&p, 0o644).await.unwrap().ino;
        let fid = fid_of(&c, &p).await;
        assert!(seen.insert(fid), "{p}: fid {fid} already used");
        assert_eq!(fid.counter(), ino, "{p}: issued for its inode");
        fids.push(fid);
    }
    // Asking does not change it.
    assert_eq!(fid_of(&c, "/ids/f0").await, fids[0]);
    // Another client's files differ.
    let d = kit.client();
    d.create("/ids/other", 0o644).await.unwrap();
    let of = fid_of(&d, "/ids/other").await;
    assert!(!seen.contains(&of));
    // A file re-created under a used name gets a new FID.
    c.unlink("/ids/f1").await.unwrap();
    c.create("/ids/f1", 0o644).await.unwrap();
    assert!(!seen.contains(&fid_of(&c, "/ids/f1").await));
}

async fn fid_survives_file_renames(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/a", 0o755).await.unwrap();
    c.mkdir("/b", 0o755).await.unwrap();
    for (k, spilled) in [(0, false), (1, true), (2, false), (3, true)] {
        let src = format!("/a/src{k}");
        c.create(&src, 0o644).await.unwrap();
        write_inline(&c, &src, 0, format!("data{k}").as_bytes()).await;
        let fid = if spilled { spill(&c, &src).await } else { fid_of(&c, &src).await };
        let same = name_where(&format!("/a/same{k}_"), |p| p == primary(&src));
        let across = name_where(&format!("/b/across{k}_"), |p| p != primary(&same));
        let back = name_where(&format!("/a/back{k}_"), |p| p != primary(&across));
        let mut at = src.clone();
        for dst in [same, across, back] {
            c.rename(&at, &dst).await.unwrap();
            assert_errno!(c.stat(&at).await, Errno::ENOENT);
            assert_eq!(fid_of(&c, &dst).await, fid, "{at} -> {dst} (primaries {} -> {})", primary(&at), primary(&dst));
            if spilled {
                assert_eq!(c.read_data(&dst, 0, 10).await.unwrap(), DataRead::Backend { fid, size: 5 });
            } else {
                assert_eq!(read_inline_all(&c, &dst).await, format!("data{k}").as_bytes(), "{dst}");
            }
            at = dst;
        }
    }
    // Rename over an existing file keeps the moved file's FID.
    c.create("/a/victim", 0o644).await.unwrap();
    c.create("/a/mover", 0o644).await.unwrap();
    let mover = fid_of(&c, "/a/mover").await;
    c.rename("/a/mover", "/a/victim").await.unwrap();
    assert_eq!(fid_of(&c, "/a/victim").await, mover);
    assert_fsck_clean(&c, "").await;
}

async fn fid_survives_parent_directory_rename(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/p", 0o755).await.unwrap();
    c.mkdir("/p/sub", 0o755).await.unwrap();
    let names = ["/x", "/y", "/z", "/w", "/sub/deep", "/sub/deeper"];
    let mut fids = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let p = format!("/p{n}");
        c.create(&p, 0o644).await.unwrap();
        write_inline(&c, &p, 0, n.as_bytes()).await;
        let fid = if i % 2 == 1 { spill(&c, &p).await } else { fid_of(&c, &p).await };
        fids.push(fid);
    }
    // A new name under which some files change primary (so they migrate).
    let q = (0..1000)
        .map(|i| format!("/q{i}"))
        .find(|q| names.iter().filter(|n| primary(&format!("{q}{n}")) != primary(&format!("/p{n}"))).count() >= 3)
        .unwrap();
    c.rename("/p", &q).await.unwrap();
    for (i, n) in names.iter().enumerate() {
        let p = format!("{q}{n}");
        assert_eq!(fid_of(&c, &p).await, fids[i], "{p} (primary {} -> {})", primary(&format!("/p{n}")), primary(&p));
        if i % 2 == 1 {
            assert_eq!(c.read_data(&p, 0, 1).await.unwrap(), DataRead::Backend { fid: fids[i], size: n.len() as u64 });
        } else {
            assert_eq!(read_inline_all(&c, &p).await, n.as_bytes(), "{p}: inline contents moved with it");
        }
    }
    // And of a grandparent.
    c.mkdir("/top", 0o755).await.unwrap();
    c.rename(&q, "/top/inner").await.unwrap();
    c.rename("/top", "/top2").await.unwrap();
    for (i, n) in names.iter().enumerate() {
        assert_eq!(fid_of(&c, &format!("/top2/inner{n}")).await, fids[i]);
    }
    assert_fsck_clean(&c, "").await;
}

// ---------------------------------------------------------------------------
// 5. Reclaim

async fn reclaim_on_unlink(kit: &Kit) {
    let rec = Arc::new(Recorder::default());
    let c = kit.client_with(Some(rec.clone()), false);
    c.mkdir("/r", 0o755).await.unwrap();
    for i in 0..6 {
        let inline = format!("/r/in{i}");
        c.create(&inline, 0o644).await.unwrap();
        write_inline(&c, &inline, 0, b"small").await;
        c.unlink(&inline).await.unwrap();
        assert_eq!(rec.take(), vec![], "{inline}: an inline file frees nothing");

        let big = format!("/r/big{i}");
        c.create(&big, 0o644).await.unwrap();
        let fid = spill(&c, &big).await;
        assert_eq!(rec.take(), vec![], "spilling frees nothing");
        c.unlink(&big).await.unwrap();
        assert_eq!(rec.take(), vec![fid], "{big}: unlink reports the fid exactly once");
        assert_errno!(c.unlink(&big).await, Errno::ENOENT);
        assert_eq!(rec.take(), vec![]);
    }
    // Other objects free nothing.
    c.symlink("target", "/r/sym").await.unwrap();
    c.mknod("/r/fifo", 0o644, FileKind::Fifo, 0).await.unwrap();
    c.unlink("/r/sym").await.unwrap();
    c.unlink("/r/fifo").await.unwrap();
    assert_eq!(rec.take(), vec![]);
    // A file spilled by another client is reported to the one that unlinks it.
    let other = kit.client();
    other.create("/r/theirs", 0o644).await.unwrap();
    let fid = spill(&other, "/r/theirs").await;
    c.unlink("/r/theirs").await.unwrap();
    assert_eq!(rec.take(), vec![fid]);
    assert_fsck_clean(&c, "").await;
}

async fn reclaim_on_rename_over(kit: &Kit) {
    let rec = Arc::new(Recorder::default());
    let c = kit.client_with(Some(rec.clone()), false);
    c.mkdir("/r", 0o755).await.unwrap();
    for (k, same_primary) in [(0, true), (1, false), (2, true), (3, false)] {
        let victim = format!("/r/victim{k}");
        let mover = name_where(&format!("/r/mover{k}_"), |p| (p == primary(&victim)) == same_primary);
        c.create(&victim, 0o644).await.unwrap();
        let vfid = spill(&c, &victim).await;
        c.create(&mover, 0o644).await.unwrap();
        write_inline(&c, &mover, 0, b"m").await;
        c.rename(&mover, &victim).await.unwrap();
        assert_eq!(rec.take(), vec![vfid], "{mover} over spilled {victim} (same primary: {same_primary})");
        assert_eq!(read_inline_all(&c, &victim).await, b"m");
        // A spilled file moved onto an inline one, then onto a new name: nothing.
        let inline = name_where(&format!("/r/inline{k}_"), |p| (p == primary(&victim)) != same_primary);
        c.create(&inline, 0o644).await.unwrap();
        let mfid = spill(&c, &victim).await;
        c.rename(&victim, &inline).await.unwrap();
        assert_eq!(rec.take(), vec![], "replacing an inline file frees nothing");
        c.rename(&inline, &victim).await.unwrap();
        assert_eq!(rec.take(), vec![], "a plain rename frees nothing");
        // Spilled over spilled: only the replaced one.
        let third = format!("/r/third{k}");
        c.create(&third, 0o644).await.unwrap();
        let tfid = spill(&c, &third).await;
        c.rename(&third, &victim).await.unwrap();
        assert_eq!(rec.take(), vec![mfid]);
        c.unlink(&victim).await.unwrap();
        assert_eq!(rec.take(), vec![tfid]);
    }
    // Rename over one name of a hard-linked spilled file: the other name keeps it.
    c.create("/r/h1", 0o644).await.unwrap();
    let hfid = spill(&c, "/r/h1").await;
    let h2 = name_where("/r/h2_", |p| p != primary("/r/h1"));
    c.link("/r/h1", &h2).await.unwrap();
    c.create("/r/newcomer", 0o644).await.unwrap();
    c.rename("/r/newcomer", &h2).await.unwrap();
    assert_eq!(rec.take(), vec![], "the file still has a name");
    c.create("/r/newcomer2", 0o644).await.unwrap();
    c.rename("/r/newcomer2", "/r/h1").await.unwrap();
    assert_eq!(rec.take(), vec![hfid], "its last name replaced");
    // The last name is a link to an inode homed on another server: the freed
    // FID comes back from the home server's decrement.
    c.create("/r/k1", 0o644).await.unwrap();
    let kfid = spill(&c, "/r/k1").await;
    let k2 = name_where("/r/k2_", |p| p != primary("/r/k1"));
    c.link("/r/k1", &k2).await.unwrap();
    c.unlink("/r/k1").await.unwrap();
    assert_eq!(rec.take(), vec![]);
    for same in [true, false] {
        let newcomer = name_where(&format!("/r/nc{same}_"), |p| (p == primary(&k2)) == same);
        c.create(&newcomer, 0o644).await.unwrap();
        c.rename(&newcomer, &k2).await.unwrap();
        let want = if same { vec![kfid] } else { vec![] };
        assert_eq!(rec.take(), want, "rename over {k2} (same primary: {same})");
    }
    assert_fsck_clean(&c, "").await;
}

async fn reclaim_with_hard_links(kit: &Kit) {
    let rec = Arc::new(Recorder::default());
    let c = kit.client_with(Some(rec.clone()), false);
    c.mkdir("/l", 0o755).await.unwrap();
    c.mkdir("/m", 0o755).await.unwrap();
    // (same primary?, unlink the first name first?, spill before or after linking)
    let cases = [
        (false, true, true),
        (false, false, true),
        (false, true, false),
        (false, false, false),
        (true, true, true),
        (true, false, false),
    ];
    for (k, (same, first_first, spill_first)) in cases.into_iter().enumerate() {
        let a = format!("/l/a{k}");
        let b = name_where(&format!("/m/b{k}_"), |p| (p == primary(&a)) == same);
        c.create(&a, 0o644).await.unwrap();
        write_inline(&c, &a, 0, b"linked").await;
        let fid = if spill_first { spill(&c, &a).await } else { fid_of(&c, &a).await };
        c.link(&a, &b).await.unwrap();
        if !spill_first {
            // Spilled through the name whose inode is (maybe) on another server.
            assert_eq!(spill(&c, &b).await, fid);
        }
        let (first, last) = if first_first { (&a, &b) } else { (&b, &a) };
        c.unlink(first).await.unwrap();
        assert_eq!(rec.take(), vec![], "case {k}: unlinking {first} (one name left: {last}) frees nothing");
        assert_eq!(c.stat(last).await.unwrap().nlink, 1);
        assert_eq!(c.read_data(last, 0, 1).await.unwrap(), DataRead::Backend { fid, size: 6 });
        c.unlink(last).await.unwrap();
        assert_eq!(
            rec.take(),
            vec![fid],
            "case {k}: unlinking the last name {last} (primary {}, inode homed on {}) reports the fid once",
            primary(last),
            primary(&a)
        );
    }
    // Three names (the second link made through a name homed elsewhere).
    let a = "/l/three";
    let b = name_where("/m/three_b", |p| p != primary(a));
    let d = name_where("/l/three_d", |p| p != primary(a) && p != primary(&b));
    c.create(a, 0o644).await.unwrap();
    let fid = spill(&c, a).await;
    c.link(a, &b).await.unwrap();
    c.link(&b, &d).await.unwrap();
    assert_eq!(c.stat(a).await.unwrap().nlink, 3);
    for name in [a, d.as_str()] {
        c.unlink(name).await.unwrap();
        assert_eq!(rec.take(), vec![], "{name}");
    }
    c.unlink(&b).await.unwrap();
    assert_eq!(rec.take(), vec![fid]);
    // Inline hard-linked files free nothing at the last name.
    c.create("/l/inl", 0o644).await.unwrap();
    let other = name_where("/m/inl_", |p| p != primary("/l/inl"));
    c.link("/l/inl", &other).await.unwrap();
    c.unlink("/l/inl").await.unwrap();
    c.unlink(&other).await.unwrap();
    assert_eq!(rec.take(), vec![]);
    assert_fsck_clean(&c, "").await;
}

// ---------------------------------------------------------------------------
// 6. Hard-linked contents

async fn hard_linked_contents_are_shared(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/h", 0o755).await.unwrap();
    for (k, same) in [(0, false), (1, true), (2, false)] {
        let x = format!("/h/x{k}");
        let y = name_where(&format!("/h/y{k}_"), |p| (p == primary(&x)) == same);
        c.create(&x, 0o644).await.unwrap();
        write_inline(&c, &x, 0, b"hello").await;
        c.link(&x, &y).await.unwrap();
        assert_eq!(read_inline_all(&c, &y).await, b"hello", "{y} reads what {x} wrote");
        let a = write_inline(&c, &y, 5, b" world").await;
        assert_eq!((a.size, a.nlink), (11, 2));
        assert_eq!(read_inline_all(&c, &x).await, b"hello world", "{x} reads what {y} wrote");
        assert_eq!(c.stat(&x).await.unwrap().size, 11);
        c.truncate(&y, 4).await.unwrap();
        assert_eq!(read_inline_all(&c, &x).await, b"hell");
        c.truncate(&x, 6).await.unwrap();
        assert_eq!(read_inline_all(&c, &y).await, b"hell\0\0");
        // The spill handshake split across the two names.
        let DataWrite::Spill { fid, data, size } = c.write_data(&x, 0, &[0u8; 100], MAX, false).await.unwrap() else {
            panic!("{x}: expected Spill")
        };
        assert_eq!((data.as_slice(), size), (&b"hell"[..], 6));
        c.spilled(&y, data.len() as u64, inline_digest(&data)).await.unwrap();
        for p in [&x, &y] {
            assert_eq!(c.read_data(p, 0, 1).await.unwrap(), DataRead::Backend { fid, size: 6 }, "{p}");
            assert_eq!(c.write_data(p, 0, b"q", MAX, false).await.unwrap(), DataWrite::Backend { fid, size: 6 }, "{p}");
        }
        assert_eq!(c.extend(&y, 1000, false).await.unwrap().size, 1000);
        assert_eq!(c.stat(&x).await.unwrap().size, 1000);
        assert_eq!(c.read_data(&x, 0, 1).await.unwrap(), DataRead::Backend { fid, size: 1000 });
    }
    // Through the reference model, alternating names.
    c.create("/h/m", 0o644).await.unwrap();
    let other = name_where("/h/m_", |p| p != primary("/h/m"));
    c.link("/h/m", &other).await.unwrap();
    let be = Backend::default();
    let mut model = Vec::new();
    let mut rng = Lcg(7);
    for step in 0..30 {
        let name = if step % 2 == 0 { "/h/m" } else { other.as_str() };
        let len = rng.below(10) as usize + 1;
        let off = rng.below(MAX as u64) as usize;
        let data: Vec<u8> = (0..len).map(|_| rng.below(255) as u8 + 1).collect();
        be.write(&c, name, off as u64, &data, MAX).await;
        model_write(&mut model, off, &data);
        for p in ["/h/m", other.as_str()] {
            assert_eq!(be.read(&c, p, 0, 4 * MAX).await, model, "step {step}: {p}");
        }
    }
    assert_fsck_clean(&c, "").await;
}

// ---------------------------------------------------------------------------
// 7. Special files

async fn mknod_special_files(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/dev", 0o755).await.unwrap();
    let specs = [
        ("/dev/fifo", FileKind::Fifo, 0o640, 0u64),
        ("/dev/sock", FileKind::Socket, 0o600, 0),
        ("/dev/null", FileKind::CharDev, 0o666, (1 << 8) | 3),
        ("/dev/sda1", FileKind::BlockDev, 0o660, (8 << 8) | 1),
        ("/dev/big", FileKind::CharDev, 0o600, u64::MAX - 1),
    ];
    for (path, kind, mode, rdev) in specs {
        let a = c.mknod(path, mode, kind, rdev).await.unwrap();
        assert_eq!((a.kind, a.mode, a.rdev, a.size, a.nlink), (kind, mode, rdev, 0, 1), "{path}: mknod's answer");
        let s = c.stat(path).await.unwrap();
        assert_eq!((s.kind, s.mode, s.rdev, s.ino), (kind, mode, rdev, a.ino), "{path}: stat");
        assert_errno!(c.mknod(path, mode, kind, rdev).await, Errno::EEXIST);
        assert_errno!(c.create(path, 0o644).await, Errno::EEXIST);
    }
    let mut listed: Vec<(String, FileKind)> = c.readdir("/dev").await.unwrap().into_iter().map(|e| (e.name, e.kind)).collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<(String, FileKind)> = specs.iter().map(|(p, k, _, _)| (p.trim_start_matches("/dev/").to_string(), *k)).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, want);
    // Only special kinds.
    for kind in [FileKind::File, FileKind::Dir, FileKind::Symlink] {
        assert_errno!(c.mknod("/dev/bad", 0o644, kind, 0).await, Errno::EINVAL, "mknod of a non-special kind");
        assert_errno!(c.stat("/dev/bad").await, Errno::ENOENT);
    }
    assert_errno!(c.mknod("/nodir/fifo", 0o644, FileKind::Fifo, 0).await, Errno::ENOENT);
    assert_errno!(c.mknod("/dev", 0o644, FileKind::Fifo, 0).await, Errno::EEXIST);
    // No contents, no size.
    for (path, ..) in specs {
        assert_errno!(c.truncate(path, 0).await, Errno::EINVAL, "truncate of a special file");
        assert_errno!(c.truncate(path, 10).await, Errno::EINVAL);
        assert_errno!(c.read_data(path, 0, 10).await, Errno::EINVAL);
        assert_errno!(c.write_data(path, 0, b"x", MAX, false).await, Errno::EINVAL);
        assert_errno!(c.spilled(path, 0, inline_digest(b"")).await, Errno::EINVAL);
        assert_errno!(c.extend(path, 10, false).await, Errno::EINVAL);
    }
    // Their metadata still changes, and they rename and unlink like files.
    assert_eq!(c.chmod("/dev/fifo", 0o600).await.unwrap().mode, 0o600);
    let moved = name_where("/dev/moved", |p| p != primary("/dev/null"));
    c.rename("/dev/null", &moved).await.unwrap();
    let s = c.stat(&moved).await.unwrap();
    assert_eq!((s.kind, s.rdev), (FileKind::CharDev, (1 << 8) | 3), "rdev kept across a rename between servers");
    for p in ["/dev/fifo", "/dev/sock", moved.as_str(), "/dev/sda1", "/dev/big"] {
        c.unlink(p).await.unwrap();
    }
    assert!(c.readdir("/dev").await.unwrap().is_empty());
    assert_fsck_clean(&c, "").await;
}

async fn data_requests_on_non_files(kit: &Kit) {
    let c = kit.client();
    c.mkdir("/dir", 0o755).await.unwrap();
    c.create("/dir/file", 0o644).await.unwrap();
    c.symlink("/dir/file", "/link").await.unwrap();
    for dir in ["/", "/dir"] {
        assert_errno!(c.read_data(dir, 0, 1).await, Errno::EISDIR, "read_data on a directory");
        assert_errno!(c.write_data(dir, 0, b"x", MAX, false).await, Errno::EISDIR);
    }
    assert_errno!(c.read_data("/link", 0, 1).await, Errno::EINVAL, "read_data on a symlink");
    assert_errno!(c.write_data("/link", 0, b"x", MAX, false).await, Errno::EINVAL);
    for missing in ["/missing", "/dir/missing", "/nodir/missing"] {
        assert_errno!(c.read_data(missing, 0, 1).await, Errno::ENOENT, "read_data on a missing path");
        assert_errno!(c.write_data(missing, 0, b"x", MAX, false).await, Errno::ENOENT);
    }
    assert_errno!(c.read_data("/dir/file/below", 0, 1).await, Errno::ENOTDIR);
    assert_errno!(c.read_data("relative", 0, 1).await, Errno::EINVAL);
}

// ---------------------------------------------------------------------------
// 8. Directory times

async fn times(c: &Client, dir: &str) -> (i64, i64) {
    let a = c.stat(dir).await.unwrap();
    assert_eq!(a.kind, FileKind::Dir, "{dir}");
    (a.mtime, a.ctime)
}

/// Runs `$op` and asserts that each of `$dirs` got a strictly later mtime and ctime.
macro_rules! touches {
    ($c:expr, [$($dir:expr),+], $op:expr) => {{
        let dirs: Vec<String> = vec![$($dir.to_string()),+];
        let mut before = Vec::new();
        for d in &dirs {
            before.push(times($c, d).await);
        }
        sleep_ms(3).await;
        $op.await.unwrap();
        for (d, b) in dirs.iter().zip(before) {
            let a = times($c, d).await;
            assert!(a.0 > b.0 && a.1 > b.1, "{}: {d} (mtime, ctime) {b:?} -> {a:?}", stringify!($op));
        }
    }};
}

async fn dir_times_follow_name_changes(kit: &Kit) {
    let c = kit.client_with(None, true);
    // Directories on different primaries.
    let d = name_where("/d", |_| true);
    let e = name_where("/e", |p| p != primary(&d));
    c.mkdir(&d, 0o755).await.unwrap();
    c.mkdir(&e, 0o755).await.unwrap();
    let f = format!("{d}/f");
    touches!(&c, [d], c.create(&f, 0o644));
    touches!(&c, [d], c.unlink(&f));
    let s = format!("{d}/sub");
    touches!(&c, [d], c.mkdir(&s, 0o755));
    touches!(&c, [d], c.rmdir(&s));
    touches!(&c, [d], c.symlink("anywhere", &format!("{d}/sym")));
    touches!(&c, [d], c.mknod(&format!("{d}/fifo"), 0o644, FileKind::Fifo, 0));
    // link: the directory that gains the name.
    c.create(&format!("{e}/orig"), 0o644).await.unwrap();
    touches!(&c, [d], c.link(&format!("{e}/orig"), &format!("{d}/hard")));
    touches!(&c, [d], c.link(&format!("{d}/hard"), &format!("{d}/hard2")));
    // rename within one directory, and between two (file and directory).
    touches!(&c, [d], c.rename(&format!("{d}/hard2"), &format!("{d}/hard3")));
    touches!(&c, [d, e], c.rename(&format!("{d}/hard3"), &format!("{e}/moved")));
    touches!(&c, [d, e], c.rename(&format!("{e}/moved"), &format!("{d}/back")));
    c.mkdir(&format!("{d}/subdir"), 0o755).await.unwrap();
    touches!(&c, [d, e], c.rename(&format!("{d}/subdir"), &format!("{e}/subdir")));
    // Unlinking a name of a hard-linked file; the root as a parent.
    touches!(&c, [d], c.unlink(&format!("{d}/hard")));
    touches!(&c, ["/"], c.create("/at_root", 0o644));
    touches!(&c, ["/"], c.unlink("/at_root"));
    // Nested, and after the directory itself was renamed (its times migrate).
    let nested = format!("{d}/n");
    c.mkdir(&nested, 0o755).await.unwrap();
    touches!(&c, [nested], c.create(&format!("{nested}/x"), 0o644));
    let renamed = name_where("/renamed", |p| p != primary(&d));
    c.rename(&d, &renamed).await.unwrap();
    let t = times(&c, &renamed).await;
    assert!(t.0 > 0 && t.1 > 0, "{renamed}: the times moved with the directory: {t:?}");
    touches!(&c, [renamed], c.create(&format!("{renamed}/after"), 0o644));
    touches!(&c, [format!("{renamed}/n")], c.unlink(&format!("{renamed}/n/x")));
    // Writes to a file's contents are not name changes.
    let before = times(&c, &renamed).await;
    sleep_ms(3).await;
    write_inline(&c, &format!("{renamed}/after"), 0, b"x").await;
    assert_eq!(times(&c, &renamed).await, before, "a data write leaves the directory alone");
    assert_fsck_clean(&c, "").await;
}

/// A burst of creates in one directory: its touches after the first are owed
/// and sent together after a window (ShardFS, `touches.rs`). A client that
/// never stats the directory still gets them to the server: another client
/// sees the directory's mtime reach the last file's ctime.
async fn dir_times_of_a_burst_reach_other_clients(kit: &Kit) {
    let c = kit.client_with(None, true);
    let other = kit.client();
    c.mkdir("/burst", 0o755).await.unwrap();
    let mut last = None;
    for i in 0..20 {
        last = Some(c.create(&format!("/burst/f{i}"), 0o644).await.unwrap());
    }
    let made = last.unwrap().ctime;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (mtime, ctime) = times(&other, "/burst").await;
        if mtime >= made && ctime >= made {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the last create's touch never arrived: {mtime}, {ctime} < {made}");
        sleep_ms(5).await;
    }
}

/// A directory renamed while its burst's touch, and that of a directory below
/// it, are still owed: the touches are sent before the rename, so they land on
/// the directories (their times move with them), not on the old names once the
/// window is over.
async fn an_owed_touch_goes_with_its_directory_when_renamed(kit: &Kit) {
    let c = kit.client_with(None, true);
    c.mkdir("/from", 0o755).await.unwrap();
    c.mkdir("/from/sub", 0o755).await.unwrap();
    c.create("/from/sub/first", 0o644).await.unwrap();
    sleep_ms(3).await;
    let last_below = c.create("/from/sub/owed", 0o644).await.unwrap();
    let last = c.create("/from/owed", 0o644).await.unwrap();
    c.rename("/from", "/to").await.unwrap();
    for (dir, made) in [("/to", last.ctime), ("/to/sub", last_below.ctime)] {
        let (mtime, ctime) = times(&c, dir).await;
        assert!(mtime >= made && ctime >= made, "{dir}: the owed touch was lost: {mtime}, {ctime} < {made}");
    }
}

/// A utimens of a directory just after changes in it (`tar` and `cp -a` set
/// a directory's times once its contents are in) keeps the times it sets:
/// the touch owed for those changes goes before it, not after.
async fn a_utimens_after_changes_keeps_the_times_it_sets(kit: &Kit) {
    use canopy_proto::TimeSet;
    let c = kit.client_with(None, true);
    c.mkdir("/u", 0o755).await.unwrap();
    c.create("/u/a", 0o644).await.unwrap();
    c.create("/u/b", 0o644).await.unwrap();
    let (atime, mtime) = (1_000_000_000, 2_000_000_000);
    c.utimens("/u", Some(TimeSet::At(atime)), Some(TimeSet::At(mtime))).await.unwrap();
    // Past the touch window: anything still owed would have been sent by now.
    sleep_ms(300).await;
    assert_eq!(times(&c, "/u").await.0, mtime, "the owed touch undid the utimens");
}

/// Documents the trade-off: without `dir_times: true` (off by default) a
/// directory's times do not follow the names inside it.
async fn dir_times_off_by_default(kit: &Kit) {
    let c = kit.client();
    let d = "/quiet";
    c.mkdir(d, 0o755).await.unwrap();
    let before = times(&c, d).await;
    sleep_ms(3).await;
    c.create("/quiet/f", 0o644).await.unwrap();
    assert_eq!(times(&c, d).await, before, "create leaves the parent's times alone by default");
    c.unlink("/quiet/f").await.unwrap();
    c.mknod("/quiet/p", 0o644, FileKind::Fifo, 0).await.unwrap();
    assert_eq!(times(&c, d).await, before, "unlink and mknod too");
}

// ---------------------------------------------------------------------------
// 9. Setuid and setgid

/// A write, extend or truncate by a process that may not keep setuid and setgid
/// clears them (setgid only when group-executable), as write(2) does: the FUSE
/// mount leaves this to the servers (FUSE_HANDLE_KILLPRIV) rather than to the
/// kernel's chmod, which a non-owner may not send. Root keeps them, unless it
/// writes for an unprivileged process (`kill_suid`, the mount's case).
async fn data_changes_clear_setuid_as_write_does(kit: &Kit) {
    let c = kit.client();
    let alice = c.as_user(canopy_proto::Creds::user(1000, 1000));
    c.mkdir("/su", 0o777).await.unwrap();
    alice.create("/su/f", 0o644).await.unwrap();
    c.chmod("/su/f", 0o6755).await.unwrap();
    write_inline(&c, "/su/f", 0, b"root").await;
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o6755, "root writing for itself keeps them");
    c.write_data("/su/f", 0, b"r", MAX, true).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o755, "root writing for an unprivileged process");
    c.chmod("/su/f", 0o6755).await.unwrap();
    alice.write_data("/su/f", 0, b"a", MAX, false).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o755, "a caller other than root, owner or not");
    c.chmod("/su/f", 0o6745).await.unwrap();
    alice.write_data("/su/f", 0, b"a", MAX, false).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o2745, "setgid without group execute stays");
    c.chmod("/su/f", 0o6755).await.unwrap();
    alice.write_data("/su/f", 0, b"", MAX, false).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o6755, "an empty write changes nothing");
    alice.truncate("/su/f", 1).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o755, "truncate");
    // Back-end contents report growth with extend, which clears them the same way.
    spill(&c, "/su/f").await;
    c.chmod("/su/f", 0o6755).await.unwrap();
    c.extend("/su/f", 10, false).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o6755);
    c.extend("/su/f", 20, true).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o755);
    c.chmod("/su/f", 0o6755).await.unwrap();
    alice.extend("/su/f", 30, false).await.unwrap();
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o755);
    // A chmod is still the owner's alone, whatever it removes.
    c.chmod("/su/f", 0o6755).await.unwrap();
    let bob = c.as_user(canopy_proto::Creds::user(2000, 2000));
    assert_errno!(bob.chmod("/su/f", 0o755).await, Errno::EPERM);
    assert_eq!(c.stat("/su/f").await.unwrap().mode, 0o6755);
    assert_fsck_clean(&c, "").await;
}

// ---------------------------------------------------------------------------
// 10. What data requests may not take on trust

fn as_uid(c: &Client, uid: u32) -> Client {
    c.as_user(canopy_proto::Creds::user(uid, uid))
}

/// Data requests are checked like opens: read permission for `read_data`, write
/// permission for `write_data`, `spilled` and `extend`; root passes (the FUSE
/// mount checks at open and sends them as root). Unchecked, any client could
/// read and overwrite another user's 0600 file.
async fn data_requests_check_permission(kit: &Kit) {
    let c = kit.client();
    let (alice, bob) = (as_uid(&c, 1000), as_uid(&c, 2000));
    c.mkdir("/perm", 0o777).await.unwrap();
    for i in 0..4 {
        let f = format!("/perm/f{i}");
        alice.create(&f, 0o600).await.unwrap();
        write_inline(&alice, &f, 0, b"secret").await;
        assert_errno!(bob.read_data(&f, 0, 100).await, Errno::EACCES);
        assert_errno!(bob.write_data(&f, 0, b"PWNED", MAX, false).await, Errno::EACCES);
        assert_errno!(bob.spilled(&f, 6, inline_digest(b"secret")).await, Errno::EACCES);
        assert_errno!(bob.extend(&f, 1 << 20, false).await, Errno::EACCES);
        assert_eq!(read_inline_all(&c, &f).await, b"secret", "root reads anything");
        assert_eq!(c.stat(&f).await.unwrap().size, 6, "Bob changed nothing");
        alice.chmod(&f, 0o644).await.unwrap();
        assert_eq!(read_inline_all(&bob, &f).await, b"secret", "readable by others now");
        assert_errno!(bob.write_data(&f, 0, b"x", MAX, false).await, Errno::EACCES);
        // A second name on another server: the request is redirected to the
        // inode's home, which checks it.
        let l = name_where(&format!("/perm/l{i}_"), |p| p != primary(&f));
        alice.link(&f, &l).await.unwrap();
        assert_eq!(read_inline_all(&bob, &l).await, b"secret");
        assert_errno!(bob.write_data(&l, 0, b"x", MAX, false).await, Errno::EACCES);
        alice.chmod(&f, 0).await.unwrap();
        assert_errno!(alice.read_data(&l, 0, 1).await, Errno::EACCES, "the owner too, as open(2)");
        assert!(matches!(c.write_data(&l, 0, b"S", MAX, false).await.unwrap(), DataWrite::Written(_)), "root passes");
        assert_eq!(read_inline_all(&c, &f).await, b"Secret");
    }
    assert_fsck_clean(&c, "").await;
}

/// A server keeps at most `INLINE_LIMIT` bytes inline whatever `inline_max` the
/// client sends: `WriteData { offset: 1 << 30, inline_max: u32::MAX }` made a
/// server allocate and store over a gigabyte. Reads are capped the same way.
async fn the_server_bounds_inline_contents(kit: &Kit) {
    let c = kit.client();
    let limit = INLINE_LIMIT as u64;
    c.create("/big", 0o644).await.unwrap();
    for offset in [limit, 2 * limit, 1 << 30, u64::MAX - 1] {
        match c.write_data("/big", offset, b"x", u32::MAX, false).await.unwrap() {
            DataWrite::Spill { data, size, .. } => assert_eq!((data.len(), size), (0, 0), "at {offset}: nothing written"),
            other => panic!("a write ending past the server's limit at {offset}: {other:?}"),
        }
    }
    assert_eq!(c.stat("/big").await.unwrap().size, 0);
    let full = vec![7u8; INLINE_LIMIT as usize];
    match c.write_data("/big", 0, &full, u32::MAX, false).await.unwrap() {
        DataWrite::Written(a) => assert_eq!(a.size, limit, "up to the limit stays inline"),
        other => panic!("a write ending at the limit: {other:?}"),
    }
    assert!(matches!(c.write_data("/big", limit - 1, b"yz", u32::MAX, false).await.unwrap(), DataWrite::Spill { .. }));
    // A file extended by truncate stays inline, far longer than what is stored.
    let huge = 1u64 << 40;
    c.truncate("/big", huge).await.unwrap();
    assert_eq!(c.read_data("/big", 0, u32::MAX).await.unwrap(), DataRead::Inline(full), "one read returns at most the limit");
    assert_eq!(c.read_data("/big", huge - 2, u32::MAX).await.unwrap(), DataRead::Inline(vec![0, 0]));
    assert_fsck_clean(&c, "").await;
}
