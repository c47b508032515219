//! The phases as steps, worked out before anything runs (so a bad phase name or a
//! stat phase without files fails at once): the operations of each phase, and the
//! unmeasured setup a phase needs when no earlier phase built its tree or files.

use crate::workload::{Op, Tree};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Paths one operation is applied to, by every worker at once.
pub type Batch = (Op, Arc<Vec<String>>);

#[derive(Debug, Clone)]
pub struct Step {
    /// The phase this step measures; `None` for setup, which is not measured and
    /// must not fail.
    pub phase: Option<String>,
    /// Run one after another: a batch starts when the previous one is done.
    pub batches: Vec<Batch>,
}

impl Step {
    pub fn ops(&self) -> usize {
        self.batches.iter().map(|(_, p)| p.len()).sum()
    }
}

/// The tree's directories, parents before children: one batch per depth.
fn mkdir_batches(tree: &Tree) -> Vec<Batch> {
    tree.levels.iter().map(|r| (Op::Mkdir, Arc::new(tree.dirs[r.clone()].to_vec()))).collect()
}

/// The tree's directories below its root, children before parents: one batch
/// per depth, deepest first. Only as the last phase, over a tree with no files
/// and no renames (each directory must be empty and where mkdir made it).
fn rmdir_batches(tree: &Tree, phases: &[String]) -> Result<Vec<Batch>, String> {
    let before = &phases[..phases.len() - 1];
    if phases.last().map(String::as_str) != Some("rmdir") || (!tree.files.is_empty() && before.iter().any(|p| p == "create" || p == "stat")) || before.iter().any(|p| p == "rename") {
        return Err("the rmdir phase removes the tree: it comes last, with no files (--files 0, or no create or stat phase) and no rename before it".into());
    }
    Ok(tree.levels.iter().skip(1).rev().map(|r| (Op::Rmdir, Arc::new(tree.dirs[r.clone()].to_vec()))).collect())
}

/// The steps of `phases` over `tree`; the stat phase picks `stats` files uniformly
/// at random, the same ones for the same `seed`.
pub fn plan(tree: &Tree, phases: &[String], stats: usize, seed: u64) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let (mut have_dirs, mut have_files) = (false, false);
    for name in phases {
        if !have_dirs && name != "mkdir" {
            steps.push(Step { phase: None, batches: mkdir_batches(tree) });
            have_dirs = true;
        }
        if name == "stat" && !have_files {
            steps.push(Step { phase: None, batches: vec![(Op::Create, Arc::new(tree.files.clone()))] });
            have_files = true;
        }
        let batches = match name.as_str() {
            "mkdir" => {
                have_dirs = true;
                mkdir_batches(tree)
            }
            "create" => {
                have_files = true;
                vec![(Op::Create, Arc::new(tree.files.clone()))]
            }
            "stat" => {
                if tree.files.is_empty() {
                    return Err("the stat phase needs files".into());
                }
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let picks = (0..stats).map(|_| tree.files[rng.gen_range(0..tree.files.len())].clone()).collect();
                vec![(Op::Stat, Arc::new(picks))]
            }
            "chmod" => vec![(Op::Chmod, Arc::new(tree.dirs.clone()))],
            "rename" => vec![(Op::Rename, Arc::new(tree.leaves()))],
            "rmdir" => rmdir_batches(tree, phases)?,
            other => return Err(format!("unknown phase {other:?} (phases: mkdir, create, stat, chmod, rename, rmdir)")),
        };
        steps.push(Step { phase: Some(name.clone()), batches });
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Each step as (phase or "setup", [(op, paths)]).
    fn shape(steps: &[Step]) -> Vec<(String, Vec<(Op, usize)>)> {
        steps.iter().map(|s| (s.phase.clone().unwrap_or("setup".into()), s.batches.iter().map(|(op, p)| (*op, p.len())).collect())).collect()
    }

    #[test]
    fn all_phases_in_order_need_no_setup() {
        let tree = Tree::new("/b", 25, 7);
        let steps = plan(&tree, &names(&["mkdir", "create", "stat", "chmod", "rename"]), 30, 1).unwrap();
        let expected = vec![
            ("mkdir".to_string(), vec![(Op::Mkdir, 1), (Op::Mkdir, 10), (Op::Mkdir, 14)]),
            ("create".to_string(), vec![(Op::Create, 7)]),
            ("stat".to_string(), vec![(Op::Stat, 30)]),
            ("chmod".to_string(), vec![(Op::Chmod, 25)]),
            ("rename".to_string(), vec![(Op::Rename, 22)]),
        ];
        assert_eq!(shape(&steps), expected);
        assert_eq!(steps.iter().map(Step::ops).sum::<usize>(), 25 + 7 + 30 + 25 + 22);
    }

    #[test]
    fn a_phase_gets_the_tree_and_files_it_needs_as_setup() {
        let tree = Tree::new("/b", 3, 5);
        let step = |name: &str, batches: Vec<(Op, usize)>| (name.to_string(), batches);
        let setup_dirs = step("setup", vec![(Op::Mkdir, 1), (Op::Mkdir, 2)]);
        assert_eq!(shape(&plan(&tree, &names(&["stat"]), 4, 1).unwrap()), vec![setup_dirs.clone(), step("setup", vec![(Op::Create, 5)]), step("stat", vec![(Op::Stat, 4)])]);
        assert_eq!(shape(&plan(&tree, &names(&["chmod"]), 4, 1).unwrap()), vec![setup_dirs.clone(), step("chmod", vec![(Op::Chmod, 3)])]);
        let create_stat = plan(&tree, &names(&["create", "stat"]), 4, 1).unwrap();
        assert_eq!(shape(&create_stat), vec![setup_dirs, step("create", vec![(Op::Create, 5)]), step("stat", vec![(Op::Stat, 4)])]);
    }

    #[test]
    fn rmdir_removes_the_tree_below_its_root_deepest_first_and_only_last() {
        let tree = Tree::new("/b", 25, 0);
        let steps = plan(&tree, &names(&["mkdir", "chmod", "rmdir"]), 0, 1).unwrap();
        assert_eq!(shape(&steps)[2], ("rmdir".to_string(), vec![(Op::Rmdir, 14), (Op::Rmdir, 10)]));
        let deepest = &steps[2].batches[0].1;
        assert!(deepest.iter().all(|d| tree.dirs[tree.levels[2].clone()].contains(d)));
        for bad in [&["rmdir", "mkdir"][..], &["mkdir", "rename", "rmdir"]] {
            assert!(plan(&tree, &names(bad), 0, 1).is_err(), "{bad:?}");
        }
        let with_files = Tree::new("/b", 25, 7);
        assert!(plan(&with_files, &names(&["mkdir", "create", "rmdir"]), 0, 1).is_err());
        assert!(plan(&with_files, &names(&["mkdir", "rmdir"]), 0, 1).is_ok(), "files never made");
    }

    #[test]
    fn stat_picks_depend_only_on_the_seed() {
        let tree = Tree::new("/b", 3, 50);
        let picks = |seed| plan(&tree, &names(&["create", "stat"]), 20, seed).unwrap()[2].batches[0].1.clone();
        assert_eq!(picks(7), picks(7));
        assert_ne!(picks(7), picks(8));
        assert!(picks(7).iter().all(|p| tree.files.contains(p)));
    }

    #[test]
    fn bad_phases_fail_before_anything_runs() {
        let tree = Tree::new("/b", 3, 0);
        assert_eq!(plan(&tree, &names(&["mkdir", "stat"]), 4, 1).unwrap_err(), "the stat phase needs files");
        let err = plan(&tree, &names(&["mkdir", "unlink"]), 4, 1).unwrap_err();
        assert!(err.starts_with("unknown phase \"unlink\""), "{err}");
    }
}
