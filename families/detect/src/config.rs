//! The detection family's section in the bundle: network geometry, thresholds,
//! normalisation. Read in place with zerocopy (no parsing at load).

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::DetectError;

/// Name of the bundle section holding a [`DetectConfigRecord`].
pub const CONFIG_SECTION: &str = "detect/config";
/// Name of the bundle section holding the class names (UTF-8, one per line,
/// in class-id order).
pub const LABELS_SECTION: &str = "detect/labels";
/// Name of the bundle section holding the ONNX network (format 1.1:
/// `<family>/<network>/<file>`; 1.0 bundles named it `detect/model.onnx`, which readers
/// group into the same network).
pub const ONNX_SECTION: &str = "detect/model/model.onnx";
/// Value of [`DetectConfigRecord::version`] this crate writes and reads.
pub const CONFIG_VERSION: u16 = 1;
/// Output layout `[1, 4 + C, N]`: box rows (cx, cy, w, h) then class-score rows
/// (the Ultralytics YOLOv8 head).
pub const LAYOUT_YOLOV8: u16 = 1;
/// Largest network input side accepted, in pixels.
pub const MAX_INPUT_SIDE: u32 = 8192;
/// Largest number of anchors (`N`) accepted; bounds the decode scratch buffer
/// (a 4096x4096 YOLOv8 input has 344,064).
pub const MAX_ANCHORS: u32 = 1 << 20;

/// On-disk record of the `detect/config` section (little-endian, 64 bytes,
/// alignment 1). Newer minor versions may append fields; readers ignore the
/// tail beyond the fields they know.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct DetectConfigRecord {
    /// [`CONFIG_VERSION`].
    pub version: U16,
    /// Output layout code ([`LAYOUT_YOLOV8`]).
    pub layout: U16,
    /// Network input width in pixels.
    pub input_width: U32,
    /// Network input height in pixels.
    pub input_height: U32,
    /// Number of classes `C`.
    pub num_classes: U32,
    /// Number of anchors `N` in the output `[1, 4 + C, N]`.
    pub num_anchors: U32,
    /// Minimum class score kept (strictly greater), in [0, 1].
    pub score_threshold: F32,
    /// Class-wise NMS IoU threshold (suppress when strictly greater), in [0, 1].
    pub iou_threshold: F32,
    /// Maximum detections returned per image.
    pub max_detections: U32,
    /// Per-channel (R, G, B) mean subtracted from pixel values (0..255 scale).
    pub mean: [F32; 3],
    /// Per-channel (R, G, B) divisor applied after the mean (255 = "/255").
    pub std: [F32; 3],
    /// Letterbox padding value (0..255 scale) for every channel.
    pub pad_value: u8,
    /// Index of the detection head among the network's outputs (in the model's order),
    /// chosen at build by `tether_family::io` (name `output0`, then shape, then value
    /// range). Bundles written before this field hold 0: the first output, which their
    /// build checked.
    pub head_output: u8,
    /// Reserved, zero.
    pub reserved: [u8; 6],
}

/// The detection parameters, validated and in native types.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DetectConfig {
    /// Network input width in pixels.
    pub input_width: u32,
    /// Network input height in pixels.
    pub input_height: u32,
    /// Number of classes `C`.
    pub num_classes: u32,
    /// Number of anchors `N`.
    pub num_anchors: u32,
    /// Minimum class score kept (strictly greater).
    pub score_threshold: f32,
    /// NMS IoU threshold (suppress when strictly greater).
    pub iou_threshold: f32,
    /// Maximum detections per image, at most [`crate::MAX_DETECTIONS`].
    pub max_detections: u32,
    /// Per-channel mean (RGB, 0..255 scale).
    pub mean: [f32; 3],
    /// Per-channel divisor (RGB).
    pub std: [f32; 3],
    /// Letterbox padding value (0..255).
    pub pad_value: u8,
    /// Index of the detection head among the network's outputs (model order).
    pub head_output: u8,
}

impl DetectConfig {
    /// Ultralytics defaults for a network of the given geometry: score 0.25,
    /// IoU 0.7, 300 detections, `/255` normalisation, padding 114
    /// (ultralytics/utils/ops.py `non_max_suppression`, data/augment.py `LetterBox`).
    pub fn ultralytics(
        input_width: u32,
        input_height: u32,
        num_classes: u32,
        num_anchors: u32,
    ) -> Self {
        Self {
            input_width,
            input_height,
            num_classes,
            num_anchors,
            score_threshold: 0.25,
            iou_threshold: 0.7,
            max_detections: 300,
            mean: [0.0; 3],
            std: [255.0; 3],
            pad_value: 114,
            head_output: 0,
        }
    }

    /// Check ranges; the error names the field and the value seen.
    ///
    /// # Errors
    /// [`DetectError::Config`].
    pub fn validate(&self) -> Result<(), DetectError> {
        let bad = |field: &'static str, value: String| Err(DetectError::Config { field, value });
        if self.input_width == 0 || self.input_width > MAX_INPUT_SIDE {
            return bad("input_width", self.input_width.to_string());
        }
        if self.input_height == 0 || self.input_height > MAX_INPUT_SIDE {
            return bad("input_height", self.input_height.to_string());
        }
        if self.num_classes == 0 || self.num_classes > u32::from(u16::MAX) {
            return bad("num_classes", self.num_classes.to_string());
        }
        if self.num_anchors == 0 || self.num_anchors > MAX_ANCHORS {
            return bad("num_anchors", self.num_anchors.to_string());
        }
        if !(0.0..=1.0).contains(&self.score_threshold) {
            return bad("score_threshold", self.score_threshold.to_string());
        }
        if !(0.0..=1.0).contains(&self.iou_threshold) {
            return bad("iou_threshold", self.iou_threshold.to_string());
        }
        if self.max_detections == 0 || self.max_detections as usize > crate::MAX_DETECTIONS {
            return bad("max_detections", self.max_detections.to_string());
        }
        if self.std.iter().any(|s| !s.is_finite() || *s == 0.0) {
            return bad("std", format!("{:?}", self.std));
        }
        if self.mean.iter().any(|m| !m.is_finite()) {
            return bad("mean", format!("{:?}", self.mean));
        }
        Ok(())
    }

    /// Read and validate the record at the start of `bytes` (the section payload).
    ///
    /// # Errors
    /// [`DetectError::Config`] for a short record, another version or layout,
    /// or an out-of-range field.
    pub fn from_section(bytes: &[u8]) -> Result<Self, DetectError> {
        let (r, _) =
            DetectConfigRecord::ref_from_prefix(bytes).map_err(|_| DetectError::Config {
                field: "record",
                value: format!(
                    "{} bytes, need {}",
                    bytes.len(),
                    size_of::<DetectConfigRecord>()
                ),
            })?;
        if r.version.get() != CONFIG_VERSION {
            return Err(DetectError::Config {
                field: "version",
                value: format!("{} (this build reads {CONFIG_VERSION})", r.version.get()),
            });
        }
        if r.layout.get() != LAYOUT_YOLOV8 {
            return Err(DetectError::Config {
                field: "layout",
                value: r.layout.get().to_string(),
            });
        }
        let c = Self {
            input_width: r.input_width.get(),
            input_height: r.input_height.get(),
            num_classes: r.num_classes.get(),
            num_anchors: r.num_anchors.get(),
            score_threshold: r.score_threshold.get(),
            iou_threshold: r.iou_threshold.get(),
            max_detections: r.max_detections.get(),
            mean: r.mean.map(|v| v.get()),
            std: r.std.map(|v| v.get()),
            pad_value: r.pad_value,
            head_output: r.head_output,
        };
        c.validate()?;
        Ok(c)
    }

    /// The on-disk record.
    pub fn to_record(&self) -> DetectConfigRecord {
        DetectConfigRecord {
            version: CONFIG_VERSION.into(),
            layout: LAYOUT_YOLOV8.into(),
            input_width: self.input_width.into(),
            input_height: self.input_height.into(),
            num_classes: self.num_classes.into(),
            num_anchors: self.num_anchors.into(),
            score_threshold: self.score_threshold.into(),
            iou_threshold: self.iou_threshold.into(),
            max_detections: self.max_detections.into(),
            mean: self.mean.map(F32::new),
            std: self.std.map(F32::new),
            pad_value: self.pad_value,
            head_output: self.head_output,
            reserved: [0; 6],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_64_bytes_and_round_trips() {
        assert_eq!(size_of::<DetectConfigRecord>(), 64);
        let c = DetectConfig::ultralytics(1024, 1024, 11, 21504);
        let rec = c.to_record();
        let back = DetectConfig::from_section(rec.as_bytes()).expect("valid");
        assert_eq!(back, c);
    }

    #[test]
    fn rejects_short_and_out_of_range_records() {
        let c = DetectConfig::ultralytics(640, 640, 80, 8400);
        let rec = c.to_record();
        let e = DetectConfig::from_section(&rec.as_bytes()[..10]).unwrap_err();
        assert!(e.to_string().contains("10 bytes, need 64"), "{e}");
        let mut bad = c;
        bad.iou_threshold = 1.5;
        let e = DetectConfig::from_section(bad.to_record().as_bytes()).unwrap_err();
        assert!(
            e.to_string().contains("iou_threshold") && e.to_string().contains("1.5"),
            "{e}"
        );
        let mut bad = c;
        bad.max_detections = 100_000;
        assert!(DetectConfig::from_section(bad.to_record().as_bytes()).is_err());
        let mut bad = c;
        bad.std = [0.0; 3];
        assert!(DetectConfig::from_section(bad.to_record().as_bytes()).is_err());
        let mut rec = c.to_record();
        rec.version = 9.into();
        let e = DetectConfig::from_section(rec.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
    }
}
