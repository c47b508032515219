//! Replica groups as an operator runs them: `canopy up --replicas 3`, the
//! leader of every group and of the lock service killed with SIGKILL, and
//! the namespace still serving, with nothing acknowledged lost, in every
//! mode; two creates of one name racing at R = 3 get exactly one EEXIST; a
//! wiped member replaced with `canopy replica replace` while its group
//! serves.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

struct Cluster {
    home: tempfile::TempDir,
}

impl Cluster {
    fn up(mode: &str) -> Cluster {
        let c = Cluster { home: tempfile::tempdir().unwrap() };
        c.ok(&["up", "--servers", "2", "--replicas", "3", "--mode", mode]);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        common::canopy_ok(self.home.path(), args)
    }

    fn dir(&self) -> &Path {
        self.home.path()
    }

    /// The daemons `canopy status` marks as their group's leader.
    fn leaders(&self) -> Vec<String> {
        let listed = listed_members(&self.ok(&["status"]));
        listed.into_iter().filter(|(_, _, role)| role == "leader").map(|(group, id, _)| format!("{group}-{id}")).collect()
    }

    /// Member ids of `group` that `canopy status` lists, in its order (a
    /// status that finds a group without a leader still lists them).
    fn members(&self, group: &str) -> Vec<String> {
        let status = String::from_utf8(common::canopy(self.dir(), &["status"]).stdout).unwrap();
        listed_members(&status).into_iter().filter(|(g, _, _)| g == group).map(|(_, id, _)| id).collect()
    }

    fn kill(&self, name: &str) {
        let pid = std::fs::read_to_string(self.dir().join(format!("{name}.pid"))).unwrap();
        assert!(Command::new("kill").args(["-9", pid.trim()]).status().unwrap().success());
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = common::canopy(self.home.path(), &["down"]);
    }
}

/// Each member line of `canopy status` output: its group (`server-G`,
/// `lockd`), id and role (`leader`, `follower`, `DOWN`).
fn listed_members(status: &str) -> Vec<(String, String, String)> {
    let mut listed = Vec::new();
    let mut group = String::new();
    for line in status.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["server", i, ..] => group = format!("server-{i}"),
            ["lockd", ..] => group = "lockd".into(),
            ["member", id, rest @ ..] => listed.push((group.clone(), id.to_string(), rest.get(1).unwrap_or(&"").to_string())),
            _ => {}
        }
    }
    listed
}

fn files(c: &Cluster, dir: &str, from: u32, to: u32) {
    for i in from..to {
        c.ok(&["touch", &format!("{dir}/f{i}")]);
    }
}

fn killing_every_leader_loses_nothing(mode: &str) {
    let c = Cluster::up(mode);
    c.ok(&["mkdir", "/a", "/b"]);
    files(&c, "/a", 0, 10);
    let leaders = c.leaders();
    assert_eq!(leaders.len(), 3, "a leader per group: {leaders:?}");
    for l in &leaders {
        c.kill(l);
    }
    // Served again once new leaders are elected (the client waits for them).
    let t = Instant::now();
    files(&c, "/a", 10, 20);
    let failover = t.elapsed();
    c.ok(&["mkdir", "/c"]);
    c.ok(&["mv", "/b", "/c/b"]);
    files(&c, "/c/b", 0, 5);
    let listed = c.ok(&["ls", "/a"]);
    for i in 0..20 {
        assert!(listed.lines().any(|l| l == format!("f{i}")), "{mode}: /a/f{i} lost after the leaders died: {listed}");
    }
    assert_eq!(c.ok(&["ls", "/c/b"]).lines().count(), 5);
    assert!(c.ok(&["fsck"]).contains(": clean"), "{mode}");
    assert!(failover < Duration::from_secs(10), "{mode}: the groups took {failover:?} to serve again");
    // The killed members come back and catch up.
    c.ok(&["up"]);
    let status = c.ok(&["status"]);
    assert!(!status.contains("DOWN"), "{mode}: {status}");
}

#[test]
fn killing_every_leader_loses_nothing_on_shardfs() {
    killing_every_leader_loses_nothing("shardfs");
}

#[test]
fn killing_every_leader_loses_nothing_on_indexfs() {
    killing_every_leader_loses_nothing("indexfs");
}

#[test]
fn killing_every_leader_loses_nothing_on_giraffa() {
    killing_every_leader_loses_nothing("giraffa");
}

#[test]
fn two_creates_of_one_name_at_three_replicas_get_one_eexist() {
    let c = Cluster::up("shardfs");
    c.ok(&["mkdir", "/d"]);
    for i in 0..8 {
        let target = format!("/d/l{i}");
        let racers: Vec<_> = (0..2).map(|_| common::command(c.dir()).args(["ln", "-s", "/x", &target]).spawn().unwrap()).collect();
        let won = racers.into_iter().map(|r| r.wait_with_output().unwrap().status.success()).filter(|ok| *ok).count();
        assert_eq!(won, 1, "{target}: {won} of two creates succeeded");
    }
}

/// A member whose disk is wiped is replaced by a new, empty one while the
/// group serves; the new member holds everything: the group is shrunk to
/// it alone, which then answers for the whole namespace.
#[test]
fn a_wiped_member_is_replaced_while_its_group_serves() {
    let c = Cluster::up("shardfs");
    c.ok(&["mkdir", "/a"]);
    files(&c, "/a", 0, 20);
    let leader = c.leaders().into_iter().find(|l| l.starts_with("server-0-")).unwrap();
    let original = c.members("server-0");
    let wiped = original.iter().find(|m| format!("server-0-{m}") != leader).unwrap().clone();
    c.kill(&format!("server-0-{wiped}"));
    std::fs::remove_dir_all(c.dir().join(format!("server-0-{wiped}"))).unwrap();
    files(&c, "/a", 20, 30);
    // Started again as it is, empty, it refuses: it could help elect a
    // leader that lacks acknowledged writes.
    let _ = common::canopy(c.dir(), &["up"]);
    let log = c.dir().join(format!("server-0-{wiped}.log"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("holds no Raft state") {
        assert!(Instant::now() < deadline, "a wiped member started empty: {}", std::fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(50));
    }
    let said = c.ok(&["replica", "replace", "--group", "server-0", "--member", &wiped]);
    assert!(said.contains("replaced by member 4"), "{said}");
    assert_eq!(c.members("server-0"), original.iter().filter(|m| **m != wiped).cloned().chain(["4".to_string()]).collect::<Vec<_>>());
    files(&c, "/a", 30, 40);
    for m in original.iter().filter(|m| **m != wiped) {
        c.ok(&["replica", "remove", "--group", "server-0", "--member", m]);
    }
    assert_eq!(c.members("server-0"), ["4"]);
    assert_eq!(c.ok(&["ls", "/a"]).lines().count(), 40);
    assert!(c.ok(&["fsck"]).contains(": clean"));
    // A group keeps one member, and a group name must name a group.
    let last = common::canopy(c.dir(), &["replica", "remove", "--group", "server-0", "--member", "4"]);
    assert!(!last.status.success() && String::from_utf8_lossy(&last.stderr).contains("one member at least"));
    let bad = common::canopy(c.dir(), &["replica", "add", "--group", "server-9"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("not 9"), "{bad:?}");
}
