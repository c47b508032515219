//! Seed 000's evaluation (§4: Figures 6, 7 and 8, Lessons 1-4) for every mode
//! this build has, on simulated clusters of up to 128 servers, in one call:
//! [`evaluate`] runs it, [`report::write`] writes its tables, plots and
//! `report.md`. `canopy eval` is the command.
//!
//! How the pieces fit: `trees` and `workload` make the paper's namespaces and
//! operations; `run` plays them on an in-process cluster through recording
//! clients (`record`), which gives the structural figures and each
//! operation's RPCs; `des` replays those RPCs in virtual time with costs
//! `calibrate`d from real servers, which gives throughput; `experiments` are
//! the figures' runs; `report` and `plot` write them out.

pub mod calibrate;
pub mod des;
pub mod experiments;
pub mod plot;
pub mod record;
pub mod report;
pub mod run;
pub mod trees;
pub mod workload;
mod zipf;

use calibrate::Measured;
use experiments::{Profile, Progress};
use report::{CalibrationRow, Results};
use std::collections::BTreeMap;
use std::time::Instant;

/// Real `canopy bench` runs of one mode (creates and stats on a real cluster
/// of [`calibrate::REAL_SERVERS`] server processes, 1000 directories, 4
/// clients x 32 in flight): their medians calibrate the simulator, which is
/// then checked against them.
pub struct RealRuns {
    pub runs: Vec<canopy_bench::BenchReport>,
}

/// Runs every figure for `modes` at `profile`'s size. A mode with `real` runs
/// has its costs calibrated (and checked) from them; one without uses
/// [`calibrate::UNCALIBRATED`], and the report says so.
pub async fn evaluate(profile: Profile, modes: &[&'static str], real: &BTreeMap<String, RealRuns>, progress: &Progress) -> Result<Results, String> {
    let start = Instant::now();
    let mut calibration = Vec::new();
    let mut costs = BTreeMap::new();
    for &mode in modes {
        let row = match real.get(mode) {
            Some(runs) => calibrate_mode(mode, &profile, runs, progress).await?,
            None => CalibrationRow {
                mode: mode.to_string(),
                calibrated: false,
                costs: calibrate::UNCALIBRATED,
                measured: None,
                runs: Vec::new(),
                real_create_ops_per_sec: None,
                real_stat_ops_per_sec: None,
                simulated_create_ops_per_sec: None,
                simulated_stat_ops_per_sec: None,
            },
        };
        costs.insert(mode.to_string(), row.costs);
        calibration.push(row);
    }
    let fig6 = experiments::fig6(modes, &profile, &costs, progress).await?;
    let fig7 = experiments::fig7(modes, &profile, &costs, progress).await?;
    let fig8 = experiments::fig8(modes, &profile, progress).await?;
    Ok(Results { profile, modes: modes.iter().map(|m| m.to_string()).collect(), calibration, fig6, fig7, fig8, seconds: start.elapsed().as_secs_f64() })
}

/// Calibrates `mode` from the medians of its real benches, and checks the
/// simulator, running the same workload, against them.
async fn calibrate_mode(mode: &'static str, p: &Profile, real: &RealRuns, progress: &Progress) -> Result<CalibrationRow, String> {
    let runs = real.runs.iter().map(Measured::of).collect::<Result<Vec<_>, _>>()?;
    let measured = Measured::median(&runs).ok_or("no real bench to calibrate on")?;
    let costs = measured.costs(calibrate::REAL_SERVERS);
    let (create, stat) = experiments::simulate_bench(mode, costs, p.calibration_files, p.calibration_stats, p.seed, progress).await?;
    Ok(CalibrationRow {
        mode: mode.to_string(),
        calibrated: true,
        costs,
        measured: Some(measured),
        runs,
        real_create_ops_per_sec: Some(measured.create_ops_per_sec),
        real_stat_ops_per_sec: Some(measured.stat_ops_per_sec),
        simulated_create_ops_per_sec: Some(create),
        simulated_stat_ops_per_sec: Some(stat),
    })
}
