//! A namespace as a sorted list, for tests that compare whole trees (before and
//! after a transaction that died and was recovered, for instance).

use canopy_client::Client;
use canopy_proto::FileKind;

/// Every object's path, kind, mode, nlink, uid and gid, sorted by path.
pub type Tree = Vec<(String, FileKind, u32, u32, u32, u32)>;

/// Walks the whole namespace from the root as `c`. Panics on an error: the
/// tests that use it expect a consistent, readable tree.
pub async fn tree(c: &Client) -> Tree {
    let mut out = Vec::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(d) = dirs.pop() {
        for e in c.readdir(&d).await.unwrap() {
            let p = if d == "/" { format!("/{}", e.name) } else { format!("{d}/{}", e.name) };
            let a = c.stat(&p).await.unwrap();
            if a.kind == FileKind::Dir {
                dirs.push(p.clone());
            }
            out.push((p, a.kind, a.mode, a.nlink, a.uid, a.gid));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
