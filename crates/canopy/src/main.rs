//! `canopy`: one command-line tool for the daemons, the local cluster, namespace
//! operations, consistency checks and the benchmark.

mod batch;
mod canopy_daemons;
mod commands;
mod connect;
mod daemon;
mod eval;
mod format;
mod keys;
mod lifecycle;
mod local;
mod member;
mod mount;
mod process;
mod replica;
mod sched;

/// What `canopy up` runs for each mode of the registry
/// (`canopy_proto::for_each_mode!`): a module a mode, `src/modes/<mode>.rs`,
/// whose `LIFECYCLE` says it.
macro_rules! lifecycle_of_each_mode {
    ($($name:ident => $variant:ident($options:ident)),* $(,)?) => {
        mod modes {
            $(mod $name;)*

            /// The lifecycle of the mode `opts` names.
            pub fn lifecycle(opts: &canopy_proto::modes::ModeOptions) -> &'static dyn crate::lifecycle::Lifecycle {
                match opts {
                    $(canopy_proto::modes::ModeOptions::$variant(_) => $name::LIFECYCLE,)*
                }
            }
        }
    };
}

canopy_proto::for_each_mode!(lifecycle_of_each_mode);

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc rather than the system allocator: a server allocates a key, a
/// value and a frame buffer per entry it touches, and glibc's malloc and free
/// took a fifth of a bulk insertion's CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "canopy", version, about = "A scalable metadata service for distributed file systems")]
struct Cli {
    /// Cluster file (default: $CANOPY_CLUSTER, else the default local cluster's).
    #[arg(long, global = true)]
    cluster: Option<PathBuf>,
    /// The key to prove (default: $CANOPY_KEY, else cluster.key or keys/UID.key
    /// beside the cluster file, else ~/.canopy/key).
    #[arg(long, global = true)]
    key: Option<PathBuf>,
    /// Act as this user id (needs the cluster key; a user key acts as its own).
    #[arg(long, global = true)]
    uid: Option<u32>,
    /// Act as this group id.
    #[arg(long, global = true)]
    gid: Option<u32>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the embedded local cluster (servers and lock service on loopback).
    Up(local::UpArgs),
    /// Stop the embedded local cluster (its data stays).
    Down(local::DirArgs),
    /// Each server up or down, with its entries and RPCs.
    Status,
    /// Check the whole cluster's consistency; non-zero exit if anything is wrong.
    Fsck {
        /// First recover every transaction whose coordinator died.
        #[arg(long)]
        repair: bool,
    },
    /// Run one metadata server from a cluster file.
    Server(daemon::ServerArgs),
    /// Run the lock service from a cluster file.
    Lockd(daemon::LockdArgs),
    /// Run the benchmark (on a temporary local cluster unless one is given, or with
    /// --posix DIR on directories through system calls).
    Bench(local::BenchArgs),
    /// Seed 000's evaluation: Figures 6, 7 and 8 for every mode, on simulated
    /// clusters of up to 128 servers, as tables, plots and a report.
    Eval(eval::EvalArgs),
    /// Mount the namespace with FUSE (file contents on back-end directories).
    Mount(mount::MountArgs),
    /// Unmount a Canopy mount.
    Umount(mount::UmountArgs),
    /// BatchFS batches: private namespaces merged in bulk (begin, exec, commit,
    /// abort, status, bench).
    #[command(subcommand)]
    Batch(batch::BatchCmd),
    /// Replica groups: add, remove or replace a member while its group serves.
    #[command(subcommand)]
    Replica(replica::ReplicaCmd),
    /// Keys: issue a user's key.
    #[command(subcommand)]
    Key(keys::KeyCmd),
    #[command(flatten)]
    Ns(commands::NsCmd),
}

fn main() -> ExitCode {
    // Like coreutils: a closed pipe (`canopy ls | head`) ends the process quietly.
    // SAFETY: restoring a signal's default disposition at start-up, before threads.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    if let Some(k) = &cli.key {
        // Every part of this process finds its key the one way (keyfile::find);
        // set before any thread starts.
        std::env::set_var("CANOPY_KEY", k);
    }
    let who = connect::Who { uid: cli.uid, gid: cli.gid };
    let result = match cli.cmd {
        Cmd::Up(args) => local::up(&args),
        Cmd::Down(args) => local::down(&args),
        Cmd::Status => local::status(cli.cluster.as_deref()),
        Cmd::Fsck { repair } => commands::fsck(cli.cluster.as_deref(), repair),
        Cmd::Server(args) => daemon::run_server(&args),
        Cmd::Lockd(args) => daemon::run_lockd(&args),
        Cmd::Bench(args) => local::bench(&args, cli.cluster.as_deref()),
        Cmd::Eval(args) => eval::eval(&args),
        Cmd::Mount(args) => mount::mount(&args, cli.cluster.as_deref()),
        Cmd::Umount(args) => mount::umount(&args),
        Cmd::Batch(cmd) => batch::run(cmd, cli.cluster.as_deref(), &who),
        Cmd::Key(cmd) => keys::run(cmd, cli.cluster.as_deref()),
        Cmd::Replica(cmd) => replica::run(cmd, cli.cluster.as_deref()),
        Cmd::Ns(cmd) => commands::run(cmd, cli.cluster.as_deref(), &who),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("canopy: {msg}");
            ExitCode::FAILURE
        }
    }
}
