//! The TensorRT engine layer: runs TensorRT plans from a bundle on any Linux
//! system with TensorRT 10.x (JetPack 6, DRIVE OS 7) or 11.x (data center)
//! installed, with nothing from NVIDIA needed to build or cross-compile.
//!
//! - **Loading** ([`TensorRt::load`]): `libnvinfer.so.11`/`.10`, the lean
//!   runtime `libnvinfer_lean.so.11`/`.10` or the dispatch runtime
//!   `libnvinfer_dispatch.so.11`/`.10`, opened at run time from an explicit
//!   path, `TETHER_TENSORRT_LIB`, or the one search list of
//!   [`tether_targets::libs`] (the dynamic loader, this architecture's package
//!   directories, pip's `tensorrt_*libs` folders); a failure reports every
//!   place tried.
//! - **Calls** go through TensorRT's internal interface tables
//!   ([`abi`]), one table per major version, later additions gated on the
//!   minor version, with the `getPImpl` self-check after each object is
//!   created. TensorRT's logger is routed to the `log` facade (target
//!   `tensorrt`); each runtime has an error recorder whose messages surface
//!   in [`TrtError`]. All `unsafe` blocks live in `ffi.rs`; the only other
//!   `unsafe` items are the three API contracts [`UnboundContext::bind`],
//!   [`ExecutionContext::enqueue`] and [`ExecutionContext::enqueue_for_capture`],
//!   which take raw device addresses and a raw `cudaStream_t`.
//! - **Compatibility gate** ([`check_plan_compatibility`]): the plan's
//!   recorded TensorRT version, SM, hardware-compatibility level and
//!   version-compatible/lean-runtime-excluded flags against the loaded
//!   library (version and flavor) and the actual GPU, before deserializing,
//!   by [`tether_targets::compat::check_plan`], the rules engine selection
//!   uses too.
//! - **Execution**: [`Runtime::deserialize`] reads the plan straight from a
//!   `&[u8]` (the bundle's mapped section; no copy);
//!   [`Engine::create_execution_context`] uses `kUSER_MANAGED` and sets the
//!   input shapes; [`UnboundContext::bind`] gives it caller-owned device memory
//!   (`setDeviceMemoryV2`) and every I/O address once; [`ExecutionContext::enqueue`]
//!   is one `enqueueV3` and allocates nothing.
//! - **Building plans** is the offline side's job (`tether-build`: `trtexec`).
//!
//! Typical use (what the TensorRT backend, `crate::backends::tensorrt`, strings together):
//!
//! ```no_run
//! # use tether_runtime::tensorrt::*;
//! # fn alloc(_: u64) -> u64 { 0 }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let trt = TensorRt::load(None)?;
//! let plan = std::fs::read("model.plan")?;
//! let target = PlanTarget { tensorrt_version: 110400, sm: Some((9, 0)), hardware_compat: 0, flags: 0 };
//! let runtime = trt.create_runtime()?;
//! let gpu = tether_targets::GpuFacts::discrete(tether_targets::Sm::new(9, 0)); // from the CUDA device layer
//! let engine = runtime.deserialize(&plan, &target.record(), gpu, &DeserializeOptions::default())?;
//! let unbound = engine.create_execution_context(&[("images", &[1, 3, 640, 640])])?;
//! let scratch = DeviceMemory { address: alloc(unbound.device_memory_size()), size: unbound.device_memory_size() };
//! let bindings: Vec<TensorBinding> = engine.io_tensors().iter().map(|t| TensorBinding {
//!     name: t.name(),
//!     address: alloc(unbound.tensor_bytes(t.name()).unwrap_or(0)),
//! }).collect();
//! // SAFETY (example): the addresses come from cudaMalloc and outlive `ctx`.
//! let mut ctx = unsafe { unbound.bind(scratch, &bindings)? };
//! let stream: *mut std::ffi::c_void = std::ptr::null_mut(); // a cudaStream_t
//! // SAFETY (example): `stream` is a valid stream of the engine's CUDA context.
//! unsafe { ctx.enqueue(stream)? };
//! # Ok(()) }
//! ```
//!
//! See `runtime/src/tensorrt/README.md` for what was and was not proved on
//! real hardware: no TensorRT builder for the H200 exists in tether's
//! environment, so a real plan has not been executed there.
#![deny(unsafe_code)]

pub mod abi;
pub mod compat;
mod diagnostics;
mod engine;
mod error;
#[allow(unsafe_code)]
mod ffi;
pub mod library;

pub use abi::{DataType, HardwareCompatibility, TensorIoMode, TensorLocation};
pub use compat::{CompatError, PlanHeader, PlanTarget, check_plan_compatibility};
pub use diagnostics::{RecordedError, Severity, logger_message_counts};
pub use engine::{
    CaptureBlocker, CaptureBlockers, DeserializeOptions, DeviceMemory, Engine, ExecutionContext,
    IoTensor, Runtime, TensorBinding, TensorRt, UnboundContext,
};
pub use error::{CaptureError, EnqueueError, LoadError, TrtError, TrtMessages};
pub use library::{ENV_LIBRARY, LoadOptions};
