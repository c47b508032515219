//! Runs the phases against Canopy: `clients * inflight` workers as tokio tasks
//! (see [`crate::drive`]), each using one of the clients. Besides time and
//! latency, a phase is measured by counter snapshots before and after: the
//! clients' RPCs sent and the servers' RPCs received.

use crate::drive::Workers;
use crate::plan::plan;
use crate::report::{cov, BenchReport, PhaseReport, RpcFigures};
use crate::workload::{Op, Tree, DIR_MODE};
use canopy_client::counters::CounterSnapshot;
use canopy_client::Client;
use canopy_proto::msg::ServerStats;
use canopy_proto::Errno;

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Client instances, each with its own connections. Against a directory,
    /// `clients * inflight` threads.
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
    /// Where the bench tree goes in the Canopy namespace; must not exist. (Against
    /// a directory, the tree goes in its [`crate::BenchDir`].)
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
        total.cache_hits += s.cache_hits;
        total.cache_misses += s.cache_misses;
        total.redirects += s.redirects;
    }
    total
}

/// RPCs each server received (its `Stats` excepted), and the lease waits of
/// all of them.
async fn received_per_server(client: &Client) -> Result<(Vec<u64>, u64), Errno> {
    let stats = client.server_stats().await?;
    let received = stats.iter().map(|s| s.rpcs.iter().filter(|(op, _)| op != "Stats").map(|(_, n)| n).sum()).collect();
    let waits = ServerStats::total(&stats, "lease_waits");
    Ok((received, waits))
}

/// A phase's RPC figures from what the clients sent for `ops` operations, what
/// each server received and the lease waits the servers counted.
fn figures(sent: &CounterSnapshot, ops: u64, received: &[u64], lease_waits: u64) -> RpcFigures {
    RpcFigures {
        rpcs: sent.total_rpcs(),
        rpc_amplification: sent.total_rpcs() as f64 / ops.max(1) as f64,
        load_cov: cov(received),
        retries: sent.retries,
        lock_waits: sent.lock_waits,
        cache_hits: sent.cache_hits,
        cache_misses: sent.cache_misses,
        lease_waits,
        redirects: sent.redirects,
        lockd_rpcs: sent.lockd,
    }
}

/// The phase that makes `files` files in one new directory with one bulk create
/// (IndexFS: bulk insertion), run after the others.
pub const BULK_PHASE: &str = "bulk-create";

/// The servers' stats once no directory split is queued, running or
/// unfinished anywhere (seen twice, 100 ms apart; at most 30 s): IndexFS
/// splits run in the background after the names land, and the report's
/// spread and split count are meant as the phases left them. A mode without
/// splits answers at once.
async fn settled_stats(client: &Client) -> Result<Vec<ServerStats>, String> {
    let stats = || async { client.server_stats().await.map_err(|e| format!("stats: {e}")) };
    let busy = |s: &[ServerStats]| ServerStats::total(s, "splits_pending") + ServerStats::total(s, "splits_unfinished");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut quiet_once = false;
    loop {
        let s = stats().await?;
        let splits = s.iter().any(|x| x.counters.iter().any(|(n, _)| n == "splits_pending"));
        if !splits || std::time::Instant::now() >= deadline || (busy(&s) == 0 && quiet_once) {
            return Ok(s);
        }
        quiet_once = busy(&s) == 0;
        tokio::time::sleep(std::time::Duration::from_millis(if quiet_once { 100 } else { 20 })).await;
    }
}

/// Makes `files` files in the new directory `dir` with one `bulk_create`, then
/// stats every one of them with all `workers`, untimed (every name refused
/// counts as an error). Its latency is the whole call's.
async fn bulk_phase(clients: &[Client], workers: &Workers<Client>, dir: &str, files: usize) -> Result<PhaseReport, String> {
    let first = clients.first().ok_or("no clients")?;
    first.mkdir(dir, DIR_MODE).await.map_err(|e| format!("cannot create {dir}: {e}"))?;
    let names: Vec<String> = (0..files).map(|i| format!("f{i:08}")).collect();
    let (recv_before, _) = received_per_server(first).await.map_err(|e| format!("stats: {e}"))?;
    let sent_before = sum_snapshots(clients);
    let start = std::time::Instant::now();
    let out = first.bulk_create(dir, &names, crate::workload::FILE_MODE).await.map_err(|e| format!("bulk create in {dir}: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let sent = sum_snapshots(clients).since(&sent_before);
    let (recv_after, _) = received_per_server(first).await.map_err(|e| format!("stats: {e}"))?;
    let received: Vec<u64> = recv_after.iter().zip(&recv_before).map(|(a, b)| a - b).collect();
    // Every name made must be there.
    let paths: Vec<String> = names.iter().map(|name| format!("{dir}/{name}")).collect();
    let checked = workers.drive(Op::Stat, std::sync::Arc::new(paths), &indicatif::ProgressBar::hidden()).await;
    if checked.errors > 0 {
        return Err(format!("{} of the {files} files made by the bulk create in {dir} cannot be stat'ed", checked.errors));
    }
    let m = crate::drive::Measured { latencies: crate::drive::latencies_of(&[(seconds * 1e9) as u64]), errors: out.rejected.len() as u64, seconds };
    let mut phase = PhaseReport::new(BULK_PHASE.into(), files as u64, &m);
    phase.rpc = Some(figures(&sent, files as u64, &received, 0));
    Ok(phase)
}

/// Stats up to `SAMPLE` files at each path depth of `tree`, each with the
/// client's caches dropped first: (depth, RPCs per stat).
async fn cold_stats(client: &Client, tree: &Tree) -> Result<Vec<(usize, f64)>, String> {
    const SAMPLE: usize = 50;
    let mut by_depth: std::collections::BTreeMap<usize, Vec<&String>> = std::collections::BTreeMap::new();
    for f in &tree.files {
        let d = f.split('/').filter(|c| !c.is_empty()).count();
        let at = by_depth.entry(d).or_default();
        if at.len() < SAMPLE {
            at.push(f);
        }
    }
    let mut out = Vec::new();
    for (depth, files) in by_depth {
        let before = client.counters().snapshot();
        for f in &files {
            client.drop_caches();
            client.stat(f).await.map_err(|e| format!("stat {f}: {e}"))?;
        }
        let rpcs = client.counters().snapshot().since(&before).total_rpcs();
        out.push((depth, rpcs as f64 / files.len().max(1) as f64));
    }
    client.drop_caches();
    Ok(out)
}

/// Runs the configured phases with `clients` and reports each.
pub async fn run(clients: Vec<Client>, cfg: &BenchConfig) -> Result<BenchReport, String> {
    let first = clients.first().ok_or("no clients")?.clone();
    let tree = Tree::new(&cfg.root, cfg.dirs, cfg.files);
    let bulk = cfg.phases.iter().any(|p| p == BULK_PHASE);
    let others: Vec<String> = cfg.phases.iter().filter(|p| *p != BULK_PHASE).cloned().collect();
    let steps = if others.is_empty() { Vec::new() } else { plan(&tree, &others, cfg.stats, cfg.seed)? };
    // The servers' counters before the run: on a cluster that served others
    // before (`--cluster`), the report counts what changed during it.
    let before = first.server_stats().await.map_err(|e| format!("stats: {e}"))?;
    first.mkdir(&cfg.root, DIR_MODE).await.map_err(|e| format!("cannot create {}: {e}", cfg.root))?;
    let mut phases = Vec::new();
    let mut cold_stat_rpcs = Vec::new();
    // Worker w uses client w mod clients, so each client has `inflight` in flight.
    let workers = Workers::tasks((0..clients.len() * cfg.inflight).map(|w| clients[w % clients.len()].clone()).collect());
    for step in steps {
        let Some(name) = step.phase.clone() else {
            workers.setup(&step).await?;
            continue;
        };
        // Read the servers' counters outside the window of the clients' counters,
        // so the bench's own Stats RPCs are not counted as the phase's.
        let (recv_before, waits_before) = received_per_server(&first).await.map_err(|e| format!("stats: {e}"))?;
        let sent_before = sum_snapshots(&clients);
        let m = workers.measure(&step, cfg.progress).await;
        let sent = sum_snapshots(&clients).since(&sent_before);
        let (recv_after, waits_after) = received_per_server(&first).await.map_err(|e| format!("stats: {e}"))?;
        let received: Vec<u64> = recv_after.iter().zip(&recv_before).map(|(a, b)| a - b).collect();
        let ops = step.ops() as u64;
        let mut phase = PhaseReport::new(name, ops, &m);
        phase.rpc = Some(figures(&sent, ops, &received, waits_after.saturating_sub(waits_before)));
        // Right after the first stat phase, while every file is where the tree
        // says: the same stats from cold caches.
        if phase.name == "stat" && cold_stat_rpcs.is_empty() {
            cold_stat_rpcs = cold_stats(&first, &tree).await?;
        }
        phases.push(phase);
    }
    if bulk {
        phases.push(bulk_phase(&clients, &workers, &format!("{}/bulk", cfg.root), cfg.files).await?);
    }
    let stats = settled_stats(&first).await?;
    let over_run = |name: &str| ServerStats::total(&stats, name).saturating_sub(ServerStats::total(&before, name));
    Ok(BenchReport {
        mode: first.namespace().mode_name().to_string(),
        servers: first.namespace().servers(),
        clients: clients.len(),
        inflight: cfg.inflight,
        phases,
        entries_per_server: stats.iter().map(|s| s.files).collect(),
        splits: over_run("splits"),
        cold_stat_rpcs,
        entry_cache_hits: over_run("entry_cache_hits"),
        entry_cache_misses: over_run("entry_cache_misses"),
        store_writes: over_run("store_writes"),
        log_writes: over_run("log_writes"),
        daemon_cpu_seconds: Default::default(),
        store_build: None,
    })
}
