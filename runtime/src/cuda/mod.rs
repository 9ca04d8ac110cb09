//! The CUDA device layer: device selection and properties, the primary context (usable from
//! any thread), streams with a host synchronisation policy, events, the per-session device
//! arena and pinned/mapped host staging, kernel modules chosen by driver major and SM, CUDA
//! and CUDA graph capture.
//!
//! Built on `cudarc`'s raw driver bindings with dynamic loading: nothing from CUDA is needed
//! at build time, and on a machine without a driver every entry point returns
//! [`CudaError::LibraryNotFound`] with the report of every place searched (see [`loader`])
//! instead of failing to link or panicking. All driver entry points used here exist in CUDA 12.x drivers as well
//! as 13.x (JetPack 6 Orin runs 12.x), so one build serves both.
//!
//! Unsafe code stays in this module; each `unsafe` block states its invariant.
//!
//! Hot-path rule: [`Stream`], [`Event`], [`Graph`], [`DeviceArena::ptr`], and
//! [`Context::bind`] never allocate; their errors are the `Copy` [`DriverError`].

mod device;
mod error;
mod graph;
pub mod loader;
mod memory;
mod module;
mod stream;

/// The wait policy, defined with the rest of the run-time vocabulary ([`crate::vocab`]);
/// re-exported here where the device layer's users have always found it.
pub use crate::vocab::SyncPolicy;
pub use device::{Context, DeviceProperties, device_count, properties};
pub use error::{CudaError, DriverError, error_name};
pub use graph::Graph;
pub use loader::{Driver, driver, is_available};
pub use memory::{
    ArenaPlan, DEFAULT_ALIGN, DeviceArena, DevicePtr, DeviceRegion, PinnedBuffer, Region, RegionId,
};
pub use module::{Function, KernelImage, KernelModule, ModuleSource, image_order};
pub use stream::{Event, Stream};

/// Whether tests and tools should attempt GPU work: a driver loads and reports a device.
/// Prints nothing; use [`skip_reason`] to say why not.
pub fn gpu_present() -> bool {
    matches!(device_count(), Ok(n) if n > 0)
}

/// Why GPU work is not possible here (`None` when it is): the loader or device error.
pub fn skip_reason() -> Option<String> {
    match device_count() {
        Ok(0) => Some("the CUDA driver reports no device".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}
