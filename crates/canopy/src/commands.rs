//! Namespace commands, worded like coreutils: each error is printed as
//! `canopy: <what failed> '<path>': <strerror>`, the command goes on with its other
//! arguments, and the exit status is non-zero if anything failed.

use crate::connect::{self, Who};
use crate::format;
use canopy_client::Client;
use canopy_proto::path::NsPath;
use canopy_proto::{Errno, FileKind, TimeSet};
use clap::Subcommand;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum NsCmd {
    /// Make directories.
    Mkdir {
        /// Make parents as needed; no error if existing.
        #[arg(short = 'p', long)]
        parents: bool,
        /// Octal mode (default 755).
        #[arg(short = 'm', long, default_value = "755")]
        mode: String,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// List directories.
    Ls {
        #[arg(short = 'l')]
        long: bool,
        /// List directories themselves, not their contents.
        #[arg(short = 'd')]
        directory: bool,
        paths: Vec<String>,
    },
    /// Show attributes.
    Stat {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create files, or update their times.
    Touch {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove files (and directories with -r or -d).
    Rm {
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        #[arg(short = 'f', long)]
        force: bool,
        /// Remove empty directories.
        #[arg(short = 'd', long = "dir")]
        dir: bool,
        /// Refuse to remove '/' recursively (the default).
        #[arg(long, overrides_with = "no_preserve_root")]
        preserve_root: bool,
        /// Let -r remove everything below '/'.
        #[arg(long)]
        no_preserve_root: bool,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove empty directories.
    Rmdir {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Rename; into DST if DST is a directory.
    Mv { src: String, dst: String },
    /// Change mode bits (octal).
    Chmod {
        mode: String,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change owner and/or group: USER[:GROUP] or :GROUP, names or numbers.
    Chown {
        owner: String,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Make a hard link, or a symbolic link with -s.
    Ln {
        #[arg(short = 's', long)]
        symbolic: bool,
        target: String,
        link: String,
    },
    /// Show a directory tree.
    Tree { path: Option<String> },
}

/// Whether an argument ends in a slash, which `norm` drops but which says the
/// name must be a directory (path_resolution(7)).
fn names_a_directory(raw: &str) -> bool {
    raw.ends_with('/')
}

/// CLI paths: relative ones are taken from the root, and a trailing slash is dropped.
pub fn norm(p: &str) -> String {
    let abs = if p.starts_with('/') { p.to_string() } else { format!("/{p}") };
    let trimmed = abs.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.to_string()
    }
}

/// What rm refuses outright, before it looks at the namespace (coreutils' two
/// failsafes, for removals that may take directories: `-r` or `-d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RmRefusal {
    /// The argument's last component is `.` or `..`.
    DotOrDotDot,
    /// A recursive removal of the root while `--preserve-root` is in effect.
    Root,
}

/// The failsafe `raw` (an argument as given) meets, if any. The dot check reads
/// the raw argument, since normalising would hide it: `/h/sub/..` is `/h`, and `.`
/// is the root for a CLI that takes relative paths from there.
fn rm_refusal(raw: &str, recursive: bool, dirs: bool, preserve_root: bool) -> Option<RmRefusal> {
    if !recursive && !dirs {
        return None; // a directory is then refused with EISDIR
    }
    let last = raw.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
    if last == "." || last == ".." {
        return Some(RmRefusal::DotOrDotDot);
    }
    let is_root = NsPath::parse(&norm(raw)).is_ok_and(|p| p.is_root());
    (recursive && preserve_root && is_root).then_some(RmRefusal::Root)
}

fn report_refusal(raw: &str, refusal: RmRefusal) {
    match refusal {
        RmRefusal::DotOrDotDot => eprintln!("canopy: refusing to remove '.' or '..' directory: skipping '{raw}'"),
        RmRefusal::Root => {
            if raw == "/" {
                eprintln!("canopy: it is dangerous to operate recursively on '/'");
            } else {
                eprintln!("canopy: it is dangerous to operate recursively on '{raw}' (same as '/')");
            }
            eprintln!("canopy: use --no-preserve-root to override this failsafe");
        }
    }
}

fn complain(what: &str, path: &str, e: Errno) {
    eprintln!("canopy: {what} '{path}': {e}");
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8).ok().filter(|m| *m <= 0o7777).ok_or_else(|| format!("invalid mode: '{s}'"))
}

/// A user or group id by number or name; None if there is none. 4294967295 is
/// chown(2)'s "no change", never an id.
fn lookup_id(name: &str, user: bool) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return (n != u32::MAX).then_some(n);
    }
    if user {
        uzers::get_user_by_name(name).map(|u| u.uid())
    } else {
        uzers::get_group_by_name(name).map(|g| g.gid())
    }
}

/// USER[:GROUP] or :GROUP; errors quote the whole spec, as chown(1) does.
fn parse_owner(s: &str) -> Result<(Option<u32>, Option<u32>), String> {
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let uid = match u {
        "" => None,
        u => Some(lookup_id(u, true).ok_or_else(|| format!("invalid user: '{s}'"))?),
    };
    let gid = match g {
        Some(g) if !g.is_empty() => Some(lookup_id(g, false).ok_or_else(|| format!("invalid group: '{s}'"))?),
        _ => None,
    };
    Ok((uid, gid))
}

pub fn run(cmd: NsCmd, cluster: Option<&Path>, who: &Who) -> Result<ExitCode, String> {
    connect::with_client(cluster, who, |client| async move {
        let ok = dispatch(&client, cmd).await?;
        Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    })
}

/// Runs the command; false if any part of it failed (already reported).
pub async fn dispatch(client: &Client, cmd: NsCmd) -> Result<bool, String> {
    match cmd {
        NsCmd::Mkdir { parents, mode, paths } => mkdir(client, parents, &mode, &paths).await,
        NsCmd::Ls { long, directory, paths } => Ok(ls_all(client, long, directory, paths).await),
        NsCmd::Stat { paths } => Ok(stat_all(client, &paths).await),
        NsCmd::Touch { paths } => Ok(touch(client, &paths).await),
        NsCmd::Rm { recursive, force, dir, no_preserve_root, paths, .. } => Ok(rm(client, &paths, RmFlags { recursive, force, dir, preserve_root: !no_preserve_root }).await),
        NsCmd::Rmdir { paths } => Ok(rmdir(client, &paths).await),
        NsCmd::Mv { src, dst } => Ok(mv(client, &src, &dst).await),
        NsCmd::Chmod { mode, paths } => chmod(client, &mode, &paths).await,
        NsCmd::Chown { owner, paths } => chown(client, &owner, &paths).await,
        NsCmd::Ln { symbolic, target, link } => Ok(ln(client, symbolic, &target, &link).await),
        NsCmd::Tree { path } => Ok(tree_cmd(client, path.as_deref()).await),
    }
}

/// `mkdir [-p] [-m MODE] PATH...`
async fn mkdir(client: &Client, parents: bool, mode: &str, paths: &[String]) -> Result<bool, String> {
    let mode = parse_mode(mode)?;
    let mut ok = true;
    for p in paths.iter().map(|p| norm(p)) {
        let r = if parents { mkdir_parents(client, &p, mode).await } else { client.mkdir(&p, mode).await.map(|_| ()) };
        if let Err(e) = r {
            complain("cannot create directory", &p, e);
            ok = false;
        }
    }
    Ok(ok)
}

/// `ls [-l] [-d] [PATH...]`, `/` if none.
async fn ls_all(client: &Client, long: bool, directory: bool, paths: Vec<String>) -> bool {
    let paths = if paths.is_empty() { vec!["/".to_string()] } else { paths };
    let many = paths.len() > 1;
    let mut ok = true;
    for p in paths.iter().map(|p| norm(p)) {
        if let Err(e) = ls(client, &p, long, directory, many).await {
            complain("cannot access", &p, e);
            ok = false;
        }
    }
    ok
}

async fn stat_all(client: &Client, paths: &[String]) -> bool {
    let mut ok = true;
    for p in paths.iter().map(|p| norm(p)) {
        match client.stat(&p).await {
            Ok(a) => print_stat(&p, &a),
            Err(e) => {
                complain("cannot stat", &p, e);
                ok = false;
            }
        }
    }
    ok
}

/// `touch PATH...`: creates, or sets an existing file's times to now.
async fn touch(client: &Client, paths: &[String]) -> bool {
    let mut ok = true;
    for raw in paths {
        let p = norm(raw);
        if names_a_directory(raw) {
            if let Err((what, e)) = touch_directory(client, &p).await {
                complain(what, raw, e);
                ok = false;
            }
            continue;
        }
        let r = match client.create(&p, 0o644).await {
            Err(Errno::EEXIST) => client.utimens(&p, Some(TimeSet::Now), Some(TimeSet::Now)).await.map(|_| ()),
            other => other.map(|_| ()),
        };
        if let Err(e) = r {
            complain("cannot touch", &p, e);
            ok = false;
        }
    }
    ok
}

/// What `rm` was asked to do beside its paths.
struct RmFlags {
    recursive: bool,
    force: bool,
    dir: bool,
    preserve_root: bool,
}

/// `rm [-r] [-f] [-d] PATH...`, with coreutils' failsafes.
async fn rm(client: &Client, paths: &[String], f: RmFlags) -> bool {
    let mut ok = true;
    for raw in paths {
        if let Some(refusal) = rm_refusal(raw, f.recursive, f.dir, f.preserve_root) {
            report_refusal(raw, refusal);
            ok = false;
            continue;
        }
        let p = norm(raw);
        match remove(client, &p, f.recursive, f.dir).await {
            Err(Errno::ENOENT) if f.force => {}
            Err(e) => {
                complain("cannot remove", &p, e);
                ok = false;
            }
            Ok(()) => {}
        }
    }
    ok
}

async fn rmdir(client: &Client, paths: &[String]) -> bool {
    let mut ok = true;
    for p in paths.iter().map(|p| norm(p)) {
        if let Err(e) = client.rmdir(&p).await {
            complain("failed to remove", &p, e);
            ok = false;
        }
    }
    ok
}

/// `mv SRC DST`: into DST if it is a directory.
async fn mv(client: &Client, src: &str, dst: &str) -> bool {
    let (src, mut dst) = (norm(src), norm(dst));
    if let Ok(a) = client.stat(&dst).await {
        if a.kind == FileKind::Dir && src != dst {
            let name = src.rsplit('/').next().unwrap_or_default();
            dst = if dst == "/" { format!("/{name}") } else { format!("{dst}/{name}") };
        }
    }
    if let Err(e) = client.rename(&src, &dst).await {
        eprintln!("canopy: cannot move '{src}' to '{dst}': {e}");
        return false;
    }
    true
}

async fn chmod(client: &Client, mode: &str, paths: &[String]) -> Result<bool, String> {
    let mode = parse_mode(mode)?;
    let mut ok = true;
    for p in paths.iter().map(|p| norm(p)) {
        ok &= report_change("changing permissions of", &p, client.chmod(&p, mode).await);
    }
    Ok(ok)
}

async fn chown(client: &Client, owner: &str, paths: &[String]) -> Result<bool, String> {
    let (uid, gid) = parse_owner(owner)?;
    let mut ok = true;
    for p in paths.iter().map(|p| norm(p)) {
        ok &= report_change("changing ownership of", &p, client.chown(&p, uid, gid).await);
    }
    Ok(ok)
}

/// `ln [-s] TARGET LINK`.
async fn ln(client: &Client, symbolic: bool, target: &str, link: &str) -> bool {
    let link = norm(link);
    let r = if symbolic { client.symlink(target, &link).await } else { client.link(&norm(target), &link).await };
    match r {
        Ok(_) => true,
        Err(e) if symbolic => {
            eprintln!("canopy: failed to create symbolic link '{link}': {e}");
            false
        }
        Err(e) => {
            eprintln!("canopy: failed to create hard link '{link}' => '{}': {e}", norm(target));
            false
        }
    }
}

/// `tree [PATH]`, with tree(1)'s counts at the end.
async fn tree_cmd(client: &Client, path: Option<&str>) -> bool {
    let root = norm(path.unwrap_or("/"));
    println!("{root}");
    let mut counts = (0u64, 0u64);
    let r = tree(client, &root, String::new(), &mut counts).await;
    if let Err(e) = &r {
        complain("cannot access", &root, *e);
    }
    println!("\n{} directories, {} files", counts.0, counts.1);
    r.is_ok()
}

/// Reports a failed chmod/chown as coreutils does: a path that cannot be reached
/// is "cannot access", a refused change is "<what> '<path>'". True on success.
fn report_change(what: &str, path: &str, r: Result<canopy_proto::Attr, Errno>) -> bool {
    match r {
        Ok(_) => true,
        Err(e @ (Errno::ENOENT | Errno::ENOTDIR | Errno::EACCES)) => {
            complain("cannot access", path, e);
            false
        }
        Err(e) => {
            complain(what, path, e);
            false
        }
    }
}

/// touch(1) of a name with a trailing slash: nothing is created (open(2) with
/// O_CREAT answers EISDIR), only a directory's times are set. Errors come with
/// touch's wording: "cannot touch" when the parent cannot be reached (open's
/// error), "setting times of" otherwise (utimensat's).
async fn touch_directory(client: &Client, path: &str) -> Result<(), (&'static str, Errno)> {
    let set_times = "setting times of";
    match client.stat(path).await {
        Ok(a) if a.kind == FileKind::Dir => {
            client.utimens(path, Some(TimeSet::Now), Some(TimeSet::Now)).await.map(|_| ()).map_err(|e| (set_times, e))
        }
        Ok(_) => Err((set_times, Errno::ENOTDIR)),
        // Missing: open(2) would have failed first if the parent cannot hold it.
        Err(Errno::ENOENT) => Err(match parent_kind(client, path).await {
            Ok(FileKind::Dir) => (set_times, Errno::ENOENT),
            Ok(_) => ("cannot touch", Errno::ENOTDIR),
            Err(e) => ("cannot touch", e),
        }),
        Err(e) => Err(("cannot touch", e)),
    }
}

/// The kind of the directory `path` would be in (the root's for the root).
async fn parent_kind(client: &Client, path: &str) -> Result<FileKind, Errno> {
    let p = NsPath::parse(path)?;
    let parent = p.split().map_or_else(NsPath::root, |(parent, _)| parent);
    Ok(client.stat(parent.as_str()).await?.kind)
}

async fn mkdir_parents(client: &Client, path: &str, mode: u32) -> Result<(), Errno> {
    let mut cur = String::new();
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(comp);
        match client.mkdir(&cur, mode).await {
            Ok(_) => {}
            Err(Errno::EEXIST) => {
                if client.stat(&cur).await?.kind != FileKind::Dir {
                    return Err(Errno::ENOTDIR);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

async fn ls(client: &Client, path: &str, long: bool, directory: bool, header: bool) -> Result<(), Errno> {
    let attr = client.stat(path).await?;
    if attr.kind != FileKind::Dir || directory {
        let target = if attr.kind == FileKind::Symlink && long { client.readlink(path).await.ok() } else { None };
        println!("{}", if long { format::long_line(&attr, &format::SystemNames, path, target.as_deref()) } else { path.to_string() });
        return Ok(());
    }
    if header {
        println!("{path}:");
    }
    for e in client.readdir(path).await? {
        if long {
            let child = join(path, &e.name);
            let a = client.stat(&child).await?;
            let target = if a.kind == FileKind::Symlink { client.readlink(&child).await.ok() } else { None };
            println!("{}", format::long_line(&a, &format::SystemNames, &e.name, target.as_deref()));
        } else {
            println!("{}", e.name);
        }
    }
    Ok(())
}

fn print_stat(path: &str, a: &canopy_proto::Attr) {
    let kind = match a.kind {
        FileKind::Dir => "directory",
        FileKind::File => "regular file",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "fifo",
        FileKind::Socket => "socket",
        FileKind::CharDev => "character special file",
        FileKind::BlockDev => "block special file",
    };
    println!("  File: {path}");
    println!("  Size: {:<15} Inode: {:<20} Links: {}  {kind}", a.size, a.ino, a.nlink);
    println!("Access: ({:04o}/{})  Uid: {}  Gid: {}", a.mode, format::mode_string(a.kind, a.mode), a.uid, a.gid);
    println!("Access: {}", format::time_string(a.atime));
    println!("Modify: {}", format::time_string(a.mtime));
    println!("Change: {}", format::time_string(a.ctime));
}

type BoxedResult<'a> = Pin<Box<dyn Future<Output = Result<(), Errno>> + 'a>>;

fn remove<'a>(client: &'a Client, path: &'a str, recursive: bool, dir_ok: bool) -> BoxedResult<'a> {
    Box::pin(async move {
        let a = client.stat(path).await?;
        if a.kind != FileKind::Dir {
            return client.unlink(path).await;
        }
        if recursive {
            for e in client.readdir(path).await? {
                let child = join(path, &e.name);
                if let Err(err) = remove(client, &child, true, true).await {
                    complain("cannot remove", &child, err);
                }
            }
        } else if !dir_ok {
            return Err(Errno::EISDIR);
        }
        client.rmdir(path).await
    })
}

fn tree<'a>(client: &'a Client, path: &'a str, indent: String, counts: &'a mut (u64, u64)) -> BoxedResult<'a> {
    Box::pin(async move {
        let entries = client.readdir(path).await?;
        let last = entries.len().saturating_sub(1);
        for (i, e) in entries.iter().enumerate() {
            let (branch, next) = if i == last { ("└── ", "    ") } else { ("├── ", "│   ") };
            println!("{indent}{branch}{}", e.name);
            if e.kind == FileKind::Dir {
                counts.0 += 1;
                tree(client, &join(path, &e.name), format!("{indent}{next}"), counts).await?;
            } else {
                counts.1 += 1;
            }
        }
        Ok(())
    })
}

pub fn fsck(cluster: Option<&Path>, repair: bool) -> Result<ExitCode, String> {
    let c = connect::load(cluster)?;
    let key = connect::cluster_key(&c, "fsck")?;
    let rt = connect::runtime()?;
    let summary = rt.block_on(async {
        let client = connect::client(&c, &key, canopy_proto::Creds::root())?;
        if repair {
            // Placement first: a misplaced entry can stop a transaction's
            // recovery, which it runs once the entry is gone.
            let n = client.repair_placement().await.map_err(|e| format!("fsck: repair: {e}"))?;
            println!("canopy fsck: moved, dropped or synced {n} objects found away from where they belong");
            let n = client.repair().await.map_err(|e| format!("fsck: repair: {e}"))?;
            println!("canopy fsck: recovered {n} transactions of dead coordinators");
        }
        client.fsck().await.map_err(|e| format!("fsck: {e}"))
    })?;
    for p in summary.in_flight.iter().chain(&summary.problems) {
        println!("{p}");
    }
    let verdict = if summary.is_clean() { "clean".to_string() } else { format!("{} problems", summary.problems.len()) };
    println!("canopy fsck: {} servers, {} directories, {} files: {verdict}", summary.servers, summary.dirs, summary.files);
    Ok(if summary.is_clean() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rm_failsafes() {
        use RmRefusal::*;
        for dots in [".", "..", "/h/.", "/h/sub/..", "/h/sub/../", "h/..//", "/.."] {
            assert_eq!(rm_refusal(dots, true, false, true), Some(DotOrDotDot), "{dots}");
            assert_eq!(rm_refusal(dots, false, true, false), Some(DotOrDotDot), "{dots} with -d");
            assert_eq!(rm_refusal(dots, false, false, true), None, "{dots}: plain rm says EISDIR");
        }
        for root in ["/", "//", ""] {
            assert_eq!(rm_refusal(root, true, false, true), Some(Root), "{root:?}");
            assert_eq!(rm_refusal(root, true, false, false), None, "--no-preserve-root");
            assert_eq!(rm_refusal(root, false, true, true), None, "-d alone: rmdir says EBUSY");
        }
        for fine in ["/h", "/h/..x", "/h/.hidden", "/h/sub/../f", "..."] {
            assert_eq!(rm_refusal(fine, true, true, true), None, "{fine}");
        }
    }
}
