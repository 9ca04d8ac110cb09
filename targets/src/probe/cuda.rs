//! The CUDA driver, loaded at run time: no CUDA SDK at build time, no
//! `nvidia-smi`, no NVML.
//!
//! `libcuda.so.1` is found by [`libs::open_cuda_driver`] over the one search
//! list of [`libs::search_list`] (the same list the runtime's CUDA layer
//! uses); every place tried is recorded in [`CudaProbe::search`].
//!
//! Only these driver entry points are called (Driver API reference,
//! [`sources::CUDA_DRIVER_API`](crate::sources::CUDA_DRIVER_API)):
//! `cuInit`, `cuDriverGetVersion`, `cuDeviceGetCount`, `cuDeviceGet`,
//! `cuDeviceGetName`, `cuDeviceGetAttribute` (attributes 75, 76, 18) and
//! `cuDeviceTotalMem_v2`.

use std::ffi::{CStr, c_char, c_int, c_uint};

use libloading::Library;

use crate::libs::{self, SearchList, SearchReport};
use crate::vocab::{CudaVersion, Sm};

/// `CUresult`.
type CuResult = c_int;
/// `CUdevice`.
type CuDevice = c_int;

/// `CU_DEVICE_ATTRIBUTE_INTEGRATED`: 1 when the GPU shares memory with the
/// host.
pub const ATTR_INTEGRATED: c_int = 18;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub const ATTR_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub const ATTR_COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// The driver library's file name (SONAME).
pub const LIBCUDA: &str = "libcuda.so.1";

type FnInit = unsafe extern "C" fn(c_uint) -> CuResult;
type FnDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CuResult;
type FnDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> CuResult;
type FnDeviceGet = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
type FnDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
type FnDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult;
type FnDeviceTotalMem = unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult;

/// A failed driver call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[error("{call} returned {name} ({code}): {meaning}")]
pub struct CudaCallError {
    /// The entry point (`cuInit`).
    pub call: &'static str,
    /// The `CUresult`.
    pub code: i32,
    /// Its `cuda.h` name (`CUDA_ERROR_NO_DEVICE`), or `CUDA_ERROR_<code>`.
    pub name: &'static str,
    /// What it usually means here.
    pub meaning: &'static str,
}

impl CudaCallError {
    fn new(call: &'static str, code: i32) -> Self {
        let (name, meaning) = describe(code);
        Self {
            call,
            code,
            name,
            meaning,
        }
    }
}

/// `cuda.h` names of the `CUresult` codes a probe meets, and what they mean
/// on a deployment target.
pub fn describe(code: i32) -> (&'static str, &'static str) {
    match code {
        1 => ("CUDA_ERROR_INVALID_VALUE", "an argument was rejected"),
        2 => ("CUDA_ERROR_OUT_OF_MEMORY", "the driver ran out of memory"),
        3 => ("CUDA_ERROR_NOT_INITIALIZED", "cuInit has not succeeded"),
        34 => (
            "CUDA_ERROR_STUB_LIBRARY",
            "this libcuda is the toolkit's link stub (stubs/libcuda.so), not the driver",
        ),
        35 => (
            "CUDA_ERROR_INSUFFICIENT_DRIVER",
            "the kernel driver is older than this libcuda",
        ),
        100 => (
            "CUDA_ERROR_NO_DEVICE",
            "no CUDA-capable device is visible (no GPU, or no access to /dev/nvidia* or /dev/nvhost-*)",
        ),
        101 => ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
        304 => (
            "CUDA_ERROR_OPERATING_SYSTEM",
            "an OS call failed (device node permissions, container without GPU access)",
        ),
        801 => (
            "CUDA_ERROR_NOT_SUPPORTED",
            "operation not supported on this device",
        ),
        803 => (
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "libcuda and the kernel driver come from different releases",
        ),
        804 => (
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            "the forward-compatibility libcuda does not support this GPU",
        ),
        999 => ("CUDA_ERROR_UNKNOWN", "unknown driver error"),
        _ => ("CUDA_ERROR_OTHER", "see cuda.h CUresult"),
    }
}

/// One CUDA device.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GpuDevice {
    /// Device ordinal (`cuDeviceGet`).
    pub ordinal: i32,
    /// `cuDeviceGetName` (`Orin`, `NVIDIA H200`).
    pub name: String,
    /// Compute capability.
    pub sm: Sm,
    /// `CU_DEVICE_ATTRIBUTE_INTEGRATED`.
    pub integrated: bool,
    /// `cuDeviceTotalMem_v2`, bytes. On an integrated GPU this is the
    /// shared system DRAM the GPU may use.
    pub total_memory_bytes: u64,
}

/// What the CUDA driver said.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CudaProbe {
    /// Where `libcuda.so.1` was looked for, and what happened at each place.
    pub search: SearchReport,
    /// The library that was loaded.
    pub library: Option<String>,
    /// `cuDriverGetVersion`.
    pub driver_version: Option<CudaVersion>,
    /// Every device, by ordinal.
    pub devices: Vec<GpuDevice>,
    /// The first driver call that failed, or a missing entry point.
    pub error: Option<String>,
}

/// Loads the first usable `libcuda.so.1` of `list` and queries it.
pub(crate) fn probe_cuda(list: &SearchList) -> CudaProbe {
    let search = libs::open_cuda_driver(list);
    let mut out = CudaProbe {
        search: search.report,
        library: None,
        driver_version: None,
        devices: Vec::new(),
        error: None,
    };
    let Some(found) = search.found else {
        return out;
    };
    out.library = Some(found.path.display().to_string());
    if let Err(e) = query(&found.value, &mut out) {
        out.error = Some(e);
    }
    // The driver stays loaded for the life of the process: cuInit may have
    // started driver threads that live in this library, and the runtime will
    // open the same library again (dlopen reference counting makes that
    // free).
    std::mem::forget(found.value);
    out
}

/// Resolves `name` as a function of type `T`.
fn symbol<T: Copy>(lib: &Library, name: &'static [u8]) -> Result<T, String> {
    // SAFETY: `T` is one of the `Fn*` aliases above, each the exact C
    // signature `cuda.h` declares for `name` (all arguments are
    // pointers or 32-bit integers, the return is `CUresult`); the copied
    // function pointer is only called while `lib` is alive (the library is
    // never unloaded, see `probe_cuda`).
    unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|e| {
        format!(
            "{} not found in the driver: {e}",
            String::from_utf8_lossy(&name[..name.len() - 1])
        )
    })
}

fn check(call: &'static str, r: CuResult) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(CudaCallError::new(call, r).to_string())
    }
}

fn query(lib: &Library, out: &mut CudaProbe) -> Result<(), String> {
    let cu_init: FnInit = symbol(lib, b"cuInit\0")?;
    let cu_driver_get_version: FnDriverGetVersion = symbol(lib, b"cuDriverGetVersion\0")?;
    let cu_device_get_count: FnDeviceGetCount = symbol(lib, b"cuDeviceGetCount\0")?;
    let cu_device_get: FnDeviceGet = symbol(lib, b"cuDeviceGet\0")?;
    let cu_device_get_name: FnDeviceGetName = symbol(lib, b"cuDeviceGetName\0")?;
    let cu_device_get_attribute: FnDeviceGetAttribute = symbol(lib, b"cuDeviceGetAttribute\0")?;
    let cu_device_total_mem: FnDeviceTotalMem = symbol(lib, b"cuDeviceTotalMem_v2\0")?;

    // cuDriverGetVersion works before cuInit: report it even when cuInit
    // fails (a driver that is too old is exactly when it matters).
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid, writable c_int for the call.
    let r = unsafe { cu_driver_get_version(&mut version) };
    if r == 0 && version > 0 {
        out.driver_version = Some(CudaVersion(version as u32));
    }

    // SAFETY: cuInit takes a flags word that must be 0; no pointers.
    check("cuInit", unsafe { cu_init(0) })?;

    let mut count: c_int = 0;
    // SAFETY: `count` is a valid, writable c_int; cuInit has succeeded.
    check("cuDeviceGetCount", unsafe {
        cu_device_get_count(&mut count)
    })?;

    for ordinal in 0..count {
        let mut dev: CuDevice = 0;
        // SAFETY: `dev` is writable; `ordinal` < the count the driver
        // reported.
        check("cuDeviceGet", unsafe { cu_device_get(&mut dev, ordinal) })?;

        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer is 256 bytes and we pass 256 as its length; the
        // driver writes a NUL-terminated name of at most that length.
        check("cuDeviceGetName", unsafe {
            cu_device_get_name(name.as_mut_ptr(), name.len() as c_int, dev)
        })?;
        name[name.len() - 1] = 0;
        // SAFETY: `name` is NUL-terminated (the last byte was just set to
        // 0) and lives for this statement.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();

        let attr = |attribute: c_int, call: &'static str| -> Result<c_int, String> {
            let mut v: c_int = 0;
            // SAFETY: `v` is a writable c_int, `attribute` is a valid
            // CUdevice_attribute value, `dev` came from cuDeviceGet.
            check(call, unsafe {
                cu_device_get_attribute(&mut v, attribute, dev)
            })?;
            Ok(v)
        };
        let major = attr(
            ATTR_COMPUTE_CAPABILITY_MAJOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
        )?;
        let minor = attr(
            ATTR_COMPUTE_CAPABILITY_MINOR,
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
        )?;
        let integrated = attr(ATTR_INTEGRATED, "cuDeviceGetAttribute(INTEGRATED)")?;

        let mut bytes: usize = 0;
        // SAFETY: `bytes` is a writable size_t; `dev` came from cuDeviceGet.
        check("cuDeviceTotalMem_v2", unsafe {
            cu_device_total_mem(&mut bytes, dev)
        })?;

        out.devices.push(GpuDevice {
            ordinal,
            name,
            sm: Sm::new(
                u8::try_from(major).unwrap_or(u8::MAX),
                u8::try_from(minor).unwrap_or(u8::MAX),
            ),
            integrated: integrated != 0,
            total_memory_bytes: bytes as u64,
        });
    }
    Ok(())
}
