//! A discrete-event simulation of a metadata cluster in virtual time, for
//! throughput at sizes this machine cannot run for real.
//!
//! Clients replay operations recorded from an in-process run ([`SimOp`]: the
//! RPCs of each operation, in stages). Each client has `inflight` workers, each
//! running one operation at a time; an operation sends a stage's RPCs together
//! and the next stage when all are answered. An RPC reaches its server after
//! the network latency, waits its turn (each server and the lock service serve
//! one RPC at a time, first come first served), takes the service time of its
//! kind of work ([`Costs`], calibrated from real servers), and its answer
//! takes the network latency back. Phases with waves (mkdir by depth) end each
//! wave before the next begins. No randomness: the same input gives the same
//! result.

use crate::record::{Dest, Rpc, Work};
use crate::workload::Kind;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Nanoseconds of virtual time.
pub type Ns = u64;

/// What one RPC costs, by the work it does, and the network's one-way latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Costs {
    pub read_ns: Ns,
    pub write_ns: Ns,
    pub lock_ns: Ns,
    pub net_ns: Ns,
}

impl Costs {
    fn service(&self, w: Work) -> Ns {
        match w {
            Work::Read => self.read_ns,
            Work::Write => self.write_ns,
            Work::Lock => self.lock_ns,
        }
    }
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOp {
    pub kind: Kind,
    /// In stage order.
    pub rpcs: Vec<Rpc>,
}

#[derive(Debug, Clone, Default)]
pub struct SimResult {
    pub ops: u64,
    /// Virtual time from the first operation sent to the last answered.
    pub seconds: f64,
    /// Nanoseconds, sorted, by kind of operation.
    pub latencies: BTreeMap<Kind, Vec<Ns>>,
    /// Service time each server spent, then the lock service's (last).
    pub busy_ns: Vec<Ns>,
}

impl SimResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-12)
    }

    /// The share of the run the busiest server, and the lock service, were
    /// serving: which of them bounds the throughput.
    pub fn utilization(&self) -> (f64, f64) {
        let run = (self.seconds * 1e9).max(1.0);
        match self.busy_ns.split_last() {
            Some((lockd, servers)) => (servers.iter().copied().max().unwrap_or(0) as f64 / run, *lockd as f64 / run),
            None => (0.0, 0.0),
        }
    }

    fn add(&mut self, other: SimResult) {
        self.ops += other.ops;
        self.seconds += other.seconds;
        self.busy_ns.resize(self.busy_ns.len().max(other.busy_ns.len()), 0);
        for (mine, theirs) in self.busy_ns.iter_mut().zip(other.busy_ns) {
            *mine += theirs;
        }
        for (k, mut v) in other.latencies {
            let all = self.latencies.entry(k).or_default();
            all.append(&mut v);
            all.sort_unstable();
        }
    }
}

/// A phase's waves, one after another: `waves[w][c]` is client c's operations
/// in wave w.
pub fn simulate_waves(servers: u32, waves: &[Vec<Vec<SimOp>>], inflight: usize, costs: Costs) -> SimResult {
    let mut total = SimResult::default();
    for wave in waves {
        total.add(simulate(servers, wave, inflight, costs));
    }
    total
}

/// One worker's place: which client's list it takes from, and its operation.
struct Worker {
    client: usize,
    op: Option<usize>,
    started: Ns,
    /// Index in the op's RPCs of the current stage's first.
    next_rpc: usize,
    outstanding: usize,
}

/// Clients' operations (`clients[c]` in order), each client with `inflight`
/// workers, on `servers` servers and a lock service.
pub fn simulate(servers: u32, clients: &[Vec<SimOp>], inflight: usize, costs: Costs) -> SimResult {
    let mut sim = Sim { costs, free_at: vec![0; servers as usize + 1], busy: vec![0; servers as usize + 1], servers, events: BinaryHeap::new(), seq: 0 };
    let mut next_op = vec![0usize; clients.len()];
    let mut workers: Vec<Worker> = Vec::new();
    for c in 0..clients.len() {
        for _ in 0..inflight.max(1) {
            workers.push(Worker { client: c, op: None, started: 0, next_rpc: 0, outstanding: 0 });
        }
    }
    let mut result = SimResult::default();
    // An operation the client answered itself (no RPC, or only posted ones)
    // takes no time.
    for op in clients.iter().flatten().filter(|op| answered_at_once(op)) {
        result.ops += 1;
        result.latencies.entry(op.kind).or_default().push(0);
    }
    let mut end: Ns = 0;
    for (w, worker) in workers.iter_mut().enumerate() {
        sim.start_next(w, worker, clients, &mut next_op, 0);
    }
    while let Some(Reverse((now, _, w))) = sim.events.pop() {
        let worker = &mut workers[w];
        worker.outstanding -= 1;
        if worker.outstanding > 0 {
            continue;
        }
        let op = &clients[worker.client][worker.op.expect("a worker with replies has an op")];
        if sim.send_stages(w, worker, op, now) {
            continue;
        }
        result.ops += 1;
        result.latencies.entry(op.kind).or_default().push(now - worker.started);
        end = end.max(now);
        sim.start_next(w, worker, clients, &mut next_op, now);
    }
    for v in result.latencies.values_mut() {
        v.sort_unstable();
    }
    result.seconds = end as f64 / 1e9;
    result.busy_ns = sim.busy;
    result
}

/// Whether `op` waits for no answer: it sends nothing, or only posts.
fn answered_at_once(op: &SimOp) -> bool {
    op.rpcs.iter().all(|r| r.posted)
}

struct Sim {
    costs: Costs,
    /// When each server (then the lock service, last) is next free.
    free_at: Vec<Ns>,
    /// Service time each has spent so far.
    busy: Vec<Ns>,
    servers: u32,
    /// Answers arriving at workers: (time, sequence, worker).
    events: BinaryHeap<Reverse<(Ns, u64, usize)>>,
    seq: u64,
}

impl Sim {
    /// Gives worker `w` its client's next operation (skipping those with no
    /// RPC, counted already), or leaves it idle when there is none.
    fn start_next(&mut self, w: usize, worker: &mut Worker, clients: &[Vec<SimOp>], next_op: &mut [usize], now: Ns) {
        let list = &clients[worker.client];
        while next_op[worker.client] < list.len() {
            let i = next_op[worker.client];
            next_op[worker.client] += 1;
            if answered_at_once(&list[i]) {
                continue;
            }
            worker.op = Some(i);
            worker.started = now;
            worker.next_rpc = 0;
            self.send_stages(w, worker, &list[i], now);
            return;
        }
        worker.op = None;
    }

    /// Sends the worker's next stages of `op` at `now`, up to one that waits
    /// for answers; false when none is left.
    fn send_stages(&mut self, w: usize, worker: &mut Worker, op: &SimOp, now: Ns) -> bool {
        while worker.next_rpc < op.rpcs.len() {
            self.send_stage(w, worker, op, now);
            if worker.outstanding > 0 {
                return true;
            }
        }
        false
    }

    /// Sends the worker's next stage of `op` at `now`.
    fn send_stage(&mut self, w: usize, worker: &mut Worker, op: &SimOp, now: Ns) {
        let stage = op.rpcs[worker.next_rpc].stage;
        while worker.next_rpc < op.rpcs.len() && op.rpcs[worker.next_rpc].stage == stage {
            let rpc = op.rpcs[worker.next_rpc];
            worker.next_rpc += 1;
            // Sends happen in time order and the network's latency is the same
            // for all, so arrivals are in send order: first come, first served.
            let arrive = now + self.costs.net_ns;
            let slot = match rpc.dest {
                Dest::Server(i) => (i % self.servers.max(1)) as usize,
                Dest::Lockd => self.servers as usize,
            };
            let start = arrive.max(self.free_at[slot]);
            let service = self.costs.service(rpc.work);
            let done = start + service;
            self.free_at[slot] = done;
            self.busy[slot] += service;
            if rpc.posted {
                continue;
            }
            worker.outstanding += 1;
            self.seq += 1;
            self.events.push(Reverse((done + self.costs.net_ns, self.seq, w)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COSTS: Costs = Costs { read_ns: 10_000, write_ns: 30_000, lock_ns: 20_000, net_ns: 5_000 };

    fn op(kind: Kind, rpcs: &[(Dest, Work, u32)]) -> SimOp {
        SimOp { kind, rpcs: rpcs.iter().map(|&(dest, work, stage)| Rpc { dest, work, stage, posted: false }).collect() }
    }

    fn stat(server: u32) -> SimOp {
        op(Kind::Stat, &[(Dest::Server(server), Work::Read, 0)])
    }

    #[test]
    fn one_client_one_at_a_time_pays_the_round_trip_each_time() {
        let r = simulate(1, &[vec![stat(0); 100]], 1, COSTS);
        assert_eq!(r.ops, 100);
        assert_eq!(r.seconds, 100.0 * 20_000e-9);
        assert_eq!(r.latencies[&Kind::Stat], vec![20_000; 100]);
    }

    #[test]
    fn enough_in_flight_saturates_the_server() {
        let r = simulate(1, &[vec![stat(0); 1000]], 16, COSTS);
        let per_sec = r.ops_per_sec();
        assert!((per_sec - 100_000.0).abs() / 100_000.0 < 0.01, "{per_sec}: one server serves 1 / 10 us");
        let (server, lockd) = r.utilization();
        assert!(server > 0.99 && server <= 1.0, "{server}");
        assert_eq!(lockd, 0.0);
        let two = simulate(2, &[(0..1000).map(|i| stat(i % 2)).collect()], 16, COSTS);
        assert!((two.ops_per_sec() / per_sec - 2.0).abs() < 0.02, "two servers twice as many");
        let skewed = simulate(2, &[(0..1000).map(|i| stat(u32::from(i % 10 == 0))).collect()], 16, COSTS);
        assert!(skewed.ops_per_sec() < 1.2 * per_sec, "the busy server bounds it: {}", skewed.ops_per_sec());
    }

    #[test]
    fn a_stage_waits_for_its_slowest_rpc_and_stages_add_up() {
        let fan_out = op(Kind::Mkdir, &[(Dest::Lockd, Work::Lock, 0), (Dest::Server(0), Work::Write, 1), (Dest::Server(1), Work::Read, 1), (Dest::Lockd, Work::Lock, 2)]);
        let r = simulate(2, &[vec![fan_out]], 1, COSTS);
        // lock (5+20+5) + max(write, read) (5+30+5) + unlock (5+20+5)
        assert_eq!(r.latencies[&Kind::Mkdir], vec![30_000 + 40_000 + 30_000]);
    }

    #[test]
    fn a_posted_rpc_loads_its_server_but_holds_up_nothing() {
        let posted = |dest, work, stage| Rpc { dest, work, stage, posted: true };
        let mut mkdir = op(Kind::Mkdir, &[(Dest::Lockd, Work::Lock, 0), (Dest::Server(0), Work::Write, 1)]);
        mkdir.rpcs.extend([posted(Dest::Server(1), Work::Write, 2), posted(Dest::Lockd, Work::Lock, 3)]);
        let r = simulate(2, &[vec![mkdir.clone()]], 1, COSTS);
        assert_eq!(r.latencies[&Kind::Mkdir], vec![30_000 + 40_000], "the lock and the write, not the posts");
        assert_eq!(r.busy_ns, vec![30_000, 30_000, 40_000]);
        // A stat right after, on the server the post went to, waits behind it.
        let r = simulate(2, &[vec![mkdir, stat(1)]], 1, COSTS);
        assert_eq!(r.latencies[&Kind::Stat], vec![5_000 + 30_000 + 10_000 + 5_000]);
    }

    #[test]
    fn waves_run_one_after_another_and_the_same_input_gives_the_same_result() {
        let wave = vec![vec![stat(0); 10], vec![stat(1); 10]];
        let one = simulate(2, &wave, 1, COSTS);
        let two = simulate_waves(2, &[wave.clone(), wave.clone()], 1, COSTS);
        assert_eq!(two.ops, 40);
        assert!((two.seconds - 2.0 * one.seconds).abs() < 1e-12);
        let again = simulate_waves(2, &[wave.clone(), wave], 1, COSTS);
        assert_eq!((again.seconds, &again.latencies), (two.seconds, &two.latencies));
    }

    #[test]
    fn an_operation_without_rpcs_costs_nothing_and_an_empty_run_is_empty() {
        let r = simulate(1, &[vec![SimOp { kind: Kind::Stat, rpcs: vec![] }, stat(0)]], 1, COSTS);
        assert_eq!(r.ops, 2);
        assert_eq!(r.latencies[&Kind::Stat], vec![0, 20_000]);
        assert_eq!(simulate(3, &[], 4, COSTS).ops, 0);
    }
}
