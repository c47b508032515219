//! The one place a cluster's mode becomes a client: everything else (the CLI,
//! the mount, the bench, the test kit) asks for a `Namespace` by mode name and
//! never names a mode's type.

use crate::cluster;
use crate::core::NsOptions;
use crate::delegate::Delegated;
use crate::namespace::Namespace;
use crate::shardfs::ShardFs;
use canopy_rpc::Transport;
use std::sync::Arc;

/// The namespace client of mode `mode` over `t`, set up as `opts` says; an
/// unknown mode is an error naming the known ones.
pub fn open_namespace(mode: &str, t: Arc<dyn Transport>, opts: NsOptions) -> Result<Arc<dyn Namespace>, String> {
    cluster::check_mode(mode)?;
    let direct: Arc<dyn Namespace> = match mode {
        "shardfs" => Arc::new(ShardFs::open(t.clone(), &opts)),
        other => return Err(format!("mode {other} has no client in this build")),
    };
    Ok(if opts.delegate { Arc::new(Delegated::new(direct, t)) } else { direct })
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
