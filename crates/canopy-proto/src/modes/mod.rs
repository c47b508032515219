//! The namespace modes this build has: the registry, and each mode's options
//! as a cluster file holds them.
//!
//! [`for_each_mode!`] is the one list of modes. Every crate that has a part
//! per mode hands it a macro of its own and gets, from the one list, a module
//! per mode and the match that dispatches to it: the options here
//! (`modes/<mode>.rs`), the server's (`canopy-server/src/<mode>/`), the
//! client's (`canopy-client/src/<mode>/`) and what `canopy up` runs
//! (`canopy/src/modes/<mode>.rs`). A mode is therefore its files plus its line
//! in the list; docs/architecture.md ("Adding a mode") says what each file
//! holds. An unknown mode is a deserialisation error naming the known ones,
//! never a fallback.

use serde::{Deserialize, Serialize};

/// The registry: each mode as `name => Variant(Options)`, where `name` is how
/// cluster files and `--mode` spell it (the variant's name in lower case),
/// `Variant` its [`ModeOptions`] variant and `Options` its options type (in
/// `modes/<name>.rs`). `for_each_mode!(m)` expands to `m! { <the list> }`;
/// `m` must be a `macro_rules!` macro in scope where it is called.
#[macro_export]
macro_rules! for_each_mode {
    ($then:ident) => {
        $then! {
            shardfs => Shardfs(ShardFsOptions),
            indexfs => Indexfs(IndexFsOptions),
            giraffa => Giraffa(GiraffaOptions),
        }
    };
}

/// This crate's part of each mode: its options module, the enum of every
/// mode's options and the list of names.
macro_rules! options_of_each_mode {
    ($($name:ident => $variant:ident($options:ident)),* $(,)?) => {
        $(pub mod $name;)*
        $(pub use $name::$options;)*

        /// A mode and its options. In a cluster file the mode's name is the
        /// `mode` field and its options sit beside it (`{"mode": "indexfs",
        /// "lease": "fixed:1000", ...}`); an option left out takes its default.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(tag = "mode", rename_all = "lowercase")]
        pub enum ModeOptions {
            $(#[doc = concat!("The ", stringify!($name), " mode (see [`", stringify!($options), "`]).")] $variant($options),)*
        }

        /// The modes' names, in the order `canopy` lists them.
        pub const MODES: &[&str] = &[$(stringify!($name)),*];

        impl ModeOptions {
            /// Mode `name` with its default options; an unknown name is an
            /// error naming the known ones.
            pub fn named(name: &str) -> Result<ModeOptions, String> {
                $(if name == stringify!($name) {
                    return Ok(ModeOptions::$variant($options::default()));
                })*
                Err(format!("unknown namespace mode {name:?}: this build knows {}", MODES.join(", ")))
            }

            /// The mode's name, as cluster files spell it.
            pub fn name(&self) -> &'static str {
                match self {
                    $(ModeOptions::$variant(_) => stringify!($name),)*
                }
            }
        }
    };
}

for_each_mode!(options_of_each_mode);

pub use indexfs::{LeasePolicy, DEFAULT_SPLIT_THRESHOLD};
pub use giraffa::DEFAULT_REGION_ROWS;

impl Default for ModeOptions {
    /// ShardFS, the design seed 000 proposes.
    fn default() -> ModeOptions {
        ModeOptions::Shardfs(ShardFsOptions::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_mode_is_one_of_the_enum_and_back() {
        for name in MODES {
            let opts = ModeOptions::named(name).unwrap();
            assert_eq!(opts.name(), *name);
            // The cluster file spells it as the list does.
            let json = serde_json::to_value(&opts).unwrap();
            assert_eq!(json["mode"], *name, "{json}");
            assert_eq!(serde_json::from_value::<ModeOptions>(json).unwrap(), opts);
        }
        let err = ModeOptions::named("nfs").unwrap_err();
        assert!(err.contains("\"nfs\"") && err.contains("giraffa"), "{err}");
    }
}
