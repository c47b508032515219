//! `canopy batch`: BatchFS batches from the command line (begin, exec,
//! commit, abort, status) and the benchmark in the shape of seed 002's
//! Figure 3.

use crate::commands::{self, NsCmd};
use crate::connect::{self, Who};
use canopy_batch::{begin, begin_with, commit, default_base, id_text, open, parse_id, CommitReport, Start};
use canopy_client::Client;
use clap::{Parser, Subcommand};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum BatchCmd {
    /// Start a batch rooted at PATH (made if missing): prints its id.
    Begin {
        path: String,
        /// Start from a copy of what is under PATH (else the batch starts
        /// empty and sees none of it); the commit carries the batch's moves,
        /// removals and changes of it.
        #[arg(long)]
        snapshot: bool,
    },
    /// Run a namespace command (mkdir, touch, ls, stat, mv, rm, chmod, ...) in
    /// the batch's private namespace: `canopy batch exec ID -- touch /job/f`.
    Exec {
        id: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Merge the batch into the cluster; refused paths are listed, and saved
    /// beside the batches as ID.rejected.
    Commit { id: String },
    /// Drop the batch and its private namespace.
    Abort { id: String },
    /// Open batches: those the servers record and those on this machine.
    Status,
    /// Seed 002 Figure 3: clients create files in private directories and stat
    /// them in random order, synchronously and as batches.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Clients, each with its own directory (and, batched, its own batch).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Files each client makes in its batch.
    #[arg(long, default_value_t = 250_000)]
    pub files: usize,
    /// Files each client makes synchronously, one create at a time.
    #[arg(long, default_value_t = 5_000)]
    pub sync_files: usize,
    /// Stats each client makes afterwards, in random order, per phase.
    #[arg(long, default_value_t = 5_000)]
    pub stats: usize,
    /// Servers of the temporary cluster (when no cluster is given).
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    /// Namespace mode of the temporary cluster (shardfs or indexfs).
    #[arg(long, default_value = "shardfs")]
    pub mode: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Where batches live (`$CANOPY_BATCHES`, else `~/.canopy/batches`).
fn base() -> PathBuf {
    default_base()
}

pub fn run(cmd: BatchCmd, cluster: Option<&Path>, who: &Who) -> Result<ExitCode, String> {
    if let BatchCmd::Bench(args) = &cmd {
        return bench(args, cluster);
    }
    connect::with_client(cluster, who, |client| async move {
        match cmd {
            BatchCmd::Begin { path, snapshot } => {
                let start = if snapshot { Start::Snapshot } else { Start::Empty };
                let b = begin_with(&client, &commands::norm(&path), &base(), start).await.map_err(|e| format!("cannot begin a batch at '{path}': {e}"))?;
                println!("{}", id_text(b.meta.id));
                Ok(ExitCode::SUCCESS)
            }
            BatchCmd::Exec { id, command } => exec(&id, command).await,
            BatchCmd::Commit { id } => {
                let b = open(&base(), parse_id(&id)?)?;
                let report = commit(b, &client).await.map_err(|e| format!("commit of batch {id}: {e} (run it again to finish it)"))?;
                print_commit(&id, &report)?;
                Ok(if report.rejected.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
            }
            BatchCmd::Abort { id } => {
                let b = open(&base(), parse_id(&id)?)?;
                canopy_batch::abort(b, &client).await.map_err(|e| format!("abort of batch {id}: {e}"))?;
                Ok(ExitCode::SUCCESS)
            }
            BatchCmd::Status => status(&client).await,
            BatchCmd::Bench(_) => unreachable!("handled above"),
        }
    })
}

/// A namespace command's words, parsed as the CLI's own.
#[derive(Parser)]
#[command(name = "canopy batch exec ID --", no_binary_name = false)]
struct ExecCli {
    #[command(subcommand)]
    cmd: NsCmd,
}

async fn exec(id: &str, command: Vec<String>) -> Result<ExitCode, String> {
    let cli = ExecCli::try_parse_from(std::iter::once("exec".to_string()).chain(command)).map_err(|e| e.to_string())?;
    let b = open(&base(), parse_id(id)?)?;
    let ok = commands::dispatch(&b.client(), cli.cmd).await?;
    b.close().await.map_err(|e| format!("batch {id}: {e}"))?;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_commit(id: &str, r: &CommitReport) -> Result<(), String> {
    for (path, e) in &r.rejected {
        eprintln!("canopy: rejected '{path}': {e}");
    }
    for path in &r.left_in_stage {
        eprintln!("canopy: an entry refused its new place is kept at '{path}'");
    }
    if !r.rejected.is_empty() {
        let log = base().join(format!("{id}.rejected"));
        let text: String = r.rejected.iter().map(|(p, e)| format!("{p}\t{}\t{e}\n", e.code())).collect();
        std::fs::create_dir_all(base()).and_then(|_| std::fs::write(&log, text)).map_err(|e| format!("{}: {e}", log.display()))?;
        eprintln!("canopy: {} rejected; listed in {}", r.rejected.len(), log.display());
    }
    println!(
        "batch {id}: {} files made ({} already there from an earlier try), {} directories made, {} used as they were, {} entries moved, {} removed, {} changed, {} rejected; {:.3} s (read {:.3} s, directories and changes {:.3} s, staging {:.3} s, applying {:.3} s, {} chunks in {} rounds)",
        r.files.made,
        r.files.landed_before,
        r.dirs_made,
        r.dirs_adopted,
        r.moved,
        r.removed,
        r.modified,
        r.rejected.len(),
        r.total_time.as_secs_f64(),
        r.export_time.as_secs_f64(),
        r.dirs_time.as_secs_f64(),
        r.files.stage_time.as_secs_f64(),
        r.files.apply_time.as_secs_f64(),
        r.files.chunks,
        r.files.rounds
    );
    Ok(())
}

async fn status(client: &Client) -> Result<ExitCode, String> {
    let recorded = canopy_client::batch::list(client).await.map_err(|e| format!("batch status: {e}"))?;
    println!("{:<16}  {:>6}  {:>6}  {:>10}  ROOT", "BATCH", "UID", "GID", "STAGED");
    for b in &recorded {
        println!("{:<16}  {:>6}  {:>6}  {:>10}  {}", id_text(b.batch), b.uid, b.gid, b.staged, b.root);
    }
    for m in canopy_batch::local(&base()) {
        let size = dir_bytes(&base().join(id_text(m.id)));
        println!("local {}: root {}, owner {}:{}, private store {} KiB", id_text(m.id), m.root, m.owner.uid, m.owner.gid, size / 1024);
    }
    Ok(ExitCode::SUCCESS)
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.flatten().map(|e| match e.metadata() {
        Ok(m) if m.is_dir() => dir_bytes(&e.path()),
        Ok(m) => m.len(),
        Err(_) => 0,
    }).sum()
}

/// The Figure 3 report.
#[derive(Debug, Default, Serialize)]
pub struct BenchReport {
    pub mode: String,
    pub servers: u32,
    pub clients: usize,
    pub sync_files: usize,
    pub batch_files: usize,
    pub sync_creates_per_s: f64,
    pub sync_stats_per_s: f64,
    pub batch_client_s: f64,
    pub batch_commit_s: f64,
    /// The servers' part of the commit: staging plus applying (the slowest client's).
    pub batch_ingest_s: f64,
    pub batch_client_creates_per_s: f64,
    pub batch_end_to_end_creates_per_s: f64,
    pub batch_stats_per_s: f64,
    pub end_to_end_over_sync: f64,
}

fn bench(args: &BenchArgs, cluster: Option<&Path>) -> Result<ExitCode, String> {
    let run = |c: &canopy_client::cluster::ClusterFile, key: &canopy_client::keyfile::Loaded| {
        let rt = connect::runtime()?;
        rt.block_on(async {
            let client = Client::new(connect::namespace(c, key, Default::default())?, canopy_proto::Creds::root());
            bench_on(&client, args, c.mode.name().to_string()).await
        })
    };
    let report = match cluster {
        Some(_) => {
            let c = connect::load(cluster)?;
            let key = connect::cluster_key(&c, "batch bench")?;
            run(&c, &key)?
        }
        None => crate::local::on_default_temporary_cluster(args.servers, &args.mode, run)?,
    };
    print_bench(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

async fn bench_on(client: &Client, args: &BenchArgs, mode: String) -> Result<BenchReport, String> {
    let top = format!("/batch-bench-{}", std::process::id());
    let err = |what: &'static str| move |e: canopy_proto::Errno| format!("{what}: {e}");
    client.mkdir(&top, 0o755).await.map_err(err("mkdir"))?;
    let n = args.clients;
    let mut r = BenchReport { mode, servers: client.namespace().servers(), clients: n, sync_files: args.sync_files, batch_files: args.files, ..Default::default() };
    // Synchronous: each client makes its directory and its files one create at a time.
    let took = make_all((0..n).map(|i| (client.clone(), format!("{top}/sync-{i}"))).collect(), args.sync_files, "sync create").await?;
    r.sync_creates_per_s = rate(n * args.sync_files, took);
    r.sync_stats_per_s = stats(client, &top, "sync", n, args.sync_files, args.stats).await?;
    // Batched: each client works in its own batch, then commits it.
    let base = tempfile::Builder::new().prefix("canopy-batches-").tempdir().map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for i in 0..n {
        batches.push(begin(client, &format!("{top}/batch-{i}"), base.path()).await.map_err(err("begin"))?);
    }
    let client_time = make_all(batches.iter().enumerate().map(|(i, b)| (b.client(), format!("{top}/batch-{i}/d"))).collect(), args.files, "batch create").await?;
    let t = Instant::now();
    let reports = futures::future::join_all(batches.into_iter().map(|b| commit(b, client))).await;
    let commit_time = t.elapsed();
    let mut ingest = Duration::ZERO;
    for rep in reports {
        let rep = rep.map_err(err("commit"))?;
        if !rep.rejected.is_empty() {
            return Err(format!("commit rejected {} paths, first {:?}", rep.rejected.len(), rep.rejected[0]));
        }
        ingest = ingest.max(rep.files.stage_time + rep.files.apply_time);
    }
    r.batch_client_s = client_time.as_secs_f64();
    r.batch_commit_s = commit_time.as_secs_f64();
    r.batch_ingest_s = ingest.as_secs_f64();
    r.batch_client_creates_per_s = rate(n * args.files, client_time);
    r.batch_end_to_end_creates_per_s = rate(n * args.files, client_time + commit_time);
    r.batch_stats_per_s = stats(client, &top, "batch", n, args.files, args.stats).await?;
    r.end_to_end_over_sync = r.batch_end_to_end_creates_per_s / r.sync_creates_per_s.max(1e-9);
    Ok(r)
}

/// [`make_files`] for each (client, directory), each a task of its own (so
/// the clients share the cores); how long they took together.
async fn make_all(jobs: Vec<(Client, String)>, files: usize, what: &str) -> Result<Duration, String> {
    let t = Instant::now();
    let made = futures::future::join_all(jobs.into_iter().map(|(client, dir)| tokio::spawn(make_files(client, dir, files)))).await;
    for m in made {
        m.map_err(|e| e.to_string())?.map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(t.elapsed())
}

/// Makes directory `dir` and `files` files in it, one create at a time (the
/// cluster's client, or a batch's).
async fn make_files(client: Client, dir: String, files: usize) -> Result<(), canopy_proto::Errno> {
    client.mkdir(&dir, 0o755).await?;
    let mut path = format!("{dir}/");
    for f in 0..files {
        path.truncate(dir.len() + 1);
        write!(path, "f{f}").expect("writing to a String");
        client.create(&path, 0o644).await?;
    }
    Ok(())
}

/// Each client stats `count` of its `files` in random order, one at a time.
async fn stats(client: &Client, top: &str, kind: &str, n: usize, files: usize, count: usize) -> Result<f64, String> {
    let t = Instant::now();
    let runs = (0..n).map(|i| async move {
        let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..count {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = (x % files.max(1) as u64) as usize;
            let path = if kind == "sync" { format!("{top}/sync-{i}/f{f}") } else { format!("{top}/batch-{i}/d/f{f}") };
            client.stat(&path).await.map_err(|e| format!("stat {path}: {e}"))?;
        }
        Ok::<(), String>(())
    });
    futures::future::join_all(runs).await.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(rate(n * count, t.elapsed()))
}

fn print_bench(r: &BenchReport) {
    println!("BatchFS bench (seed 002 Figure 3): {} {} servers, {} clients", r.mode, r.servers, r.clients);
    println!("{:<44} {:>12}", "", "ops/s");
    println!("{:<44} {:>12.0}", format!("sync create ({} files/client)", r.sync_files), r.sync_creates_per_s);
    println!("{:<44} {:>12.0}", "sync stat (random order)", r.sync_stats_per_s);
    println!("{:<44} {:>12.0}", format!("batch create, client ({} files/client)", r.batch_files), r.batch_client_creates_per_s);
    println!("{:<44} {:>12.0}", "batch create, end to end", r.batch_end_to_end_creates_per_s);
    println!("{:<44} {:>12.0}", "batch stat (random order)", r.batch_stats_per_s);
    println!(
        "batch: client {:.3} s, commit {:.3} s (servers staging and applying {:.3} s); end to end {:.1}x the synchronous create rate",
        r.batch_client_s, r.batch_commit_s, r.batch_ingest_s, r.end_to_end_over_sync
    );
}
