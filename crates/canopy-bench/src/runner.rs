//! Runs the phases. Work is a shared index into the phase's operation list; each of
//! `clients * inflight` workers takes the next index, runs it through its client
//! and records the latency. A phase is measured by counter snapshots before and
//! after: the clients' RPCs sent and the servers' RPCs received.

use crate::report::{cov, BenchReport, Latency, PhaseReport};
use crate::plan::{plan, Batch};
use crate::workload::{renamed, Op, Tree, CHMOD_MODE, DIR_MODE, FILE_MODE};
use canopy_client::counters::CounterSnapshot;
use canopy_client::Client;
use canopy_proto::Errno;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Client instances, each with its own connections.
    pub clients: usize,
    /// Operations in flight per client.
    pub inflight: usize,
    pub dirs: usize,
    pub files: usize,
    pub stats: usize,
    /// Phases to run, in order, from `mkdir`, `create`, `stat`, `chmod` (every
    /// directory, adding group write: a monotonic change) and `rename` (every leaf
    /// directory to a new name in its parent, moving its files; run it last).
    pub phases: Vec<String>,
    /// Where the bench tree goes; must not exist.
    pub root: String,
    pub seed: u64,
    pub progress: bool,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            clients: 4,
            inflight: 32,
            dirs: 1000,
            files: 300_000,
            stats: 600_000,
            phases: vec!["mkdir".into(), "create".into(), "stat".into()],
            root: "/bench".into(),
            seed: 1,
            progress: false,
        }
    }
}

async fn apply(client: &Client, op: Op, path: &str) -> Result<(), Errno> {
    match op {
        Op::Mkdir => client.mkdir(path, DIR_MODE).await.map(|_| ()),
        Op::Create => client.create(path, FILE_MODE).await.map(|_| ()),
        Op::Stat => client.stat(path).await.map(|_| ()),
        Op::Chmod => client.chmod(path, CHMOD_MODE).await.map(|_| ()),
        Op::Rename => client.rename(path, &renamed(path)).await,
    }
}

struct Measured {
    /// Nanoseconds, sorted.
    latencies: Vec<u64>,
    errors: u64,
    seconds: f64,
}

/// Runs `op` over `paths` with every worker; returns latencies (ns) and errors.
async fn drive(clients: &[Client], inflight: usize, op: Op, paths: Arc<Vec<String>>, bar: &ProgressBar) -> Measured {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..clients.len() * inflight {
        let client = clients[w % clients.len()].clone();
        let (next, errors, paths, bar) = (next.clone(), errors.clone(), paths.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = paths.get(i) else { break };
                let t = Instant::now();
                if apply(&client, op, path).await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
                if i % 1024 == 0 {
                    bar.set_position(i as u64);
                }
            }
            lat
        }));
    }
    let mut latencies = Vec::with_capacity(paths.len());
    for t in tasks {
        latencies.extend(t.await.expect("bench worker panicked"));
    }
    let seconds = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Measured { latencies, errors: errors.load(Ordering::Relaxed), seconds }
}

fn sum_snapshots(clients: &[Client]) -> CounterSnapshot {
    let mut total = CounterSnapshot::default();
    for c in clients {
        let s = c.counters().snapshot();
        if total.per_server.is_empty() {
            total.per_server = vec![0; s.per_server.len()];
        }
        for (t, v) in total.per_server.iter_mut().zip(&s.per_server) {
            *t += v;
        }
        total.lockd += s.lockd;
        total.retries += s.retries;
        total.lock_waits += s.lock_waits;
        total.recoveries += s.recoveries;
    }
    total
}

async fn received_per_server(client: &Client) -> Result<Vec<u64>, Errno> {
    let stats = client.server_stats().await?;
    Ok(stats.iter().map(|s| s.rpcs.iter().filter(|(op, _)| op != "Stats").map(|(_, n)| n).sum()).collect())
}

/// Runs setup work unmeasured; any failure stops the bench.
async fn prepare(clients: &[Client], cfg: &BenchConfig, batches: Vec<Batch>) -> Result<(), String> {
    for (op, paths) in batches {
        let m = drive(clients, cfg.inflight, op, paths, &ProgressBar::hidden()).await;
        if m.errors > 0 {
            return Err(format!("{} operations of the bench's setup failed", m.errors));
        }
    }
    Ok(())
}

/// Runs the configured phases with `clients` and reports each.
pub async fn run(clients: Vec<Client>, cfg: &BenchConfig) -> Result<BenchReport, String> {
    let first = clients.first().ok_or("no clients")?.clone();
    let tree = Tree::new(&cfg.root, cfg.dirs, cfg.files);
    let steps = plan(&tree, &cfg.phases, cfg.stats, cfg.seed)?;
    first.mkdir(&cfg.root, DIR_MODE).await.map_err(|e| format!("cannot create {}: {e}", cfg.root))?;
    let mut phases = Vec::new();
    for step in steps {
        let total_ops = step.ops();
        let Some(name) = step.phase else {
            prepare(&clients, cfg, step.batches).await?;
            continue;
        };
        let bar = if cfg.progress { ProgressBar::new(total_ops as u64) } else { ProgressBar::hidden() };
        bar.set_style(ProgressStyle::with_template("{msg:8} [{bar:40}] {pos}/{len} {per_sec}").expect("valid template").progress_chars("=> "));
        bar.set_message(name.clone());
        // Read the servers' counters outside the window of the clients' counters,
        // so the bench's own Stats RPCs are not counted as the phase's.
        let recv_before = received_per_server(&first).await.map_err(|e| format!("stats: {e}"))?;
        let sent_before = sum_snapshots(&clients);
        let mut latencies = Vec::new();
        let (mut errors, mut seconds) = (0, 0.0);
        for (op, paths) in step.batches {
            let m = drive(&clients, cfg.inflight, op, paths, &bar).await;
            latencies.extend(m.latencies);
            errors += m.errors;
            seconds += m.seconds;
        }
        bar.finish_and_clear();
        let sent = sum_snapshots(&clients).since(&sent_before);
        let recv_after = received_per_server(&first).await.map_err(|e| format!("stats: {e}"))?;
        let received: Vec<u64> = recv_after.iter().zip(&recv_before).map(|(a, b)| a - b).collect();
        latencies.sort_unstable();
        let ops = total_ops as u64;
        phases.push(PhaseReport {
            name: name.clone(),
            ops,
            errors,
            seconds,
            ops_per_sec: ops as f64 / seconds.max(1e-9),
            rpcs: sent.total_rpcs(),
            rpc_amplification: sent.total_rpcs() as f64 / ops.max(1) as f64,
            load_cov: cov(&received),
            retries: sent.retries,
            lock_waits: sent.lock_waits,
            latency_us: Latency::of_sorted_ns(&latencies),
        });
    }
    Ok(BenchReport {
        mode: first.namespace().mode_name().to_string(),
        servers: first.namespace().servers(),
        clients: clients.len(),
        inflight: cfg.inflight,
        phases,
    })
}
