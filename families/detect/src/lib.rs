//! tether detection family: YOLOv8 (Ultralytics head) object detection.
//!
//! - [`letterbox`]: u8 image -> letterboxed NCHW f32 input (the exact arithmetic shared with
//!   the onnxruntime reference and the CUDA kernels);
//! - [`decode`]: `[1, 4 + C, N]` output -> class-wise NMS -> fixed-capacity [`Detections`];
//! - [`stages`]: both as session stages (host code and CUDA kernels computing the same
//!   thing) around the network; [`output`]: the result record they write;
//! - [`Detector`]: the semantic API, `Detector::load(path)?.detect(&image)`;
//! - [`recipe`] (feature `build`): ONNX + metadata -> `.bundle`, with a [`selftest`] (the
//!   reference page image and its detections) in the shared format;
//! - [`cli`] (feature `cli`): the family as the `tether` CLI sees it.
//!
//! Golden evidence lives in `families/detect/golden/` (onnxruntime reference).
#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod decode;
mod detector;
#[cfg(feature = "cuda")]
pub mod kernels;
pub mod labels;
pub mod letterbox;
pub mod output;
#[cfg(feature = "build")]
pub mod recipe;
pub mod selftest;
pub mod stages;

pub use config::DetectConfig;
pub use decode::{BoundingBox, Detection, Detections, Postprocessor};
pub use detector::{Detector, DetectorOptions, Device, StageTimes};
pub use letterbox::{FrameSpec, ImageView, Letterbox, PixelFormat, Preprocessor};
pub use output::PostStats;

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "detect";

/// Name of the detection network inside a bundle (`detect/model/...`).
pub const NETWORK: &str = "model";

/// Capacity of [`Detections`]: the most boxes one image can return (Ultralytics' default
/// `max_det`).
pub const MAX_DETECTIONS: usize = 300;

/// Errors of the detection family at load time.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DetectError {
    /// The bundle could not be opened or read.
    #[error("{0}")]
    Bundle(#[from] tether_bundle::BundleError),
    /// The runtime could not prepare the model or a session.
    #[error("{0}")]
    Runtime(#[from] tether_runtime::Error),
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
    /// The network's I/O does not look like a YOLOv8 detection head.
    #[error("not a YOLOv8 detection network: {0}")]
    Network(String),
    /// A run failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The network output has the wrong length (host post-processing).
    #[error("network output holds {actual} values, expected {expected} ((4 + classes) x anchors)")]
    OutputShape {
        /// Values expected.
        expected: usize,
        /// Values present.
        actual: usize,
    },
    /// The self-test section is unreadable or lacks an entry this family needs.
    #[error("detect self-test: {0}")]
    SelfTest(#[from] tether_family::selftest::SelfTestError),
    /// At build time, the CPU engine does not reproduce the pinned model's reference output
    /// (the report says by how much).
    #[error("the CPU engine does not reproduce the reference: {0}")]
    ReferenceMismatch(Box<tether_family::selftest::Report>),
    /// The network input buffer has the wrong length (host pre-processing).
    #[error("network input buffer holds {actual} values, expected {expected}")]
    InputBuffer {
        /// Values expected (`3 * H * W`).
        expected: usize,
        /// Values present.
        actual: usize,
    },
}

/// Errors of one frame: `Copy`, numbers only (the hot path never allocates to report).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame's geometry is not the prepared one.
    #[error("frame {got:?} does not match the prepared geometry {expected:?}")]
    Geometry {
        /// The prepared geometry (`None`: nothing prepared yet).
        expected: Option<FrameSpec>,
        /// The frame's.
        got: FrameSpec,
    },
    /// The frame staging was asked for before a session was prepared (call
    /// [`Detector::prepare`](crate::Detector::prepare) or run a frame first).
    #[error("no session is prepared: call `prepare` with the frame geometry first")]
    NotPrepared,
    /// The image view is invalid.
    #[error(transparent)]
    Image(#[from] tether_family::vision::ImageError),
    /// The session failed.
    #[error(transparent)]
    Run(#[from] tether_runtime::RunError),
    /// The result record was not written.
    #[error(transparent)]
    Result(#[from] output::NotWritten),
}

impl From<tether_runtime::RunError> for DetectError {
    fn from(e: tether_runtime::RunError) -> Self {
        DetectError::Frame(FrameError::Run(e))
    }
}

impl From<tether_family::vision::ImageError> for DetectError {
    fn from(e: tether_family::vision::ImageError) -> Self {
        DetectError::Frame(FrameError::Image(e))
    }
}
