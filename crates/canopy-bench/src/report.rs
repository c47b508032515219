//! Bench results: one record per phase, printed as a table and written as JSON:
//! `{"mode", "servers", "phases": [{"name", "ops", "errors", "seconds",
//! "ops_per_sec", "rpcs", "rpc_amplification", "load_cov", "retries", "lock_waits",
//! "cache_hits", "cache_misses", "lease_waits", "latency_us": {"p50","p70","p99"}}]}`.

use crate::drive::Measured;
use serde::Serialize;
use std::collections::BTreeMap;

/// Microseconds, fractional: a system call on tmpfs takes about one.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p70: f64,
    pub p99: f64,
}

impl Latency {
    /// The percentiles of latencies recorded in nanoseconds.
    pub fn of(h: &crate::drive::Latencies) -> Latency {
        let us = |q| h.value_at_quantile(q) as f64 / 1000.0;
        Latency { p50: us(0.5), p70: us(0.7), p99: us(0.99) }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub name: String,
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    /// Canopy's own figures; a target without RPCs (a posix directory) has none,
    /// and the JSON then has none of their fields.
    #[serde(flatten)]
    pub rpc: Option<RpcFigures>,
    pub latency_us: Latency,
}

/// What a phase cost in RPCs, and how evenly they fell on the servers.
#[derive(Debug, Clone, Serialize)]
pub struct RpcFigures {
    /// RPCs the clients sent (to servers and the lock service).
    pub rpcs: u64,
    /// RPCs sent per application operation.
    pub rpc_amplification: f64,
    /// Coefficient of variation of RPCs received per server.
    pub load_cov: f64,
    pub retries: u64,
    pub lock_waits: u64,
    /// Path components a client found in (missing from) its lookup cache
    /// (IndexFS; 0 in modes without one).
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Mutations that waited for a lookup lease to run out (IndexFS).
    pub lease_waits: u64,
    /// Requests redirected to a directory partition that had moved (IndexFS).
    pub redirects: u64,
    /// Of `rpcs`, those sent to the lock service.
    pub lockd_rpcs: u64,
}

impl RpcFigures {
    /// The share of lookups the cache answered, if there were any.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let all = self.cache_hits + self.cache_misses;
        (all > 0).then(|| self.cache_hits as f64 / all as f64)
    }
}

impl PhaseReport {
    /// The report of phase `name` of `ops` operations, measured as `m`, without
    /// RPC figures.
    pub fn new(name: String, ops: u64, m: &Measured) -> PhaseReport {
        PhaseReport {
            name,
            ops,
            errors: m.errors,
            seconds: m.seconds,
            ops_per_sec: ops as f64 / m.seconds.max(1e-9),
            rpc: None,
            latency_us: Latency::of(&m.latencies),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BenchReport {
    pub mode: String,
    pub servers: u32,
    pub clients: usize,
    pub inflight: usize,
    pub phases: Vec<PhaseReport>,
    /// File entries each server holds at the end (how the namespace spread).
    pub entries_per_server: Vec<u64>,
    /// Directory partition splits the servers made (IndexFS).
    pub splits: u64,
    /// RPCs per stat with every client cache dropped first, by the path's
    /// depth (components), after a stat phase.
    pub cold_stat_rpcs: Vec<(usize, f64)>,
    /// Reads of file records the servers answered from their entry caches,
    /// and those they read from their stores, during the run.
    pub entry_cache_hits: u64,
    pub entry_cache_misses: u64,
    /// Writes the servers applied during the run, and the times they wrote
    /// their logs out for them (once per read pass at most). Not counted,
    /// and left out of the JSON, with group commit (`--durability group:MS`).
    #[serde(skip_serializing_if = "is_zero")]
    pub store_writes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub log_writes: u64,
    /// CPU seconds each daemon spent during the run, by name (`server-0`,
    /// `lockd`): only when the bench started the cluster itself.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub daemon_cpu_seconds: BTreeMap<String, f64>,
    /// How the servers' RocksDB was built (`canopy_store::rocksdb_build`):
    /// only when the bench started the cluster itself, from its own binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_build: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl BenchReport {
    pub fn table(&self) -> String {
        let mut s = format!(
            "mode {}, {} servers, {} clients x {} in flight\n{:<8} {:>9} {:>8} {:>11} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9}\n",
            self.mode, self.servers, self.clients, self.inflight, "phase", "ops", "seconds", "ops/s", "rpc/op", "load_cov", "retries", "p50 us", "p70 us", "p99 us"
        );
        let mut caches = String::new();
        for p in &self.phases {
            let (amplification, load_cov, retries) = match &p.rpc {
                Some(r) => (format!("{:.2}", r.rpc_amplification), format!("{:.3}", r.load_cov), r.retries.to_string()),
                None => ("-".into(), "-".into(), "-".into()),
            };
            s += &format!(
                "{:<8} {:>9} {:>8.2} {:>11.0} {:>8} {:>8} {:>7} {:>9.0} {:>9.0} {:>9.0}\n",
                p.name, p.ops, p.seconds, p.ops_per_sec, amplification, load_cov, retries, p.latency_us.p50, p.latency_us.p70, p.latency_us.p99
            );
            if let Some((r, ratio)) = p.rpc.as_ref().and_then(|r| r.cache_hit_ratio().map(|x| (r, x))) {
                caches += &format!(
                    "{:<8} lookup cache: {:.1}% hits ({} hits, {} misses); {} lease waits; {} redirects\n",
                    p.name,
                    100.0 * ratio,
                    r.cache_hits,
                    r.cache_misses,
                    r.lease_waits,
                    r.redirects
                );
            }
            if p.errors > 0 {
                s += &format!("         ({} operations failed)\n", p.errors);
            }
        }
        s + &caches + &self.spread() + &self.server_cache() + &self.server_log() + &self.cold() + &self.cpu() + &self.store()
    }

    fn store(&self) -> String {
        self.store_build.as_ref().map(|b| format!("servers' store: {b}\n")).unwrap_or_default()
    }

    fn server_log(&self) -> String {
        if self.log_writes == 0 {
            return String::new();
        }
        let each = self.store_writes as f64 / self.log_writes as f64;
        format!("servers' logs over the run: {} writes, written out {} times ({each:.2} writes each)\n", self.store_writes, self.log_writes)
    }

    fn server_cache(&self) -> String {
        let reads = self.entry_cache_hits + self.entry_cache_misses;
        if reads == 0 {
            return String::new();
        }
        let ratio = 100.0 * self.entry_cache_hits as f64 / reads as f64;
        format!("servers' entry caches over the run: {ratio:.1}% hits ({} hits, {} misses)\n", self.entry_cache_hits, self.entry_cache_misses)
    }

    fn cpu(&self) -> String {
        if self.daemon_cpu_seconds.is_empty() {
            return String::new();
        }
        let by: Vec<String> = self.daemon_cpu_seconds.iter().map(|(d, s)| format!("{d} {s:.2}")).collect();
        format!("CPU seconds of each daemon during the run: {}\n", by.join(", "))
    }

    fn cold(&self) -> String {
        if self.cold_stat_rpcs.is_empty() {
            return String::new();
        }
        let by: Vec<String> = self.cold_stat_rpcs.iter().map(|(d, r)| format!("depth {d}: {r:.2}")).collect();
        format!("stat with cold caches, RPCs per stat by path depth: {}\n", by.join(", "))
    }

    /// The entries each server holds, with its share, and the splits made.
    fn spread(&self) -> String {
        let total: u64 = self.entries_per_server.iter().sum();
        if total == 0 {
            return String::new();
        }
        let shares: Vec<String> = self.entries_per_server.iter().map(|n| format!("{n} ({:.1}%)", 100.0 * *n as f64 / total as f64)).collect();
        format!("entries per server: {}; {} splits\n", shares.join(", "), self.splits)
    }
}

/// Coefficient of variation (population standard deviation over mean).
pub fn cov(values: &[u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<u64>() as f64 / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = values.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_in_microseconds_from_nanoseconds() {
        let v: Vec<u64> = (1..=100).map(|i| i * 100).collect();
        let l = Latency::of(&crate::drive::latencies_of(&v));
        // Three significant figures: within a thousandth.
        for (got, want) in [(l.p50, 5.0), (l.p70, 7.0), (l.p99, 9.9)] {
            assert!((got - want).abs() <= want / 1000.0, "{got} for {want}");
        }
    }

    #[test]
    fn rpc_figures_are_fields_of_the_phase_or_absent() {
        let m = Measured { latencies: crate::drive::latencies_of(&[1000, 3000]), errors: 0, seconds: 0.5 };
        let mut p = PhaseReport::new("stat".into(), 2, &m);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["ops_per_sec"], 4.0);
        assert!((json["latency_us"]["p99"].as_f64().unwrap() - 3.0).abs() <= 0.003);
        for absent in ["rpc", "rpcs", "rpc_amplification", "load_cov", "retries", "lock_waits"] {
            assert!(json.get(absent).is_none(), "{absent} in {json}");
        }
        assert!(BenchReport { mode: "posix".into(), clients: 1, inflight: 1, phases: vec![p.clone()], ..Default::default() }.table().contains("      -        -       -"));
        p.rpc = Some(RpcFigures { rpcs: 4, rpc_amplification: 2.0, load_cov: 0.5, retries: 1, lock_waits: 0, cache_hits: 0, cache_misses: 0, lease_waits: 0, redirects: 0, lockd_rpcs: 0 });
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!((json["rpcs"].as_u64(), json["rpc_amplification"].as_f64(), json["retries"].as_u64()), (Some(4), Some(2.0), Some(1)));
        let report = |p: &PhaseReport| BenchReport { mode: "indexfs".into(), servers: 4, clients: 1, inflight: 1, phases: vec![p.clone()], ..Default::default() }.table();
        assert!(!report(&p).contains("lookup cache"), "no lookups, no cache line");
        p.rpc = Some(RpcFigures { cache_hits: 3, cache_misses: 1, lease_waits: 2, ..p.rpc.clone().unwrap() });
        assert!(report(&p).contains("stat     lookup cache: 75.0% hits (3 hits, 1 misses); 2 lease waits; 0 redirects"), "{}", report(&p));
    }

    #[test]
    fn the_store_build_is_reported_only_when_known() {
        let m = Measured { latencies: crate::drive::latencies_of(&[1000]), errors: 0, seconds: 0.5 };
        let mut report = BenchReport { mode: "shardfs".into(), servers: 4, clients: 1, inflight: 1, phases: vec![PhaseReport::new("stat".into(), 1, &m)], ..Default::default() };
        assert!(!report.table().contains("store"), "{}", report.table());
        assert!(serde_json::to_value(&report).unwrap().get("store_build").is_none());
        report.store_build = Some("RocksDB compiled from source".into());
        assert!(report.table().ends_with("servers' store: RocksDB compiled from source\n"), "{}", report.table());
        assert_eq!(serde_json::to_value(&report).unwrap()["store_build"], "RocksDB compiled from source");
    }

    #[test]
    fn cov_of_even_and_skewed_loads() {
        assert_eq!(cov(&[10, 10, 10, 10]), 0.0);
        let c = cov(&[0, 0, 0, 40]);
        assert!((c - 3f64.sqrt()).abs() < 1e-9, "{c}");
        assert_eq!(cov(&[]), 0.0);
    }
}
