//! Finding and loading `libcuda` at run time.
//!
//! Nothing CUDA is linked at build time: the driver API bindings (`cudarc`, feature
//! `dynamic-loading`) resolve every symbol from `libcuda` the first time it is called. cudarc
//! itself only asks the dynamic loader for a list of sonames and *panics* when none opens, and
//! it does not know the Jetson locations. So before any driver call this module opens the
//! driver with the one loader of [`tether_targets::libs`] ([`libs::open_cuda_driver`]) over
//! the one search list ([`libs::search_list`] for [`Library::CudaDriver`] on
//! [`SearchEnv::system`]): `$TETHER_LIBCUDA` alone when set, else the dynamic loader, the
//! L4T user-space directory of `/etc/nv_tegra_release`, and this architecture's driver
//! directories (JetPack 7.2's `/opt/nvidia/l4t-gpu-libs/openrm` on aarch64, WSL and the
//! container toolkit on x86_64). `tether doctor` searches exactly the same list.
//!
//! The first library that opens *and* exports `cuInit` wins; it is kept open for the life of
//! the process. Because glibc matches a `dlopen` by soname against libraries already loaded,
//! cudarc's own later `dlopen("libcuda.so.1")` then returns this same library even when it
//! lives in a directory the loader does not search; [`driver`] verifies that (by comparing
//! the address of `cuInit` seen through both handles) instead of assuming it.
//!
//! When nothing is found the error says so in one line with the number of places searched
//! ([`CudaError::LibraryNotFound`], which keeps the whole report); the list itself is logged
//! at debug level (`-vv`) and printed by `tether doctor -v`.

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::driver::sys;
use tether_targets::libs::{self, Library, SearchEnv};

use super::error::{CudaError, check};

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

/// The places [`driver`] searches, in order (for diagnostics and tests): the same list as
/// `tether doctor`'s.
pub fn search_list() -> libs::SearchList {
    libs::search_list(Library::CudaDriver, &SearchEnv::system(), None)
}

fn load() -> Result<Driver, CudaError> {
    let search = libs::open_cuda_driver(&search_list());
    log::debug!(
        "libcuda search ({} places):{}",
        search.report.places,
        search
            .report
            .tried
            .iter()
            .map(|t| format!("\n  {t}"))
            .collect::<String>()
    );
    let Some(found) = search.found else {
        return Err(CudaError::LibraryNotFound {
            search: search.report,
        });
    };
    let lib = found.value;
    // SAFETY: symbol lookup only; the type matches the driver API's cuInit, and
    // `open_cuda_driver` checked that the symbol exists.
    let ours = unsafe { lib.get::<unsafe extern "C" fn(u32) -> c_int>(b"cuInit\0") }
        .map(|sym| *sym as usize)
        .map_err(|e| CudaError::LibraryMismatch {
            probed: found.path.clone(),
            detail: e.to_string(),
        })?;
    finish(found.path, lib, ours)
}

fn finish(path: PathBuf, lib: libloading::Library, ours: usize) -> Result<Driver, CudaError> {
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
