//! tether runtime: everything that runs on the device.
//!
//! - [`model`]: a bundle's networks, each prepared on the engine chosen for the real device
//!   ([`Model`]), and the named-tensor API ([`NetworkSession`]: one network).
//! - [`backend`]: the shape every engine has: a [`Backend`] prepares an immutable, shared
//!   [`Plan`] per network; plans create host or device executors.
//! - [`backends`]: the engines compiled into this build (features `tract-cpu`, `tract-cuda`,
//!   `tensorrt`, `cuda-native`).
//! - [`session`]: a family's stages and networks prepared once for an input geometry and run
//!   without allocating: on the host, or on a CUDA device in one arena and captured graphs.
//! - [`tensor`]: tensor descriptors, typed views, aligned host buffers.
//! - [`cuda`] (feature `cuda`): the CUDA device layer (driver loaded at run time).
//! - [`tensorrt`]: TensorRT loaded at run time through its interface tables.
//! - [`vocab`]: the run-time vocabulary ([`Precision`], [`SyncPolicy`], [`MappedIo`]) the model
//!   API, sessions, families and the CLI share.
//!
//! Nothing here is used only to build bundles: ONNX inspection, `trtexec` and plan assembly
//! live in the `tether-build` crate.
#![warn(missing_docs)]

pub mod backend;
pub mod backends;
pub mod device;
pub mod error;
pub mod model;
pub mod session;
pub mod shapes;
pub mod tensor;
pub mod tensorrt;
pub mod vocab;

#[cfg(feature = "cuda")]
pub mod cuda;

#[cfg(feature = "cuda-native")]
pub mod native;

pub use backend::{
    Backend, CaptureSafety, EngineKind, Excess, FixedInput, HostExecutor, HostPlan, IoSpec,
    Placement, Plan, Precision, PrepareError, RunError, TensorTooLarge,
};
#[cfg(feature = "cuda")]
pub use backend::{Bindings, DeviceExecutor, DevicePlan, Enqueue, StepTime};
pub use device::{COMPILED_BACKENDS, Device};
pub use error::Error;
pub use model::{
    MAX_CPU_THREADS, Model, ModelOptions, Network, NetworkSession, threads_beyond_cores,
};
pub use session::{DeviceBuffer, IoMemory, PipelineSpec, RegionId, RegionKind, Session, Stage};
pub use shapes::{ShapePolicy, ShapeSessions};
pub use tensor::{DType, Element, HostBuffer, IoMode, TensorSpec};
pub use vocab::{MappedIo, ParseVocabError, SyncPolicy};
