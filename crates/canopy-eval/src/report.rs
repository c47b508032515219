//! Writes an evaluation's results: per figure a CSV, a JSON and a PNG and SVG
//! plot, and `report.md` with the tables, the plots, and seed 000's four
//! lessons, each marked confirmed or refuted by the numbers it cites.

use crate::calibrate::Measured;
use crate::des::Costs;
use crate::experiments::{Fig6Row, Fig7Row, Fig8Row, Profile};
use crate::plot::{self, Bars, Lines};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The calibration of one mode and its check.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationRow {
    pub mode: String,
    /// From the calibration bench (`measured`), or the built-in guess.
    pub calibrated: bool,
    pub costs: Costs,
    pub measured: Option<Measured>,
    /// Each real bench.
    pub runs: Vec<Measured>,
    /// The real benches' medians, and the simulator's figures for their workload.
    pub real_create_ops_per_sec: Option<f64>,
    pub real_stat_ops_per_sec: Option<f64>,
    pub simulated_create_ops_per_sec: Option<f64>,
    pub simulated_stat_ops_per_sec: Option<f64>,
}

impl CalibrationRow {
    /// Simulated over real, create and stat.
    pub fn ratios(&self) -> Option<(f64, f64)> {
        Some((self.simulated_create_ops_per_sec? / self.real_create_ops_per_sec?, self.simulated_stat_ops_per_sec? / self.real_stat_ops_per_sec?))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub profile: Profile,
    pub modes: Vec<String>,
    pub calibration: Vec<CalibrationRow>,
    pub fig6: Vec<Fig6Row>,
    pub fig7: Vec<Fig7Row>,
    pub fig8: Vec<Fig8Row>,
    pub seconds: f64,
}

/// Every file of the evaluation into `out`.
pub fn write(out: &Path, r: &Results) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let fig6 = |phase: &str| r.fig6.iter().filter(|x| x.phase == phase).cloned().collect::<Vec<_>>();
    let fig7 = |scaling: &str| r.fig7.iter().filter(|x| x.scaling == scaling).cloned().collect::<Vec<_>>();
    for (name, phase) in [("fig6a", "create"), ("fig6b", "stat-uniform"), ("fig6c", "stat-zipfian")] {
        let rows = fig6(phase);
        tables(out, name, &rows)?;
        plot6(out, name, &r.modes, phase, &rows)?;
    }
    for (name, scaling) in [("fig7a", "strong"), ("fig7b", "weak")] {
        let rows = fig7(scaling);
        tables(out, name, &rows)?;
        plot7(out, name, &r.modes, scaling, &rows)?;
    }
    tables(out, "fig8", &r.fig8)?;
    plot8(out, &r.fig8)?;
    tables(out, "calibration", &r.calibration)?;
    let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    write_file(&out.join("results.json"), &json)?;
    write_file(&out.join("report.md"), &markdown(r))
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `name`.csv and `name`.json of `rows`.
fn tables<T: Serialize>(out: &Path, name: &str, rows: &[T]) -> Result<(), String> {
    write_file(&out.join(format!("{name}.json")), &serde_json::to_string_pretty(rows).map_err(|e| e.to_string())?)?;
    write_file(&out.join(format!("{name}.csv")), &csv(rows))
}

/// Rows as CSV: a column per field (nested fields as `outer.inner`), in the
/// order of the first row's keys.
pub fn csv<T: Serialize>(rows: &[T]) -> String {
    let flat: Vec<Vec<(String, String)>> = rows.iter().map(|r| flatten("", &serde_json::to_value(r).unwrap_or_default())).collect();
    let Some(first) = flat.first() else { return String::new() };
    let mut text = first.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(",");
    text.push('\n');
    for row in &flat {
        text.push_str(&row.iter().map(|(_, v)| quote(v)).collect::<Vec<_>>().join(","));
        text.push('\n');
    }
    text
}

fn flatten(prefix: &str, v: &serde_json::Value) -> Vec<(String, String)> {
    match v {
        serde_json::Value::Object(m) => m.iter().flat_map(|(k, v)| flatten(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, v)).collect(),
        serde_json::Value::Null => vec![(prefix.to_string(), String::new())],
        serde_json::Value::String(s) => vec![(prefix.to_string(), s.clone())],
        other => vec![(prefix.to_string(), other.to_string())],
    }
}

fn quote(v: &str) -> String {
    if v.contains([',', '"', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

const TREES: [&str; 3] = ["balanced", "zipfian", "synthetic"];

fn plot6(out: &Path, name: &str, modes: &[String], phase: &str, rows: &[Fig6Row]) -> Result<(), String> {
    let get = |m: &str, t: &str, f: fn(&Fig6Row) -> f64| rows.iter().find(|r| r.mode == m && r.tree == t).map(f).unwrap_or(0.0);
    let panel = |title: &str, y: &str, f: fn(&Fig6Row) -> f64| Bars {
        title: title.into(),
        y_label: y.into(),
        groups: TREES.iter().map(|t| t.to_string()).collect(),
        values: modes.iter().map(|m| TREES.iter().map(|t| get(m, t, f)).collect()).collect(),
        log: false,
    };
    let servers = rows.first().map(|r| r.servers).unwrap_or(0);
    let title = format!("Figure {}: {phase}, {servers} servers (simulated)", &name[3..]);
    let panels = [
        panel("Throughput per server (simulated)", "operations/s per server", |r| r.ops_per_sec_per_server),
        panel("RPC amplification", "RPCs per operation", |r| r.rpc_amplification),
        panel("Load variance", "CoV of RPCs per server", |r| r.load_cov),
    ];
    plot::bar_panels(&out.join(name), &title, modes, &panels)
}

fn plot7(out: &Path, name: &str, modes: &[String], scaling: &str, rows: &[Fig7Row]) -> Result<(), String> {
    let mut xs: Vec<u32> = rows.iter().map(|r| r.servers).collect();
    xs.sort_unstable();
    xs.dedup();
    let values = modes.iter().map(|m| xs.iter().map(|&n| rows.iter().find(|r| &r.mode == m && r.servers == n).map(|r| r.ops_per_sec).unwrap_or(0.0)).collect()).collect();
    let plot = Lines {
        title: format!("Figure {}: trace replay, {scaling} scaling (simulated)", &name[3..]),
        x_label: "metadata servers (and as many clients)".into(),
        y_label: "aggregate throughput (operations/s)".into(),
        xs,
        values,
    };
    plot::lines(&out.join(name), modes, &plot)
}

fn plot8(out: &Path, rows: &[Fig8Row]) -> Result<(), String> {
    let servers = rows.first().map(|r| r.servers).unwrap_or(0);
    let mut configs: Vec<String> = Vec::new();
    for r in rows {
        if !configs.contains(&r.config) {
            configs.push(r.config.clone());
        }
    }
    let panel = |op: &str, title: &str| Bars {
        title: title.into(),
        y_label: "latency (µs, log scale)".into(),
        groups: vec!["p50".into(), "p70".into(), "p99".into()],
        values: configs.iter().map(|c| rows.iter().find(|r| &r.config == c && r.op == op).map(|r| vec![r.p50_us, r.p70_us, r.p99_us]).unwrap_or_default()).collect(),
        log: true,
    };
    let title = format!("Figure 8: stats with directory chmods mixed in, {servers} servers (in-process, real time)");
    plot::bar_panels(&out.join("fig8"), &title, &configs, &[panel("stat", "stat of a file"), panel("chmod", "chmod of a directory")])
}

/// A lesson's verdict and the numbers it rests on.
pub struct Verdict {
    pub lesson: &'static str,
    pub verdict: &'static str,
    pub evidence: String,
}

fn f6<'a>(r: &'a Results, mode: &str, tree: &str, phase: &str) -> Option<&'a Fig6Row> {
    r.fig6.iter().find(|x| x.mode == mode && x.tree == tree && x.phase == phase)
}

fn f7<'a>(r: &'a Results, mode: &str, scaling: &str, servers: u32) -> Option<&'a Fig7Row> {
    r.fig7.iter().find(|x| x.mode == mode && x.scaling == scaling && x.servers == servers)
}

fn has(r: &Results, mode: &str) -> bool {
    r.modes.iter().any(|m| m == mode)
}

const LESSON1: &str = "ShardFS shards each directory to all servers, maximizing the insertion throughput for every directory. IndexFS incrementally partitions directories as they grow, which can slow down the system when directories are small. Giraffa rarely splits individual directories and can suffer high load variance in practice.";
const LESSON2: &str = "IndexFS's file stat performance is mainly a function of its cache effectiveness. ShardFS is able to deliver deterministic fast file stat performance by replicating directory lookup state. Giraffa often suffers load imbalance even without performing pathname resolution.";
const LESSON3: &str = "Pathname lookup is a key bottleneck limiting file system metadata scalability. IndexFS suffers from load imbalance caused by cache renewals at top of the namespace tree. ShardFS is throttled on the write path with increasing overhead of replication.";
const LESSON4: &str = "ShardFS is able to drive more scalability when the frequency of metadata updates is fixed and independent of the size of the system.";

/// "confirmed" if every check holds, "refuted" if none does, else "partly
/// confirmed"; "not tested" without checks.
fn verdict(checks: &[bool]) -> &'static str {
    if checks.is_empty() {
        return "not tested";
    }
    match (checks.iter().all(|c| *c), checks.iter().any(|c| *c)) {
        (true, _) => "confirmed",
        (false, false) => "refuted",
        (false, true) => "partly confirmed",
    }
}

const GIRAFFA: &str = "giraffa";

fn giraffa_note(r: &Results) -> &'static str {
    if has(r, GIRAFFA) {
        ""
    } else {
        " The Giraffa part is not tested: this build has no giraffa mode."
    }
}

/// The four lessons' verdicts, for those the results hold both ShardFS and
/// IndexFS for.
pub fn lessons(r: &Results) -> Vec<Verdict> {
    if !(has(r, "shardfs") && has(r, "indexfs")) {
        return Vec::new();
    }
    let (lo, hi) = (r.profile.scaling.first().copied().unwrap_or(8), r.profile.scaling.last().copied().unwrap_or(128));
    [Some(lesson1(r)), Some(lesson2(r)), lesson3(r, lo, hi), lesson4(r, lo, hi)].into_iter().flatten().collect()
}

/// Lesson 1, creates (Figure 6a).
fn lesson1(r: &Results) -> Verdict {
    let (s, i) = ("shardfs", "indexfs");
    let mut checks = Vec::new();
    let mut ev = String::new();
    for t in TREES {
        if let (Some(a), Some(b)) = (f6(r, s, t, "create"), f6(r, i, t, "create")) {
            checks.push(a.ops_per_sec_per_server >= b.ops_per_sec_per_server);
            let _ = write!(ev, "{t} tree creates: ShardFS {:.0} vs IndexFS {:.0} ops/s per server (load CoV {:.3} vs {:.3}). ", a.ops_per_sec_per_server, b.ops_per_sec_per_server, a.load_cov, b.load_cov);
            if let Some(g) = f6(r, GIRAFFA, t, "create") {
                checks.push(g.load_cov > a.load_cov);
                let _ = write!(ev, "Giraffa {:.0} ops/s per server, load CoV {:.3}, {:.2} RPCs per create. ", g.ops_per_sec_per_server, g.load_cov, g.rpc_amplification);
            }
        }
    }
    let giraffa_rule = if has(r, GIRAFFA) { " and Giraffa's load is more uneven than ShardFS's" } else { "" };
    Verdict { lesson: LESSON1, verdict: verdict(&checks), evidence: format!("Figure 6a: {ev}Confirmed if ShardFS creates at least as fast on every tree{giraffa_rule}.{}", giraffa_note(r)) }
}

/// Lesson 2, stats (Figures 6b and 6c).
fn lesson2(r: &Results) -> Verdict {
    let (s, i) = ("shardfs", "indexfs");
    let mut checks = Vec::new();
    let mut ev = String::new();
    for phase in ["stat-uniform", "stat-zipfian"] {
        for t in TREES {
            if let (Some(a), Some(b)) = (f6(r, s, t, phase), f6(r, i, t, phase)) {
                checks.push(a.rpc_amplification == 1.0);
                checks.push(b.rpc_amplification > 1.0);
                let _ = write!(
                    ev,
                    "{phase} on {t}: ShardFS {:.2} RPCs per stat, IndexFS {:.2} from cold caches ({:.0}% lookups cached) and {:.2} warm. ",
                    a.rpc_amplification,
                    b.rpc_amplification,
                    100.0 * b.cache_hit_ratio.unwrap_or(0.0),
                    b.warm_rpc_amplification.unwrap_or(0.0)
                );
                if let Some(g) = f6(r, GIRAFFA, t, phase) {
                    checks.push(g.load_cov > a.load_cov);
                    let _ = write!(ev, "Giraffa {:.2} RPCs per stat, load CoV {:.3} (ShardFS {:.3}). ", g.rpc_amplification, g.load_cov, a.load_cov);
                }
            }
        }
    }
    let giraffa_rule = if has(r, GIRAFFA) { ", and Giraffa's stats, one RPC too, load the servers more unevenly than ShardFS's" } else { "" };
    Verdict {
        lesson: LESSON2,
        verdict: verdict(&checks),
        evidence: format!("Figures 6b and 6c: {ev}Confirmed if ShardFS's stats are always exactly one RPC and IndexFS's cost more until its cache warms{giraffa_rule}.{}", giraffa_note(r)),
    }
}

/// Lesson 3, strong scaling (Figure 7a), from `lo` to `hi` servers.
fn lesson3(r: &Results, lo: u32, hi: u32) -> Option<Verdict> {
    let (s, i) = ("shardfs", "indexfs");
    let (Some(s_lo), Some(s_hi), Some(i_lo), Some(i_hi)) = (f7(r, s, "strong", lo), f7(r, s, "strong", hi), f7(r, i, "strong", lo), f7(r, i, "strong", hi)) else { return None };
    {
        let eff = |a: &Fig7Row, b: &Fig7Row| b.ops_per_sec_per_server / a.ops_per_sec_per_server.max(1e-9);
        let checks = [i_hi.load_cov > i_lo.load_cov, s_hi.rpc_amplification > s_lo.rpc_amplification, eff(s_lo, s_hi) < 1.0];
        Some(Verdict {
            lesson: LESSON3,
            verdict: verdict(&checks),
            evidence: format!(
                "Figure 7a (strong scaling, {lo} to {hi} servers): IndexFS's load CoV {:.3} -> {:.3} and RPCs per operation {:.2} -> {:.2}; ShardFS's RPCs per operation {:.2} -> {:.2} (each directory change reaches every server) and its throughput per server {:.0} -> {:.0} ops/s (efficiency {:.2}; IndexFS {:.2}). Confirmed if IndexFS's load grows more uneven, ShardFS's replication costs more RPCs and its per-server throughput falls.",
                i_lo.load_cov,
                i_hi.load_cov,
                i_lo.rpc_amplification,
                i_hi.rpc_amplification,
                s_lo.rpc_amplification,
                s_hi.rpc_amplification,
                s_lo.ops_per_sec_per_server,
                s_hi.ops_per_sec_per_server,
                eff(s_lo, s_hi),
                eff(i_lo, i_hi)
            ),
        })
    }
}

/// Lesson 4, weak scaling (Figure 7b), from `lo` to `hi` servers.
fn lesson4(r: &Results, lo: u32, hi: u32) -> Option<Verdict> {
    let (s, i) = ("shardfs", "indexfs");
    let (Some(s_lo), Some(s_hi), Some(i_lo), Some(i_hi)) = (f7(r, s, "weak", lo), f7(r, s, "weak", hi), f7(r, i, "weak", lo), f7(r, i, "weak", hi)) else { return None };
    {
        let (es, ei) = (weak_efficiency(s_lo, s_hi), weak_efficiency(i_lo, i_hi));
        Some(Verdict {
            lesson: LESSON4,
            verdict: verdict(&[es >= 0.9, es >= ei]),
            evidence: format!(
                "Figure 7b (weak scaling, {lo} to {hi} servers): throughput per server at {hi} over that at {lo}: ShardFS {es:.2}, IndexFS {ei:.2}. ShardFS's RPCs per operation {:.2} -> {:.2}; at {hi} servers its busiest server is busy {:.0}% of the run and the lock service {:.0}%{}. Confirmed if ShardFS keeps at least 0.9 and at least IndexFS's.",
                s_lo.rpc_amplification,
                s_hi.rpc_amplification,
                100.0 * s_hi.busiest_server_utilization,
                100.0 * s_hi.lockd_utilization,
                if s_hi.lockd_utilization > 0.95 && s_hi.busiest_server_utilization < 0.95 {
                    " (the one lock service, which every transaction's lock and unlock reach, bounds the throughput: file renames are file operations and grow with the system)"
                } else {
                    ""
                }
            ),
        })
    }
}

/// Throughput per server at the larger size over that at the smaller.
pub fn weak_efficiency(small: &Fig7Row, large: &Fig7Row) -> f64 {
    large.ops_per_sec_per_server / small.ops_per_sec_per_server.max(1e-9)
}

/// A median and, in brackets, the runs it is the median of.
fn with_runs(median: Option<f64>, runs: impl Iterator<Item = f64>) -> String {
    let runs: Vec<String> = runs.map(|r| format!("{r:.0}")).collect();
    match runs.is_empty() {
        true => opt(median, 0),
        false => format!("{} ({})", opt(median, 0), runs.join(", ")),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "-".into())
}

fn markdown(r: &Results) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# Canopy: seed 000's evaluation ({} profile)\n", r.profile.name);
    let _ = writeln!(
        m,
        "Modes: {}. Made by `canopy eval{} --out DIR` in {:.0} s. Figures 6 and 7 are **simulated**: structure (RPCs, load) from in-process clusters of that many servers and clients, throughput from a discrete-event simulation of what they recorded, with costs calibrated from real servers on this machine (below). Figure 8 is measured in real time on an in-process cluster.\n",
        r.modes.join(", "),
        if r.profile.name == "quick" { " --quick" } else { "" },
        r.seconds
    );
    let _ = writeln!(m, "## Lessons\n");
    for (n, v) in lessons(r).iter().enumerate() {
        let _ = writeln!(m, "{}. **{}.** {}\n\n   *{}*\n", n + 1, v.verdict, v.evidence, v.lesson);
    }
    for (name, phase, title) in [("fig6a", "create", "Figure 6a: creation phase"), ("fig6b", "stat-uniform", "Figure 6b: query phase, uniform file choice"), ("fig6c", "stat-zipfian", "Figure 6c: query phase, Zipfian file choice (exponent 1.8)")] {
        let _ = writeln!(m, "## {title} (simulated)\n\n![{title}]({name}.png)\n");
        let _ = writeln!(m, "| mode | tree | servers | ops | ops/s per server | RPCs/op | RPCs/op warm | cached lookups | load CoV |\n|---|---|---|---|---|---|---|---|---|");
        for x in r.fig6.iter().filter(|x| x.phase == phase) {
            let cached = x.cache_hit_ratio.map(|c| format!("{:.0}%", 100.0 * c)).unwrap_or_else(|| "-".into());
            let _ = writeln!(m, "| {} | {} | {} | {} | {:.0} | {:.2} | {} | {} | {:.3} |", x.mode, x.tree, x.servers, x.ops, x.ops_per_sec_per_server, x.rpc_amplification, opt(x.warm_rpc_amplification, 2), cached, x.load_cov);
        }
        m.push('\n');
    }
    for (name, scaling, title) in [("fig7a", "strong", "Figure 7a: trace replay, strong scaling"), ("fig7b", "weak", "Figure 7b: trace replay, weak scaling")] {
        let _ = writeln!(m, "## {title} (simulated)\n\n![{title}]({name}.png)\n");
        let _ = writeln!(m, "| mode | servers | ops | ops/s | ops/s per server | RPCs/op | load CoV | lease waits | busiest server busy | lock service busy |\n|---|---|---|---|---|---|---|---|---|---|");
        for x in r.fig7.iter().filter(|x| x.scaling == scaling) {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.3} | {} | {:.0}% | {:.0}% |",
                x.mode,
                x.servers,
                x.ops,
                x.ops_per_sec,
                x.ops_per_sec_per_server,
                x.rpc_amplification,
                x.load_cov,
                x.lease_waits,
                100.0 * x.busiest_server_utilization,
                100.0 * x.lockd_utilization
            );
        }
        m.push('\n');
    }
    let _ = writeln!(m, "## Figure 8: stats with directory chmods mixed in (in-process, real time)\n\n![Figure 8](fig8.png)\n");
    let _ = writeln!(m, "| configuration | operation | servers | count | p50 µs | p70 µs | p99 µs | lease waits |\n|---|---|---|---|---|---|---|---|");
    for x in &r.fig8 {
        let _ = writeln!(m, "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |", x.config, x.op, x.servers, x.count, x.p50_us, x.p70_us, x.p99_us, x.lease_waits);
    }
    let _ = writeln!(m, "\n## Calibration\n");
    let _ = writeln!(m, "Each RPC costs its server a service time by the work it does, from real `canopy bench` runs (creates and stats, 4 server processes, 4 clients x 32 in flight) on this machine, the median of each figure over the runs (they are listed: the machine is shared, and runs differ): servers / (RPCs per second). The simulator then runs the bench's workload on 4 simulated servers, and its rates are set beside those medians. A lock service RPC costs the mean server RPC times the ratio of CPU time per RPC of the real lock service and servers (their mkdir phases lock). Network: {} µs each way (assumed).\n", crate::calibrate::NET_NS / 1000);
    let _ = writeln!(m, "| mode | calibrated | read µs | write µs | lock µs | real creates/s (median) | simulated | ratio | real stats/s (median) | simulated | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|");
    for c in &r.calibration {
        let (rc, rs) = c.ratios().map(|(a, b)| (Some(a), Some(b))).unwrap_or((None, None));
        let _ = writeln!(
            m,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} |",
            c.mode,
            if c.calibrated { "yes" } else { "no (built-in costs)" },
            c.costs.read_ns as f64 / 1000.0,
            c.costs.write_ns as f64 / 1000.0,
            c.costs.lock_ns as f64 / 1000.0,
            with_runs(c.real_create_ops_per_sec, c.runs.iter().map(|r| r.create_ops_per_sec)),
            opt(c.simulated_create_ops_per_sec, 0),
            opt(rc, 2),
            with_runs(c.real_stat_ops_per_sec, c.runs.iter().map(|r| r.stat_ops_per_sec)),
            opt(c.simulated_stat_ops_per_sec, 0),
            opt(rs, 2)
        );
    }
    let _ = writeln!(m, "\n## Workloads\n");
    let _ = writeln!(m, "Trees (`canopy-eval/src/trees.rs`): balanced (fan-out 10, files equally in the leaves), Zipfian (the same directories, leaf sizes drawn from Zipf(1.8)), synthetic (a stand-in for the trace namespaces, which are not public: directories placed uniformly under those less than 16 deep, sizes from a Pareto distribution of index 1.1, so about 90% of directories hold under 128 entries and a few are very large). Files are created depth-first. The trace replay (`workload.rs`) is a generated mix shaped like the paper's Figure 2 (open most, readdir next): {}; cut into sub-traces of 200 operations dealt to the clients in turn, each sub-trace working mostly in one directory. Weak scaling multiplies files and file operations by servers/{}; directories and directory operations stay fixed.\n",
        crate::workload::TRACE_MIX.iter().map(|(k, w)| format!("{k:?} {:.0}%", *w as f64 / 10.0).to_lowercase()).collect::<Vec<_>>().join(", "),
        r.profile.scaling.first().copied().unwrap_or(8));
    let _ = writeln!(m, "Profile: `{}`.", serde_json::to_string(&r.profile).unwrap_or_default());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_a_column_per_field_and_quotes_what_needs_it() {
        #[derive(Serialize)]
        struct Row {
            name: String,
            n: u64,
            x: Option<f64>,
        }
        let text = csv(&[Row { name: "a,b".into(), n: 3, x: None }, Row { name: "c".into(), n: 4, x: Some(0.5) }]);
        assert_eq!(text, "n,name,x\n3,\"a,b\",\n4,c,0.5\n");
        assert_eq!(csv::<Row>(&[]), "");
    }

    #[test]
    fn a_verdict_needs_every_check() {
        assert_eq!(verdict(&[true, true]), "confirmed");
        assert_eq!(verdict(&[true, false]), "partly confirmed");
        assert_eq!(verdict(&[false]), "refuted");
        assert_eq!(verdict(&[]), "not tested");
    }
}
