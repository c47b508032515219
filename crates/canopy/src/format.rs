//! How the CLI shows attributes: `ls -l` mode strings and UTC timestamps.

use canopy_proto::attr::{S_ISGID, S_ISUID, S_ISVTX};
use canopy_proto::{Attr, FileKind};

/// `drwxr-sr-t` style, with setuid/setgid/sticky shown as coreutils does.
pub fn mode_string(kind: FileKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        FileKind::Dir => 'd',
        FileKind::File => '-',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
        FileKind::CharDev => 'c',
        FileKind::BlockDev => 'b',
    });
    let special = [(S_ISUID, 's'), (S_ISGID, 's'), (S_ISVTX, 't')];
    for (i, (bit, mark)) in special.iter().enumerate() {
        let shift = 6 - 3 * i as u32;
        let rwx = (mode >> shift) & 7;
        s.push(if rwx & 4 != 0 { 'r' } else { '-' });
        s.push(if rwx & 2 != 0 { 'w' } else { '-' });
        let x = rwx & 1 != 0;
        s.push(match (mode & bit != 0, x) {
            (true, true) => *mark,
            (true, false) => mark.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day)
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn time_string(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Names for user and group ids, as `ls -l` prints them: the system's name
/// where it has one, else the number (as coreutils does).
pub trait Names {
    fn user(&self, uid: u32) -> String;
    fn group(&self, gid: u32) -> String;
}

/// The system's user and group databases (passwd and group, through NSS).
pub struct SystemNames;

impl Names for SystemNames {
    fn user(&self, uid: u32) -> String {
        uzers::get_user_by_uid(uid).map_or_else(|| uid.to_string(), |u| u.name().to_string_lossy().into_owned())
    }

    fn group(&self, gid: u32) -> String {
        uzers::get_group_by_gid(gid).map_or_else(|| gid.to_string(), |g| g.name().to_string_lossy().into_owned())
    }
}

/// One `ls -l` line.
pub fn long_line(a: &Attr, names: &dyn Names, name: &str, target: Option<&str>) -> String {
    let mut line = format!(
        "{} {:>3} {:>8} {:>8} {:>8} {} {name}",
        mode_string(a.kind, a.mode),
        a.nlink,
        names.user(a.uid),
        names.group(a.gid),
        a.size,
        &time_string(a.mtime)[..16]
    );
    if let Some(t) = target {
        line += &format!(" -> {t}");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_like_coreutils() {
        assert_eq!(mode_string(FileKind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(FileKind::Dir, 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(FileKind::File, 0o4644), "-rwSr--r--");
        assert_eq!(mode_string(FileKind::File, 0o2755), "-rwxr-sr-x");
        assert_eq!(mode_string(FileKind::Symlink, 0o777), "lrwxrwxrwx");
    }

    #[test]
    fn utc_times() {
        assert_eq!(time_string(0), "1970-01-01 00:00:00");
        assert_eq!(time_string(951_782_400 * 1_000_000_000), "2000-02-29 00:00:00");
        assert_eq!(time_string(1_795_219_200 * 1_000_000_000 + 3_661_000_000_000), "2026-11-21 01:01:01");
    }

    /// Names some ids and not others, as a system's databases do.
    struct Known;

    impl Names for Known {
        fn user(&self, uid: u32) -> String {
            if uid == 0 { "root".into() } else { uid.to_string() }
        }
        fn group(&self, gid: u32) -> String {
            if gid == 100 { "users".into() } else { gid.to_string() }
        }
    }

    #[test]
    fn a_long_line_names_owners_where_it_can_and_numbers_them_elsewhere() {
        let a = Attr { ino: 1, kind: FileKind::File, mode: 0o640, uid: 0, gid: 4242, size: 7, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
        assert_eq!(long_line(&a, &Known, "f", None), "-rw-r-----   1     root     4242        7 1970-01-01 00:00 f");
        let l = Attr { kind: FileKind::Symlink, mode: 0o777, uid: 4242, gid: 100, ..a };
        assert_eq!(long_line(&l, &Known, "l", Some("f")), "lrwxrwxrwx   1     4242    users        7 1970-01-01 00:00 l -> f");
        assert_eq!(SystemNames.user(0), "root", "the system's database");
    }
}
