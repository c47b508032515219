//! The one place a cluster's mode becomes a client: everything else (the CLI,
//! the mount, the bench, the test kit) asks for a `Namespace` by mode name and
//! never names a mode's type.

use crate::cluster::ModeOptions;
use crate::core::NsOptions;
use crate::delegate::Delegated;
use crate::namespace::Namespace;
use crate::giraffa::Giraffa;
use crate::indexfs::IndexFs;
use crate::shardfs::ShardFs;
use canopy_rpc::Transport;
use std::sync::Arc;

/// The namespace client of mode `mode` over `t`, set up as `opts` says; an
/// unknown mode is an error naming the known ones.
pub fn open_namespace(mode: &str, t: Arc<dyn Transport>, opts: NsOptions) -> Result<Arc<dyn Namespace>, String> {
    let direct: Arc<dyn Namespace> = match ModeOptions::named(mode)? {
        ModeOptions::Shardfs => Arc::new(ShardFs::open(t.clone(), &opts)),
        ModeOptions::Indexfs(_) => Arc::new(IndexFs::open(t.clone(), &opts)),
        ModeOptions::Giraffa(_) => Arc::new(Giraffa::open(t.clone(), &opts)),
    };
    // IndexFS: every delegated operation of this client to one server, picked
    // at random, so its lookups and its mutations share one cache.
    let sticky = (mode == "indexfs").then(|| (canopy_rpc::random::u64().unwrap_or(0) % t.servers().max(1) as u64) as u32);
    Ok(if opts.delegate { Arc::new(Delegated::new(direct, t, sticky)) } else { direct })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_mode_is_named_with_the_known_ones() {
        let t = Arc::new(canopy_rpc::InProcTransport::new(Vec::new(), Arc::new(Nothing)));
        let err = open_namespace("nfs", t, NsOptions::default()).err().unwrap();
        assert!(err.contains("\"nfs\"") && err.contains("shardfs"), "{err}");
    }

    struct Nothing;

    impl canopy_rpc::Service for Nothing {
        fn call(&self, _: &canopy_proto::auth::Identity, _: canopy_proto::Creds, _: canopy_proto::Request) -> canopy_rpc::Handled {
            canopy_rpc::Handled::Now(Err(canopy_proto::Errno::ENOSYS))
        }
    }
}
