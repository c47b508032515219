//! A hostile user against a real cluster: `canopy up` (4 server processes and
//! a lock service) and, where a victim's data is at stake, an `--allow-other`
//! mount; the attacker holds an ordinary user key and speaks the wire
//! protocol directly or runs the CLI as his own OS user. Each test names what
//! it pins: another user's file contents, entries planted where they do not
//! belong, a server's memory and descriptors, POSIX rules the servers must
//! apply whoever asks. Needs root and /dev/fuse, as CI has.

mod common;

use bytes::BytesMut;
use canopy_client::cluster::ClusterFile;
use canopy_proto::msg::{FileRef, IfExists, NewKind, NsCall};
use canopy_proto::path::NsPath;
use canopy_proto::{frame, placement, Creds, Errno, FileKind, Reply, Request, SetAttr};
use canopy_rpc::conn::Connection;
use canopy_rpc::ClientAuth;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const T: Duration = Duration::from_secs(10);
/// The victim and the attacker (no accounts needed: keys and the mount take
/// their uids as given).
const ALICE: u32 = 1000;
const MALLORY: u32 = 2000;

/// A running cluster in a temporary home, with its mounts.
struct Cluster {
    home: tempfile::TempDir,
    mounts: Vec<PathBuf>,
}

impl Cluster {
    /// `canopy up --servers 4 --mode MODE` and `extra`; the home reachable by
    /// the users it serves (its cluster file and sockets), as `canopy up`
    /// leaves its own directory.
    fn up(mode: &str, extra: &[&str]) -> Cluster {
        Cluster::up_with(mode, extra, |_| {})
    }

    /// [`Cluster::up`], with `prepare` setting up the `canopy up` command (a
    /// limit its daemons inherit).
    fn up_with(mode: &str, extra: &[&str], prepare: impl FnOnce(&mut Command)) -> Cluster {
        // SAFETY: geteuid only reads the process's credentials.
        assert_eq!(unsafe { libc::geteuid() }, 0, "the hostile suite runs users' processes and mounts: it needs root");
        let c = Cluster { home: tempfile::tempdir().unwrap(), mounts: Vec::new() };
        fs::set_permissions(c.home.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = common::command(&c.dir());
        cmd.args(["up", "--servers", "4", "--mode", mode]).args(extra);
        prepare(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "canopy up: {}", String::from_utf8_lossy(&out.stderr));
        c
    }

    fn dir(&self) -> PathBuf {
        self.home.path().join("cluster")
    }

    /// `/pub`, a directory every user may write (mode 0777).
    fn public(&self) {
        self.ok(&["mkdir", "-p", "/pub"]);
        self.ok(&["chmod", "777", "/pub"]);
    }

    fn ok(&self, args: &[&str]) -> String {
        common::canopy_ok(&self.dir(), args)
    }

    /// The CLI run as OS user `uid` (gid the same), finding its user key as
    /// such a user does.
    fn as_user(&self, uid: u32, args: &[&str]) -> std::process::Output {
        use std::os::unix::process::CommandExt;
        common::command(&self.dir()).uid(uid).gid(uid).env("HOME", "/nonexistent").args(args).output().unwrap()
    }

    fn file(&self) -> ClusterFile {
        ClusterFile::load(&self.dir().join("cluster.json")).unwrap()
    }

    /// `uid`'s user key, issued by the administrator.
    fn user_key(&self, uid: u32) -> ClientAuth {
        let said = self.ok(&["key", "issue", "--uid", &uid.to_string(), "--gid", &uid.to_string()]);
        let path = said.split_whitespace().last().expect("the key's path");
        canopy_client::keyfile::load(Path::new(path)).unwrap().client_auth()
    }

    fn cluster_key(&self) -> ClientAuth {
        canopy_client::keyfile::load(&self.dir().join("cluster.key")).unwrap().client_auth()
    }

    /// A connection to server `i` proving `me`.
    async fn conn(&self, i: usize, me: &ClientAuth) -> Connection {
        Connection::connect(&self.file().servers[i], me, T).await.unwrap()
    }

    /// The server holding `path` in ShardFS.
    fn primary(&self, path: &str) -> usize {
        placement::primary(&NsPath::parse(path).unwrap(), 4) as usize
    }

    /// The pid of daemon `name` (`server-0`, `lockd`).
    fn pid(&self, name: &str) -> u32 {
        fs::read_to_string(self.dir().join(format!("{name}.pid"))).unwrap().trim().parse().unwrap()
    }

    /// Mounts the cluster with `--allow-other` at a new directory.
    fn mount(&mut self, extra: &[&str]) -> PathBuf {
        let mnt = self.home.path().join(format!("mnt{}", self.mounts.len()));
        fs::create_dir_all(&mnt).unwrap();
        let mut args = vec!["mount", "--allow-other", mnt.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.ok(&args);
        self.mounts.push(mnt.clone());
        mnt
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in self.mounts.clone() {
            let _ = common::canopy(&self.dir(), &["umount", "--lazy", m.to_str().unwrap()]);
        }
        let _ = common::canopy(&self.dir(), &["down"]);
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A name in `dir` whose ShardFS primary is server `want`.
fn name_on(dir: &str, want: usize) -> String {
    (0..).map(|i| format!("{dir}/n{i}")).find(|p| placement::primary(&NsPath::parse(p).unwrap(), 4) as usize == want).unwrap()
}

/// Defect 1, FID aliasing: whatever a user does with his own file (a spill
/// asked for, a size set), it never names another user's back-end contents:
/// the servers issue every FID, for the inode it belongs to. Through a mount,
/// his file reads as his own, and unlinking it leaves the victim's contents.
#[test]
fn a_users_file_never_reaches_another_users_contents() {
    let mut c = Cluster::up("shardfs", &[]);
    let mnt = c.mount(&[]);
    let secret: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8 + 1).collect();
    c.ok(&["mkdir", "/alice", "/pub"]);
    c.ok(&["chown", &format!("{ALICE}:{ALICE}"), "/alice"]);
    c.ok(&["chmod", "700", "/alice"]);
    c.ok(&["chmod", "777", "/pub"]);
    let victim = mnt.join("alice/secret");
    let (v, s) = (victim.clone(), secret.clone());
    common::as_user(ALICE, move || fs::write(&v, &s).unwrap());
    let rt = rt();
    let root = c.cluster_key();
    let victim_fid = rt.block_on(async {
        let conn = c.conn(c.primary("/alice/secret"), &root).await;
        match conn.call(&Creds::root(), &Request::ReadData { at: FileRef::Path("/alice/secret".into()), offset: 0, len: 1 }, T).await {
            Ok(Reply::Backend { fid, .. }) => fid,
            other => panic!("the victim's contents are in back-end storage: {other:?}"),
        }
    });
    let mallory = c.user_key(MALLORY);
    let mine = "/pub/mine";
    rt.block_on(async {
        let conn = c.conn(c.primary(mine), &mallory).await;
        let create = Request::Create { at: mine.into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
        let Ok(Reply::Attr(a)) = conn.call(&Creds::root(), &create, T).await else { panic!("create") };
        // Asks for a spill: the FID named is his file's own.
        let spill = Request::WriteData { at: FileRef::Path(mine.into()), offset: 0, data: vec![], inline_max: 0, kill_suid: true };
        let Ok(Reply::Spill { fid, .. }) = conn.call(&Creds::root(), &spill, T).await else { panic!("spill") };
        assert_ne!(fid, victim_fid);
        assert_eq!(fid.counter(), a.ino, "issued for his inode");
        let spilled = Request::Spilled { at: FileRef::Path(mine.into()), len: 0, digest: canopy_proto::fid::contents_digest(&[]) };
        conn.call(&Creds::root(), &spilled, T).await.unwrap();
        let extend = Request::Extend { at: FileRef::Path(mine.into()), end: secret.len() as u64, kill_suid: true };
        conn.call(&Creds::root(), &extend, T).await.unwrap();
    });
    let m = mnt.join("pub/mine");
    let read = common::as_user(MALLORY, move || fs::read(&m).unwrap_or_default());
    assert!(read.iter().all(|b| *b == 0), "his file reads the victim's bytes");
    let m = mnt.join("pub/mine");
    common::as_user(MALLORY, move || fs::remove_file(&m).unwrap());
    let v = victim.clone();
    assert_eq!(common::as_user(ALICE, move || fs::read(&v).unwrap()), secret, "the victim's contents are intact");
}

/// Defect 2: a file's contents by inode number, which skips the search
/// permission of every directory above it, are the cluster key's only.
#[test]
fn data_by_inode_number_needs_the_cluster_key() {
    let c = Cluster::up("shardfs", &[]);
    c.ok(&["mkdir", "/locked"]);
    c.ok(&["chmod", "700", "/locked"]);
    let root = c.cluster_key();
    let rt = rt();
    let ino = rt.block_on(async {
        let conn = c.conn(c.primary("/locked/f"), &root).await;
        let create = Request::Create { at: "/locked/f".into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
        let Ok(Reply::Attr(a)) = conn.call(&Creds::root(), &create, T).await else { panic!("create") };
        let write = Request::WriteData { at: FileRef::Path("/locked/f".into()), offset: 0, data: b"top secret".to_vec(), inline_max: 4096, kill_suid: false };
        conn.call(&Creds::root(), &write, T).await.unwrap();
        a.ino
    });
    // A second name makes the inode shared, named by number on its home.
    c.ok(&["ln", "/locked/f", "/locked/g"]);
    let mallory = c.user_key(MALLORY);
    rt.block_on(async {
        for i in 0..4 {
            let conn = c.conn(i, &mallory).await;
            let read = Request::ReadData { at: FileRef::Ino(ino), offset: 0, len: 100 };
            assert_eq!(conn.call(&Creds::root(), &read, T).await, Err(Errno::EPERM), "server {i}");
            let write = Request::WriteData { at: FileRef::Ino(ino), offset: 0, data: b"x".to_vec(), inline_max: 4096, kill_suid: true };
            assert_eq!(conn.call(&Creds::root(), &write, T).await, Err(Errno::EPERM), "server {i}");
        }
    });
    assert!(!c.as_user(MALLORY, &["stat", "/locked/g"]).status.success());
}

/// Defect 3: every store, the lock service's and the back-end directories
/// with everything in them are their daemon's user's alone; a store found
/// open to others is closed at start, and the log says so.
#[test]
fn stores_and_back_ends_are_readable_by_their_owner_only() {
    let mut c = Cluster::up("shardfs", &[]);
    let mnt = c.mount(&[]);
    fs::write(mnt.join("big"), vec![7u8; 200_000]).unwrap();
    fs::write(mnt.join("small"), b"inline").unwrap();
    let open_to_others = |c: &Cluster| {
        let out = Command::new("find").arg(c.dir()).args(["-mindepth", "1", "(", "-path", "*/server-*", "-o", "-path", "*/lockd", "-o", "-path", "*/lockd/*", "-o", "-path", "*/data", "-o", "-path", "*/data/*", ")", "-perm", "/077", "-print"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.ends_with(".sock") && !l.ends_with(".pid") && !l.ends_with(".log")).map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(open_to_others(&c), Vec::<String>::new());
    for log in ["server-0.log", "lockd.log"] {
        assert_eq!(fs::metadata(c.dir().join(log)).unwrap().mode() & 0o077, 0, "{log}");
    }
    // The cluster file and sockets stay reachable by the users it serves.
    assert_eq!(fs::metadata(c.dir().join("cluster.json")).unwrap().mode() & 0o004, 0o004);
    // A store left open by an older release is closed at the next start.
    c.ok(&["umount", mnt.to_str().unwrap()]);
    c.mounts.clear();
    c.ok(&["down"]);
    Command::new("chmod").args(["-R", "go+rX"]).arg(c.dir().join("server-1")).status().unwrap();
    c.ok(&["up"]);
    assert_eq!(open_to_others(&c), Vec::<String>::new());
    let log = fs::read_to_string(c.dir().join("server-1.log")).unwrap();
    assert!(log.contains("was open to other users (mode 0755)"), "{log}");
}

/// Defect 4: a create sent to a server that does not hold its name is
/// refused (it would make a second file of that name, or one shadowing a
/// directory, which no other request finds), by a user's key and by the
/// cluster key, in every mode.
#[test]
fn a_create_sent_to_the_wrong_server_is_refused() {
    for mode in ["shardfs", "indexfs", "giraffa"] {
        let c = Cluster::up(mode, &[]);
        c.public();
        let (root, mallory) = (c.cluster_key(), c.user_key(MALLORY));
        let rt = rt();
        rt.block_on(async {
            for i in 0..8 {
                let path = format!("/pub/f{i}");
                let create = Request::Create { at: path.as_str().into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
                let mut made = 0;
                for s in 0..4 {
                    for who in [&mallory, &root] {
                        match c.conn(s, who).await.call(&Creds::root(), &create, T).await {
                            Ok(_) => made += 1,
                            Err(Errno::ENXIO | Errno::EREMOTE | Errno::EREMCHG | Errno::EPERM | Errno::EINVAL | Errno::EEXIST | Errno::ENOENT) => {}
                            other => panic!("{mode}: {path} on server {s}: {other:?}"),
                        }
                    }
                }
                assert!(made <= 1, "{mode}: {path} made {made} times");
            }
        });
        let out = c.ok(&["fsck"]);
        assert!(out.contains(": clean"), "{mode}: {out}");
        let listed = c.ok(&["ls", "/pub"]);
        let mut names: Vec<&str> = listed.lines().collect();
        names.dedup();
        assert_eq!(names.len(), listed.lines().count(), "{mode}: a name listed twice: {listed}");
    }
}

/// Defect 5: block and character devices need root, made directly or through
/// a server acting for the user.
#[test]
fn device_nodes_need_root() {
    let c = Cluster::up("shardfs", &[]);
    c.public();
    let mallory = c.user_key(MALLORY);
    let rt = rt();
    rt.block_on(async {
        for (i, kind) in [FileKind::CharDev, FileKind::BlockDev].into_iter().enumerate() {
            let path = format!("/pub/dev{i}");
            let direct = Request::Create { at: path.as_str().into(), mode: 0o666, kind: NewKind::Special { kind, rdev: 0x0801 }, if_exists: IfExists::Fail };
            assert_eq!(c.conn(c.primary(&path), &mallory).await.call(&Creds::root(), &direct, T).await, Err(Errno::EPERM), "{kind:?}");
            let delegated = Request::Delegate { call: NsCall::Mknod { path: path.clone(), mode: 0o666, kind, rdev: 0x0801 } };
            assert_eq!(c.conn(0, &mallory).await.call(&Creds::root(), &delegated, T).await, Err(Errno::EPERM), "{kind:?}");
        }
        let fifo = Request::Delegate { call: NsCall::Mknod { path: "/pub/fifo".into(), mode: 0o644, kind: FileKind::Fifo, rdev: 0 } };
        assert!(matches!(c.conn(0, &mallory).await.call(&Creds::root(), &fifo, T).await, Ok(Reply::Attr(_))), "a FIFO anyone may make");
    });
    assert_eq!(c.ok(&["ls", "/pub"]), "fifo\n");
}

/// Resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    kb.trim().trim_end_matches(" kB").trim().parse::<u64>().unwrap() * 1024
}

/// A user's connection to server `i`, past the handshake, on which the test
/// writes raw frames and reads nothing.
async fn raw_conn(c: &Cluster, i: usize, me: &ClientAuth) -> tokio::net::UnixStream {
    let addr = &c.file().servers[i];
    let path = canopy_rpc::socket::unix_path(addr).expect("canopy up listens on Unix sockets");
    let mut s = tokio::net::UnixStream::connect(path).await.unwrap();
    canopy_rpc::handshake::connect(&mut s, me, addr).await.unwrap();
    s
}

/// `n` reads of `len` bytes of `path`, pipelined in one write.
fn reads(path: &str, n: u64, len: u32) -> BytesMut {
    let mut out = BytesMut::new();
    for id in 1..=n {
        let req = Request::ReadData { at: FileRef::Path(path.into()), offset: id * len as u64, len };
        frame::encode_request(&mut out, id, &Creds::root(), &req).unwrap();
    }
    out
}

/// Mallory's sparse inline file of 1 GiB on server `i` (a truncate stores nothing).
fn sparse_file(c: &Cluster, rt: &tokio::runtime::Runtime, mallory: &ClientAuth, i: usize) -> String {
    c.public();
    let path = name_on("/pub", i);
    rt.block_on(async {
        let conn = c.conn(i, mallory).await;
        let create = Request::Create { at: path.as_str().into(), mode: 0o644, kind: NewKind::File, if_exists: IfExists::Fail };
        conn.call(&Creds::root(), &create, T).await.unwrap();
        conn.call(&Creds::root(), &Request::SetAttr { at: path.as_str().into(), set: SetAttr::size(1 << 30) }, T).await.unwrap();
    });
    path
}

/// Defect 6: 256 pipelined 1 MiB reads on each of 4 connections that do not
/// read their replies hold a server to little memory, which it gives back
/// once they close.
#[test]
fn pipelined_large_reads_pin_no_memory() {
    let c = Cluster::up("shardfs", &[]);
    let rt = rt();
    let mallory = c.user_key(MALLORY);
    let path = sparse_file(&c, &rt, &mallory, 0);
    let pid = c.pid("server-0");
    let idle = rss(pid);
    let held = rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..4 {
            let mut s = raw_conn(&c, 0, &mallory).await;
            s.write_all(&reads(&path, 256, 1 << 20)).await.unwrap();
            conns.push(s);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let peak = rss(pid);
        drop(conns);
        peak
    });
    eprintln!("server-0: idle {} MiB, with the reads outstanding {} MiB", idle >> 20, held >> 20);
    assert!(held < idle + (100 << 20), "grew {} MiB", (held - idle) >> 20);
    let start = Instant::now();
    while rss(pid) > idle + (20 << 20) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(rss(pid) <= idle + (20 << 20), "kept {} MiB after the connections closed", (rss(pid).saturating_sub(idle)) >> 20);
    assert!(c.ok(&["ls", "/pub"]).contains("n"));
}

/// Defect 7: 300 connections whose peers send and never read, against a
/// server with 256 descriptors: it closes them (the stalled first), and a
/// user's `canopy ls /` keeps working.
#[test]
fn connections_that_never_read_are_closed_first() {
    let c = Cluster::up_with("shardfs", &[], |cmd| {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit in the child before exec; the daemons inherit it.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: 256, rlim_max: 256 };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let rt = rt();
    let mallory = c.user_key(MALLORY);
    let paths: Vec<String> = (0..4).map(|i| sparse_file(&c, &rt, &mallory, i)).collect();
    rt.block_on(async {
        let mut flood = Vec::new();
        for n in 0..300 {
            let i = n % 4;
            let mut s = raw_conn(&c, i, &mallory).await;
            // 8 MiB of replies: more than the socket takes, never read.
            let _ = s.write_all(&reads(&paths[i], 64, 128 << 10)).await;
            flood.push(s);
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for round in 0..3 {
            let out = c.as_user(MALLORY, &["ls", "/"]);
            assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        drop(flood);
    });
}

/// Defect 8: a hard link to another user's file needs its owner, or read and
/// write permission on it (Linux's protected_hardlinks), through the CLI as
/// through a mount.
#[test]
fn a_hard_link_to_another_users_private_file_is_refused() {
    let c = Cluster::up("shardfs", &[]);
    c.ok(&["mkdir", "/pub"]);
    c.ok(&["chmod", "1777", "/pub"]);
    c.user_key(ALICE);
    c.user_key(MALLORY);
    assert!(c.as_user(ALICE, &["touch", "/pub/alice"]).status.success());
    assert!(c.as_user(ALICE, &["chmod", "600", "/pub/alice"]).status.success());
    let out = c.as_user(MALLORY, &["ln", "/pub/alice", "/pub/mine"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(c.as_user(ALICE, &["ln", "/pub/alice", "/pub/alice2"]).status.success(), "the owner may");
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

/// Defect 9: each `batch exec` opens the batch's private namespace anew; a
/// directory made in a later one gets an id of its own, and both land.
#[test]
fn directories_made_by_separate_batch_execs_land() {
    let c = Cluster::up("shardfs", &[]);
    c.ok(&["mkdir", "/jobs"]);
    let id = c.ok(&["batch", "begin", "/jobs/run"]);
    let id = id.trim();
    for d in ["a", "b", "c"] {
        c.ok(&["batch", "exec", id, "--", "mkdir", &format!("/jobs/run/{d}")]);
    }
    let out = common::canopy(&c.dir(), &["batch", "exec", id, "--", "touch", "/jobs/elsewhere"]);
    assert!(!out.status.success(), "outside the batch's root");
    c.ok(&["batch", "commit", id]);
    assert_eq!(c.ok(&["ls", "/jobs/run"]), "a\nb\nc\n");
    assert_eq!(c.ok(&["ls", "/jobs"]), "run\n");
}

/// Defect 10: a chown of a FIFO by its owner clears setuid and setgid, as
/// Linux does for every non-directory.
#[test]
fn a_chown_clears_setuid_of_special_files() {
    let c = Cluster::up("shardfs", &[]);
    c.public();
    let mallory = c.user_key(MALLORY);
    let rt = rt();
    rt.block_on(async {
        let path = "/pub/fifo";
        let conn = c.conn(c.primary(path), &mallory).await;
        let mknod = Request::Create { at: path.into(), mode: 0o644, kind: NewKind::Special { kind: FileKind::Fifo, rdev: 0 }, if_exists: IfExists::Fail };
        conn.call(&Creds::root(), &mknod, T).await.unwrap();
        conn.call(&Creds::root(), &Request::SetAttr { at: path.into(), set: SetAttr::mode(0o6555) }, T).await.unwrap();
        let chgrp = Request::SetAttr { at: path.into(), set: SetAttr::owner(None, Some(MALLORY)) };
        let Ok(Reply::Attr(a)) = conn.call(&Creds::root(), &chgrp, T).await else { panic!("chgrp") };
        assert_eq!(a.mode, 0o555);
    });
}

/// Defect 11: a write by another user to a setuid file clears the bit at the
/// servers, and a stat through the mount shows it gone at once, not after
/// the attribute timeout.
#[test]
fn cleared_setuid_shows_through_the_mount_at_once() {
    let mut c = Cluster::up("shardfs", &[]);
    let mnt = c.mount(&["--attr-timeout", "30"]);
    let dir = mnt.join("t");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let f = dir.join("f");
    fs::write(&f, b"hi").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4777)).unwrap();
    let stat = Command::new("stat").args(["-c", "%a"]).arg(&f).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&stat.stdout).trim(), "4777");
    // Another user's shell appends to it.
    let write = format!("echo there >> {}", f.display());
    let status = Command::new("setpriv").args(["--reuid", &MALLORY.to_string(), "--regid", &MALLORY.to_string(), "--clear-groups", "sh", "-c", &write]).status().unwrap();
    assert!(status.success());
    // stat(1), as a user would: Rust's metadata asks for the birth time,
    // which the kernel never caches for FUSE, so it always asks the mount.
    let stat = Command::new("stat").args(["-c", "%a"]).arg(&f).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&stat.stdout).trim(), "777");
}

/// Defect 12: a mount idle past its servers' idle limit (which closes its
/// connections) works at once: it retires connections before they are
/// closed under it, and sends again what never left.
#[test]
fn an_idle_mount_works_past_the_servers_idle_limit() {
    for mode in ["shardfs", "indexfs"] {
        let mut c = Cluster::up(mode, &["--idle-secs", "2"]);
        let mnt = c.mount(&[]);
        fs::create_dir(mnt.join("a")).unwrap();
        std::thread::sleep(Duration::from_secs(5));
        fs::create_dir(mnt.join("b")).unwrap();
        // Names on every server: each reaches a connection left idle.
        for i in 0..16 {
            let missing = fs::metadata(mnt.join(format!("missing{i}")));
            assert_eq!(missing.map(|_| ()).map_err(|e| e.raw_os_error()), Err(Some(libc::ENOENT)), "{mode}: missing{i}");
        }
        for i in 0..16 {
            fs::write(mnt.join(format!("b/f{i}")), b"x").unwrap();
        }
        let mut names: Vec<String> = fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["a", "b"], "{mode}");
    }
}

/// Replica groups' own requests: a user key may ask a member how its group
/// stands, and nothing else of them; a mutation wrapped to be applied once
/// is checked as if sent bare; whatever is malformed is refused by name, and
/// the member serves on.
#[test]
fn replica_requests_are_the_cluster_keys_and_malformed_ones_are_refused() {
    let c = Cluster::up("shardfs", &[]);
    let (root, mallory) = (c.cluster_key(), c.user_key(MALLORY));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let session = (now << 32) | 1;
    let once = |inner: &Request| Request::Once { session, seq: 0, done_below: 0, inner: postcard::to_allocvec(inner).unwrap() };
    let add = |id: u64, addr: String| Request::GroupChange { change: canopy_proto::msg::GroupChange::Add { id, addr } };
    rt().block_on(async {
        let m = c.conn(0, &mallory).await;
        let as_mallory = Creds { uid: MALLORY, gid: MALLORY, groups: vec![] };
        assert_eq!(m.call(&as_mallory, &Request::Peer { call: vec![1, 2, 3] }, T).await, Err(Errno::EPERM));
        assert_eq!(m.call(&as_mallory, &add(2, "127.0.0.1:1".into()), T).await, Err(Errno::EPERM));
        assert_eq!(m.call(&as_mallory, &once(&Request::Revoke { txn: 7 }), T).await, Err(Errno::EPERM));
        assert!(matches!(m.call(&as_mallory, &Request::GroupStatus, T).await, Ok(Reply::Group(_))));

        let r = c.conn(0, &root).await;
        let admin = Creds::root();
        assert_eq!(r.call(&admin, &Request::Peer { call: vec![0xff; 64] }, T).await, Err(Errno::EPROTO));
        assert_eq!(r.call(&admin, &once(&once(&Request::Ping)), T).await, Err(Errno::EPROTO), "a Once inside a Once");
        let garbage = Request::Once { session, seq: 1, done_below: 0, inner: vec![0xff; 1 << 16] };
        assert_eq!(r.call(&admin, &garbage, T).await, Err(Errno::EPROTO));
        assert_eq!(r.call(&admin, &add(0, "127.0.0.1:1".into()), T).await, Err(Errno::EINVAL), "member id 0");
        assert_eq!(r.call(&admin, &add(2, "x".repeat(10_000)), T).await, Err(Errno::EINVAL), "an absurd address");
        let last = Request::GroupChange { change: canopy_proto::msg::GroupChange::Remove { id: 1 } };
        assert_eq!(r.call(&admin, &last, T).await, Err(Errno::EINVAL), "the last voter");
        assert!(matches!(r.call(&admin, &Request::Stat { at: "/".into() }, T).await, Ok(Reply::Attr(_))));
    });
}
