//! The CLI as a user runs it, against real daemons: `canopy up` with several
//! servers over Unix sockets (and loopback TCP) and RocksDB, coreutils-like results and exit codes, a clean
//! fsck, the namespace intact after `down` and `up`, and an acknowledged create
//! surviving SIGKILL of its server.

mod common;

use canopy_proto::path::NsPath;
use canopy_proto::placement;
use std::path::Path;
use std::process::Output;

struct Cluster {
    home: tempfile::TempDir,
}

impl Cluster {
    fn canopy(&self, args: &[&str]) -> Output {
        common::canopy(self.home.path(), args)
    }

    /// Runs and expects success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        common::canopy_ok(self.home.path(), args)
    }

    /// Runs and expects failure with exactly this stderr line.
    fn fails(&self, args: &[&str], stderr: &str) {
        let out = self.canopy(args);
        assert!(!out.status.success(), "canopy {args:?} should fail");
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end(), stderr, "canopy {args:?}");
    }

    fn dir(&self) -> &Path {
        self.home.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.canopy(&["down"]);
    }
}

fn up(servers: u32) -> Cluster {
    up_mode(servers, "shardfs")
}

fn up_mode(servers: u32, mode: &str) -> Cluster {
    up_with(&["--servers", &servers.to_string(), "--mode", mode])
}

fn up_with(args: &[&str]) -> Cluster {
    let c = Cluster { home: tempfile::tempdir().unwrap() };
    c.ok(&[&["up"], args].concat());
    c
}

/// The daemons' addresses in the cluster file.
fn addresses(c: &Cluster) -> Vec<String> {
    let file = canopy_client::cluster::ClusterFile::load(&c.dir().join("cluster.json")).unwrap();
    file.servers.iter().chain([&file.lockd]).cloned().collect()
}

#[test]
fn scripted_session_fsck_and_restart() {
    scripted_session("shardfs");
}

#[test]
fn scripted_session_fsck_and_restart_on_indexfs() {
    scripted_session("indexfs");
}

#[test]
fn scripted_session_fsck_and_restart_on_giraffa() {
    scripted_session("giraffa");
}

/// `canopy up` puts its daemons on Unix sockets in the cluster directory;
/// `--tcp` on loopback ports. The session goes the same either way.
#[test]
fn scripted_session_over_loopback_tcp() {
    let c = up_with(&["--servers", "4", "--tcp"]);
    assert!(addresses(&c).iter().all(|a| a.starts_with("127.0.0.1:")), "{:?}", addresses(&c));
    session(&c);
}

fn scripted_session(mode: &str) {
    let c = up_mode(4, mode);
    let sockets = addresses(&c);
    assert!(sockets.iter().all(|a| a.starts_with("unix:") && a.ends_with(".sock")), "{sockets:?}");
    session(&c);
}

fn session(c: &Cluster) {
    c.ok(&["mkdir", "-p", "/proj/src/deep"]);
    c.ok(&["touch", "/proj/README", "/proj/src/main.rs", "/proj/src/lib.rs"]);
    c.ok(&["ln", "-s", "/proj/README", "/proj/LINK"]);
    c.ok(&["ln", "/proj/src/lib.rs", "/proj/lib-hard.rs"]);
    c.ok(&["chmod", "700", "/proj/src"]);
    c.ok(&["mv", "/proj/src", "/proj/code"]);
    c.fails(&["mkdir", "/proj"], "canopy: cannot create directory '/proj': File exists");
    c.fails(&["rmdir", "/proj"], "canopy: failed to remove '/proj': Directory not empty");
    c.fails(&["rm", "/proj"], "canopy: cannot remove '/proj': Is a directory");
    c.fails(&["stat", "/nope"], "canopy: cannot stat '/nope': No such file or directory");
    c.fails(&["ls", "/proj/README/x"], "canopy: cannot access '/proj/README/x': Not a directory");
    c.fails(&["--uid", "1000", "--gid", "1000", "touch", "/proj/code/x"], "canopy: cannot touch '/proj/code/x': Permission denied");
    assert_eq!(c.ok(&["ls", "/proj"]), "LINK\nREADME\ncode\nlib-hard.rs\n");
    assert_eq!(c.ok(&["ls", "/proj/code"]), "deep\nlib.rs\nmain.rs\n");
    assert!(c.ok(&["stat", "/proj/lib-hard.rs"]).contains("Links: 2"));
    assert!(c.ok(&["ls", "-l", "/proj"]).contains("LINK -> /proj/README"));
    let tree = c.ok(&["tree", "/"]);
    assert!(tree.ends_with("3 directories, 5 files\n"), "{tree}");
    assert!(c.ok(&["fsck"]).contains(": clean"));
    let status = c.ok(&["status"]);
    assert_eq!(status.lines().filter(|l| l.split_whitespace().any(|w| w == "up")).count(), 5, "{status}");
    assert_eq!(status.lines().filter(|l| l.contains("entry_cache_hits")).count(), 4, "each server reports its entry cache: {status}");

    c.ok(&["down"]);
    c.fails(&["ls", "/"], "canopy: cannot access '/': Connection refused");
    c.ok(&["up"]);
    assert_eq!(c.ok(&["tree", "/"]), tree, "the namespace survives down and up");
    c.ok(&["rm", "-r", "/proj"]);
    assert_eq!(c.ok(&["ls", "/"]), "");
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

/// True while some thread of `pid` is not yet a zombie (a killed process
/// nobody has reaped stays a zombie, which signal 0 still reaches).
fn threads_left(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// SIGKILLs server `i` of `c` and waits until it is gone.
fn kill_server(c: &Cluster, i: u32) {
    let pid: i32 = std::fs::read_to_string(c.dir().join(format!("server-{i}.pid"))).unwrap().trim().parse().unwrap();
    // SAFETY: killing the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while threads_left(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn acknowledged_create_survives_sigkill() {
    let c = up(2);
    c.ok(&["mkdir", "/d"]);
    let path = "/d/precious";
    c.ok(&["touch", path]);
    kill_server(&c, placement::primary(&NsPath::parse(path).unwrap(), 2));
    assert!(!c.canopy(&["stat", path]).status.success(), "its server is dead");
    let out = c.ok(&["up"]);
    assert!(out.contains("(1 started)"), "{out}");
    assert!(c.ok(&["stat", path]).contains("regular file"));
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

/// The transactions the lock service lists as open.
async fn open_txns(lockd: &canopy_rpc::conn::Connection) -> Vec<u64> {
    let t = std::time::Duration::from_secs(5);
    match lockd.call(&canopy_proto::Creds::root(), &canopy_proto::Request::ListTxns, t).await {
        Ok(canopy_proto::Reply::Txns(txns)) => txns.into_iter().map(|i| i.txn).collect(),
        other => panic!("no list: {other:?}"),
    }
}

/// An unlock the lock service acknowledged is in its log: killed (`kill -9`)
/// and restarted, it lists the transaction no more. The unlock's record is
/// written inside a read pass, whose log reaches the OS only at its end.
#[test]
fn an_acknowledged_unlock_survives_sigkill_of_the_lock_service() {
    use canopy_proto::msg::{Intent, LockMode};
    use canopy_proto::{Creds, Reply, Request};
    use canopy_rpc::conn::Connection;
    let c = up(2);
    let cluster = canopy_client::cluster::ClusterFile::load(&c.dir().join("cluster.json")).unwrap();
    let me = canopy_client::keyfile::load(&canopy_client::keyfile::cluster_key_path(&cluster.path)).unwrap().client_auth();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let t = std::time::Duration::from_secs(5);
    let (ended, open) = rt.block_on(async {
        let lockd = Connection::connect(&cluster.lockd, &me, t).await.unwrap();
        let lock = |path: &str| Request::Lock { locks: vec![(path.into(), LockMode::Write)], intent: Intent::Mkdir { path: path.into() }, lease_ms: 60_000, wait_ms: 0 };
        let Ok(Reply::Locked { txn: ended, ticket, .. }) = lockd.call(&Creds::root(), &lock("/x"), t).await else { panic!("no lock") };
        let Ok(Reply::Locked { txn: open, .. }) = lockd.call(&Creds::root(), &lock("/y"), t).await else { panic!("no lock") };
        assert_eq!(lockd.call(&Creds::root(), &Request::Unlock { txn: ended, ticket }, t).await, Ok(Reply::Unit));
        assert_eq!(open_txns(&lockd).await, vec![open]);
        (ended, open)
    });
    let pid: i32 = std::fs::read_to_string(c.dir().join("lockd.pid")).unwrap().trim().parse().unwrap();
    // SAFETY: killing the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while threads_left(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(c.ok(&["up"]).contains("(1 started)"));
    rt.block_on(async {
        let lockd = Connection::connect(&cluster.lockd, &me, t).await.unwrap();
        assert_eq!(open_txns(&lockd).await, vec![open], "{ended} was unlocked before the kill, {open} was not");
    });
}

/// A ShardFS server restarted while a directory transaction is open fences
/// what that transaction write-locks before it serves. Here a coordinator
/// took the lock for `mkdir /a/x`, applied it on one replica (fenced) and
/// died before its commit point heard of it; the replica is then killed and
/// restarted. A file made below `/a/x` there must wait for recovery, which
/// rolls the directory back (its primary never had it): a restart that did
/// not learn the open transactions would let the file land in a directory
/// that then vanishes.
#[test]
fn a_restarted_server_fences_what_open_transactions_lock() {
    use canopy_proto::msg::{dir_id_of_txn, Intent, LockMode};
    use canopy_proto::{Creds, Reply, Request};
    use canopy_rpc::conn::Connection;
    let c = up(4);
    c.ok(&["mkdir", "/a"]);
    let primary = |p: &str| placement::primary(&NsPath::parse(p).unwrap(), 4);
    let replica = (0..4).find(|i| *i != primary("/a/x")).unwrap();
    let file = (0..).map(|i| format!("/a/x/f{i}")).find(|f| primary(f) == replica).unwrap();
    let cluster = canopy_client::cluster::ClusterFile::load(&c.dir().join("cluster.json")).unwrap();
    let me = canopy_client::keyfile::load(&canopy_client::keyfile::cluster_key_path(&cluster.path)).unwrap().client_auth();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let t = std::time::Duration::from_secs(5);
    // Long enough that the sweep cannot recover it before the restarted
    // replica is asked below.
    let lease_ms = 8000;
    rt.block_on(async {
        let lockd = Connection::connect(&cluster.lockd, &me, t).await.unwrap();
        let lock = Request::Lock { locks: vec![("/a/x".into(), LockMode::Write)], intent: Intent::Mkdir { path: "/a/x".into() }, lease_ms, wait_ms: 0 };
        let Ok(Reply::Locked { txn, .. }) = lockd.call(&Creds::root(), &lock, t).await else { panic!("no lock") };
        let server = Connection::connect(&cluster.servers[replica as usize], &me, t).await.unwrap();
        let mkdir = Request::Mkdir { path: "/a/x".into(), mode: 0o755, id: dir_id_of_txn(txn).unwrap(), fence: Some(txn) };
        let made = server.call(&Creds::root(), &mkdir, t).await;
        assert!(matches!(made, Ok(Reply::Dir(_))), "a replica answers its lookup state: {made:?}");
    });
    let started = std::time::Instant::now();
    kill_server(&c, replica);
    assert!(c.ok(&["up"]).contains("(1 started)"));
    rt.block_on(async {
        let server = Connection::connect(&cluster.servers[replica as usize], &me, t).await.unwrap();
        let below = server.call(&Creds::root(), &Request::Stat { at: file.as_str().into() }, t).await;
        assert!(started.elapsed() < std::time::Duration::from_millis(lease_ms as u64), "too slow to see the fence");
        assert_eq!(below, Err(canopy_proto::Errno::EAGAIN), "the restarted replica fences /a/x");
    });
    c.fails(&["touch", &file], &format!("canopy: cannot touch '{file}': No such file or directory"));
    c.fails(&["stat", "/a/x"], "canopy: cannot stat '/a/x': No such file or directory");
    assert_eq!(c.ok(&["ls", "/a"]), "");
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

/// A Giraffa server restarted on its own serves creates and mkdirs as
/// before: directory proofs cross servers (the directory's row on one, its
/// entries on another), so their expiry must be on a clock the servers share,
/// not on the monotonic clock each process starts afresh. On that clock,
/// once the others have run for more than a proof's life, every proof between
/// the restarted server and another is stale (ESTALE) for good. 32
/// directories put entries on every server but with odds of 0.75^32.
#[test]
fn a_giraffa_server_restarted_alone_still_takes_proofs() {
    use canopy_proto::giraffa::PROOF_LIFE_MS;
    let c = up_mode(4, "giraffa");
    let dirs: Vec<String> = (0..32).map(|i| format!("/d{i}")).collect();
    let args = |verb: &str, leaf: &str| -> Vec<String> { std::iter::once(verb.to_string()).chain(dirs.iter().map(|d| format!("{d}{leaf}"))).collect() };
    let run = |v: Vec<String>| c.ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    run(args("mkdir", ""));
    // The others' clocks must be more than a proof's life ahead of the
    // restarted server's for proofs on a per-process clock to go stale.
    std::thread::sleep(std::time::Duration::from_millis(3 * PROOF_LIFE_MS));
    kill_server(&c, 0);
    assert!(c.ok(&["up"]).contains("(1 started)"));
    run(args("touch", "/f"));
    run(args("mkdir", "/sub"));
    for d in &dirs {
        assert_eq!(c.ok(&["ls", d]), "f\nsub\n", "{d}");
    }
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

/// An ordinary user with a user key: acts as that key's identity over TCP, with
/// no way to claim another or to reach what needs the cluster key; without a key
/// the user is told how to get one.
#[test]
fn an_ordinary_user_acts_through_their_key_only() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    const U: u32 = 4242;
    let c = up(3);
    // The user must reach the cluster file, but not the cluster key.
    std::fs::set_permissions(c.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    c.ok(&["mkdir", "/pub", "/priv"]);
    c.ok(&["chmod", "777", "/pub"]);
    c.ok(&["chmod", "700", "/priv"]);
    let as_user = |args: &[&str]| common::command(c.dir()).uid(U).gid(U).env("HOME", "/nonexistent").args(args).output().unwrap();
    let no_key = as_user(&["ls", "/"]);
    assert!(!no_key.status.success());
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("canopy key issue --uid 4242"), "{}", String::from_utf8_lossy(&no_key.stderr));
    let issued = c.ok(&["key", "issue", "--uid", &U.to_string(), "--gid", &U.to_string()]);
    assert!(issued.trim_end().ends_with("keys/4242.key"), "{issued}");
    let run = |args: &[&str]| {
        let out = as_user(args);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).trim_end().to_string())
    };
    assert!(run(&["mkdir", "/pub/mine"]).0);
    assert!(run(&["touch", "/pub/mine/f"]).0);
    assert!(run(&["mv", "/pub/mine", "/pub/ours"]).0, "a directory rename, delegated");
    let (_, listing, _) = run(&["ls", "-l", "/pub"]);
    let owners: Vec<&str> = listing.lines().next().unwrap_or_default().split_whitespace().skip(2).take(2).collect();
    assert_eq!(owners, ["4242", "4242"], "no name for 4242 here, so the number: {listing}");
    assert_eq!(run(&["touch", "/priv/x"]), (false, String::new(), "canopy: cannot touch '/priv/x': Permission denied".into()));
    let (ok, _, err) = run(&["--uid", "0", "ls", "/priv"]);
    assert!(!ok && err.contains("--uid/--gid need the cluster key"), "{err}");
    let (ok, _, err) = run(&["fsck"]);
    assert!(!ok && err.contains("fsck needs the cluster key"), "{err}");
    assert!(c.ok(&["fsck"]).contains("clean"));
}

#[test]
fn rm_refuses_the_root_and_dot_or_dot_dot_as_coreutils_does() {
    let c = up(2);
    c.ok(&["mkdir", "-p", "/h/sub"]);
    c.ok(&["touch", "/h/f"]);
    let override_it = "canopy: use --no-preserve-root to override this failsafe";
    for (root, what) in [("/", "'/'"), ("//", "'//' (same as '/')"), ("///", "'///' (same as '/')")] {
        let refusal = format!("canopy: it is dangerous to operate recursively on {what}\n{override_it}");
        c.fails(&["rm", "-r", root], &refusal);
        c.fails(&["rm", "-rf", "--preserve-root", root], &refusal);
    }
    // Checked on the argument as given: lexically, /h/sub/.. is /h.
    for dots in ["/h/sub/..", "/h/.", "/h/sub/../", "..", "/..", "/./", "."] {
        let refusal = format!("canopy: refusing to remove '.' or '..' directory: skipping '{dots}'");
        c.fails(&["rm", "-r", dots], &refusal);
        c.fails(&["rm", "-d", dots], &refusal);
    }
    c.fails(&["rm", "/h/sub/.."], "canopy: cannot remove '/h/sub/..': Is a directory");
    // The other arguments are still removed, and the exit status says one failed.
    c.fails(&["rm", "-r", "/h/.", "/h/sub"], "canopy: refusing to remove '.' or '..' directory: skipping '/h/.'");
    assert_eq!(c.ok(&["ls", "/h"]), "f\n", "only /h/sub went");
    c.fails(&["rm", "-r", "--no-preserve-root", "/"], "canopy: cannot remove '/': Device or resource busy");
    assert_eq!(c.ok(&["ls", "/"]), "", "everything below the root went");
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

/// A trailing slash says the name is a directory: touch(1) creates nothing then
/// (open(2) answers EISDIR) and reports what setting the times found.
#[test]
fn touch_with_a_trailing_slash_creates_nothing() {
    let c = up(2);
    c.ok(&["mkdir", "/h"]);
    c.ok(&["touch", "/h/f"]);
    c.fails(&["touch", "/h/trail/"], "canopy: setting times of '/h/trail/': No such file or directory");
    c.fails(&["touch", "/h/f/"], "canopy: setting times of '/h/f/': Not a directory");
    c.fails(&["touch", "/none/x/"], "canopy: cannot touch '/none/x/': No such file or directory");
    c.fails(&["touch", "/h/f/x/"], "canopy: cannot touch '/h/f/x/': Not a directory");
    assert_eq!(c.ok(&["ls", "/h"]), "f\n", "nothing was created");
    c.ok(&["touch", "/h/", "/", "//"]);
}

/// uid and gid 4294967295 are chown(2)'s "no change": like coreutils, the CLI
/// refuses them as invalid (and the servers would answer EINVAL).
#[test]
fn chown_refuses_the_no_change_ids() {
    let c = up(2);
    c.ok(&["touch", "/f"]);
    c.fails(&["chown", "4294967295", "/f"], "canopy: invalid user: '4294967295'");
    c.fails(&["chown", ":4294967295", "/f"], "canopy: invalid group: ':4294967295'");
    c.fails(&["chown", "0:4294967295", "/f"], "canopy: invalid group: '0:4294967295'");
    c.fails(&["chown", "nosuchuser:0", "/f"], "canopy: invalid user: 'nosuchuser:0'");
    assert!(c.ok(&["stat", "/f"]).contains("Uid: 0  Gid: 0"));
    c.ok(&["chown", "4294967294:4294967294", "/f"]);
    assert!(c.ok(&["stat", "/f"]).contains("Uid: 4294967294  Gid: 4294967294"));
}

/// The mode a cluster runs is chosen at `canopy up`; an unknown one, in the flag
/// or in a cluster file, is an error naming the known ones, and so is an
/// option the cluster's mode does not take.
#[test]
fn an_unknown_mode_is_named_with_the_known_ones() {
    let c = up(2);
    c.fails(&["up", "--mode", "nfs"], "canopy: unknown namespace mode \"nfs\": this build knows shardfs, indexfs, giraffa");
    c.fails(&["up", "--lease", "fixed:5"], "canopy: --lease and --split-threshold are IndexFS's options; a shardfs cluster takes neither");
    c.fails(&["up", "--mode", "shardfs", "--servers", "3"], &format!("canopy: the cluster in {} has 2 servers, not 3; `canopy down` and remove it to change", c.dir().display()));
    let file = c.dir().join("cluster.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"mode\": \"shardfs\""), "{text}");
    std::fs::write(&file, text.replace("\"shardfs\"", "\"batchfs\"")).unwrap();
    c.fails(&["ls", "/"], &format!("canopy: cluster file {}: unknown namespace mode \"batchfs\": this build knows shardfs, indexfs, giraffa", file.display()));
    std::fs::write(&file, text).unwrap();
}
