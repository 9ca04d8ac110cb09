//! Where the TensorRT library is looked for: the one search list of
//! [`tether_targets::libs`] (the same one `tether doctor` prints), restricted
//! to the flavors asked for. The opening itself is in `ffi.rs`.

use std::path::{Path, PathBuf};

use tether_targets::LibraryFlavor;
use tether_targets::libs::{self, Library, SearchEnv, SearchList};

/// Environment variable naming the TensorRT library: a file
/// (`/opt/trt/lib/libnvinfer.so.10`) or a folder holding one. When set, only
/// it is tried.
pub const ENV_LIBRARY: &str = Library::TensorRt.env_var();

/// How to find the library.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// A library file or a folder holding one. When set, only this is tried.
    pub path: Option<PathBuf>,
    /// Which runtimes may be loaded, preferred first (default: full, lean,
    /// dispatch). The lean and dispatch runtimes deserialize version-compatible
    /// plans only.
    pub flavors: Vec<LibraryFlavor>,
    /// Read [`ENV_LIBRARY`] when `path` is `None` (default true via
    /// [`LoadOptions::new`]).
    pub read_env: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self::new(None)
    }
}

impl LoadOptions {
    /// Search with the given explicit path (or none), honouring [`ENV_LIBRARY`],
    /// every flavor.
    pub fn new(path: Option<&Path>) -> Self {
        Self {
            path: path.map(Path::to_path_buf),
            flavors: LibraryFlavor::ALL.to_vec(),
            read_env: true,
        }
    }

    /// The places to look, in order: [`libs::search_list`] for TensorRT on
    /// this machine ([`SearchEnv::system`]) with these flavors.
    pub fn search_list(&self) -> SearchList {
        let mut env = SearchEnv::system();
        env.read_env_overrides = self.read_env;
        env.tensorrt_flavors = self.flavors.clone();
        libs::search_list(Library::TensorRt, &env, self.path.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_targets::libs::{Location, PlaceKind};

    #[test]
    fn explicit_file_is_the_only_place() {
        let o = LoadOptions::new(Some(Path::new("/x/libnvinfer.so.10")));
        let l = o.search_list();
        assert_eq!(l.places.len(), 1);
        assert_eq!(l.places[0].kind, PlaceKind::Explicit);
        assert_eq!(
            l.places[0].location,
            Location::File(PathBuf::from("/x/libnvinfer.so.10"))
        );
    }

    #[test]
    fn flavors_restrict_the_file_names() {
        let mut o = LoadOptions::new(None);
        o.read_env = false;
        o.flavors = vec![LibraryFlavor::Lean];
        let l = o.search_list();
        assert_eq!(l.places[0].kind, PlaceKind::Loader);
        for p in &l.places {
            assert!(
                p.files.iter().all(|f| f.starts_with("libnvinfer_lean.so.")),
                "{p:?}"
            );
        }
        // The host's own directories only.
        let arch_dir = if cfg!(target_arch = "x86_64") {
            "aarch64"
        } else {
            "x86_64"
        };
        assert!(l.places.iter().all(|p| !p.describe().contains(arch_dir)));
    }
}
