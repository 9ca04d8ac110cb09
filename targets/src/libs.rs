//! Where the NVIDIA libraries tether loads at run time live, and the one
//! loader that finds them: the CUDA driver (`libcuda`), TensorRT (full, lean
//! and dispatch runtimes), cuDNN and cuBLAS.
//!
//! The probe (`tether doctor`), the runtime's CUDA layer (`tether run`) and
//! its TensorRT layer all build their list here ([`search_list`]) and open
//! through here ([`find`]), so they look in the same places and report the
//! same way: every place tried, with the loader's reason ([`Tried`]).
//!
//! # The list, in order
//!
//! 1. An explicit path given by the caller (`tether doctor --tensorrt-lib`,
//!    `TensorRt::load(Some(..))`), else the library's environment variable
//!    ([`Library::env_var`]): a file, or a folder holding one of the
//!    library's file names. When one is given, *only* it is tried, so a
//!    wrong override is reported instead of masked by another copy.
//! 2. The dynamic loader's own search by file name (`LD_LIBRARY_PATH`,
//!    `ld.so.cache`, the default directories); only on the real root.
//! 3. For `libcuda`: the user-space driver directory `/etc/nv_tegra_release`
//!    names (JetPack).
//! 4. The directories where NVIDIA's packages put the library on *this CPU
//!    architecture* ([`system_dirs`]): an x86_64 host never searches the
//!    aarch64, Tegra or SBSA directories, and an aarch64 host searches the
//!    JetPack, DRIVE OS and SBSA ones.
//! 5. The folders pip installs NVIDIA's wheels into (`tensorrt_libs`,
//!    `tensorrt_lean_libs`, `tensorrt_dispatch_libs`, `nvidia/cudnn/lib`,
//!    `nvidia/cu13/lib`, `nvidia/cublas/lib`; [`python_subdirs`]) under every
//!    Python `site-packages` / `dist-packages` found without running Python
//!    ([`PythonEnv`]: `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, pyenv,
//!    `/opt/conda`, `/usr/local/lib`, `/usr/lib`, `/usr/lib64`).
//!
//! Each directory appears once (by name, and by its canonical path when it
//! exists: `/usr/local/cuda/lib64` is usually a link to
//! `/usr/local/cuda/targets/x86_64-linux/lib`).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::vocab::{CpuArch, LibraryFlavor};

/// A library tether loads at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Library {
    /// The CUDA driver, `libcuda.so.1` (serialised `cuda-driver`; the others lowercase:
    /// `tensorrt`, `cudnn`, `cublas`).
    #[cfg_attr(feature = "serde", serde(rename = "cuda-driver"))]
    CudaDriver,
    /// TensorRT: `libnvinfer`, `libnvinfer_lean` or `libnvinfer_dispatch`,
    /// major 11 or 10 (the flavors searched are [`SearchEnv::tensorrt_flavors`]).
    TensorRt,
    /// cuDNN 9, `libcudnn.so.9`.
    Cudnn,
    /// cuBLAS of CUDA 13 or 12, `libcublas.so.13` / `.12`.
    Cublas,
}

impl Library {
    /// Every library, in the order `tether doctor` reports them.
    pub const ALL: [Library; 4] = [
        Library::CudaDriver,
        Library::TensorRt,
        Library::Cudnn,
        Library::Cublas,
    ];

    /// `CUDA driver`, `TensorRT`, `cuDNN`, `cuBLAS`.
    pub const fn name(self) -> &'static str {
        match self {
            Library::CudaDriver => "CUDA driver",
            Library::TensorRt => "TensorRT",
            Library::Cudnn => "cuDNN",
            Library::Cublas => "cuBLAS",
        }
    }

    /// The environment variable naming the library (a file or a folder):
    /// `TETHER_LIBCUDA`, `TETHER_TENSORRT_LIB`, `TETHER_CUDNN_LIB`,
    /// `TETHER_CUBLAS_LIB`.
    pub const fn env_var(self) -> &'static str {
        match self {
            Library::CudaDriver => "TETHER_LIBCUDA",
            Library::TensorRt => "TETHER_TENSORRT_LIB",
            Library::Cudnn => "TETHER_CUDNN_LIB",
            Library::Cublas => "TETHER_CUBLAS_LIB",
        }
    }

    /// The file names (sonames) looked for, preferred first. TensorRT: see
    /// [`tensorrt_file_names`].
    pub fn file_names(self, tensorrt_flavors: &[LibraryFlavor]) -> Vec<&'static str> {
        match self {
            // The SONAME only: `libcuda.so` is a development link, and the
            // toolkit's stub of that name answers CUDA_ERROR_STUB_LIBRARY.
            Library::CudaDriver => vec!["libcuda.so.1"],
            Library::TensorRt => tensorrt_flavors
                .iter()
                .flat_map(|f| tensorrt_file_names(*f))
                .copied()
                .collect(),
            Library::Cudnn => vec!["libcudnn.so.9"],
            Library::Cublas => vec!["libcublas.so.13", "libcublas.so.12"],
        }
    }
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The TensorRT file names of one flavor, major 11 first (tether drives
/// TensorRT 10 and 11).
pub const fn tensorrt_file_names(flavor: LibraryFlavor) -> &'static [&'static str; 2] {
    match flavor {
        LibraryFlavor::Full => &["libnvinfer.so.11", "libnvinfer.so.10"],
        LibraryFlavor::Lean => &["libnvinfer_lean.so.11", "libnvinfer_lean.so.10"],
        LibraryFlavor::Dispatch => &["libnvinfer_dispatch.so.11", "libnvinfer_dispatch.so.10"],
    }
}

/// The flavor a TensorRT file name names (`libnvinfer_lean.so.11` is
/// [`LibraryFlavor::Lean`]); `None` when the name is none of the three.
pub fn tensorrt_flavor_of(file: &Path) -> Option<LibraryFlavor> {
    let name = file.file_name()?.to_str()?;
    let stem = name.split('.').next()?;
    [
        LibraryFlavor::Dispatch,
        LibraryFlavor::Lean,
        LibraryFlavor::Full,
    ]
    .into_iter()
    .find(|f| stem == f.stem())
}

/// Where NVIDIA's packages install `library` on a host of architecture
/// `arch`, most specific first. Only directories that architecture can hold.
pub fn system_dirs(library: Library, arch: CpuArch) -> &'static [&'static str] {
    match (library, arch) {
        // x86_64: distribution packages (Debian/Ubuntu multiarch, RPM
        // lib64), the NVIDIA container toolkit, WSL, and the toolkit's
        // forward-compatibility driver ([`crate::sources::GPU_HOST_NOTES`]).
        (Library::CudaDriver, CpuArch::X86_64) => &[
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/local/nvidia/lib64",
            "/usr/lib/wsl/lib",
            "/usr/lib",
            "/usr/local/cuda/compat",
        ],
        // aarch64: JetPack 6 (TARGET_USERSPACE_LIB_DIR_PATH, [`crate::sources::NV_TEGRA_RELEASE_FORMAT`]),
        // JetPack 7.2's OpenRM driver ([`crate::sources::JETPACK72_OPENRM_LIBCUDA`]),
        // JetPack 5's tegra/, the SBSA multiarch directory (JetPack 7.0/7.1,
        // DRIVE OS, Grace), then the generic ones.
        (Library::CudaDriver, CpuArch::Aarch64) => &[
            "/usr/lib/aarch64-linux-gnu/nvidia",
            "/opt/nvidia/l4t-gpu-libs/openrm",
            "/usr/lib/aarch64-linux-gnu/tegra",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/local/nvidia/lib64",
            "/usr/lib",
            "/usr/local/cuda/compat",
        ],
        (Library::CudaDriver, CpuArch::Any) => &["/usr/lib64", "/usr/lib"],
        // TensorRT: Debian/Ubuntu and RPM packages, the tar archive's usual
        // homes, and the CUDA-toolkit layout of some containers.
        (Library::TensorRt, CpuArch::X86_64) => &[
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/local/tensorrt/lib",
            "/opt/tensorrt/lib",
            "/usr/local/cuda/targets/x86_64-linux/lib",
        ],
        // JetPack and DRIVE OS install TensorRT into the multiarch
        // directory; DRIVE OS images also use the toolkit layout.
        (Library::TensorRt, CpuArch::Aarch64) => &[
            "/usr/lib/aarch64-linux-gnu",
            "/usr/local/cuda/targets/aarch64-linux/lib",
            "/usr/lib64",
            "/usr/local/tensorrt/lib",
            "/opt/tensorrt/lib",
        ],
        (Library::TensorRt, CpuArch::Any) => &["/usr/lib64", "/usr/local/tensorrt/lib"],
        // cuDNN: the Debian packages (libcudnn9-cuda-12/13), RPM, and the
        // tar archive copied into the toolkit.
        (Library::Cudnn, CpuArch::X86_64) => &[
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/local/cuda/targets/x86_64-linux/lib",
            "/usr/local/cuda/lib64",
        ],
        (Library::Cudnn, CpuArch::Aarch64) => &[
            "/usr/lib/aarch64-linux-gnu",
            "/usr/local/cuda/targets/sbsa-linux/lib",
            "/usr/local/cuda/targets/aarch64-linux/lib",
            "/usr/lib64",
            "/usr/local/cuda/lib64",
        ],
        (Library::Cudnn, CpuArch::Any) => &["/usr/lib64", "/usr/local/cuda/lib64"],
        // cuBLAS: the CUDA toolkit ([`crate::sources::GPU_HOST_NOTES`]: the H200
        // host's libcublas.so.13 is in targets/x86_64-linux/lib), then
        // distribution packages.
        (Library::Cublas, CpuArch::X86_64) => &[
            "/usr/local/cuda/targets/x86_64-linux/lib",
            "/usr/local/cuda/lib64",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
        ],
        // JetPack 6: targets/aarch64-linux; JetPack 7 and SBSA: sbsa-linux.
        (Library::Cublas, CpuArch::Aarch64) => &[
            "/usr/local/cuda/targets/aarch64-linux/lib",
            "/usr/local/cuda/targets/sbsa-linux/lib",
            "/usr/local/cuda/lib64",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
        ],
        (Library::Cublas, CpuArch::Any) => &["/usr/local/cuda/lib64", "/usr/lib64"],
    }
}

/// The folders under `site-packages` where pip puts `library`
/// ([`crate::sources::TRT_PIP_WHEELS`], [`crate::sources::CUDA_PIP_WHEELS`]). TensorRT:
/// only those of `tensorrt_flavors`.
pub fn python_subdirs(library: Library, tensorrt_flavors: &[LibraryFlavor]) -> Vec<&'static str> {
    match library {
        // No wheel ships the driver.
        Library::CudaDriver => Vec::new(),
        Library::TensorRt => tensorrt_flavors
            .iter()
            .map(|f| match f {
                LibraryFlavor::Full => "tensorrt_libs",
                LibraryFlavor::Lean => "tensorrt_lean_libs",
                LibraryFlavor::Dispatch => "tensorrt_dispatch_libs",
            })
            .collect(),
        Library::Cudnn => vec!["nvidia/cudnn/lib"],
        Library::Cublas => vec!["nvidia/cu13/lib", "nvidia/cublas/lib"],
    }
}

/// Where Python environments are, read without running Python.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PythonEnv {
    /// Environment prefixes searched first: `$VIRTUAL_ENV`, `$CONDA_PREFIX`
    /// (each `<prefix>/lib/python3*/site-packages`).
    pub prefixes: Vec<PathBuf>,
    /// `$HOME` (`~/.local/lib/python3*/site-packages`).
    pub home: Option<PathBuf>,
    /// `$PYENV_ROOT` (default `~/.pyenv`; `versions/*/lib/python3*/site-packages`).
    pub pyenv_root: Option<PathBuf>,
}

impl PythonEnv {
    /// From this process's environment.
    pub fn from_env() -> Self {
        let var = |n: &str| {
            std::env::var_os(n)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            prefixes: ["VIRTUAL_ENV", "CONDA_PREFIX"]
                .iter()
                .filter_map(|n| var(n))
                .collect(),
            home: var("HOME"),
            pyenv_root: var("PYENV_ROOT"),
        }
    }

    /// Every `site-packages` / `dist-packages` directory that exists under
    /// `root`, environments first, newest Python first within one pattern.
    pub fn site_packages(&self, root: &Path) -> Vec<PathBuf> {
        let mut patterns: Vec<PathBuf> = Vec::new();
        for p in &self.prefixes {
            patterns.push(p.join("lib/python3*/site-packages"));
        }
        if let Some(h) = &self.home {
            patterns.push(h.join(".local/lib/python3*/site-packages"));
        }
        let pyenv = self
            .pyenv_root
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".pyenv")));
        if let Some(p) = pyenv {
            patterns.push(p.join("versions/*/lib/python3*/site-packages"));
        }
        for p in [
            "/opt/conda/lib/python3*/site-packages",
            "/usr/local/lib/python3*/dist-packages",
            "/usr/local/lib/python3*/site-packages",
            "/usr/lib/python3/dist-packages",
            "/usr/lib/python3*/site-packages",
            "/usr/lib64/python3*/site-packages",
        ] {
            patterns.push(PathBuf::from(p));
        }
        let mut out = Vec::new();
        for p in patterns {
            for d in glob(&under(root, &p)) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
        out
    }
}

/// What a search may look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchEnv {
    /// The file-system root the directories are read under (`/`, or a fake
    /// tree in tests).
    pub root: PathBuf,
    /// The CPU architecture whose directories are searched.
    pub arch: CpuArch,
    /// Ask the dynamic loader by file name (only meaningful on the real
    /// root).
    pub use_loader: bool,
    /// Read the libraries' environment variables ([`Library::env_var`]).
    pub read_env_overrides: bool,
    /// Python environments for the pip folders.
    pub python: PythonEnv,
    /// `TARGET_USERSPACE_LIB_DIR_PATH` of `/etc/nv_tegra_release` (absolute,
    /// not joined with `root`): searched for `libcuda` before the other
    /// directories.
    pub l4t_userspace_dir: Option<PathBuf>,
    /// TensorRT flavors to look for, preferred first (default: full, lean,
    /// dispatch).
    pub tensorrt_flavors: Vec<LibraryFlavor>,
}

impl SearchEnv {
    /// This machine: root `/`, this binary's architecture, the loader, the
    /// environment variables, the Python environments, and the L4T
    /// user-space directory of `/etc/nv_tegra_release` when there is one.
    pub fn system() -> Self {
        let root = PathBuf::from("/");
        let l4t = l4t_userspace_dir(&root);
        Self {
            root,
            arch: CpuArch::host(),
            use_loader: true,
            read_env_overrides: true,
            python: PythonEnv::from_env(),
            l4t_userspace_dir: l4t,
            tensorrt_flavors: LibraryFlavor::ALL.to_vec(),
        }
    }

    /// A fake tree at `root` for architecture `arch`: no loader, no
    /// environment, the tree's own `etc/nv_tegra_release`.
    pub fn under(root: impl Into<PathBuf>, arch: CpuArch) -> Self {
        let root = root.into();
        let l4t = l4t_userspace_dir(&root);
        Self {
            root,
            arch,
            use_loader: false,
            read_env_overrides: false,
            python: PythonEnv::default(),
            l4t_userspace_dir: l4t,
            tensorrt_flavors: LibraryFlavor::ALL.to_vec(),
        }
    }
}

fn l4t_userspace_dir(root: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(under(root, Path::new("/etc/nv_tegra_release"))).ok()?;
    crate::probe::l4t::parse_nv_tegra_release(&text)
        .ok()?
        .userspace_lib_dir
        .map(PathBuf::from)
}

/// Why a place is in the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum PlaceKind {
    /// A path the caller gave.
    Explicit,
    /// The library's environment variable.
    Env,
    /// The dynamic loader's own search, by file name.
    Loader,
    /// The user-space driver directory of `/etc/nv_tegra_release` (serialised `l4t`, as
    /// [`PlaceKind::as_str`]).
    #[cfg_attr(feature = "serde", serde(rename = "l4t"))]
    L4tUserspace,
    /// A directory of the platform's packages.
    System,
    /// A pip folder under a Python `site-packages`.
    Python,
}

impl PlaceKind {
    /// `explicit`, `env`, `loader`, `l4t`, `system`, `python`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PlaceKind::Explicit => "explicit",
            PlaceKind::Env => "env",
            PlaceKind::Loader => "loader",
            PlaceKind::L4tUserspace => "l4t",
            PlaceKind::System => "system",
            PlaceKind::Python => "python",
        }
    }
}

/// Where a place points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// The dynamic loader, asked by file name.
    Loader,
    /// A directory: each file name is looked for in it.
    Dir(PathBuf),
    /// One file.
    File(PathBuf),
}

/// One place in a search list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Why it is in the list.
    pub kind: PlaceKind,
    /// What it points to.
    pub location: Location,
    /// The file names looked for there (a [`Location::File`] is opened as
    /// is).
    pub files: Vec<&'static str>,
}

impl Place {
    /// The directory or file, or `dynamic loader` (for reports).
    pub fn describe(&self) -> String {
        match &self.location {
            Location::Loader => "dynamic loader (LD_LIBRARY_PATH, ld.so.cache)".to_string(),
            Location::Dir(d) | Location::File(d) => d.display().to_string(),
        }
    }
}

/// The ordered places to look for one library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchList {
    /// Which library.
    pub library: Library,
    /// The places, in order, each once.
    pub places: Vec<Place>,
    /// The Python `site-packages` directories looked into for pip's folders
    /// (only the pip folders that exist in them are places).
    pub site_packages: Vec<PathBuf>,
}

/// The places to look for `library` ([module order](self)). `explicit`
/// (a file or a folder) replaces the whole list, as does the library's
/// environment variable when `env.read_env_overrides`.
pub fn search_list(library: Library, env: &SearchEnv, explicit: Option<&Path>) -> SearchList {
    let files = library.file_names(&env.tensorrt_flavors);
    let single = |kind: PlaceKind, path: &Path| {
        let location = if path.is_dir() {
            Location::Dir(path.to_path_buf())
        } else {
            Location::File(path.to_path_buf())
        };
        SearchList {
            library,
            places: vec![Place {
                kind,
                location,
                files: files.clone(),
            }],
            site_packages: Vec::new(),
        }
    };
    if let Some(p) = explicit {
        return single(PlaceKind::Explicit, p);
    }
    if env.read_env_overrides
        && let Some(v) = std::env::var_os(library.env_var()).filter(|v| !v.is_empty())
    {
        return single(PlaceKind::Env, Path::new(&v));
    }

    let mut places = Vec::new();
    if env.use_loader {
        places.push(Place {
            kind: PlaceKind::Loader,
            location: Location::Loader,
            files: files.clone(),
        });
    }
    let mut dirs: Vec<(PlaceKind, PathBuf, Vec<&'static str>)> = Vec::new();
    if library == Library::CudaDriver
        && let Some(d) = &env.l4t_userspace_dir
    {
        dirs.push((PlaceKind::L4tUserspace, under(&env.root, d), files.clone()));
    }
    for d in system_dirs(library, env.arch) {
        dirs.push((
            PlaceKind::System,
            under(&env.root, Path::new(d)),
            files.clone(),
        ));
    }
    let sub = python_subdirs(library, &env.tensorrt_flavors);
    let site_packages = if sub.is_empty() {
        Vec::new()
    } else {
        env.python.site_packages(&env.root)
    };
    for sp in &site_packages {
        {
            for s in &sub {
                // Only pip folders that are there: a site-packages without the
                // wheel holds nothing to try (the site-packages list says
                // where pip was looked for).
                if !sp.join(s).is_dir() {
                    continue;
                }
                // A pip folder holds only its own flavor.
                let only: Vec<&'static str> = match library {
                    Library::TensorRt => files
                        .iter()
                        .copied()
                        .filter(|f| tensorrt_flavor_of(Path::new(f)) == python_flavor(s))
                        .collect(),
                    _ => files.clone(),
                };
                dirs.push((PlaceKind::Python, sp.join(s), only));
            }
        }
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    for (kind, dir, files) in dirs {
        let canonical = std::fs::canonicalize(&dir).ok();
        if seen.contains(&dir) || canonical.as_ref().is_some_and(|c| seen.contains(c)) {
            continue;
        }
        seen.push(dir.clone());
        if let Some(c) = canonical {
            seen.push(c);
        }
        places.push(Place {
            kind,
            location: Location::Dir(dir),
            files,
        });
    }
    SearchList {
        library,
        places,
        site_packages,
    }
}

fn python_flavor(subdir: &str) -> Option<LibraryFlavor> {
    match subdir {
        "tensorrt_libs" => Some(LibraryFlavor::Full),
        "tensorrt_lean_libs" => Some(LibraryFlavor::Lean),
        "tensorrt_dispatch_libs" => Some(LibraryFlavor::Dispatch),
        _ => None,
    }
}

/// What happened at one place.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "outcome", rename_all = "snake_case"))]
pub enum Outcome {
    /// None of the file names is there.
    NotFound,
    /// The loader refused the file (its message, without the path it
    /// repeats).
    Failed {
        /// The file.
        file: String,
        /// The loader's reason.
        reason: String,
    },
    /// The file loaded but is not usable (a missing entry point, an
    /// unsupported version).
    Rejected {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// This file is the one in use.
    Loaded {
        /// The file.
        file: String,
    },
}

/// One place tried, and what happened there.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Tried {
    /// Why the place is in the list.
    pub kind: PlaceKind,
    /// The directory, the file, or the dynamic loader.
    pub place: String,
    /// What happened.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub outcome: Outcome,
}

impl fmt::Display for Tried {
    /// `[system] /usr/lib64: not found`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}: ", self.kind.as_str(), self.place)?;
        match &self.outcome {
            Outcome::NotFound => f.write_str("not found"),
            Outcome::Failed { file, reason } => write!(f, "{file}: {reason}"),
            Outcome::Rejected { file, reason } => write!(f, "{file}: loaded, not usable: {reason}"),
            Outcome::Loaded { file } => write!(f, "{file}: loaded"),
        }
    }
}

/// What a search did: how many places the list had, and each place tried.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SearchReport {
    /// Which library.
    pub library: Library,
    /// The file names looked for.
    pub files: Vec<&'static str>,
    /// How many places the list had.
    pub places: usize,
    /// The Python `site-packages` directories looked into for pip's folders.
    pub site_packages: Vec<String>,
    /// Each place tried, in order (places after the one that loaded are not
    /// tried).
    pub tried: Vec<Tried>,
}

impl SearchReport {
    /// `searched 6 places and 10 Python site-packages`.
    pub fn searched(&self) -> String {
        let mut s = format!(
            "searched {} place{}",
            self.places,
            if self.places == 1 { "" } else { "s" }
        );
        if !self.site_packages.is_empty() {
            s.push_str(&format!(
                " and {} Python site-packages",
                self.site_packages.len()
            ));
        }
        s
    }

    /// One line: `cuDNN: libcudnn.so.9 not found (searched 9 places)`.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} not found ({})",
            self.library,
            self.files.join(", "),
            self.searched()
        )
    }
}

/// The library that was loaded, and what the caller made of it.
#[derive(Debug)]
pub struct Found<T> {
    /// The file (or the file name the dynamic loader resolved).
    pub path: PathBuf,
    /// What the accept function returned.
    pub value: T,
}

/// The outcome of [`find`].
#[derive(Debug)]
pub struct Search<T> {
    /// The first library that loaded and was accepted.
    pub found: Option<Found<T>>,
    /// Every place tried.
    pub report: SearchReport,
}

/// Opens the first usable library of `list`: at each place, each file name
/// that is there (every name, through the loader) is `dlopen`ed and handed to
/// `accept`, which keeps it (`Ok`) or says why not (`Err`). Places after the
/// first accepted library are not tried.
///
/// Loading a library runs its initialisers: only lists of NVIDIA's libraries
/// are meant here, whose initialisers set up their own state only.
pub fn find<T>(
    list: &SearchList,
    mut accept: impl FnMut(libloading::Library, &Path) -> Result<T, String>,
) -> Search<T> {
    let mut tried = Vec::new();
    let mut found = None;
    'places: for place in &list.places {
        let shown = place.describe();
        let candidates: Vec<PathBuf> = match &place.location {
            Location::Loader => place.files.iter().map(PathBuf::from).collect(),
            Location::Dir(d) => place
                .files
                .iter()
                .map(|f| d.join(f))
                .filter(|p| p.exists())
                .collect(),
            Location::File(f) => {
                if f.exists() {
                    vec![f.clone()]
                } else {
                    Vec::new()
                }
            }
        };
        let before = tried.len();
        for path in candidates {
            let file = path.display().to_string();
            // SAFETY: loading runs the library's ELF initialisers. The lists
            // built here name only NVIDIA's driver, TensorRT, cuDNN and cuBLAS
            // libraries, whose initialisers set up their own state and are
            // designed to be loaded with dlopen (the CUDA runtime and the
            // frameworks load them this way). A file that is not a loadable
            // object for this process is refused by the loader with an error.
            match unsafe { libloading::Library::new(&path) } {
                Err(e) => {
                    let (reason, names_file) = loader_reason(&file, &e);
                    // Through the loader, "no such file" for the name itself
                    // means "not anywhere the loader looks"; a missing
                    // dependency names the dependency instead.
                    if place.location == Location::Loader
                        && names_file
                        && reason.starts_with("cannot open shared object file")
                    {
                        continue;
                    }
                    tried.push(Tried {
                        kind: place.kind,
                        place: shown.clone(),
                        outcome: Outcome::Failed { file, reason },
                    });
                }
                Ok(lib) => match accept(lib, &path) {
                    Ok(value) => {
                        tried.push(Tried {
                            kind: place.kind,
                            place: shown.clone(),
                            outcome: Outcome::Loaded { file },
                        });
                        found = Some(Found { path, value });
                        break 'places;
                    }
                    Err(reason) => tried.push(Tried {
                        kind: place.kind,
                        place: shown.clone(),
                        outcome: Outcome::Rejected { file, reason },
                    }),
                },
            }
        }
        if tried.len() == before {
            tried.push(Tried {
                kind: place.kind,
                place: shown,
                outcome: Outcome::NotFound,
            });
        }
    }
    let files = list
        .places
        .first()
        .map(|p| p.files.clone())
        .unwrap_or_default();
    Search {
        found,
        report: SearchReport {
            library: list.library,
            files,
            places: list.places.len(),
            site_packages: list
                .site_packages
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            tried,
        },
    }
}

/// The loader's message without the path it starts with (`dlerror()` already
/// names the file: "`/x/libcuda.so.1: cannot open shared object file`"), and
/// whether it started with it.
fn loader_reason(file: &str, e: &libloading::Error) -> (String, bool) {
    let s = e.to_string();
    match s.strip_prefix(file).and_then(|r| r.strip_prefix(": ")) {
        Some(rest) => (rest.to_string(), true),
        None => (s, false),
    }
}

/// `absolute` (e.g. `/usr/lib64`) under `root`.
fn under(root: &Path, absolute: &Path) -> PathBuf {
    match absolute.strip_prefix("/") {
        Ok(rel) => root.join(rel),
        Err(_) => root.join(absolute),
    }
}

/// Expands `*` in path components (`lib/python3*/site-packages`): existing
/// directories only, each pattern's matches sorted newest first (version-wise
/// descending, so `python3.12` before `python3.9`).
fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut current = vec![PathBuf::new()];
    for comp in pattern.components() {
        let part = comp.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        if let Some(star) = part.find('*') {
            let (prefix, suffix) = (&part[..star], &part[star + 1..]);
            for base in &current {
                let Ok(entries) = std::fs::read_dir(base) else {
                    continue;
                };
                let mut names: Vec<String> = entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| {
                        n.len() >= prefix.len() + suffix.len()
                            && n.starts_with(prefix)
                            && n.ends_with(suffix)
                    })
                    .collect();
                names.sort_by_key(|n| std::cmp::Reverse(version_key(n)));
                next.extend(names.into_iter().map(|n| base.join(n)));
            }
        } else {
            next = current.iter().map(|b| b.join(comp.as_os_str())).collect();
        }
        current = next;
        if current.is_empty() {
            break;
        }
    }
    current.into_iter().filter(|p| p.is_dir()).collect()
}

/// Sort key that orders `python3.12` after `python3.9`: the digit runs as
/// numbers, then the text.
fn version_key(name: &str) -> (Vec<u64>, String) {
    let nums = name
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    (nums, name.to_string())
}

/// The CUDA driver: opens the first `libcuda.so.1` of `list` that exports
/// `cuInit` ([`crate::sources::CUDA_DRIVER_API`]) and keeps it loaded in the
/// returned [`Found`]. No driver call is made; the caller decides when to
/// call `cuInit`.
pub fn open_cuda_driver(list: &SearchList) -> Search<libloading::Library> {
    find(list, |lib, _| {
        // SAFETY: only the presence of the symbol is checked; nothing is
        // called.
        match unsafe { lib.get::<*const core::ffi::c_void>(b"cuInit\0") } {
            Ok(_) => Ok(lib),
            Err(e) => Err(format!("no cuInit export, so not the CUDA driver ({e})")),
        }
    })
}

/// A library found by [`identify`], and its version when it can be read
/// without a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LibraryInfo {
    /// Which library.
    pub library: Library,
    /// The file loaded, if any.
    pub path: Option<String>,
    /// `MAJOR.MINOR.PATCH` read from the library (cuDNN: `cudnnGetVersion`,
    /// [`crate::sources::CUDNN_VERSION`]; cuBLAS: `cublasGetProperty`,
    /// [`crate::sources::CUBLAS_GET_PROPERTY`]).
    pub version: Option<String>,
    /// The search.
    pub search: SearchReport,
}

/// Finds cuDNN or cuBLAS with `list` and reads its version; the library stays
/// loaded. For the CUDA driver and TensorRT use the probe and the runtime's
/// TensorRT layer, which read theirs with their own calls.
pub fn identify(list: &SearchList) -> LibraryInfo {
    let library = list.library;
    let search = find(list, |lib, _| {
        let version = match library {
            Library::Cudnn => cudnn_version(&lib)?,
            Library::Cublas => cublas_version(&lib)?,
            Library::CudaDriver | Library::TensorRt => None,
        };
        // Kept loaded for the life of the process: unloading NVIDIA's
        // libraries is not supported, and a later user will open it again.
        std::mem::forget(lib);
        Ok(version)
    });
    let (path, version) = match search.found {
        Some(f) => (Some(f.path.display().to_string()), f.value),
        None => (None, None),
    };
    LibraryInfo {
        library,
        path,
        version,
        search: search.report,
    }
}

fn cudnn_version(lib: &libloading::Library) -> Result<Option<String>, String> {
    type GetVersion = unsafe extern "C" fn() -> usize;
    // SAFETY: `cudnnGetVersion` is declared `size_t cudnnGetVersion(void)` in
    // cudnn_graph.h (cuDNN 9) / cudnn_ops_infer.h (8).
    let f = unsafe { lib.get::<GetVersion>(b"cudnnGetVersion\0") }
        .map(|s| *s)
        .map_err(|e| format!("no cudnnGetVersion export ({e})"))?;
    // SAFETY: no arguments; returns a constant of the library.
    let v = unsafe { f() };
    Ok(Some(decode_cudnn_version(v)))
}

/// `cudnnGetVersion()` as `MAJOR.MINOR.PATCH`: cuDNN 9 encodes
/// `MAJOR*10000 + MINOR*100 + PATCH`, cuDNN 8 `MAJOR*1000 + MINOR*100 + PATCH`
/// ([`crate::sources::CUDNN_VERSION`]).
pub fn decode_cudnn_version(v: usize) -> String {
    if v >= 90000 {
        format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v / 100) % 10, v % 100)
    }
}

fn cublas_version(lib: &libloading::Library) -> Result<Option<String>, String> {
    type GetProperty = unsafe extern "C" fn(i32, *mut i32) -> i32;
    // SAFETY: `cublasStatus_t cublasGetProperty(libraryPropertyType, int*)`
    // (cublas_api.h); both enums are 32-bit ints.
    let f = unsafe { lib.get::<GetProperty>(b"cublasGetProperty\0") }
        .map(|s| *s)
        .map_err(|e| format!("no cublasGetProperty export ({e})"))?;
    let mut parts = [0i32; 3];
    for (property, out) in parts.iter_mut().enumerate() {
        // SAFETY: `property` is MAJOR_VERSION (0), MINOR_VERSION (1) or
        // PATCH_LEVEL (2); `out` is a valid, writable int. No handle or GPU
        // is needed.
        let status = unsafe { f(property as i32, out) };
        if status != 0 {
            return Err(format!(
                "cublasGetProperty({property}) returned status {status}"
            ));
        }
    }
    Ok(Some(format!("{}.{}.{}", parts[0], parts[1], parts[2])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// `tether doctor --json` names libraries and places in lowercase words, the place
    /// kinds as the text report does ([`PlaceKind::as_str`]), never as Rust spells them.
    #[cfg(feature = "serde")]
    #[test]
    fn serialised_names_are_the_reports_words() {
        let names: Vec<String> = Library::ALL
            .iter()
            .map(|l| {
                serde_json::to_value(l)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(names, ["cuda-driver", "tensorrt", "cudnn", "cublas"]);
        for k in [
            PlaceKind::Explicit,
            PlaceKind::Env,
            PlaceKind::Loader,
            PlaceKind::L4tUserspace,
            PlaceKind::System,
            PlaceKind::Python,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }

    /// A scratch directory removed on drop.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new() -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let d = std::env::temp_dir().join(format!(
                "tether-libs-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Scratch(d)
        }
        fn mkdir(&self, rel: &str) -> PathBuf {
            let d = self.0.join(rel);
            std::fs::create_dir_all(&d).unwrap();
            d
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dirs(l: &SearchList) -> Vec<String> {
        l.places.iter().map(Place::describe).collect()
    }

    #[test]
    fn each_architecture_searches_only_what_it_can_hold() {
        for lib in Library::ALL {
            for d in system_dirs(lib, CpuArch::X86_64) {
                assert!(
                    !d.contains("aarch64") && !d.contains("tegra") && !d.contains("sbsa"),
                    "{lib}: {d}"
                );
                assert!(!d.contains("l4t"), "{lib}: {d}");
            }
            for d in system_dirs(lib, CpuArch::Aarch64) {
                assert!(!d.contains("x86_64") && !d.contains("wsl"), "{lib}: {d}");
            }
            for arch in [CpuArch::X86_64, CpuArch::Aarch64, CpuArch::Any] {
                let all = system_dirs(lib, arch);
                for (i, d) in all.iter().enumerate() {
                    assert!(!all[..i].contains(d), "{lib} {arch}: {d} twice");
                }
            }
        }
        let a = system_dirs(Library::CudaDriver, CpuArch::Aarch64);
        for jetson in [
            "/usr/lib/aarch64-linux-gnu/nvidia",
            "/opt/nvidia/l4t-gpu-libs/openrm",
            "/usr/lib/aarch64-linux-gnu/tegra",
        ] {
            assert!(a.contains(&jetson), "{jetson}");
        }
        assert!(
            system_dirs(Library::Cublas, CpuArch::Aarch64)
                .contains(&"/usr/local/cuda/targets/sbsa-linux/lib")
        );
    }

    #[test]
    fn pip_folders_are_searched_once_each() {
        let s = Scratch::new();
        let venv = s.mkdir("venv");
        s.mkdir("venv/lib/python3.12/site-packages/tensorrt_libs");
        s.mkdir("usr/local/lib/python3.9/dist-packages");
        s.mkdir("usr/local/lib/python3.12/dist-packages");
        s.mkdir("usr/lib/python3/dist-packages");
        s.mkdir("home/u/.local/lib/python3.11/site-packages");
        let mut env = SearchEnv::under(&s.0, CpuArch::X86_64);
        // Paths inside the fake tree, as the environment would name them.
        env.python.prefixes = vec![PathBuf::from("/venv")];
        env.python.home = Some(PathBuf::from("/home/u"));
        let _ = venv;
        let sp = env.python.site_packages(&env.root);
        let rel: Vec<String> = sp
            .iter()
            .map(|p| p.strip_prefix(&s.0).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "venv/lib/python3.12/site-packages",
                "home/u/.local/lib/python3.11/site-packages",
                "usr/local/lib/python3.12/dist-packages",
                "usr/local/lib/python3.9/dist-packages",
                "usr/lib/python3/dist-packages",
            ]
        );

        let l = search_list(Library::TensorRt, &env, None);
        let d = dirs(&l);
        let n = d.len();
        let mut u = d.clone();
        u.sort();
        u.dedup();
        assert_eq!(u.len(), n, "{d:#?}");
        // Every site-packages has the three TensorRT folders, each looked
        // for with its own flavor's names only.
        for place in &l.places {
            if place.kind != PlaceKind::Python {
                continue;
            }
            let Location::Dir(dir) = &place.location else {
                panic!()
            };
            let want = match dir.file_name().unwrap().to_str().unwrap() {
                "tensorrt_libs" => "libnvinfer.so.",
                "tensorrt_lean_libs" => "libnvinfer_lean.so.",
                "tensorrt_dispatch_libs" => "libnvinfer_dispatch.so.",
                other => panic!("{other}"),
            };
            assert!(place.files.iter().all(|f| f.starts_with(want)), "{place:?}");
        }
        // Only the pip folder that is there is a place; every site-packages
        // is reported as looked into.
        let python: Vec<String> = l
            .places
            .iter()
            .filter(|p| p.kind == PlaceKind::Python)
            .map(Place::describe)
            .collect();
        let venv_trt = s.0.join("venv/lib/python3.12/site-packages/tensorrt_libs");
        assert_eq!(python, [venv_trt.display().to_string()]);
        assert_eq!(l.site_packages, sp);
        // No loader and no environment under a fake root.
        assert!(l.places.iter().all(|p| p.kind != PlaceKind::Loader));

        s.mkdir("venv/lib/python3.12/site-packages/nvidia/cudnn/lib");
        s.mkdir("usr/local/lib/python3.9/dist-packages/nvidia/cu13/lib");
        s.mkdir("usr/lib/python3/dist-packages/nvidia/cublas/lib");
        let cudnn = dirs(&search_list(Library::Cudnn, &env, None));
        assert!(
            cudnn
                .iter()
                .any(|d| d.ends_with("site-packages/nvidia/cudnn/lib"))
        );
        let cublas = dirs(&search_list(Library::Cublas, &env, None));
        assert!(
            cublas
                .iter()
                .any(|d| d.ends_with("python3.9/dist-packages/nvidia/cu13/lib"))
        );
        assert!(
            cublas
                .iter()
                .any(|d| d.ends_with("python3/dist-packages/nvidia/cublas/lib"))
        );
        // The driver ships in no wheel.
        let cuda = search_list(Library::CudaDriver, &env, None);
        assert!(cuda.places.iter().all(|p| p.kind == PlaceKind::System));
    }

    #[test]
    fn a_linked_directory_is_searched_once() {
        let s = Scratch::new();
        let real = s.mkdir("usr/local/cuda/targets/x86_64-linux/lib");
        s.mkdir("usr/local/cuda");
        std::os::unix::fs::symlink(&real, s.0.join("usr/local/cuda/lib64")).unwrap();
        let env = SearchEnv::under(&s.0, CpuArch::X86_64);
        let d = dirs(&search_list(Library::Cublas, &env, None));
        assert!(d.iter().any(|p| p.ends_with("targets/x86_64-linux/lib")));
        assert!(!d.iter().any(|p| p.ends_with("cuda/lib64")), "{d:#?}");
    }

    #[test]
    fn an_explicit_path_is_the_only_place() {
        let s = Scratch::new();
        let dir = s.mkdir("opt/trt");
        let env = SearchEnv::under(&s.0, CpuArch::X86_64);
        let l = search_list(Library::TensorRt, &env, Some(&dir));
        assert_eq!(l.places.len(), 1);
        assert_eq!(l.places[0].kind, PlaceKind::Explicit);
        assert_eq!(l.places[0].location, Location::Dir(dir.clone()));
        assert_eq!(l.places[0].files.len(), 6);
        let file = dir.join("libnvinfer.so.10");
        let l = search_list(Library::TensorRt, &env, Some(&file));
        assert_eq!(l.places[0].location, Location::File(file));
    }

    #[test]
    fn l4t_directory_comes_first_for_the_driver_only() {
        let s = Scratch::new();
        s.mkdir("etc");
        std::fs::write(
            s.0.join("etc/nv_tegra_release"),
            "# R36 (release), REVISION: 4.3, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
        )
        .unwrap();
        let env = SearchEnv::under(&s.0, CpuArch::Aarch64);
        let l = search_list(Library::CudaDriver, &env, None);
        assert_eq!(l.places[0].kind, PlaceKind::L4tUserspace);
        assert_eq!(
            l.places
                .iter()
                .filter(|p| p.describe().ends_with("aarch64-linux-gnu/nvidia"))
                .count(),
            1
        );
        let t = search_list(Library::TensorRt, &env, None);
        assert!(t.places.iter().all(|p| p.kind != PlaceKind::L4tUserspace));
    }

    #[test]
    fn find_reports_each_place_once_without_repeating_the_path() {
        let s = Scratch::new();
        let bad = s.mkdir("usr/lib/x86_64-linux-gnu");
        std::fs::write(bad.join("libcudnn.so.9"), b"not an ELF file").unwrap();
        let env = SearchEnv::under(&s.0, CpuArch::X86_64);
        let list = search_list(Library::Cudnn, &env, None);
        let r = find(&list, |_, _| Ok(()));
        assert!(r.found.is_none());
        assert_eq!(r.report.places, list.places.len());
        assert_eq!(r.report.tried.len(), list.places.len());
        let Outcome::Failed { file, reason } = &r.report.tried[0].outcome else {
            panic!("{:?}", r.report.tried[0])
        };
        assert!(file.ends_with("libcudnn.so.9"));
        assert!(!reason.contains(file.as_str()), "{reason}");
        assert!(
            r.report.tried[1..]
                .iter()
                .all(|t| t.outcome == Outcome::NotFound)
        );
        assert_eq!(r.report.files, ["libcudnn.so.9"]);
        assert!(
            r.report
                .summary()
                .contains(&format!("searched {} places", list.places.len()))
        );
        let line = r.report.tried[0].to_string();
        assert_eq!(line.matches("libcudnn.so.9").count(), 1, "{line}");
    }

    #[test]
    fn a_name_the_loader_does_not_know_is_not_found() {
        let list = SearchList {
            library: Library::Cudnn,
            places: vec![Place {
                kind: PlaceKind::Loader,
                location: Location::Loader,
                files: vec!["libtether-no-such-library.so.7"],
            }],
            site_packages: Vec::new(),
        };
        let r = find(&list, |_, _| Ok(()));
        assert_eq!(r.report.tried.len(), 1);
        assert_eq!(r.report.tried[0].outcome, Outcome::NotFound);
        assert_eq!(r.report.tried[0].kind, PlaceKind::Loader);
    }

    #[test]
    fn names_and_versions() {
        assert_eq!(
            tensorrt_flavor_of(Path::new("/x/libnvinfer_dispatch.so.11")),
            Some(LibraryFlavor::Dispatch)
        );
        assert_eq!(
            tensorrt_flavor_of(Path::new("libnvinfer_lean.so.10")),
            Some(LibraryFlavor::Lean)
        );
        assert_eq!(
            tensorrt_flavor_of(Path::new("libnvinfer.so.11")),
            Some(LibraryFlavor::Full)
        );
        assert_eq!(tensorrt_flavor_of(Path::new("libcudnn.so.9")), None);
        for f in LibraryFlavor::ALL {
            for n in tensorrt_file_names(f) {
                assert_eq!(tensorrt_flavor_of(Path::new(n)), Some(f));
            }
        }
        assert_eq!(decode_cudnn_version(91900), "9.19.0");
        assert_eq!(decode_cudnn_version(90300), "9.3.0");
        assert_eq!(decode_cudnn_version(8907), "8.9.7");
        let mut v = vec!["python3.9", "python3.12", "python3.10"];
        v.sort_by_key(|n| std::cmp::Reverse(version_key(n)));
        assert_eq!(v, ["python3.12", "python3.10", "python3.9"]);
    }
}
