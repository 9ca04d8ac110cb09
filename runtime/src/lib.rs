//! tether runtime: the engine interface, the engines, and the module API.
//!
//! - [`engine`]: the [`engine::Engine`] trait every backend implements
//!   (I/O tensor descriptors, bind, run, capture safety).
//! - [`cpu`] (feature `cpu`): the portable tract CPU engine and ONNX inspection.
//! - [`module`]: a bundle's network as named tensors (the module API).
//! - [`tensorrt`]: TensorRT loaded at run time through its interface tables.
#![warn(missing_docs)]

pub mod backend;
pub mod engine;
pub mod host;
pub mod module;
pub mod tensor;
pub mod tensorrt;

#[cfg(feature = "cpu")]
pub mod cpu;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use engine::{CaptureSafety, Engine, Placement, RunError, StreamHandle, TensorSpec};
pub use module::{Module, ModuleError, ModuleOptions};
