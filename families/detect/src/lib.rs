//! tether detection family: YOLOv8 (Ultralytics head) object detection.
//!
//! - [`letterbox`]: u8 image -> letterboxed NCHW f32 input (the exact arithmetic
//!   shared with the onnxruntime reference and the CUDA kernels);
//! - [`decode`]: `[1, 4 + C, N]` output -> class-wise NMS -> fixed-capacity
//!   [`Detections`] (no allocation per frame);
//! - [`Detector`]: the semantic API, `Detector::load(path)?.detect(&image)`;
//! - [`recipe`] (feature `cpu`): ONNX + metadata -> `.bundle` (the build step).
//!
//! Golden evidence lives in `families/detect/golden/` (onnxruntime reference).
#![warn(missing_docs)]

pub mod config;
pub mod decode;
mod detector;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod labels;
pub mod letterbox;
#[cfg(feature = "cpu")]
pub mod recipe;

pub use config::DetectConfig;
pub use decode::{BoundingBox, Detection, Detections, PostStats, Postprocessor};
pub use detector::{Detector, DetectorOptions, Device, StageTimes};
pub use letterbox::{ImageView, Letterbox, PixelFormat, Preprocessor};

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "detect";

/// Capacity of [`Detections`]: the most boxes one image can return
/// (Ultralytics' default `max_det`).
pub const MAX_DETECTIONS: usize = 300;

/// Errors of the detection family. The hot-path variants (`Image`,
/// `InputBuffer`, `OutputShape`, `Run`) carry only numbers.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// The bundle could not be opened or read.
    #[error(transparent)]
    Bundle(#[from] tether_bundle::BundleError),
    /// The network could not be prepared.
    #[error(transparent)]
    Module(#[from] tether_runtime::ModuleError),
    /// An engine call failed.
    #[error(transparent)]
    Run(#[from] tether_runtime::RunError),
    /// The bundle belongs to another family.
    #[error("bundle `{bundle}` is a `{family}` bundle, not a `detect` bundle")]
    WrongFamily {
        /// Bundle name.
        bundle: String,
        /// Its family.
        family: String,
    },
    /// A field of the family configuration is out of range.
    #[error("detect configuration: invalid {field}: {value}")]
    Config {
        /// The field.
        field: &'static str,
        /// The value seen.
        value: String,
    },
    /// Class names could not be read.
    #[error("class names: {0}")]
    Labels(String),
    /// The requested device cannot be used.
    #[error("{0}")]
    Device(String),
    /// The network's I/O does not look like a YOLOv8 detection head.
    #[error("not a YOLOv8 detection network: {0}")]
    Network(String),
    /// An input image is unusable.
    #[error("image {width}x{height}: {reason}")]
    Image {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// What is wrong.
        reason: String,
    },
    /// The network input buffer has the wrong length.
    #[error("network input buffer holds {actual} values, expected {expected}")]
    InputBuffer {
        /// Values expected (`3 * H * W`).
        expected: usize,
        /// Values present.
        actual: usize,
    },
    /// The GPU pipeline failed.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    /// The network output has the wrong length.
    #[error("network output holds {actual} values, expected {expected} ((4 + classes) x anchors)")]
    OutputShape {
        /// Values expected.
        expected: usize,
        /// Values present.
        actual: usize,
    },
}
