//! Where the TensorRT library is looked for (pure path logic; the opening
//! itself is in `ffi.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variable naming the TensorRT library: a file
/// (`/opt/trt/lib/libnvinfer.so.10`) or a folder holding one.
pub const ENV_LIBRARY: &str = "TETHER_TENSORRT_LIB";

/// Which runtime libraries may be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LibraryPreference {
    /// The standard runtime first (`libnvinfer.so.11`, `.10`), then the lean
    /// runtime (`libnvinfer_lean.so.11`, `.10`).
    #[default]
    StandardThenLean,
    /// Only the standard runtime.
    StandardOnly,
    /// Only the lean runtime (version-compatible plans only).
    LeanOnly,
}

impl LibraryPreference {
    /// The sonames tried, in order.
    pub fn file_names(self) -> &'static [&'static str] {
        match self {
            Self::StandardThenLean => &[
                "libnvinfer.so.11",
                "libnvinfer.so.10",
                "libnvinfer_lean.so.11",
                "libnvinfer_lean.so.10",
            ],
            Self::StandardOnly => &["libnvinfer.so.11", "libnvinfer.so.10"],
            Self::LeanOnly => &["libnvinfer_lean.so.11", "libnvinfer_lean.so.10"],
        }
    }
}

/// Standard install folders searched after the dynamic loader's own search
/// (`LD_LIBRARY_PATH`, `ld.so.cache`):
/// - `/usr/lib/x86_64-linux-gnu`: Debian/Ubuntu packages `libnvinfer10`/`libnvinfer11`;
/// - `/usr/lib/aarch64-linux-gnu`: JetPack 6 (L4T) and DRIVE OS 7 packages;
/// - `/usr/lib/aarch64-linux-gnu/tegra`: L4T's driver-library folder;
/// - `/usr/local/cuda/targets/{x86_64,aarch64}-linux/lib`: CUDA-toolkit layout
///   some DRIVE and container images use;
/// - `/usr/lib64`: RPM packages;
/// - `/usr/local/tensorrt/lib`, `/opt/tensorrt/lib`: the usual homes of the
///   TensorRT tar archive.
pub const STANDARD_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/tegra",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/aarch64-linux/lib",
    "/usr/lib64",
    "/usr/local/tensorrt/lib",
    "/opt/tensorrt/lib",
];

/// How to find the library.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// A library file or a folder holding one. When set, only this is tried.
    pub path: Option<PathBuf>,
    /// Which runtimes may be loaded.
    pub preference: LibraryPreference,
    /// Read [`ENV_LIBRARY`] when `path` is `None` (default true via
    /// [`LoadOptions::new`]).
    pub read_env: bool,
}

impl LoadOptions {
    /// Search with the given explicit path (or none), honouring [`ENV_LIBRARY`].
    pub fn new(path: Option<&Path>) -> Self {
        Self {
            path: path.map(Path::to_path_buf),
            preference: LibraryPreference::default(),
            read_env: true,
        }
    }
}

/// The candidates, in the order they are tried:
/// 1. `explicit` (the API argument) when given: that file, or each soname in
///    that folder; nothing else;
/// 2. otherwise `env` (the value of [`ENV_LIBRARY`]) when given and
///    non-empty, the same way; nothing else;
/// 3. otherwise each bare soname (the dynamic loader's own search), then each
///    soname in each of [`STANDARD_DIRS`].
pub fn candidate_paths(
    explicit: Option<&Path>,
    env: Option<OsString>,
    preference: LibraryPreference,
    is_dir: impl Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let names = preference.file_names();
    let expand = |p: &Path| -> Vec<PathBuf> {
        if is_dir(p) {
            names.iter().map(|n| p.join(n)).collect()
        } else {
            vec![p.to_path_buf()]
        }
    };
    if let Some(p) = explicit {
        return expand(p);
    }
    if let Some(e) = env.filter(|e| !e.is_empty()) {
        return expand(Path::new(&e));
    }
    let mut out: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
    for dir in STANDARD_DIRS {
        out.extend(names.iter().map(|n| Path::new(dir).join(n)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_file_wins_alone() {
        let c = candidate_paths(
            Some(Path::new("/x/libnvinfer.so.10")),
            Some("/env".into()),
            LibraryPreference::default(),
            |_| false,
        );
        assert_eq!(c, vec![PathBuf::from("/x/libnvinfer.so.10")]);
    }

    #[test]
    fn env_folder_expands_to_sonames() {
        let c = candidate_paths(
            None,
            Some("/opt/trt".into()),
            LibraryPreference::LeanOnly,
            |p| p == Path::new("/opt/trt"),
        );
        assert_eq!(
            c,
            vec![
                PathBuf::from("/opt/trt/libnvinfer_lean.so.11"),
                PathBuf::from("/opt/trt/libnvinfer_lean.so.10")
            ]
        );
    }

    #[test]
    fn default_search_covers_loader_and_standard_dirs() {
        let c = candidate_paths(None, Some("".into()), LibraryPreference::default(), |_| {
            true
        });
        assert_eq!(c[0], PathBuf::from("libnvinfer.so.11"));
        assert!(c.contains(&PathBuf::from(
            "/usr/lib/aarch64-linux-gnu/libnvinfer.so.10"
        )));
        assert!(c.contains(&PathBuf::from(
            "/usr/lib/x86_64-linux-gnu/libnvinfer_lean.so.11"
        )));
        assert_eq!(c.len(), 4 * (1 + STANDARD_DIRS.len()));
    }
}
