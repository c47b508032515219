//! The one way in to a mode's client: everything else (the CLI, the mount,
//! the bench, the test kit, the shared test suite) asks for a `Namespace` by
//! the mode's options and what holds its state, and never names a mode's
//! type. The registry (`canopy_proto::for_each_mode!`, `open_mode` in lib.rs)
//! sends each mode to its own module's `open`.

use crate::cluster::ModeOptions;
use crate::core::NsOptions;
use crate::delegate::Delegated;
use crate::namespace::Namespace;
use canopy_rpc::Transport;
use std::sync::Arc;

/// What holds a namespace's state, as its client reaches it.
#[derive(Clone)]
pub enum Backend {
    /// Canopy's metadata servers and lock service, over a transport (every
    /// mode of this build keeps its namespace there). A mode whose state lives
    /// in a store of its own finds it from its options, which the cluster
    /// file holds; it adds a variant here only for something its callers
    /// build for it (as the mount builds one transport for all its threads).
    Cluster(Arc<dyn Transport>),
}

impl Backend {
    /// The transport to Canopy's servers, for `mode`, which keeps its
    /// namespace there.
    pub(crate) fn cluster(self, mode: &str) -> Result<Arc<dyn Transport>, String> {
        match self {
            Backend::Cluster(t) if t.servers() == 0 => Err(format!("{mode} keeps its namespace on Canopy's metadata servers, and the cluster file lists none")),
            Backend::Cluster(t) => Ok(t),
        }
    }
}

/// The namespace client of `mode` over `backend`, set up as `opts` says.
pub fn open_namespace(mode: &ModeOptions, backend: Backend, opts: NsOptions) -> Result<Arc<dyn Namespace>, String> {
    crate::open_mode(mode, backend, &opts)
}

/// `direct`, a client of Canopy's servers over `t`, or, when `opts` asks, one
/// whose operations the servers run for it (`crate::delegate`), all of them at
/// server `sticky` if given.
pub(crate) fn delegated_if_asked(direct: Arc<dyn Namespace>, t: Arc<dyn Transport>, opts: &NsOptions, sticky: Option<u32>) -> Arc<dyn Namespace> {
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
            for delegate in [false, true] {
                let t = Arc::new(canopy_rpc::InProcTransport::new(vec![Arc::new(Nothing)], Arc::new(Nothing)));
                let ns = open_namespace(&ModeOptions::named(name).unwrap(), Backend::Cluster(t), NsOptions { delegate, ..NsOptions::default() }).unwrap();
                assert_eq!(ns.mode_name(), *name);
            }
        }
    }

    #[test]
    fn a_mode_on_canopys_servers_refuses_a_cluster_of_none() {
        let t = Arc::new(canopy_rpc::InProcTransport::new(Vec::new(), Arc::new(Nothing)));
        let err = open_namespace(&ModeOptions::named("indexfs").unwrap(), Backend::Cluster(t), NsOptions::default()).err().expect("refused");
        assert!(err.contains("indexfs") && err.contains("lists none"), "{err}");
    }

    struct Nothing;

    impl canopy_rpc::Service for Nothing {
        fn call(&self, _: &canopy_proto::auth::Identity, _: canopy_proto::Creds, _: canopy_proto::Request) -> canopy_rpc::Handled {
            canopy_rpc::Handled::Now(Err(canopy_proto::Errno::ENOSYS))
        }
    }
}
