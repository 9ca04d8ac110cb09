//! The device flavour of [`PipelineSpec::append_rows`](crate::PipelineSpec::append_rows): one
//! kernel launch (`state.cu`) that reads the state's cursor from device memory.

use crate::cuda::{
    CudaError, DevicePtr, DeviceRegion, DriverError, Function, KernelImage, KernelModule,
    ModuleSource, Stream,
};

use crate::session::state::AppendStep;

/// The request state's kernels: PTX (ISA 8.0, compute_75) JIT-compiled by the driver for the
/// device, NUL-terminated as `cuModuleLoadData` wants PTX text. Source: `state.cu`; rebuilt
/// by `state-ptx.sh`.
static IMAGES: &[KernelImage] = &[KernelImage {
    name: "state.ptx",
    cuda_major: 12,
    sm: None,
    bytes: concat!(include_str!("state.ptx"), "\0").as_bytes(),
}];

/// Where the request state's kernels come from.
pub(super) fn module_source() -> ModuleSource {
    ModuleSource {
        images: IMAGES,
        source: Some(include_str!("state.cu")),
        allow_nvrtc: false,
    }
}

/// `struct AppendRowsParams` of `state.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AppendRowsParams {
    rows: DevicePtr,
    cursor: DevicePtr,
    src: DevicePtr,
    row_bytes: u64,
    capacity: i32,
    max_rows: i32,
}

/// Threads per block of the append kernel.
const BLOCK: u32 = 256;
/// Most blocks per slot (the kernel loops over the rest).
const MAX_BLOCKS: u64 = 1024;

/// One append step, resolved: kernel, parameters, grid.
pub(super) struct AppendLaunch {
    function: Function,
    params: AppendRowsParams,
    grid: (u32, u32, u32),
}

impl AppendLaunch {
    /// Resolve `step` over the session's device regions (`at` maps a spec region to its
    /// device memory). The copy unit is the widest of 16, 4 and 1 bytes dividing the row
    /// size and every address.
    ///
    /// # Errors
    /// A missing kernel; [`CudaError::Invalid`] for more slots than a grid holds.
    pub(super) fn new(
        module: &KernelModule,
        step: &AppendStep,
        at: impl Fn(crate::session::RegionId) -> DeviceRegion,
    ) -> Result<Self, CudaError> {
        let (rows, cursor, src) = (at(step.rows), at(step.cursor), at(step.src));
        let aligned = |unit: u64| {
            (step.row_bytes as u64).is_multiple_of(unit)
                && [rows.ptr, src.ptr].iter().all(|p| p.0.is_multiple_of(unit))
        };
        let (name, unit) = if aligned(16) {
            ("append_rows_u128", 16)
        } else if aligned(4) {
            ("append_rows_u32", 4)
        } else {
            ("append_rows_u8", 1)
        };
        let slots = u32::try_from(step.slots)
            .ok()
            .filter(|&s| s <= 65_535)
            .ok_or_else(|| {
                CudaError::Invalid(format!(
                    "an appendable state of {} slots: a grid holds at most 65535",
                    step.slots
                ))
            })?;
        let words = (step.max_rows as u64 * step.row_bytes as u64) / unit;
        let blocks = words.div_ceil(u64::from(BLOCK)).clamp(1, MAX_BLOCKS) as u32;
        Ok(AppendLaunch {
            function: module.function(name)?,
            params: AppendRowsParams {
                rows: rows.ptr,
                cursor: cursor.ptr,
                src: src.ptr,
                row_bytes: step.row_bytes as u64,
                // Both fit: capacities are at most i32::MAX (checked at declaration) and
                // max_rows at most the capacity.
                capacity: i32::try_from(step.capacity).unwrap_or(i32::MAX),
                max_rows: i32::try_from(step.max_rows).unwrap_or(i32::MAX),
            },
            grid: (blocks, slots, 1),
        })
    }

    /// Enqueue the kernel (capturable; no allocation).
    pub(super) fn enqueue(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: the parameters mirror `AppendRowsParams`; the three regions lie in the
        // session's arena or mapped staging, live as long as the session (and every graph
        // that captured this launch), and were sized by the spec: rows `slots * capacity *
        // row_bytes`, cursor `slots * 8`, src `slots * max_rows * row_bytes` (checked by
        // `PipelineSpec::append_rows`). The kernel writes only rows `[position, length)` of
        // a slot and only when `length <= capacity` and `length - position <= max_rows`.
        unsafe { stream.launch_params(self.function, self.grid, (BLOCK, 1, 1), 0, &self.params) }
    }
}
