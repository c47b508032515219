//! `canopy server` and `canopy lockd`: one daemon each, from a cluster file.

use crate::connect;
use crate::sched::Sched;
use canopy_lock::service::{LockDaemon, CFS as LOCK_CFS};
use canopy_lock::LockService;
use canopy_client::cluster::ClusterFile;
use canopy_client::delegate::Delegating;
use canopy_client::keyfile;
use canopy_rpc::server::{ConnLimits, ServeOpts};
use canopy_rpc::socket::Listener;
use canopy_rpc::Service;
use canopy_server::keys::{with_entry_cache, ALL_CFS, DEFAULT_ENTRY_CACHE_MIB};
use canopy_proto::clock::SystemClock;
use canopy_server::{MetaServer, ServerConfig};
use canopy_store::{Durability, SharedStore};
use crate::member::{self, MemberArgs};
use canopy_replica::leadership::Open;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use canopy_proto::msg::TxnInfo;
use canopy_proto::{Creds, Errno, Reply, Request};

#[derive(Args)]
pub struct ServerArgs {
    /// This server's index in the cluster file.
    #[arg(long)]
    pub index: u32,
    /// Where its RocksDB lives.
    #[arg(long)]
    pub data: PathBuf,
    /// wal (default: acknowledged writes survive a process crash), fsync (and a
    /// power failure), or group:MS (log synced every MS milliseconds).
    #[arg(long, default_value = "wal")]
    pub durability: Durability,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Memory for the cache of file records read by key (MiB; 0: none).
    /// A stat answered from it skips the store's lookup.
    #[arg(long, default_value_t = DEFAULT_ENTRY_CACHE_MIB)]
    pub entry_cache_mib: usize,
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Serve this inherited listening socket instead of binding (set by `canopy up`).
    #[arg(long, hide = true)]
    pub listen_fd: Option<i32>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// How the kernel schedules the daemon's threads (see docs/performance.md).
    #[arg(long, value_enum, default_value = "batch")]
    pub sched: Sched,
    #[command(flatten)]
    pub member: MemberArgs,
}

#[derive(Args)]
pub struct LockdArgs {
    #[arg(long)]
    pub data: PathBuf,
    /// How often to recover transactions whose coordinator's lease ran out
    /// (milliseconds; 0: only when a conflicting request comes).
    #[arg(long, default_value_t = 1000)]
    pub sweep_ms: u64,
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub listen_fd: Option<i32>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// How the kernel schedules the daemon's threads (see docs/performance.md).
    #[arg(long, value_enum, default_value = "batch")]
    pub sched: Sched,
    #[command(flatten)]
    pub member: MemberArgs,
}

/// What one daemon lets its peers hold, and the key it checks them against.
#[derive(Args)]
pub struct LimitArgs {
    /// Open connections at most; a new one closes the one idle longest.
    #[arg(long, default_value_t = 4096)]
    pub max_conns: usize,
    /// Seconds a connection with nothing in flight may stay silent.
    #[arg(long, default_value_t = 300)]
    pub idle_secs: u64,
    /// The cluster key (default: cluster.key beside the cluster file).
    #[arg(long)]
    pub key: Option<PathBuf>,
}

impl LimitArgs {
    fn opts(&self, cluster: &ClusterFile) -> Result<ServeOpts, String> {
        let path = self.key.clone().unwrap_or_else(|| keyfile::cluster_key_path(&cluster.path));
        let key = keyfile::load(&path)?;
        if !key.is_cluster() {
            return Err(format!("{} is a user key; a daemon needs the cluster key", path.display()));
        }
        let max_conns = self.max_conns.min(descriptors_for_connections());
        Ok(ServeOpts { key: key.key, limits: ConnLimits { max_conns, idle: Duration::from_secs(self.idle_secs), ..ConnLimits::default() } })
    }
}

/// Raises the descriptor limit to its hard maximum and says how many connections
/// it leaves room for, with a reserve for the store's files and the daemon's own.
fn descriptors_for_connections() -> usize {
    const RESERVE: u64 = 256;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024 - RESERVE as usize;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur.saturating_sub(RESERVE).max(16) as usize
}

/// The daemon's listening socket: inherited from `canopy up`, or bound here.
fn listener(addr: &str, fd: Option<i32>) -> Result<Listener, String> {
    match fd {
        // SAFETY: `canopy up` passes the number of a listening socket it opened
        // for us on `addr` and left open across exec; nothing else in this
        // process owns it.
        Some(fd) => unsafe { Listener::from_raw_fd(addr, fd) }.map_err(|e| format!("listen fd {fd}: {e}")),
        None => Listener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}")),
    }
}

/// Work a daemon does beside serving requests, started once it listens.
type Beside = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

/// What `serve` needs besides the service.
struct Daemon {
    addr: String,
    fd: Option<i32>,
    what: String,
    opts: ServeOpts,
}

/// The runtime a daemon serves on, with `threads` workers. Set the
/// scheduling policy first: its threads inherit it.
fn serving_runtime(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    // One thread: a current-thread runtime, with no cross-thread wake-ups.
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
    }
    .map_err(|e| e.to_string())
}

fn serve(d: Daemon, rt: tokio::runtime::Runtime, service: Arc<dyn Service>, beside: Option<Beside>) -> Result<ExitCode, String> {
    let Daemon { addr, fd, what, opts } = d;
    rt.block_on(async move {
        let listener = listener(&addr, fd)?;
        eprintln!("canopy: {what} listening on {addr} (at most {} connections)", opts.limits.max_conns);
        if let Some(work) = beside {
            tokio::spawn(work());
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
        tokio::select! {
            _ = canopy_rpc::server::serve(listener, service, opts) => {}
            _ = term.recv() => eprintln!("canopy: {what} stopping"),
            _ = tokio::signal::ctrl_c() => eprintln!("canopy: {what} stopping"),
        }
        if let Some(path) = canopy_rpc::socket::unix_path(&addr) {
            let _ = std::fs::remove_file(path);
        }
        Ok::<_, String>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A client of `cluster` holding the cluster key, acting as root: what a daemon
/// uses to run delegated operations and recovery.
fn cluster_client(cluster: &ClusterFile, key: &canopy_proto::auth::Key) -> Result<canopy_client::Client, String> {
    let loaded = keyfile::Loaded { identity: canopy_proto::auth::Identity::Cluster, key: key.clone(), path: cluster.path.clone() };
    connect::client(cluster, &loaded, canopy_proto::Creds::root())
}

/// The metadata server of the cluster's mode, over its group's store (the
/// server picks the mode's half of itself; it refuses a mode it does not know
/// and a store another mode made).
fn metadata_server(cluster: &ClusterFile, cfg: ServerConfig, store: SharedStore, entry_cache_mib: usize, cluster_key: &canopy_proto::auth::Key) -> Result<Arc<MetaServer>, String> {
    let store = with_entry_cache(store, entry_cache_mib);
    // Giraffa's directory proofs: every server derives the same key.
    let proof_key = cluster_key.derive(b"giraffa directory proofs").to_bytes();
    Ok(Arc::new(MetaServer::open_with(&cluster.mode, cfg, store, SystemClock::shared(), proof_key)?))
}

/// A daemon's store directory is its user's alone (it holds other users'
/// names and inline contents): everything this process creates from now on
/// is, and a directory found open to others is closed, saying so.
fn private_store(dir: &std::path::Path) -> Result<(), String> {
    canopy_rpc::private_dir::owner_only_umask();
    let t = canopy_rpc::private_dir::make_private(dir).map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    if let Some(line) = t.report(dir) {
        eprintln!("canopy: {line}");
    }
    Ok(())
}

pub fn run_server(args: &ServerArgs) -> Result<ExitCode, String> {
    let cluster = connect::load(args.cluster.as_deref())?;
    let members = cluster.server_members(args.index as usize);
    if members.is_empty() {
        return Err(format!("the cluster file has no server {}", args.index));
    }
    let addr = args.member.addr(&members, &format!("server {}", args.index))?;
    let opts = args.limits.opts(&cluster)?;
    private_store(&args.data)?;
    let cfg = ServerConfig { index: args.index, servers: cluster.servers.len() as u32 };
    // The mode's background work (IndexFS splits) reaches the other servers
    // over TCP with the cluster key.
    let key = keyfile::Loaded { identity: canopy_proto::auth::Identity::Cluster, key: opts.key.clone(), path: cluster.path.clone() };
    let (c, entry_cache_mib, cluster_key) = (cluster.clone(), args.entry_cache_mib, opts.key.clone());
    // Opened whenever this member begins to lead: a restart's work.
    let open: Open = Arc::new(move |store| {
        let meta = metadata_server(&c, cfg, store, entry_cache_mib, &cluster_key)?;
        if meta.needs_open_transactions() {
            meta.open_transactions(&open_transactions(&c, &key)?)?;
        }
        meta.start_background(connect::transport(&c, &key));
        let server = Arc::new(Delegating::new(meta));
        server.set_client(cluster_client(&c, &cluster_key)?);
        Ok(server as Arc<dyn Service>)
    });
    let what = format!("server {} member {}", args.index, args.member.member);
    // Before the runtime starts its threads, so they inherit it.
    args.sched.apply()?;
    // The group's Raft runs where the daemon serves.
    let rt = serving_runtime(args.threads)?;
    let at = member::MemberStore { data: &args.data, cfs: ALL_CFS, durability: args.durability };
    let service = member::start(&args.member, &members, at, key_auth(&opts), open, &rt)?;
    let d = Daemon { addr, fd: args.listen_fd, what, opts };
    serve(d, rt, service, None)
}

/// How a member proves itself to its peers: the cluster key.
fn key_auth(opts: &ServeOpts) -> canopy_rpc::ClientAuth {
    canopy_rpc::ClientAuth { identity: canopy_proto::auth::Identity::Cluster, key: opts.key.clone() }
}

/// The transactions open at the lock service, asked before a server serves
/// (`MetaServer::needs_open_transactions`). A lock service not up yet (the
/// daemons start together) or down is waited for, with a line every 10 s: a
/// ShardFS server serving without the fences it held could let a file into
/// a directory that recovery then removes.
fn open_transactions(cluster: &ClusterFile, key: &keyfile::Loaded) -> Result<Vec<TxnInfo>, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let lockd = connect::transport(cluster, key);
    let mut said: Option<Instant> = None;
    loop {
        match rt.block_on(lockd.call(canopy_rpc::Daemon::Lockd, &Creds::root(), Request::ListTxns)) {
            Ok(Reply::Txns(txns)) => return Ok(txns),
            Ok(other) => return Err(format!("the lock service at {} answered a list of transactions with {other:?}", cluster.lockd)),
            Err(e @ (Errno::EACCES | Errno::EPERM)) => {
                return Err(format!("the lock service at {} refused this server's key: {e}", cluster.lockd));
            }
            // Another protocol version, or no lock service at that address.
            Err(e @ (Errno::EPROTO | Errno::ENOSYS)) => {
                return Err(format!("{} is not a lock service this server can use: {e}", cluster.lockd));
            }
            Err(e) => {
                if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    eprintln!("canopy: waiting for the lock service at {} to learn its open transactions: {e}", cluster.lockd);
                    said = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

pub fn run_lockd(args: &LockdArgs) -> Result<ExitCode, String> {
    let cluster = connect::load(args.cluster.as_deref())?;
    let members = cluster.lockd_members();
    let addr = args.member.addr(&members, "the lock service")?;
    let opts = args.limits.opts(&cluster)?;
    private_store(&args.data)?;
    let open: Open = Arc::new(|store| Ok(Arc::new(LockDaemon(LockService::open(store)?)) as Arc<dyn Service>));
    args.sched.apply()?;
    let raft = member::raft_thread()?;
    let at = member::MemberStore { data: &args.data, cfs: LOCK_CFS, durability: Durability::Wal };
    let service = member::start(&args.member, &members, at, key_auth(&opts), open, &raft)?;
    // Every member sweeps: its requests go to whichever leads.
    let sweep = match args.sweep_ms {
        0 => None,
        ms => {
            let client = cluster_client(&cluster, &opts.key)?;
            let every = Duration::from_millis(ms);
            let work: Beside = Box::new(move || Box::pin(canopy_client::sweep::sweep_forever(client, every)));
            Some(work)
        }
    };
    let what = format!("lock service member {}", args.member.member);
    let d = Daemon { addr, fd: args.listen_fd, what, opts };
    let served = serve(d, serving_runtime(1)?, service, sweep);
    drop(raft);
    served
}
