//! IndexFS's options: its lookup leases and GIGA+'s split threshold.

use serde::{Deserialize, Serialize};

/// IndexFS's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexFsOptions {
    /// How long lookups may be cached: `fixed[:MS]`, `depth[:K_MS]`, `rate[:L_MS]`.
    #[serde(default, with = "lease_text")]
    pub lease: LeasePolicy,
    /// Entries a directory partition holds before it splits (GIGA+).
    #[serde(default = "default_split_threshold")]
    pub split_threshold: u64,
}

impl Default for IndexFsOptions {
    fn default() -> IndexFsOptions {
        IndexFsOptions { lease: LeasePolicy::default(), split_threshold: DEFAULT_SPLIT_THRESHOLD }
    }
}

/// GIGA+'s threshold in the paper: a partition splits past 2000 entries.
pub const DEFAULT_SPLIT_THRESHOLD: u64 = 2000;

fn default_split_threshold() -> u64 {
    DEFAULT_SPLIT_THRESHOLD
}

/// How long a lookup's answer may be cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeasePolicy {
    /// The same lease for every entry.
    Fixed { ms: u32 },
    /// `k_ms / depth`: long near the root, which is read most and changed least.
    Depth { k_ms: u32 },
    /// `l_ms × reads / (reads + writes)` of the entry: short for entries that change.
    Rate { l_ms: u32 },
}

impl Default for LeasePolicy {
    fn default() -> LeasePolicy {
        LeasePolicy::Fixed { ms: 1000 }
    }
}

impl LeasePolicy {
    /// The longest lease this policy grants (what a restarted server waits out).
    pub fn longest_ms(&self) -> u32 {
        match *self {
            LeasePolicy::Fixed { ms } => ms,
            LeasePolicy::Depth { k_ms } => k_ms,
            LeasePolicy::Rate { l_ms } => l_ms,
        }
    }

    /// The lease granted for an entry at `depth` read `reads` and changed `writes` times.
    pub fn lease_ms(&self, depth: u32, reads: u64, writes: u64) -> u32 {
        match *self {
            LeasePolicy::Fixed { ms } => ms,
            LeasePolicy::Depth { k_ms } => k_ms / depth.max(1),
            LeasePolicy::Rate { l_ms } => (l_ms as u64 * reads / (reads + writes).max(1)) as u32,
        }
    }

    /// Parses `fixed`, `fixed:MS`, `depth`, `depth:K_MS`, `rate`, `rate:L_MS`.
    pub fn parse(s: &str) -> Result<LeasePolicy, String> {
        let (name, ms) = match s.split_once(':') {
            Some((n, ms)) => (n, Some(ms.parse::<u32>().map_err(|_| format!("bad lease length {ms:?} in {s:?}"))?)),
            None => (s, None),
        };
        match name {
            "fixed" => Ok(LeasePolicy::Fixed { ms: ms.unwrap_or(1000) }),
            "depth" => Ok(LeasePolicy::Depth { k_ms: ms.unwrap_or(4000) }),
            "rate" => Ok(LeasePolicy::Rate { l_ms: ms.unwrap_or(2000) }),
            _ => Err(format!("unknown lease policy {s:?}: fixed[:MS], depth[:K_MS] or rate[:L_MS]")),
        }
    }
}


impl std::fmt::Display for LeasePolicy {
    /// As [`LeasePolicy::parse`] reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            LeasePolicy::Fixed { ms } => write!(f, "fixed:{ms}"),
            LeasePolicy::Depth { k_ms } => write!(f, "depth:{k_ms}"),
            LeasePolicy::Rate { l_ms } => write!(f, "rate:{l_ms}"),
        }
    }
}

/// A lease policy in a cluster file: the text `canopy up --lease` takes.
mod lease_text {
    use super::LeasePolicy;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &LeasePolicy, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(p)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LeasePolicy, D::Error> {
        let text = String::deserialize(d)?;
        LeasePolicy::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_policies_read_back_as_written() {
        for p in [LeasePolicy::Fixed { ms: 7 }, LeasePolicy::Depth { k_ms: 4000 }, LeasePolicy::Rate { l_ms: 1 }] {
            assert_eq!(LeasePolicy::parse(&p.to_string()), Ok(p));
        }
        assert!(LeasePolicy::parse("forever").is_err());
        assert!(LeasePolicy::parse("fixed:x").is_err());
    }
}
