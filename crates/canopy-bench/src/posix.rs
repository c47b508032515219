//! The phases as system calls on a directory of any file system (a Canopy FUSE
//! mount, tmpfs, ext4...), to compare them with each other under the same load.
//! The tree goes in a directory made for the run ([`BenchDir`]); each worker is an
//! OS thread blocked in its system call, as an application's thread would be.

use crate::drive::Workers;
use crate::plan::plan;
use crate::report::PhaseReport;
use crate::runner::BenchConfig;
use crate::target::BenchTarget;
use crate::workload::Tree;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The five operations as system calls. Paths are the host's, so no state.
#[derive(Debug, Clone, Copy)]
pub struct Posix;

impl BenchTarget for Posix {
    async fn mkdir(&self, path: &str, mode: u32) -> io::Result<()> {
        DirBuilder::new().mode(mode).create(path)
    }

    /// open(O_WRONLY | O_CREAT | O_EXCL), then close.
    async fn create(&self, path: &str, mode: u32) -> io::Result<()> {
        OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map(drop)
    }

    /// std's lstat (statx with AT_SYMLINK_NOFOLLOW where the kernel has it).
    async fn stat(&self, path: &str) -> io::Result<()> {
        fs::symlink_metadata(path).map(drop)
    }

    async fn chmod(&self, path: &str, mode: u32) -> io::Result<()> {
        fs::set_permissions(path, Permissions::from_mode(mode))
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(from, to)
    }

    async fn rmdir(&self, path: &str) -> io::Result<()> {
        fs::remove_dir(path)
    }
}

/// A directory made for one run, `DIR/canopy-bench-<pid>`: never one that held
/// anything before, so removing it afterwards removes only what the bench made.
/// It is removed when dropped unless kept; [`BenchDir::finish`] reports failures.
#[derive(Debug)]
pub struct BenchDir {
    dir: PathBuf,
    root: String,
    keep: bool,
}

impl BenchDir {
    /// Makes the run's directory in `dir`, which must be a directory; refuses if
    /// the run's directory exists.
    pub fn create(dir: &Path, keep: bool) -> Result<BenchDir, String> {
        match fs::metadata(dir) {
            Err(e) => return Err(format!("cannot use {}: {e}", dir.display())),
            Ok(m) if !m.is_dir() => return Err(format!("{} is not a directory", dir.display())),
            Ok(_) => {}
        }
        let path = dir.join(format!("canopy-bench-{}", std::process::id()));
        // Tree paths are strings (the Canopy client's paths are too).
        let root = path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))?.to_string();
        match fs::create_dir(&path) {
            Ok(()) => Ok(BenchDir { dir: dir.to_path_buf(), root, keep }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(format!("{root} already exists; remove it or bench another directory")),
            Err(e) => Err(format!("cannot create {root}: {e}")),
        }
    }

    /// The directory given.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the tree goes.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Removes the tree unless kept.
    pub fn finish(mut self) -> Result<(), String> {
        if self.keep {
            return Ok(());
        }
        // Whatever happens here, the drop that follows leaves it alone.
        self.keep = true;
        fs::remove_dir_all(&self.root).map_err(|e| format!("cannot remove {}: {e}", self.root))
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        // Only reached without `finish`, i.e. when the run failed.
        if !self.keep {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// Runs the phases of `cfg` in `dir` with `cfg.clients * cfg.inflight` threads
/// (`cfg.root` is Canopy's; the tree goes in `dir.root()`).
pub fn run(dir: &BenchDir, cfg: &BenchConfig) -> Result<Vec<PhaseReport>, String> {
    let tree = Tree::new(dir.root(), cfg.dirs, cfg.files);
    let steps = plan(&tree, &cfg.phases, cfg.stats, cfg.seed)?;
    let workers = Workers::threads(vec![Posix; cfg.clients.max(1) * cfg.inflight.max(1)])?;
    // Nothing here awaits anything but the pool's threads, so the simplest
    // executor will do; no tokio runtime is involved.
    futures::executor::block_on(async {
        let mut phases = Vec::new();
        for step in &steps {
            let Some(name) = &step.phase else {
                workers.setup(step).await?;
                continue;
            };
            let m = workers.measure(step, cfg.progress).await;
            phases.push(PhaseReport::new(name.clone(), step.ops() as u64, &m));
        }
        Ok(phases)
    })
}
