//! The embedded local cluster: `canopy up` starts the servers and the lock service
//! as background processes on loopback (free ports, one data directory each, a
//! cluster file in the cluster directory), `canopy down` stops them, `canopy
//! status` reports on them. `canopy bench` uses the same pieces for a temporary
//! cluster when none is given, and none at all with `--posix`.

use crate::connect;
use crate::canopy_daemons::{listen_new, own_key, read_pid};
use crate::lifecycle::{self, DaemonFlags, Listeners};
use crate::modes;
use crate::process;
use canopy_bench::{BenchConfig, BenchDir, Comparison, TargetReport};
use canopy_client::cluster::{self, ClusterFile};
use canopy_proto::modes::{LeasePolicy, ModeOptions};
use canopy_proto::Creds;
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct UpArgs {
    /// Metadata servers (default 4; an existing cluster keeps its count).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Cluster directory (default: $CANOPY_HOME, else ~/.canopy/local).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Server durability: wal, fsync or group:MS.
    #[arg(long, default_value = "wal")]
    pub durability: String,
    /// Namespace mode of a new cluster (default shardfs; an existing cluster
    /// keeps its own).
    #[arg(long)]
    pub mode: Option<String>,
    /// IndexFS lookup lease policy: fixed[:MS] (default fixed:1000),
    /// depth[:K_MS] (K/depth) or rate[:L_MS] (L x reads/(reads+writes)). Kept in
    /// the cluster file; daemons started later read it.
    #[arg(long)]
    pub lease: Option<String>,
    /// IndexFS: entries a directory partition holds before it splits to
    /// another server (GIGA+; default 2000). Kept in the cluster file.
    #[arg(long)]
    pub split_threshold: Option<u64>,
    /// A new cluster's daemons listen on loopback TCP ports instead of Unix
    /// sockets in the cluster directory (the default: a round trip costs
    /// about half).
    #[arg(long)]
    pub tcp: bool,
    /// Seconds a daemon keeps a connection with nothing to do (default 300);
    /// clients retire theirs after half of it.
    #[arg(long)]
    pub idle_secs: Option<u64>,
    /// Copies of every server and of the lock service in a new cluster: each
    /// a replica group of this many members, kept with Raft (default 1; 3
    /// survives the loss of any one). An existing cluster keeps its own.
    #[arg(long)]
    pub replicas: Option<u32>,
}

#[derive(Args)]
pub struct DirArgs {
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Servers of the temporary cluster (when no cluster is given).
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    /// Client instances, each with its own connections (with --posix, the bench
    /// runs clients x inflight threads).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Requests in flight per client.
    #[arg(long, default_value_t = 32)]
    pub inflight: usize,
    #[arg(long, default_value_t = 1000)]
    pub dirs: usize,
    #[arg(long, default_value_t = 1_000_000)]
    pub files: usize,
    #[arg(long, default_value_t = 2_000_000)]
    pub stats: usize,
    /// Comma-separated phases, in order.
    #[arg(long, default_value = "mkdir,create,stat")]
    pub phases: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Server durability for the temporary cluster.
    #[arg(long, default_value = "wal")]
    pub durability: String,
    /// Namespace mode of the temporary cluster (shardfs, indexfs or giraffa).
    #[arg(long, default_value = "shardfs", conflicts_with = "posix")]
    pub mode: String,
    /// IndexFS lookup lease policy of the temporary cluster (see `canopy up`).
    #[arg(long, conflicts_with = "posix")]
    pub lease: Option<String>,
    /// IndexFS split threshold of the temporary cluster (see `canopy up`).
    #[arg(long, conflicts_with = "posix")]
    pub split_threshold: Option<u64>,
    /// The temporary cluster listens on loopback TCP (see `canopy up --tcp`).
    #[arg(long, conflicts_with = "posix")]
    pub tcp: bool,
    /// Members of each replica group of the temporary cluster (see `canopy up`).
    #[arg(long, default_value_t = 1, conflicts_with = "posix")]
    pub replicas: u32,
    /// Bench this directory with system calls instead of Canopy; no cluster is
    /// started or used. Repeat to compare directories side by side.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["servers", "durability"])]
    pub posix: Vec<PathBuf>,
    /// With --posix: leave the tree in DIR/canopy-bench-<pid> instead of removing it.
    #[arg(long, requires = "posix")]
    pub keep: bool,
}

/// A new cluster's settings chosen on the command line: the mode's, kept in
/// the cluster file, and the kind of socket its daemons listen on.
struct Tuning<'a> {
    lease: Option<&'a str>,
    split_threshold: Option<u64>,
    tcp: bool,
    /// Members per replica group.
    replicas: Option<u32>,
}

impl Tuning<'_> {
    /// `canopy up`'s defaults.
    const DEFAULT: Tuning<'static> = Tuning { lease: None, split_threshold: None, tcp: false, replicas: None };
}

impl Tuning<'_> {
    fn check(&self) -> Result<(), String> {
        if let Some(l) = self.lease {
            LeasePolicy::parse(l)?;
        }
        if self.split_threshold == Some(0) {
            return Err("--split-threshold must be at least 1".into());
        }
        Ok(())
    }

    /// `opts` with the options chosen here; one the mode does not take is
    /// refused rather than kept where nothing reads it.
    fn apply(&self, opts: &mut ModeOptions) -> Result<(), String> {
        self.check()?;
        let ModeOptions::Indexfs(o) = opts else {
            if self.lease.is_some() || self.split_threshold.is_some() {
                return Err(format!("--lease and --split-threshold are IndexFS's options; a {} cluster takes neither", opts.name()));
            }
            return Ok(());
        };
        if let Some(l) = self.lease {
            o.lease = LeasePolicy::parse(l)?;
        }
        if let Some(t) = self.split_threshold {
            o.split_threshold = t;
        }
        Ok(())
    }
}

/// Where a new cluster in `dir` puts its daemons' Unix sockets: `dir` itself,
/// made absolute. `None`: TCP on loopback, asked for, or because the socket
/// paths would be too long for the kernel.
fn socket_dir(dir: &Path, tcp: bool) -> Result<Option<PathBuf>, String> {
    if tcp {
        return Ok(None);
    }
    let abs = dir.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
    // The longest name is "server-1023-7.sock".
    if abs.as_os_str().len() + "/server-1023-7.sock".len() > canopy_rpc::socket::MAX_UNIX_PATH {
        eprintln!("canopy: {} is too long a path for Unix sockets; the daemons listen on loopback TCP", abs.display());
        return Ok(None);
    }
    Ok(Some(abs))
}

/// Loads the cluster in `dir`, or makes a new one on Unix sockets in `dir` (or
/// free loopback ports), whose listening sockets stay open for the daemons.
fn cluster_in(dir: &Path, servers: Option<u32>, mode: Option<&str>, tuning: &Tuning) -> Result<(ClusterFile, Listeners), String> {
    let file = dir.join("cluster.json");
    if file.exists() {
        let mut c = ClusterFile::load(&file)?;
        let mut opts = c.mode.clone();
        tuning.apply(&mut opts)?;
        if opts != c.mode {
            c.mode = opts;
            c.save(&file)?;
        }
        if let Some(r) = tuning.replicas.filter(|r| *r as usize != c.replicas()) {
            return Err(format!("the cluster in {} has {} members per group, not {r}; `canopy down` and remove it to change", dir.display(), c.replicas()));
        }
        if let Some(n) = servers.filter(|n| *n as usize != c.servers.len()) {
            return Err(format!("the cluster in {} has {} servers, not {n}; `canopy down` and remove it to change", dir.display(), c.servers.len()));
        }
        if let Some(mode) = mode.filter(|m| *m != c.mode.name()) {
            return Err(format!("the cluster in {} runs {}, not {mode}; `canopy down` and remove it to change", dir.display(), c.mode.name()));
        }
        return Ok((c, Listeners::new()));
    }
    let mut opts = match mode {
        Some(m) => ModeOptions::named(m)?,
        None => ModeOptions::default(),
    };
    tuning.apply(&mut opts)?;
    let sockets = socket_dir(dir, tuning.tcp)?;
    let mut listeners = Listeners::new();
    let mut addr_of = |name: String| -> Result<String, String> {
        let (addr, fd) = listen_new(sockets.as_deref(), "127.0.0.1", &name)?;
        listeners.insert(name, fd);
        Ok(addr)
    };
    let c = modes::lifecycle(&opts).new_cluster(opts.clone(), servers.unwrap_or(4), tuning.replicas.unwrap_or(1), &file, &mut addr_of)?;
    c.save(&file)?;
    Ok((c, listeners))
}

/// The lifecycle of `c`'s mode, with the packages it needs installed.
fn prepared(c: &ClusterFile) -> Result<&'static dyn lifecycle::Lifecycle, String> {
    let l = modes::lifecycle(&c.mode);
    lifecycle::install_packages(l, c.mode.name())?;
    Ok(l)
}

pub fn up(args: &UpArgs) -> Result<ExitCode, String> {
    args.durability.parse::<canopy_store::Durability>()?;
    if let Some(m) = &args.mode {
        cluster::check_mode(m)?;
    }
    let tuning = Tuning { lease: args.lease.as_deref(), split_threshold: args.split_threshold, tcp: args.tcp, replicas: args.replicas };
    tuning.check()?;
    let dir = args.dir.clone().unwrap_or_else(cluster::default_dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let (c, listeners) = cluster_in(&dir, args.servers, args.mode.as_deref(), &tuning)?;
    crate::keys::ensure_cluster_key(&c)?;
    let daemons = prepared(&c)?;
    let started = daemons.start(&dir, &c, &DaemonFlags { durability: &args.durability, idle_secs: args.idle_secs }, listeners)?;
    daemons.wait_ready(&c, &dir, Duration::from_secs(30))?;
    let copies = match c.replicas() {
        1 => String::new(),
        r => format!(", {r} members each"),
    };
    println!(
        "canopy: {} servers and a lock service up{copies} ({started} started); cluster file {}",
        c.servers.len(),
        dir.join("cluster.json").display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn down(args: &DirArgs) -> Result<ExitCode, String> {
    let dir = args.dir.clone().unwrap_or_else(cluster::default_dir);
    if !dir.exists() {
        return Err(format!("no local cluster in {}", dir.display()));
    }
    let c = ClusterFile::load(&dir.join("cluster.json"))?;
    let n = modes::lifecycle(&c.mode).stop(&dir)?;
    println!("canopy: stopped {n} daemons in {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

pub fn status(cluster: Option<&Path>) -> Result<ExitCode, String> {
    let c = connect::load(cluster)?;
    let down = modes::lifecycle(&c.mode).status(&c)?;
    Ok(if down == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn config(args: &BenchArgs, root: String) -> BenchConfig {
    BenchConfig {
        clients: args.clients.max(1),
        inflight: args.inflight.max(1),
        dirs: args.dirs,
        files: args.files,
        stats: args.stats,
        phases: args.phases.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        root,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ..BenchConfig::default()
    }
}

fn run_bench(c: &ClusterFile, key: &canopy_client::keyfile::Loaded, args: &BenchArgs, root: String) -> Result<canopy_bench::BenchReport, String> {
    let cfg = config(args, root);
    let rt = connect::runtime()?;
    rt.block_on(async {
        let clients = (0..cfg.clients).map(|_| connect::client(c, key, Creds::root())).collect::<Result<Vec<_>, _>>()?;
        canopy_bench::run(clients, &cfg).await
    })
}

/// Benches each `--posix` directory in turn with the same configuration.
fn run_posix(args: &BenchArgs) -> Result<Comparison, String> {
    let cfg = config(args, String::new());
    // Every directory is checked, and its run's directory made, before anything
    // is measured: a bad one fails at once. On an error, those not yet run drop
    // and are removed.
    let dirs = args.posix.iter().map(|d| BenchDir::create(d, args.keep)).collect::<Result<Vec<_>, _>>()?;
    let mut targets = Vec::new();
    for dir in dirs {
        let phases = canopy_bench::posix::run(&dir, &cfg)?;
        targets.push(TargetReport { dir: dir.dir().display().to_string(), root: dir.root().to_string(), phases });
        if args.keep {
            eprintln!("canopy: kept {}", dir.root());
        }
        // Removed before the next directory is measured, and not timed.
        dir.finish()?;
    }
    Ok(Comparison { mode: "posix".into(), clients: cfg.clients, inflight: cfg.inflight, targets })
}

/// Prints the table and, if asked, writes the JSON.
fn emit(table: String, report: &impl serde::Serialize, json: Option<&Path>) -> Result<ExitCode, String> {
    print!("{table}");
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report).expect("reports serialise");
        std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn bench(args: &BenchArgs, cluster: Option<&Path>) -> Result<ExitCode, String> {
    if !args.posix.is_empty() {
        if cluster.is_some() {
            return Err("bench --posix uses no cluster; drop --cluster".into());
        }
        let report = run_posix(args)?;
        return emit(report.table(), &report, args.json.as_deref());
    }
    let given = cluster.map(Path::to_path_buf).or_else(|| std::env::var_os("CANOPY_CLUSTER").map(PathBuf::from));
    let report = match given {
        Some(file) => {
            let c = ClusterFile::load(&file)?;
            let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let key = connect::cluster_key(&c, "bench")?;
            run_bench(&c, &key, args, format!("/bench-{stamp}-{}", std::process::id()))?
        }
        None => bench_on_temporary_cluster(args)?,
    };
    emit(report.table(), &report, args.json.as_deref())
}

/// Runs the bench on a temporary cluster of server processes started for it,
/// and stops the cluster after.
pub fn bench_on_temporary_cluster(args: &BenchArgs) -> Result<canopy_bench::BenchReport, String> {
    args.durability.parse::<canopy_store::Durability>()?;
    cluster::check_mode(&args.mode)?;
    let tuning = Tuning { lease: args.lease.as_deref(), split_threshold: args.split_threshold, tcp: args.tcp, replicas: Some(args.replicas) };
    tuning.check()?;
    on_temporary_cluster(args.servers, &args.mode, &args.durability, &tuning, |c, key, dir| {
        let before = daemon_cpu_seconds(dir);
        let mut report = run_bench(c, key, args, "/bench".into())?;
        report.daemon_cpu_seconds = daemon_cpu_seconds(dir).into_iter().map(|(name, s)| {
            let spent = s - before.get(&name).copied().unwrap_or(0.0);
            (name, spent)
        }).collect();
        report.store_build = Some(canopy_store::rocksdb_build().to_string());
        Ok(report)
    })
}

/// Runs `work` on a temporary cluster of `servers` server processes of `mode`
/// started for it (with its cluster key and directory), and stops it after.
fn on_temporary_cluster<T>(servers: u32, mode: &str, durability: &str, tuning: &Tuning, work: impl FnOnce(&ClusterFile, &canopy_client::keyfile::Loaded, &Path) -> Result<T, String>) -> Result<T, String> {
    let tmp = tempfile::Builder::new().prefix("canopy-bench-").tempdir().map_err(|e| e.to_string())?;
    let (c, listeners) = cluster_in(tmp.path(), Some(servers), Some(mode), tuning)?;
    crate::keys::ensure_cluster_key(&c)?;
    eprintln!("canopy: starting a temporary {servers}-server cluster in {}", tmp.path().display());
    let daemons = prepared(&c)?;
    daemons.start(tmp.path(), &c, &DaemonFlags { durability, idle_secs: None }, listeners)?;
    let result = daemons.wait_ready(&c, tmp.path(), Duration::from_secs(30)).and_then(|_| own_key(&c)).and_then(|key| work(&c, &key, tmp.path()));
    daemons.stop(tmp.path())?;
    result
}

/// [`on_temporary_cluster`] with the defaults of `canopy up` but its mode.
pub fn on_default_temporary_cluster<T>(servers: u32, mode: &str, work: impl FnOnce(&ClusterFile, &canopy_client::keyfile::Loaded) -> Result<T, String>) -> Result<T, String> {
    cluster::check_mode(mode)?;
    on_temporary_cluster(servers, mode, "wal", &Tuning::DEFAULT, |c, key, _| work(c, key))
}

/// CPU seconds each live daemon whose pid file is in `dir` has used so far,
/// by name.
fn daemon_cpu_seconds(dir: &Path) -> BTreeMap<String, f64> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeMap::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            (path.extension()? == "pid").then_some(())?;
            let name = path.file_stem()?.to_str()?.to_string();
            let pid = read_pid(&path)?;
            Some((name, threads_cpu_seconds(pid).or_else(|| process_cpu_seconds(pid))?))
        })
        .collect()
}

/// The CPU time of process `pid`'s live threads, to the nanosecond (the
/// scheduler's account in /proc/PID/task/TID/schedstat).
fn threads_cpu_seconds(pid: i32) -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 / 1e9)
}

/// The user and system CPU time of process `pid`, in clock ticks' resolution.
fn process_cpu_seconds(pid: i32) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // utime and stime: fields 14 and 15, the 12th and 13th after the
    // parenthesised command name.
    let f = process::stat_fields(&stat)?;
    Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_of_this_build_needs_no_package() {
        for name in canopy_client::cluster::MODES {
            let l = modes::lifecycle(&ModeOptions::named(name).unwrap());
            assert!(l.packages().is_empty(), "{name}: {:?}", l.packages());
        }
    }
}
