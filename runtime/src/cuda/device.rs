//! Devices, their properties, and the primary context.
//!
//! A [`Context`] retains the device's *primary* context (the one the CUDA runtime, PyTorch and
//! tract-cuda share) and makes it current on whichever thread uses it: retaining a primary
//! context does not make it current, and a driver call on a thread with no current context
//! fails with `CUDA_ERROR_INVALID_CONTEXT` (the classic pitfall when a context is created on
//! one thread and used from another). Every object of this layer holds its `Context` and calls
//! [`Context::bind`] before touching the driver, so it works from any thread; `bind` costs one
//! `cuCtxGetCurrent` (a thread-local read in the driver) when the context is already current.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::Arc;

use cudarc::driver::sys;

use super::error::{CudaError, DriverError, check};
use super::loader;
use crate::vocab::SyncPolicy;

/// The primary context's scheduling flag (`CU_CTX_SCHED_*`) for `policy`.
fn ctx_flags(policy: SyncPolicy) -> u32 {
    match policy {
        SyncPolicy::Spin => sys::CUctx_flags::CU_CTX_SCHED_SPIN as u32,
        SyncPolicy::Yield => sys::CUctx_flags::CU_CTX_SCHED_YIELD as u32,
        SyncPolicy::Blocking => sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32,
    }
}

/// What a device is and what it can do, read once at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H200", "Orin (nvgpu)".
    pub name: String,
    /// Compute capability (major, minor), e.g. (9, 0), (8, 7).
    pub compute_capability: (u32, u32),
    /// True for an integrated GPU sharing DRAM with the CPU (Jetson, DRIVE).
    pub integrated: bool,
    /// Device memory in bytes (`cuDeviceTotalMem`); on an iGPU, the shared DRAM.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// L2 cache in bytes.
    pub l2_bytes: u32,
    /// Shared memory one block may use when its kernel opts in, bytes
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: 227 KiB on an H100 / H200).
    pub shared_per_block_optin: u32,
    /// The device can map page-locked host memory into its address space.
    pub can_map_host_memory: bool,
    /// The device can access pageable host memory coherently (e.g. Grace Hopper, Thor).
    pub pageable_memory_access: bool,
    /// Driver version as `cuDriverGetVersion` reports it (13000 = CUDA 13.0).
    pub driver_version: i32,
    /// PCI bus id (0 on an iGPU).
    pub pci_bus: u32,
}

impl DeviceProperties {
    /// Compute capability as one number: 87, 90, 100, 110.
    pub fn sm(&self) -> u32 {
        self.compute_capability.0 * 10 + self.compute_capability.1
    }
    /// Driver CUDA major version (12 on JetPack 6, 13 on JetPack 7 and the H200 host).
    pub fn driver_major(&self) -> u32 {
        (self.driver_version / 1000) as u32
    }
    /// Driver CUDA minor version.
    pub fn driver_minor(&self) -> u32 {
        ((self.driver_version % 1000) / 10) as u32
    }
}

/// Number of CUDA devices, or why there are none.
///
/// # Errors
/// Whatever [`loader::driver`] returns; [`CudaError::NoDevice`] when the count call fails.
pub fn device_count() -> Result<usize, CudaError> {
    loader::driver()?;
    let mut n: c_int = 0;
    // SAFETY: the driver is loaded and initialised; writes one int.
    unsafe { check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut n)) }
        .map_err(CudaError::NoDevice)?;
    Ok(n.max(0) as usize)
}

fn attr(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32, DriverError> {
    let mut v: c_int = 0;
    // SAFETY: dev came from cuDeviceGet; writes one int.
    unsafe {
        check(
            "cuDeviceGetAttribute",
            sys::cuDeviceGetAttribute(&mut v, a, dev),
        )
    }?;
    Ok(v)
}

/// Read a device's properties.
///
/// # Errors
/// [`CudaError::BadOrdinal`], or a driver error.
pub fn properties(ordinal: usize) -> Result<DeviceProperties, CudaError> {
    let drv = loader::driver()?;
    let count = device_count()?;
    if ordinal >= count {
        return Err(CudaError::BadOrdinal { ordinal, count });
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: ordinal < count.
    unsafe { check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal as c_int)) }?;
    let mut name = [0 as c_char; 256];
    // SAFETY: buffer of 256 bytes, length passed.
    unsafe {
        check(
            "cuDeviceGetName",
            sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev),
        )
    }?;
    // SAFETY: the driver NUL-terminates within the buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut total = 0usize;
    // SAFETY: writes one usize.
    unsafe {
        check(
            "cuDeviceTotalMem",
            sys::cuDeviceTotalMem_v2(&mut total, dev),
        )
    }?;
    use sys::CUdevice_attribute as A;
    Ok(DeviceProperties {
        ordinal,
        name,
        compute_capability: (
            attr(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            attr(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        ),
        integrated: attr(dev, A::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0,
        total_memory: total,
        multiprocessors: attr(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        l2_bytes: attr(dev, A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32,
        shared_per_block_optin: attr(
            dev,
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as u32,
        can_map_host_memory: attr(dev, A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
        pageable_memory_access: attr(dev, A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)? != 0,
        driver_version: drv.version,
        pci_bus: attr(dev, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)? as u32,
    })
}

struct ContextInner {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    props: DeviceProperties,
}

// SAFETY: a CUcontext handle may be used from any thread once made current there (which
// `bind` does); the handle itself is an opaque pointer owned by the driver.
unsafe impl Send for ContextInner {}
// SAFETY: as above; the struct is immutable after construction.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: balanced with the cuDevicePrimaryCtxRetain in Context::new.
        let res = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
        if let Err(e) = check("cuDevicePrimaryCtxRelease", res) {
            log::warn!(
                "releasing the primary context of device {}: {e}",
                self.props.ordinal
            );
        }
    }
}

/// A retained primary context of one device. Cheap to clone (an `Arc`); `Send + Sync`.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.props.name)
            .finish()
    }
}

impl Context {
    /// Retain device `ordinal`'s primary context, set its scheduling policy, make it current on
    /// this thread.
    ///
    /// The scheduling flags (`CU_CTX_SCHED_SPIN` / `YIELD` / `BLOCKING_SYNC`, from `policy`)
    /// are per primary context, hence per process and device: the last setter wins, and
    /// a context that another library already activated keeps running with the new flags
    /// (`cuDevicePrimaryCtxSetFlags_v2` allows changing them while active). Host waits in this
    /// layer do not depend on them anyway: [`super::Stream::synchronize`] implements the
    /// policy itself with events.
    ///
    /// # Errors
    /// Driver not found, bad ordinal, or a failing driver call.
    pub fn new(ordinal: usize, policy: SyncPolicy) -> Result<Self, CudaError> {
        let props = properties(ordinal)?;
        let mut dev: sys::CUdevice = 0;
        // SAFETY: ordinal validated by properties().
        unsafe { check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal as c_int)) }?;
        let mut flags: c_uint = 0;
        let mut active: c_int = 0;
        // SAFETY: writes two ints.
        unsafe {
            check(
                "cuDevicePrimaryCtxGetState",
                sys::cuDevicePrimaryCtxGetState(dev, &mut flags, &mut active),
            )
        }?;
        let want = ctx_flags(policy);
        if flags & 0x7 != want {
            // SAFETY: valid device; flags are a CU_CTX_SCHED_* value.
            let res = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, want) };
            match check("cuDevicePrimaryCtxSetFlags", res) {
                Ok(()) => log::debug!(
                    "primary context of device {ordinal}: scheduling flags {flags:#x} -> {want:#x} (active: {})",
                    active != 0
                ),
                Err(e) => log::warn!("could not set scheduling policy {policy:?}: {e}"),
            }
        }
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle; released in ContextInner::drop.
        unsafe {
            check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            )
        }?;
        let this = Context {
            inner: Arc::new(ContextInner { dev, ctx, props }),
        };
        this.bind()?;
        log::info!(
            "CUDA device {}: {} (sm_{}, {}, {} MiB, {} SMs, driver CUDA {}.{}, sync {:?})",
            ordinal,
            this.inner.props.name,
            this.inner.props.sm(),
            if this.inner.props.integrated {
                "integrated"
            } else {
                "discrete"
            },
            this.inner.props.total_memory >> 20,
            this.inner.props.multiprocessors,
            this.inner.props.driver_major(),
            this.inner.props.driver_minor(),
            policy
        );
        Ok(this)
    }

    /// Make this context current on the calling thread if it is not already.
    ///
    /// Called by every object of this layer before it touches the driver; call it yourself
    /// before using raw driver calls from a new thread. No allocation.
    ///
    /// # Errors
    /// A failing `cuCtxGetCurrent` / `cuCtxSetCurrent`.
    #[inline]
    pub fn bind(&self) -> Result<(), DriverError> {
        let mut cur: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle.
        unsafe { check("cuCtxGetCurrent", sys::cuCtxGetCurrent(&mut cur)) }?;
        if cur != self.inner.ctx {
            // SAFETY: ctx is a retained primary context, valid until ContextInner drops.
            unsafe { check("cuCtxSetCurrent", sys::cuCtxSetCurrent(self.inner.ctx)) }?;
        }
        Ok(())
    }

    /// The device's properties.
    pub fn properties(&self) -> &DeviceProperties {
        &self.inner.props
    }

    /// The raw `CUcontext` (for engines that call the driver themselves).
    pub fn raw(&self) -> sys::CUcontext {
        self.inner.ctx
    }

    /// The raw `CUdevice`.
    pub fn raw_device(&self) -> sys::CUdevice {
        self.inner.dev
    }

    /// Wait for all work in the context (`cuCtxSynchronize`).
    ///
    /// # Errors
    /// A driver error (including a sticky error from an earlier kernel).
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        // SAFETY: context current.
        unsafe { check("cuCtxSynchronize", sys::cuCtxSynchronize()) }
    }

    /// Free and total device memory in bytes (`cuMemGetInfo`). No allocation.
    ///
    /// # Errors
    /// A driver error.
    pub fn mem_info(&self) -> Result<(usize, usize), DriverError> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: context current; writes two usize.
        unsafe { check("cuMemGetInfo", sys::cuMemGetInfo_v2(&mut free, &mut total)) }?;
        Ok((free, total))
    }
}
