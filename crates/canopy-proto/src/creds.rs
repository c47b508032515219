//! The caller's identity. It travels with every request: servers check permissions
//! against it, so a request without credentials cannot exist.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary gid need not be repeated).
    pub groups: Vec<u32>,
}

impl Creds {
    pub fn root() -> Creds {
        Creds { uid: 0, gid: 0, groups: Vec::new() }
    }

    pub fn user(uid: u32, gid: u32) -> Creds {
        Creds { uid, gid, groups: Vec::new() }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}
