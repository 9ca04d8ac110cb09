//! Device memory: one arena per session with offsets planned once, and pinned host staging.
//!
//! The arena is the only device allocation a session makes: [`ArenaPlan`] lays out every
//! region (I/O tensors, engine workspace, pre/post scratch) at load, [`DeviceArena`] takes
//! the whole plan in one `cuMemAlloc`, and the hot path only does pointer arithmetic. Host
//! staging is page-locked ([`PinnedBuffer`]) so copies are true DMA; on integrated GPUs it is
//! *mapped* (`CU_MEMHOSTALLOC_DEVICEMAP`), so kernels read the frame in place and the copy
//! disappears.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::device::Context;
use super::error::{CudaError, DriverError, check};

/// A device address (`CUdeviceptr`). `Copy`, no lifetime: validity is the owner's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// `self + bytes`.
    #[inline]
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// A typed span of device memory: an address and its length in bytes. `Copy`, no lifetime:
/// the arena (or plan) that owns the memory outlives every binding made with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceRegion {
    /// First byte.
    pub ptr: DevicePtr,
    /// Length in bytes.
    pub bytes: usize,
}

impl DeviceRegion {
    /// A region of `bytes` bytes at `ptr`.
    #[inline]
    pub const fn new(ptr: DevicePtr, bytes: usize) -> Self {
        DeviceRegion { ptr, bytes }
    }
    /// The empty region (null address, 0 bytes): the binding of an absent workspace.
    pub const EMPTY: DeviceRegion = DeviceRegion {
        ptr: DevicePtr(0),
        bytes: 0,
    };
}

/// Default region alignment in bytes: the driver's own `cuMemAlloc` alignment, enough for any
/// vector load and for TensorRT's I/O tensor requirement.
pub const DEFAULT_ALIGN: usize = 256;

/// Handle to a region of an [`ArenaPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionId(usize);

/// One region of the arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// What it holds, e.g. "input frame u8 [1080, 1920, 3]".
    pub name: String,
    /// Byte offset from the arena base; a multiple of the region's alignment.
    pub offset: usize,
    /// Requested size in bytes.
    pub bytes: usize,
    /// Alignment in bytes (power of two).
    pub align: usize,
}

/// The arena layout: every region's offset, computed once at load. Pure logic (no CUDA).
///
/// Regions are placed in the order they are added, each at the next offset aligned to its
/// alignment; nothing aliases (a session's buffers all live for the whole session, so reuse
/// by lifetime would buy nothing here). Sizes are checked: an overflow is an error, not a wrap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArenaPlan {
    regions: Vec<Region>,
    end: usize,
}

impl ArenaPlan {
    /// An empty plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a region of `bytes` bytes aligned to [`DEFAULT_ALIGN`].
    ///
    /// # Errors
    /// [`CudaError::Arena`] when the arena would exceed `usize`.
    pub fn add(&mut self, name: impl Into<String>, bytes: usize) -> Result<RegionId, CudaError> {
        self.add_aligned(name, bytes, DEFAULT_ALIGN)
    }

    /// Add a region with an explicit alignment (a power of two).
    ///
    /// # Errors
    /// [`CudaError::Arena`] on a bad alignment or when the arena would exceed `usize`.
    pub fn add_aligned(
        &mut self,
        name: impl Into<String>,
        bytes: usize,
        align: usize,
    ) -> Result<RegionId, CudaError> {
        let name = name.into();
        if !align.is_power_of_two() {
            return Err(CudaError::Arena(format!(
                "region `{name}`: alignment {align} is not a power of two"
            )));
        }
        let offset = self
            .end
            .checked_add(align - 1)
            .map(|v| v & !(align - 1))
            .ok_or_else(|| CudaError::Arena(format!("region `{name}`: offset overflows usize")))?;
        let end = offset.checked_add(bytes).ok_or_else(|| {
            CudaError::Arena(format!(
                "region `{name}`: {bytes} bytes at offset {offset} overflow usize"
            ))
        })?;
        self.regions.push(Region {
            name,
            offset,
            bytes,
            align,
        });
        self.end = end;
        Ok(RegionId(self.regions.len() - 1))
    }

    /// Total bytes to allocate (end of the last region rounded up to [`DEFAULT_ALIGN`]).
    pub fn total_bytes(&self) -> usize {
        self.end.div_ceil(DEFAULT_ALIGN) * DEFAULT_ALIGN
    }

    /// A region.
    pub fn region(&self, id: RegionId) -> &Region {
        &self.regions[id.0]
    }

    /// All regions, in placement order.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// A one-line-per-region summary for load logs.
    pub fn describe(&self) -> String {
        let mut s = format!("device arena {} bytes:", self.total_bytes());
        for r in &self.regions {
            s.push_str(&format!("\n  {:>10} +{:<10} {}", r.bytes, r.offset, r.name));
        }
        s
    }
}

/// One device allocation holding a whole [`ArenaPlan`].
pub struct DeviceArena {
    base: DevicePtr,
    plan: ArenaPlan,
    ctx: Context,
}

// SAFETY: a device address is usable from any thread with the context bound.
unsafe impl Send for DeviceArena {}
// SAFETY: immutable after construction.
unsafe impl Sync for DeviceArena {}

impl DeviceArena {
    /// Allocate the plan (`cuMemAlloc`, one call).
    ///
    /// # Errors
    /// A driver error (`CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn new(ctx: &Context, plan: ArenaPlan) -> Result<Self, DriverError> {
        ctx.bind()?;
        let mut base: sys::CUdeviceptr = 0;
        let bytes = plan.total_bytes().max(DEFAULT_ALIGN);
        // SAFETY: context current; freed in Drop.
        unsafe { check("cuMemAlloc", sys::cuMemAlloc_v2(&mut base, bytes)) }?;
        Ok(DeviceArena {
            base: DevicePtr(base),
            plan,
            ctx: ctx.clone(),
        })
    }

    /// Device address of a region. No allocation, no driver call.
    #[inline]
    pub fn ptr(&self, id: RegionId) -> DevicePtr {
        self.base.offset(self.plan.region(id).offset)
    }

    /// A region as an address and its requested length. No allocation, no driver call.
    #[inline]
    pub fn region(&self, id: RegionId) -> DeviceRegion {
        DeviceRegion::new(self.ptr(id), self.plan.region(id).bytes)
    }

    /// The base address.
    pub fn base(&self) -> DevicePtr {
        self.base
    }

    /// The plan.
    pub fn plan(&self) -> &ArenaPlan {
        &self.plan
    }
}

impl Drop for DeviceArena {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: allocated in new, freed once; callers synchronise before dropping a session.
        unsafe { sys::cuMemFree_v2(self.base.0) };
    }
}

/// Page-locked host memory (`cuMemHostAlloc`), optionally mapped into the device's address
/// space.
pub struct PinnedBuffer {
    ptr: *mut u8,
    bytes: usize,
    device: Option<DevicePtr>,
    ctx: Context,
}

// SAFETY: plain memory owned by this value; the device alias is an address.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocate `bytes` bytes of page-locked host memory. With `mapped`, the buffer is also
    /// mapped into the device address space ([`PinnedBuffer::device_ptr`]): kernels then read
    /// and write it in place, over the bus on a discrete GPU and straight from DRAM on an
    /// integrated one. The memory is zeroed.
    ///
    /// # Errors
    /// A driver error; [`CudaError::Unsupported`] when `mapped` is asked of a device that
    /// cannot map host memory.
    pub fn new(ctx: &Context, bytes: usize, mapped: bool) -> Result<Self, CudaError> {
        ctx.bind()?;
        if mapped && !ctx.properties().can_map_host_memory {
            return Err(CudaError::Unsupported(format!(
                "{} cannot map page-locked host memory",
                ctx.properties().name
            )));
        }
        let mut flags = sys::CU_MEMHOSTALLOC_PORTABLE;
        if mapped {
            flags |= sys::CU_MEMHOSTALLOC_DEVICEMAP;
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        let n = bytes.max(1);
        // SAFETY: context current; freed in Drop.
        unsafe { check("cuMemHostAlloc", sys::cuMemHostAlloc(&mut p, n, flags)) }?;
        // SAFETY: fresh allocation of n bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, n) };
        let device = if mapped {
            let mut d: sys::CUdeviceptr = 0;
            // SAFETY: p is a DEVICEMAP allocation of this context.
            unsafe {
                check(
                    "cuMemHostGetDevicePointer",
                    sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0),
                )
            }?;
            Some(DevicePtr(d))
        } else {
            None
        };
        Ok(PinnedBuffer {
            ptr: p as *mut u8,
            bytes,
            device,
            ctx: ctx.clone(),
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// True when zero-sized.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Host pointer.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Host pointer, mutable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// The bytes. Reading while the GPU writes them is a data race: synchronise first.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for bytes bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// The bytes, mutable. Writing while the GPU reads them is a data race: synchronise first.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusive borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }

    /// The device alias of a mapped buffer (`None` when not mapped).
    pub fn device_ptr(&self) -> Option<DevicePtr> {
        self.device
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: allocated in new, freed once.
        unsafe { sys::cuMemFreeHost(self.ptr as *mut c_void) };
    }
}
