//! The namespaces of seed 000 §4.1, scaled down: a balanced tree, a Zipfian
//! tree, and a synthetic tree shaped like the trace namespaces of §2.
//!
//! - **Balanced:** every internal directory has [`FANOUT`] subdirectories, to
//!   `height` levels below the top directory; the files are shared equally by
//!   the leaves (the paper: height 5, 111K directories, 1,280 files a leaf).
//! - **Zipfian:** the same directories; each leaf's size is drawn from a Zipf
//!   distribution of exponent 1.8, then all are scaled to the same total.
//! - **Synthetic:** a stand-in for the paper's Mimesis tree and the LinkedIn
//!   namespace, which are not public. It follows the statistics §2 gives:
//!   directory sizes heavy-tailed (about 90% of directories hold fewer than
//!   128 entries, a few are very large) and trees shallow (90% of directories
//!   at depth 16 or less). Each directory after the first is placed under a
//!   directory chosen uniformly among those less than [`MAX_DEPTH`] deep (a
//!   random recursive tree: depth grows with the log of the count); each
//!   directory's share of the files is drawn from a Pareto distribution of
//!   index 1.1, so most are small and a handful take much of the total.
//!
//! Directories come parents first; files come in depth-first order, the order
//! the paper's create phase uses (it keeps path locality).

use crate::zipf::Zipf;
use rand::{Rng, SeedableRng};
use serde::Serialize;

pub const FANOUT: usize = 10;
/// How deep the synthetic tree's directories may go.
pub const MAX_DEPTH: usize = 16;
/// The Zipfian tree's exponent, and the Zipfian file choice's (seed 000 §4.1).
pub const ZIPF_EXPONENT: f64 = 1.8;
/// The synthetic tree's Pareto index for directory sizes.
const PARETO_INDEX: f64 = 1.1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    Balanced,
    Zipfian,
    Synthetic,
}

impl Shape {
    pub const ALL: [Shape; 3] = [Shape::Balanced, Shape::Zipfian, Shape::Synthetic];

    pub fn name(self) -> &'static str {
        match self {
            Shape::Balanced => "balanced",
            Shape::Zipfian => "zipfian",
            Shape::Synthetic => "synthetic",
        }
    }
}

/// A namespace to build: its directories (parents first) and files.
#[derive(Debug, Clone)]
pub struct Namespace {
    /// Directory paths; `parent[i]` is the index of directory i's parent (the
    /// top directory's is itself), and parents come before their children.
    pub dirs: Vec<String>,
    pub parent: Vec<usize>,
    pub depth: Vec<usize>,
    /// File paths, depth-first; `file_dir[j]` is the index of file j's directory.
    pub files: Vec<String>,
    pub file_dir: Vec<usize>,
}

impl Namespace {
    /// The directories in creation waves: every directory of a wave has its
    /// parent in an earlier one.
    pub fn waves(&self) -> Vec<Vec<usize>> {
        let deepest = self.depth.iter().copied().max().unwrap_or(0);
        let mut waves = vec![Vec::new(); deepest + 1];
        for (i, &d) in self.depth.iter().enumerate() {
            waves[d].push(i);
        }
        waves
    }

    /// The tree `canopy bench` makes: its directories, and its files dealt
    /// round-robin over all of them (in that order).
    pub fn from_bench_tree(t: &canopy_bench::workload::Tree) -> Namespace {
        let index: std::collections::HashMap<&str, usize> = t.dirs.iter().enumerate().map(|(i, d)| (d.as_str(), i)).collect();
        let parent: Vec<usize> = t.dirs.iter().enumerate().map(|(i, d)| d.rfind('/').and_then(|cut| index.get(&d[..cut]).copied()).unwrap_or(i)).collect();
        let mut depth = vec![0; parent.len()];
        for i in 0..parent.len() {
            if parent[i] != i {
                depth[i] = depth[parent[i]] + 1;
            }
        }
        let file_dir = (0..t.files.len()).map(|j| j % t.dirs.len().max(1)).collect();
        Namespace { dirs: t.dirs.clone(), parent, depth, files: t.files.clone(), file_dir }
    }

    /// How many files each directory holds.
    pub fn sizes(&self) -> Vec<usize> {
        let mut sizes = vec![0; self.dirs.len()];
        for &d in &self.file_dir {
            sizes[d] += 1;
        }
        sizes
    }
}

/// The namespace of `shape` under `root`: about `dirs` directories (balanced and
/// Zipfian: the complete tree of [`FANOUT`] with at least that many) and exactly
/// `files` files, the same for the same `seed`.
pub fn generate(shape: Shape, root: &str, dirs: usize, files: usize, seed: u64) -> Namespace {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (parent, depth) = match shape {
        Shape::Balanced | Shape::Zipfian => complete_tree(dirs),
        Shape::Synthetic => random_tree(dirs, &mut rng),
    };
    let weights: Vec<f64> = match shape {
        Shape::Balanced => leaf_mask(&parent).into_iter().map(|leaf| if leaf { 1.0 } else { 0.0 }).collect(),
        Shape::Zipfian => {
            let z = Zipf::new(files.max(1), ZIPF_EXPONENT);
            leaf_mask(&parent).into_iter().map(|leaf| if leaf { z.sample(&mut rng) as f64 } else { 0.0 }).collect()
        }
        Shape::Synthetic => (0..parent.len()).map(|_| pareto(&mut rng)).collect(),
    };
    let sizes = apportion(&weights, files);
    let paths = dir_paths(root, &parent);
    let mut ns = Namespace { dirs: paths, parent, depth, files: Vec::with_capacity(files), file_dir: Vec::with_capacity(files) };
    for d in preorder(&ns.parent) {
        for j in 0..sizes[d] {
            ns.files.push(format!("{}/f{j}", ns.dirs[d]));
            ns.file_dir.push(d);
        }
    }
    ns
}

/// The smallest complete tree of fan-out [`FANOUT`] with at least `n`
/// directories: (parent, depth) of each, level by level.
fn complete_tree(n: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut count, mut level) = (1, 1);
    while count < n.max(1) {
        level *= FANOUT;
        count += level;
    }
    let parent: Vec<usize> = (0..count).map(|i| if i == 0 { 0 } else { (i - 1) / FANOUT }).collect();
    let mut depth = vec![0; count];
    for i in 1..count {
        depth[i] = depth[parent[i]] + 1;
    }
    (parent, depth)
}

/// `n` directories, each after the first under one chosen uniformly among
/// those shallower than [`MAX_DEPTH`].
fn random_tree(n: usize, rng: &mut impl Rng) -> (Vec<usize>, Vec<usize>) {
    let n = n.max(1);
    let (mut parent, mut depth) = (vec![0], vec![0]);
    let mut open = vec![0];
    for i in 1..n {
        let p = open[rng.gen_range(0..open.len())];
        parent.push(p);
        depth.push(depth[p] + 1);
        if depth[i] < MAX_DEPTH {
            open.push(i);
        }
    }
    (parent, depth)
}

/// A Pareto draw of index [`PARETO_INDEX`] and minimum 1.
fn pareto(rng: &mut impl Rng) -> f64 {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    u.powf(-1.0 / PARETO_INDEX)
}

/// Which directories have no subdirectory.
fn leaf_mask(parent: &[usize]) -> Vec<bool> {
    let mut leaf = vec![true; parent.len()];
    for &p in parent.iter().skip(1) {
        leaf[p] = false;
    }
    leaf
}

/// `total` shared out in proportion to `weights`, summing to exactly `total`
/// (largest remainders get the units rounding left over).
fn apportion(weights: &[f64], total: usize) -> Vec<usize> {
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| w / sum * total as f64).collect();
    let mut sizes: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    let short = total - sizes.iter().sum::<usize>();
    for &i in order.iter().take(short) {
        sizes[i] += 1;
    }
    sizes
}

fn dir_paths(root: &str, parent: &[usize]) -> Vec<String> {
    let mut paths: Vec<String> = Vec::with_capacity(parent.len());
    for (i, &p) in parent.iter().enumerate() {
        let path = if i == 0 { format!("{root}/d0") } else { format!("{}/d{i}", paths[p]) };
        paths.push(path);
    }
    paths
}

/// Directory indexes in depth-first (pre-)order.
fn preorder(parent: &[usize]) -> Vec<usize> {
    let mut children = vec![Vec::new(); parent.len()];
    for (i, &p) in parent.iter().enumerate().skip(1) {
        children[p].push(i);
    }
    let mut out = Vec::with_capacity(parent.len());
    let mut stack = vec![0];
    while let Some(d) = stack.pop() {
        out.push(d);
        stack.extend(children[d].iter().rev());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_well_formed(ns: &Namespace) {
        for (i, &p) in ns.parent.iter().enumerate().skip(1) {
            assert!(p < i, "parents first");
            assert!(ns.dirs[i].starts_with(&format!("{}/", ns.dirs[p])));
            assert_eq!(ns.depth[i], ns.depth[p] + 1);
        }
        for (f, &d) in ns.files.iter().zip(&ns.file_dir) {
            assert!(f.starts_with(&format!("{}/f", ns.dirs[d])));
        }
        let unique: std::collections::HashSet<&String> = ns.files.iter().chain(&ns.dirs).collect();
        assert_eq!(unique.len(), ns.files.len() + ns.dirs.len(), "every path once");
    }

    #[test]
    fn the_balanced_tree_shares_files_equally_among_its_leaves() {
        let ns = generate(Shape::Balanced, "/e", 111, 5000, 1);
        check_well_formed(&ns);
        assert_eq!(ns.dirs.len(), 111);
        assert_eq!(ns.files.len(), 5000);
        let sizes = ns.sizes();
        let leaves: Vec<usize> = (11..111).map(|i| sizes[i]).collect();
        assert!(leaves.iter().all(|&s| s == 50), "{leaves:?}");
        assert!(sizes[..11].iter().all(|&s| s == 0), "internal directories hold no files");
        assert_eq!(ns.waves().iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 10, 100]);
    }

    #[test]
    fn the_zipfian_tree_has_a_few_huge_leaves_and_many_small_ones() {
        let ns = generate(Shape::Zipfian, "/e", 111, 100_000, 1);
        check_well_formed(&ns);
        assert_eq!(ns.files.len(), 100_000);
        let mut leaves: Vec<usize> = ns.sizes()[11..].to_vec();
        leaves.sort_unstable();
        let median = leaves[leaves.len() / 2];
        let largest = *leaves.last().unwrap();
        assert!(largest > 20 * median.max(1), "skewed: median {median}, largest {largest}");
        assert_ne!(generate(Shape::Zipfian, "/e", 111, 100_000, 2).sizes(), ns.sizes(), "the seed matters");
        assert_eq!(generate(Shape::Zipfian, "/e", 111, 100_000, 1).files, ns.files, "and only the seed");
    }

    #[test]
    fn the_synthetic_tree_follows_the_traces_statistics() {
        let ns = generate(Shape::Synthetic, "/e", 2000, 200_000, 3);
        check_well_formed(&ns);
        assert_eq!((ns.dirs.len(), ns.files.len()), (2000, 200_000));
        let sizes = ns.sizes();
        let small = sizes.iter().filter(|&&s| s < 128).count() as f64 / sizes.len() as f64;
        assert!((0.8..0.97).contains(&small), "about 90% of directories under 128 entries: {small}");
        let largest = *sizes.iter().max().unwrap();
        assert!(largest > 2000, "a few very large directories: {largest}");
        assert!(ns.depth.iter().all(|&d| d <= MAX_DEPTH));
        let shallow = ns.depth.iter().filter(|&&d| d <= 16).count();
        assert_eq!(shallow, ns.depth.len());
        assert!(ns.depth.iter().max().unwrap() >= &5, "not flat");
    }

    #[test]
    fn files_come_depth_first() {
        let ns = generate(Shape::Balanced, "/e", 11, 20, 1);
        let mut seen = Vec::new();
        for &d in &ns.file_dir {
            if seen.last() != Some(&d) {
                assert!(!seen.contains(&d), "a directory's files are together");
                seen.push(d);
            }
        }
        assert_eq!(seen, (1..11).collect::<Vec<_>>());
    }

    #[test]
    fn the_bench_tree_converts_with_its_parents_and_files() {
        let t = canopy_bench::workload::Tree::new("/b", 25, 60);
        let ns = Namespace::from_bench_tree(&t);
        assert_eq!(ns.dirs, t.dirs);
        assert_eq!(ns.files, t.files);
        assert_eq!((ns.parent[0], ns.parent[3], ns.parent[11], ns.parent[24]), (0, 0, 1, 2));
        assert_eq!(ns.waves().iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 10, 14]);
        for (f, &d) in ns.files.iter().zip(&ns.file_dir) {
            assert_eq!(&f[..f.rfind('/').unwrap()], ns.dirs[d]);
        }
    }

    #[test]
    fn apportioning_keeps_the_total() {
        assert_eq!(apportion(&[1.0, 1.0, 1.0], 10).iter().sum::<usize>(), 10);
        assert_eq!(apportion(&[0.0, 3.0, 1.0], 8), vec![0, 6, 2]);
        assert_eq!(apportion(&[0.0, 0.0], 5), vec![0, 0]);
    }
}
