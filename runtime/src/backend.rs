//! Backends, plans and executors: the shape every engine has.
//!
//! The split follows tract (`SimplePlan` / `SimpleState`), TensorRT (`ICudaEngine` /
//! `IExecutionContext`) and Triton (model / model instance):
//!
//! 1. A [`Backend`] turns one network of a bundle (ONNX bytes, a TensorRT plan) into an
//!    immutable, shareable [`Plan`] for fixed input shapes: parsing, lowering, weights
//!    uploaded once, kernels and algorithms chosen once.
//! 2. A plan creates executors, the only mutable per-run state. Host and device executors
//!    are distinct types: a [`HostExecutor`] reads and writes host buffers the caller passes;
//!    a [`DeviceExecutor`] is bound to a whole set of device regions (every I/O tensor and its
//!    workspace, all inside the session arena), may be re-bound before capture (recurrent
//!    state ping-pong, two cameras on one plan), and enqueues on the stream it is given,
//!    told whether that stream is being captured into a CUDA graph.
//!
//! A backend never allocates device memory per run and never owns the session's memory:
//! its executor's workspace is a region of the arena the session allocates once
//! ([`DevicePlan::workspace`]).

use std::fmt;
use std::sync::Arc;

pub use tether_targets::EngineKind;

use crate::tensor::TensorSpec;

/// Where an executor's I/O tensors live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Host memory: the executor reads and writes buffers the caller passes.
    Host,
    /// Device memory: the executor is bound to device regions of a session arena.
    Device,
}

/// The inputs and outputs of a prepared network, in the network's order, with concrete
/// shapes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoSpec {
    /// Input tensors.
    pub inputs: Vec<TensorSpec>,
    /// Output tensors.
    pub outputs: Vec<TensorSpec>,
}

impl IoSpec {
    /// Index of the input called `name`.
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|t| t.name == name)
    }
    /// Index of the output called `name`.
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|t| t.name == name)
    }
}

/// What a network is stored as in the bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// An ONNX model (protobuf).
    Onnx,
    /// A serialized TensorRT engine.
    TensorRtPlan,
}

/// One network of a bundle, as a backend receives it.
#[derive(Clone, Copy, Debug)]
pub struct NetworkSource<'a> {
    /// The network's name in the bundle (`<family>/<network>/...`), for messages.
    pub network: &'a str,
    /// What `bytes` holds.
    pub format: SourceFormat,
    /// The payload, straight from the bundle mapping.
    pub bytes: &'a [u8],
    /// The bundle's target record for a TensorRT plan (version, SM, compatibility flags).
    pub target: Option<tether_targets::Offer>,
}

pub use crate::vocab::Precision;

/// How a network is prepared.
#[derive(Clone, Debug, Default)]
pub struct PrepareOptions {
    /// Concrete shape of every network input, in the network's input order, the inputs in
    /// [`PrepareOptions::fixed_inputs`] left out.
    pub input_shapes: Vec<Vec<usize>>,
    /// Arithmetic precision.
    pub precision: Precision,
    /// Inputs replaced by constants before the network is optimised (e.g. Silero VAD's
    /// sample rate `sr`, always 16000): the engine folds what depends on them once, at
    /// prepare time, and they are not inputs of the plan.
    pub fixed_inputs: Vec<FixedInput>,
    /// The largest tensor the network may hold at these input shapes, in bytes (`None`:
    /// [`DEFAULT_MAX_TENSOR_BYTES`]). Checked by the tract-based engines (tract CPU,
    /// tract-cuda, the native GPU engine) on every tensor whose shape is known before tract
    /// evaluates the node that makes it: a network whose constants ask for more (a mutated
    /// `Range` bound, a `ConstantOfShape`, `Expand` or `Tile` fed a huge shape) is refused
    /// with [`PrepareError::TooLarge`] instead of exhausting the machine's memory.
    pub max_tensor_bytes: Option<u64>,
}

/// The default of [`PrepareOptions::max_tensor_bytes`]: 4 GiB.
///
/// Twice the largest tensor a self-contained ONNX file can carry (protobuf caps a message,
/// the whole model, at 2 GiB, and tether bundles carry no external data), and half the
/// memory of the smallest device tether targets (Jetson Orin Nano, 8 GB shared by CPU and
/// GPU): a real network at its prepared shapes stays far below it, while a tensor above it
/// cannot be held on every target anyway.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 4 << 30;

impl PrepareOptions {
    /// [`PrepareOptions::max_tensor_bytes`], the default applied.
    pub fn tensor_limit(&self) -> u64 {
        self.max_tensor_bytes.unwrap_or(DEFAULT_MAX_TENSOR_BYTES)
    }
}

/// A tensor of a network over [`PrepareOptions::max_tensor_bytes`] (or of no sensible
/// size), found before the engine materialised it ([`PrepareError::TooLarge`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "tensor `{tensor}` (output {output} of node `{node}`, {op}) has shape [{}] of {dtype}: {excess}",
    dims_text(.shape)
)]
pub struct TensorTooLarge {
    /// The tensor's name in the network (the node's name and output index when unnamed).
    pub tensor: String,
    /// The node that makes it.
    pub node: String,
    /// The node's operator.
    pub op: String,
    /// Its output slot on the node.
    pub output: usize,
    /// Its shape, as far as known before evaluation (`None`: not known).
    pub shape: Vec<Option<i64>>,
    /// Its element type (`?` when not known; its size then counts as 1 byte).
    pub dtype: String,
    /// What is wrong with its size.
    pub excess: Excess,
    /// The limit ([`PrepareOptions::max_tensor_bytes`]).
    pub limit: u64,
}

/// Why a tensor's size is refused ([`TensorTooLarge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Excess {
    /// It would hold this many bytes, over the limit.
    #[error("{0} bytes, over the limit")]
    Bytes(u64),
    /// A dimension is negative.
    #[error("a negative dimension")]
    NegativeDimension,
    /// Its size does not fit in 64 bits, or a `Range` step is 0.
    #[error("a size past 2^64 bytes")]
    Unbounded,
    /// A size input (a shape, repeat count, pad, depth) holds this value, outside the
    /// 32-bit range tract reads shape values through (its shape inference would see a
    /// truncated value, its evaluation the real one).
    #[error("size value {0} is outside the 32-bit range tract's shape inference reads")]
    SizeValue(i64),
}

fn dims_text(shape: &[Option<i64>]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| d.map_or_else(|| "?".to_string(), |d| d.to_string()))
        .collect();
    dims.join(", ")
}

/// A network input given a constant value at prepare time ([`PrepareOptions::fixed_inputs`]).
///
/// The value replaces the input inside the graph, as if the network had been exported with
/// it as a constant: the input disappears from the plan's [`IoSpec`], and whatever depends
/// only on it (a branch on the sample rate, a shape computation) is evaluated once when the
/// network is prepared. Engines that cannot substitute a value (a TensorRT plan, built
/// offline) refuse the network with a typed error, and selection moves on to the next one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedInput {
    /// The input's name in the network.
    pub name: String,
    /// Element type; must equal the input's declared type.
    pub dtype: crate::tensor::DType,
    /// Shape (`[]` for a scalar); must fit the input's declared rank and fixed dimensions.
    pub shape: Vec<usize>,
    /// The values, row-major, native endianness (`shape`'s element count times the dtype's
    /// size).
    pub bytes: Vec<u8>,
}

impl FixedInput {
    /// `name` fixed to `values` of shape `shape` (row-major).
    pub fn new<T: crate::tensor::Element>(
        name: impl Into<String>,
        shape: Vec<usize>,
        values: &[T],
    ) -> Self {
        FixedInput {
            name: name.into(),
            dtype: T::DTYPE,
            shape,
            bytes: zerocopy::IntoBytes::as_bytes(values).to_vec(),
        }
    }

    /// A scalar `i64` input (`sr = 16000`).
    pub fn scalar_i64(name: impl Into<String>, value: i64) -> Self {
        Self::new(name, Vec::new(), &[value])
    }
}

impl fmt::Display for FixedInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::tensor::DType;
        write!(f, "{} {}{:?}", self.name, self.dtype, self.shape)?;
        let b = self.bytes.as_slice();
        match (self.shape.is_empty(), self.dtype) {
            (true, DType::I64) if b.len() == 8 => {
                let v = i64::from_ne_bytes(b.try_into().map_err(|_| fmt::Error)?);
                write!(f, " = {v}")
            }
            (true, DType::I32) if b.len() == 4 => {
                let v = i32::from_ne_bytes(b.try_into().map_err(|_| fmt::Error)?);
                write!(f, " = {v}")
            }
            (true, DType::F32) if b.len() == 4 => {
                let v = f32::from_ne_bytes(b.try_into().map_err(|_| fmt::Error)?);
                write!(f, " = {v}")
            }
            _ => Ok(()),
        }
    }
}

/// Device memory an executor needs besides its I/O tensors, placed by the session inside
/// its one arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceSpec {
    /// Bytes.
    pub bytes: usize,
    /// Alignment in bytes (a power of two, at least 256).
    pub align: usize,
}

/// A plan's device memory, for `inspect`/`bench` and the session's memory budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanMemory {
    /// Weights uploaded once per plan (shared by every executor of the plan).
    pub weights_bytes: usize,
    /// Of the workspace, bytes that hold intermediate tensors (activations).
    pub activation_bytes: usize,
}

/// Whether an executor's enqueue may be recorded into a CUDA graph.
///
/// An enqueue is capture-safe when it only enqueues asynchronous work on the stream it is
/// given: no allocation, no synchronisation, no host-side decision that depends on device
/// data, no re-planning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureSafety {
    /// Enqueues only asynchronous work on the given stream.
    Safe,
    /// Must run eagerly; the reason is meant for the load log.
    Unsafe(&'static str),
}

/// Whether the stream an executor enqueues on is being captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueue {
    /// Eager execution.
    Eager,
    /// The stream is being captured into a CUDA graph: an executor that discovers it cannot
    /// be captured returns [`RunError::NotCapturable`] instead of enqueuing.
    Capturing,
}

/// Error from an executor's per-run calls.
///
/// Small and `Copy`: a failing frame never reaches the allocator. Backends log the full
/// backend message (through the `log` facade) before returning it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The backend reported a failure; `what` names the failing step.
    #[error("{engine} engine failed during {what} (see the log for the backend's message)")]
    Backend {
        /// The engine that failed.
        engine: EngineKind,
        /// The step that failed, e.g. "run" or "enqueueV3".
        what: &'static str,
    },
    /// A buffer passed to an executor has the wrong size for its tensor.
    #[error("{what} buffer {index} holds {actual} bytes, the tensor needs {expected}")]
    BufferSize {
        /// "input", "output" or "workspace".
        what: &'static str,
        /// Index among the tensors of that kind.
        index: usize,
        /// Bytes the tensor needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The wrong number of buffers was passed.
    #[error("{what}: {actual} buffers given, the network has {expected}")]
    BufferCount {
        /// "inputs" or "outputs".
        what: &'static str,
        /// Tensors the network has.
        expected: usize,
        /// Buffers given.
        actual: usize,
    },
    /// A device executor ran before [`DeviceExecutor::bind`].
    #[error("{engine} executor enqueued before it was bound")]
    NotBound {
        /// The engine.
        engine: EngineKind,
    },
    /// The executor cannot be recorded into a CUDA graph (found out while capturing).
    #[error("{engine} executor cannot be captured into a CUDA graph")]
    NotCapturable {
        /// The engine.
        engine: EngineKind,
    },
    /// An engine panicked; the panic was caught at the engine boundary.
    #[error("{engine} engine panicked during {what} (caught; see the log)")]
    Panicked {
        /// The engine.
        engine: EngineKind,
        /// The step.
        what: &'static str,
    },
    /// A region id that is not a region of the right kind in this session.
    #[error("region {index} is not {what} of this session")]
    NoSuchRegion {
        /// The region's index.
        index: usize,
        /// "an input region", "an output region", "a region".
        what: &'static str,
    },
    /// The operation is not available here (e.g. a stage without a host flavour).
    #[error("not supported: {what}")]
    Unsupported {
        /// What was asked.
        what: &'static str,
    },
    /// A device-memory operation (a device buffer's address, a run on a caller's CUDA
    /// stream) asked of a session that does not run on a CUDA device: names the device and
    /// the engine it runs on instead.
    #[error("{what} needs a session on a CUDA device; this one runs on {device} (engine {engine})")]
    NotOnDevice {
        /// What was asked, e.g. "a device buffer".
        what: &'static str,
        /// The device the session's model resolved to (`cpu`, or `cuda:N` with a host
        /// engine chosen).
        device: crate::device::Device,
        /// The engine running the session's network.
        engine: EngineKind,
    },
    /// A request state operation that cannot be done (a run that would overflow a cache).
    #[error(transparent)]
    State(#[from] crate::session::StateError),
    /// A CUDA driver call failed.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Driver(#[from] crate::cuda::DriverError),
}

/// Why a network could not be prepared. Load time only: may allocate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// The backend does not lower an operator or attribute of the network (the native GPU
    /// engine names the node and the op); selection falls back to the next engine.
    #[error("{engine} cannot run network `{network}`: node `{node}` ({op}): {detail}")]
    Unsupported {
        /// The engine that refused.
        engine: EngineKind,
        /// The network.
        network: String,
        /// The node's name in the graph.
        node: String,
        /// The operator.
        op: String,
        /// What is not supported.
        detail: String,
    },
    /// The network is malformed or does not fit the requested shapes.
    #[error("{engine} could not prepare network `{network}`: {message}")]
    Backend {
        /// The engine.
        engine: EngineKind,
        /// The network.
        network: String,
        /// The backend's message chain.
        message: String,
    },
    /// The backend panicked while preparing; caught at the engine boundary.
    #[error("{engine} panicked while preparing network `{network}`: {message}")]
    Panicked {
        /// The engine.
        engine: EngineKind,
        /// The network.
        network: String,
        /// The panic payload, when it is a string.
        message: String,
    },
    /// A tensor of the network would exceed [`PrepareOptions::max_tensor_bytes`] (or has a
    /// negative dimension): refused before the engine allocates it.
    #[error("{engine} refused network `{network}`: {tensor} (limit {} bytes)", .tensor.limit)]
    TooLarge {
        /// The engine.
        engine: EngineKind,
        /// The network.
        network: String,
        /// The tensor, its node, shape and size.
        tensor: Box<TensorTooLarge>,
    },
    /// An I/O tensor has an element type or shape the backend cannot bind.
    #[error("network `{network}`: tensor `{tensor}`: {detail}")]
    Io {
        /// The network.
        network: String,
        /// The tensor.
        tensor: String,
        /// What is wrong (dtype, dynamic dimension, batch).
        detail: String,
    },
    /// The device layer failed (context, allocation, kernel image).
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
}

/// A backend: prepares networks into plans.
pub trait Backend: Send + Sync {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
    /// Where its executors' I/O lives.
    fn placement(&self) -> Placement;
    /// Prepare `source` for the given input shapes. Heavy work (parsing, lowering, weight
    /// upload, algorithm choice) happens here, once.
    ///
    /// # Errors
    /// [`PrepareError`]; a panic inside the backend is caught and returned as
    /// [`PrepareError::Panicked`].
    fn prepare(
        &self,
        source: &NetworkSource<'_>,
        options: &PrepareOptions,
    ) -> Result<Plan, PrepareError>;
}

/// A prepared network: immutable, shareable (`Arc`), creating executors.
#[derive(Clone)]
pub enum Plan {
    /// A plan whose executors run on the host.
    Host(Arc<dyn HostPlan>),
    /// A plan whose executors run on a CUDA device.
    #[cfg(feature = "cuda")]
    Device(Arc<dyn DevicePlan>),
}

impl Plan {
    /// The engine.
    pub fn kind(&self) -> EngineKind {
        match self {
            Plan::Host(p) => p.kind(),
            #[cfg(feature = "cuda")]
            Plan::Device(p) => p.kind(),
        }
    }
    /// The I/O tensors.
    pub fn io(&self) -> &IoSpec {
        match self {
            Plan::Host(p) => p.io(),
            #[cfg(feature = "cuda")]
            Plan::Device(p) => p.io(),
        }
    }
    /// Host or device.
    pub fn placement(&self) -> Placement {
        match self {
            Plan::Host(_) => Placement::Host,
            #[cfg(feature = "cuda")]
            Plan::Device(_) => Placement::Device,
        }
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("engine", &self.kind())
            .field("io", self.io())
            .finish()
    }
}

/// A plan whose executors run on the host.
pub trait HostPlan: Send + Sync {
    /// The engine.
    fn kind(&self) -> EngineKind;
    /// The I/O tensors.
    fn io(&self) -> &IoSpec;
    /// A new executor (per-run state).
    ///
    /// # Errors
    /// [`PrepareError`] when the state cannot be created.
    fn executor(&self) -> Result<Box<dyn HostExecutor>, PrepareError>;
}

/// Per-run state of a host plan.
pub trait HostExecutor: Send {
    /// Execute once: `inputs[i]` holds input `i` (`byte_len` bytes, native endianness, any
    /// alignment), `outputs[i]` receives output `i`.
    ///
    /// # Errors
    /// [`RunError::BufferCount`], [`RunError::BufferSize`], [`RunError::Backend`],
    /// [`RunError::Panicked`].
    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RunError>;
}

/// The device addresses a device executor is bound to: every I/O tensor and its workspace,
/// all regions of one session arena.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug)]
pub struct Bindings<'a> {
    /// One region per input, in the plan's order.
    pub inputs: &'a [crate::cuda::DeviceRegion],
    /// One region per output, in the plan's order.
    pub outputs: &'a [crate::cuda::DeviceRegion],
    /// The workspace ([`DevicePlan::workspace`] bytes or more).
    pub workspace: crate::cuda::DeviceRegion,
}

/// A plan whose executors run on one CUDA device.
#[cfg(feature = "cuda")]
pub trait DevicePlan: Send + Sync {
    /// The engine.
    fn kind(&self) -> EngineKind;
    /// The I/O tensors.
    fn io(&self) -> &IoSpec;
    /// The device the plan was prepared on (its CUDA ordinal).
    fn ordinal(&self) -> usize;
    /// Workspace an executor needs (intermediate tensors, library scratch), placed in the
    /// session arena.
    fn workspace(&self) -> WorkspaceSpec;
    /// Device memory held by the plan and used by its workspace.
    fn memory(&self) -> PlanMemory;
    /// Whether executors may be captured into a CUDA graph.
    fn capture_safety(&self) -> CaptureSafety;
    /// A new executor on `ctx` (the plan's device).
    ///
    /// # Errors
    /// [`PrepareError`] when the per-run state cannot be created.
    fn executor(&self, ctx: &crate::cuda::Context)
    -> Result<Box<dyn DeviceExecutor>, PrepareError>;
}

/// Per-run state of a device plan, bound to regions of a session arena.
#[cfg(feature = "cuda")]
pub trait DeviceExecutor: Send {
    /// Bind every I/O tensor and the workspace. May be called again before capture (the
    /// last binding is what a capture records).
    ///
    /// # Safety
    /// Every region must be device memory of the plan's device, at least as large as the
    /// tensor (or workspace) it is bound to, and stay allocated and unused by anything else
    /// running concurrently for as long as the executor may enqueue with this binding
    /// (including every replay of a graph captured with it).
    ///
    /// # Errors
    /// [`RunError::BufferCount`] / [`RunError::BufferSize`] when a region does not fit.
    unsafe fn bind(&mut self, bindings: &Bindings<'_>) -> Result<(), RunError>;

    /// Enqueue one execution on `stream` without synchronising. An executor may spread the
    /// work over streams of its own, forked from `stream` and joined back into it with
    /// events before returning, so that everything enqueued on `stream` afterwards (and a
    /// graph captured from it) comes after the whole execution.
    ///
    /// # Errors
    /// [`RunError::NotBound`], [`RunError::NotCapturable`] (under capture),
    /// [`RunError::Backend`], [`RunError::Driver`].
    fn enqueue(&mut self, stream: &crate::cuda::Stream, mode: Enqueue) -> Result<(), RunError>;

    /// Per-step GPU times on `stream`, for profiling (the counterpart of
    /// `trtexec --dumpProfile`): the run is captured into a CUDA graph with an event record
    /// node between every two steps, the graph is replayed `runs` times, and each step
    /// reports its median in milliseconds. The event nodes add a little to each step.
    /// Synchronises; allocates; not for the hot path. `None`: the engine runs as one opaque
    /// call and has no steps to time (the default).
    ///
    /// # Errors
    /// As [`DeviceExecutor::enqueue`], plus driver errors from the events and the capture.
    fn step_times(
        &mut self,
        _stream: &crate::cuda::Stream,
        _runs: usize,
    ) -> Option<Result<Vec<StepTime>, RunError>> {
        None
    }
}

/// One step's GPU time from [`DeviceExecutor::step_times`].
#[cfg(feature = "cuda")]
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    /// The step's kind in the engine (`conv`, `gemm`, `elementwise`, ...).
    pub kind: &'static str,
    /// The step and the network node it came from, as the engine describes it.
    pub label: String,
    /// Median GPU time over the runs, milliseconds.
    pub ms: f64,
}

thread_local! {
    /// Depth of engine boundaries ([`catch_prepare`], [`catch_run`]) on this thread.
    static IN_ENGINE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Run `f` inside an engine boundary: a panic is caught (and, with [`quiet_engine_panics`]
/// installed, not printed: the caller reports it as a typed error).
fn guarded<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    IN_ENGINE.with(|c| c.set(c.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    IN_ENGINE.with(|c| c.set(c.get() - 1));
    r
}

/// Install (once per process) a panic hook that stays silent for panics inside an engine
/// boundary — they become typed errors ([`PrepareError::Panicked`], [`RunError::Panicked`])
/// and are logged at `error` level — and hands every other panic to the hook that was
/// installed before. For applications that print their own errors (the `tether` CLI).
pub fn quiet_engine_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_ENGINE.with(|c| c.get()) == 0 {
                previous(info);
            }
        }));
    });
}

/// Run `f`, turning a panic inside a backend into [`PrepareError::Panicked`] naming the
/// engine and the network (no panic from an engine escapes its boundary).
pub fn catch_prepare<T>(
    engine: EngineKind,
    network: &str,
    f: impl FnOnce() -> Result<T, PrepareError>,
) -> Result<T, PrepareError> {
    match guarded(f) {
        Ok(r) => r,
        Err(payload) => {
            let message = panic_message(payload.as_ref());
            log::error!("{engine} panicked while preparing network `{network}`: {message}");
            Err(PrepareError::Panicked {
                engine,
                network: network.to_string(),
                message,
            })
        }
    }
}

/// Run `f`, turning a panic inside a backend into [`RunError::Panicked`].
pub fn catch_run<T>(
    engine: EngineKind,
    what: &'static str,
    f: impl FnOnce() -> Result<T, RunError>,
) -> Result<T, RunError> {
    match guarded(f) {
        Ok(r) => r,
        Err(payload) => {
            log::error!(
                "{engine} panicked during {what}: {}",
                panic_message(payload.as_ref())
            );
            Err(RunError::Panicked { engine, what })
        }
    }
}

/// The text of a panic payload (`&str` or `String`), else a placeholder.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}
