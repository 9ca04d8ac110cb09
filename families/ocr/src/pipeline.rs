//! The semantic API: image in, text lines out.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_bundle::{Bundle, SectionKind};
use tether_family::model::{check_family, open_bundle};
use tether_runtime::{Device, Model, ModelOptions, ShapePolicy};

use crate::config::{CONFIG_SECTION, DICT_SECTION, REC_WIDTHS_SECTION, RecWidths};
use crate::ctc::{self, Dictionary};
use crate::db::{self, DbPostprocessor, DbStats, DetBox};
use crate::geometry::decimal_f64;
use crate::image::{BgrImage, ImageView};
use crate::net::{self, Prepared, Sessions};
use crate::network::{CLS, DET, REC};
use crate::resize::{ResizeScratch, resize_linear};
use crate::warp::{perspective_transform, rotate90_ccw, rotate180, warp_perspective_cubic};
use crate::{FAMILY, MAX_LINES, OcrConfig, OcrError};

/// Options of [`Ocr::open`].
#[derive(Clone, Debug)]
pub struct OcrOptions {
    /// Where to run (default: the first CUDA GPU when one answers, else the CPU).
    pub device: Device,
    /// Model options beyond the device (engines to exclude, precision,
    /// session options); `input_shapes` is set by [`Ocr::open`].
    pub model: ModelOptions,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
    /// Override the bundle's choice to run the 180-degree classifier
    /// (ignored when the bundle has no classifier).
    pub use_cls: Option<bool>,
    /// Override the bundle's minimum text score.
    pub text_score: Option<f32>,
    /// Detector plans kept, one per input size (the size follows the
    /// image's). Default 2.
    pub det_cache: usize,
    /// Prepare the recogniser for every width bucket at open (default: on a
    /// bucket's first use; either way once per bucket).
    pub prepare_all_rec_widths: bool,
    /// Image sizes `(width, height)` to prepare the detector for at open (the
    /// first one is the shape the model is opened with; without any, the
    /// detector input of a square image, `det_limit_side_len` a side).
    pub det_image_sizes: Vec<(u32, u32)>,
    /// Bytes of recognised text one image may return. Default 64 KiB.
    pub text_capacity: usize,
}

impl Default for OcrOptions {
    fn default() -> Self {
        Self {
            device: Device::Auto,
            model: ModelOptions::default(),
            verify_eagerly: false,
            use_cls: None,
            text_score: None,
            det_cache: 2,
            prepare_all_rec_widths: false,
            det_image_sizes: Vec::new(),
            text_capacity: 64 * 1024,
        }
    }
}

/// Wall time of each stage of the last [`Ocr::detect_text`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Conversion to BGR, side limits, padding, detector resize and normalisation.
    pub preprocess: Duration,
    /// The detection network.
    pub det: Duration,
    /// DB post-processing (binary map, contours, boxes).
    pub postprocess: Duration,
    /// Cutting the lines out (perspective warps).
    pub crop: Duration,
    /// Orientation classification, network included.
    pub cls: Duration,
    /// Recognition, networks and CTC decoding included.
    pub rec: Duration,
    /// The whole call.
    pub total: Duration,
}

/// Counts from the last [`Ocr::detect_text`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OcrStats {
    /// Detector input `(width, height)`.
    pub det_input: (usize, usize),
    /// Contours in the binary map.
    pub contours: usize,
    /// Boxes after DB post-processing.
    pub boxes: usize,
    /// Lines turned by 180 degrees.
    pub rotated: usize,
    /// Lines wider than the largest width bucket, recognised at a wider width
    /// (the bucket grid continued; the reference runs any width).
    pub widened: usize,
    /// Lines wider than the widest width the recogniser runs
    /// ([`crate::config::MAX_REC_WIDTH`]), squeezed into it (also logged).
    pub squeezed: usize,
    /// Lines kept (text score at least `text_score`).
    pub lines: usize,
}

/// One recognised text line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextLine<'a> {
    /// Corners top-left, top-right, bottom-right, bottom-left, in pixels of
    /// the source image.
    pub polygon: [[f32; 2]; 4],
    /// The text.
    pub text: &'a str,
    /// Recognition confidence: mean probability of the decoded characters.
    pub score: f32,
    /// Detection score: mean text probability inside the box.
    pub box_score: f32,
    /// The line was turned by 180 degrees before recognition.
    pub rotated: bool,
}

#[derive(Clone, Copy, Debug)]
struct LineRecord {
    polygon: [[f32; 2]; 4],
    text: (u32, u32),
    score: f64,
    box_score: f64,
    rotated: bool,
}

/// The lines of one image, in reading order. Capacity is fixed at
/// construction: at most [`MAX_LINES`] lines and `text_capacity` bytes.
#[derive(Debug)]
pub struct OcrResult {
    lines: Box<heapless::Vec<LineRecord, MAX_LINES>>,
    text: String,
}

impl OcrResult {
    fn with_capacity(text: usize) -> Self {
        Self {
            lines: Box::new(heapless::Vec::new()),
            text: String::with_capacity(text),
        }
    }

    fn clear(&mut self) {
        self.lines.clear();
        self.text.clear();
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// `true` when no text was found.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Line `i`.
    pub fn get(&self, i: usize) -> Option<TextLine<'_>> {
        self.lines.get(i).map(|r| self.view(r))
    }

    /// The lines in reading order.
    pub fn lines(&self) -> impl ExactSizeIterator<Item = TextLine<'_>> + '_ {
        self.lines.iter().map(|r| self.view(r))
    }

    fn view(&self, r: &LineRecord) -> TextLine<'_> {
        TextLine {
            polygon: r.polygon,
            text: &self.text[r.text.0 as usize..r.text.1 as usize],
            score: r.score as f32,
            box_score: r.box_score as f32,
            rotated: r.rotated,
        }
    }
}

/// The shape of one cut-out line and the width the recogniser pads it to.
#[derive(Clone, Copy, Debug, Default)]
struct LineShape {
    /// Crop size after the optional 90-degree turn.
    width: usize,
    height: usize,
    /// The crop is turned 90 degrees (taller than 1.5x its width).
    tall: bool,
    /// The reference's padded width for this line.
    rec_width: u32,
}

/// Where the detector's image is after preprocessing, and how its coordinates map back to
/// the source image.
struct Geometry {
    /// The source image's `(width, height)` in pixels.
    raw: (usize, usize),
    /// The preprocessed image's `(width, height)` (padding included).
    size: (usize, usize),
    /// The preprocessed image is `self.scaled` (else the converted source, `self.image`).
    use_scaled: bool,
    /// Source pixels per preprocessed pixel, `(x, y)`.
    ratio: (f64, f64),
    /// Rows of black padding added above (and below) the image.
    pad_top: usize,
}

/// Outcome of recognising one line image.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct LineOutcome {
    /// Classifier label (0: upright, 1: 180 degrees), when it ran.
    pub cls_label: Option<usize>,
    /// Classifier score of that label.
    pub cls_score: f32,
    /// The line was turned by 180 degrees.
    pub rotated: bool,
    /// Recognition score.
    pub score: f64,
    /// The line ran at a width past the largest bucket.
    pub widened: bool,
    /// The line was squeezed into the widest width run.
    pub squeezed: bool,
    /// Recogniser steps decoded (those of the reference's width).
    pub steps: usize,
}

/// A PP-OCR pipeline loaded from an `ocr` bundle.
///
/// [`Ocr::open`] copies the configuration and dictionary out of the bundle
/// and opens its networks as a [`Model`] on the requested [`Device`] (the
/// engine for each network is chosen there, once); each network is then
/// prepared once per input shape on that engine and kept with its session
/// (`net.rs`). [`Ocr::detect_text`] reuses every buffer: images, crops, the
/// probability-map scratch, boxes, and the fixed-capacity result, so after
/// the first image of a given size (and the first line of each width bucket)
/// the host code allocates nothing; on the CPU the tract engine allocates its
/// intermediates inside each run.
pub struct Ocr {
    model: Model,
    config: OcrConfig,
    dict: Dictionary,
    det: Sessions,
    rec: Sessions,
    /// The recogniser's output steps and valid widths per input width (bundles
    /// built before it: `None`, every step the network emits is decoded).
    rec_widths: Option<RecWidths>,
    cls: Option<Prepared>,
    image: BgrImage,
    scaled: BgrImage,
    det_image: BgrImage,
    crop: BgrImage,
    turned: BgrImage,
    line: BgrImage,
    resize: ResizeScratch,
    db: DbPostprocessor,
    boxes: Vec<DetBox>,
    shapes: Vec<LineShape>,
    order: Vec<usize>,
    line_text: String,
    result: OcrResult,
    times: StageTimes,
    stats: OcrStats,
}

impl std::fmt::Debug for Ocr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ocr")
            .field("config", &self.config)
            .field("dictionary", &self.dict.len())
            .field("cls", &self.cls.is_some())
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Ocr {
    /// Open an `ocr` bundle with default options.
    ///
    /// # Errors
    /// See [`Ocr::open`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, OcrError> {
        Self::open(path, &OcrOptions::default())
    }

    /// Open an `ocr` bundle (memory-mapped).
    ///
    /// # Errors
    /// [`OcrError::Model`] (unreadable or corrupt bundle, missing section,
    /// a bundle of another family), [`OcrError::Config`],
    /// [`OcrError::Dictionary`], [`OcrError::Model`] (no engine for a
    /// network on this device, device unavailable), [`OcrError::Network`] (a
    /// network whose I/O does not fit its role, or that does not prepare for
    /// a shape asked for at open).
    pub fn open(path: impl AsRef<Path>, options: &OcrOptions) -> Result<Self, OcrError> {
        Self::from_bundle(open_bundle(path, options.verify_eagerly)?, options)
    }

    /// Prepare the pipeline from an opened bundle.
    ///
    /// # Errors
    /// As [`Ocr::open`].
    pub fn from_bundle(bundle: Arc<Bundle>, options: &OcrOptions) -> Result<Self, OcrError> {
        check_family(&bundle, FAMILY)?;
        let id = bundle.identity();
        let bundle_name = id.name.to_string();
        let mut config = OcrConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        if let Some(v) = options.text_score {
            config.text_score = v;
        }
        // A classifier network: any engine section `ocr/cls/...`.
        let has_cls = bundle.sections().any(|s| {
            matches!(s.kind, SectionKind::Onnx | SectionKind::TensorRtPlan)
                && tether_bundle::network_of(s.name) == CLS
        });
        if let Some(v) = options.use_cls {
            config.use_cls = v;
        }
        config.use_cls &= has_cls;
        config.validate()?;
        let dict = Dictionary::from_section(bundle.section_data(DICT_SECTION)?)?;
        if dict.len() + 1 != config.rec_classes as usize {
            return Err(OcrError::Dictionary(format!(
                "{} entries (with the space) for {} recogniser classes (expected classes - 1)",
                dict.len(),
                config.rec_classes
            )));
        }
        let rec_widths = match bundle.section(REC_WIDTHS_SECTION) {
            Ok(_) => Some(RecWidths::from_section(
                bundle.section_data(REC_WIDTHS_SECTION)?,
            )?),
            Err(_) => {
                log::warn!(
                    "ocr `{bundle_name}` was built before tether recorded the recogniser's steps per width and masked its padding; lines may read differently from rapidocr where they are padded to a width bucket: rebuild the bundle (`tether build --family ocr`)"
                );
                None
            }
        };
        // The widest line text: every step of the widest width run.
        let max_steps = rec_widths
            .as_ref()
            .and_then(|t| t.steps_at(crate::config::MAX_REC_WIDTH))
            .unwrap_or(crate::config::MAX_REC_WIDTH as usize / 4);

        // The model: each network prepared once at open, on the engine chosen
        // for the device; the detector at the first requested image size (else
        // a square image's), the recogniser at the narrowest bucket.
        let (det_w, det_h) = options
            .det_image_sizes
            .first()
            .and_then(|&(w, h)| db::det_input_size(w as usize, h as usize, &config))
            .unwrap_or_else(|| {
                let side = (config.det_limit_side_len as usize / 32).max(1) * 32;
                (side, side)
            });
        let mut model_options = options.model.clone();
        model_options.device = options.device;
        model_options.verify_eagerly = options.verify_eagerly;
        // The recogniser's inputs as the bundle records them: the image, and the
        // `valid_widths` vector (its length fixed) when the build masked its padding.
        let rec_image = vec![
            1,
            3,
            config.rec_height as usize,
            config.rec_widths[0] as usize,
        ];
        let mut rec_inputs: Vec<Vec<usize>> = bundle
            .section(crate::config::REC_SECTION)
            .ok()
            .map(|s| {
                bundle
                    .tensors(s.index)
                    .filter(|t| t.mode == tether_bundle::IoMode::Input)
                    .map(|t| {
                        if t.name == crate::network::VALID_WIDTHS {
                            t.dims.iter().map(|d| d.max(1) as usize).collect()
                        } else {
                            rec_image.clone()
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        if rec_inputs.is_empty() {
            rec_inputs.push(rec_image);
        }
        model_options.input_shapes = vec![
            (DET.into(), vec![vec![1, 3, det_h, det_w]]),
            (REC.into(), rec_inputs),
            (
                CLS.into(),
                vec![vec![
                    1,
                    3,
                    config.cls_height as usize,
                    config.cls_width as usize,
                ]],
            ),
        ];
        let model = Model::from_bundle(Arc::clone(&bundle), &model_options)?;
        for name in [DET, REC] {
            model.network(name)?;
        }
        let cls = if config.use_cls {
            let plan = model.network(CLS)?.plan().clone();
            Some(Prepared::new(&model, CLS, plan)?)
        } else {
            None
        };
        let mut ocr = Self {
            det: net::sessions(
                &model,
                DET,
                ShapePolicy::Exact {
                    capacity: options.det_cache,
                },
            ),
            rec: net::sessions(
                &model,
                REC,
                ShapePolicy::Buckets([
                    vec![config.rec_height as usize],
                    config
                        .rec_width_grid()
                        .into_iter()
                        .map(|w| w as usize)
                        .collect(),
                ]),
            ),
            rec_widths,
            cls,
            model,
            image: BgrImage::default(),
            scaled: BgrImage::default(),
            det_image: BgrImage::default(),
            crop: BgrImage::default(),
            turned: BgrImage::default(),
            line: BgrImage::default(),
            resize: ResizeScratch::default(),
            db: DbPostprocessor::with_capacity(0, MAX_LINES),
            boxes: Vec::with_capacity(MAX_LINES),
            shapes: Vec::with_capacity(MAX_LINES),
            order: Vec::with_capacity(MAX_LINES),
            line_text: String::with_capacity(ctc::max_text_bytes(&dict, max_steps)),
            result: OcrResult::with_capacity(options.text_capacity),
            times: StageTimes::default(),
            stats: OcrStats::default(),
            config,
            dict,
        };
        log::info!(
            "ocr `{}` on {}: det + {}rec ({} classes), {} recognition width buckets {}..={} px, text score >= {}",
            bundle_name,
            ocr.model.device(),
            if ocr.cls.is_some() { "cls + " } else { "" },
            ocr.config.rec_classes,
            ocr.config.rec_widths.len(),
            ocr.config.rec_widths[0],
            ocr.config.rec_widths[ocr.config.rec_widths.len() - 1],
            ocr.config.text_score
        );
        // The recogniser's and classifier's outputs checked once, at open.
        rec_engine(
            &ocr.model,
            &mut ocr.rec,
            &ocr.config,
            ocr.config.rec_widths[0] as usize,
        )?;
        if options.prepare_all_rec_widths {
            for &w in &ocr.config.rec_widths {
                rec_engine(&ocr.model, &mut ocr.rec, &ocr.config, w as usize)?;
            }
        }
        cls_engine(ocr.cls.as_mut())?;
        for &(w, h) in &options.det_image_sizes {
            if let Some((dw, dh)) = db::det_input_size(w as usize, h as usize, &ocr.config) {
                det_engine(&ocr.model, &mut ocr.det, dw, dh)?;
            }
        }
        Ok(ocr)
    }

    /// Read the text in `image`: lines in reading order with their polygon
    /// (source pixels), text and scores. Empty when no text is found.
    ///
    /// # Errors
    /// [`OcrError::Image`] when the image cannot be brought to the
    /// detector's size rules (e.g. 1 pixel tall and 5000 wide);
    /// [`OcrError::Run`] when an engine fails; [`OcrError::Network`] /
    /// [`OcrError::Model`] when a network cannot be prepared for a new
    /// input size;
    /// [`OcrError::TextCapacity`] when the text exceeds
    /// [`OcrOptions::text_capacity`]; [`OcrError::OutputShape`] /
    /// [`OcrError::InputBuffer`] on an engine bug.
    pub fn detect_text(&mut self, image: &ImageView<'_>) -> Result<&OcrResult, OcrError> {
        let t0 = Instant::now();
        self.result.clear();
        self.stats = OcrStats::default();
        self.times = StageTimes::default();
        self.image.convert_from(image);
        let geometry = self.preprocess()?;
        if self.detect_boxes(&geometry, t0)? {
            self.recognize_lines(&geometry)?;
        }
        self.stats.lines = self.result.len();
        self.times.total = t0.elapsed();
        Ok(&self.result)
    }

    /// `RapidOCR.preprocess` and `maybe_add_letterbox` on the converted image: the side
    /// limits (rescaled into `self.scaled` when outside them) and the black bands of a very
    /// short or very wide image. Returns where the detector's image is and how it maps back.
    ///
    /// # Errors
    /// [`OcrError::Scaled`] when a rescale leaves a side of no pixels.
    fn preprocess(&mut self) -> Result<Geometry, OcrError> {
        let (raw_w, raw_h) = (self.image.width, self.image.height);
        // RapidOCR.preprocess: side limits (cur = the image the detector sees).
        let c = &self.config;
        let (mut ratio_w, mut ratio_h) = (1.0f64, 1.0f64);
        let mut use_scaled = false;
        let (mut w, mut h) = (raw_w, raw_h);
        if w.max(h) > c.max_side_len as usize {
            let limit = f64::from(c.max_side_len);
            let r = if h > w {
                limit / h as f64
            } else {
                limit / w as f64
            };
            let (rw, rh) = db::resize_to_multiple_of_32(w, h, r).ok_or(OcrError::Scaled {
                width: raw_w as u32,
                height: raw_h as u32,
                side: "long",
                limit_name: "max_side_len",
                limit: c.max_side_len,
                other: (w.min(h) as f64 * r) as u64,
            })?;
            self.scaled.resize(rw, rh);
            resize_linear(
                self.image.pixels(),
                w,
                h,
                w * 3,
                3,
                &mut self.scaled.data,
                rw,
                rh,
                &mut self.resize,
            );
            ratio_h = h as f64 / rh as f64;
            ratio_w = w as f64 / rw as f64;
            (w, h, use_scaled) = (rw, rh, true);
        }
        if w.min(h) < c.min_side_len as usize {
            let limit = f64::from(c.min_side_len);
            let r = if h < w {
                limit / h as f64
            } else {
                limit / w as f64
            };
            let (rw, rh) = db::resize_to_multiple_of_32(w, h, r).ok_or(OcrError::Scaled {
                width: raw_w as u32,
                height: raw_h as u32,
                side: "short",
                limit_name: "min_side_len",
                limit: c.min_side_len,
                other: (w.max(h) as f64 * r) as u64,
            })?;
            self.turned.resize(rw, rh);
            let src = if use_scaled {
                &self.scaled
            } else {
                &self.image
            };
            resize_linear(
                src.pixels(),
                w,
                h,
                w * 3,
                3,
                &mut self.turned.data,
                rw,
                rh,
                &mut self.resize,
            );
            std::mem::swap(&mut self.scaled, &mut self.turned);
            // Composed with a first resize (the reference keeps only the last).
            ratio_h *= h as f64 / rh as f64;
            ratio_w *= w as f64 / rw as f64;
            (w, h, use_scaled) = (rw, rh, true);
        }
        // RapidOCR.maybe_add_letterbox: pad top and bottom with black.
        let whr = decimal_f64(c.width_height_ratio);
        let wide = whr >= 0.0 && w as f64 / h as f64 > whr;
        let mut pad_top = 0usize;
        if h <= c.min_height as usize || wide {
            // `max(int(w / width_height_ratio), min_height) * 2` (a negative
            // ratio, which disables the wide-image rule, gives min_height * 2).
            let new_h = ((w as f64 / whr) as i64).max(i64::from(c.min_height)) * 2;
            pad_top = ((new_h - h as i64).abs() as f64 / 2.0) as usize;
            let src = if use_scaled {
                &self.scaled
            } else {
                &self.image
            };
            self.turned.resize(w, h + 2 * pad_top);
            let out = self.turned.pixels_mut();
            let band = pad_top * w * 3;
            out[..band].fill(0);
            out[band..band + w * h * 3].copy_from_slice(&src.pixels()[..w * h * 3]);
            out[band + w * h * 3..].fill(0);
            std::mem::swap(&mut self.scaled, &mut self.turned);
            h += 2 * pad_top;
            use_scaled = true;
        }
        Ok(Geometry {
            raw: (raw_w, raw_h),
            size: (w, h),
            use_scaled,
            ratio: (ratio_w, ratio_h),
            pad_top,
        })
    }

    /// The detector on the preprocessed image (resized to its input size, normalised), then
    /// the DB post-processing into `self.boxes`. Returns whether there are boxes to read
    /// (`false`: none, or an image too small for the detector).
    ///
    /// # Errors
    /// As [`Ocr::detect_text`].
    fn detect_boxes(&mut self, g: &Geometry, t0: Instant) -> Result<bool, OcrError> {
        let c = &self.config;
        let (w, h, use_scaled) = (g.size.0, g.size.1, g.use_scaled);
        // The detector.
        let Some((dw, dh)) = db::det_input_size(w, h, c) else {
            return Ok(false);
        };
        self.stats.det_input = (dw, dh);
        let src = if use_scaled {
            &self.scaled
        } else {
            &self.image
        };
        self.det_image.resize(dw, dh);
        resize_linear(
            src.pixels(),
            w,
            h,
            w * 3,
            3,
            &mut self.det_image.data,
            dw,
            dh,
            &mut self.resize,
        );
        let mean = c.det_mean.map(decimal_f64);
        let std = c.det_std.map(decimal_f64);
        let engine = det_engine(&self.model, &mut self.det, dw, dh)?;
        normalize_det(
            self.det_image.pixels(),
            dw * dh,
            mean,
            std,
            engine.input_mut("det")?,
        );
        let t1 = Instant::now();
        let prob = engine.run()?;
        let t2 = Instant::now();
        let DbStats { contours, boxes } =
            self.db
                .run(prob, dw, dh, w, h, &self.config, &mut self.boxes)?;
        let t3 = Instant::now();
        self.stats.contours = contours;
        self.stats.boxes = boxes;
        self.times.preprocess = t1 - t0;
        self.times.det = t2 - t1;
        self.times.postprocess = t3 - t2;
        Ok(!self.boxes.is_empty())
    }

    /// Each box of `self.boxes`: its line cut out, classified and recognised at the
    /// reference's padded width; lines above the text score go into `self.result`, their
    /// polygons mapped back to source pixels.
    ///
    /// # Errors
    /// As [`Ocr::detect_text`].
    fn recognize_lines(&mut self, g: &Geometry) -> Result<(), OcrError> {
        let (raw_w, raw_h) = g.raw;
        let (ratio_w, ratio_h) = g.ratio;
        let (use_scaled, pad_top) = (g.use_scaled, g.pad_top);
        // Line sizes and the reference's per-batch padded widths.
        self.shapes.clear();
        for b in &self.boxes {
            let (cw, ch) = crop_size(&b.points);
            let tall = ch as f64 / cw as f64 >= 1.5;
            let (width, height) = if tall { (ch, cw) } else { (cw, ch) };
            self.shapes.push(LineShape {
                width,
                height,
                tall,
                rec_width: 0,
            });
        }
        assign_rec_widths(&mut self.shapes, &mut self.order, &self.config);

        // Each line: cut out, classify, recognise.
        let text_score = decimal_f64(self.config.text_score);
        for i in 0..self.boxes.len() {
            let b = self.boxes[i];
            let shape = self.shapes[i];
            let ta = Instant::now();
            cut_line(
                src_image(use_scaled, &self.scaled, &self.image),
                &b.points,
                shape.tall,
                &mut self.crop,
                &mut self.turned,
            );
            let tb = Instant::now();
            self.times.crop += tb - ta;
            self.line_text.clear();
            let outcome = self.recognize_line(shape.rec_width)?;
            if outcome.rotated {
                self.stats.rotated += 1;
            }
            if outcome.widened {
                self.stats.widened += 1;
            }
            if outcome.squeezed {
                self.stats.squeezed += 1;
            }
            if outcome.score < text_score {
                continue;
            }
            let start = self.result.text.len();
            let needed = start + self.line_text.len();
            if needed > self.result.text.capacity() {
                return Err(OcrError::TextCapacity {
                    needed,
                    capacity: self.result.text.capacity(),
                });
            }
            self.result.text.push_str(&self.line_text);
            // RapidOCR._get_origin_points: undo padding, then scaling (f32).
            let polygon = b.points.map(|p| {
                let x = p[0] * ratio_w as f32;
                let y = (p[1] - pad_top as f32) * ratio_h as f32;
                [x.max(0.0).min(raw_w as f32), y.max(0.0).min(raw_h as f32)]
            });
            // At most MAX_LINES boxes exist, so this cannot overflow.
            let _ = self.result.lines.push(LineRecord {
                polygon,
                text: (start as u32, needed as u32),
                score: outcome.score,
                box_score: b.score,
                rotated: outcome.rotated,
            });
        }
        Ok(())
    }

    /// Classify and recognise the line image in `self.crop` (BGR, the
    /// reference's crop after `get_rotate_crop_image`), padded as the
    /// reference pads a batch of width `rec_width`; the text goes to
    /// `self.line_text`.
    pub(crate) fn recognize_line(&mut self, rec_width: u32) -> Result<LineOutcome, OcrError> {
        let mut out = LineOutcome::default();
        let tc = Instant::now();
        let (cls_h, cls_w, cls_thresh) = (
            self.config.cls_height as usize,
            self.config.cls_width as usize,
            self.config.cls_thresh,
        );
        let (crop_w, crop_h) = (self.crop.width, self.crop.height);
        if self.cls.is_some() {
            let rw = ratio_width(crop_w, crop_h, cls_h, cls_w);
            self.line.resize(rw, cls_h);
            resize_linear(
                self.crop.pixels(),
                crop_w,
                crop_h,
                crop_w * 3,
                3,
                &mut self.line.data,
                rw,
                cls_h,
                &mut self.resize,
            );
            let Some(engine) = self.cls.as_mut() else {
                return Err(OcrError::Network {
                    network: "cls",
                    reason: "no classifier".into(),
                });
            };
            normalize_line(
                self.line.pixels(),
                rw,
                cls_h,
                cls_w,
                engine.input_mut("cls")?,
            );
            let probs = engine.run()?;
            if probs.len() != 2 {
                return Err(OcrError::OutputShape {
                    network: "cls",
                    expected: 2,
                    actual: probs.len(),
                });
            }
            let label = usize::from(probs[1] > probs[0]);
            out.cls_label = Some(label);
            out.cls_score = probs[label];
            if label == 1 && out.cls_score > cls_thresh {
                rotate180(&mut self.crop);
                out.rotated = true;
            }
        }
        let td = Instant::now();
        self.times.cls += td - tc;

        let rec_h = self.config.rec_height as usize;
        let bucket = self.config.rec_bucket(rec_width) as usize;
        out.widened = rec_width > *self.config.rec_widths.last().unwrap_or(&0);
        out.squeezed = rec_width as usize > bucket;
        if out.squeezed {
            log::warn!(
                "a text line needs the recogniser at {rec_width} px; the widest tether runs is {bucket} px: the line is squeezed into it and may read differently from rapidocr"
            );
        }
        let target = (rec_width as usize).min(bucket);
        let rw = ratio_width(crop_w, crop_h, rec_h, target);
        self.line.resize(rw, rec_h);
        resize_linear(
            self.crop.pixels(),
            crop_w,
            crop_h,
            crop_w * 3,
            3,
            &mut self.line.data,
            rw,
            rec_h,
            &mut self.resize,
        );
        let engine = rec_engine(&self.model, &mut self.rec, &self.config, bucket)?;
        normalize_line(
            self.line.pixels(),
            rw,
            rec_h,
            bucket,
            engine.input_mut("rec")?,
        );
        // The reference runs the line's batch at width `target` and decodes every step
        // the network emits there; the bucket pads further. With the bundle's width
        // tables, the recogniser is told the valid widths of `target` (its padding then
        // changes nothing) and the steps of `target` are decoded: the network's own counts,
        // recorded at build. Without them (a bundle built before): every step the network
        // emits at the bucket.
        let table = self.rec_widths.as_ref();
        let valid = table.and_then(|t| t.steps_at(target as u32));
        if let Some(v) = engine.valid_widths_mut()?
            && !table.is_some_and(|t| t.valid_at(target as u32, v))
        {
            return Err(OcrError::Network {
                network: "rec",
                reason: format!(
                    "the bundle's width tables do not cover width {target} for the recogniser's {} valid widths (rebuild the bundle)",
                    v.len()
                ),
            });
        }
        let probs = engine.run()?;
        let classes = self.dict.len() + 1;
        let steps = probs.len() / classes;
        let used = valid.map_or(steps, |v| v.min(steps));
        out.steps = used;
        out.score = ctc::decode(&probs[..used * classes], &self.dict, &mut self.line_text)?;
        self.times.rec += td.elapsed();
        Ok(out)
    }

    /// Put a BGR line image into the crop buffer (self-test).
    pub(crate) fn set_crop(&mut self, bgr: &[u8], width: usize, height: usize) {
        self.crop.resize(width, height);
        self.crop
            .pixels_mut()
            .copy_from_slice(&bgr[..width * height * 3]);
        self.line_text.clear();
    }

    /// The text of the last [`Ocr::recognize_line`].
    pub(crate) fn line_text(&self) -> &str {
        &self.line_text
    }

    /// The lines of the last [`Ocr::detect_text`].
    pub fn result(&self) -> &OcrResult {
        &self.result
    }

    /// Stage timings of the last [`Ocr::detect_text`].
    pub fn stage_times(&self) -> StageTimes {
        self.times
    }

    /// Counts from the last [`Ocr::detect_text`].
    pub fn stats(&self) -> OcrStats {
        self.stats
    }

    /// The effective configuration (bundle values plus overrides).
    pub fn config(&self) -> &OcrConfig {
        &self.config
    }

    /// The recogniser's dictionary (entry `i` is class `i + 1`).
    pub fn dictionary(&self) -> &Dictionary {
        &self.dict
    }

    /// Plans prepared so far: `(det, rec, cls)`, the ones prepared at open
    /// included. Each network is prepared once per input shape it has seen
    /// (detector shapes beyond [`OcrOptions::det_cache`] are dropped and
    /// prepared again when they come back).
    pub fn prepared_engines(&self) -> (usize, usize, usize) {
        (
            self.det.prepared_count(),
            self.rec.prepared_count(),
            usize::from(self.cls.is_some()),
        )
    }

    /// `(network, engine)` for every network of the bundle: the engine chosen
    /// for this device at open (every shape of a network runs on it).
    pub fn engines(&self) -> impl Iterator<Item = (&str, tether_runtime::EngineKind)> + '_ {
        self.model.networks().iter().map(|n| (n.name(), n.engine()))
    }

    /// The model underneath (networks, engine choice, device).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The sessions prepared so far: the detector's and the recogniser's per input shape,
    /// then the direction classifier's (when the bundle has one).
    pub fn sessions(&self) -> impl Iterator<Item = &tether_runtime::session::Session> + '_ {
        self.det
            .values()
            .chain(self.rec.values())
            .chain(self.cls.as_ref())
            .map(crate::net::Prepared::session)
    }

    /// Recogniser widths prepared so far.
    pub fn prepared_rec_widths(&self) -> Vec<usize> {
        self.rec.keys().map(|[_, w]| w).collect()
    }

    /// The opened bundle.
    pub fn bundle(&self) -> &Arc<Bundle> {
        self.model.bundle()
    }
}

/// The detector prepared for input `dw x dh`, its output checked to be
/// `[1, 1, dh, dw]` (a probability map).
fn det_engine<'a>(
    model: &Model,
    cache: &'a mut Sessions,
    dw: usize,
    dh: usize,
) -> Result<&'a mut Prepared, OcrError> {
    let p = net::session(cache, model, DET, dh, dw)?;
    match p.output_shape() {
        [1, 1, oh, ow] if *oh == dh && *ow == dw => Ok(p),
        s => Err(OcrError::OutputShape {
            network: "det",
            expected: dw * dh,
            actual: s.iter().product(),
        }),
    }
}

/// The recogniser prepared for `width`, its output checked to be `[1, T, C]`.
fn rec_engine<'a>(
    model: &Model,
    cache: &'a mut Sessions,
    config: &OcrConfig,
    width: usize,
) -> Result<&'a mut Prepared, OcrError> {
    let classes = config.rec_classes as usize;
    let p = net::session(cache, model, REC, config.rec_height as usize, width)?;
    match p.output_shape() {
        [1, t, c] if *c == classes && *t > 0 => Ok(p),
        s => Err(OcrError::Network {
            network: "rec",
            reason: format!(
                "at input width {width} the output is {s:?}; expected [1, T, {classes}]"
            ),
        }),
    }
}

/// The classifier's output checked to be `[1, 2]`; `None` without one.
fn cls_engine(cls: Option<&mut Prepared>) -> Result<Option<&mut Prepared>, OcrError> {
    let Some(p) = cls else {
        return Ok(None);
    };
    match p.output_shape() {
        [1, 2] => Ok(Some(p)),
        s => Err(OcrError::Network {
            network: "cls",
            reason: format!("output is {s:?}; expected [1, 2]"),
        }),
    }
}

fn src_image<'a>(use_scaled: bool, scaled: &'a BgrImage, image: &'a BgrImage) -> &'a BgrImage {
    if use_scaled { scaled } else { image }
}

/// `get_rotate_crop_image`'s size: the longer of each pair of opposite
/// sides (f32 norms, truncated).
fn crop_size(p: &[[f32; 2]; 4]) -> (usize, usize) {
    let w = db::norm(p[0], p[1]).max(db::norm(p[2], p[3]));
    let h = db::norm(p[0], p[3]).max(db::norm(p[1], p[2]));
    (w as usize, h as usize)
}

/// `get_rotate_crop_image`: warp the quadrilateral to an upright
/// rectangle; turn it 90 degrees counter-clockwise when `tall`.
fn cut_line(
    src: &BgrImage,
    p: &[[f32; 2]; 4],
    tall: bool,
    crop: &mut BgrImage,
    tmp: &mut BgrImage,
) {
    let (w, h) = crop_size(p);
    let (wf, hf) = (w as f32, h as f32);
    let dst = [[0.0, 0.0], [wf, 0.0], [wf, hf], [0.0, hf]];
    match perspective_transform(p, &dst) {
        Some(m) => warp_perspective_cubic(src, &m, w, h, if tall { tmp } else { crop }),
        None => {
            let out = if tall { &mut *tmp } else { &mut *crop };
            out.resize(w, h);
            out.pixels_mut().fill(0);
        }
    }
    if tall {
        rotate90_ccw(tmp, crop);
    }
}

/// The reference's per-line padded recognition width: lines in order of
/// aspect ratio (stable), in batches of `rec_batch`; a batch is padded to
/// `int(rec_height * max(rec_min_width / rec_height, its widest ratio))`
/// (`TextRecognizer.__call__`).
fn assign_rec_widths(shapes: &mut [LineShape], order: &mut Vec<usize>, c: &OcrConfig) {
    let ratio = |p: &LineShape| p.width as f64 / p.height as f64;
    order.clear();
    order.extend(0..shapes.len());
    db::stable_sort_by(order, |&a, &b| ratio(&shapes[a]) < ratio(&shapes[b]));
    let (img_h, img_w) = (f64::from(c.rec_height), f64::from(c.rec_min_width));
    for batch in order.chunks(c.rec_batch as usize) {
        let mut m = img_w / img_h;
        for &i in batch {
            m = m.max(ratio(&shapes[i]));
        }
        let width = (img_h * m) as u32;
        for &i in batch {
            shapes[i].rec_width = width;
        }
    }
}

/// `resize_norm_img`'s resized width: `ceil(height * w / h)` capped at `max_w`.
fn ratio_width(w: usize, h: usize, height: usize, max_w: usize) -> usize {
    let r = w as f64 / h as f64;
    let c = (height as f64 * r).ceil();
    if c > max_w as f64 {
        max_w
    } else {
        (c as usize).max(1)
    }
}

/// `DetPreProcess.normalize` + `permute`: `(v * f32(1/255) - mean) / std`
/// with the subtraction and division in f64 (numpy promotes to the f64
/// mean array), HWC BGR u8 -> CHW f32.
fn normalize_det(px: &[u8], plane: usize, mean: [f64; 3], std: [f64; 3], out: &mut [f32]) {
    let scale = (1.0f64 / 255.0) as f32;
    for c in 0..3 {
        let dst = &mut out[c * plane..(c + 1) * plane];
        for (d, p) in dst.iter_mut().zip(px.chunks_exact(3)) {
            let v = f32::from(p[c]) * scale;
            *d = ((f64::from(v) - mean[c]) / std[c]) as f32;
        }
    }
}

/// `resize_norm_img` for cls / rec: `(v / 255 - 0.5) / 0.5` in f32, CHW,
/// the `rw x h` line written at the left of a zeroed `width`-wide tensor.
fn normalize_line(px: &[u8], rw: usize, h: usize, width: usize, out: &mut [f32]) {
    out.fill(0.0);
    let plane = h * width;
    for c in 0..3 {
        for y in 0..h {
            let dst = &mut out[c * plane + y * width..c * plane + y * width + rw];
            let row = &px[y * rw * 3..(y + 1) * rw * 3];
            for (d, p) in dst.iter_mut().zip(row.chunks_exact(3)) {
                *d = (f32::from(p[c]) / 255.0 - 0.5) / 0.5;
            }
        }
    }
}
