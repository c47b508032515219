//! The simulator's costs, calibrated from real servers: a `canopy bench` of
//! creates and stats on a real cluster of 4 server processes on this machine.
//!
//! A stat is one read RPC and a create one write RPC in both modes (with warm
//! caches), so with the servers saturated each server's share of the work
//! gives the cost of one RPC of that kind on this machine: servers / (RPCs per
//! second). That cost includes everything the machine spends per RPC (the
//! client's share too: clients and servers share its cores), which is what
//! makes the simulator reproduce this machine at 4 servers. The lock service
//! does other work: its cost is a server RPC's (the mean over the creates and
//! stats) times the ratio of CPU time per RPC the real lock service and the
//! real servers spent during the bench (a write's if the bench reported no
//! CPU times). The network's one-way latency is not
//! measured (loopback would say little about a cluster): [`NET_NS`].

use crate::des::{Costs, Ns};
use canopy_bench::BenchReport;
use serde::Serialize;

/// One-way network latency of the simulated cluster: a datacenter's.
pub const NET_NS: Ns = 50_000;

/// Costs for when no real cluster was measured (library tests): of the order
/// this machine measures.
pub const UNCALIBRATED: Costs = Costs { read_ns: 35_000, write_ns: 50_000, lock_ns: 50_000, net_ns: NET_NS };

/// Servers of the real cluster the calibration runs on.
pub const REAL_SERVERS: u32 = 4;

/// What a real bench measured, as the simulator needs it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Measured {
    pub create_ops_per_sec: f64,
    pub create_rpcs_per_op: f64,
    pub stat_ops_per_sec: f64,
    pub stat_rpcs_per_op: f64,
    /// CPU time per RPC of the lock service over that of the servers.
    pub lock_cpu_ratio: Option<f64>,
}

impl Measured {
    /// The create and stat phases of `report`.
    pub fn of(report: &BenchReport) -> Result<Measured, String> {
        let phase = |name: &str| report.phases.iter().find(|p| p.name == name).ok_or_else(|| format!("the calibration bench has no {name} phase"));
        let (create, stat) = (phase("create")?, phase("stat")?);
        if create.errors + stat.errors > 0 {
            return Err(format!("the calibration bench had {} errors", create.errors + stat.errors));
        }
        let amp = |p: &canopy_bench::PhaseReport| p.rpc.as_ref().map(|r| r.rpc_amplification).unwrap_or(1.0).max(1.0);
        Ok(Measured {
            create_ops_per_sec: create.ops_per_sec,
            create_rpcs_per_op: amp(create),
            stat_ops_per_sec: stat.ops_per_sec,
            stat_rpcs_per_op: amp(stat),
            lock_cpu_ratio: lock_cpu_ratio(report),
        })
    }

    /// Each figure's median over several runs (the machine is shared and
    /// noisy: one run can be far off the others).
    pub fn median(runs: &[Measured]) -> Option<Measured> {
        let med = |f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
        let ratios: Vec<f64> = runs.iter().filter_map(|m| m.lock_cpu_ratio).collect();
        Some(Measured {
            create_ops_per_sec: med(|m| m.create_ops_per_sec)?,
            create_rpcs_per_op: med(|m| m.create_rpcs_per_op)?,
            stat_ops_per_sec: med(|m| m.stat_ops_per_sec)?,
            stat_rpcs_per_op: med(|m| m.stat_rpcs_per_op)?,
            lock_cpu_ratio: median(ratios),
        })
    }

    /// The costs that make `servers` saturated servers do what was measured.
    pub fn costs(&self, servers: u32) -> Costs {
        let per_rpc = |ops: f64, amp: f64| (servers as f64 * 1e9 / (ops * amp).max(1.0)).round() as Ns;
        let write_ns = per_rpc(self.create_ops_per_sec, self.create_rpcs_per_op);
        let read_ns = per_rpc(self.stat_ops_per_sec, self.stat_rpcs_per_op);
        let lock_ns = match self.lock_cpu_ratio {
            Some(ratio) => {
                // The mean server RPC of the creates and stats, by their numbers.
                let (writes, reads) = (self.create_rpcs_per_op, self.stat_rpcs_per_op * self.stat_ops_per_sec / self.create_ops_per_sec.max(1.0));
                let mean = (writes * write_ns as f64 + reads * read_ns as f64) / (writes + reads).max(1e-9);
                (mean * ratio).round() as Ns
            }
            None => write_ns,
        };
        Costs { read_ns, write_ns, lock_ns, net_ns: NET_NS }
    }
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(xs[n / 2]),
        _ => Some((xs[n / 2 - 1] + xs[n / 2]) / 2.0),
    }
}

/// The lock service's CPU time per RPC over the servers', from a bench that
/// reported its daemons' CPU time and sent the lock service RPCs.
fn lock_cpu_ratio(report: &BenchReport) -> Option<f64> {
    let cpu = &report.daemon_cpu_seconds;
    let lockd_cpu = *cpu.get("lockd")?;
    let server_cpu: f64 = cpu.iter().filter(|(name, _)| name.starts_with("server-")).map(|(_, s)| s).sum();
    let figures = report.phases.iter().filter_map(|p| p.rpc.as_ref());
    let (lockd_rpcs, all_rpcs) = figures.fold((0u64, 0u64), |(l, a), r| (l + r.lockd_rpcs, a + r.rpcs));
    let server_rpcs = all_rpcs.saturating_sub(lockd_rpcs);
    if lockd_rpcs == 0 || server_rpcs == 0 || server_cpu <= 0.0 {
        return None;
    }
    Some((lockd_cpu / lockd_rpcs as f64) / (server_cpu / server_rpcs as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturated_cluster_gives_the_cost_of_each_rpc() {
        let m = Measured { create_ops_per_sec: 80_000.0, create_rpcs_per_op: 1.0, stat_ops_per_sec: 100_000.0, stat_rpcs_per_op: 1.0, lock_cpu_ratio: None };
        let c = m.costs(4);
        assert_eq!((c.read_ns, c.write_ns, c.lock_ns), (40_000, 50_000, 50_000));
        let more_rpcs = Measured { stat_rpcs_per_op: 2.0, ..m };
        assert_eq!(more_rpcs.costs(4).read_ns, 20_000, "twice the RPCs for the same rate: each costs half");
        // 80K writes and 100K reads a second: the mean server RPC is 4/9 of
        // 50 us and 5/9 of 40 us = 44.4 us; a lock costs a quarter of that.
        let cheap_locks = Measured { lock_cpu_ratio: Some(0.25), ..m };
        assert_eq!(cheap_locks.costs(4).lock_ns, 11_111);
    }

    #[test]
    fn the_median_of_runs_takes_each_figure_apart() {
        let run = |c: f64, s: f64, r: Option<f64>| Measured { create_ops_per_sec: c, create_rpcs_per_op: 1.0, stat_ops_per_sec: s, stat_rpcs_per_op: 1.0, lock_cpu_ratio: r };
        let m = Measured::median(&[run(30.0, 90.0, Some(1.0)), run(50.0, 70.0, None), run(40.0, 80.0, Some(0.5))]).unwrap();
        assert_eq!((m.create_ops_per_sec, m.stat_ops_per_sec, m.lock_cpu_ratio), (40.0, 80.0, Some(0.75)));
        assert!(Measured::median(&[]).is_none());
    }

    #[test]
    fn the_lock_ratio_compares_cpu_per_rpc_of_the_lock_service_and_the_servers() {
        use canopy_bench::report::{Latency, RpcFigures};
        use canopy_bench::PhaseReport;
        let phase = |name: &str, rpcs: u64, lockd_rpcs: u64| PhaseReport {
            name: name.into(),
            ops: rpcs,
            errors: 0,
            seconds: 1.0,
            ops_per_sec: rpcs as f64,
            rpc: Some(RpcFigures { rpcs, rpc_amplification: 1.0, load_cov: 0.0, retries: 0, lock_waits: 0, cache_hits: 0, cache_misses: 0, lease_waits: 0, redirects: 0, lockd_rpcs }),
            latency_us: Latency::of(&canopy_bench::drive::latencies_of(&[1])),
        };
        let mut report = BenchReport {
            mode: "shardfs".into(),
            servers: 2,
            clients: 1,
            inflight: 1,
            phases: vec![phase("mkdir", 3_000, 2_000), phase("create", 9_000, 0)],
            ..Default::default()
        };
        assert_eq!(lock_cpu_ratio(&report), None, "no CPU times");
        report.daemon_cpu_seconds = [("lockd".to_string(), 0.1), ("server-0".to_string(), 0.5), ("server-1".to_string(), 0.5)].into();
        // 50 us per lock RPC, 100 us per server RPC (10,000 of them in 1 s).
        assert!((lock_cpu_ratio(&report).unwrap() - 0.5).abs() < 1e-9);
    }
}
