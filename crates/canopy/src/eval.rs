//! `canopy eval`: seed 000's evaluation in one command (see `canopy-eval`).
//! The simulator is calibrated on real temporary clusters of server
//! processes, started here as `canopy bench` starts its own.

use crate::local::{self, BenchArgs};
use canopy_eval::experiments::{Profile, Progress};
use canopy_eval::RealRuns;
use std::collections::BTreeMap;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct EvalArgs {
    /// Where the figures (CSV, JSON, PNG, SVG) and report.md go; made if missing.
    #[arg(long)]
    pub out: PathBuf,
    /// The small profile: about a minute and a half on a 2-core machine (the
    /// full one about nine minutes).
    #[arg(long)]
    pub quick: bool,
}

/// A real bench of `mode` on a temporary 4-server cluster.
fn real_bench(mode: &str, files: usize, stats: usize) -> Result<canopy_bench::BenchReport, String> {
    let args = BenchArgs {
        servers: canopy_eval::calibrate::REAL_SERVERS,
        clients: 4,
        inflight: 32,
        dirs: 1000,
        files,
        stats,
        phases: "mkdir,create,stat".into(),
        json: None,
        durability: "wal".into(),
        mode: mode.into(),
        lease: None,
        split_threshold: None,
        tcp: false,
        replicas: 1,
        posix: Vec::new(),
        keep: false,
    };
    local::bench_on_temporary_cluster(&args)
}

pub fn eval(args: &EvalArgs) -> Result<ExitCode, String> {
    // Before minutes of work: a place the report cannot go is said at once.
    std::fs::create_dir_all(&args.out).map_err(|e| format!("cannot make {}: {e}", args.out.display()))?;
    let profile = if args.quick { Profile::quick() } else { Profile::full() };
    let progress = Progress::new(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let modes = canopy_client::cluster::MODES;
    eprintln!("canopy eval: the {} profile for {}; calibrating on real 4-server clusters first", profile.name, modes.join(", "));
    // The real benches run their own runtimes, so they come first.
    let mut real = BTreeMap::new();
    for &mode in modes {
        let started = std::time::Instant::now();
        let runs = (0..profile.calibration_runs).map(|_| real_bench(mode, profile.calibration_files, profile.calibration_stats)).collect::<Result<Vec<_>, _>>()?;
        eprintln!("canopy eval: {} real benches of {mode}: {:.1} s", runs.len(), started.elapsed().as_secs_f64());
        real.insert(mode.to_string(), RealRuns { runs });
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let results = rt.block_on(canopy_eval::evaluate(profile, modes, &real, &progress))?;
    canopy_eval::report::write(&args.out, &results)?;
    for (i, v) in canopy_eval::report::lessons(&results).iter().enumerate() {
        eprintln!("canopy eval: lesson {}: {}", i + 1, v.verdict);
    }
    println!("{}", args.out.join("report.md").display());
    Ok(ExitCode::SUCCESS)
}
