//! The engines compiled into this build, each on the [`crate::backend`] shape.
//!
//! | feature | backend | placement | capture |
//! |---|---|---|---|
//! | `tract-cpu` | [`tract_cpu::TractCpu`]: ONNX on the CPU (tract) | host | — |
//! | `tract-cuda` | [`tract_cuda::TractCuda`]: ONNX on tract's CUDA runtime | device | no: runs eagerly between graphs |
//! | `tensorrt` | [`tensorrt::TensorRtBackend`]: a bundle's TensorRT plan | device | yes |
//!
//! [`crate::device::COMPILED_BACKENDS`] lists them in selection order; that list is what
//! engine selection sees.

/// Load-time rewrites shared by the tract-based backends (fixed inputs, constant folding).
#[cfg(any(feature = "tract-cpu", feature = "cuda-native"))]
pub(crate) mod onnx_front;
#[cfg(feature = "tensorrt")]
pub mod tensorrt;
#[cfg(feature = "tract-cpu")]
pub mod tract_cpu;
#[cfg(feature = "tract-cuda")]
pub mod tract_cuda;
