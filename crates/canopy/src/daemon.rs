//! `canopy server` and `canopy lockd`: one daemon each, from a cluster file.

use crate::connect;
use canopy_lock::service::{LockDaemon, CFS as LOCK_CFS};
use canopy_lock::LockService;
use canopy_rpc::Service;
use canopy_server::keys::ALL_CFS;
use canopy_server::{MetaServer, ServerConfig};
use canopy_store::{Durability, RocksStore, SharedStore};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Serve this inherited listening socket instead of binding (set by `canopy up`).
    #[arg(long, hide = true)]
    pub listen_fd: Option<i32>,
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
}

/// The daemon's listening socket: inherited from `canopy up`, or bound here.
async fn listener(addr: &str, fd: Option<i32>) -> Result<tokio::net::TcpListener, String> {
    match fd {
        Some(fd) => {
            // SAFETY: `canopy up` passes the number of a listening socket it opened
            // for us and left open across exec; nothing else in this process owns it.
            let std = unsafe { <std::net::TcpListener as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            std.set_nonblocking(true).map_err(|e| format!("listen fd {fd}: {e}"))?;
            tokio::net::TcpListener::from_std(std).map_err(|e| format!("listen fd {fd}: {e}"))
        }
        None => tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}")),
    }
}

/// Work a daemon does beside serving requests.
type Beside = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

fn serve(addr: &str, fd: Option<i32>, service: Arc<dyn Service>, threads: usize, what: String, beside: Option<Beside>) -> Result<ExitCode, String> {
    // One thread: a current-thread runtime, with no cross-thread wake-ups.
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
    }
    .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = listener(addr, fd).await?;
        eprintln!("canopy: {what} listening on {addr}");
        if let Some(work) = beside {
            tokio::spawn(work);
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
        tokio::select! {
            _ = canopy_rpc::server::serve(listener, service) => {}
            _ = term.recv() => eprintln!("canopy: {what} stopping"),
            _ = tokio::signal::ctrl_c() => eprintln!("canopy: {what} stopping"),
        }
        Ok::<_, String>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_server(args: &ServerArgs) -> Result<ExitCode, String> {
    let cluster = connect::load(args.cluster.as_deref())?;
    let addr = cluster.servers.get(args.index as usize).ok_or_else(|| format!("the cluster file has no server {}", args.index))?.clone();
    std::fs::create_dir_all(&args.data).map_err(|e| format!("cannot create {}: {e}", args.data.display()))?;
    let store: SharedStore = Arc::new(RocksStore::open(&args.data, ALL_CFS, args.durability).map_err(|e| e.to_string())?);
    let cfg = ServerConfig { index: args.index, servers: cluster.servers.len() as u32 };
    let server = Arc::new(MetaServer::open(cfg, store)?);
    serve(&addr, args.listen_fd, server, args.threads, format!("server {}", args.index), None)
}

pub fn run_lockd(args: &LockdArgs) -> Result<ExitCode, String> {
    let cluster = connect::load(args.cluster.as_deref())?;
    std::fs::create_dir_all(&args.data).map_err(|e| format!("cannot create {}: {e}", args.data.display()))?;
    let store: SharedStore = Arc::new(RocksStore::open(&args.data, LOCK_CFS, Durability::Wal).map_err(|e| e.to_string())?);
    let service = LockService::open(store)?;
    let sweep = (args.sweep_ms > 0).then(|| {
        let client = connect::client(&cluster, canopy_proto::Creds::root());
        let every = std::time::Duration::from_millis(args.sweep_ms);
        Box::pin(async move {
            match client {
                Ok(c) => canopy_client::sweep::sweep_forever(c, every).await,
                Err(e) => eprintln!("canopy-lockd: no sweep: {e}"),
            }
        }) as Beside
    });
    serve(&cluster.lockd, args.listen_fd, Arc::new(LockDaemon(service)), 1, "lock service".into(), sweep)
}
