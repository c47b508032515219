//! The benchmark namespace: a tree of directories of fan-out [`FANOUT`] under one
//! root, and files spread round-robin over the directories (seed 000's
//! microbenchmarks create a tree, then files in it, then stat them at random).

pub const FANOUT: usize = 10;

/// What a phase does to each of its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// With mode [`DIR_MODE`].
    Mkdir,
    /// An exclusive create with mode [`FILE_MODE`].
    Create,
    /// lstat.
    Stat,
    /// To [`CHMOD_MODE`].
    Chmod,
    /// To [`renamed`] of the path.
    Rename,
    /// Of an empty directory.
    Rmdir,
}

pub const DIR_MODE: u32 = 0o755;
pub const FILE_MODE: u32 = 0o644;
/// What the chmod phase sets on every directory: group write added to
/// [`DIR_MODE`], a monotonic change.
pub const CHMOD_MODE: u32 = 0o775;

/// Paths of the bench tree, computed up front so workers only index into them.
#[derive(Debug, Clone)]
pub struct Tree {
    pub root: String,
    /// Directory paths in creation order; `levels[d]` is the range at depth d.
    pub dirs: Vec<String>,
    pub levels: Vec<std::ops::Range<usize>>,
    pub files: Vec<String>,
}

impl Tree {
    /// `dirs` directories (node i's parent is node (i-1)/FANOUT) and `files` files.
    pub fn new(root: &str, dirs: usize, files: usize) -> Tree {
        let dirs = dirs.max(1);
        let mut paths: Vec<String> = Vec::with_capacity(dirs);
        let mut depth: Vec<usize> = Vec::with_capacity(dirs);
        for i in 0..dirs {
            if i == 0 {
                paths.push(format!("{root}/d0"));
                depth.push(0);
            } else {
                let parent = (i - 1) / FANOUT;
                paths.push(format!("{}/d{i}", paths[parent]));
                depth.push(depth[parent] + 1);
            }
        }
        let mut levels = Vec::new();
        let mut start = 0;
        for i in 1..=dirs {
            if i == dirs || depth[i] != depth[start] {
                levels.push(start..i);
                start = i;
            }
        }
        let files = (0..files).map(|j| format!("{}/f{j}", paths[j % dirs])).collect();
        Tree { root: root.to_string(), dirs: paths, levels, files }
    }
}

impl Tree {
    /// Directories with no subdirectory (node i has children from FANOUT*i + 1).
    pub fn leaves(&self) -> Vec<String> {
        (0..self.dirs.len()).filter(|i| FANOUT * i + 1 >= self.dirs.len()).map(|i| self.dirs[i].clone()).collect()
    }
}

/// The new name a leaf directory gets in the rename phase.
pub fn renamed(path: &str) -> String {
    format!("{path}-renamed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_come_before_children() {
        let t = Tree::new("/b", 25, 7);
        assert_eq!(t.dirs[0], "/b/d0");
        assert_eq!(t.dirs[1], "/b/d0/d1");
        assert_eq!(t.dirs[11], "/b/d0/d1/d11");
        assert_eq!(t.levels, vec![0..1, 1..11, 11..25]);
        assert_eq!(t.files[3], "/b/d0/d3/f3");
        let leaves = t.leaves();
        assert_eq!(leaves.len(), 25 - 3, "d0, d1 and d2 have children");
        assert!(!leaves.contains(&"/b/d0/d1".to_string()));
        assert!(leaves.contains(&"/b/d0/d3".to_string()));
        for (i, d) in t.dirs.iter().enumerate().skip(1) {
            let parent = &d[..d.rfind('/').unwrap()];
            let pi = t.dirs.iter().position(|p| p == parent).unwrap();
            assert!(pi < i);
        }
    }
}
