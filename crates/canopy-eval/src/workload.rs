//! The operations of seed 000's workloads, worked out up front per client:
//! mkdir waves, create in depth-first order, stat with uniform or Zipfian
//! file choice, a trace replay, and stats with directory chmods mixed in
//! (Figure 8).
//!
//! The trace replay stands in for the LinkedIn trace (not public). Its mix
//! follows Figure 2's shape, where open dominates and readdir comes next:
//! [`TRACE_MIX`]. The trace is cut into sub-traces of [`SUBTRACE`] consecutive
//! operations, dealt to the clients in turn, as the paper replays it. A
//! sub-trace works mostly in one directory and its neighbours (a job's
//! directory), which gives the locality a real trace has.

use crate::trees::{Namespace, ZIPF_EXPONENT};
use crate::zipf::Zipf;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Operations in one sub-trace of the replay.
pub const SUBTRACE: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Mkdir,
    Create,
    Stat,
    Readdir,
    Chmod,
    Unlink,
    Rename,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    Mkdir(String),
    Create(String),
    /// lstat; an `open` in the trace mix is a stat of an existing file.
    Stat(String),
    Readdir(String),
    Chmod(String, u32),
    Unlink(String),
    Rename(String, String),
}

impl Op {
    pub fn kind(&self) -> Kind {
        match self {
            Op::Mkdir(_) => Kind::Mkdir,
            Op::Create(_) => Kind::Create,
            Op::Stat(_) => Kind::Stat,
            Op::Readdir(_) => Kind::Readdir,
            Op::Chmod(..) => Kind::Chmod,
            Op::Unlink(_) => Kind::Unlink,
            Op::Rename(..) => Kind::Rename,
        }
    }
}

/// What each client does in one phase, in order. Waves run one after the
/// other (all clients finish one before the next starts: mkdir's levels).
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub waves: Vec<Vec<Vec<Op>>>,
}

impl Phase {
    pub fn ops(&self) -> usize {
        self.waves.iter().flatten().map(Vec::len).sum()
    }
}

/// `items` dealt to `clients` in contiguous runs (client c gets the c-th run).
fn in_runs(items: Vec<Op>, clients: usize) -> Vec<Vec<Op>> {
    let clients = clients.max(1);
    let per = items.len().div_ceil(clients).max(1);
    let mut out: Vec<Vec<Op>> = items.chunks(per).map(<[Op]>::to_vec).collect();
    out.resize(clients, Vec::new());
    out
}

/// Every directory, a wave per depth, each wave shared among the clients.
pub fn mkdirs(ns: &Namespace, clients: usize) -> Phase {
    let waves = ns.waves().into_iter().map(|w| in_runs(w.into_iter().map(|d| Op::Mkdir(ns.dirs[d].clone())).collect(), clients)).collect();
    Phase { waves }
}

/// Every file, in depth-first order, each client creating a contiguous run.
pub fn creates(ns: &Namespace, clients: usize) -> Phase {
    Phase { waves: vec![in_runs(ns.files.iter().cloned().map(Op::Create).collect(), clients)] }
}

/// How the stat phase picks its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    Uniform,
    Zipfian,
}

/// `per_client` stats for each client, files picked as `choice` says (Zipfian:
/// ranks of exponent 1.8 over the files in a seeded random order).
pub fn stats(ns: &Namespace, clients: usize, per_client: usize, choice: Choice, seed: u64) -> Phase {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n = ns.files.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    let zipf = Zipf::new(n, ZIPF_EXPONENT);
    let lists = (0..clients)
        .map(|_| {
            (0..per_client)
                .map(|_| {
                    let i = match choice {
                        Choice::Uniform => rng.gen_range(0..n),
                        Choice::Zipfian => order[zipf.sample(&mut rng) - 1],
                    };
                    Op::Stat(ns.files[i].clone())
                })
                .collect()
        })
        .collect();
    Phase { waves: vec![lists] }
}

/// The trace replay's operation mix, in parts per thousand: open (a stat of an
/// existing file) most, readdir next, then creates and the rest, with
/// directory-changing operations (mkdir, chmod of a directory) rare.
pub const TRACE_MIX: [(Kind, u32); 7] = [
    (Kind::Stat, 700),
    (Kind::Readdir, 130),
    (Kind::Create, 80),
    (Kind::Unlink, 40),
    (Kind::Rename, 20),
    (Kind::Mkdir, 20),
    (Kind::Chmod, 10),
];

/// The shape of one replay.
#[derive(Debug, Clone, Copy)]
pub struct TraceSpec {
    /// File operations (stat, create, unlink, rename) in all.
    pub file_ops: usize,
    /// Directory operations (readdir, mkdir, chmod of a directory) in all;
    /// fixed under weak scaling.
    pub dir_ops: usize,
    pub seed: u64,
}

/// A replay over `ns` as sub-traces of [`SUBTRACE`] operations dealt to
/// `clients` in turn. New names are unique across the whole replay (`tag`
/// keeps them apart from any other replay's).
pub fn trace(ns: &Namespace, clients: usize, spec: TraceSpec, tag: &str) -> Phase {
    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    let file_mix: Vec<(Kind, u32)> = TRACE_MIX.iter().copied().filter(|(k, _)| !is_dir_op(*k)).collect();
    let dir_mix: Vec<(Kind, u32)> = TRACE_MIX.iter().copied().filter(|(k, _)| is_dir_op(*k)).collect();
    // The directory operations fall at random places among the file operations.
    let total = spec.file_ops + spec.dir_ops;
    let mut is_dir = vec![false; total];
    for slot in rand::seq::index::sample(&mut rng, total, spec.dir_ops.min(total)) {
        is_dir[slot] = true;
    }
    let runs = file_runs(ns);
    let mut lists = vec![Vec::new(); clients.max(1)];
    let mut made = 0usize;
    for (s, chunk) in is_dir.chunks(SUBTRACE).enumerate() {
        let home = rng.gen_range(0..ns.dirs.len());
        let mut mine: Vec<String> = Vec::new();
        for &dir_op in chunk {
            let kind = pick(if dir_op { &dir_mix } else { &file_mix }, &mut rng);
            let near = near(ns, home, &mut rng);
            let op = match kind {
                Kind::Stat => Op::Stat(any_file_near(ns, &runs, near, &mut rng)),
                Kind::Create => {
                    made += 1;
                    let p = format!("{}/{tag}n{made}", ns.dirs[near]);
                    mine.push(p.clone());
                    Op::Create(p)
                }
                Kind::Unlink => match mine.pop() {
                    Some(p) => Op::Unlink(p),
                    None => Op::Stat(any_file_near(ns, &runs, near, &mut rng)),
                },
                Kind::Rename => match mine.pop() {
                    Some(p) => {
                        let to = format!("{p}r");
                        mine.push(to.clone());
                        Op::Rename(p, to)
                    }
                    None => Op::Stat(any_file_near(ns, &runs, near, &mut rng)),
                },
                Kind::Readdir => Op::Readdir(ns.dirs[near].clone()),
                Kind::Mkdir => {
                    made += 1;
                    Op::Mkdir(format!("{}/{tag}m{made}", ns.dirs[near]))
                }
                Kind::Chmod => Op::Chmod(ns.dirs[near].clone(), if rng.gen() { 0o755 } else { 0o775 }),
            };
            let client = s % lists.len();
            lists[client].push(op);
        }
    }
    Phase { waves: vec![lists] }
}

fn is_dir_op(k: Kind) -> bool {
    matches!(k, Kind::Readdir | Kind::Mkdir | Kind::Chmod)
}

fn pick(mix: &[(Kind, u32)], rng: &mut impl Rng) -> Kind {
    let total: u32 = mix.iter().map(|(_, w)| w).sum();
    let mut x = rng.gen_range(0..total);
    for &(k, w) in mix {
        if x < w {
            return k;
        }
        x -= w;
    }
    mix[mix.len() - 1].0
}

/// A sub-trace's directory most of the time, else its parent or anywhere.
fn near(ns: &Namespace, home: usize, rng: &mut impl Rng) -> usize {
    match rng.gen_range(0..10) {
        0..=6 => home,
        7 | 8 => ns.parent[home],
        _ => rng.gen_range(0..ns.dirs.len()),
    }
}

/// A file in directory `d`, or anywhere if it has none.
fn any_file_near(ns: &Namespace, runs: &[std::ops::Range<usize>], d: usize, rng: &mut impl Rng) -> String {
    let run = &runs[d];
    let i = if run.is_empty() { rng.gen_range(0..ns.files.len()) } else { rng.gen_range(run.clone()) };
    ns.files[i].clone()
}

/// Each directory's range of `ns.files` (files come in directory runs).
fn file_runs(ns: &Namespace) -> Vec<std::ops::Range<usize>> {
    let mut runs = vec![0..0; ns.dirs.len()];
    let mut start = 0;
    for j in 1..=ns.file_dir.len() {
        if j == ns.file_dir.len() || ns.file_dir[j] != ns.file_dir[start] {
            runs[ns.file_dir[start]] = start..j;
            start = j;
        }
    }
    runs
}

/// Figure 8's workload: each client stats `per_client` random files and, every
/// `stats_per_chmod` stats, chmods a random directory (group write added or
/// taken away).
pub fn stats_with_chmods(ns: &Namespace, clients: usize, per_client: usize, stats_per_chmod: usize, seed: u64) -> Phase {
    let mut phase = stats(ns, clients, per_client, Choice::Uniform, seed);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
    for list in &mut phase.waves[0] {
        let mut mixed = Vec::with_capacity(list.len() + list.len() / stats_per_chmod.max(1) + 1);
        for (i, op) in list.drain(..).enumerate() {
            if i % stats_per_chmod.max(1) == stats_per_chmod.max(1) - 1 {
                let d = rng.gen_range(0..ns.dirs.len());
                mixed.push(Op::Chmod(ns.dirs[d].clone(), if rng.gen() { 0o755 } else { 0o775 }));
            }
            mixed.push(op);
        }
        *list = mixed;
    }
    phase
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trees::{generate, Shape};

    fn all(p: &Phase) -> Vec<Op> {
        p.waves.iter().flatten().flatten().cloned().collect()
    }

    #[test]
    fn mkdir_waves_put_parents_first_and_cover_every_directory_once() {
        let ns = generate(Shape::Synthetic, "/e", 300, 1000, 1);
        let phase = mkdirs(&ns, 7);
        assert_eq!(phase.ops(), 300);
        let mut made = std::collections::HashSet::new();
        for wave in &phase.waves {
            assert_eq!(wave.len(), 7, "a list per client");
            let this: Vec<&Op> = wave.iter().flatten().collect();
            for op in &this {
                let Op::Mkdir(p) = op else { panic!("{op:?}") };
                let parent = &p[..p.rfind('/').unwrap()];
                assert!(parent == "/e" || made.contains(parent), "{p} before its parent");
            }
            for op in this {
                let Op::Mkdir(p) = op else { unreachable!() };
                assert!(made.insert(p.clone()));
            }
        }
    }

    #[test]
    fn creates_keep_depth_first_runs_per_client() {
        let ns = generate(Shape::Balanced, "/e", 11, 100, 1);
        let phase = creates(&ns, 3);
        let lists = &phase.waves[0];
        assert_eq!(lists.iter().map(Vec::len).collect::<Vec<_>>(), vec![34, 34, 32]);
        assert_eq!(all(&phase), ns.files.iter().cloned().map(Op::Create).collect::<Vec<_>>());
    }

    #[test]
    fn zipfian_stats_concentrate_on_few_files_and_uniform_ones_do_not() {
        let ns = generate(Shape::Balanced, "/e", 11, 1000, 1);
        let top_share = |choice| {
            let mut counts = std::collections::HashMap::new();
            for op in all(&stats(&ns, 4, 2500, choice, 9)) {
                *counts.entry(op).or_insert(0usize) += 1;
            }
            *counts.values().max().unwrap() as f64 / 10_000.0
        };
        assert!(top_share(Choice::Zipfian) > 0.3, "{}", top_share(Choice::Zipfian));
        assert!(top_share(Choice::Uniform) < 0.01, "{}", top_share(Choice::Uniform));
    }

    #[test]
    fn the_trace_has_its_mix_its_subtraces_and_only_legal_operations() {
        let ns = generate(Shape::Synthetic, "/e", 200, 5000, 1);
        let spec = TraceSpec { file_ops: 18_000, dir_ops: 2_000, seed: 4 };
        let phase = trace(&ns, 3, spec, "t");
        let ops = all(&phase);
        assert_eq!(ops.len(), 20_000);
        let lists = &phase.waves[0];
        // Sub-traces dealt in turn: client 0 gets sub-traces 0, 3, 6, ...
        assert_eq!(lists[0].len(), 34 * SUBTRACE);
        let count = |k: Kind| ops.iter().filter(|o| o.kind() == k).count();
        let dir_ops = count(Kind::Readdir) + count(Kind::Mkdir) + count(Kind::Chmod);
        assert_eq!(dir_ops, 2_000, "directory operations as asked");
        assert!(count(Kind::Stat) > count(Kind::Readdir) / 2 && count(Kind::Stat) > 10_000, "open dominates");
        // Each unlink or rename names a file its own sub-trace made and still has.
        let known: std::collections::HashSet<&String> = ns.files.iter().collect();
        for list in lists {
            let mut live = std::collections::HashSet::new();
            for op in list {
                match op {
                    Op::Create(p) => assert!(live.insert(p.clone()) && !known.contains(p)),
                    Op::Unlink(p) => assert!(live.remove(p), "{p}"),
                    Op::Rename(a, b) => assert!(live.remove(a) && live.insert(b.clone())),
                    Op::Stat(p) => assert!(known.contains(p)),
                    _ => {}
                }
            }
        }
        assert_eq!(all(&trace(&ns, 3, spec, "t")), ops, "the same for the same seed");
    }

    #[test]
    fn figure_8_mixes_a_chmod_in_every_so_many_stats() {
        let ns = generate(Shape::Balanced, "/e", 11, 100, 1);
        let phase = stats_with_chmods(&ns, 2, 100, 10, 1);
        let ops = all(&phase);
        assert_eq!(ops.iter().filter(|o| o.kind() == Kind::Stat).count(), 200);
        assert_eq!(ops.iter().filter(|o| o.kind() == Kind::Chmod).count(), 20);
    }
}
