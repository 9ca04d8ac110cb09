//! Streams and events; the host waits as the [`SyncPolicy`] (the run-time vocabulary,
//! `crate::vocab`) asks.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::device::Context;
use super::error::{DriverError, check};
use super::memory::DevicePtr;
use super::module::Function;
use crate::vocab::SyncPolicy;

/// The completion-event flags that implement `policy`'s wait: timing off, and the driver's
/// blocking wait for [`SyncPolicy::Blocking`].
fn event_flags(policy: SyncPolicy) -> u32 {
    let base = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    match policy {
        SyncPolicy::Blocking => base | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32,
        SyncPolicy::Spin | SyncPolicy::Yield => base,
    }
}

/// A CUDA event.
pub struct Event {
    raw: sys::CUevent,
    ctx: Context,
}

// SAFETY: event handles may be used from any thread with the context bound (every method
// binds first).
unsafe impl Send for Event {}

impl Event {
    /// Create an event. `timing` enables [`Event::elapsed_ms`]; `blocking` makes
    /// `synchronize` sleep instead of spin.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(ctx: &Context, timing: bool, blocking: bool) -> Result<Self, DriverError> {
        ctx.bind()?;
        let mut flags = 0u32;
        if !timing {
            flags |= sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        }
        if blocking {
            flags |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        Self::with_flags(ctx, flags)
    }

    fn with_flags(ctx: &Context, flags: u32) -> Result<Self, DriverError> {
        ctx.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: context current; writes one handle, destroyed in Drop.
        unsafe { check("cuEventCreate", sys::cuEventCreate(&mut raw, flags)) }?;
        Ok(Event {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// Record on `stream`.
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub fn record(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: both handles valid; same context.
        unsafe { check("cuEventRecord", sys::cuEventRecord(self.raw, stream.raw)) }
    }

    /// Record on a stream the caller owns, given as its raw handle (`CUstream`, or a
    /// `cudaStream_t` of the CUDA runtime: the same type). No allocation.
    ///
    /// # Safety
    /// `stream` is null (the context's legacy default stream) or a live stream of this
    /// event's context.
    ///
    /// # Errors
    /// A driver error (e.g. a stream of another context).
    #[inline]
    pub unsafe fn record_raw(&self, stream: *mut c_void) -> Result<(), DriverError> {
        // SAFETY: the caller's contract; the event is valid.
        unsafe {
            check(
                "cuEventRecord",
                sys::cuEventRecord(self.raw, stream as sys::CUstream),
            )
        }
    }

    /// Make the work enqueued on the raw `stream` (see [`Event::record_raw`]) after this
    /// call wait for the work before this event's last record (`cuStreamWaitEvent`). No
    /// allocation, no host wait.
    ///
    /// # Safety
    /// As [`Event::record_raw`].
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub unsafe fn wait_in_raw(&self, stream: *mut c_void) -> Result<(), DriverError> {
        // SAFETY: the caller's contract; the event is valid; flags 0.
        unsafe {
            check(
                "cuStreamWaitEvent",
                sys::cuStreamWaitEvent(stream as sys::CUstream, self.raw, 0),
            )
        }
    }

    /// Record on `stream` while it is being captured: an event record node of the graph
    /// (`CU_EVENT_RECORD_EXTERNAL`), so every replay records the event and elapsed times
    /// between such events time the graph's own steps. A plain [`Event::record`] during
    /// capture only orders work inside the graph and is never recorded at replay. Only valid
    /// during capture (the driver rejects the flag otherwise).
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub fn record_captured(&self, stream: &Stream) -> Result<(), DriverError> {
        // SAFETY: both handles valid; same context; the flag is defined since CUDA 11.1.
        unsafe {
            check(
                "cuEventRecordWithFlags",
                sys::cuEventRecordWithFlags(
                    self.raw,
                    stream.raw,
                    sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32,
                ),
            )
        }
    }

    /// True once the work before the last record has completed.
    ///
    /// # Errors
    /// A driver error other than "not ready".
    #[inline]
    pub fn query(&self) -> Result<bool, DriverError> {
        // SAFETY: valid handle.
        let res = unsafe { sys::cuEventQuery(self.raw) };
        match res {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(DriverError {
                call: "cuEventQuery",
                code: e,
            }),
        }
    }

    /// Block in the driver until the event completes.
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: valid handle.
        unsafe { check("cuEventSynchronize", sys::cuEventSynchronize(self.raw)) }
    }

    /// Milliseconds between two timing events (`cuEventElapsedTime`).
    ///
    /// # Errors
    /// A driver error (e.g. events created without timing).
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32, DriverError> {
        type F = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;
        // 13.x headers name it cuEventElapsedTime_v2 (added in 12.8); older drivers only
        // export the unversioned symbol, which 13.x drivers keep for compatibility.
        static F_PTR: std::sync::OnceLock<Option<F>> = std::sync::OnceLock::new();
        let f = *F_PTR.get_or_init(|| {
            let drv = super::loader::driver().ok()?;
            // SAFETY: both symbols have this signature.
            unsafe {
                drv.symbol::<F>(b"cuEventElapsedTime_v2\0")
                    .or_else(|| drv.symbol::<F>(b"cuEventElapsedTime\0"))
            }
        });
        let f = f.ok_or(DriverError {
            call: "cuEventElapsedTime",
            code: sys::CUresult::CUDA_ERROR_NOT_FOUND,
        })?;
        let mut ms = 0f32;
        // SAFETY: both valid timing events, completed by the caller.
        unsafe { check("cuEventElapsedTime", f(&mut ms, start.raw, end.raw)) }?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: created in with_flags, destroyed once.
        unsafe { sys::cuEventDestroy_v2(self.raw) };
    }
}

/// A non-blocking CUDA stream with a host synchronisation policy.
///
/// All enqueue methods are allocation-free and bind the context only where documented
/// ([`Stream::bind`] once per frame is enough on the hot path).
pub struct Stream {
    raw: sys::CUstream,
    done: Event,
    policy: SyncPolicy,
    ctx: Context,
}

// SAFETY: stream handles may be used from any thread with the context bound.
unsafe impl Send for Stream {}

impl Stream {
    /// Create a stream that does not synchronise with the legacy default stream
    /// (`CU_STREAM_NON_BLOCKING`), as graph capture requires.
    ///
    /// # Errors
    /// A driver error.
    pub fn new(ctx: &Context, policy: SyncPolicy) -> Result<Self, DriverError> {
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: context current; destroyed in Drop.
        unsafe {
            check(
                "cuStreamCreate",
                sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32),
            )
        }?;
        let done = Event::with_flags(ctx, event_flags(policy))?;
        Ok(Stream {
            raw,
            done,
            policy,
            ctx: ctx.clone(),
        })
    }

    /// The raw handle (for engines that enqueue through their own library).
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The synchronisation policy.
    pub fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// Make the stream's context current on this thread (see [`Context::bind`]).
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub fn bind(&self) -> Result<(), DriverError> {
        self.ctx.bind()
    }

    /// Make the work enqueued on this stream after this call wait for the work before
    /// `event`'s last record (`cuStreamWaitEvent`). During capture, an edge of the graph
    /// (a stream that waits on an event recorded in the capturing stream joins the capture).
    ///
    /// # Errors
    /// A driver error.
    #[inline]
    pub fn wait(&self, event: &Event) -> Result<(), DriverError> {
        // SAFETY: both handles valid; same context; flags 0 (not CU_EVENT_WAIT_EXTERNAL).
        unsafe {
            check(
                "cuStreamWaitEvent",
                sys::cuStreamWaitEvent(self.raw, event.raw, 0),
            )
        }
    }

    /// Wait until all work enqueued so far has completed, the way the policy says.
    ///
    /// # Errors
    /// A driver error, including asynchronous errors of earlier kernels.
    #[inline]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.done.record(self)?;
        self.wait_host(&self.done)
    }

    /// An event whose host wait ([`wait_host`](Self::wait_host)) follows this stream's
    /// policy: record it after some work, wait for that work alone while later work runs.
    ///
    /// # Errors
    /// A driver error.
    pub fn completion_event(&self) -> Result<Event, DriverError> {
        Event::with_flags(&self.ctx, event_flags(self.policy))
    }

    /// Wait on the host, the way the policy says, until the work recorded before `event`'s
    /// last record has completed (an event of [`completion_event`](Self::completion_event);
    /// one created otherwise may make [`SyncPolicy::Blocking`] spin).
    ///
    /// # Errors
    /// A driver error, including asynchronous errors of earlier kernels.
    #[inline]
    pub fn wait_host(&self, event: &Event) -> Result<(), DriverError> {
        match self.policy {
            SyncPolicy::Spin => {
                while !event.query()? {
                    std::hint::spin_loop();
                }
                Ok(())
            }
            SyncPolicy::Yield => {
                while !event.query()? {
                    std::thread::yield_now();
                }
                Ok(())
            }
            SyncPolicy::Blocking => event.synchronize(),
        }
    }

    /// Asynchronous host-to-device copy of `bytes` bytes.
    ///
    /// # Safety
    /// `src` must be valid for `bytes` bytes until the copy completes (pinned memory for a
    /// truly asynchronous copy), and `dst` a device allocation of at least `bytes` bytes.
    #[inline]
    pub unsafe fn memcpy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract.
        unsafe {
            check(
                "cuMemcpyHtoDAsync",
                sys::cuMemcpyHtoDAsync_v2(dst.0, src as *const c_void, bytes, self.raw),
            )
        }
    }

    /// Asynchronous device-to-host copy.
    ///
    /// # Safety
    /// `dst` valid for writes of `bytes` bytes until the copy completes; `src` a device
    /// allocation of at least `bytes` bytes.
    #[inline]
    pub unsafe fn memcpy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract.
        unsafe {
            check(
                "cuMemcpyDtoHAsync",
                sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src.0, bytes, self.raw),
            )
        }
    }

    /// Asynchronous device-to-device copy.
    ///
    /// # Safety
    /// Both ranges are device allocations of at least `bytes` bytes.
    #[inline]
    pub unsafe fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract.
        unsafe {
            check(
                "cuMemcpyDtoDAsync",
                sys::cuMemcpyDtoDAsync_v2(dst.0, src.0, bytes, self.raw),
            )
        }
    }

    /// Fill `count` 32-bit words at `dst` with `value` (capturable as a memset node).
    ///
    /// # Safety
    /// `dst` is a 4-byte aligned device allocation of at least `4 * count` bytes.
    #[inline]
    pub unsafe fn memset_u32(
        &self,
        dst: DevicePtr,
        value: u32,
        count: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract.
        unsafe {
            check(
                "cuMemsetD32Async",
                sys::cuMemsetD32Async(dst.0, value, count, self.raw),
            )
        }
    }

    /// Fill `bytes` bytes at `dst` with `value` (capturable as a memset node).
    ///
    /// # Safety
    /// `dst` is a device allocation of at least `bytes` bytes.
    #[inline]
    pub unsafe fn memset_u8(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract.
        unsafe {
            check(
                "cuMemsetD8Async",
                sys::cuMemsetD8Async(dst.0, value, bytes, self.raw),
            )
        }
    }

    /// Launch a kernel.
    ///
    /// # Safety
    /// `args` holds one pointer per kernel parameter, each pointing at a value of exactly the
    /// parameter's type, valid for the duration of this call; device pointers among them must
    /// stay valid until the kernel completes (and for every replay, when captured).
    #[inline]
    pub unsafe fn launch(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &mut [*mut c_void],
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract; f belongs to a module loaded in this context.
        unsafe {
            check(
                "cuLaunchKernel",
                sys::cuLaunchKernel(
                    f.raw(),
                    grid.0,
                    grid.1,
                    grid.2,
                    block.0,
                    block.1,
                    block.2,
                    shared_bytes,
                    self.raw,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            )
        }
    }

    /// Launch a kernel whose only parameter is one `#[repr(C)]` struct passed by value (the
    /// way every tether kernel is declared: `__global__ void k(Params p)`). No allocation.
    ///
    /// # Safety
    /// `P` must be `#[repr(C)]` with exactly the layout of the kernel's parameter struct, and
    /// every device address inside it must stay valid until the kernel completes (and for
    /// every replay of a graph that captured the launch).
    #[inline]
    pub unsafe fn launch_params<P: Copy>(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &P,
    ) -> Result<(), DriverError> {
        let mut arg = params as *const P as *mut c_void;
        // SAFETY: one argument, pointing at a value of the kernel's parameter type (the
        // caller's contract); the driver copies it into the launch before returning.
        unsafe { self.launch(f, grid, block, shared_bytes, std::slice::from_mut(&mut arg)) }
    }

    /// [`Stream::launch_params`] as a programmatic dependent launch (`cuLaunchKernelEx` with
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, compute capability 9.0 and
    /// later): the kernel may start before the previous kernel of the stream has completed,
    /// once every block of that kernel has executed `griddepcontrol.launch_dependents` (or
    /// exited). Captured into a graph as a programmatic edge. Errors as `cuLaunchKernelEx`'s
    /// (e.g. a driver older than CUDA 11.8).
    ///
    /// # Safety
    /// As [`Stream::launch_params`]; in addition the kernel must execute
    /// `griddepcontrol.wait` before it reads anything an earlier kernel writes and before it
    /// writes anything, and the device's image of it must hold that instruction (an image
    /// for SM 9.0 or later), or it races with the previous kernel.
    #[inline]
    pub unsafe fn launch_params_dependent<P: Copy>(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &P,
    ) -> Result<(), DriverError> {
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.launch_params_ex(f, grid, block, shared_bytes, params, true, 1) }
    }

    /// [`Stream::launch_params`] through `cuLaunchKernelEx` with optional attributes:
    /// `dependent` as [`Stream::launch_params_dependent`], and `cluster` > 1 groups the grid's
    /// blocks along x into thread block clusters of that many blocks
    /// (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`, compute capability 9.0 and later; grid.0 a
    /// multiple of `cluster`, at most 8 blocks per cluster portably). The blocks of a cluster
    /// run at the same time and may read and write each other's shared memory. Errors as
    /// `cuLaunchKernelEx`'s (e.g. `CUDA_ERROR_CLUSTER_*`, or a driver older than CUDA 12.0
    /// for clusters).
    ///
    /// # Safety
    /// As [`Stream::launch_params_dependent`] when `dependent`; with `cluster` > 1 the image
    /// must be one for SM 9.0 or later whose kernel expects that cluster size.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn launch_params_ex<P: Copy>(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &P,
        dependent: bool,
        cluster: u32,
    ) -> Result<(), DriverError> {
        // SAFETY: an all-zero attribute is a valid bit pattern (plain integers and a union of
        // plain data); the ids and the values set below select the members read.
        let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        if dependent {
            attrs[n] = programmatic_serialization();
            n += 1;
        }
        if cluster > 1 {
            attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = cluster;
            attrs[n].value.clusterDim.y = 1;
            attrs[n].value.clusterDim.z = 1;
            n += 1;
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.launch_attrs(f, grid, block, shared_bytes, params, &mut attrs[..n]) }
    }

    /// [`Stream::launch_params`] as a cooperative launch (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`):
    /// the driver runs every block of the grid at once or fails the launch
    /// (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`), so the blocks may wait for each other;
    /// `dependent` as [`Stream::launch_params_dependent`].
    ///
    /// # Safety
    /// As [`Stream::launch_params_dependent`] when `dependent`, else as
    /// [`Stream::launch_params`].
    #[inline]
    pub unsafe fn launch_params_cooperative<P: Copy>(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &P,
        dependent: bool,
    ) -> Result<(), DriverError> {
        // SAFETY: an all-zero attribute is a valid bit pattern (plain integers and a union of
        // plain data); the ids and the values set below select the members read.
        let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        attrs[0].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[0].value.cooperative = 1;
        let mut n = 1;
        if dependent {
            attrs[n] = programmatic_serialization();
            n += 1;
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.launch_attrs(f, grid, block, shared_bytes, params, &mut attrs[..n]) }
    }

    /// `cuLaunchKernelEx` with `attrs`.
    ///
    /// # Safety
    /// As the public launch functions that call it.
    unsafe fn launch_attrs<P: Copy>(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &P,
        attrs: &mut [sys::CUlaunchAttribute],
    ) -> Result<(), DriverError> {
        let mut arg = params as *const P as *mut c_void;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: shared_bytes,
            hStream: self.raw,
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        // SAFETY: the caller's contract; `config` and `attrs` outlive the call, one argument
        // pointing at a value of the kernel's parameter type, copied by the driver.
        unsafe {
            check(
                "cuLaunchKernelEx",
                sys::cuLaunchKernelEx(&config, f.raw(), &mut arg, std::ptr::null_mut()),
            )
        }
    }

    /// True while this stream is being captured.
    ///
    /// # Errors
    /// A driver error.
    pub fn is_capturing(&self) -> Result<bool, DriverError> {
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: writes one enum.
        unsafe {
            check(
                "cuStreamIsCapturing",
                sys::cuStreamIsCapturing(self.raw, &mut st),
            )
        }?;
        Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }
}

/// The launch attribute of a programmatic dependent launch
/// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, allowed).
fn programmatic_serialization() -> sys::CUlaunchAttribute {
    // SAFETY: an all-zero attribute is a valid bit pattern (plain integers and a union of
    // plain data); the id and the value set below select the member read.
    let mut a: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
    a
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: created in new; pending work completes before the driver frees it.
        unsafe { sys::cuStreamDestroy_v2(self.raw) };
    }
}
