//! The engine interface every backend implements.
//!
//! An *engine* executes one network: the tract CPU engine ([`crate::cpu`]), the
//! portable GPU engine and the TensorRT engine implement the same trait so that
//! family pipelines and the module API never name a backend.
//!
//! The life cycle follows tract's split between an immutable plan and a mutable
//! per-run state, and TensorRT's engine / execution context split:
//!
//! 1. **load** (backend specific constructor): parse or deserialize the network,
//!    fix every input shape, and allocate every I/O buffer once;
//! 2. **bind** ([`Engine::bind_device`], device engines only): hand the engine
//!    the device addresses of its I/O tensors, once, at load;
//! 3. **run** ([`Engine::run`]): execute with the bound buffers. For a
//!    [`Placement::Host`] engine the inputs are written through
//!    [`Engine::input_host_mut`] and the outputs read through
//!    [`Engine::output_host`].
//!
//! [`Engine::capture_safety`] tells the graph layer whether `run` may be
//! recorded into a CUDA graph.

use std::ffi::c_void;

pub use tether_bundle::{DType, EngineKind, IoMode};

pub use crate::tensor::{MAX_RANK, TensorSpec};

/// Where an engine's I/O buffers live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Host memory owned by the engine ([`Engine::input_host_mut`], [`Engine::output_host`]).
    Host,
    /// Device memory owned by the caller and bound with [`Engine::bind_device`].
    Device,
}

/// Whether an engine's [`Engine::run`] may be recorded into a CUDA graph.
///
/// A run is capture-safe when it only enqueues asynchronous work on the stream
/// it is given: no allocation, no synchronisation, no host-side decisions that
/// depend on device data, no shape-dependent re-planning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureSafety {
    /// `run` enqueues only asynchronous work on the given stream.
    Safe,
    /// `run` must execute eagerly; the reason is meant for the load log.
    Unsafe(&'static str),
}

/// An opaque CUDA stream handle (`CUstream` / `cudaStream_t`), or null for
/// engines that run on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamHandle(pub *mut c_void);

impl StreamHandle {
    /// The null handle used by host engines.
    pub const HOST: StreamHandle = StreamHandle(std::ptr::null_mut());
}

// SAFETY: a stream handle is an opaque token; CUDA streams may be used from any
// thread once the owning context is current there. The handle itself carries no
// thread affinity.
unsafe impl Send for StreamHandle {}

/// Error from an engine's hot-path calls.
///
/// Deliberately small and `Copy`: a failing frame must not allocate. Backends
/// log the full backend message (through the `log` facade) before returning it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The backend reported a failure; `what` names the failing step.
    #[error("{engine:?} engine failed during {what} (see the log for the backend's message)")]
    Backend {
        /// The engine that failed.
        engine: EngineKind,
        /// The step that failed, e.g. "run" or "enqueueV3".
        what: &'static str,
    },
    /// An I/O index outside the engine's tensor list.
    #[error("{mode:?} tensor index {index} out of range: the engine has {count}")]
    NoSuchTensor {
        /// Input or output.
        mode: IoMode,
        /// The index asked for.
        index: usize,
        /// How many tensors of that mode exist.
        count: usize,
    },
    /// The operation needs a different [`Placement`].
    #[error("{engine:?} engine does not support {what}")]
    Unsupported {
        /// The engine asked.
        engine: EngineKind,
        /// The unsupported operation.
        what: &'static str,
    },
    /// A host buffer is misaligned or of a ragged length for its element type.
    #[error("host buffer of {len} bytes is misaligned or not a whole number of elements")]
    BadHostBuffer {
        /// Buffer length in bytes.
        len: usize,
    },
    /// An output was read before the first successful run.
    #[error("output {index} read before the engine ran")]
    NotRun {
        /// Output index.
        index: usize,
    },
}

/// One executable network with preallocated I/O.
pub trait Engine: Send {
    /// Which backend this is.
    fn kind(&self) -> EngineKind;

    /// Input tensors, in the network's order.
    fn inputs(&self) -> &[TensorSpec];

    /// Output tensors, in the network's order.
    fn outputs(&self) -> &[TensorSpec];

    /// Where I/O buffers live.
    fn placement(&self) -> Placement;

    /// Whether [`Engine::run`] may be captured into a CUDA graph.
    fn capture_safety(&self) -> CaptureSafety;

    /// Writable host buffer of input `index` (`inputs()[index].byte_len()` bytes,
    /// aligned for its dtype).
    ///
    /// # Errors
    /// [`RunError::NoSuchTensor`] for a bad index; [`RunError::Unsupported`] for
    /// a [`Placement::Device`] engine (the default).
    fn input_host_mut(&mut self, index: usize) -> Result<&mut [u8], RunError> {
        let _ = index;
        Err(RunError::Unsupported {
            engine: self.kind(),
            what: "host buffers (device-placed engine)",
        })
    }

    /// Host buffer of output `index`, valid after a successful [`Engine::run`].
    ///
    /// # Errors
    /// [`RunError::NoSuchTensor`], [`RunError::NotRun`], or
    /// [`RunError::Unsupported`] for a device engine (the default).
    fn output_host(&self, index: usize) -> Result<&[u8], RunError> {
        let _ = index;
        Err(RunError::Unsupported {
            engine: self.kind(),
            what: "host buffers (device-placed engine)",
        })
    }

    /// Bind the device address of an I/O tensor (device engines, once at load).
    ///
    /// # Safety
    /// `address` must point to at least `bytes` bytes of device memory that stay
    /// allocated, and are not used for anything else, for as long as this engine
    /// runs.
    ///
    /// # Errors
    /// [`RunError::Unsupported`] for host engines (the default).
    unsafe fn bind_device(
        &mut self,
        mode: IoMode,
        index: usize,
        address: u64,
        bytes: usize,
    ) -> Result<(), RunError> {
        let _ = (mode, index, address, bytes);
        Err(RunError::Unsupported {
            engine: self.kind(),
            what: "device bindings",
        })
    }

    /// Execute the network once with the current inputs.
    ///
    /// Host engines ignore `stream` and return when the outputs are ready;
    /// device engines enqueue on `stream` and return without synchronising.
    ///
    /// # Errors
    /// [`RunError::Backend`] when the backend fails (its message is logged).
    fn run(&mut self, stream: StreamHandle) -> Result<(), RunError>;

    /// Index of the input called `name`.
    fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs().iter().position(|t| t.name == name)
    }

    /// Index of the output called `name`.
    fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs().iter().position(|t| t.name == name)
    }
}
