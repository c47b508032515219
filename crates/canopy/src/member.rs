//! A daemon as a member of its replica group: its store, its Raft, and the
//! service that answers as leader or sends clients to the leader
//! (`canopy_replica::service`). A daemon whose group has one member runs
//! the same way, leading at once.
//!
//! A metadata server runs its group's Raft on its serving thread: a pass's
//! proposal, the log write, the apply and a follower's answer to its leader
//! then cost no hand-over between threads (nothing the serving thread runs
//! waits for the group; what must wait runs on a blocking thread). The lock
//! service runs it on a thread of its own ([`raft_thread`]): a lock granted
//! after a wait writes its record and waits for the group where it runs.

use canopy_client::cluster::GroupMember;
use canopy_proto::clock::SystemClock;
use canopy_replica::leadership::{self, Open};
use canopy_replica::service::ReplicatedService;
use canopy_replica::sessions::SESSIONS;
use canopy_replica::tcp::TcpPeers;
use canopy_replica::{Families, Member, COMMIT_WAIT, RAFT_CFS};
use canopy_rpc::ClientAuth;
use canopy_store::{Durability, RocksStore, SharedStore};
use clap::Args;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Which member of its group a daemon is.
#[derive(Args, Clone)]
pub struct MemberArgs {
    /// This daemon's member id in its group (the cluster file lists them).
    #[arg(long, default_value_t = 1)]
    pub member: u64,
    /// Found the group: set by `canopy up` when it makes a new cluster. The
    /// group's lowest member then records the group's first membership. A
    /// group of one founds itself.
    #[arg(long)]
    pub found: bool,
    /// Join the group as a new, empty member: set by `canopy replica add`,
    /// whose leader then brings it up to date. Without this or `--found`, a
    /// member of a group of more than one that holds no Raft state refuses
    /// to start: its data was lost, and a member that forgot its votes and
    /// log could help elect a leader that lacks acknowledged writes.
    #[arg(long, conflicts_with = "found")]
    pub join: bool,
}

/// How long a group of one may take to begin leading (it may wait for the
/// lock service, to learn its open transactions).
const LEAD_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Where a member's store lives and what it holds.
pub struct MemberStore<'a> {
    pub data: &'a Path,
    /// The service's column families (the sessions' and Raft's are added).
    pub cfs: &'a [&'static str],
    pub durability: Durability,
}

/// A runtime of one thread for a group's Raft, apart from the daemon's
/// serving thread.
pub fn raft_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name("canopy-raft").enable_all().build().map_err(|e| e.to_string())
}

impl MemberArgs {
    /// This member's address among `members`.
    pub fn addr(&self, members: &[GroupMember], what: &str) -> Result<String, String> {
        members.iter().find(|m| m.id == self.member).map(|m| m.addr.clone()).ok_or_else(|| format!("the cluster file lists no member {} of {what}", self.member))
    }
}

/// Opens the member's store, joins its group on `rt` (where its Raft
/// runs) and follows its leadership, opening the daemon's service with
/// `open` whenever it leads.
pub fn start(args: &MemberArgs, members: &[GroupMember], at: MemberStore, auth: ClientAuth, open: Open, rt: &tokio::runtime::Runtime) -> Result<Arc<ReplicatedService>, String> {
    let MemberStore { data, cfs, durability } = at;
    let replicated: Vec<&'static str> = cfs.iter().copied().chain([SESSIONS]).collect();
    let all: Vec<&'static str> = replicated.iter().copied().chain(RAFT_CFS.iter().copied()).collect();
    let store: SharedStore = Arc::new(RocksStore::open(data, &all, durability).map_err(|e| e.to_string())?);
    let peers = TcpPeers { me: args.member, auth: Arc::new(auth) };
    let me = args.member;
    let fresh = !canopy_replica::holds_raft_state(&*store).map_err(|e| e.to_string())?;
    let member = rt.block_on(Member::open(me, store.clone(), Families::new(&replicated), data.join("snapshots"), peers, canopy_replica::config()))?;
    if fresh && members.len() > 1 && !args.found && !args.join {
        return Err(format!(
            "member {me} holds no Raft state in {}: its data was lost or never written; \
             replace it with `canopy replica replace --member {me}` (or remove it), never start it empty",
            data.display()
        ));
    }
    if (args.found || members.len() == 1) && members.iter().map(|m| m.id).min() == Some(me) {
        let all: BTreeMap<u64, String> = members.iter().map(|m| (m.id, m.addr.clone())).collect();
        rt.block_on(member.found(&all))?;
    }
    let service = ReplicatedService::new(me, member.raft.clone(), member.peer.clone(), SystemClock::shared());
    rt.spawn(leadership::follow(service.clone(), store, open, COMMIT_WAIT));
    rt.spawn(service.clone().keep_lease());
    rt.spawn(service.clone().keep_forgetting_sessions());
    // A group of one has nobody to send clients to: it serves once it leads.
    if members.len() == 1 {
        let leads = rt.block_on(async {
            let led = async {
                while service.leading().is_none() {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            };
            tokio::time::timeout(LEAD_WAIT, led).await
        });
        if leads.is_err() {
            return Err(format!("member {me} did not begin to lead its group of one within {LEAD_WAIT:?}"));
        }
    }
    Ok(service)
}
