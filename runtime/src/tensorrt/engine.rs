//! The safe layer: library, runtime, engine, execution context.

use std::ffi::{CString, c_void};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::abi::{DIMS_MAX, DataType, Dims64, HardwareCompatibility, TensorIoMode, TensorLocation};
use tether_targets::compat::{PlanRecord, PlanVerdict};
use tether_targets::libs::{self, SearchReport};
use tether_targets::{GpuFacts, LibraryFlavor, TrtLibrary, TrtVersion};

use super::compat::{PlanHeader, check_plan_compatibility};
use super::diagnostics::{self, RecordedError};
use super::error::{CaptureError, EnqueueError, LoadError, TrtError, TrtMessages};
use super::ffi::{self, ContextHandle, CreateFailure, EngineHandle, ErrorRecorder, RuntimeHandle};
use super::library::LoadOptions;

/// A loaded TensorRT library (`libnvinfer.so.10/.11` or
/// `libnvinfer_lean.so.10/.11`). Cheap to clone; the library stays loaded for
/// the life of the process.
#[derive(Clone, Debug)]
pub struct TensorRt {
    lib: Arc<ffi::Library>,
}

impl TensorRt {
    /// Loads TensorRT from `path` (a library file or a folder holding one)
    /// or, when `None`, from `TETHER_TENSORRT_LIB` or the one search list of
    /// [`tether_targets::libs`] (the dynamic loader, this architecture's
    /// package directories, pip's `tensorrt_libs` / `tensorrt_lean_libs` /
    /// `tensorrt_dispatch_libs`): the full library first, then the lean and
    /// dispatch runtimes, at each place.
    ///
    /// # Errors
    /// [`LoadError::NotFound`] with every place tried and why it failed
    /// (not found, not TensorRT, unsupported version such as 10.0).
    pub fn load(path: Option<&Path>) -> Result<Self, LoadError> {
        Self::load_with(&LoadOptions::new(path)).map(|(lib, _)| lib)
    }

    /// Loads TensorRT as `options` say, and reports where it looked (also on
    /// success: the places before the one that loaded).
    ///
    /// # Errors
    /// As [`TensorRt::load`].
    pub fn load_with(options: &LoadOptions) -> Result<(Self, SearchReport), LoadError> {
        let list = options.search_list();
        let search = libs::find(&list, ffi::Library::from_opened);
        log::debug!(
            "TensorRT search ({} places):{}",
            search.report.places,
            search
                .report
                .tried
                .iter()
                .map(|t| format!("\n  {t}"))
                .collect::<String>()
        );
        match search.found {
            Some(found) => {
                let lib = found.value;
                log::info!(
                    "TensorRT {}.{} {} loaded from {}",
                    lib.version,
                    lib.build,
                    lib.flavor,
                    lib.path.display()
                );
                Ok((Self { lib: Arc::new(lib) }, search.report))
            }
            None => Err(LoadError::NotFound {
                search: search.report,
            }),
        }
    }

    /// Version of the loaded library.
    pub fn version(&self) -> TrtVersion {
        self.lib.version
    }

    /// Build number of the loaded library (`getInferLibBuildVersion`, 0 if absent).
    pub fn build(&self) -> u32 {
        self.lib.build
    }

    /// Full, lean or dispatch runtime.
    pub fn flavor(&self) -> LibraryFlavor {
        self.lib.flavor
    }

    /// Path the library was loaded from (a bare soname when the dynamic
    /// loader found it).
    pub fn path(&self) -> &Path {
        &self.lib.path
    }

    /// The library side of the compatibility rules: version and flavor.
    pub fn loaded(&self) -> TrtLibrary {
        TrtLibrary {
            version: self.lib.version,
            flavor: self.lib.flavor,
        }
    }

    /// Creates a TensorRT runtime (`IRuntime`) with tether's logger (routed
    /// to the `log` facade, target `tensorrt`) and its own error recorder.
    ///
    /// # Errors
    /// [`TrtError::RuntimeCreation`] with TensorRT's logged messages (for
    /// example "CUDA initialization failure" without a usable GPU), or
    /// [`TrtError::AbiMismatch`] when the `getPImpl` self-check fails.
    pub fn create_runtime(&self) -> Result<Runtime, TrtError> {
        let mark = diagnostics::log_mark();
        let handle = self.lib.create_runtime().map_err(|f| match f {
            CreateFailure::NotAnObject(returned) => TrtError::RuntimeCreation {
                version: self.lib.version,
                returned,
                messages: TrtMessages(diagnostics::errors_since(mark)),
            },
            CreateFailure::PImplMismatch { got, expected } => TrtError::AbiMismatch {
                object: "IRuntime",
                got,
                expected,
                version: self.lib.version,
            },
        })?;
        let recorder = ErrorRecorder::new(self.lib.abi);
        handle.set_error_recorder(&recorder);
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                handle,
                recorder,
                lock: Mutex::new(()),
                lib: self.clone(),
            }),
        })
    }
}

struct RuntimeInner {
    // Field order is drop order: the runtime is destroyed before the
    // recorder it references.
    handle: RuntimeHandle,
    recorder: Box<ErrorRecorder>,
    lock: Mutex<()>,
    lib: TensorRt,
}

impl RuntimeInner {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Messages for a failed call: the recorder's, else the logger's errors.
    fn messages(&self, mark: diagnostics::LogMark) -> TrtMessages {
        let mut m: Vec<String> = self
            .recorder
            .errors()
            .into_iter()
            .map(|e| e.description)
            .collect();
        if m.is_empty() {
            m = diagnostics::errors_since(mark);
        }
        TrtMessages(m)
    }
}

/// Options for [`Runtime::deserialize`].
#[derive(Debug, Clone, Copy)]
pub struct DeserializeOptions {
    /// Allow plans that embed their lean runtime (host code), which
    /// version-compatible plans do (`setEngineHostCodeAllowed(true)`). Only
    /// for trusted plans. Default: true (a bundle's plan is trusted once its
    /// checksum verified).
    pub allow_engine_host_code: bool,
}

impl Default for DeserializeOptions {
    fn default() -> Self {
        Self {
            allow_engine_host_code: true,
        }
    }
}

/// A TensorRT runtime (`IRuntime`): deserializes plans. `Send + Sync`;
/// calls on it and on its engines are serialized internally.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("library", &self.inner.lib)
            .finish()
    }
}

impl Runtime {
    /// The library this runtime comes from.
    pub fn library(&self) -> &TensorRt {
        &self.inner.lib
    }

    /// Checks the plan's target `record` against the loaded library and the
    /// device's `gpu` ([`check_plan_compatibility`], the rules engine selection
    /// uses too), then deserializes `plan` straight from the given bytes (no
    /// copy: pass the bundle's mapped plan section).
    ///
    /// # Errors
    /// [`TrtError::Incompatible`] from the gate (nothing is deserialized),
    /// [`TrtError::HostCodeNotAllowed`], [`TrtError::Deserialize`] with
    /// TensorRT's own messages, [`TrtError::AbiMismatch`].
    pub fn deserialize(
        &self,
        plan: &[u8],
        record: &PlanRecord,
        gpu: GpuFacts,
        options: &DeserializeOptions,
    ) -> Result<Engine, TrtError> {
        let verdict: PlanVerdict = check_plan_compatibility(record, &self.inner.lib.loaded(), gpu)?;
        if let Some(h) = PlanHeader::parse(plan)
            && h.version != record.tensorrt
        {
            log::warn!(
                "plan header says TensorRT {} but the target record says {}",
                h.version,
                record.tensorrt
            );
        }
        if verdict.host_code_required && !options.allow_engine_host_code {
            return Err(TrtError::HostCodeNotAllowed);
        }
        self.deserialize_unchecked(plan, verdict.host_code_required)
    }

    /// Deserializes `plan` without the compatibility gate (diagnostics,
    /// plans without a target record). `allow_host_code` sets
    /// `setEngineHostCodeAllowed`.
    ///
    /// # Errors
    /// [`TrtError::Deserialize`] with TensorRT's own messages (a corrupt,
    /// foreign-version or foreign-GPU plan), [`TrtError::AbiMismatch`],
    /// [`TrtError::UnknownValue`] for an I/O tensor property tether does not know.
    pub fn deserialize_unchecked(
        &self,
        plan: &[u8],
        allow_host_code: bool,
    ) -> Result<Engine, TrtError> {
        let inner = &self.inner;
        let version = inner.lib.version();
        let _guard = inner.lock();
        inner.recorder.clear();
        let mark = diagnostics::log_mark();
        if inner.handle.engine_host_code_allowed() != allow_host_code {
            inner.handle.set_engine_host_code_allowed(allow_host_code);
        }
        let handle = inner.handle.deserialize(plan).map_err(|f| match f {
            CreateFailure::NotAnObject(_) => TrtError::Deserialize {
                version,
                plan_bytes: plan.len(),
                messages: inner.messages(mark),
            },
            CreateFailure::PImplMismatch { got, expected } => TrtError::AbiMismatch {
                object: "ICudaEngine",
                got,
                expected,
                version,
            },
        })?;
        let engine = EngineInner::describe(handle, self.inner.clone())?;
        Ok(Engine {
            inner: Arc::new(engine),
        })
    }

    /// Errors TensorRT reported to this runtime's error recorder since the
    /// last fallible call began (engines and contexts made from this runtime
    /// report here too), oldest first. Allocates; not for the per-frame path.
    pub fn recorded_errors(&self) -> Vec<RecordedError> {
        self.inner.recorder.errors()
    }

    /// References TensorRT holds on this runtime's error recorder
    /// (`incRefCount` minus `decRefCount` calls): 1 or more while attached,
    /// proof that TensorRT reached the Rust-built recorder.
    pub fn error_recorder_references(&self) -> i32 {
        self.inner.recorder.ref_count()
    }
}

/// One I/O tensor of an engine (`getNbIOTensors` / `getIOTensorName` and the
/// per-name queries), read once at load; its name is kept as a C string so
/// no call ever builds one again.
#[derive(Debug, Clone)]
pub struct IoTensor {
    name: CString,
    /// Input or output.
    pub mode: TensorIoMode,
    /// Element type.
    pub data_type: DataType,
    /// Device or host memory.
    pub location: TensorLocation,
    /// Shape as built (`-1` = dynamic extent, set per execution context).
    pub shape: Vec<i64>,
    /// A shape tensor (`isShapeInferenceIO`): its *values* are read on the host.
    pub shape_inference_io: bool,
}

impl IoTensor {
    /// Tensor name (TensorRT names are ASCII; invalid UTF-8 shows as `?`).
    pub fn name(&self) -> &str {
        self.name.to_str().unwrap_or("?")
    }
}

struct EngineInner {
    // Drop order: the engine before the runtime it came from.
    handle: EngineHandle,
    runtime: Arc<RuntimeInner>,
    name: String,
    tensors: Vec<IoTensor>,
    device_memory_size: u64,
    hardware_compatibility: HardwareCompatibility,
    streamable_weights_size: i64,
    optimization_profiles: i32,
}

fn dims_to_vec(d: &Dims64) -> Vec<i64> {
    let n = usize::try_from(d.nb_dims).unwrap_or(0).min(DIMS_MAX);
    d.d[..n].to_vec()
}

impl EngineInner {
    fn describe(handle: EngineHandle, runtime: Arc<RuntimeInner>) -> Result<Self, TrtError> {
        let name = handle.name();
        let n = handle.nb_io_tensors().max(0);
        let mut tensors = Vec::with_capacity(n as usize);
        for i in 0..n {
            let raw = handle.io_tensor_name(i).unwrap_or_default();
            let cname = CString::new(raw).unwrap_or_default();
            let label = cname.to_string_lossy().into_owned();
            let unknown = |what: &'static str, value: i64| TrtError::UnknownValue {
                what,
                name: label.clone(),
                value,
            };
            let mode = match handle.tensor_io_mode(&cname) {
                1 => TensorIoMode::Input,
                2 => TensorIoMode::Output,
                v => return Err(unknown("I/O mode", i64::from(v))),
            };
            let dt = handle.tensor_data_type(&cname);
            let data_type =
                DataType::from_raw(dt).ok_or_else(|| unknown("data type", i64::from(dt)))?;
            let location = match handle.tensor_location(&cname) {
                0 => TensorLocation::Device,
                1 => TensorLocation::Host,
                v => return Err(unknown("tensor location", i64::from(v))),
            };
            tensors.push(IoTensor {
                shape: dims_to_vec(&handle.tensor_shape(&cname)),
                shape_inference_io: handle.is_shape_inference_io(&cname),
                name: cname,
                mode,
                data_type,
                location,
            });
        }
        let hw = handle.hardware_compatibility_level();
        let hardware_compatibility = u32::try_from(hw)
            .ok()
            .and_then(HardwareCompatibility::from_raw)
            .ok_or_else(|| TrtError::UnknownValue {
                what: "hardware compatibility level",
                name: name.clone(),
                value: i64::from(hw),
            })?;
        Ok(Self {
            device_memory_size: handle.device_memory_size_v2().max(0) as u64,
            streamable_weights_size: handle.streamable_weights_size(),
            optimization_profiles: handle.nb_optimization_profiles(),
            hardware_compatibility,
            name,
            tensors,
            handle,
            runtime,
        })
    }

    fn index_of(&self, name: &str) -> Result<usize, TrtError> {
        self.tensors
            .iter()
            .position(|t| t.name.as_bytes() == name.as_bytes())
            .ok_or_else(|| TrtError::UnknownTensor {
                name: name.to_string(),
                engine: self.name.clone(),
                known: self
                    .tensors
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// A deserialized plan (`ICudaEngine`). Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("name", &self.inner.name)
            .field("io_tensors", &self.inner.tensors)
            .field("device_memory_size", &self.inner.device_memory_size)
            .finish()
    }
}

impl Engine {
    /// Engine name (`getName`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The I/O tensors, in TensorRT's index order.
    pub fn io_tensors(&self) -> &[IoTensor] {
        &self.inner.tensors
    }

    /// Device memory an execution context needs at most, in bytes
    /// (`getDeviceMemorySizeV2`, the maximum over optimization profiles).
    pub fn device_memory_size(&self) -> u64 {
        self.inner.device_memory_size
    }

    /// Hardware-compatibility level the engine was built with.
    pub fn hardware_compatibility(&self) -> HardwareCompatibility {
        self.inner.hardware_compatibility
    }

    /// Bytes of weights that can be streamed (`getStreamableWeightsSize`);
    /// non-zero means the plan was built for weight streaming.
    pub fn streamable_weights_size(&self) -> i64 {
        self.inner.streamable_weights_size
    }

    /// Number of optimization profiles (tether uses profile 0).
    pub fn optimization_profiles(&self) -> i32 {
        self.inner.optimization_profiles
    }

    /// Creates an execution context with `kUSER_MANAGED` device memory and
    /// sets the input shapes (name, extents) for the dynamic inputs
    /// (optimization profile 0). The context is not yet runnable: give it
    /// device memory and I/O addresses with [`UnboundContext::bind`].
    ///
    /// # Errors
    /// [`TrtError::ContextCreation`], [`TrtError::UnknownTensor`],
    /// [`TrtError::NotAnInput`], [`TrtError::TooManyDimensions`],
    /// [`TrtError::InputShape`] (with TensorRT's message, e.g. a shape outside
    /// the profile), [`TrtError::ShapesIncomplete`], [`TrtError::AbiMismatch`].
    pub fn create_execution_context(
        &self,
        input_shapes: &[(&str, &[i64])],
    ) -> Result<UnboundContext, TrtError> {
        let inner = &self.inner;
        let rt = &inner.runtime;
        let version = rt.lib.version();
        let _guard = rt.lock();
        rt.recorder.clear();
        let mark = diagnostics::log_mark();
        let mut handle = inner
            .handle
            .create_execution_context_user_managed()
            .map_err(|f| match f {
                CreateFailure::NotAnObject(_) => TrtError::ContextCreation {
                    engine: inner.name.clone(),
                    messages: rt.messages(mark),
                },
                CreateFailure::PImplMismatch { got, expected } => TrtError::AbiMismatch {
                    object: "IExecutionContext",
                    got,
                    expected,
                    version,
                },
            })?;
        for (name, shape) in input_shapes {
            let i = inner.index_of(name)?;
            let t = &inner.tensors[i];
            if t.mode != TensorIoMode::Input {
                return Err(TrtError::NotAnInput {
                    name: name.to_string(),
                });
            }
            if shape.len() > DIMS_MAX {
                return Err(TrtError::TooManyDimensions {
                    name: name.to_string(),
                    shape: shape.to_vec(),
                });
            }
            let mut dims = Dims64 {
                nb_dims: shape.len() as i32,
                d: [0; DIMS_MAX],
            };
            dims.d[..shape.len()].copy_from_slice(shape);
            if !handle.set_input_shape(&t.name, &dims) {
                return Err(TrtError::InputShape {
                    name: name.to_string(),
                    shape: shape.to_vec(),
                    messages: rt.messages(mark),
                });
            }
        }
        let shapes: Vec<Vec<i64>> = inner
            .tensors
            .iter()
            .map(|t| dims_to_vec(&handle.tensor_shape(&t.name)))
            .collect();
        if !handle.all_input_dimensions_specified() {
            let (t, s) = inner
                .tensors
                .iter()
                .zip(&shapes)
                .find(|(t, s)| t.mode == TensorIoMode::Input && s.iter().any(|&d| d < 0))
                .map(|(t, s)| (t.name().to_string(), s.clone()))
                .unwrap_or_default();
            return Err(TrtError::ShapesIncomplete { name: t, shape: s });
        }
        let device_memory_size = handle.update_device_memory_size_for_shapes() as u64;
        let blockers = CaptureBlockers {
            data_dependent_output_shape: inner
                .tensors
                .iter()
                .zip(&shapes)
                .any(|(t, s)| t.mode == TensorIoMode::Output && s.iter().any(|&d| d < 0)),
            weight_streaming: inner.streamable_weights_size > 0,
            host_io_tensor: inner
                .tensors
                .iter()
                .any(|t| t.location == TensorLocation::Host),
        };
        Ok(UnboundContext {
            handle,
            engine: self.clone(),
            shapes,
            device_memory_size,
            blockers,
        })
    }
}

/// A device memory block given to an execution context: raw CUDA device
/// address and size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceMemory {
    /// Device address (`CUdeviceptr`).
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
}

/// One I/O tensor's address: a raw device address (or host address for a
/// host-located shape tensor).
#[derive(Debug, Clone, Copy)]
pub struct TensorBinding<'a> {
    /// I/O tensor name.
    pub name: &'a str,
    /// Address of its buffer, at least [`UnboundContext::tensor_bytes`] long.
    pub address: u64,
}

/// Why an execution context cannot be captured into a CUDA graph: TensorRT
/// allocates or reads host state inside `enqueueV3` for these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureBlocker {
    /// An output's shape depends on the data (needs an output allocator,
    /// which allocates during `enqueueV3`).
    DataDependentOutputShape,
    /// The plan streams weights from host memory.
    WeightStreaming,
    /// An I/O tensor lives in host memory (shape tensor): its value is read
    /// at enqueue time, so a replayed graph would freeze it.
    HostIoTensor,
}

impl fmt::Display for CaptureBlocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DataDependentOutputShape => "an output has a data-dependent shape",
            Self::WeightStreaming => "the plan uses weight streaming",
            Self::HostIoTensor => "an I/O tensor lives in host memory",
        })
    }
}

/// The set of [`CaptureBlocker`]s of one execution context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaptureBlockers {
    /// [`CaptureBlocker::DataDependentOutputShape`].
    pub data_dependent_output_shape: bool,
    /// [`CaptureBlocker::WeightStreaming`].
    pub weight_streaming: bool,
    /// [`CaptureBlocker::HostIoTensor`].
    pub host_io_tensor: bool,
}

impl CaptureBlockers {
    /// The blockers present.
    pub fn iter(&self) -> impl Iterator<Item = CaptureBlocker> + use<> {
        [
            (
                self.data_dependent_output_shape,
                CaptureBlocker::DataDependentOutputShape,
            ),
            (self.weight_streaming, CaptureBlocker::WeightStreaming),
            (self.host_io_tensor, CaptureBlocker::HostIoTensor),
        ]
        .into_iter()
        .filter_map(|(on, b)| on.then_some(b))
    }

    /// True when none is present.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// An execution context with its input shapes set, waiting for device
/// memory and I/O addresses.
pub struct UnboundContext {
    handle: ContextHandle,
    engine: Engine,
    shapes: Vec<Vec<i64>>,
    device_memory_size: u64,
    blockers: CaptureBlockers,
}

impl fmt::Debug for UnboundContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnboundContext")
            .field("engine", &self.engine.name())
            .field("shapes", &self.shapes)
            .field("device_memory_size", &self.device_memory_size)
            .finish()
    }
}

impl UnboundContext {
    /// Device memory this context needs for the shapes set, in bytes
    /// (`updateDeviceMemorySizeForShapes`).
    pub fn device_memory_size(&self) -> u64 {
        self.device_memory_size
    }

    /// Resolved shape of an I/O tensor for the shapes set (`-1` for an
    /// output whose shape depends on the data).
    pub fn tensor_shape(&self, name: &str) -> Option<&[i64]> {
        let i = self.engine.inner.index_of(name).ok()?;
        Some(&self.shapes[i])
    }

    /// Bytes of an I/O tensor in the default linear layout (volume × element
    /// size, rounded up for 4-bit types); `None` for an unknown name or a
    /// data-dependent shape.
    pub fn tensor_bytes(&self, name: &str) -> Option<u64> {
        let i = self.engine.inner.index_of(name).ok()?;
        let mut volume: u64 = 1;
        for &d in &self.shapes[i] {
            volume = volume.checked_mul(u64::try_from(d).ok()?)?;
        }
        let bits = u64::from(self.engine.inner.tensors[i].data_type.bits());
        Some((volume * bits).div_ceil(8))
    }

    /// What keeps this context out of CUDA graphs (empty: capture-safe).
    pub fn capture_blockers(&self) -> CaptureBlockers {
        self.blockers
    }

    /// Gives the context its device memory (`setDeviceMemoryV2`) and every
    /// I/O tensor its address (`setTensorAddress`, once, with the names
    /// built at load), and returns the runnable context.
    ///
    /// # Safety
    /// `device_memory` and every binding's address must be valid CUDA
    /// allocations (host allocations for host-located tensors) of at least
    /// the required size ([`Self::device_memory_size`], [`Self::tensor_bytes`]),
    /// on the device and context the engine was deserialized on, not used by
    /// anything else while the context runs, and must stay allocated until
    /// the returned context is dropped. TensorRT's kernels write to them.
    ///
    /// # Errors
    /// [`TrtError::DeviceMemoryTooSmall`], [`TrtError::UnknownTensor`],
    /// [`TrtError::Unbound`] (a tensor without an address),
    /// [`TrtError::TensorAddress`] (TensorRT refused one, e.g. misaligned).
    #[allow(unsafe_code)]
    pub unsafe fn bind(
        mut self,
        device_memory: DeviceMemory,
        bindings: &[TensorBinding<'_>],
    ) -> Result<ExecutionContext, TrtError> {
        let engine = self.engine.inner.clone();
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            apply_bindings(
                &engine,
                &mut self.handle,
                self.device_memory_size,
                device_memory,
                bindings,
            )
        }?;
        Ok(ExecutionContext {
            handle: self.handle,
            engine: self.engine,
            shapes: self.shapes,
            blockers: self.blockers,
            device_memory,
            required_memory: self.device_memory_size,
        })
    }
}

/// A runnable execution context (`IExecutionContext`, `kUSER_MANAGED`):
/// shapes, device memory and I/O addresses are bound. The per-frame calls
/// ([`Self::enqueue`], [`Self::enqueue_for_capture`]) make one virtual call
/// and never allocate. `Send`, not `Sync`.
pub struct ExecutionContext {
    // Drop order: the context before the engine.
    handle: ContextHandle,
    engine: Engine,
    shapes: Vec<Vec<i64>>,
    blockers: CaptureBlockers,
    device_memory: DeviceMemory,
    /// `updateDeviceMemorySizeForShapes` for the shapes set.
    required_memory: u64,
}

impl fmt::Debug for ExecutionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionContext")
            .field("engine", &self.engine.name())
            .field("shapes", &self.shapes)
            .field("device_memory", &self.device_memory)
            .field("capture_blockers", &self.blockers)
            .finish()
    }
}

impl ExecutionContext {
    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The device memory given at bind time.
    pub fn device_memory(&self) -> DeviceMemory {
        self.device_memory
    }

    /// Resolved shape of an I/O tensor.
    pub fn tensor_shape(&self, name: &str) -> Option<&[i64]> {
        let i = self.engine.inner.index_of(name).ok()?;
        Some(&self.shapes[i])
    }

    /// Whether `enqueueV3` can be recorded into a CUDA graph, as far as
    /// tether can tell before trying (TensorRT may still refuse: see
    /// [`Self::enqueue_for_capture`]).
    pub fn is_capture_safe(&self) -> bool {
        self.blockers.is_empty()
    }

    /// Why it is not capture-safe.
    pub fn capture_blockers(&self) -> CaptureBlockers {
        self.blockers
    }

    /// Binds new device memory and I/O addresses (`setDeviceMemoryV2`,
    /// `setTensorAddress` for every tensor), e.g. to alternate recurrent
    /// state buffers or to serve a second session from the same engine. The
    /// next enqueue (and a capture made after it) uses the new addresses.
    ///
    /// # Safety
    /// As [`UnboundContext::bind`]; additionally no enqueue or graph replay
    /// using the previous addresses may still be running on the GPU unless
    /// those addresses also stay valid.
    ///
    /// # Errors
    /// As [`UnboundContext::bind`].
    #[allow(unsafe_code)]
    pub unsafe fn rebind(
        &mut self,
        device_memory: DeviceMemory,
        bindings: &[TensorBinding<'_>],
    ) -> Result<(), TrtError> {
        let engine = self.engine.inner.clone();
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            apply_bindings(
                &engine,
                &mut self.handle,
                self.required_memory,
                device_memory,
                bindings,
            )
        }?;
        self.device_memory = device_memory;
        Ok(())
    }

    /// Enqueues one inference on `stream` (`enqueueV3`, one call, no
    /// allocation).
    ///
    /// # Safety
    /// `stream` must be a valid `cudaStream_t` (or null for the legacy default
    /// stream) of the CUDA context the engine lives in, and the memory given
    /// to [`UnboundContext::bind`] must still be allocated.
    ///
    /// # Errors
    /// [`EnqueueError::Failed`] (TensorRT's reason is in
    /// [`Runtime::recorded_errors`]).
    #[allow(unsafe_code)]
    #[inline]
    pub unsafe fn enqueue(&mut self, stream: *mut c_void) -> Result<(), EnqueueError> {
        if self.handle.enqueue_v3(stream) {
            Ok(())
        } else {
            Err(EnqueueError::Failed)
        }
    }

    /// Enqueues while `stream` is capturing into a CUDA graph: the hook of
    /// the graph layer. Run one [`Self::enqueue`] outside capture (and
    /// synchronise) first: the first enqueue after creation does
    /// initialisation that is illegal under capture.
    ///
    /// # Safety
    /// As [`Self::enqueue`]; `stream` is a non-default stream in capture mode.
    ///
    /// # Errors
    /// [`CaptureError::KnownNotCapturable`] without calling TensorRT when a
    /// [`CaptureBlocker`] applies; [`CaptureError::NotCapturable`] when
    /// `enqueueV3` returned false under capture: discard the capture and run
    /// eagerly.
    #[allow(unsafe_code)]
    #[inline]
    pub unsafe fn enqueue_for_capture(&mut self, stream: *mut c_void) -> Result<(), CaptureError> {
        if let Some(b) = self.blockers.iter().next() {
            return Err(CaptureError::KnownNotCapturable(b));
        }
        if self.handle.enqueue_v3(stream) {
            Ok(())
        } else {
            Err(CaptureError::NotCapturable)
        }
    }
}

/// `setDeviceMemoryV2` and `setTensorAddress` for every I/O tensor of `engine`.
///
/// # Safety
/// As [`UnboundContext::bind`].
#[allow(unsafe_code)]
unsafe fn apply_bindings(
    engine: &EngineInner,
    handle: &mut ContextHandle,
    required: u64,
    device_memory: DeviceMemory,
    bindings: &[TensorBinding<'_>],
) -> Result<(), TrtError> {
    let rt = &engine.runtime;
    let _guard = rt.lock();
    rt.recorder.clear();
    let mark = diagnostics::log_mark();
    if device_memory.size < required {
        return Err(TrtError::DeviceMemoryTooSmall {
            needed: required,
            given: device_memory.size,
            address: device_memory.address,
        });
    }
    let mut addresses = vec![None; engine.tensors.len()];
    for b in bindings {
        addresses[engine.index_of(b.name)?] = Some(b.address);
    }
    handle.set_device_memory_v2(device_memory.address, device_memory.size as i64);
    for (t, a) in engine.tensors.iter().zip(&addresses) {
        let address = a.ok_or_else(|| TrtError::Unbound {
            name: t.name().to_string(),
        })?;
        if !handle.set_tensor_address(&t.name, address) {
            return Err(TrtError::TensorAddress {
                name: t.name().to_string(),
                address,
                messages: rt.messages(mark),
            });
        }
    }
    Ok(())
}
