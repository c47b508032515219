//! The FUSE mount as users meet it: `canopy up` plus `canopy mount`, then shell
//! commands compared with the same commands on a local directory (the reference),
//! across an unmount and mount; two mounts of one cluster; open files outliving
//! their names; rename flags. Needs root and /dev/fuse, as CI has.

mod common;

use common::as_user;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Two unprivileged users, for permission tests (no account needed: the mount
/// takes uid and gid from the kernel).
const ALICE: u32 = 1000;
const BOB: u32 = 2000;

struct Mounted {
    home: tempfile::TempDir,
    mounts: Vec<PathBuf>,
}

impl Mounted {
    fn canopy(&self, args: &[&str]) -> Output {
        common::canopy(&self.home.path().join("cluster"), args)
    }

    fn ok(&self, args: &[&str]) -> String {
        common::canopy_ok(&self.home.path().join("cluster"), args)
    }

    /// Mounts at a new directory `name` with extra options.
    fn mount(&mut self, name: &str, extra: &[&str]) -> PathBuf {
        let mnt = self.home.path().join(name);
        fs::create_dir_all(&mnt).unwrap();
        let mut args = vec!["mount", mnt.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.ok(&args);
        self.mounts.push(mnt.clone());
        mnt
    }

    fn umount(&mut self, mnt: &Path) {
        self.ok(&["umount", mnt.to_str().unwrap()]);
        self.mounts.retain(|m| m != mnt);
    }

    fn data_dir(&self) -> PathBuf {
        self.home.path().join("cluster").join("data")
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        for m in self.mounts.clone() {
            let _ = self.canopy(&["umount", "--lazy", m.to_str().unwrap()]);
        }
        let _ = self.canopy(&["down"]);
    }
}

fn up() -> Mounted {
    up_mode("shardfs")
}

fn up_mode(mode: &str) -> Mounted {
    assert!(Path::new("/dev/fuse").exists(), "these tests need /dev/fuse");
    // SAFETY: geteuid only reads the process's credentials.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests mount without fusermount, as root");
    let m = Mounted { home: tempfile::tempdir().unwrap(), mounts: Vec::new() };
    m.ok(&["up", "--servers", "4", "--mode", mode]);
    m
}

/// A cluster whose mounts other users can reach (`--allow-other` on each mount).
fn up_shared() -> Mounted {
    let m = up();
    fs::set_permissions(m.home.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    m
}

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("bash").arg("-c").arg(format!("set -euo pipefail\n{script}")).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "in {}: {script}\n{}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `diff -r` of two trees, symlinks compared as links; returns its output.
fn diff(a: &Path, b: &Path) -> String {
    let out = Command::new("diff").args(["-r", "--no-dereference"]).arg(a).arg(b).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// The shell session of the acceptance list, run on the mount and on a local
/// reference directory; every step's output must agree.
const SESSION: &str = r#"
mkdir -p proj/a/b/c
cp -r "$SRC" proj/doc
mv proj/doc/"$(ls proj/doc | head -1)" proj/moved
mv proj/a/b proj/b2
echo hello > proj/b2/c/greeting
cat proj/b2/c/greeting
chmod 700 proj/b2
chmod 640 proj/b2/c/greeting
ln proj/b2/c/greeting proj/hard
ln -s b2/c/greeting proj/soft
cat proj/soft
stat -c '%h %a %s' proj/hard proj/b2/c/greeting
cat "$SRC/../random" > proj/big-random
cp proj/big-random proj/big-copy
cmp proj/big-random proj/big-copy
truncate -s 70000 proj/big-copy
stat -c '%s' proj/big-copy
rm -rf proj/doc/"$(ls proj/doc | tail -1)"
find proj | sort
find proj -type f -printf '%s %p\n' | sort
# Directory sizes are each file system's own (4096 on ext4, 0 here): du only
# has to walk the tree, and agree on files.
du -s proj > /dev/null
du -b --apparent-size proj/big-random proj/big-copy proj/b2/c/greeting
"#;

/// The errno of a failed I/O result, 0 for success.
fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().map_or(0, |e| e.raw_os_error().unwrap_or(-1))
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

#[test]
fn shell_session_matches_a_local_directory_across_remounts() {
    shell_session(up());
}

#[test]
fn shell_session_matches_a_local_directory_across_remounts_on_indexfs() {
    shell_session(up_mode("indexfs"));
}

fn shell_session(mut m: Mounted) {
    let mnt = m.mount("mnt", &[]);
    // A real tree to copy: part of /usr/share/doc (deterministic size and depth).
    let src = m.home.path().join("src");
    fs::create_dir_all(&src).unwrap();
    sh(&src, "for d in $(ls /usr/share/doc | head -40); do cp -r /usr/share/doc/$d . ; done");
    sh(m.home.path(), "head -c 300000 /dev/urandom > random");
    let reference = m.home.path().join("reference");
    fs::create_dir_all(&reference).unwrap();
    let script = format!("SRC={}\n{SESSION}", src.display());
    let expected = sh(&reference, &script).replace(reference.to_str().unwrap(), "@");
    let got = sh(&mnt, &script).replace(mnt.to_str().unwrap(), "@");
    assert_eq!(got, expected, "the session's output differs on the mount");
    assert_eq!(diff(&reference.join("proj"), &mnt.join("proj")), "", "the trees differ");
    assert!(fs::read_dir(m.data_dir()).unwrap().next().is_some(), "big files live in the data directory");

    m.umount(&mnt);
    assert!(!mnt.join("proj").exists(), "unmounted");
    let mnt = m.mount("mnt", &[]);
    assert_eq!(diff(&reference.join("proj"), &mnt.join("proj")), "", "the trees differ after mounting again");
    sh(&mnt, "rm -rf proj");
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), 0);
}

#[test]
fn two_mounts_see_each_others_changes_once_the_timeouts_pass() {
    let mut m = up();
    let timeout = ["--attr-timeout", "0.3", "--entry-timeout", "0.3"];
    let a = m.mount("a", &timeout);
    let b = m.mount("b", &timeout);
    fs::create_dir(a.join("shared")).unwrap();
    fs::write(a.join("shared/f"), b"one").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(fs::read(b.join("shared/f")).unwrap(), b"one");
    fs::write(b.join("shared/f"), b"two, longer").unwrap();
    fs::set_permissions(b.join("shared/f"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    fs::rename(b.join("shared/f"), b.join("shared/g")).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(!a.join("shared/f").exists());
    let meta = fs::metadata(a.join("shared/g")).unwrap();
    assert_eq!((meta.len(), meta.mode() & 0o777), (11, 0o600));
    assert_eq!(fs::read(a.join("shared/g")).unwrap(), b"two, longer");
}

/// The count ending the line that starts with `prefix` in the `--timings`
/// table at `table` (written every second), 0 before there is one.
fn timings_count(table: &Path, prefix: &str) -> u64 {
    let text = fs::read_to_string(table).unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with(prefix));
    line.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0)
}

/// A directory this mount just made answers LOOKUPs of new names in it
/// without a server (`fresh_dirs.rs`), but never hides a name made through
/// the mount, not even one the kernel has forgotten; a name another client
/// made there shows once the entry timeout has passed, or at once after a
/// listing showed it.
#[test]
fn a_directory_just_made_answers_new_names_without_hiding_ones_made_here() {
    let mut m = up();
    let table = m.home.path().join("timings.txt");
    let mnt = m.mount("mnt", &["--entry-timeout", "30", "--attr-timeout", "30", "--timings", table.to_str().unwrap()]);
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/made"), b"1").unwrap();
    fs::write(mnt.join("y"), b"2").unwrap();
    fs::hard_link(mnt.join("y"), mnt.join("d/linked")).unwrap();
    fs::create_dir(mnt.join("d/sub")).unwrap();
    std::os::unix::fs::symlink("made", mnt.join("d/sym")).unwrap();
    // The kernel drops the names it holds (unused dentries and inodes): each
    // is looked up again, and must be found.
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    for name in ["made", "linked", "sub", "sym"] {
        assert!(fs::symlink_metadata(mnt.join("d").join(name)).is_ok(), "{name} made here was hidden");
    }
    assert_eq!(fs::read(mnt.join("d/made")).unwrap(), b"1");
    assert_eq!(errno_of(fs::symlink_metadata(mnt.join("d/never"))), libc::ENOENT);
    // Answered here: at least the creating lookups of the names above.
    let answered = || timings_count(&table, "lookups answered absent");
    let mut n = 0;
    for _ in 0..40 {
        n = answered();
        if n >= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(n >= 4, "lookups answered absent here: {n}");

    // A file renamed into a fresh directory is a name made there; moving a
    // file leaves the directory fresh, moving the directory does not.
    // (The table is written every second.) A listing showing only names made
    // here keeps it fresh too.
    fs::rename(mnt.join("d/made"), mnt.join("d/renamed")).unwrap();
    assert_eq!(fs::read_dir(mnt.join("d")).unwrap().count(), 4);
    std::thread::sleep(Duration::from_millis(1100));
    let before = answered();
    fs::write(mnt.join("d/after"), b"3").unwrap();
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    assert_eq!(fs::read(mnt.join("d/renamed")).unwrap(), b"1", "a name renamed into a fresh directory was hidden");
    assert_eq!(errno_of(fs::symlink_metadata(mnt.join("d/made"))), libc::ENOENT);
    let still_fresh = (0..40).map(|_| std::thread::sleep(Duration::from_millis(100))).map(|_| answered()).find(|a| *a > before);
    assert!(still_fresh.is_some(), "a file's rename or a listing of names made here forgot the directory");
    fs::rename(mnt.join("d"), mnt.join("moved")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let before = answered();
    fs::write(mnt.join("moved/later"), b"4").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(answered(), before, "a moved directory still answered new names here");
    assert!(fs::symlink_metadata(mnt.join("moved/later")).is_ok());
    // A rights change keeps those at and below it only while their maker
    // owns it and may search it (root, the maker here, may anyway).
    let chmod = |mode| fs::set_permissions(mnt.join("p"), std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    fs::create_dir_all(mnt.join("p/q")).unwrap();
    chmod(0o711);
    std::thread::sleep(Duration::from_millis(1100));
    let before = answered();
    fs::write(mnt.join("p/q/x"), b"5").unwrap();
    let kept = (0..40).map(|_| std::thread::sleep(Duration::from_millis(100))).map(|_| answered()).find(|a| *a > before);
    assert!(kept.is_some(), "a mode its owner may still search forgot the fresh directory below");
    chmod(0o611);
    std::thread::sleep(Duration::from_millis(1100));
    let before = answered();
    fs::write(mnt.join("p/q/y"), b"6").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(answered(), before, "a directory below one its owner may not search still answered new names here");

    // A name another client made, once listed, is not then answered absent
    // (looked up again once the listing's own entry, kept for the attribute
    // timeout, has expired).
    let short = m.mount("short", &["--entry-timeout", "30", "--attr-timeout", "0.2"]);
    fs::create_dir(short.join("listed")).unwrap();
    m.ok(&["touch", "/listed/theirs"]);
    let names: Vec<_> = fs::read_dir(short.join("listed")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["theirs"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(fs::symlink_metadata(short.join("listed/theirs")).is_ok(), "a listed name answered absent");

    // Another client's name: seen once the entry timeout has passed.
    let quick = m.mount("quick", &["--entry-timeout", "0.3", "--attr-timeout", "0.3"]);
    fs::create_dir(quick.join("e")).unwrap();
    m.ok(&["touch", "/e/theirs"]);
    std::thread::sleep(Duration::from_millis(400));
    assert!(fs::symlink_metadata(quick.join("e/theirs")).is_ok(), "another client's name hidden past the timeout");
}

/// A directory still being filled past its first entry timeout is renewed
/// (a listing and a stat, `fresh_dirs.rs`) and goes on answering new names
/// here; another client's name there still shows within the timeout.
#[test]
fn a_busy_fresh_directory_is_renewed_past_its_first_timeout() {
    let mut m = up();
    let table = m.home.path().join("timings.txt");
    let mnt = m.mount("mnt", &["--entry-timeout", "2", "--attr-timeout", "2", "--timings", table.to_str().unwrap()]);
    let answered = || timings_count(&table, "lookups answered absent");
    let t0 = Instant::now();
    fs::create_dir(mnt.join("r")).unwrap();
    for i in 0..20 {
        fs::write(mnt.join(format!("r/early{i}")), b"").unwrap();
    }
    // Half the timeout gone, a busy directory: this lookup starts a renewal.
    std::thread::sleep(Duration::from_millis(1100).saturating_sub(t0.elapsed()));
    fs::write(mnt.join("r/trigger"), b"").unwrap();
    // Past the first timeout, and the table written since the trigger.
    std::thread::sleep(Duration::from_millis(2300).saturating_sub(t0.elapsed()));
    let before = answered();
    assert!(before >= 21, "lookups answered absent here: {before}");
    fs::write(mnt.join("r/late"), b"").unwrap();
    let grew = (0..25).map(|_| std::thread::sleep(Duration::from_millis(100))).map(|_| answered()).find(|a| *a > before);
    assert!(grew.is_some(), "a name made past the first timeout was looked up at a server: the directory was not renewed");
    assert!(timings_count(&table, "renewals of what it knows") >= 1);
    // Another client's name shows within the timeout, renewal or not.
    m.ok(&["touch", "/r/theirs"]);
    std::thread::sleep(Duration::from_millis(2100));
    assert!(fs::symlink_metadata(mnt.join("r/theirs")).is_ok(), "another client's name hidden past the timeout");
    assert_eq!(fs::read_dir(mnt.join("r")).unwrap().count(), 23);
}

/// A mount owes its mkdirs' replica unfences and unlocks (they go with its
/// next request to the same daemon, or from its flusher): another mount,
/// working at once in each directory just made (a file, which may meet a
/// fence not yet lifted, and a subdirectory, whose lock waits for the
/// unlock), is never refused and never waits out a lease (30 s).
#[test]
fn another_mount_works_at_once_in_a_directory_just_made_here() {
    let mut m = up();
    let table = m.home.path().join("timings.txt");
    let a = m.mount("a", &["--timings", table.to_str().unwrap()]);
    let b = m.mount("b", &[]);
    for i in 0..60 {
        let t0 = Instant::now();
        fs::create_dir(a.join(format!("d{i}"))).unwrap();
        fs::write(b.join(format!("d{i}/f")), b"x").unwrap();
        fs::create_dir(b.join(format!("d{i}/sub"))).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10), "round {i} took {:?}: an owed unlock was not sent", t0.elapsed());
    }
    // Each mkdir owes its three replicas' unfences and its unlock. Mount b's
    // mkdir below it waits for that unlock (a lock on a path conflicts with
    // one on its ancestor) while mount a sends nothing: only the flusher
    // can have sent it.
    let owed = || {
        let text = fs::read_to_string(&table).unwrap_or_default();
        let line = text.lines().find(|l| l.starts_with("owed posts")).unwrap_or_default().to_string();
        let numbers: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
        (numbers.first().copied().unwrap_or(0), numbers.get(1).copied().unwrap_or(0), line)
    };
    // The table is written every second.
    let t0 = Instant::now();
    while owed().0 < 60 * 4 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (owed, flushed, line) = owed();
    assert!(owed >= 60 * 4 && flushed >= 60, "{line}");
    m.umount(&a);
    let a = m.mount("a", &[]);
    assert_eq!(fs::read_dir(&a).unwrap().count(), 60);
    assert_eq!(fs::read(a.join("d59/f")).unwrap(), b"x");
    m.ok(&["fsck"]);
}

#[test]
fn an_unlinked_file_stays_readable_until_its_last_close() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut m = up();
    let mnt = m.mount("mnt", &[]);
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for (name, contents) in [("small", b"tiny contents".to_vec()), ("big", big)] {
        let path = mnt.join(name);
        fs::write(&path, &contents).unwrap();
        let mut f = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        fs::remove_file(&path).unwrap();
        assert!(!path.exists());
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, contents, "{name}: readable after unlink");
        f.seek(SeekFrom::End(0)).unwrap();
        f.write_all(b"+more").unwrap();
        assert_eq!(f.metadata().unwrap().len(), contents.len() as u64 + 5, "{name}: fstat after unlink");
        drop(f);
    }
    // The kernel sends the RELEASE after close(2) has returned.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut left = sh(&m.data_dir(), "find . -type f | wc -l");
    while left.trim() != "0" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        left = sh(&m.data_dir(), "find . -type f | wc -l");
    }
    assert_eq!(left.trim(), "0", "contents are deleted at the last close");
}

#[test]
fn rename_flags_noreplace_and_exchange() {
    use std::ffi::CString;
    let mut m = up();
    let mnt = m.mount("mnt", &[]);
    fs::write(mnt.join("x"), b"x").unwrap();
    fs::write(mnt.join("y"), b"y").unwrap();
    let c = |p: &str| CString::new(mnt.join(p).to_str().unwrap()).unwrap();
    let rename2 = |a: &str, b: &str, flags: libc::c_uint| {
        // SAFETY: two valid paths; renameat2 only reads them.
        let r = unsafe { libc::renameat2(libc::AT_FDCWD, c(a).as_ptr(), libc::AT_FDCWD, c(b).as_ptr(), flags) };
        if r == 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap() }
    };
    assert_eq!(rename2("x", "y", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(rename2("x", "y", libc::RENAME_EXCHANGE), libc::EINVAL);
    assert_eq!(rename2("x", "z", libc::RENAME_NOREPLACE), 0);
    assert_eq!(fs::read(mnt.join("z")).unwrap(), b"x");
    assert_eq!(fs::read(mnt.join("y")).unwrap(), b"y");
}

/// An application's path is limited by PATH_MAX relative to its working
/// directory, not by the depth of the tree: a 4095-byte relative path below a
/// subdirectory works, as on ext4.
#[test]
fn a_path_max_relative_path_below_a_subdirectory() {
    let mut m = up();
    let mnt = m.mount("mnt", &[]);
    let dirs = vec!["d".repeat(200); 20].join("/");
    let rel = format!("{dirs}/{}", "f".repeat(4095 - dirs.len() - 1));
    assert_eq!(rel.len(), 4095);
    let script = format!("mkdir sub && cd sub && mkdir -p {dirs} && echo deep > {rel} && cat {rel} && rm {rel}");
    assert_eq!(sh(&mnt, &script), "deep\n");
}

#[test]
fn create_without_excl_of_someone_elses_file_is_checked() {
    // The kernel sends CREATE (not LOOKUP + OPEN) when it believes the name is
    // absent; if the file appears in between, the server must check permission
    // before it hands the file out, since the kernel, thinking it created the
    // file, checks nothing. Alice creates and removes a 0600 file on one mount
    // while Bob opens the name O_CREAT|O_RDWR on another: Bob must never hold
    // Alice's file.
    use std::os::unix::fs::OpenOptionsExt;
    let mut m = up_shared();
    let a = m.mount("a", &["--allow-other"]);
    let b = m.mount("b", &["--allow-other"]);
    fs::create_dir(a.join("d")).unwrap();
    fs::set_permissions(a.join("d"), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let (ours, theirs) = (a.join("d/f"), b.join("d/f"));
    let until = std::time::Instant::now() + Duration::from_secs(4);
    let alice = std::thread::spawn(move || {
        as_user(ALICE, move || {
            while std::time::Instant::now() < until {
                let made = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&ours);
                if made.is_ok() {
                    let _ = fs::remove_file(&ours);
                }
            }
        })
    });
    let (opened, alices) = as_user(BOB, move || {
        let (mut opened, mut alices) = (0, 0);
        while std::time::Instant::now() < until {
            let Ok(f) = fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&theirs) else { continue };
            opened += 1;
            if f.metadata().unwrap().uid() == ALICE {
                alices += 1;
            } else {
                let _ = fs::remove_file(&theirs);
            }
        }
        (opened, alices)
    });
    alice.join().unwrap();
    assert_eq!(alices, 0, "Bob opened Alice's 0600 file {alices} times (of {opened} opens)");
}

/// The kernel's caches are shared by every user: with the default
/// `default_permissions` the kernel checks each user's access to what it holds.
/// Without it, Bob would be served Alice's private attributes that root had
/// looked up, and could open her FIFO (no open request reaches the mount for
/// one).
#[test]
fn the_kernel_checks_permissions_on_what_it_caches() {
    let mut m = up_shared();
    let mnt = m.mount("mnt", &["--allow-other", "--attr-timeout", "30", "--entry-timeout", "30"]);
    let (d, f) = (mnt.join("d"), mnt.join("d/f"));
    fs::create_dir(&d).unwrap();
    fs::write(&f, b"0123456789").unwrap();
    for (p, mode) in [(&f, 0o600), (&d, 0o700)] {
        chown(p, ALICE);
        chmod(p, mode);
    }
    assert_eq!(fs::symlink_metadata(&f).unwrap().len(), 10, "root looks it up: now cached");
    let g = f.clone();
    assert_eq!(as_user(BOB, move || errno_of(fs::symlink_metadata(&g))), libc::EACCES, "Bob cannot search d");

    let p = mnt.join("p");
    fs::create_dir(&p).unwrap();
    chmod(&p, 0o777);
    let fifo = std::ffi::CString::new(p.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid path; mkfifo only reads it.
    as_user(ALICE, move || assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0));
    let fifo = p.join("fifo");
    let opened = as_user(BOB, move || {
        use std::os::unix::fs::OpenOptionsExt;
        errno_of(fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo))
    });
    assert_eq!(opened, libc::EACCES, "Bob opens Alice's 0600 FIFO");
}

/// `readdirplus` answers attributes the kernel then serves for the attribute
/// timeout; they are not fetched as root, or a user who may list a directory
/// but not search it (r without x) would see everything inside. Tested without
/// `default_permissions`, where nothing else stands in the way.
#[test]
fn readdirplus_stats_children_as_the_caller() {
    let mut m = up_shared();
    let mnt = m.mount("mnt", &["--allow-other", "--no-default-permissions", "--attr-timeout", "30", "--entry-timeout", "30"]);
    let (d, f) = (mnt.join("d"), mnt.join("d/f"));
    fs::create_dir(&d).unwrap();
    fs::write(&f, b"0123456789").unwrap();
    chown(&f, ALICE);
    chmod(&f, 0o600);
    chmod(&d, 0o744);
    let (names, stat) = as_user(BOB, move || {
        let names: Vec<String> = fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        (names, errno_of(fs::symlink_metadata(&f)))
    });
    assert_eq!(names, vec!["f".to_string()], "the name is listed");
    assert_eq!(stat, libc::EACCES, "but its attributes are not Bob's to see");
    assert_eq!(fs::symlink_metadata(mnt.join("d/f")).unwrap().len(), 10, "root still sees them");
}

/// The mount's superblock options, as /proc/self/mountinfo lists them.
fn super_options(mnt: &Path) -> String {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap())).expect("mounted");
    line.split(" - ").nth(1).and_then(|r| r.split(' ').nth(2)).unwrap().to_string()
}

/// The kernel checks permissions itself exactly when other users may use the
/// mount: a mount only its owner may use leaves the checks to the servers, and
/// what the kernel then serves from its caches unchecked reaches no one else,
/// since such a mount refuses every request carrying another uid, even from a
/// root thread that switched its fsuid (as file servers do).
#[test]
fn a_private_mount_leaves_the_checks_to_the_servers_and_serves_its_owner_alone() {
    let mut m = up_shared();
    let private = m.mount("private", &[]);
    let shared = m.mount("shared", &["--allow-other"]);
    let forced = m.mount("forced", &["--default-permissions"]);
    let opts = |mnt: &Path| super_options(mnt).split(',').any(|o| o == "default_permissions");
    assert_eq!((opts(&private), opts(&shared), opts(&forced)), (false, true, true));

    fs::write(private.join("f"), b"x").unwrap();
    chmod(&private.join("f"), 0o644);
    assert_eq!(fs::read(private.join("f")).unwrap(), b"x", "the owner reads it; now it is cached");
    let f = private.join("f");
    assert_eq!(as_user(BOB, move || errno_of(fs::read(&f))), libc::EACCES, "refused to anyone else");
    let d = private.join("d");
    assert_eq!(as_user(BOB, move || errno_of(fs::create_dir(&d))), libc::EACCES);
    let f = shared.join("f");
    assert_eq!(as_user(BOB, move || fs::read(&f).unwrap()), b"x", "a mount with --allow-other serves Bob as Bob");
}

/// Drops root's file capabilities (chown, DAC override and read-search,
/// fowner, fsetid) from the calling thread's effective set, as a confined
/// service has them dropped.
///
/// # Safety
/// Only the capget and capset system calls, on this thread; fit for a
/// `pre_exec` hook.
unsafe fn drop_file_caps() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header { version: 0x2008_0522, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY (of the calls): a version-3 header and the two data words that version takes.
    if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    data[0].effective &= !0x1f;
    if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a new thread of root's without root's file capabilities.
fn without_file_caps<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: changes only this new thread's capabilities.
        unsafe { drop_file_caps() }.unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// The servers take uid 0 for root, and cannot see capabilities: where the
/// kernel checks nothing itself (a mount only its owner may use), a uid-0
/// process without root's file capabilities is refused, as the kernel's own
/// check would have refused it what root's rights alone allow.
#[test]
fn root_without_its_file_capabilities_is_refused_where_the_kernel_checks_nothing() {
    let mut m = up();
    let private = m.mount("private", &[]);
    let f = private.join("f");
    fs::write(&f, b"secret").unwrap();
    chown(&f, ALICE);
    chmod(&f, 0o600);
    let g = f.clone();
    assert_eq!(without_file_caps(move || errno_of(fs::read(&g))), libc::EACCES);
    assert_eq!(fs::read(&f).unwrap(), b"secret", "root with its capabilities reads it");
}

/// A confined root may make a user namespace of its own, mapping uid 0 to
/// itself, and hold every capability there: those give it no right over
/// other users' files, and the mount, which reads capabilities from /proc,
/// must not count them.
#[test]
fn capabilities_held_in_another_user_namespace_do_not_count() {
    use std::os::unix::process::CommandExt;
    let mut m = up();
    let f = m.mount("private", &[]).join("f");
    fs::write(&f, b"secret").unwrap();
    chown(&f, ALICE);
    chmod(&f, 0o600);
    let mut cat = Command::new("cat");
    cat.arg(&f);
    // SAFETY: only system calls on static strings between fork and exec.
    unsafe {
        cat.pre_exec(|| {
            drop_file_caps()?;
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for (path, text) in [(c"/proc/self/setgroups", c"deny"), (c"/proc/self/uid_map", c"0 0 1"), (c"/proc/self/gid_map", c"0 0 1")] {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, text.as_ptr().cast(), text.to_bytes().len()) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Ok(())
        });
    }
    let out = cat.output().expect("cat started in a namespace of its own");
    assert!(!out.status.success(), "read {:?}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// execve(2) needs execute permission alone: a mode-0711 program runs for
/// every user. The mount does not check read permission for the open the
/// kernel makes of a program as for open(2) for reading, which would refuse
/// it.
#[test]
fn a_program_runs_with_execute_permission_alone() {
    use std::os::unix::process::CommandExt;
    let mut m = up_shared();
    for (name, extra) in [("checked", &["--allow-other"][..]), ("unchecked", &["--allow-other", "--no-default-permissions"][..])] {
        let prog = m.mount(name, extra).join("true");
        fs::copy("/bin/true", &prog).unwrap();
        chmod(&prog, 0o711);
        let ran = Command::new(&prog).uid(BOB).gid(BOB).status();
        assert!(ran.unwrap().success(), "{name}: Bob runs a 0711 program");
        chmod(&prog, 0o700);
        let refused = Command::new(&prog).uid(BOB).gid(BOB).status();
        assert_eq!(refused.map_err(|e| e.raw_os_error()).unwrap_err(), Some(libc::EACCES), "{name}: but not a 0700 one");
    }
}

/// A write by a non-owner to a setuid/setgid file succeeds and clears the bits,
/// as on a local file system. Left to the kernel, the clearing would be a chmod
/// sent as the writer, which the server refuses (EPERM), failing the write.
#[test]
fn a_write_by_a_non_owner_clears_setuid_and_setgid() {
    use std::io::Write;
    let mut m = up_shared();
    let mnt = m.mount("mnt", &["--allow-other", "--attr-timeout", "0"]);
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    chmod(&d, 0o777);
    let f = d.join("f");
    fs::write(&f, b"#!/bin/sh\n").unwrap();
    chown(&f, ALICE);
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
    for (before, after) in [(0o6777, 0o777), (0o6767, 0o2767)] {
        chmod(&f, before);
        let g = f.clone();
        let wrote = as_user(BOB, move || errno_of(fs::OpenOptions::new().append(true).open(&g).and_then(|mut h| h.write_all(b"echo\n"))));
        assert_eq!(wrote, 0, "Bob's write to a {before:o} file");
        assert_eq!(mode(&f), after, "setuid goes; setgid too when group-executable");
    }
    // ftruncate through a descriptor goes to the servers as root: the mount says
    // for whom.
    chmod(&f, 0o6777);
    let g = f.clone();
    let cut = as_user(BOB, move || errno_of(fs::OpenOptions::new().write(true).open(&g).and_then(|h| h.set_len(10))));
    assert_eq!((cut, mode(&f)), (0, 0o777), "Bob's ftruncate");
    fs::OpenOptions::new().append(true).open(&f).unwrap().write_all(b"echo\n").unwrap();
    chmod(&f, 0o6777);
    fs::OpenOptions::new().append(true).open(&f).unwrap().write_all(b"# root\n").unwrap();
    assert_eq!(mode(&f), 0o6777, "root's own write keeps them");
    let g = f.clone();
    let chmodded = as_user(BOB, move || errno_of(fs::set_permissions(&g, std::os::unix::fs::PermissionsExt::from_mode(0o777))));
    assert_eq!(chmodded, libc::EPERM, "a chmod is still the owner's");
    assert_eq!(fs::read(&f).unwrap(), b"#!/bin/sh\necho\n# root\n");
}

/// Data requests are checked against the file on the servers; the mount
/// checks at open and sends them as root, so what open(2) allows still works:
/// writing through a descriptor of a file created read-only, or chmodded since.
#[test]
fn descriptors_write_whatever_the_mode_became_after_open() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut m = up_shared();
    let mnt = m.mount("mnt", &["--allow-other"]);
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    chmod(&d, 0o777);
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (f, g, contents) = (d.join("ro"), d.join("later"), big.clone());
    let written = as_user(BOB, move || {
        let mut ro = fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(&f)?;
        ro.write_all(b"small ")?;
        ro.write_all(&contents)?; // past the inline limit: spills to the back end
        let mut later = fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&g)?;
        fs::set_permissions(&g, std::os::unix::fs::PermissionsExt::from_mode(0o000))?;
        later.write_all(b"still mine")
    });
    written.unwrap();
    let mut want = b"small ".to_vec();
    want.extend_from_slice(&big);
    assert_eq!(fs::read(d.join("ro")).unwrap(), want);
    assert_eq!(fs::metadata(d.join("ro")).unwrap().mode() & 0o777, 0o444);
    assert_eq!(fs::read(d.join("later")).unwrap(), b"still mine");
    let h = d.join("ro");
    assert_eq!(as_user(BOB, move || errno_of(fs::OpenOptions::new().write(true).open(&h))), libc::EACCES, "a new open is checked");
}

/// Canopy names (and symlink targets) are UTF-8 strings end to end: the mount
/// refuses any other name with EILSEQ, as UTF-8-only file systems do, in every
/// request that carries one.
#[test]
fn names_that_are_not_utf8_are_refused_with_eilseq() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let mut m = up();
    let mnt = m.mount("mnt", &[]);
    fs::write(mnt.join("file"), b"x").unwrap();
    fs::create_dir(mnt.join("dir")).unwrap();
    let bad = OsStr::from_bytes(b"caf\xe9"); // Latin-1, not UTF-8
    let at = mnt.join(bad);
    let fifo = std::ffi::CString::new(at.as_os_str().as_bytes()).unwrap();
    let attempts: Vec<(&str, i32)> = vec![
        ("lookup", errno_of(fs::symlink_metadata(&at))),
        ("create", errno_of(fs::File::create(&at))),
        ("mkdir", errno_of(fs::create_dir(&at))),
        // SAFETY: a valid path; mkfifo only reads it.
        ("mknod", if unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) } == 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap() }),
        ("symlink", errno_of(std::os::unix::fs::symlink("file", &at))),
        ("symlink target", errno_of(std::os::unix::fs::symlink(bad, mnt.join("link")))),
        ("link", errno_of(fs::hard_link(mnt.join("file"), &at))),
        ("rename", errno_of(fs::rename(mnt.join("file"), &at))),
        ("unlink", errno_of(fs::remove_file(&at))),
        ("rmdir", errno_of(fs::remove_dir(&at))),
    ];
    for (what, errno) in attempts {
        assert_eq!(errno, libc::EILSEQ, "{what} of a non-UTF-8 name");
    }
    let mut left: Vec<String> = fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["dir", "file"], "nothing was made or moved");
}

/// Programs see EIO when the cluster cannot be reached, not the transport's
/// ECONNREFUSED, ETIMEDOUT or ENOTCONN, which no file system call documents.
#[test]
fn an_unreachable_cluster_is_eio_to_programs() {
    let mut m = up();
    let mnt = m.mount("mnt", &["--attr-timeout", "0", "--entry-timeout", "0"]);
    fs::write(mnt.join("f"), b"x").unwrap();
    m.ok(&["down"]);
    assert_eq!(errno_of(fs::symlink_metadata(mnt.join("f"))), libc::EIO, "stat");
    assert_eq!(errno_of(fs::write(mnt.join("g"), b"y")), libc::EIO, "create");
    assert_eq!(errno_of(fs::create_dir(mnt.join("d"))), libc::EIO, "mkdir");
}

/// A directory whose files carry more inline contents than one frame can hold
/// on each server (600 files of 60 KB, about 9 MB per server) is renamed
/// whole, and every file reads back: migration is batched by bytes as well as
/// by count (with 1,024 such files per batch it would fail `EIO`, left to
/// recovery, which would fail the same way).
#[test]
fn renaming_a_directory_of_inline_files_larger_than_a_frame() {
    let mut m = up();
    let mnt = m.mount("mnt", &[]);
    let (d, moved) = (mnt.join("d"), mnt.join("moved"));
    fs::create_dir(&d).unwrap();
    let body = |i: usize| vec![(i % 251) as u8; 60_000];
    for i in 0..600 {
        fs::write(d.join(format!("f{i}")), body(i)).unwrap();
    }
    fs::rename(&d, &moved).unwrap();
    assert!(!d.exists());
    for i in 0..600 {
        assert_eq!(fs::read(moved.join(format!("f{i}"))).unwrap(), body(i), "f{i}");
    }
}

/// `--timings FILE` counts the kernel requests the mount answered, by kind:
/// one CREATE per exclusive create and one MKDIR per mkdir, also in the
/// table written as the mount ends.
#[test]
fn timings_count_the_kernel_requests_answered() {
    let mut m = up();
    let table = m.home.path().join("timings.txt");
    let mnt = m.mount("mnt", &["--timings", table.to_str().unwrap()]);
    fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..25 {
        fs::OpenOptions::new().write(true).create_new(true).open(mnt.join("d").join(format!("f{i}"))).unwrap();
    }
    m.umount(&mnt);
    let count_of = |text: &str, kind: &str| -> Option<u64> {
        let row = text.lines().find(|l| l.split_whitespace().next() == Some(kind))?;
        row.split_whitespace().nth(1)?.parse().ok()
    };
    // The last table is written once the kernel has let go of the mount.
    let mut text = String::new();
    for _ in 0..100 {
        text = fs::read_to_string(&table).unwrap_or_default();
        if count_of(&text, "CREATE") == Some(25) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(count_of(&text, "CREATE"), Some(25), "{text}");
    assert_eq!(count_of(&text, "MKDIR"), Some(1), "{text}");
    assert!(count_of(&text, "LOOKUP").is_some_and(|n| n >= 25), "{text}");
}
