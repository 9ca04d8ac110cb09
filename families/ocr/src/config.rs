//! The OCR family's sections in the bundle and its configuration record.
//!
//! | section | kind | content |
//! |---|---|---|
//! | `ocr/det/model.onnx` | `Onnx` | PP-OCRv4 det, `x` f32 `[N, 3, H, W]` -> f32 `[N, 1, H, W]` |
//! | `ocr/rec/model.onnx` | `Onnx` | PP-OCRv4 rec, `x` f32 `[N, 3, 48, W]` -> f32 `[N, W/8, C]` |
//! | `ocr/cls/model.onnx` | `Onnx` | mobile v2.0 cls, `x` f32 `[N, 3, 48, 192]` -> f32 `[N, 2]` (optional) |
//! | `ocr/dict` | `Labels` | the rec model's `character` metadata, one entry per line |
//! | `ocr/config` | `FamilyConfig` | [`OcrConfigRecord`] |
//! | `ocr/selftest` | `Reference` | [`crate::selftest`] payload (optional) |
//! | `ocr/rec_widths` | `FamilyConfig` | [`RecWidths`]: the recogniser's output steps and valid widths per input width |
//!
//! Every default below is rapidocr-onnxruntime 1.4.4's: `config.yaml` for
//! the values it lists, the Python sources for the rest (file named per field).

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::OcrError;

/// Section holding the detection network.
pub const DET_SECTION: &str = "ocr/det/model.onnx";
/// Section holding the recognition network.
pub const REC_SECTION: &str = "ocr/rec/model.onnx";
/// Section holding the orientation classifier (absent when built without one).
pub const CLS_SECTION: &str = "ocr/cls/model.onnx";
/// Section holding the character dictionary (UTF-8, one entry per line, in
/// class order without the CTC blank and the trailing space).
pub const DICT_SECTION: &str = "ocr/dict";
/// Section holding the [`OcrConfigRecord`].
pub const CONFIG_SECTION: &str = "ocr/config";
/// Section holding the self-test payload.
pub const SELFTEST_SECTION: &str = "ocr/selftest";
/// Section holding the recogniser's output steps and valid widths per input width
/// ([`RecWidths`]).
pub const REC_WIDTHS_SECTION: &str = "ocr/rec_widths";
/// Value of [`OcrConfigRecord::version`] this crate writes and reads.
pub const CONFIG_VERSION: u16 = 1;
/// Most recognition width buckets a configuration may list.
pub const MAX_BUCKETS: usize = 32;
/// Largest accepted recognition bucket width, in pixels.
pub const MAX_REC_WIDTH: u32 = 8192;

/// The default recognition width buckets, in pixels: multiples of 16 from
/// 320 (the reference's minimum padded width, `rec_img_shape[2]`) to 3008,
/// each at most 10 % wider than the one before. A line is padded to the
/// smallest bucket at least as wide as the reference's padded width; see
/// `README.md` ("Width buckets") for why the step is this fine.
pub const DEFAULT_REC_WIDTHS: [u32; 23] = [
    320, 352, 384, 432, 480, 528, 592, 656, 736, 816, 912, 1008, 1120, 1232, 1360, 1504, 1664,
    1840, 2032, 2240, 2464, 2720, 3008,
];

/// The first width of the bucket grid continued past `last` that is at least
/// `width`: each step the largest multiple of 16 at most 10 % wider than the one
/// before (as [`DEFAULT_REC_WIDTHS`] grows), capped at [`MAX_REC_WIDTH`].
pub fn overflow_bucket(last: u32, width: u32) -> u32 {
    let mut b = last.max(16);
    while b < width && b < MAX_REC_WIDTH {
        b = ((b + b / 10) / 16 * 16).max(b + 16).min(MAX_REC_WIDTH);
    }
    b
}

/// What the recogniser needs to know about a line's width, for every input
/// width from `first` on, read from the network's own shape inference at build
/// (`tether_build::mask_width_padding`), never computed by a formula of ours:
/// the output steps it emits (`T` of `[1, T, C]`), and the valid widths its
/// `valid_widths` input takes (the width of each masked site's input when the
/// network runs unpadded). Section payload, little-endian: `first` (u32),
/// `count` (u32), `tables` (u32), then `count` u16 steps, then `tables` runs of
/// `count` u16 valid widths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecWidths {
    /// The width of entry 0.
    pub first: u32,
    /// Output steps for widths `first, first + 1, ...`.
    pub steps: Vec<u16>,
    /// Per entry of the recogniser's `valid_widths` input, its value for widths
    /// `first, first + 1, ...` (empty: the recogniser has no such input).
    pub valid: Vec<Vec<u16>>,
}

impl RecWidths {
    /// The output steps at input width `width`, when the table covers it.
    pub fn steps_at(&self, width: u32) -> Option<usize> {
        let i = width.checked_sub(self.first)? as usize;
        self.steps.get(i).map(|&s| usize::from(s))
    }

    /// Write the `valid_widths` input for input width `width` into `out` (one value per
    /// table); `false` when the table does not cover the width or `out` has another length.
    pub fn valid_at(&self, width: u32, out: &mut [f32]) -> bool {
        let Some(i) = width.checked_sub(self.first).map(|i| i as usize) else {
            return false;
        };
        if out.len() != self.valid.len() || i >= self.steps.len() {
            return false;
        }
        for (o, t) in out.iter_mut().zip(&self.valid) {
            *o = f32::from(t[i]);
        }
        true
    }

    /// The section payload.
    pub fn to_section(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + 2 * self.steps.len() * (1 + self.valid.len()));
        v.extend_from_slice(&self.first.to_le_bytes());
        v.extend_from_slice(&(self.steps.len() as u32).to_le_bytes());
        v.extend_from_slice(&(self.valid.len() as u32).to_le_bytes());
        for t in std::iter::once(&self.steps).chain(&self.valid) {
            for s in t {
                v.extend_from_slice(&s.to_le_bytes());
            }
        }
        v
    }

    /// Read a section payload.
    ///
    /// # Errors
    /// [`OcrError::Config`] for a short or inconsistent payload, or a table that
    /// decreases with the width.
    pub fn from_section(bytes: &[u8]) -> Result<Self, OcrError> {
        let bad = |value: String| OcrError::Config {
            field: "rec_widths table",
            value,
        };
        let u32_at = |i: usize| {
            bytes
                .get(i..i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let (Some(first), Some(count), Some(tables)) = (u32_at(0), u32_at(4), u32_at(8)) else {
            return Err(bad(format!("{} bytes, need at least 12", bytes.len())));
        };
        let (count, tables) = (count as usize, tables as usize);
        let body = &bytes[12..];
        if tables > 64 || body.len() != 2 * count * (1 + tables) {
            return Err(bad(format!(
                "{count} widths x {} tables need {} bytes, the section holds {}",
                1 + tables,
                2 * count * (1 + tables),
                body.len()
            )));
        }
        let mut all: Vec<Vec<u16>> = body
            .chunks_exact(2 * count.max(1))
            .take(1 + tables)
            .map(|t| {
                t.chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect()
            })
            .collect();
        all.resize(1 + tables, Vec::new());
        for (k, t) in all.iter().enumerate() {
            if let Some(i) = t.windows(2).position(|w| w[1] < w[0]) {
                return Err(bad(format!(
                    "table {k} decreases from width {} to {}",
                    first as usize + i,
                    first as usize + i + 1
                )));
            }
        }
        let steps = all.remove(0);
        Ok(Self {
            first,
            steps,
            valid: all,
        })
    }
}

/// `flags` bit: run the 180-degree classifier (`Global.use_cls`).
pub const FLAG_USE_CLS: u16 = 1;
/// `flags` bit: dilate the binary map with a 2x2 kernel (`Det.use_dilation`).
pub const FLAG_DILATION: u16 = 2;
/// `flags` bit: box score over the contour polygon (`score_mode: slow`)
/// instead of its minimum-area rectangle (`fast`).
pub const FLAG_SCORE_SLOW: u16 = 4;
/// `flags` bit: detection `limit_type: max` (long side capped) instead of
/// `min` (short side raised).
pub const FLAG_LIMIT_MAX: u16 = 8;

/// On-disk record of the `ocr/config` section (little-endian, 256 bytes,
/// alignment 1). Newer minor versions may append fields; readers ignore the
/// tail beyond the fields they know.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct OcrConfigRecord {
    /// [`CONFIG_VERSION`].
    pub version: U16,
    /// `FLAG_*` bits.
    pub flags: U16,
    /// `Global.max_side_len`.
    pub max_side_len: U32,
    /// `Global.min_side_len`.
    pub min_side_len: U32,
    /// `Global.min_height`.
    pub min_height: U32,
    /// `Global.width_height_ratio` (negative: never pad wide images).
    pub width_height_ratio: F32,
    /// `Global.text_score`.
    pub text_score: F32,
    /// `Det.limit_side_len`.
    pub det_limit_side_len: U32,
    /// `Det.mean` (per B, G, R channel, 0..1 scale).
    pub det_mean: [F32; 3],
    /// `Det.std`.
    pub det_std: [F32; 3],
    /// `Det.thresh`.
    pub det_thresh: F32,
    /// `Det.box_thresh`.
    pub det_box_thresh: F32,
    /// `Det.max_candidates`.
    pub det_max_candidates: U32,
    /// `Det.unclip_ratio`.
    pub det_unclip_ratio: F32,
    /// `DBPostProcess.min_size`.
    pub det_min_size: U32,
    /// `Cls.cls_image_shape[1]`.
    pub cls_height: U32,
    /// `Cls.cls_image_shape[2]`.
    pub cls_width: U32,
    /// `Cls.cls_thresh`.
    pub cls_thresh: F32,
    /// `Rec.rec_img_shape[1]`.
    pub rec_height: U32,
    /// `Rec.rec_img_shape[2]`: the smallest padded width.
    pub rec_min_width: U32,
    /// `Rec.rec_batch_num`: lines sharing one padded width.
    pub rec_batch: U32,
    /// Recogniser classes `C` (dictionary + blank + space).
    pub rec_classes: U32,
    /// Number of valid entries in `rec_widths`.
    pub rec_width_count: U32,
    /// Recognition width buckets, ascending.
    pub rec_widths: [U32; MAX_BUCKETS],
    /// Reserved, zero.
    pub reserved: [u8; 24],
}

/// The OCR parameters, validated and in native types.
#[derive(Clone, Debug, PartialEq)]
pub struct OcrConfig {
    /// Run the 180-degree classifier.
    pub use_cls: bool,
    /// Largest image side before the image is scaled down (`reduce_max_side`).
    pub max_side_len: u32,
    /// Smallest image side before the image is scaled up (`increase_min_side`).
    pub min_side_len: u32,
    /// Images at most this tall are padded top and bottom (`maybe_add_letterbox`).
    pub min_height: u32,
    /// Images wider than this ratio times their height are padded; negative
    /// disables the rule.
    pub width_height_ratio: f32,
    /// Lines whose recognition score is below this are dropped (`>=` keeps).
    pub text_score: f32,
    /// Detection resize target (`limit_side_len`).
    pub det_limit_side_len: u32,
    /// `true`: cap the long side (`limit_type: max`); `false`: raise the short
    /// side (`min`, the default).
    pub det_limit_max: bool,
    /// Detection normalisation mean, per B, G, R channel (0..1 scale).
    pub det_mean: [f32; 3],
    /// Detection normalisation std.
    pub det_std: [f32; 3],
    /// Probability threshold of the binary map (strictly greater).
    pub det_thresh: f32,
    /// Minimum box score kept (a box is dropped when `box_thresh > score`).
    pub det_box_thresh: f32,
    /// Contours examined per image, at most [`crate::MAX_LINES`].
    pub det_max_candidates: u32,
    /// Unclip ratio: offset distance = area * ratio / perimeter.
    pub det_unclip_ratio: f32,
    /// Minimum short side of a box before unclipping (after: this + 2).
    pub det_min_size: u32,
    /// Dilate the binary map with a 2x2 kernel.
    pub det_dilation: bool,
    /// Box score over the contour (`slow`) instead of its box (`fast`).
    pub det_score_slow: bool,
    /// Classifier input height.
    pub cls_height: u32,
    /// Classifier input width.
    pub cls_width: u32,
    /// A `180` label rotates the line when its score is strictly above this.
    pub cls_thresh: f32,
    /// Recogniser input height.
    pub rec_height: u32,
    /// Smallest padded recognition width.
    pub rec_min_width: u32,
    /// Lines that share one padded width (the reference's batch size).
    pub rec_batch: u32,
    /// Recogniser classes `C`.
    pub rec_classes: u32,
    /// Recognition width buckets, ascending, each a network prepared once.
    pub rec_widths: Vec<u32>,
}

impl OcrConfig {
    /// rapidocr-onnxruntime 1.4.4's defaults (`config.yaml`; `min_size` from
    /// `ch_ppocr_det/utils.py` `DBPostProcess.__init__`) for a recogniser
    /// with `rec_classes` outputs, with [`DEFAULT_REC_WIDTHS`].
    pub fn rapidocr(rec_classes: u32) -> Self {
        Self {
            use_cls: true,
            max_side_len: 2000,
            min_side_len: 30,
            min_height: 30,
            width_height_ratio: 8.0,
            text_score: 0.5,
            det_limit_side_len: 736,
            det_limit_max: false,
            det_mean: [0.5; 3],
            det_std: [0.5; 3],
            det_thresh: 0.3,
            det_box_thresh: 0.5,
            det_max_candidates: 1000,
            det_unclip_ratio: 1.6,
            det_min_size: 3,
            det_dilation: true,
            det_score_slow: false,
            cls_height: 48,
            cls_width: 192,
            cls_thresh: 0.9,
            rec_height: 48,
            rec_min_width: 320,
            rec_batch: 6,
            rec_classes,
            rec_widths: DEFAULT_REC_WIDTHS.to_vec(),
        }
    }

    /// Check ranges; the error names the field and the value seen.
    ///
    /// # Errors
    /// [`OcrError::Config`].
    pub fn validate(&self) -> Result<(), OcrError> {
        let bad = |field: &'static str, value: String| Err(OcrError::Config { field, value });
        let unit = |v: f32| v.is_finite() && (0.0..=1.0).contains(&v);
        if self.max_side_len < 32 || self.max_side_len > 1 << 15 {
            return bad("max_side_len", self.max_side_len.to_string());
        }
        if self.min_side_len == 0 || self.min_side_len > self.max_side_len {
            return bad("min_side_len", self.min_side_len.to_string());
        }
        if self.min_height > self.max_side_len {
            return bad("min_height", self.min_height.to_string());
        }
        if !self.width_height_ratio.is_finite() || self.width_height_ratio == 0.0 {
            return bad("width_height_ratio", self.width_height_ratio.to_string());
        }
        if !unit(self.text_score) {
            return bad("text_score", self.text_score.to_string());
        }
        if self.det_limit_side_len < 32 || self.det_limit_side_len > 1 << 14 {
            return bad("det_limit_side_len", self.det_limit_side_len.to_string());
        }
        if self.det_mean.iter().any(|m| !m.is_finite()) {
            return bad("det_mean", format!("{:?}", self.det_mean));
        }
        if self.det_std.iter().any(|s| !s.is_finite() || *s == 0.0) {
            return bad("det_std", format!("{:?}", self.det_std));
        }
        if !unit(self.det_thresh) {
            return bad("det_thresh", self.det_thresh.to_string());
        }
        if !unit(self.det_box_thresh) {
            return bad("det_box_thresh", self.det_box_thresh.to_string());
        }
        if self.det_max_candidates == 0 || self.det_max_candidates as usize > crate::MAX_LINES {
            return bad("det_max_candidates", self.det_max_candidates.to_string());
        }
        if !self.det_unclip_ratio.is_finite() || self.det_unclip_ratio <= 0.0 {
            return bad("det_unclip_ratio", self.det_unclip_ratio.to_string());
        }
        if self.det_min_size > 1000 {
            return bad("det_min_size", self.det_min_size.to_string());
        }
        if self.cls_height == 0 || self.cls_height > 256 {
            return bad("cls_height", self.cls_height.to_string());
        }
        if self.cls_width == 0 || self.cls_width > 4096 {
            return bad("cls_width", self.cls_width.to_string());
        }
        if !unit(self.cls_thresh) {
            return bad("cls_thresh", self.cls_thresh.to_string());
        }
        if self.rec_height == 0 || self.rec_height > 256 {
            return bad("rec_height", self.rec_height.to_string());
        }
        if self.rec_min_width == 0 || self.rec_min_width > MAX_REC_WIDTH {
            return bad("rec_min_width", self.rec_min_width.to_string());
        }
        if self.rec_batch == 0 || self.rec_batch > 1024 {
            return bad("rec_batch", self.rec_batch.to_string());
        }
        if self.rec_classes < 3 {
            return bad("rec_classes", self.rec_classes.to_string());
        }
        let w = &self.rec_widths;
        if w.is_empty()
            || w.len() > MAX_BUCKETS
            || w.windows(2).any(|p| p[0] >= p[1])
            || w[0] < self.rec_min_width
            || w[w.len() - 1] > MAX_REC_WIDTH
            || w.iter().any(|v| v % 8 != 0)
        {
            return bad(
                "rec_widths",
                format!(
                    "{w:?} (1..={MAX_BUCKETS} ascending multiples of 8 from rec_min_width {} to {MAX_REC_WIDTH})",
                    self.rec_min_width
                ),
            );
        }
        Ok(())
    }

    /// A one-line summary for `tether inspect`.
    pub fn summary(&self) -> String {
        let cls = if self.use_cls {
            format!(
                "cls ({}x{}, turn when '180' > {}), ",
                self.cls_width, self.cls_height, self.cls_thresh
            )
        } else {
            String::new()
        };
        format!(
            "PP-OCR: det (short side -> {} px, thresh {}, box {}, unclip {}, <= {} boxes), {cls}rec ({} classes, height {}, {} width buckets {}..={} px), text score >= {}",
            self.det_limit_side_len,
            self.det_thresh,
            self.det_box_thresh,
            self.det_unclip_ratio,
            self.det_max_candidates,
            self.rec_classes,
            self.rec_height,
            self.rec_widths.len(),
            self.rec_widths.first().copied().unwrap_or(0),
            self.rec_widths.last().copied().unwrap_or(0),
            self.text_score
        )
    }

    /// The width the recogniser runs a line of padded width `width` at: the
    /// smallest bucket at least that wide; past the largest bucket, the next
    /// width of the same grid (multiples of 16, each at most 10 % wider than
    /// the one before, [`overflow_bucket`]) up to [`MAX_REC_WIDTH`], so a long
    /// line is widened, not squeezed; past that, [`MAX_REC_WIDTH`] (the line is
    /// then squeezed into it, and the result says so).
    pub fn rec_bucket(&self, width: u32) -> u32 {
        self.rec_widths
            .iter()
            .copied()
            .find(|&b| b >= width)
            .unwrap_or_else(|| {
                let last = self
                    .rec_widths
                    .last()
                    .copied()
                    .unwrap_or(self.rec_min_width);
                overflow_bucket(last, width)
            })
    }

    /// Every width [`OcrConfig::rec_bucket`] returns: the buckets, then the grid continued
    /// past the largest up to [`MAX_REC_WIDTH`] ([`overflow_bucket`]).
    pub fn rec_width_grid(&self) -> Vec<u32> {
        let mut grid = self.rec_widths.clone();
        let mut b = grid.last().copied().unwrap_or(self.rec_min_width);
        while b < MAX_REC_WIDTH {
            let next = overflow_bucket(b, b + 1);
            if next <= b {
                break;
            }
            grid.push(next);
            b = next;
        }
        grid
    }

    /// Read and validate the record at the start of `bytes`.
    ///
    /// # Errors
    /// [`OcrError::Config`] for a short record, another version, or an
    /// out-of-range field.
    pub fn from_section(bytes: &[u8]) -> Result<Self, OcrError> {
        let (r, _) = OcrConfigRecord::ref_from_prefix(bytes).map_err(|_| OcrError::Config {
            field: "record",
            value: format!(
                "{} bytes, need {}",
                bytes.len(),
                size_of::<OcrConfigRecord>()
            ),
        })?;
        if r.version.get() != CONFIG_VERSION {
            return Err(OcrError::Config {
                field: "version",
                value: format!("{} (this build reads {CONFIG_VERSION})", r.version.get()),
            });
        }
        let count = r.rec_width_count.get() as usize;
        if count == 0 || count > MAX_BUCKETS {
            return Err(OcrError::Config {
                field: "rec_width_count",
                value: count.to_string(),
            });
        }
        let flags = r.flags.get();
        let c = Self {
            use_cls: flags & FLAG_USE_CLS != 0,
            max_side_len: r.max_side_len.get(),
            min_side_len: r.min_side_len.get(),
            min_height: r.min_height.get(),
            width_height_ratio: r.width_height_ratio.get(),
            text_score: r.text_score.get(),
            det_limit_side_len: r.det_limit_side_len.get(),
            det_limit_max: flags & FLAG_LIMIT_MAX != 0,
            det_mean: r.det_mean.map(|v| v.get()),
            det_std: r.det_std.map(|v| v.get()),
            det_thresh: r.det_thresh.get(),
            det_box_thresh: r.det_box_thresh.get(),
            det_max_candidates: r.det_max_candidates.get(),
            det_unclip_ratio: r.det_unclip_ratio.get(),
            det_min_size: r.det_min_size.get(),
            det_dilation: flags & FLAG_DILATION != 0,
            det_score_slow: flags & FLAG_SCORE_SLOW != 0,
            cls_height: r.cls_height.get(),
            cls_width: r.cls_width.get(),
            cls_thresh: r.cls_thresh.get(),
            rec_height: r.rec_height.get(),
            rec_min_width: r.rec_min_width.get(),
            rec_batch: r.rec_batch.get(),
            rec_classes: r.rec_classes.get(),
            rec_widths: r.rec_widths[..count].iter().map(|v| v.get()).collect(),
        };
        c.validate()?;
        Ok(c)
    }

    /// The on-disk record.
    ///
    /// # Errors
    /// [`OcrError::Config`] when the configuration is invalid.
    pub fn to_record(&self) -> Result<OcrConfigRecord, OcrError> {
        self.validate()?;
        let mut widths = [U32::new(0); MAX_BUCKETS];
        for (dst, &w) in widths.iter_mut().zip(&self.rec_widths) {
            *dst = w.into();
        }
        let flag = |on: bool, bit: u16| if on { bit } else { 0 };
        let flags = flag(self.use_cls, FLAG_USE_CLS)
            | flag(self.det_dilation, FLAG_DILATION)
            | flag(self.det_score_slow, FLAG_SCORE_SLOW)
            | flag(self.det_limit_max, FLAG_LIMIT_MAX);
        Ok(OcrConfigRecord {
            version: CONFIG_VERSION.into(),
            flags: flags.into(),
            max_side_len: self.max_side_len.into(),
            min_side_len: self.min_side_len.into(),
            min_height: self.min_height.into(),
            width_height_ratio: self.width_height_ratio.into(),
            text_score: self.text_score.into(),
            det_limit_side_len: self.det_limit_side_len.into(),
            det_mean: self.det_mean.map(F32::new),
            det_std: self.det_std.map(F32::new),
            det_thresh: self.det_thresh.into(),
            det_box_thresh: self.det_box_thresh.into(),
            det_max_candidates: self.det_max_candidates.into(),
            det_unclip_ratio: self.det_unclip_ratio.into(),
            det_min_size: self.det_min_size.into(),
            cls_height: self.cls_height.into(),
            cls_width: self.cls_width.into(),
            cls_thresh: self.cls_thresh.into(),
            rec_height: self.rec_height.into(),
            rec_min_width: self.rec_min_width.into(),
            rec_batch: self.rec_batch.into(),
            rec_classes: self.rec_classes.into(),
            rec_width_count: (self.rec_widths.len() as u32).into(),
            rec_widths: widths,
            reserved: [0; 24],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_256_bytes_and_round_trips() {
        assert_eq!(size_of::<OcrConfigRecord>(), 256);
        let c = OcrConfig::rapidocr(6625);
        let rec = c.to_record().expect("valid");
        let back = OcrConfig::from_section(rec.as_bytes()).expect("valid");
        assert_eq!(back, c);
    }

    #[test]
    fn default_buckets_step_at_most_ten_percent() {
        for p in DEFAULT_REC_WIDTHS.windows(2) {
            assert!(p[1] as f32 <= p[0] as f32 * 1.1 + 16.0, "{p:?}");
            assert_eq!(p[1] % 16, 0);
        }
        let c = OcrConfig::rapidocr(6625);
        assert_eq!(c.rec_bucket(1), 320);
        assert_eq!(c.rec_bucket(320), 320);
        assert_eq!(c.rec_bucket(1000), 1008);
        // Past the largest bucket: the grid continued (widened, not squeezed), up to
        // the largest width run.
        assert_eq!(c.rec_bucket(3009), 3296);
        assert_eq!(c.rec_bucket(4256), 4352);
        assert_eq!(c.rec_bucket(1_000_000), MAX_REC_WIDTH);
        let mut b = 3008;
        while b < MAX_REC_WIDTH {
            let next = overflow_bucket(b, b + 1);
            assert!(
                next > b
                    && next.is_multiple_of(16)
                    && (next == MAX_REC_WIDTH || next * 10 <= b * 11)
            );
            b = next;
        }
        let t = RecWidths {
            first: 320,
            steps: vec![40, 40, 41],
            valid: vec![vec![320, 321, 322], vec![80, 80, 81]],
        };
        assert_eq!(RecWidths::from_section(&t.to_section()).unwrap(), t);
        assert_eq!(
            (t.steps_at(319), t.steps_at(322), t.steps_at(323)),
            (None, Some(41), None)
        );
        let mut v = [0f32; 2];
        assert!(t.valid_at(321, &mut v));
        assert_eq!(v, [321.0, 80.0]);
        assert!(!t.valid_at(323, &mut v) && !t.valid_at(320, &mut [0f32; 3]));
        assert!(RecWidths::from_section(&t.to_section()[..13]).is_err());
    }

    #[test]
    fn rejects_bad_records() {
        let c = OcrConfig::rapidocr(6625);
        let rec = c.to_record().expect("valid");
        let e = OcrConfig::from_section(&rec.as_bytes()[..10]).unwrap_err();
        assert!(e.to_string().contains("10 bytes"), "{e}");
        let mut bad = c.clone();
        bad.det_thresh = 1.5;
        let e = bad.to_record().unwrap_err();
        assert!(
            e.to_string().contains("det_thresh") && e.to_string().contains("1.5"),
            "{e}"
        );
        let mut bad = c.clone();
        bad.rec_widths = vec![320, 320];
        assert!(bad.validate().is_err());
        let mut bad = c.clone();
        bad.rec_widths = vec![100];
        assert!(bad.validate().is_err());
        let mut rec = c.to_record().expect("valid");
        rec.version = 7.into();
        let e = OcrConfig::from_section(rec.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
        let mut rec = c.to_record().expect("valid");
        rec.rec_width_count = 40.into();
        assert!(OcrConfig::from_section(rec.as_bytes()).is_err());
    }
}
