//! `canopy batch` as a user runs it, against real daemons: a batch begun,
//! worked in and committed (empty, and from a snapshot); its commit killed (-9) and run again; a server
//! killed during a commit and the commit run again. Nothing lost, nothing
//! twice, fsck clean.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

struct Cluster {
    home: tempfile::TempDir,
}

impl Cluster {
    fn up() -> Cluster {
        let c = Cluster { home: tempfile::tempdir().unwrap() };
        c.ok(&["up", "--servers", "2"]);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        common::canopy_ok(self.home.path(), args)
    }

    fn spawn(&self, args: &[&str]) -> Child {
        common::command(self.home.path()).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
    }

    fn dir(&self) -> &Path {
        self.home.path()
    }

    /// A batch at `root` holding directory `out` with `n` files.
    fn batch_of(&self, root: &str, n: usize) -> String {
        let id = self.ok(&["batch", "begin", root]).trim().to_string();
        self.ok(&["batch", "exec", &id, "--", "mkdir", &format!("{root}/out")]);
        let paths: Vec<String> = (0..n).map(|i| format!("{root}/out/f{i}")).collect();
        let mut args = vec!["batch", "exec", &id, "--", "touch"];
        args.extend(paths.iter().map(String::as_str));
        self.ok(&args);
        id
    }

    /// Commits `id` again if an earlier try left it, then checks every file
    /// is there once and fsck is clean.
    fn finish(&self, id: &str, root: &str, n: usize) {
        if self.dir().join("batches").join(id).exists() {
            self.ok(&["batch", "commit", id]);
        }
        let listed = self.ok(&["ls", &format!("{root}/out")]);
        assert_eq!(listed.lines().count(), n, "every file once");
        assert!(self.ok(&["fsck"]).contains(": clean"));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = common::canopy(self.home.path(), &["down"]);
    }
}

fn kill9(pid: i32) {
    // SAFETY: killing a process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[test]
fn a_batch_is_private_until_committed() {
    let c = Cluster::up();
    let id = c.batch_of("/job", 3);
    assert_eq!(c.ok(&["ls", "/job"]), "", "nothing reached the cluster");
    assert!(c.ok(&["batch", "exec", &id, "--", "ls", "/job/out"]).contains("f2"));
    assert!(c.ok(&["batch", "status"]).contains(&id));
    let out = c.ok(&["batch", "commit", &id]);
    assert!(out.contains("3 files made"), "{out}");
    assert_eq!(c.ok(&["ls", "/job/out"]).lines().collect::<Vec<_>>(), vec!["f0", "f1", "f2"]);
    assert!(!c.ok(&["batch", "status"]).contains(&id), "a committed batch is gone");
    c.finish(&id, "/job", 3);
}

#[test]
fn a_batch_from_a_snapshot_sees_the_subtree_and_commits_its_changes_to_it() {
    let c = Cluster::up();
    c.ok(&["mkdir", "/job"]);
    c.ok(&["touch", "/job/a", "/job/b"]);
    let id = c.ok(&["batch", "begin", "/job", "--snapshot"]).trim().to_string();
    assert_eq!(c.ok(&["batch", "exec", &id, "--", "ls", "/job"]), "a\nb\n");
    c.ok(&["batch", "exec", &id, "--", "mv", "/job/a", "/job/c"]);
    c.ok(&["batch", "exec", &id, "--", "rm", "/job/b"]);
    c.ok(&["batch", "exec", &id, "--", "touch", "/job/d"]);
    assert_eq!(c.ok(&["ls", "/job"]), "a\nb\n", "nothing reached the cluster");
    let out = c.ok(&["batch", "commit", &id]);
    assert!(out.contains("1 files made") && out.contains("1 entries moved, 1 removed"), "{out}");
    assert_eq!(c.ok(&["ls", "/job"]), "c\nd\n");
    assert!(c.ok(&["fsck"]).contains(": clean"));
}

#[test]
fn a_commit_killed_then_run_again_lands_everything_once() {
    let c = Cluster::up();
    let n = 3000;
    let id = c.batch_of("/job", n);
    let mut commit = c.spawn(&["batch", "commit", &id]);
    std::thread::sleep(Duration::from_millis(150));
    kill9(commit.id() as i32);
    let _ = commit.wait();
    c.finish(&id, "/job", n);
}

#[test]
fn a_server_killed_during_a_commit_then_restarted_loses_nothing() {
    let c = Cluster::up();
    let n = 3000;
    let id = c.batch_of("/job", n);
    let pid: i32 = std::fs::read_to_string(c.dir().join("server-1.pid")).unwrap().trim().parse().unwrap();
    let mut commit = c.spawn(&["batch", "commit", &id]);
    std::thread::sleep(Duration::from_millis(150));
    kill9(pid);
    let _ = commit.wait();
    assert!(c.ok(&["up"]).contains("started"));
    c.finish(&id, "/job", n);
}
