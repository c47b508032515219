//! A transport that writes down the RPCs of one client, op by op: where each
//! went, what kind of work it was, and which RPCs were in flight together (a
//! stage: a fan-out sends its RPCs at once, a path walk one after another).
//! The in-process runs record with it; the simulator replays what it wrote.

use canopy_proto::{Creds, Request};
use canopy_rpc::{RpcResult, Daemon, Transport};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::Arc;

/// What an RPC costs its server, by what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Work {
    /// Answered from what the server holds (stat, lookup, readdir).
    Read,
    /// Changes the server's store.
    Write,
    /// The lock service.
    Lock,
}

/// Where an RPC went: a metadata server or the lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Dest {
    Server(u32),
    Lockd,
}

/// One RPC of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rpc {
    pub dest: Dest,
    pub work: Work,
    /// RPCs of one operation with the same stage were in flight together.
    pub stage: u32,
    /// Sent without waiting for its answer (`Transport::post`): it loads its
    /// server but holds up nothing.
    pub posted: bool,
}

/// The work an RPC of `req` does.
pub fn work_of(req: &Request) -> Work {
    const READS: [&str; 14] =
        ["Ping", "Stat", "Readlink", "Access", "ReadDir", "InodeStat", "DirProbe", "RecoveryStat", "ReadData", "IxLookup", "IxReadDir", "IxRenew", "GfProof", "GfScan"];
    // Giraffa: a request carried with directory proofs does its own work.
    if let Request::GfVouched { inner, .. } = req {
        if let Ok(inner) = postcard::from_bytes::<Request>(inner) {
            return work_of(&inner);
        }
    }
    let op = req.opcode();
    if op & 0xff00 == 0x0200 {
        return Work::Lock;
    }
    match canopy_proto::msg::op_name(op) {
        Some(name) if READS.contains(&name) => Work::Read,
        _ => Work::Write,
    }
}

#[derive(Default)]
struct Log {
    rpcs: Vec<Rpc>,
    in_flight: u32,
    stage: u32,
    /// Whether an RPC of the current stage has been sent.
    stage_open: bool,
}

/// A client's transport that records its RPCs. One operation at a time: take
/// the log ([`Recorder::take`]) after each.
pub struct Recorder {
    inner: Arc<dyn Transport>,
    log: Mutex<Log>,
}

impl Recorder {
    pub fn new(inner: Arc<dyn Transport>) -> Recorder {
        Recorder { inner, log: Mutex::new(Log::default()) }
    }

    /// The RPCs since the last take, and a fresh log.
    pub fn take(&self) -> Vec<Rpc> {
        std::mem::take(&mut *self.log.lock()).rpcs
    }

    fn sent(&self, dest: Dest, work: Work) {
        self.record(dest, work, false);
    }

    fn record(&self, dest: Dest, work: Work, posted: bool) {
        let mut log = self.log.lock();
        // An RPC sent while none is in flight starts a new stage.
        if log.in_flight == 0 && log.stage_open {
            log.stage += 1;
        }
        log.stage_open = true;
        if !posted {
            log.in_flight += 1;
        }
        let stage = log.stage;
        log.rpcs.push(Rpc { dest, work, stage, posted });
    }

    fn answered(&self) {
        let mut log = self.log.lock();
        log.in_flight = log.in_flight.saturating_sub(1);
    }
}

impl Transport for Recorder {
    fn servers(&self) -> u32 {
        self.inner.servers()
    }

    fn call<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, RpcResult> {
        self.sent(dest_of(target), work_of(&req));
        Box::pin(async move {
            let r = self.inner.call(target, creds, req).await;
            self.answered();
            r
        })
    }

    fn post<'a>(&'a self, target: Daemon, creds: &'a Creds, req: Request) -> BoxFuture<'a, Result<(), canopy_proto::Errno>> {
        self.record(dest_of(target), work_of(&req), true);
        self.inner.post(target, creds, req)
    }
}

fn dest_of(target: Daemon) -> Dest {
    match target {
        Daemon::Server(i) => Dest::Server(i),
        Daemon::Lockd => Dest::Lockd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classed_by_the_work_they_do() {
        assert_eq!(work_of(&Request::Ping), Work::Read);
        assert_eq!(work_of(&Request::Unlock { txn: 1, ticket: 2 }), Work::Lock);
        assert_eq!(work_of(&Request::Stats), Work::Write, "anything not known to read counts as a write");
        let listing = postcard::to_stdvec(&Request::ReadDir { at: "/".to_string().into(), after: None, limit: 1, with_dirs: true }).unwrap();
        assert_eq!(work_of(&Request::GfVouched { proofs: vec![], inner: listing }), Work::Read, "a vouched request does its inner request's work");
    }

    #[test]
    fn stages_follow_what_was_in_flight_together() {
        struct Nowhere;
        impl Transport for Nowhere {
            fn servers(&self) -> u32 {
                4
            }
            fn call<'a>(&'a self, _: Daemon, _: &'a Creds, _: Request) -> BoxFuture<'a, RpcResult> {
                Box::pin(async { Err(canopy_proto::Errno::EIO) })
            }
        }
        let r = Recorder::new(Arc::new(Nowhere));
        // One alone, then two together, then one alone.
        r.sent(Dest::Server(0), Work::Read);
        r.answered();
        r.sent(Dest::Server(1), Work::Write);
        r.sent(Dest::Server(2), Work::Write);
        r.answered();
        r.answered();
        r.sent(Dest::Lockd, Work::Lock);
        r.answered();
        // Posted: each alone (nothing waits on it), then a call alone.
        r.record(Dest::Server(3), Work::Write, true);
        r.record(Dest::Lockd, Work::Lock, true);
        r.sent(Dest::Server(0), Work::Read);
        r.answered();
        let stages: Vec<(Dest, u32, bool)> = r.take().iter().map(|x| (x.dest, x.stage, x.posted)).collect();
        let want = [(0, 0), (1, 1), (2, 1), (9, 2), (3, 3), (9, 4), (0, 5)];
        let want: Vec<(Dest, u32, bool)> = want
            .iter()
            .enumerate()
            .map(|(i, &(d, st))| (if d == 9 { Dest::Lockd } else { Dest::Server(d) }, st, i == 4 || i == 5))
            .collect();
        assert_eq!(stages, want);
        assert!(r.take().is_empty());
    }
}
