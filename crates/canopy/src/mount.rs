//! `canopy mount` and `canopy umount`.
//!
//! `mount` starts itself again in the background with `--foreground` (detached,
//! its output in a log file beside the cluster file) and returns once the mount
//! is up, or fails with the background process's error.

use crate::connect;
use canopy_client::{cluster, Client};
use canopy_fuse::{Backends, CanopyFs, Handles, MountOptions, RequestTimes};
use canopy_proto::Creds;
use canopy_rpc::owed::Owed;
use canopy_rpc::transport::TcpTransport;
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct MountArgs {
    /// Where to mount (an existing directory).
    pub mountpoint: PathBuf,
    /// Back-end directory for file contents; repeat to spread contents over
    /// several (default: `data` beside the cluster file).
    #[arg(long = "data", value_name = "DIR")]
    pub data: Vec<PathBuf>,
    /// Serve in this process instead of in the background.
    #[arg(long)]
    pub foreground: bool,
    /// Seconds the kernel may cache a name lookup, or that a name is absent, and
    /// the mount that a directory it made holds no name it has not made there.
    #[arg(long, default_value_t = 1.0)]
    pub entry_timeout: f64,
    /// Seconds the kernel may cache attributes.
    #[arg(long, default_value_t = 1.0)]
    pub attr_timeout: f64,
    /// Files up to this many bytes keep their contents in the metadata (at most
    /// 1 MiB, the servers' own limit).
    #[arg(long, default_value_t = 64 * 1024)]
    pub inline_max: u32,
    /// Threads reading kernel requests (each on its own cloned /dev/fuse fd).
    /// A thread runs the handler of what it read itself while another is left
    /// reading (at most seven at once, and at most this number less one);
    /// past that, the handler is handed to the mount's runtime (a task, or its
    /// blocking pool for file data). [default: twice the CPUs, at least 4
    /// and at most 8]
    #[arg(long)]
    pub threads: Option<usize>,
    /// Let other users use the mount (`allow_other`); the kernel then checks
    /// permissions itself too (`default_permissions`) unless told not to.
    #[arg(long)]
    pub allow_other: bool,
    /// Let the kernel check permissions itself (`default_permissions`) before
    /// the servers do, as it does by default with --allow-other. Without it, a
    /// mount that only its owner may use leaves every check to the servers
    /// (it serves its owner's uid alone: even a root thread that switched its
    /// fsuid is refused EACCES). That saves a kernel round trip per create,
    /// mkdir, unlink and rename (the kernel's re-read of the directory it
    /// checks against); the owner's FIFOs and sockets open unchecked.
    #[arg(long, conflicts_with = "no_default_permissions")]
    pub default_permissions: bool,
    /// Do not let the kernel check permissions itself, even with --allow-other;
    /// Canopy's servers then decide alone. Unsafe when several users use the
    /// mount: the kernel serves one user's cached lookups and attributes to
    /// another, and opens FIFOs and sockets unchecked.
    #[arg(long)]
    pub no_default_permissions: bool,
    /// Do not update directories' mtime and ctime when names change in them
    /// (saves one RPC per create, unlink, mkdir, rmdir, link and rename; in a
    /// burst in one directory, ShardFS sends one per 100 ms anyway).
    #[arg(long)]
    pub no_dir_times: bool,
    /// Let idle CPUs halt between requests. By default, while requests come
    /// (until a 50 ms window passes without one, so 50 to 100 ms after the
    /// last) and unless more come at once than the FUSE threads run in place,
    /// the mount asks the kernel to keep idle CPUs polling for work (a CPU
    /// latency target of 0, /dev/cpu_dma_latency; where the idle driver has a
    /// polling state), so the wake-ups in each request's chain need no
    /// interrupt: on a VM without guest halt polling, 1.6 to 1.8 times the
    /// mkdirs with 2 callers (docs/performance.md). The cost is CPU time spent
    /// polling instead of halted while the mount is busy, on every CPU.
    #[arg(long)]
    pub no_idle_polling: bool,
    /// Mount batch ID's private namespace (its root at the mount point)
    /// instead of the cluster: nothing done through it reaches the cluster
    /// before `canopy batch commit ID`.
    #[arg(long, value_name = "ID")]
    pub batch: Option<String>,
    /// Rewrite FILE every second with a table of the kernel requests served:
    /// how many of each kind and how long the mount took to answer them
    /// (mean, p50, p99), to set beside what the system calls take.
    #[arg(long, value_name = "FILE")]
    pub timings: Option<PathBuf>,
}

#[derive(Args)]
pub struct UmountArgs {
    pub mountpoint: PathBuf,
    /// Detach now even if busy; the mount goes when its last user leaves.
    #[arg(long)]
    pub lazy: bool,
}

fn seconds(s: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("--{what} must be a non-negative number of seconds"))
}

fn options(args: &MountArgs) -> Result<MountOptions, String> {
    let limit = canopy_proto::msg::INLINE_LIMIT;
    if args.inline_max > limit {
        return Err(format!("--inline-max may be at most {limit} (the servers keep no more inline)"));
    }
    Ok(MountOptions {
        entry_ttl: seconds(args.entry_timeout, "entry-timeout")?,
        attr_ttl: seconds(args.attr_timeout, "attr-timeout")?,
        inline_max: args.inline_max,
        threads: args.threads.unwrap_or_else(canopy_fuse::options::default_threads).max(1),
        allow_other: args.allow_other,
        default_permissions: args.default_permissions
            || (!args.no_default_permissions && canopy_fuse::options::kernel_checks_by_default(args.allow_other)),
        dir_times: !args.no_dir_times,
        idle_polling: !args.no_idle_polling,
    })
}

/// The back-end directories: as given, else `data` beside the cluster file.
fn data_dirs(args: &MountArgs, cluster_file: &Path) -> Result<Vec<PathBuf>, String> {
    if !args.data.is_empty() {
        return Ok(args.data.clone());
    }
    let dir = cluster_file.parent().unwrap_or(Path::new(".")).join("data");
    canopy_rpc::private_dir::make_private(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(vec![dir])
}

pub fn mount(args: &MountArgs, cluster_arg: Option<&Path>) -> Result<ExitCode, String> {
    let opts = options(args)?;
    let cluster_file = cluster::find(cluster_arg);
    let c = connect::load(cluster_arg)?;
    let (backends, closed) = Backends::new(data_dirs(args, &cluster_file)?).map_err(|e| format!("data directory: {e}"))?;
    for line in closed {
        eprintln!("canopy: {line}");
    }
    if !args.mountpoint.is_dir() {
        return Err(format!("mount point {} is not a directory", args.mountpoint.display()));
    }
    if canopy_fuse::mount::is_mounted(&args.mountpoint) {
        return Err(format!("{} is already a Canopy mount", args.mountpoint.display()));
    }
    if !args.foreground {
        return start_background(&args.mountpoint, &cluster_file);
    }
    let rt = connect::runtime()?;
    let handles = Arc::new(Handles::new(backends));
    // A batch's private server lives as long as the mount.
    let mut batch = None;
    // The closing posts of a directory mutation (unfences, the unlock) go
    // with the next request any FUSE thread sends the same daemon: one box
    // for all, flushed meanwhile by a task on the mount's runtime over the
    // shared transport, which sends the rest at the end.
    let owed = Owed::new();
    let mut flusher: Option<(Arc<TcpTransport>, tokio::task::JoinHandle<()>)> = None;
    let (client, own) = if let Some(id) = &args.batch {
        let _in_runtime = rt.enter();
        let b = canopy_batch::open(&canopy_batch::default_base(), canopy_batch::parse_id(id)?)?;
        let private = rt.block_on(b.private_client()).map_err(|e| format!("batch {id}: {e}"))?;
        batch = Some(b);
        (private.as_user(Creds::root()), None)
    } else {
        let _in_runtime = rt.enter();
        // The mount checks its callers' rights itself and asserts their
        // credentials per request: that needs the cluster key.
        let key = connect::cluster_key(&c, "mount")?;
        let ns_opts = canopy_client::NsOptions { reclaim: Some(handles.clone()), dir_times: opts.dir_times, ..Default::default() };
        let shared = Arc::new(connect::tcp_transport(&c, &key).owing(owed.clone()));
        flusher = Some((shared.clone(), rt.spawn(shared.clone().flush_owed())));
        let client = Client::new(connect::namespace_over(&c, shared, &key, ns_opts.clone())?, Creds::root());
        // The same client for each FUSE thread, on its own runtime; one
        // for all of them where a client holds leases or proofs. They share
        // the first one's directory touches, whose sender runs on the mount's
        // runtime (a FUSE thread's runs only while the thread handles a request).
        let ns_opts = canopy_client::NsOptions { touches: client.namespace().dir_touches(), ..ns_opts };
        let owed = owed.clone();
        let make = move || {
            let transport = Arc::new(connect::tcp_transport(&c, &key).owing(owed.clone()));
            Ok(Client::new(connect::namespace_over(&c, transport, &key, ns_opts.clone())?, Creds::root()))
        };
        let own = (!client.namespace().holds_grants()).then(|| Arc::new(make) as canopy_fuse::ClientFactory);
        (client, own)
    };
    rt.block_on(client.stat("/")).map_err(|e| format!("cluster {} does not answer: {e}", cluster_file.display()))?;
    unmount_on_signal(&rt, &args.mountpoint);
    let touches = client.namespace().dir_touches();
    let fs = CanopyFs::new(rt.handle().clone(), client, handles, opts, own);
    let times = Timings { requests: fs.times(), touches, owed: flusher.is_some().then(|| owed.clone()) };
    if let Some(file) = &args.timings {
        write_timings_every_second(&rt, times.clone(), file.clone());
    }
    let served = canopy_fuse::mount::serve(fs, &args.mountpoint);
    if let Some((t, task)) = flusher {
        // The flusher first sends what it took, then the rest goes.
        owed.stop();
        rt.block_on(async {
            let _ = task.await;
            t.flush_all_owed().await;
        });
    }
    if let Some(file) = &args.timings {
        write_timings(&times, file);
    }
    served.map_err(|e| format!("mount {}: {e}", args.mountpoint.display()))?;
    drop(batch);
    Ok(ExitCode::SUCCESS)
}

/// SIGINT or SIGTERM to a foreground mount unmounts it (lazily), which ends it.
fn unmount_on_signal(rt: &tokio::runtime::Runtime, mountpoint: &Path) {
    use tokio::signal::unix::{signal, SignalKind};
    let mp = mountpoint.to_path_buf();
    rt.spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else { return };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = canopy_fuse::mount::unmount(&mp, true);
    });
}

/// What `--timings` reports: the kernel requests' latencies, and how many
/// directory touches the mount's clients sent or folded into a later one.
#[derive(Clone)]
struct Timings {
    requests: Arc<RequestTimes>,
    touches: Option<Arc<canopy_client::touches::DirTouches>>,
    owed: Option<Arc<Owed>>,
}

impl Timings {
    fn report(&self) -> String {
        let mut out = self.requests.report();
        if let Some(n) = self.touches.as_ref().map(|t| t.counts()) {
            let (changes, sent) = (n.at_once + n.owed, n.at_once + n.owed_sent);
            out.push_str(&format!("directory times: {changes} changes, {sent} touches sent ({} as the change was made, {} after a window)\n", n.at_once, n.owed_sent));
        }
        if let Some(n) = self.owed.as_ref().map(|o| o.counts()) {
            out.push_str(&format!("owed posts (unfences, unlocks): {}, {} of them sent by the flusher, the rest with a later request or at unmount\n", n.owed, n.flushed));
        }
        out
    }
}

/// Replaces `file` with the current table; a reader never sees half of one.
fn write_timings(times: &Timings, file: &Path) {
    let tmp = file.with_extension("tmp");
    let written = std::fs::write(&tmp, times.report()).and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        eprintln!("canopy: cannot write timings to {}: {e}", file.display());
    }
}

fn write_timings_every_second(rt: &tokio::runtime::Runtime, times: Timings, file: PathBuf) {
    rt.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let (times, file) = (times.clone(), file.clone());
            let _ = tokio::task::spawn_blocking(move || write_timings(&times, &file)).await;
        }
    });
}

fn log_path(cluster_file: &Path, mountpoint: &Path) -> PathBuf {
    let abs = mountpoint.canonicalize().unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = abs.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    cluster_file.parent().unwrap_or(Path::new(".")).join(format!("mount{name}.log"))
}

fn start_background(mountpoint: &Path, cluster_file: &Path) -> Result<ExitCode, String> {
    use std::os::unix::process::CommandExt;
    let log = log_path(cluster_file, mountpoint);
    let out = canopy_rpc::private_dir::create_file(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1)).arg("--foreground").stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid only detaches the child from our session and terminal.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the mount: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if canopy_fuse::mount::is_mounted(mountpoint) {
            println!("canopy: mounted on {} (log {})", mountpoint.display(), log.display());
            return Ok(ExitCode::SUCCESS);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("the mount exited ({status}): {}", text.trim()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("{} did not appear as a mount within 30 s; see {}", mountpoint.display(), log.display()))
}

pub fn umount(args: &UmountArgs) -> Result<ExitCode, String> {
    if !canopy_fuse::mount::is_mounted(&args.mountpoint) {
        return Err(format!("{}: not a Canopy mount", args.mountpoint.display()));
    }
    canopy_fuse::mount::unmount(&args.mountpoint, args.lazy).map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) => format!("{}: target is busy (close what uses it, or use --lazy)", args.mountpoint.display()),
        _ => format!("{}: {e}", args.mountpoint.display()),
    })?;
    // The serving process ends when the kernel closes its device.
    let deadline = Instant::now() + Duration::from_secs(10);
    while canopy_fuse::mount::is_mounted(&args.mountpoint) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(ExitCode::SUCCESS)
}
