//! Runs a workload's phases on a simulated cluster: N servers over in-memory
//! stores and the in-process transport, with as many clients, all in this
//! process. Each client does one operation at a time through a [`Recorder`],
//! so every operation's RPCs are known: what the structural figures count
//! (RPC amplification, load per server, lease waits, cache hits) and what the
//! discrete-event simulation replays.

use crate::des::SimOp;
use crate::record::{Dest, Recorder};
use crate::workload::{Kind, Op, Phase};
use canopy_client::{open_namespace, Backend, Client, NsOptions};
use canopy_proto::msg::ServerStats;
use canopy_proto::{Creds, Errno};
use canopy_proto::modes::ModeOptions;
use canopy_testkit::InProcCluster;
use indicatif::ProgressBar;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

pub struct SimCluster {
    cluster: InProcCluster,
    clients: Vec<(Client, Arc<Recorder>)>,
}

/// What one phase did on a simulated cluster.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub ops: u64,
    pub errors: u64,
    /// The first few errors, for the report.
    pub error_samples: Vec<String>,
    /// `waves[w][c]`: client c's operations in wave w, with their RPCs.
    pub waves: Vec<Vec<Vec<SimOp>>>,
    /// Real (in-process) latency in nanoseconds, sorted, by kind.
    pub latencies: BTreeMap<Kind, Vec<u64>>,
    pub seconds: f64,
    pub lease_waits: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
}

/// The structural figures of a phase.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Structure {
    pub rpc_amplification: f64,
    /// Coefficient of variation of the RPCs each metadata server received.
    pub load_cov: f64,
}

impl Outcome {
    fn ops_iter(&self) -> impl Iterator<Item = &SimOp> {
        self.waves.iter().flatten().flatten()
    }

    /// RPCs each metadata server received.
    pub fn per_server(&self, servers: u32) -> Vec<u64> {
        let mut load = vec![0u64; servers as usize];
        for rpc in self.ops_iter().flat_map(|op| &op.rpcs) {
            if let Dest::Server(i) = rpc.dest {
                load[i as usize] += 1;
            }
        }
        load
    }

    pub fn structure(&self, servers: u32) -> Structure {
        let rpcs: usize = self.ops_iter().map(|op| op.rpcs.len()).sum();
        Structure { rpc_amplification: rpcs as f64 / self.ops.max(1) as f64, load_cov: cov(&self.per_server(servers)) }
    }

    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let all = self.cache_hits + self.cache_misses;
        (all > 0).then(|| self.cache_hits as f64 / all as f64)
    }
}

/// The bench's: coefficient of variation (population standard deviation over the mean).
pub use canopy_bench::report::cov;

impl SimCluster {
    /// `servers` servers of the mode `opts` configures and `clients` recording clients.
    pub fn start(opts: ModeOptions, servers: u32, clients: usize) -> SimCluster {
        let cluster = InProcCluster::memory_with(servers, opts.clone());
        let clients = (0..clients.max(1))
            .map(|_| {
                let rec = Arc::new(Recorder::new(cluster.transport()));
                let ns = open_namespace(&opts, Backend::Cluster(rec.clone()), NsOptions::default()).expect("a mode over a cluster");
                (Client::new(ns, Creds::root()), rec)
            })
            .collect();
        SimCluster { cluster, clients }
    }

    /// Runs `phase`: each wave's client lists at once, a client's operations
    /// one after another.
    pub async fn run(&self, phase: &Phase, bar: &ProgressBar) -> Outcome {
        let waits_before = self.lease_waits().await;
        let counters_before: Vec<_> = self.clients.iter().map(|(c, _)| c.counters().snapshot()).collect();
        let start = Instant::now();
        let mut out = Outcome::default();
        for wave in &phase.waves {
            let runs = wave.iter().enumerate().map(|(i, ops)| {
                let (client, rec) = &self.clients[i % self.clients.len()];
                run_list(client, rec, ops, bar)
            });
            let mut recorded = Vec::new();
            for ops in futures::future::join_all(runs).await {
                for (op, latency, err) in &ops {
                    out.latencies.entry(op.kind).or_default().push(*latency);
                    if let Some(e) = err {
                        out.errors += 1;
                        if out.error_samples.len() < 5 {
                            out.error_samples.push(e.clone());
                        }
                    }
                }
                out.ops += ops.len() as u64;
                recorded.push(ops.into_iter().map(|(op, _, _)| op).collect());
            }
            out.waves.push(recorded);
        }
        out.seconds = start.elapsed().as_secs_f64();
        for v in out.latencies.values_mut() {
            v.sort_unstable();
        }
        out.lease_waits = self.lease_waits().await.saturating_sub(waits_before);
        for ((c, _), before) in self.clients.iter().zip(&counters_before) {
            let d = c.counters().snapshot().since(before);
            out.cache_hits += d.cache_hits;
            out.cache_misses += d.cache_misses;
        }
        out
    }

    /// Lease waits the servers counted so far.
    async fn lease_waits(&self) -> u64 {
        let Ok(stats) = self.cluster.client().server_stats().await else { return 0 };
        ServerStats::total(&stats, "lease_waits")
    }

    /// Stops the cluster and lets its memory go (the servers' own clients
    /// would otherwise keep it).
    pub fn finish(self) {
        self.cluster.crash();
    }

    /// Makes directory `root`, where a workload's namespace goes.
    pub async fn make_root(&self, root: &str) -> Result<(), Errno> {
        self.cluster.client().mkdir(root, 0o755).await.map(drop)
    }

    /// Drops every client's caches (a cold start).
    pub fn drop_caches(&self) {
        for (c, _) in &self.clients {
            c.drop_caches();
        }
    }

    /// Files each server holds.
    pub async fn entries_per_server(&self) -> Result<Vec<u64>, Errno> {
        Ok(self.cluster.client().server_stats().await?.iter().map(|s| s.files).collect())
    }
}

/// One client's operations in order: each with its RPCs, real latency and
/// error (if any).
async fn run_list(client: &Client, rec: &Recorder, ops: &[Op], bar: &ProgressBar) -> Vec<(SimOp, u64, Option<String>)> {
    let mut out = Vec::with_capacity(ops.len());
    rec.take();
    for op in ops {
        let t = Instant::now();
        let r = apply(client, op).await;
        let latency = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let err = r.err().map(|e| format!("{op:?}: {e}"));
        out.push((SimOp { kind: op.kind(), rpcs: rec.take() }, latency, err));
        bar.inc(1);
    }
    out
}

async fn apply(c: &Client, op: &Op) -> Result<(), Errno> {
    match op {
        Op::Mkdir(p) => c.mkdir(p, 0o755).await.map(drop),
        Op::Create(p) => c.create(p, 0o644).await.map(drop),
        Op::Stat(p) => c.stat(p).await.map(drop),
        Op::Readdir(p) => c.readdir(p).await.map(drop),
        Op::Chmod(p, mode) => c.chmod(p, *mode).await.map(drop),
        Op::Unlink(p) => c.unlink(p).await,
        Op::Rename(a, b) => c.rename(a, b).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trees::{generate, Shape};
    use crate::trees::Namespace;
    use crate::workload::{creates, mkdirs, stats, Choice, Op, Phase};

    /// `servers` servers of `mode` and `clients` clients, with `ns` (under
    /// /e) made.
    async fn populated(mode: &'static str, servers: u32, clients: usize, ns: &Namespace) -> SimCluster {
        let sim = SimCluster::start(ModeOptions::named(mode).unwrap(), servers, clients);
        sim.make_root("/e").await.unwrap();
        let bar = ProgressBar::hidden();
        for phase in [mkdirs(ns, clients), creates(ns, clients)] {
            let o = sim.run(&phase, &bar).await;
            assert_eq!(o.errors, 0, "{:?}", o.error_samples);
        }
        sim
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shardfs_stats_are_one_rpc_and_mkdirs_reach_every_server() {
        let sim = SimCluster::start(ModeOptions::Shardfs(Default::default()), 8, 4);
        let ns = generate(Shape::Balanced, "/e", 11, 400, 1);
        sim.make_root("/e").await.unwrap();
        let bar = ProgressBar::hidden();
        let m = sim.run(&mkdirs(&ns, 4), &bar).await;
        assert_eq!((m.ops, m.errors), (11, 0), "{:?}", m.error_samples);
        // A mkdir: lock, every server at once, then posted: the 7 replicas'
        // unfences and the unlock.
        assert_eq!(m.structure(8).rpc_amplification, 17.0);
        let mkdir = &m.waves[0][0][0];
        assert_eq!(mkdir.rpcs.iter().filter(|r| !r.posted).map(|r| r.stage).max(), Some(1), "two waits: the lock, the servers");
        let c = sim.run(&creates(&ns, 4), &bar).await;
        assert_eq!((c.ops, c.errors), (400, 0));
        let s = sim.run(&stats(&ns, 4, 100, Choice::Uniform, 1), &bar).await;
        assert_eq!(s.structure(8).rpc_amplification, 1.0);
        assert!(s.structure(8).load_cov < 0.5);
        assert_eq!(s.waves[0].len(), 4);
        assert!(s.waves[0].iter().flatten().all(|op| op.rpcs.len() == 1 && op.kind == Kind::Stat));
        assert_eq!(sim.entries_per_server().await.unwrap().iter().sum::<u64>(), 400);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shardfs_file_rename_reaches_its_two_primaries_not_every_server() {
        let ns = generate(Shape::Balanced, "/e", 1, 40, 1);
        let sim = populated("shardfs", 32, 1, &ns).await;
        let bar = ProgressBar::hidden();
        let renames = ns.files.iter().map(|f| Op::Rename(f.clone(), format!("{f}r"))).collect();
        let r = sim.run(&Phase { waves: vec![vec![renames]] }, &bar).await;
        assert_eq!((r.ops, r.errors), (40, 0), "{:?}", r.error_samples);
        // Lock, stat, fence two, out, in, commit, unfence two, unlock, the
        // parent's times: a dozen at most, whatever the number of servers.
        let most = r.waves[0][0].iter().map(|op| op.rpcs.len()).max().unwrap();
        assert!(most <= 12, "a file rename sent {most} RPCs on 32 servers");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn indexfs_stats_from_cold_caches_walk_the_path() {
        let ns = generate(Shape::Balanced, "/e", 111, 500, 1);
        let sim = populated("indexfs", 8, 2, &ns).await;
        let bar = ProgressBar::hidden();
        sim.drop_caches();
        let cold = sim.run(&stats(&ns, 2, 1, Choice::Uniform, 3), &bar).await;
        // /e/d0/dX/dY/f: the root's entry, /e, d0, dX and dY looked up, then
        // the stat (as `canopy bench` reports for a path of depth 5).
        assert_eq!(cold.structure(8).rpc_amplification, 6.0);
        let warm = sim.run(&stats(&ns, 2, 200, Choice::Zipfian, 3), &bar).await;
        assert!(warm.structure(8).rpc_amplification < 2.0, "{}", warm.structure(8).rpc_amplification);
        assert!(warm.cache_hit_ratio().unwrap() > 0.5);
    }
}
