//! Finding and loading `libcuda` at run time.
//!
//! Nothing CUDA is linked at build time: the driver API bindings (`cudarc`, feature
//! `dynamic-loading`) resolve every symbol from `libcuda` the first time it is called. cudarc
//! itself only asks the dynamic loader for a list of sonames and *panics* when none opens, and
//! it does not know the Jetson locations. So before any driver call this module probes, in
//! order:
//!
//! 1. `$TETHER_LIBCUDA` (an explicit file path), if set;
//! 2. the sonames `libcuda.so.1` and `libcuda.so`, searched by the dynamic loader
//!    (`LD_LIBRARY_PATH`, `ld.so.cache`, the default directories);
//! 3. the directories where drivers are installed but often not in the loader's search path:
//!    [`SEARCH_DIRS`] (desktop/server distributions, containers, WSL, Jetson L4T, JetPack 7.2's
//!    `/opt/nvidia/l4t-gpu-libs/openrm`).
//!
//! The first library that opens *and* exports `cuInit` wins; it is kept open for the life of
//! the process. Because glibc matches a `dlopen` by soname against libraries already loaded,
//! cudarc's own later `dlopen("libcuda.so.1")` then returns this same library even when it
//! lives in a directory the loader does not search; [`driver`] verifies that (by comparing
//! the address of `cuInit` seen through both handles) instead of assuming it.
//!
//! When nothing is found the error lists every path tried with the loader's reason
//! ([`CudaError::LibraryNotFound`]), so "libcuda not found" is never a guess.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::error::{CudaError, TriedPath, check};

/// Directories searched for `libcuda.so.1` / `libcuda.so` after the loader's own search.
pub const SEARCH_DIRS: &[&str] = &[
    // x86_64 / sbsa distributions and the NVIDIA container toolkit
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
    "/usr/lib/aarch64-linux-gnu",
    // Jetson (L4T / JetPack 5-6): the driver lives under nvidia/ or tegra/
    "/usr/lib/aarch64-linux-gnu/nvidia",
    "/usr/lib/aarch64-linux-gnu/tegra",
    "/usr/local/cuda/targets/aarch64-linux/lib",
    // JetPack 7.2 (Thor, OpenRM driver) moved libcuda here
    "/opt/nvidia/l4t-gpu-libs/openrm",
    // toolkit compat directory (forward-compatibility driver packages)
    "/usr/local/cuda/compat",
];

/// The loaded driver library.
#[derive(Debug)]
pub struct Driver {
    /// Where it was found (a full path, or the soname the dynamic loader resolved).
    pub path: PathBuf,
    /// `cuDriverGetVersion`: e.g. `13000` for CUDA 13.0.
    pub version: i32,
    // Keeps the library mapped for the life of the process.
    _lib: libloading::Library,
}

impl Driver {
    /// CUDA major version the driver supports (`13` for 13.0).
    pub fn major(&self) -> u32 {
        (self.version / 1000) as u32
    }
    /// CUDA minor version the driver supports (`0` for 13.0).
    pub fn minor(&self) -> u32 {
        ((self.version % 1000) / 10) as u32
    }
}

impl Driver {
    /// Resolve a driver entry point by name from this library (for entry points whose name
    /// changed between driver majors, e.g. `cuEventElapsedTime` / `_v2`).
    ///
    /// # Safety
    /// `T` must be the exact function pointer type of the symbol.
    pub unsafe fn symbol<T: Copy>(&self, name: &[u8]) -> Option<T> {
        // SAFETY: the caller guarantees the type; the library stays loaded.
        unsafe { self._lib.get::<T>(name).ok().map(|s| *s) }
    }
}

static DRIVER: OnceLock<Result<Driver, CudaError>> = OnceLock::new();

/// Load and initialise the driver once per process (`cuInit(0)`), or return why it cannot be.
///
/// # Errors
/// [`CudaError::LibraryNotFound`] (with every path tried), [`CudaError::LibraryMismatch`],
/// [`CudaError::NoDevice`] when `cuInit` fails (no GPU, driver/kernel module mismatch).
pub fn driver() -> Result<&'static Driver, CudaError> {
    DRIVER.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// True when a CUDA driver loads and initialises on this machine (no panic, no error).
pub fn is_available() -> bool {
    driver().is_ok()
}

/// The candidates [`driver`] tries, in order (for diagnostics and tests).
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("TETHER_LIBCUDA").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    out.push(PathBuf::from("libcuda.so.1"));
    out.push(PathBuf::from("libcuda.so"));
    for dir in SEARCH_DIRS {
        for name in ["libcuda.so.1", "libcuda.so"] {
            out.push(Path::new(dir).join(name));
        }
    }
    out
}

fn load() -> Result<Driver, CudaError> {
    let mut tried = Vec::new();
    for cand in candidates() {
        let is_path = cand.components().count() > 1;
        if is_path && !cand.exists() {
            tried.push(TriedPath {
                path: cand,
                reason: "no such file".into(),
            });
            continue;
        }
        // SAFETY: loading libcuda runs its initialisers, which have no preconditions on us;
        // the library is kept open (stored in the returned Driver) for the process lifetime.
        match unsafe { libloading::Library::new(&cand) } {
            Err(e) => tried.push(TriedPath {
                path: cand,
                reason: e.to_string(),
            }),
            Ok(lib) => {
                // SAFETY: symbol lookup only; the type matches the driver API's cuInit.
                let ours = unsafe { lib.get::<unsafe extern "C" fn(u32) -> c_int>(b"cuInit\0") };
                let ours = match ours {
                    Ok(sym) => *sym as usize,
                    Err(e) => {
                        tried.push(TriedPath {
                            path: cand,
                            reason: format!("opened, but {e}"),
                        });
                        continue;
                    }
                };
                return finish(cand, lib, ours, tried);
            }
        }
    }
    Err(CudaError::LibraryNotFound { tried })
}

fn finish(
    path: PathBuf,
    lib: libloading::Library,
    ours: usize,
    _tried: Vec<TriedPath>,
) -> Result<Driver, CudaError> {
    // cudarc resolves its own handle by soname; with ours loaded, glibc hands back the same
    // object. If the process already had a *different* libcuda loaded (or cudarc finds one
    // first), refuse rather than mix two drivers.
    // SAFETY: `is_culib_present` only dlopens candidate names; `culib` then returns (and
    // caches) the first that opens, which is present because ours is loaded.
    let theirs = unsafe {
        if !sys::is_culib_present() {
            return Err(CudaError::LibraryMismatch {
                probed: path,
                detail: "cudarc could not open any libcuda soname even though this one is loaded"
                    .into(),
            });
        }
        match sys::culib().get::<unsafe extern "C" fn(u32) -> c_int>(b"cuInit\0") {
            Ok(sym) => *sym as usize,
            Err(e) => {
                return Err(CudaError::LibraryMismatch {
                    probed: path,
                    detail: e.to_string(),
                });
            }
        }
    };
    if theirs != ours {
        return Err(CudaError::LibraryMismatch {
            probed: path,
            detail: format!("cuInit at {ours:#x} (ours) vs {theirs:#x} (bindings)"),
        });
    }
    // SAFETY: the library is loaded; cuInit(0) is the documented first call.
    unsafe { check("cuInit", sys::cuInit(0)) }.map_err(CudaError::NoDevice)?;
    let mut version = 0;
    // SAFETY: cuDriverGetVersion writes one int.
    unsafe { check("cuDriverGetVersion", sys::cuDriverGetVersion(&mut version)) }?;
    log::info!(
        "CUDA driver {} (CUDA {}.{}) loaded from {}",
        version,
        version / 1000,
        (version % 1000) / 10,
        path.display()
    );
    Ok(Driver {
        path,
        version,
        _lib: lib,
    })
}
