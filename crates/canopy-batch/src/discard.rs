//! Removing a batch's directory once it is committed or aborted, so that a
//! process killed midway never leaves it half there under its own name (its
//! `batch.json` gone and its store still there, or the other way round): the
//! directory is first renamed aside, which is atomic, then removed. A batch
//! whose directory is gone from its name is over; what a kill left aside is
//! removed by the next discard under the same base, or the next `begin`.

use std::io;
use std::path::{Path, PathBuf};

/// How a directory renamed aside ends.
const ASIDE: &str = ".discarded";

/// Removes batch directory `dir`: renamed aside, then removed.
pub(crate) fn discard(dir: &Path) -> io::Result<()> {
    let aside = aside(dir);
    std::fs::rename(dir, &aside)?;
    remove(&aside)?;
    if let Some(base) = dir.parent() {
        sweep(base);
    }
    Ok(())
}

/// Removes what discards killed midway left aside under `base`.
pub(crate) fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        if is_aside(&e.file_name().to_string_lossy()) {
            let _ = remove(&e.path());
        }
    }
}

/// Whether a name under the batches' base is a directory renamed aside.
pub(crate) fn is_aside(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(ASIDE)
}

/// Where `dir` is renamed aside.
pub(crate) fn aside(dir: &Path) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.with_file_name(format!(".{name}{ASIDE}"))
}

/// `remove_dir_all`, where a tree another process removed meanwhile (a sweep)
/// counts as removed.
fn remove(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_dir(base: &Path, name: &str) -> PathBuf {
        let dir = base.join(name);
        std::fs::create_dir_all(dir.join("store")).unwrap();
        std::fs::write(dir.join("batch.json"), b"{}").unwrap();
        std::fs::write(dir.join("store").join("CURRENT"), b"x").unwrap();
        dir
    }

    #[test]
    fn a_discarded_directory_is_gone_and_nothing_is_left_aside() {
        let base = tempfile::tempdir().unwrap();
        let dir = batch_dir(base.path(), "00000000000000aa");
        discard(&dir).unwrap();
        assert!(!dir.exists());
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }

    #[test]
    fn what_a_killed_discard_left_aside_goes_with_the_next_sweep_and_the_rest_stays() {
        let base = tempfile::tempdir().unwrap();
        let killed = batch_dir(base.path(), "00000000000000aa");
        // Killed after the rename: the name is free, the tree is aside.
        std::fs::rename(&killed, aside(&killed)).unwrap();
        assert!(!killed.exists());
        let open = batch_dir(base.path(), "00000000000000bb");
        sweep(base.path());
        let left: Vec<String> = std::fs::read_dir(base.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(left, vec!["00000000000000bb".to_string()]);
        assert!(open.join("batch.json").exists());
    }

    #[test]
    fn only_names_renamed_aside_are_aside() {
        assert!(is_aside(&aside(Path::new("/b/00000000000000aa")).file_name().unwrap().to_string_lossy()));
        assert!(!is_aside("00000000000000aa"));
        assert!(!is_aside(".hidden"));
    }
}
