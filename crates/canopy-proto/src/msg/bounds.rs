//! What a request may ask of a server: the most bytes its reply can take
//! (`Request::reply_bound`), and whether a user key may send it.

use super::*;

/// What a small reply takes at most: attributes, a unit, an errno, a lock
/// grant, a symlink's target.
const SMALL_REPLY: usize = 8 << 10;

impl NsCall {
    /// As [`Request::reply_bound`], for a call a server runs for a user.
    pub fn reply_bound(&self) -> usize {
        match self {
            NsCall::ReadData { len, .. } => SMALL_REPLY + (*len).min(READ_REPLY_MAX) as usize,
            NsCall::WriteData { .. } => SMALL_REPLY + INLINE_LIMIT as usize,
            NsCall::ReadDir { limit, .. } => SMALL_REPLY + (*limit).min(crate::msg::MAX_PAGE) as usize * DIR_ENTRY_MAX,
            _ => SMALL_REPLY,
        }
    }
}

/// The most names one readdir page answers.
pub const MAX_PAGE: u32 = 4096;

impl Request {
    /// The most bytes this request's reply can take on the wire: an upper
    /// bound, not an estimate, so a daemon can bound what the replies of one
    /// connection, and of all, make it hold before it has worked them out
    /// (`canopy-rpc/src/server.rs`). Requests whose reply holds a listing or
    /// contents count as large as their limit allows; anything not named
    /// here, as large as a frame.
    pub fn reply_bound(&self) -> usize {
        match self {
            Request::ReadData { len, .. } => SMALL_REPLY + (*len).min(READ_REPLY_MAX) as usize,
            // `Spill` carries the inline contents; a file's old record moves with `RenameOut`.
            Request::WriteData { .. } | Request::RenameOut { .. } => SMALL_REPLY + INLINE_LIMIT as usize,
            Request::ReadDir { limit, .. } | Request::IxReadDir { limit, .. } => SMALL_REPLY + (*limit).min(MAX_PAGE) as usize * DIR_ENTRY_MAX,
            Request::Delegate { call } => call.reply_bound(),
            Request::GfVouched { inner, .. } | Request::Once { inner, .. } => {
                postcard::from_bytes::<Request>(inner).map_or(SMALL_REPLY, |r| r.reply_bound().min(crate::frame::MAX_FRAME))
            }
            Request::Ping
            | Request::Stat { .. }
            | Request::Create { .. }
            | Request::Unlink { .. }
            | Request::SetAttr { .. }
            | Request::Readlink { .. }
            | Request::Access { .. }
            | Request::TouchDir { .. }
            | Request::LinkShare { .. }
            | Request::LinkInsert { .. }
            | Request::InodeStat { .. }
            | Request::InodeSetAttr { .. }
            | Request::InodeLinkDelta { .. }
            | Request::LinkSettle { .. }
            | Request::Spilled { .. }
            | Request::Extend { .. }
            | Request::RenameLocal { .. }
            | Request::RenameIn { .. }
            | Request::RenameOutCommit { .. }
            | Request::RecoveryStat { .. }
            | Request::Mkdir { .. }
            | Request::Rmdir { .. }
            | Request::DirSetAttr { .. }
            | Request::RenameDir { .. }
            | Request::DirSync { .. }
            | Request::Fence { .. }
            | Request::Unfence { .. }
            | Request::Adopt { .. }
            | Request::Release { .. }
            | Request::ClearFences { .. }
            | Request::Revoke { .. }
            | Request::Lock { .. }
            | Request::Renew { .. }
            | Request::Unlock { .. }
            | Request::Amend { .. }
            | Request::IxLookup { .. }
            | Request::IxMkdir { .. }
            | Request::IxMkHeader { .. }
            | Request::IxSeal { .. }
            | Request::IxRmdir { .. }
            | Request::IxDropHeader { .. }
            | Request::IxDirSetAttr { .. }
            | Request::IxRenameDir { .. }
            | Request::IxRenameDirIn { .. }
            | Request::IxRenameDirCommit { .. }
            | Request::GfProof { .. }
            | Request::GfMkdir { .. }
            | Request::GfRmdirBegin { .. }
            | Request::GfEmpty { .. }
            | Request::GfRmdirEnd { .. }
            | Request::GfDirSetAttr { .. }
            | Request::GfPutRows { .. }
            | Request::GfDeleteRows { .. }
            | Request::GfSetSubdirs { .. }
            | Request::BatchOpen { .. }
            | Request::BatchStage { .. }
            | Request::BatchClose { .. }
            | Request::GroupStatus
            | Request::GroupChange { .. } => SMALL_REPLY,
            _ => crate::frame::MAX_FRAME,
        }
    }

    /// Whether serving this changes nothing a daemon keeps durably: a client
    /// of a replica group may send it again after a failover as it is, while
    /// every other request goes in a [`Request::Once`].
    pub fn changes_nothing(&self) -> bool {
        matches!(
            self,
            Request::Ping
                | Request::Stat { .. }
                | Request::Readlink { .. }
                | Request::Access { .. }
                | Request::ReadDir { .. }
                | Request::InodeStat { .. }
                | Request::DirProbe { .. }
                | Request::RecoveryStat { .. }
                | Request::ReadData { .. }
                | Request::Stats
                | Request::Fsck
                | Request::ListTxns
                | Request::IxLookup { .. }
                | Request::IxReadDir { .. }
                | Request::GfScan { .. }
                | Request::BatchList
                | Request::LinkPending { .. }
                | Request::GroupStatus
                | Request::Peer { .. }
                | Request::Once { .. }
        )
    }

    /// Whether a connection bound to one user (a user key) may send this. Those
    /// requests act on one object with the caller's rights, which the server
    /// checks in full. Everything else (transaction steps, recovery, fences,
    /// migration, fsck, the lock service) is internal and needs the cluster key:
    /// it either trusts its sender to have checked (a replica's step) or acts as
    /// root.
    pub fn user_may_send(&self) -> bool {
        matches!(
            self,
            Request::Ping
                | Request::Stat { .. }
                | Request::Create { .. }
                | Request::Unlink { .. }
                | Request::SetAttr { .. }
                | Request::Readlink { .. }
                | Request::Access { .. }
                | Request::ReadDir { .. }
                | Request::ReadData { .. }
                | Request::WriteData { .. }
                | Request::Spilled { .. }
                | Request::Extend { .. }
                | Request::Stats
                | Request::Delegate { .. }
                | Request::Once { .. }
                | Request::GroupStatus
        )
    }
}
