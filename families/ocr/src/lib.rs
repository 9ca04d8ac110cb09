//! tether OCR family: PP-OCRv4 text detection, line orientation and
//! recognition, matching `rapidocr-onnxruntime` 1.4.4's own pipeline.
//!
//! Image in, text lines out: each line has a 4-point polygon in source
//! pixels, its text and a confidence ([`Ocr::detect_text`]). The stages, in
//! the reference's order (`rapidocr_onnxruntime/main.py`, `RapidOCR.__call__`):
//!
//! 1. [`image`]: the input converted to 8-bit BGR as the reference's
//!    `LoadImage` does, resized when a side is outside `[min_side_len,
//!    max_side_len]`, padded top and bottom for very short or very wide images;
//! 2. detection ([`db`]): resized so the short side is `limit_side_len`
//!    (multiples of 32), normalised, the DB network, then Differentiable
//!    Binarization post-processing: threshold, 2x2 dilation, contours
//!    ([`contours`], Suzuki-Abe), minimum-area rectangle ([`geometry`],
//!    rotating calipers), box score, unclip (Clipper round offset), rescale,
//!    reading-order sort;
//! 3. each line cut out with a perspective warp ([`warp`], bicubic);
//! 4. optional 180-degree classification (mobile v2.0 cls), rotating lines
//!    classified `180` with score above `cls_thresh`;
//! 5. recognition (PP-OCRv4 rec) on a fixed set of width buckets ([`config`]),
//!    CTC greedy decoding ([`ctc`]) with the dictionary from the model's
//!    metadata;
//! 6. lines below `text_score` dropped, boxes mapped back to source pixels.
//!
//! Every network runs through one internal module (`net`): the runtime's
//! [`tether_runtime::Model`], which picks the engine for the real device (the
//! tract CPU engine, or a GPU engine with one captured graph per network and
//! shape), prepared once per input shape and kept. `recipe` (feature
//! `build`) builds the bundle; `cli` (feature `cli`) is the family as the
//! `tether` CLI sees it; [`selftest`] is the payload `tether verify
//! --self-test` runs; [`compare`] scores results against the reference's
//! (the goldens' acceptance rule). Goldens, their script and the sources of
//! every constant: `families/ocr/golden/`, `families/ocr/README.md`.
#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod compare;
pub mod config;
pub mod contours;
pub mod ctc;
pub mod db;
pub mod geometry;
pub mod image;
mod net;
mod pipeline;
#[cfg(feature = "build")]
pub mod recipe;
pub mod resize;
pub mod selftest;
pub mod warp;

pub use config::OcrConfig;
pub use image::{ImageView, PixelFormat};
pub use pipeline::{Ocr, OcrOptions, OcrResult, OcrStats, StageTimes, TextLine};
pub use tether_runtime::{Device, EngineKind};

/// Names of the networks inside a bundle (`ocr/<network>/model.onnx`).
pub mod network {
    use tether_family::io::Role;

    /// Text detection (DB).
    pub const DET: &str = "det";
    /// Text recognition (CTC).
    pub const REC: &str = "rec";
    /// 180-degree line classification (optional).
    pub const CLS: &str = "cls";
    /// The input the build adds to the recogniser (`tether_build::
    /// mask_width_padding`): f32 `[K]`, the valid widths at the line's
    /// reference width (`crate::config::RecWidths`); the columns past them
    /// (padding up to the width bucket) no longer change the result.
    pub const VALID_WIDTHS: &str = "valid_widths";

    fn image_fits(d: &[i64]) -> bool {
        d.len() == 4 && d[1] == 3
    }
    fn det_fits(d: &[i64]) -> bool {
        d.len() == 4 && (d[1] < 0 || d[1] == 1)
    }
    fn rec_fits(d: &[i64]) -> bool {
        d.len() == 3
    }
    fn cls_fits(d: &[i64]) -> bool {
        d.len() == 2 && (d[1] < 0 || d[1] == 2)
    }

    /// The image input of every network: named `x` (PaddleOCR's export), else the
    /// only input shaped `[N, 3, H, W]` (`tether_family::io`).
    pub fn image_input() -> Role<'static> {
        Role {
            what: "the image input",
            kind: "input",
            names: &["x"],
            expected: "[N, 3, H, W]",
            fits: &image_fits,
        }
    }

    /// The output that plays `network`'s role, by shape (PaddleOCR's exports name
    /// their outputs after internal tensors, so no name identifies them): det
    /// `[N, 1, H, W]`, rec `[N, T, C]`, cls `[N, 2]`.
    pub fn output(network: &str) -> Role<'static> {
        match network {
            DET => Role {
                what: "the text probability map",
                kind: "output",
                names: &[],
                expected: "[N, 1, H, W]",
                fits: &det_fits,
            },
            REC => Role {
                what: "the character probabilities",
                kind: "output",
                names: &[],
                expected: "[N, T, C]",
                fits: &rec_fits,
            },
            _ => Role {
                what: "the orientation probabilities",
                kind: "output",
                names: &[],
                expected: "[N, 2]",
                fits: &cls_fits,
            },
        }
    }
}

/// Family name recorded in the bundle identity.
pub const FAMILY: &str = "ocr";

/// Most text lines one image can return: the DB post-processor's
/// `max_candidates` (rapidocr-onnxruntime `config.yaml`, `Det.max_candidates`).
pub const MAX_LINES: usize = 1000;

/// Errors of the OCR family. The variants the hot path can return (`Image`,
/// `InputBuffer`, `OutputShape`, `TextCapacity`, `Model`'s `Run` and `View`) carry only
/// numbers and static strings.
#[derive(Debug, thiserror::Error)]
pub enum OcrError {
    /// Opening the bundle or running the network failed: the bundle, the runtime, an
    /// engine call, a tensor view, or a bundle of another family.
    #[error(transparent)]
    Model(#[from] tether_family::model::ModelError),
    /// A field of the family configuration is out of range.
    #[error("ocr configuration: invalid {field}: {value}")]
    Config {
        /// The field.
        field: &'static str,
        /// The value seen.
        value: String,
    },
    /// The recogniser's character dictionary is missing or malformed.
    #[error("character dictionary: {0}")]
    Dictionary(String),
    /// A network does not have the I/O of its PP-OCR role, or failed to prepare.
    #[error("{network} network: {reason}")]
    Network {
        /// `det`, `rec` or `cls`.
        network: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An input image is unusable.
    #[error("image {width}x{height}: {reason}")]
    Image {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// Scaling the image to one of RapidOCR's side limits (`max_side_len`, `min_side_len`)
    /// leaves its other side at `other` pixels (truncated), which rounds to 0 at the
    /// multiples of 32 the detector takes (`reduce_max_side` / `increase_min_side`, which
    /// raise `ResizeImgError` there as well): a very long and thin image.
    #[error(
        "image {width}x{height}: scaling its {side} side to {limit_name} ({limit} px) leaves the other side {other} px, which rounds to 0 at the detector's multiples of 32"
    )]
    Scaled {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// `long` or `short`.
        side: &'static str,
        /// `max_side_len` or `min_side_len` (the bundle's OCR configuration).
        limit_name: &'static str,
        /// Its value, pixels.
        limit: u32,
        /// The other side after the scaling, before the rounding, pixels.
        other: u64,
    },
    /// A network input buffer has the wrong length.
    #[error("{network} input buffer holds {actual} values, expected {expected}")]
    InputBuffer {
        /// `det`, `rec` or `cls`.
        network: &'static str,
        /// Values expected.
        expected: usize,
        /// Values present.
        actual: usize,
    },
    /// A network output has the wrong length.
    #[error("{network} output holds {actual} values, expected {expected}")]
    OutputShape {
        /// `det`, `rec` or `cls`.
        network: &'static str,
        /// Values expected.
        expected: usize,
        /// Values present.
        actual: usize,
    },
    /// The recognised text does not fit the preallocated text buffer.
    #[error(
        "recognised text needs {needed} bytes, the result buffer holds {capacity} (raise OcrOptions::text_capacity)"
    )]
    TextCapacity {
        /// Bytes needed so far.
        needed: usize,
        /// Buffer capacity in bytes.
        capacity: usize,
    },
    /// The self-test section is unreadable or lacks an entry this family needs.
    #[error("ocr self-test: {0}")]
    SelfTest(#[from] tether_family::selftest::SelfTestError),
    /// At build time, the CPU engine does not reproduce the pinned networks' reference
    /// answer (the report says by how much).
    #[error("the CPU engine does not reproduce the reference: {0}")]
    ReferenceMismatch(Box<tether_family::selftest::Report>),
}

tether_family::model_error_conversions!(OcrError);
