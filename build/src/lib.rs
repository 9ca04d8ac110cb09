//! tether's offline side: what builds bundles and is never needed on the device.
//!
//! - [`onnx`]: ONNX inspection (declared I/O, metadata, opset) for family recipes;
//! - [`trtexec`]: TensorRT plans built by driving NVIDIA's `trtexec`;
//! - [`plan`]: adding a built plan to a bundle writer as a network's target;
//! - [`selftest_model`]: the small generated ONNX model `tether doctor --self-test` runs.
//!
//! The device-side runtime (`tether-runtime`) depends on none of this.
#![warn(missing_docs)]

pub mod onnx;
pub mod plan;
pub mod selftest_model;
pub mod trtexec;

pub use onnx::{
    GatherTable, OnnxError, OnnxInfo, WidthMasked, gather_tables, inspect_onnx, mask_width_padding,
    output_dim_table,
};
