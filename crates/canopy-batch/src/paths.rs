//! Global paths under a batch's root and the private namespace's paths: the
//! private server's `/` is the batch's root.

use canopy_proto::path::{check_name, NsPath, NS_PATH_MAX};
use canopy_proto::Errno;

/// How deep a private path is (`/a` is 1).
pub(crate) fn depth(path: &str) -> usize {
    path.matches('/').count()
}

#[derive(Debug, Clone)]
pub struct Rooted {
    root: NsPath,
}

impl Rooted {
    pub fn new(root: &str) -> Result<Rooted, Errno> {
        Ok(Rooted { root: NsPath::parse(root)? })
    }

    pub fn root(&self) -> &str {
        self.root.as_str()
    }

    /// The private path of global `path`; `EXDEV` outside the batch's root.
    pub fn private(&self, path: &str) -> Result<String, Errno> {
        self.private_path(path).map(|p| p.as_str().to_string())
    }

    /// [`Rooted::private`], parsed.
    pub fn private_path(&self, path: &str) -> Result<NsPath, Errno> {
        let p = NsPath::parse(path)?;
        let root = self.root.as_str();
        if root == "/" {
            return Ok(p);
        }
        match p.as_str().strip_prefix(root) {
            Some("") => NsPath::parse("/"),
            Some(rest) if rest.starts_with('/') => NsPath::parse(rest),
            _ => Err(Errno::EXDEV),
        }
    }

    /// The private directory and name of global `path` as written, without
    /// parsing or allocating: `None` unless the path is under the root and its
    /// last component is a plain name. The directory part is unchecked, so a
    /// caller may only use it to find a directory it already holds by its
    /// canonical private path (anything unusual in it finds none).
    pub fn private_split<'p>(&self, path: &'p str) -> Option<(&'p str, &'p str)> {
        if path.len() > NS_PATH_MAX {
            return None;
        }
        let rest = match self.root.as_str() {
            "/" => path,
            root => path.strip_prefix(root)?,
        };
        let cut = rest.rfind('/')?;
        let (dir, name) = (if cut == 0 { "/" } else { &rest[..cut] }, &rest[cut + 1..]);
        let plain = name != "." && name != ".." && check_name(name).is_ok();
        // `//name` would read as `/`'s: the parser refuses it, so must this.
        (rest.starts_with('/') && !rest[..cut].ends_with('/') && plain).then_some((dir, name))
    }

    /// Whether global `path` is a directory above the root (which the batch
    /// sees as existing directories it cannot change).
    pub fn above(&self, path: &str) -> bool {
        let Ok(p) = NsPath::parse(path) else { return false };
        let (root, p) = (self.root.as_str(), p.as_str());
        root != p && (p == "/" || root.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
    }

    /// The global path of private `path`.
    pub fn global(&self, path: &str) -> String {
        match (self.root.as_str(), path) {
            (root, "/") => root.to_string(),
            ("/", p) => p.to_string(),
            (root, p) => format!("{root}{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_both_ways_and_nothing_escapes_the_root() {
        let r = Rooted::new("/jobs/run42").unwrap();
        assert_eq!(r.private("/jobs/run42").unwrap(), "/");
        assert_eq!(r.private("/jobs/run42/a/b").unwrap(), "/a/b");
        assert_eq!(r.private("/jobs/run42/../x"), Err(Errno::EXDEV));
        assert_eq!(r.private("/jobs/run420/a"), Err(Errno::EXDEV));
        assert_eq!(r.private("/jobs"), Err(Errno::EXDEV));
        assert_eq!(r.global("/a/b"), "/jobs/run42/a/b");
        assert_eq!(r.global("/"), "/jobs/run42");
        assert!(r.above("/") && r.above("/jobs") && !r.above("/jobs/run42") && !r.above("/jo") && !r.above("/jobs/run4"));
        assert_eq!(r.private_split("/jobs/run42/a/b"), Some(("/a", "b")));
        assert_eq!(r.private_split("/jobs/run42/b"), Some(("/", "b")));
        for odd in ["/jobs/run42", "/jobs/run42/", "/jobs/run42//b", "/jobs/run42/a//b", "/jobs/run42/a/..", "/jobs/run42/.", "/jobs/run420/b", "/jobs/b", "relative/b"] {
            assert_eq!(r.private_split(odd), None, "{odd}");
        }
        let top = Rooted::new("/").unwrap();
        assert_eq!(top.private_split("/a/b"), Some(("/a", "b")));
        assert_eq!((top.private("/a").unwrap(), top.global("/a")), ("/a".to_string(), "/a".to_string()));
    }
}
