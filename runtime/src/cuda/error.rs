//! Errors of the CUDA device layer.
//!
//! Two levels, as the style guide asks: [`DriverError`] is a small `Copy` value (the call that
//! failed and the `CUresult` it returned) and is the only error the per-frame hot path can
//! produce, so reporting a failure never reaches the allocator; [`CudaError`] is the load-time
//! error that names what was looked for and where.

use std::fmt;
use std::path::PathBuf;

use cudarc::driver::sys;
use tether_targets::libs::{Outcome, SearchReport};

/// A driver API call that returned something other than `CUDA_SUCCESS`.
///
/// `Copy` and allocation-free: safe to build and return on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverError {
    /// The driver entry point, e.g. `"cuGraphLaunch"`.
    pub call: &'static str,
    /// The driver's `CUresult`.
    pub code: sys::CUresult,
}

impl DriverError {
    /// The driver's symbolic name for [`Self::code`] (`CUDA_ERROR_INVALID_CONTEXT`, ...).
    pub fn name(&self) -> &'static str {
        error_name(self.code)
    }

    /// The numeric `CUresult` value.
    pub fn raw(&self) -> u32 {
        self.code as u32
    }

    /// `CUDA_ERROR_NOT_SUPPORTED` for `call`: an operation a layer above the driver does not
    /// offer (e.g. a stage without a device flavour). No allocation.
    pub const fn unsupported(call: &'static str) -> Self {
        DriverError {
            call,
            code: sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name(), self.raw())
    }
}

impl std::error::Error for DriverError {}

/// The symbolic name of a `CUresult`, read from the driver (`cuGetErrorName`). Never allocates.
pub fn error_name(code: sys::CUresult) -> &'static str {
    // SAFETY: only called after the driver library was loaded (a DriverError exists only
    // once a driver call was made). `cuGetErrorName` writes a pointer to a static,
    // NUL-terminated string owned by the driver, valid for the life of the process.
    unsafe {
        let mut ptr: *const std::ffi::c_char = std::ptr::null();
        let res = sys::cuGetErrorName(code, &mut ptr);
        if res != sys::CUresult::CUDA_SUCCESS || ptr.is_null() {
            return "CUDA_ERROR_UNKNOWN_CODE";
        }
        std::ffi::CStr::from_ptr(ptr)
            .to_str()
            .unwrap_or("CUDA_ERROR_UNKNOWN_CODE")
    }
}

/// Turn a `CUresult` into `Result<(), DriverError>`.
#[inline]
pub(crate) fn check(call: &'static str, res: sys::CUresult) -> Result<(), DriverError> {
    if res == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError { call, code: res })
    }
}

/// Load-time errors of the device layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// No usable `libcuda` (the NVIDIA driver's user-space library) was found. One line; the
    /// report has every place tried (logged at debug level, printed by `tether doctor -v`).
    #[error("{}", not_found(.search))]
    LibraryNotFound {
        /// Every place searched, in order, with the loader's reason.
        search: SearchReport,
    },
    /// `libcuda` loaded, but the library that the bindings resolved is not the one probed.
    #[error(
        "libcuda was loaded from {probed} but the driver bindings resolved another copy ({detail})"
    )]
    LibraryMismatch {
        /// The library this crate opened.
        probed: PathBuf,
        /// What differed.
        detail: String,
    },
    /// The driver library loaded but has no CUDA-capable device (`cuInit`/`cuDeviceGetCount`).
    #[error("no CUDA device: {0}")]
    NoDevice(DriverError),
    /// The requested ordinal is out of range.
    #[error("CUDA device {ordinal} requested, but the driver reports {count} device(s)")]
    BadOrdinal {
        /// Requested ordinal.
        ordinal: usize,
        /// Devices present.
        count: usize,
    },
    /// A driver call failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// None of the embedded kernel images loads on this device/driver.
    #[error(
        "no kernel image for {device} (sm_{sm}, driver CUDA {driver_major}.{driver_minor}); tried: {tried}"
    )]
    NoKernelImage {
        /// Device name.
        device: String,
        /// Compute capability as `87`, `90`, ...
        sm: u32,
        /// Driver CUDA major version.
        driver_major: u32,
        /// Driver CUDA minor version.
        driver_minor: u32,
        /// Each image tried and the driver's answer.
        tried: String,
    },
    /// A kernel named by the caller is missing from the loaded module.
    #[error("kernel `{name}` not found in module {image}: {source}")]
    MissingKernel {
        /// Kernel (function) name.
        name: String,
        /// Which image was loaded.
        image: String,
        /// The driver error.
        source: DriverError,
    },
    /// A region of a device arena's layout ([`ArenaPlan`](super::ArenaPlan)) with an
    /// alignment that is not a power of two, or an offset or end that overflows `usize`; the
    /// text names the region and the values.
    #[error("device arena: {0}")]
    Arena(String),
    /// An argument the device layer cannot take: a kernel name with a NUL byte, a region id
    /// from another spec, more slots than a launch grid holds, a launch whose kernels are not
    /// loaded; the text names the thing and the value.
    #[error("{0}")]
    Invalid(String),
    /// A stream capture failed; the reason says which stage was not capture-safe.
    #[error("CUDA graph capture failed: {0}")]
    Capture(String),
    /// A device feature the caller asked for is missing (e.g. mapped host memory).
    #[error("{0}")]
    Unsupported(String),
}

impl CudaError {
    /// One line: what failed (the list of every place searched is in `-vv` and
    /// `tether doctor -v`).
    pub fn summary(&self) -> String {
        self.to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

/// `the CUDA driver (libcuda.so.1) was not found: searched 9 places (...)`, plus the first
/// library that was there but could not be used.
fn not_found(search: &SearchReport) -> String {
    let mut s = format!(
        "the CUDA driver ({}) was not found: {}",
        search.files.join(", "),
        search.searched()
    );
    let broken = search.tried.iter().find_map(|t| match &t.outcome {
        Outcome::Failed { file, reason } | Outcome::Rejected { file, reason } => {
            Some((file, reason))
        }
        _ => None,
    });
    if let Some((file, reason)) = broken {
        s.push_str(&format!("; {file}: {reason}"));
    }
    s.push_str(" (no NVIDIA driver here? `tether doctor -v` lists every place)");
    s
}
