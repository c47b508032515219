//! The one place a cluster's mode becomes a client: everything else (the CLI,
//! the mount, the bench, the test kit, the shared test suite) asks for a
//! `Namespace` by the mode's options and what holds its state, and never
//! names a mode's type.

use crate::cluster::ModeOptions;
use crate::core::NsOptions;
use crate::delegate::Delegated;
use crate::giraffa::Giraffa;
use crate::indexfs::IndexFs;
use crate::namespace::Namespace;
use crate::shardfs::ShardFs;
use canopy_rpc::Transport;
use std::sync::Arc;

/// What holds a namespace's state, as its client reaches it.
#[derive(Clone)]
pub enum Backend {
    /// Canopy's metadata servers and lock service, over a transport (every
    /// mode of this build keeps its namespace there). A mode whose state lives
    /// in a store of its own adds the variant that reaches it.
    Cluster(Arc<dyn Transport>),
}

/// The namespace client of `mode` over `backend`, set up as `opts` says.
pub fn open_namespace(mode: &ModeOptions, backend: Backend, opts: NsOptions) -> Result<Arc<dyn Namespace>, String> {
    match backend {
        Backend::Cluster(t) => Ok(on_cluster(mode, t, opts)),
    }
}

/// A client of a mode whose namespace Canopy's servers hold.
fn on_cluster(mode: &ModeOptions, t: Arc<dyn Transport>, opts: NsOptions) -> Arc<dyn Namespace> {
    let direct: Arc<dyn Namespace> = match mode {
        ModeOptions::Shardfs => Arc::new(ShardFs::open(t.clone(), &opts)),
        ModeOptions::Indexfs(_) => Arc::new(IndexFs::open(t.clone(), &opts)),
        ModeOptions::Giraffa(_) => Arc::new(Giraffa::open(t.clone(), &opts)),
    };
    // IndexFS: every delegated operation of this client to one server, picked
    // at random, so its lookups and its mutations share one cache.
    let sticky = matches!(mode, ModeOptions::Indexfs(_)).then(|| (canopy_rpc::random::u64().unwrap_or(0) % t.servers().max(1) as u64) as u32);
    if opts.delegate {
        Arc::new(Delegated::new(direct, t, sticky))
    } else {
        direct
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::MODES;

    #[test]
    fn each_mode_opens_as_itself_over_a_cluster() {
        for name in MODES {
            let t = Arc::new(canopy_rpc::InProcTransport::new(Vec::new(), Arc::new(Nothing)));
            let ns = open_namespace(&ModeOptions::named(name).unwrap(), Backend::Cluster(t), NsOptions::default()).unwrap();
            assert_eq!(ns.mode_name(), *name);
        }
    }

    struct Nothing;

    impl canopy_rpc::Service for Nothing {
        fn call(&self, _: &canopy_proto::auth::Identity, _: canopy_proto::Creds, _: canopy_proto::Request) -> canopy_rpc::Handled {
            canopy_rpc::Handled::Now(Err(canopy_proto::Errno::ENOSYS))
        }
    }
}
