//! The bench against Canopy itself: a tiny run of every phase on an in-process
//! cluster, so the runner's Canopy figures (RPCs, load, retries) stay measured.

use canopy_bench::{run, BenchConfig};
use canopy_proto::modes::{IndexFsOptions, ModeOptions};
use canopy_testkit::{assert_fsck_clean, InProcCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_phase_on_an_in_process_cluster() {
    let cluster = InProcCluster::memory(3);
    let clients = vec![cluster.fresh_client(), cluster.fresh_client()];
    let phases = ["mkdir", "create", "stat", "chmod", "rename"];
    let cfg = BenchConfig { clients: 2, inflight: 4, dirs: 10, files: 200, stats: 400, phases: phases.map(String::from).to_vec(), ..BenchConfig::default() };
    let report = run(clients, &cfg).await.unwrap();
    assert_eq!((report.mode.as_str(), report.servers), ("shardfs", 3));
    let names: Vec<&str> = report.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, phases);
    // 10 directories, 200 files, 400 stats, chmod of every directory, rename of the
    // 9 leaves (d0 is the only directory with children).
    let ops: Vec<u64> = report.phases.iter().map(|p| p.ops).collect();
    assert_eq!(ops, [10, 200, 400, 10, 9]);
    // ShardFS caches nothing: a stat is one RPC at every depth.
    assert!(!report.cold_stat_rpcs.is_empty(), "measured after the stat phase");
    assert!(report.cold_stat_rpcs.iter().all(|(_, r)| *r == 1.0), "{:?}", report.cold_stat_rpcs);
    for p in &report.phases {
        assert_eq!(p.errors, 0, "{}", p.name);
        assert!(p.seconds > 0.0 && p.latency_us.p50 > 0.0, "{p:?}");
        // A stat or create is one RPC to its primary; a mkdir is the lock, the 3
        // servers at once, the 2 replicas' posted unfences and the posted unlock.
        let expected = match p.name.as_str() {
            "create" | "stat" => Some(1.0),
            "mkdir" => Some(7.0),
            _ => None,
        };
        let rpc = p.rpc.as_ref().expect("a Canopy phase has RPC figures");
        if let Some(e) = expected {
            assert_eq!(rpc.rpc_amplification, e, "{}", p.name);
        }
    }
}

/// Over RocksDB stores the servers read file records through their entry
/// caches, as daemons do: a stat of a file just made is a hit, and the
/// report says how many there were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_after_creates_hit_the_servers_entry_caches() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = InProcCluster::rocks(3, dir.path());
    let clients = vec![cluster.fresh_client(), cluster.fresh_client()];
    let cfg = BenchConfig { clients: 2, inflight: 4, dirs: 10, files: 200, stats: 400, phases: vec!["mkdir".into(), "create".into(), "stat".into()], ..BenchConfig::default() };
    let report = run(clients, &cfg).await.unwrap();
    assert!(report.entry_cache_hits >= 400, "{} hits, {} misses", report.entry_cache_hits, report.entry_cache_misses);
    assert!(report.table().contains("servers' entry caches over the run"), "{}", report.table());
    // Every mkdir and create wrote on some server (a mkdir on all three);
    // in process no request comes in a read pass, so each write's log is
    // written out at once.
    assert!(report.store_writes >= 3 * 10 + 200, "{} writes", report.store_writes);
    assert_eq!(report.log_writes, report.store_writes);
    assert!(report.table().contains("servers' logs over the run"), "{}", report.table());
    // The same run again on the same cluster counts only its own writes (the
    // first also wrote each server's first block of ids).
    let again = BenchConfig { root: format!("{}-again", cfg.root), ..cfg };
    let second = run(vec![cluster.fresh_client(), cluster.fresh_client()], &again).await.unwrap();
    assert!(second.store_writes >= 3 * 10 + 200 && second.store_writes <= report.store_writes, "{} writes, then {}: counted since the servers started", report.store_writes, second.store_writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rmdir_phase_removes_the_tree_below_its_root() {
    let cluster = InProcCluster::memory(3);
    let clients = vec![cluster.fresh_client(), cluster.fresh_client()];
    let cfg = BenchConfig { clients: 2, inflight: 4, dirs: 10, files: 0, phases: vec!["mkdir".into(), "rmdir".into()], ..BenchConfig::default() };
    let report = run(clients, &cfg).await.unwrap();
    let rmdir = &report.phases[1];
    assert_eq!((rmdir.name.as_str(), rmdir.ops, rmdir.errors), ("rmdir", 9, 0));
    // Procedure 2: the lock, the 2 replicas at once, the primary, the posted unlock.
    assert_eq!(rmdir.rpc.as_ref().unwrap().rpc_amplification, 5.0);
    assert_fsck_clean(&cluster.client(), "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bulk_phase_makes_every_file_across_a_splitting_directory() {
    let opts = IndexFsOptions { split_threshold: 50, ..IndexFsOptions::default() };
    let cluster = InProcCluster::memory_with(3, ModeOptions::Indexfs(opts));
    let clients = vec![cluster.fresh_client(), cluster.fresh_client()];
    let cfg = BenchConfig { clients: 2, inflight: 4, files: 3000, phases: vec!["bulk-create".into()], ..BenchConfig::default() };
    let report = run(clients, &cfg).await.unwrap();
    let [bulk] = &report.phases[..] else { panic!("one phase: {:?}", report.phases) };
    assert_eq!((bulk.name.as_str(), bulk.ops, bulk.errors), ("bulk-create", 3000, 0));
    assert_eq!(report.entries_per_server.iter().sum::<u64>(), 3000, "{:?}", report.entries_per_server);
    assert!(report.splits >= 2, "the directory spread: {} splits", report.splits);
    assert!(report.entries_per_server.iter().all(|&n| n > 0), "{:?}", report.entries_per_server);
}
