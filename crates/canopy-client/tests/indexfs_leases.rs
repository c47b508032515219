//! IndexFS lease renewal on the client: a lookup that must ask a server
//! renews, in the same RPC, the leases it holds from that server on the
//! directories it has been using, so a client working in many directories
//! pays about one lookup RPC per server per lease, not one per directory.

use canopy_client::NsOptions;
use canopy_proto::clock::ManualClock;
use canopy_testkit::InProcCluster;

const DIRS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_renews_the_leases_in_use_on_its_server() {
    let cluster = InProcCluster::memory_mode("indexfs", 1);
    let setup = cluster.client();
    for i in 0..DIRS {
        setup.mkdir(&format!("/d{i}"), 0o755).await.unwrap();
        setup.create(&format!("/d{i}/f"), 0o644).await.unwrap();
    }
    let clock = ManualClock::new();
    let c = cluster.client_with(NsOptions { clock: Some(clock.clone()), ..NsOptions::default() });
    let stat_all = || async {
        let before = c.counters().snapshot();
        for i in 0..DIRS {
            c.stat(&format!("/d{i}/f")).await.unwrap();
        }
        c.counters().snapshot().since(&before)
    };
    // Cold: the root, then each directory, then each file.
    let cold = stat_all().await;
    assert_eq!(cold.total_rpcs(), 1 + 2 * DIRS as u64);
    // Warm, used again past the middle of the lease (1 s by default).
    clock.advance(600);
    assert_eq!(stat_all().await.total_rpcs(), DIRS as u64, "warm: one RPC per stat");
    // Expired: the first miss renews every other lease in use on that server.
    clock.advance(500);
    let renewed = stat_all().await;
    assert_eq!(renewed.cache_misses, 1, "one lookup, the rest renewed with it");
    assert_eq!(renewed.total_rpcs(), 1 + DIRS as u64);
    // Long expired but in use: again one lookup renews them all.
    clock.advance(5000);
    let lapsed = stat_all().await;
    assert_eq!((lapsed.cache_misses, lapsed.total_rpcs()), (1, 1 + DIRS as u64));
    // Unused entries are not renewed: after a stat of one directory only,
    // the others lapse and are looked up one by one.
    clock.advance(5000);
    c.stat("/d0/f").await.unwrap();
    clock.advance(5000);
    let before = c.counters().snapshot();
    c.stat("/d1/f").await.unwrap();
    let one = c.counters().snapshot().since(&before);
    assert_eq!(one.cache_misses, 2, "the root (renewing /d0 alone) and /d1");
}

/// Lease waits the servers counted so far.
async fn lease_waits(c: &canopy_client::Client) -> u64 {
    canopy_proto::msg::ServerStats::total(&c.server_stats().await.unwrap(), "lease_waits")
}

/// A directory chmod waiting out another client's lease holds up nobody else:
/// on a runtime of one thread, a third client's stat is answered while the
/// chmod still waits (the server answers a waiting request on a thread of its
/// own, also behind the delegating service real daemons run).
#[tokio::test(flavor = "current_thread")]
async fn a_chmod_waiting_out_a_lease_holds_up_no_other_request() {
    let cluster = InProcCluster::memory_mode("indexfs", 1);
    let setup = cluster.client();
    setup.mkdir("/d", 0o755).await.unwrap();
    setup.create("/d/f", 0o644).await.unwrap();
    // Another client caches /d under a lease (1 s by default).
    cluster.client_with(NsOptions::default()).stat("/d/f").await.unwrap();
    let chmod = {
        let c = cluster.client_with(NsOptions::default());
        tokio::spawn(async move { c.chmod("/d", 0o700).await })
    };
    while lease_waits(&setup).await == 0 {
        tokio::task::yield_now().await;
    }
    cluster.client_with(NsOptions::default()).stat("/d/f").await.unwrap();
    assert!(!chmod.is_finished(), "the stat waited for the chmod's lease wait");
    assert_eq!(chmod.await.unwrap().unwrap().mode & 0o777, 0o700);
}
