//! The experiments behind each figure, on simulated clusters of every mode
//! this build has. Each returns the rows of its figure.
//!
//! - Figure 6 (a, b, c): the three trees at [`Profile::fig6_servers`] servers
//!   and as many clients: create, then stats with uniform and with Zipfian
//!   file choice. RPC amplification and load variance come from the
//!   in-process run; throughput per server from the discrete-event simulation
//!   of what that run recorded. Stats start from cold caches (the paper's query
//!   phase follows the create phase with new clients); the same stats again
//!   give the warm figure.
//! - Figure 7: the trace replay on the synthetic tree at each server count,
//!   with strong scaling (the same work at every size) and weak scaling (files
//!   and file operations grow with the servers; directories and directory
//!   operations stay fixed).
//! - Figure 8: stats with directory chmods mixed in, latency percentiles
//!   measured in real time on an in-process cluster (lease waits are real).

use crate::des::{simulate_waves, Costs};
use crate::run::{Outcome, SimCluster};
use crate::trees::{generate, Namespace, Shape};
use crate::workload::{creates, mkdirs, stats, stats_with_chmods, trace, Choice, Kind, Phase, TraceSpec};
use canopy_proto::modes::{IndexFsOptions, LeasePolicy, ModeOptions};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use std::collections::BTreeMap;

/// How big each experiment is.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub name: &'static str,
    pub fig6_servers: u32,
    /// Directories of each Figure 6 tree, and files per server.
    pub fig6_dirs: usize,
    pub fig6_files_per_server: usize,
    pub fig6_stats_per_client: usize,
    pub scaling: Vec<u32>,
    /// The trace replay at the smallest size (weak scaling multiplies files
    /// and file operations by servers / that size).
    pub trace_dirs: usize,
    pub trace_files: usize,
    pub trace_file_ops: usize,
    pub trace_dir_ops: usize,
    pub fig8_servers: u32,
    pub fig8_stats_per_client: usize,
    pub fig8_stats_per_chmod: usize,
    /// Operations each simulated client keeps in flight.
    pub inflight: usize,
    /// The real calibration benches: how many, and their creates and stats.
    pub calibration_runs: usize,
    pub calibration_files: usize,
    pub calibration_stats: usize,
    pub seed: u64,
}

impl Profile {
    /// Under 5 minutes on a 2-core machine; what CI runs.
    pub fn quick() -> Profile {
        Profile {
            name: "quick",
            fig6_servers: 64,
            fig6_dirs: 111,
            fig6_files_per_server: 1_500,
            fig6_stats_per_client: 1_500,
            scaling: vec![8, 16, 32, 64, 128],
            trace_dirs: 200,
            trace_files: 2_000,
            trace_file_ops: 4_000,
            trace_dir_ops: 400,
            fig8_servers: 8,
            fig8_stats_per_client: 300,
            fig8_stats_per_chmod: 50,
            inflight: 16,
            calibration_runs: 3,
            calibration_files: 100_000,
            calibration_stats: 200_000,
            seed: 42,
        }
    }

    /// The full profile: ten times the work.
    pub fn full() -> Profile {
        Profile {
            name: "full",
            fig6_dirs: 1_111,
            fig6_files_per_server: 5_000,
            fig6_stats_per_client: 5_000,
            trace_dirs: 2_000,
            trace_files: 20_000,
            trace_file_ops: 40_000,
            trace_dir_ops: 4_000,
            fig8_stats_per_client: 2_000,
            calibration_files: 500_000,
            calibration_stats: 1_000_000,
            ..Profile::quick()
        }
    }
}

/// Figure 6: one row per mode, tree and phase.
#[derive(Debug, Clone, Serialize)]
pub struct Fig6Row {
    pub mode: String,
    pub tree: &'static str,
    /// create, stat-uniform or stat-zipfian.
    pub phase: &'static str,
    pub servers: u32,
    pub ops: u64,
    pub errors: u64,
    /// Simulated.
    pub ops_per_sec_per_server: f64,
    pub rpc_amplification: f64,
    pub load_cov: f64,
    /// The same stats again, caches warm (stat phases).
    pub warm_rpc_amplification: Option<f64>,
    pub cache_hit_ratio: Option<f64>,
}

/// Figure 7: one row per mode, scaling and size.
#[derive(Debug, Clone, Serialize)]
pub struct Fig7Row {
    pub mode: String,
    /// strong or weak.
    pub scaling: &'static str,
    pub servers: u32,
    pub ops: u64,
    pub errors: u64,
    /// Simulated, all servers together.
    pub ops_per_sec: f64,
    pub ops_per_sec_per_server: f64,
    pub rpc_amplification: f64,
    pub load_cov: f64,
    pub lease_waits: u64,
    /// Simulated: the share of the run the busiest server, and the lock
    /// service, were serving (what bounds the throughput).
    pub busiest_server_utilization: f64,
    pub lockd_utilization: f64,
}

/// Figure 8: one row per mode and operation.
#[derive(Debug, Clone, Serialize)]
pub struct Fig8Row {
    pub mode: String,
    /// The mode and, for IndexFS, its lease (`indexfs 250ms`): a series.
    pub config: String,
    /// stat or chmod (of a directory).
    pub op: &'static str,
    pub servers: u32,
    pub count: u64,
    pub p50_us: f64,
    pub p70_us: f64,
    pub p99_us: f64,
    pub lease_waits: u64,
}

/// Reports each phase as it goes: a progress bar on a terminal, else a line.
#[derive(Clone)]
pub struct Progress {
    /// The bars of phases running at once, drawn together; none off a terminal.
    bars: Option<MultiProgress>,
}

impl Progress {
    pub fn new(terminal: bool) -> Progress {
        Progress { bars: terminal.then(MultiProgress::new) }
    }

    pub fn bar(&self, what: &str, ops: usize) -> ProgressBar {
        let Some(bars) = &self.bars else {
            eprintln!("canopy eval: {what} ({ops} operations)");
            return ProgressBar::hidden();
        };
        let bar = bars.add(ProgressBar::new(ops as u64));
        bar.set_style(ProgressStyle::with_template("{msg:48} [{bar:30}] {pos}/{len}").expect("valid template").progress_chars("=> "));
        bar.set_message(what.to_string());
        bar
    }

    /// Ends `bar`: off the terminal, a line with the phase's wall time.
    pub fn done(&self, bar: &ProgressBar, what: &str, seconds: f64) {
        bar.finish_and_clear();
        if self.bars.is_none() {
            eprintln!("canopy eval: {what}: {seconds:.1} s");
        }
    }
}

fn errors_of(what: &str, o: &Outcome) -> Result<(), String> {
    if o.errors == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {} operations failed, e.g. {}", o.errors, o.error_samples.join("; ")))
    }
}

/// Runs `phase` on `sim` with a progress bar; setup phases must not fail.
async fn run(sim: &SimCluster, phase: &Phase, what: &str, progress: &Progress) -> Result<Outcome, String> {
    let bar = progress.bar(what, phase.ops());
    let out = sim.run(phase, &bar).await;
    progress.done(&bar, what, out.seconds);
    errors_of(what, &out)?;
    Ok(out)
}

/// The namespace's directories and files, made on `sim` (not measured).
async fn build(sim: &SimCluster, ns: &Namespace, clients: usize, what: &str, progress: &Progress) -> Result<(Outcome, Outcome), String> {
    sim.make_root(ROOT).await.map_err(|e| format!("mkdir {ROOT}: {e}"))?;
    let m = run(sim, &mkdirs(ns, clients), &format!("{what}: mkdir"), progress).await?;
    let c = run(sim, &creates(ns, clients), &format!("{what}: create"), progress).await?;
    Ok((m, c))
}

/// Where each experiment's namespace goes.
pub const ROOT: &str = "/eval";

/// Simulated throughput of what `o` recorded.
fn simulated(servers: u32, o: &Outcome, inflight: usize, costs: Costs) -> f64 {
    simulate_waves(servers, &o.waves, inflight, costs).ops_per_sec()
}

pub async fn fig6(modes: &[&'static str], p: &Profile, costs: &BTreeMap<String, Costs>, progress: &Progress) -> Result<Vec<Fig6Row>, String> {
    let n = p.fig6_servers;
    let clients = n as usize;
    let mut rows = Vec::new();
    for &mode in modes {
        let cost = costs[mode];
        for shape in Shape::ALL {
            let what = format!("fig6 {mode} {} tree", shape.name());
            let sim = SimCluster::start(named(mode), n, clients);
            let ns = generate(shape, ROOT, p.fig6_dirs, p.fig6_files_per_server * n as usize, p.seed);
            let (_, created) = build(&sim, &ns, clients, &what, progress).await?;
            let row = |phase: &'static str, o: &Outcome, warm: Option<&Outcome>| {
                let s = o.structure(n);
                Fig6Row {
                    mode: mode.to_string(),
                    tree: shape.name(),
                    phase,
                    servers: n,
                    ops: o.ops,
                    errors: o.errors,
                    ops_per_sec_per_server: simulated(n, o, p.inflight, cost) / n as f64,
                    rpc_amplification: s.rpc_amplification,
                    load_cov: s.load_cov,
                    warm_rpc_amplification: warm.map(|w| w.structure(n).rpc_amplification),
                    cache_hit_ratio: o.cache_hit_ratio(),
                }
            };
            rows.push(row("create", &created, None));
            for (choice, phase) in [(Choice::Uniform, "stat-uniform"), (Choice::Zipfian, "stat-zipfian")] {
                sim.drop_caches();
                let work = stats(&ns, clients, p.fig6_stats_per_client, choice, p.seed + 1);
                let cold = run(&sim, &work, &format!("{what}: {phase}"), progress).await?;
                let warm = run(&sim, &work, &format!("{what}: {phase}, warm"), progress).await?;
                rows.push(row(phase, &cold, Some(&warm)));
            }
            sim.finish();
        }
    }
    Ok(rows)
}

/// How many Figure 7 clusters run at once: an IndexFS run spends most of its
/// wall time waiting out leases, not computing.
const FIG7_AT_ONCE: usize = 8;

pub async fn fig7(modes: &[&'static str], p: &Profile, costs: &BTreeMap<String, Costs>, progress: &Progress) -> Result<Vec<Fig7Row>, String> {
    let base = p.scaling.first().copied().unwrap_or(8).max(1);
    let mut jobs = Vec::new();
    for &mode in modes {
        for &n in &p.scaling {
            for scaling in ["strong", "weak"] {
                // Weak scaling at the smallest size is strong scaling's workload.
                if !(scaling == "weak" && n == base) {
                    jobs.push((mode, n, scaling));
                }
            }
        }
    }
    // Each on a task of its own, so they share both cores.
    let runs = jobs.into_iter().map(|(mode, n, scaling)| {
        let (p, progress, costs) = (p.clone(), progress.clone(), costs[mode]);
        async move { tokio::spawn(async move { fig7_run(mode, n, scaling, base, &p, costs, &progress).await }).await.map_err(|e| format!("fig7 {mode} {n}: {e}"))? }
    });
    let mut rows: Vec<Fig7Row> = futures::stream::iter(runs).buffered(FIG7_AT_ONCE).try_collect().await?;
    let same: Vec<Fig7Row> = rows.iter().filter(|r| r.servers == base).map(|r| Fig7Row { scaling: "weak", ..r.clone() }).collect();
    rows.extend(same);
    rows.sort_by_key(|r| (modes.iter().position(|m| *m == r.mode), r.scaling, r.servers));
    Ok(rows)
}

/// One Figure 7 point: the trace replay of `mode` on `n` servers.
async fn fig7_run(mode: &'static str, n: u32, scaling: &'static str, base: u32, p: &Profile, costs: Costs, progress: &Progress) -> Result<Fig7Row, String> {
    let grow = if scaling == "weak" { n as usize / base as usize } else { 1 }.max(1);
    let what = format!("fig7 {mode} {scaling} {n} servers");
    let sim = SimCluster::start(named(mode), n, n as usize);
    let ns = generate(Shape::Synthetic, ROOT, p.trace_dirs, p.trace_files * grow, p.seed);
    build(&sim, &ns, n as usize, &what, progress).await?;
    let spec = TraceSpec { file_ops: p.trace_file_ops * grow, dir_ops: p.trace_dir_ops, seed: p.seed + 2 };
    let o = run(&sim, &trace(&ns, n as usize, spec, "t"), &format!("{what}: trace replay"), progress).await?;
    let s = o.structure(n);
    let replay = simulate_waves(n, &o.waves, p.inflight, costs);
    let (busiest, lockd) = replay.utilization();
    sim.finish();
    Ok(Fig7Row {
        mode: mode.to_string(),
        scaling,
        servers: n,
        ops: o.ops,
        errors: o.errors,
        ops_per_sec: replay.ops_per_sec(),
        ops_per_sec_per_server: replay.ops_per_sec() / n as f64,
        rpc_amplification: s.rpc_amplification,
        load_cov: s.load_cov,
        lease_waits: o.lease_waits,
        busiest_server_utilization: busiest,
        lockd_utilization: lockd,
    })
}

/// The configurations Figure 8 compares for `mode`: IndexFS with the paper's
/// three fixed leases (1 s, 250 ms, 50 ms), any other mode as it comes.
fn fig8_configs(mode: &str) -> Vec<(String, ModeOptions)> {
    if mode != "indexfs" {
        return vec![(mode.to_string(), named(mode))];
    }
    [(1000, "1s"), (250, "250ms"), (50, "50ms")]
        .into_iter()
        .map(|(ms, label)| (format!("{mode} {label}"), ModeOptions::Indexfs(IndexFsOptions { lease: LeasePolicy::Fixed { ms }, ..IndexFsOptions::default() })))
        .collect()
}

pub async fn fig8(modes: &[&'static str], p: &Profile, progress: &Progress) -> Result<Vec<Fig8Row>, String> {
    let n = p.fig8_servers;
    let clients = n as usize;
    let mut rows = Vec::new();
    for &mode in modes {
        // One after another: these latencies are real time.
        for (config, opts) in fig8_configs(mode) {
            let what = format!("fig8 {config} {n} servers");
            let sim = SimCluster::start(opts, n, clients);
            let ns = generate(Shape::Balanced, ROOT, 111, 50 * n as usize, p.seed);
            build(&sim, &ns, clients, &what, progress).await?;
            let work = stats_with_chmods(&ns, clients, p.fig8_stats_per_client, p.fig8_stats_per_chmod, p.seed + 3);
            let o = run(&sim, &work, &format!("{what}: stats with chmods"), progress).await?;
            for (kind, op) in [(Kind::Stat, "stat"), (Kind::Chmod, "chmod")] {
                let lat = o.latencies.get(&kind).cloned().unwrap_or_default();
                let q = canopy_bench::report::Latency::of(&canopy_bench::drive::latencies_of(&lat));
                rows.push(Fig8Row {
                    mode: mode.to_string(),
                    config: config.clone(),
                    op,
                    servers: n,
                    count: lat.len() as u64,
                    p50_us: q.p50,
                    p70_us: q.p70,
                    p99_us: q.p99,
                    lease_waits: o.lease_waits,
                });
            }
            sim.finish();
        }
    }
    Ok(rows)
}

/// The calibration check: the simulated throughput of the real bench's
/// workload on 4 servers (creates, then uniform stats; 4 clients, 32 in
/// flight each), recorded in-process at `files` files and `stats` stats.
pub async fn simulate_bench(mode: &'static str, costs: Costs, files: usize, stats_n: usize, seed: u64, progress: &Progress) -> Result<(f64, f64), String> {
    let servers = crate::calibrate::REAL_SERVERS;
    let clients = 4;
    let sim = SimCluster::start(named(mode), servers, clients);
    let tree = canopy_bench::workload::Tree::new(ROOT, 1000, files);
    let ns = Namespace::from_bench_tree(&tree);
    let what = format!("calibration check {mode}");
    sim.make_root(ROOT).await.map_err(|e| format!("mkdir {ROOT}: {e}"))?;
    run(&sim, &mkdirs(&ns, clients), &format!("{what}: mkdir"), progress).await?;
    let created = run(&sim, &creates(&ns, clients), &format!("{what}: create"), progress).await?;
    let looked = run(&sim, &stats(&ns, clients, stats_n / clients, Choice::Uniform, seed), &format!("{what}: stat"), progress).await?;
    sim.finish();
    let of = |o: &Outcome| simulate_waves(servers, &o.waves, 32, costs).ops_per_sec();
    Ok((of(&created), of(&looked)))
}

/// Mode `mode` with its default options (the evaluation names only modes this build has).
fn named(mode: &str) -> ModeOptions {
    ModeOptions::named(mode).expect("a mode this build has")
}
