//! The only module of the TensorRT layer with `unsafe` code: opening the
//! library, the C-ABI callbacks of tether's `ILogger` and `IErrorRecorder`
//! objects, and calls through TensorRT's `apiv` interface tables.
//!
//! Calling convention (Linux, GCC / Itanium C++ ABI, x86_64 and aarch64): a
//! virtual method `R V::m(A...)` is `unsafe extern "C" fn(this, A...) -> R`
//! read from `(*this).vtable[slot]`; a `Dims64` (72 bytes) result comes back
//! through a hidden result pointer, which is exactly what `extern "C"` does
//! for a 72-byte `#[repr(C)]` return; `bool` and `int32_t` enums map
//! directly. Slots come from [`AbiTable`], proved against the official
//! headers by `runtime/tests/trt_abi.rs`.
//!
//! Invariants the safe layer (`engine.rs`) keeps and these functions rely on:
//! a handle is only made from a non-null object that passed the `getPImpl`
//! self-check; a handle is destroyed exactly once (by `Drop`); an engine
//! handle is dropped before its runtime, a context handle before its engine;
//! the error recorder outlives the runtime it is attached to (and so every
//! object created from it); calls on one runtime's objects (other than
//! `enqueueV3` on a context, which needs `&mut`) are serialized by the safe
//! layer.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{CStr, c_char, c_void};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use super::abi::{
    self, API_LANGUAGE_CPP, AbiTable, Dims64, ErrorRecorderLayout, InterfaceInfo, LoggerLayout,
    PUBLIC_DELETING_DESTRUCTOR, PUBLIC_IMPL_OFFSET, Slot,
};
use super::diagnostics::{self, ErrorStore, RecordedError};
use tether_targets::{LibraryFlavor, TrtVersion};

/// Any address below this is not an object (TensorRT 11.4's lean runtime
/// was seen returning 0x228 from a failed `createInferRuntime_INTERNAL`).
const MIN_OBJECT_ADDRESS: usize = 4096;

type CreateRuntimeFn = unsafe extern "C" fn(logger: *mut c_void, version: i32) -> *mut c_void;
type VersionFn = unsafe extern "C" fn() -> i32;

/// A loaded TensorRT library. It is never unloaded (TensorRT keeps
/// process-wide state; `dlclose` of it is not supported), so every function
/// pointer resolved from it stays valid for the life of the process.
pub(super) struct Library {
    _lib: ManuallyDrop<libloading::Library>,
    create_runtime: CreateRuntimeFn,
    pub(super) path: PathBuf,
    pub(super) version: TrtVersion,
    pub(super) build: u32,
    pub(super) flavor: LibraryFlavor,
    pub(super) abi: &'static AbiTable,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("build", &self.build)
            .field("flavor", &self.flavor)
            .finish()
    }
}

impl Library {
    /// Takes a library [`tether_targets::libs::find`] opened from `path` (a
    /// file, or a bare soname the dynamic loader resolved), resolves the entry
    /// points, reads the version and tells the flavor. The error is the
    /// reason, for the search report.
    pub(super) fn from_opened(lib: libloading::Library, path: &Path) -> Result<Self, String> {
        let version_fn = |name: &[u8]| -> Option<VersionFn> {
            // SAFETY: the `getInferLib*Version` exports are
            // `extern "C" int32_t f() noexcept` in every TensorRT 10/11
            // header (NvInferRuntime.h / NvInferRuntimeBase.h).
            unsafe { lib.get::<VersionFn>(name) }.ok().map(|s| *s)
        };
        let encoded = version_fn(b"getInferLibVersion\0")
            .ok_or("not a TensorRT library: no getInferLibVersion export")?;
        let (major, minor, patch) = match (
            version_fn(b"getInferLibMajorVersion\0"),
            version_fn(b"getInferLibMinorVersion\0"),
            version_fn(b"getInferLibPatchVersion\0"),
        ) {
            // SAFETY: functions resolved above with their declared signature;
            // they take no arguments and only return a constant.
            (Some(a), Some(b), Some(c)) => unsafe { (a(), b(), c()) },
            _ => {
                // SAFETY: as above.
                let v = TrtVersion(unsafe { encoded() }.max(0) as u32);
                (v.major() as i32, v.minor() as i32, v.patch() as i32)
            }
        };
        // SAFETY: as above.
        let build = version_fn(b"getInferLibBuildVersion\0").map_or(0, |f| unsafe { f() });
        let version = TrtVersion::new(
            major.max(0) as u32,
            minor.max(0) as u32,
            patch.max(0) as u32,
        );
        let abi = abi::table_for_major(version.major()).ok_or_else(|| {
            format!("TensorRT {version}: tether has interface tables for 10.x and 11.x only")
        })?;
        if version.minor() < abi.min_minor {
            return Err(format!(
                "TensorRT {version}: tether needs {}.{} or later (getDeviceMemorySizeV2 / setDeviceMemoryV2)",
                abi.major, abi.min_minor
            ));
        }
        // SAFETY: `createInferRuntime_INTERNAL` is declared
        // `extern "C" void* createInferRuntime_INTERNAL(void* logger, int32_t version) noexcept`
        // in NvInferRuntime.h of every 10.x/11.x release.
        let create_runtime =
            unsafe { lib.get::<CreateRuntimeFn>(b"createInferRuntime_INTERNAL\0") }
                .map(|s| *s)
                .map_err(|e| format!("TensorRT {version}: {e}"))?;
        let exports = |name: &[u8]| {
            // SAFETY: only the symbol's presence is checked; it is never called.
            unsafe { lib.get::<*const c_void>(name) }.is_ok()
        };
        let flavor = flavor_of(
            path,
            exports(b"createInferBuilder_INTERNAL\0"),
            exports(b"createInferRefitter_INTERNAL\0"),
        );
        Ok(Self {
            _lib: ManuallyDrop::new(lib),
            create_runtime,
            path: path.to_path_buf(),
            version,
            build: build.max(0) as u32,
            flavor,
            abi,
        })
    }

    /// Creates an `IRuntime` with tether's logger. `Err` carries the pointer
    /// value returned when it is not an object, or the `getPImpl` mismatch.
    pub(super) fn create_runtime(&self) -> Result<RuntimeHandle, CreateFailure> {
        let logger = logger_object(self.abi);
        // SAFETY: `create_runtime` was resolved with its declared signature
        // from a library that is never unloaded. The logger is a `'static`
        // object whose first word points to a vtable laid out for this major
        // version (slots proved by trt_abi.rs); TensorRT only reads it and
        // calls its `log` slot, which never unwinds and is thread-safe. The
        // version argument is the library's own, so its header check passes.
        let public = unsafe { (self.create_runtime)(logger, self.version.0 as i32) };
        let obj = Object::adopt(public, self.abi.runtime.get_pimpl)?;
        Ok(RuntimeHandle { obj, abi: self.abi })
    }
}

/// Why an object could not be adopted.
#[derive(Debug, Clone, Copy)]
pub(super) enum CreateFailure {
    /// TensorRT returned null or a value below the page size.
    NotAnObject(usize),
    /// `getPImpl()` did not return the public object.
    PImplMismatch {
        /// What `getPImpl()` returned.
        got: usize,
        /// The public object.
        expected: usize,
    },
}

/// A TensorRT public object (`[vptr][mImpl]`) and its `apiv` implementation.
struct Object {
    public: NonNull<c_void>,
    imp: NonNull<c_void>,
}

impl Object {
    /// Takes ownership of a public object returned by TensorRT after the
    /// `getPImpl` self-check. On a failed check the object is destroyed.
    fn adopt(public: *mut c_void, get_pimpl: Slot) -> Result<Self, CreateFailure> {
        if (public as usize) < MIN_OBJECT_ADDRESS {
            return Err(CreateFailure::NotAnObject(public as usize));
        }
        let public_nn = NonNull::new(public).ok_or(CreateFailure::NotAnObject(0))?;
        // SAFETY: `public` is a TensorRT public object (non-null, above the
        // first page): two words, the second (`PUBLIC_IMPL_OFFSET`, proved by
        // trt_abi.rs) is `mImpl`.
        let imp = unsafe {
            *(public
                .cast::<u8>()
                .add(PUBLIC_IMPL_OFFSET)
                .cast::<*mut c_void>())
        };
        let Some(imp_nn) = NonNull::new(imp) else {
            destroy_public(public_nn);
            return Err(CreateFailure::PImplMismatch {
                got: 0,
                expected: public as usize,
            });
        };
        // SAFETY: `imp` is the `apiv` object of `public`; `get_pimpl` is its
        // `getPImpl()` slot, `P* getPImpl() noexcept`.
        let back: *mut c_void = unsafe { call0(imp_nn, get_pimpl) };
        if back != public {
            destroy_public(public_nn);
            return Err(CreateFailure::PImplMismatch {
                got: back as usize,
                expected: public as usize,
            });
        }
        Ok(Self {
            public: public_nn,
            imp: imp_nn,
        })
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        destroy_public(self.public);
    }
}

/// `delete public`: calls the deleting destructor, entry
/// [`PUBLIC_DELETING_DESTRUCTOR`] of the public object's own vtable.
fn destroy_public(public: NonNull<c_void>) {
    // SAFETY: `public` is a live TensorRT public object owned by the caller
    // and not used after this call; entry 1 of its vtable is the deleting
    // destructor `void(this)` (proved by trt_abi.rs for every header set).
    unsafe {
        let vtable = *public.as_ptr().cast::<*const *const c_void>();
        let f: unsafe extern "C" fn(*mut c_void) =
            std::mem::transmute(*vtable.add(PUBLIC_DELETING_DESTRUCTOR));
        f(public.as_ptr());
    }
}

/// Reads vtable entry `slot` of the `apiv` object `imp` as a function of type `F`.
///
/// # Safety
/// `imp` must be a live `apiv` object whose class has a virtual function of
/// type `F` (with `this` first) at `slot`.
unsafe fn entry<F: Copy>(imp: NonNull<c_void>, slot: Slot) -> F {
    const { assert!(size_of::<F>() == size_of::<*const c_void>()) };
    // SAFETY: per the function's contract the object's first word is its
    // vtable pointer and entry `slot.index` exists and has type `F`.
    unsafe {
        let vtable = *imp.as_ptr().cast::<*const *const c_void>();
        std::mem::transmute_copy::<*const c_void, F>(&*vtable.add(slot.index))
    }
}

/// Calls a no-argument method returning `R`.
///
/// # Safety
/// As for [`entry`], with `F = extern "C" fn(this) -> R`.
unsafe fn call0<R>(imp: NonNull<c_void>, slot: Slot) -> R {
    // SAFETY: forwarded contract.
    unsafe {
        let f: unsafe extern "C" fn(*mut c_void) -> R = entry(imp, slot);
        f(imp.as_ptr())
    }
}

/// Calls a method with one argument.
///
/// # Safety
/// As for [`entry`], with `F = extern "C" fn(this, A) -> R`, and `a` valid
/// for that method.
unsafe fn call1<A, R>(imp: NonNull<c_void>, slot: Slot, a: A) -> R {
    // SAFETY: forwarded contract.
    unsafe {
        let f: unsafe extern "C" fn(*mut c_void, A) -> R = entry(imp, slot);
        f(imp.as_ptr(), a)
    }
}

/// Calls a method with two arguments.
///
/// # Safety
/// As for [`entry`], with `F = extern "C" fn(this, A, B) -> R`, and the
/// arguments valid for that method.
unsafe fn call2<A, B, R>(imp: NonNull<c_void>, slot: Slot, a: A, b: B) -> R {
    // SAFETY: forwarded contract.
    unsafe {
        let f: unsafe extern "C" fn(*mut c_void, A, B) -> R = entry(imp, slot);
        f(imp.as_ptr(), a, b)
    }
}

/// Which TensorRT library this is. Only the full library exports the builder
/// (`createInferBuilder_INTERNAL`). The lean and dispatch runtimes export the
/// same runtime entry points; the dispatch runtime also exports the refitter
/// (`createInferRefitter_INTERNAL`, seen in the 11.4.0.106 dispatch wheel,
/// [`tether_targets::sources::TRT_PIP_WHEELS`]); the lean runtime cannot refit.
/// So: the builder means full; otherwise a file name that names the flavor
/// decides; otherwise the refitter means dispatch.
fn flavor_of(path: &Path, has_builder: bool, has_refitter: bool) -> LibraryFlavor {
    if has_builder {
        return LibraryFlavor::Full;
    }
    match tether_targets::libs::tensorrt_flavor_of(path) {
        Some(f @ (LibraryFlavor::Lean | LibraryFlavor::Dispatch)) => f,
        _ if has_refitter => LibraryFlavor::Dispatch,
        _ => LibraryFlavor::Lean,
    }
}

/// An `IRuntime`.
pub(super) struct RuntimeHandle {
    obj: Object,
    abi: &'static AbiTable,
}

// SAFETY: an IRuntime is not tied to the creating thread; the safe layer
// serializes every call on it (a Mutex in `RuntimeInner`).
unsafe impl Send for RuntimeHandle {}
// SAFETY: as above: shared references only reach it under that Mutex.
unsafe impl Sync for RuntimeHandle {}

impl RuntimeHandle {
    /// `setErrorRecorder(recorder)`. The recorder must outlive the runtime.
    pub(super) fn set_error_recorder(&self, recorder: &ErrorRecorder) {
        let ptr = recorder as *const ErrorRecorder as *mut c_void;
        // SAFETY: live runtime; slot proved; `recorder` is a boxed
        // `ErrorRecorder` (vtable laid out for this major) that the safe
        // layer keeps alive until after the runtime and everything created
        // from it are destroyed. TensorRT calls incRefCount on it.
        unsafe { call1::<*mut c_void, ()>(self.obj.imp, self.abi.runtime.set_error_recorder, ptr) }
    }

    /// `setEngineHostCodeAllowed(allowed)`.
    pub(super) fn set_engine_host_code_allowed(&self, allowed: bool) {
        // SAFETY: live runtime; slot proved; `void(bool)`.
        unsafe {
            call1::<bool, ()>(
                self.obj.imp,
                self.abi.runtime.set_engine_host_code_allowed,
                allowed,
            )
        }
    }

    /// `getEngineHostCodeAllowed()`.
    pub(super) fn engine_host_code_allowed(&self) -> bool {
        // SAFETY: live runtime; slot proved; `bool() const`.
        unsafe { call0(self.obj.imp, self.abi.runtime.get_engine_host_code_allowed) }
    }

    /// `deserializeCudaEngine(plan.data(), plan.size())`, then the
    /// `getPImpl` self-check. TensorRT reads the bytes during the call only.
    pub(super) fn deserialize(&self, plan: &[u8]) -> Result<EngineHandle, CreateFailure> {
        // SAFETY: live runtime; slot proved;
        // `ICudaEngine*(void const* blob, size_t size)`; `plan` is valid for
        // `plan.len()` bytes for the duration of the call.
        let public: *mut c_void = unsafe {
            call2(
                self.obj.imp,
                self.abi.runtime.deserialize_cuda_engine,
                plan.as_ptr().cast::<c_void>(),
                plan.len(),
            )
        };
        if public.is_null() {
            return Err(CreateFailure::NotAnObject(0));
        }
        let obj = Object::adopt(public, self.abi.engine.get_pimpl)?;
        Ok(EngineHandle { obj, abi: self.abi })
    }
}

/// An `ICudaEngine`.
pub(super) struct EngineHandle {
    obj: Object,
    abi: &'static AbiTable,
}

// SAFETY: an ICudaEngine is not tied to a thread; the safe layer serializes
// calls on it with its runtime's Mutex.
unsafe impl Send for EngineHandle {}
// SAFETY: as above.
unsafe impl Sync for EngineHandle {}

impl EngineHandle {
    fn e(&self) -> &abi::EngineSlots {
        &self.abi.engine
    }

    /// `getName()`, copied.
    pub(super) fn name(&self) -> String {
        // SAFETY: live engine; slot proved; `char const*() const`.
        let p: *const c_char = unsafe { call0(self.obj.imp, self.e().get_name) };
        cstr_to_string(p)
    }

    /// `getNbOptimizationProfiles()`.
    pub(super) fn nb_optimization_profiles(&self) -> i32 {
        // SAFETY: live engine; slot proved; `int32_t() const`.
        unsafe { call0(self.obj.imp, self.e().get_nb_optimization_profiles) }
    }

    /// `getNbIOTensors()`.
    pub(super) fn nb_io_tensors(&self) -> i32 {
        // SAFETY: live engine; slot proved; `int32_t() const`.
        unsafe { call0(self.obj.imp, self.e().get_nb_io_tensors) }
    }

    /// `getIOTensorName(index)`, copied (`None` when TensorRT returns null).
    pub(super) fn io_tensor_name(&self, index: i32) -> Option<Vec<u8>> {
        // SAFETY: live engine; slot proved; `char const*(int32_t) const`.
        let p: *const c_char = unsafe { call1(self.obj.imp, self.e().get_io_tensor_name, index) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null NUL-terminated string owned by the engine, read
        // before any other call on it.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
    }

    /// `getTensorShape(name)`.
    pub(super) fn tensor_shape(&self, name: &CStr) -> Dims64 {
        // SAFETY: live engine; slot proved; `Dims(char const*) const`, the
        // 72-byte result returned through the hidden pointer `extern "C"`
        // passes; `name` is NUL-terminated.
        unsafe { call1(self.obj.imp, self.e().get_tensor_shape, name.as_ptr()) }
    }

    /// `getTensorDataType(name)` (raw).
    pub(super) fn tensor_data_type(&self, name: &CStr) -> i32 {
        // SAFETY: live engine; slot proved; `int32_t enum(char const*) const`.
        unsafe { call1(self.obj.imp, self.e().get_tensor_data_type, name.as_ptr()) }
    }

    /// `getTensorLocation(name)` (raw).
    pub(super) fn tensor_location(&self, name: &CStr) -> i32 {
        // SAFETY: live engine; slot proved; `int32_t enum(char const*) const`.
        unsafe { call1(self.obj.imp, self.e().get_tensor_location, name.as_ptr()) }
    }

    /// `isShapeInferenceIO(name)`.
    pub(super) fn is_shape_inference_io(&self, name: &CStr) -> bool {
        // SAFETY: live engine; slot proved; `bool(char const*) const`.
        unsafe { call1(self.obj.imp, self.e().is_shape_inference_io, name.as_ptr()) }
    }

    /// `getTensorIOMode(name)` (raw).
    pub(super) fn tensor_io_mode(&self, name: &CStr) -> i32 {
        // SAFETY: live engine; slot proved; `int32_t enum(char const*) const`.
        unsafe { call1(self.obj.imp, self.e().get_tensor_io_mode, name.as_ptr()) }
    }

    /// `getHardwareCompatibilityLevel()` (raw).
    pub(super) fn hardware_compatibility_level(&self) -> i32 {
        // SAFETY: live engine; slot proved; `int32_t enum() const`.
        unsafe { call0(self.obj.imp, self.e().get_hardware_compatibility_level) }
    }

    /// `getStreamableWeightsSize()` in bytes.
    pub(super) fn streamable_weights_size(&self) -> i64 {
        // SAFETY: live engine; slot proved; `int64_t() const`.
        unsafe { call0(self.obj.imp, self.e().get_streamable_weights_size) }
    }

    /// `getDeviceMemorySizeV2()` in bytes.
    pub(super) fn device_memory_size_v2(&self) -> i64 {
        // SAFETY: live engine; slot proved (10.1+, checked at load); `int64_t() const`.
        unsafe { call0(self.obj.imp, self.e().get_device_memory_size_v2) }
    }

    /// `createExecutionContext(kUSER_MANAGED)`, then the self-check.
    pub(super) fn create_execution_context_user_managed(
        &self,
    ) -> Result<ContextHandle, CreateFailure> {
        // SAFETY: live engine; slot proved;
        // `IExecutionContext*(ExecutionContextAllocationStrategy)`.
        let public: *mut c_void = unsafe {
            call1(
                self.obj.imp,
                self.e().create_execution_context,
                abi::ALLOCATION_USER_MANAGED,
            )
        };
        if public.is_null() {
            return Err(CreateFailure::NotAnObject(0));
        }
        let obj = Object::adopt(public, self.abi.context.get_pimpl)?;
        Ok(ContextHandle { obj, abi: self.abi })
    }
}

/// An `IExecutionContext`.
pub(super) struct ContextHandle {
    obj: Object,
    abi: &'static AbiTable,
}

// SAFETY: an execution context may be used from any thread, one at a time;
// the safe layer gives it out behind `&mut` for every mutating call.
unsafe impl Send for ContextHandle {}

impl ContextHandle {
    fn c(&self) -> &abi::ContextSlots {
        &self.abi.context
    }

    /// `setInputShape(name, dims)`.
    pub(super) fn set_input_shape(&mut self, name: &CStr, dims: &Dims64) -> bool {
        // SAFETY: live context; slot proved; `bool(char const*, Dims const&)`;
        // both pointers valid for the call.
        unsafe {
            call2(
                self.obj.imp,
                self.c().set_input_shape,
                name.as_ptr(),
                dims as *const Dims64,
            )
        }
    }

    /// `getTensorShape(name)` (resolved for the shapes set).
    pub(super) fn tensor_shape(&self, name: &CStr) -> Dims64 {
        // SAFETY: live context; slot proved; `Dims(char const*) const`
        // (hidden result pointer).
        unsafe { call1(self.obj.imp, self.c().get_tensor_shape, name.as_ptr()) }
    }

    /// `allInputDimensionsSpecified()`.
    pub(super) fn all_input_dimensions_specified(&self) -> bool {
        // SAFETY: live context; slot proved; `bool() const`.
        unsafe { call0(self.obj.imp, self.c().all_input_dimensions_specified) }
    }

    /// `updateDeviceMemorySizeForShapes()` in bytes.
    pub(super) fn update_device_memory_size_for_shapes(&mut self) -> usize {
        // SAFETY: live context; slot proved; `size_t()`.
        unsafe { call0(self.obj.imp, self.c().update_device_memory_size_for_shapes) }
    }

    /// `setDeviceMemoryV2(address, size)`.
    ///
    /// The memory must stay allocated while the context may run; the safe
    /// layer documents that as the caller's duty (addresses are plain
    /// integers it cannot check).
    pub(super) fn set_device_memory_v2(&mut self, address: u64, size: i64) {
        // SAFETY: live context; slot proved (10.1+, checked at load);
        // `void(void*, int64_t)`. TensorRT stores the address; it is only
        // dereferenced on the device by kernels the caller enqueues.
        unsafe {
            call2::<*mut c_void, i64, ()>(
                self.obj.imp,
                self.c().set_device_memory_v2,
                address as usize as *mut c_void,
                size,
            )
        }
    }

    /// `setTensorAddress(name, address)`.
    pub(super) fn set_tensor_address(&mut self, name: &CStr, address: u64) -> bool {
        // SAFETY: live context; slot proved; `bool(char const*, void*)`;
        // TensorRT stores the device address, used only by device kernels.
        unsafe {
            call2(
                self.obj.imp,
                self.c().set_tensor_address,
                name.as_ptr(),
                address as usize as *mut c_void,
            )
        }
    }

    /// `enqueueV3(stream)`: one virtual call, no allocation on tether's side.
    #[inline]
    pub(super) fn enqueue_v3(&mut self, stream: *mut c_void) -> bool {
        // SAFETY: live context with device memory and every I/O address set
        // (the safe layer only hands out bound contexts); slot proved;
        // `bool(cudaStream_t)`; `stream` is a CUDA stream handle (or null,
        // the legacy default stream) the caller owns.
        unsafe { call1(self.obj.imp, self.c().enqueue_v3, stream) }
    }
}

fn cstr_to_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: TensorRT returns NUL-terminated strings valid until the next
    // call on the object; the bytes are copied at once.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// ---------------------------------------------------------------------------
// tether's ILogger: a `'static` object per major version, whose vtable is
// built from the proved `LoggerLayout`.

/// A C++-shaped object: its first (only) word is a vtable pointer.
#[repr(C)]
struct StaticObject {
    vtable: *const *const c_void,
}

// SAFETY: the object is immutable (TensorRT only reads the vtable pointer)
// and the vtable is a `'static` immutable array of function pointers.
unsafe impl Sync for StaticObject {}

#[repr(C)]
struct VTable<const N: usize>([*const c_void; N]);

// SAFETY: immutable array of function pointers, shared read-only.
unsafe impl<const N: usize> Sync for VTable<N> {}

unsafe extern "C" fn logger_log(_this: *mut c_void, severity: i32, msg: *const c_char) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let text = if msg.is_null() {
            c""
        } else {
            // SAFETY: TensorRT passes a NUL-terminated message valid for the
            // duration of the call.
            unsafe { CStr::from_ptr(msg) }
        };
        diagnostics::on_log(severity, text);
    }));
}

unsafe extern "C" fn api_language_cpp(_this: *const c_void) -> i32 {
    API_LANGUAGE_CPP
}

unsafe extern "C" fn logger_interface_info(_this: *const c_void) -> InterfaceInfo {
    InterfaceInfo {
        kind: c"ILogger".as_ptr(),
        major: 1,
        minor: 0,
    }
}

/// Destructors of tether's objects: TensorRT never destroys an
/// application-owned logger or recorder, and their storage is owned by Rust.
unsafe extern "C" fn no_op_destructor(_this: *mut c_void) {}

const fn logger_vtable<const N: usize>(l: LoggerLayout) -> VTable<N> {
    let mut t = [no_op_destructor as *const c_void; N];
    t[l.destructor] = no_op_destructor as *const c_void;
    t[l.deleting_destructor] = no_op_destructor as *const c_void;
    t[l.log] = logger_log as *const c_void;
    if let Some(i) = l.get_api_language {
        t[i] = api_language_cpp as *const c_void;
    }
    if let Some(i) = l.get_interface_info {
        t[i] = logger_interface_info as *const c_void;
    }
    VTable(t)
}

static LOGGER_VTABLE_10: VTable<{ abi::TRT10.logger.len }> = logger_vtable(abi::TRT10.logger);
static LOGGER_VTABLE_11: VTable<{ abi::TRT11.logger.len }> = logger_vtable(abi::TRT11.logger);
static LOGGER_10: StaticObject = StaticObject {
    vtable: LOGGER_VTABLE_10.0.as_ptr(),
};
static LOGGER_11: StaticObject = StaticObject {
    vtable: LOGGER_VTABLE_11.0.as_ptr(),
};

fn logger_object(abi: &AbiTable) -> *mut c_void {
    let obj: &'static StaticObject = if abi.major == 10 {
        &LOGGER_10
    } else {
        &LOGGER_11
    };
    obj as *const StaticObject as *mut c_void
}

// ---------------------------------------------------------------------------
// tether's IErrorRecorder: one boxed object per runtime.

/// An `IErrorRecorder` implemented in Rust: `[vptr][state]`.
#[repr(C)]
pub(super) struct ErrorRecorder {
    vtable: *const *const c_void,
    refs: AtomicI32,
    store: Mutex<ErrorStore>,
}

// SAFETY: the vtable pointer is immutable and points to a `'static` table;
// the rest is an atomic and a Mutex.
unsafe impl Send for ErrorRecorder {}
// SAFETY: as above.
unsafe impl Sync for ErrorRecorder {}

impl ErrorRecorder {
    /// A recorder laid out for `abi`'s major version, boxed so its address
    /// is stable (TensorRT keeps a pointer to it).
    pub(super) fn new(abi: &AbiTable) -> Box<Self> {
        let vtable = if abi.major == 10 {
            RECORDER_VTABLE_10.0.as_ptr()
        } else {
            RECORDER_VTABLE_11.0.as_ptr()
        };
        Box::new(Self {
            vtable,
            refs: AtomicI32::new(0),
            store: Mutex::new(ErrorStore::new()),
        })
    }

    fn store(&self) -> std::sync::MutexGuard<'_, ErrorStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the recorded errors.
    pub(super) fn clear(&self) {
        self.store().clear();
    }

    /// The recorded errors, oldest first.
    pub(super) fn errors(&self) -> Vec<RecordedError> {
        self.store().to_vec()
    }

    /// References TensorRT holds (incRefCount minus decRefCount).
    pub(super) fn ref_count(&self) -> i32 {
        self.refs.load(Ordering::Relaxed)
    }
}

/// # Safety
/// `this` must be the address of a live [`ErrorRecorder`] (what tether
/// registered with `setErrorRecorder`).
unsafe fn recorder<'a>(this: *const c_void) -> &'a ErrorRecorder {
    // SAFETY: per the contract; TensorRT passes back the registered pointer,
    // and the safe layer keeps the box alive past every TensorRT object
    // that references it.
    unsafe { &*this.cast::<ErrorRecorder>() }
}

unsafe extern "C" fn rec_interface_info(_this: *const c_void) -> InterfaceInfo {
    InterfaceInfo {
        kind: c"IErrorRecorder".as_ptr(),
        major: 1,
        minor: 0,
    }
}

unsafe extern "C" fn rec_get_nb_errors(this: *const c_void) -> i32 {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    r.store().len() as i32
}

unsafe extern "C" fn rec_get_error_code(this: *const c_void, index: i32) -> i32 {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    usize::try_from(index)
        .ok()
        .and_then(|i| r.store().code(i))
        .unwrap_or(0)
}

unsafe extern "C" fn rec_get_error_desc(this: *const c_void, index: i32) -> *const c_char {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    let store = r.store();
    match usize::try_from(index).ok().and_then(|i| store.desc(i)) {
        // The entry lives inside the boxed recorder and is not rewritten
        // until `clear()`, so the pointer stays valid after the lock is
        // released (IErrorRecorder's documented lifetime).
        Some(d) => d.as_ptr().cast::<c_char>(),
        None => c"".as_ptr(),
    }
}

unsafe extern "C" fn rec_has_overflowed(this: *const c_void) -> bool {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    r.store().overflowed()
}

unsafe extern "C" fn rec_clear(this: *mut c_void) {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    r.clear();
}

unsafe extern "C" fn rec_report_error(this: *mut c_void, code: i32, desc: *const c_char) -> bool {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: called by TensorRT on the registered recorder.
        let r = unsafe { recorder(this) };
        let text = if desc.is_null() {
            c""
        } else {
            // SAFETY: TensorRT passes a NUL-terminated description valid for
            // the call.
            unsafe { CStr::from_ptr(desc) }
        };
        r.store().report(code, text);
    }));
    // Not fatal from tether's side: TensorRT's own handling continues (the
    // call then fails and returns its error value).
    false
}

unsafe extern "C" fn rec_inc_ref(this: *mut c_void) -> i32 {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    r.refs.fetch_add(1, Ordering::Relaxed) + 1
}

unsafe extern "C" fn rec_dec_ref(this: *mut c_void) -> i32 {
    // SAFETY: called by TensorRT on the registered recorder.
    let r = unsafe { recorder(this) };
    r.refs.fetch_sub(1, Ordering::Relaxed) - 1
}

const fn recorder_vtable<const N: usize>(l: ErrorRecorderLayout) -> VTable<N> {
    let mut t = [no_op_destructor as *const c_void; N];
    t[l.get_api_language] = api_language_cpp as *const c_void;
    t[l.get_interface_info] = rec_interface_info as *const c_void;
    t[l.destructor] = no_op_destructor as *const c_void;
    t[l.deleting_destructor] = no_op_destructor as *const c_void;
    t[l.get_nb_errors] = rec_get_nb_errors as *const c_void;
    t[l.get_error_code] = rec_get_error_code as *const c_void;
    t[l.get_error_desc] = rec_get_error_desc as *const c_void;
    t[l.has_overflowed] = rec_has_overflowed as *const c_void;
    t[l.clear] = rec_clear as *const c_void;
    t[l.report_error] = rec_report_error as *const c_void;
    t[l.inc_ref_count] = rec_inc_ref as *const c_void;
    t[l.dec_ref_count] = rec_dec_ref as *const c_void;
    VTable(t)
}

static RECORDER_VTABLE_10: VTable<{ abi::TRT10.error_recorder.len }> =
    recorder_vtable(abi::TRT10.error_recorder);
static RECORDER_VTABLE_11: VTable<{ abi::TRT11.error_recorder.len }> =
    recorder_vtable(abi::TRT11.error_recorder);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavor_from_exports_and_name() {
        use std::path::Path;
        let f = |p: &str, b, r| flavor_of(Path::new(p), b, r);
        assert_eq!(f("/x/libnvinfer.so.11", true, true), LibraryFlavor::Full);
        assert_eq!(
            f("libnvinfer_lean.so.11", false, false),
            LibraryFlavor::Lean
        );
        assert_eq!(
            f("libnvinfer_dispatch.so.11", false, true),
            LibraryFlavor::Dispatch
        );
        // Renamed or linked files: the exports decide.
        assert_eq!(
            f("/opt/trt/libtrt.so", false, true),
            LibraryFlavor::Dispatch
        );
        assert_eq!(f("/opt/trt/libtrt.so", false, false), LibraryFlavor::Lean);
        assert_eq!(
            f("/opt/trt/libnvinfer.so.10", false, false),
            LibraryFlavor::Lean
        );
    }

    /// Calls tether's own logger and recorder through their vtables, the way
    /// TensorRT does, using the layout constants.
    #[test]
    fn own_vtables_dispatch_by_layout() {
        for abi in [&abi::TRT10, &abi::TRT11] {
            let logger = logger_object(abi);
            let mark = diagnostics::log_mark();
            // SAFETY: `logger` is tether's static logger; entry `log` has the
            // `void(this, int32_t, char const*)` signature.
            unsafe {
                let vt = *(logger as *const *const *const c_void);
                let f: unsafe extern "C" fn(*mut c_void, i32, *const c_char) =
                    std::mem::transmute(*vt.add(abi.logger.log));
                f(logger, 1, c"vtable test message".as_ptr());
            }
            assert!(
                diagnostics::errors_since(mark)
                    .iter()
                    .any(|m| m == "vtable test message")
            );

            let rec = ErrorRecorder::new(abi);
            let this = &*rec as *const ErrorRecorder as *mut c_void;
            let l = abi.error_recorder;
            // SAFETY: `this` is a live recorder; entries per the proved layout.
            unsafe {
                let vt = *(this as *const *const *const c_void);
                let report: unsafe extern "C" fn(*mut c_void, i32, *const c_char) -> bool =
                    std::mem::transmute(*vt.add(l.report_error));
                let count: unsafe extern "C" fn(*const c_void) -> i32 =
                    std::mem::transmute(*vt.add(l.get_nb_errors));
                let desc: unsafe extern "C" fn(*const c_void, i32) -> *const c_char =
                    std::mem::transmute(*vt.add(l.get_error_desc));
                let inc: unsafe extern "C" fn(*mut c_void) -> i32 =
                    std::mem::transmute(*vt.add(l.inc_ref_count));
                let info: unsafe extern "C" fn(*const c_void) -> InterfaceInfo =
                    std::mem::transmute(*vt.add(l.get_interface_info));
                assert!(!report(this, 3, c"bad argument".as_ptr()));
                assert_eq!(count(this), 1);
                assert_eq!(
                    CStr::from_ptr(desc(this, 0)).to_str().unwrap(),
                    "bad argument"
                );
                assert_eq!(inc(this), 1);
                assert_eq!(
                    CStr::from_ptr(info(this).kind).to_str().unwrap(),
                    "IErrorRecorder"
                );
            }
            assert_eq!(rec.errors()[0].code, 3);
            assert_eq!(rec.ref_count(), 1);
        }
    }
}
