//! Several targets run with the same configuration, side by side: a table with a
//! row per phase and, per target, its throughput, median and 99th percentile
//! latency and errors; and a JSON document with every target's full phase reports:
//! `{"mode": "posix", "clients", "inflight", "targets": [{"dir", "root", "phases": [...]}]}`.

use crate::report::PhaseReport;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// The directory as given.
    pub dir: String,
    /// The directory the tree was made in.
    pub root: String,
    pub phases: Vec<PhaseReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub mode: String,
    pub clients: usize,
    pub inflight: usize,
    pub targets: Vec<TargetReport>,
}

impl Comparison {
    pub fn table(&self) -> String {
        let mut s = format!("mode {}, {} clients x {} in flight ({} threads)\n", self.mode, self.clients, self.inflight, self.clients * self.inflight);
        for (i, t) in self.targets.iter().enumerate() {
            s += &format!("[{}] {}\n", i + 1, t.dir);
        }
        s += &format!("{:<8} {:>9}", "phase", "ops");
        for i in 1..=self.targets.len() {
            s += &format!(" | {:>11} {:>8} {:>8} {:>6}", format!("[{i}] ops/s"), "p50 us", "p99 us", "errors");
        }
        s += "\n";
        // Every target ran the same plan, so the same phases with the same ops.
        let Some(first) = self.targets.first() else { return s };
        for (row, phase) in first.phases.iter().enumerate() {
            s += &format!("{:<8} {:>9}", phase.name, phase.ops);
            for t in &self.targets {
                match t.phases.get(row) {
                    Some(p) => s += &format!(" | {:>11.0} {:>8.1} {:>8.1} {:>6}", p.ops_per_sec, p.latency_us.p50, p.latency_us.p99, p.errors),
                    None => s += &format!(" | {:>11} {:>8} {:>8} {:>6}", "-", "-", "-", "-"),
                }
            }
            s += "\n";
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::Measured;

    fn target(dir: &str, per_op_ns: u64, errors: u64) -> TargetReport {
        let phase = |name: &str, ops: u64| PhaseReport::new(name.into(), ops, &Measured { latencies: crate::drive::latencies_of(&vec![per_op_ns; ops as usize]), errors, seconds: ops as f64 * per_op_ns as f64 / 1e9 });
        TargetReport { dir: dir.into(), root: format!("{dir}/canopy-bench-1"), phases: vec![phase("mkdir", 10), phase("stat", 400)] }
    }

    #[test]
    fn targets_side_by_side() {
        let c = Comparison { mode: "posix".into(), clients: 2, inflight: 3, targets: vec![target("/dev/shm/x", 2500, 0), target("/tmp/y", 10_000, 1)] };
        let expected = "\
mode posix, 2 clients x 3 in flight (6 threads)
[1] /dev/shm/x
[2] /tmp/y
phase          ops |   [1] ops/s   p50 us   p99 us errors |   [2] ops/s   p50 us   p99 us errors
mkdir           10 |      400000      2.5      2.5      0 |      100000     10.0     10.0      1
stat           400 |      400000      2.5      2.5      0 |      100000     10.0     10.0      1
";
        assert_eq!(c.table(), expected);
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["targets"][1]["dir"], "/tmp/y");
        assert!((json["targets"][1]["phases"][1]["latency_us"]["p50"].as_f64().unwrap() - 10.0).abs() <= 0.01, "three significant figures");
        assert!(json["targets"][0]["phases"][0].get("rpc_amplification").is_none());
    }
}
