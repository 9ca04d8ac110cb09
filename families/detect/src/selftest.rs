//! The bundle's self-test, in the shared format ([`tether_family::selftest`], section
//! `detect/selftest`): an image, the detections recorded for it and the tolerances, so the
//! device the bundle is deployed on can check its whole pipeline (letterbox, network,
//! decode, NMS) with `tether verify --self-test`.
//!
//! The reference image is scikit-image's scanned `page.png` (384x191 gray, committed as
//! `golden/page.png`, the file `tests/fetch-assets` fetches, same SHA-256); for a model
//! that keeps nothing on it, scikit-image's `astronaut.png` at 256x256
//! (`golden/astronaut_256.png`), and when that model keeps nothing there either, the image
//! where a lowered score threshold ([`SCORE_THRESHOLD`]) keeps its best detections with a
//! margin; only when none does is the test a count of 0 (and says so). The recipe
//! ([`mod@reference`], feature `build`) embeds the onnxruntime reference pipeline's detections
//! for it (`golden/doclaynet_page.json`, `golden/reference.py`) when the bundle's model is
//! the pinned YOLOv8n-DocLayNet at that golden's input size and thresholds; for any other
//! model, or other settings, the expected detections are the build host's CPU engine's (the
//! section's source says which).
//!
//! Entries: inputs [`IMAGE`] (u8 `[height, width, channels]`), [`PIXEL_FORMAT`] (text,
//! [`PixelFormat::as_str`]) and, optional, [`SCORE_THRESHOLD`] (f32: the threshold the test
//! runs at when the bundle's keeps nothing on the image); expected [`CLASS_IDS`] (u32 `[n]`), [`SCORES`] (f32 `[n]`) and
//! [`BOXES`] (f32 `[n, 4]`: `x1, y1, x2, y2` in source pixels), best first; tolerances
//! [`MAX_SCORE_DIFF`] and [`MIN_IOU`].
//!
//! Pass criterion (the golden test's, `tests/golden.rs`): the same number of detections and
//! the same class for each, in order; every score within [`MAX_SCORE_DIFF`]; every box's IoU
//! with the expected one at least [`MIN_IOU`].

use tether_family::selftest::{Check, Report, Role, SelfTest, SelfTestError, Values};
use tether_family::vision::{ImageView, PixelFormat};

use crate::{DetectError, Detection, FAMILY};

/// Input entry: the image's pixels, `[height, width, channels]`.
pub const IMAGE: &str = "image";
/// Input entry: its [`PixelFormat`] name.
pub const PIXEL_FORMAT: &str = "pixel_format";
/// Expected entry: each detection's class index.
pub const CLASS_IDS: &str = "class_ids";
/// Expected entry: each detection's score.
pub const SCORES: &str = "scores";
/// Expected entry: each detection's box, `[n, 4]`, source pixels.
pub const BOXES: &str = "boxes";
/// Input entry (optional, f32 scalar): the score threshold the test runs at instead of the
/// bundle's. The recipe records it for a model that finds nothing on the reference image at
/// the bundle's threshold (a model of another domain than document layout): it lowers the
/// threshold to keep that model's best detections ([`threshold_for`]), so that their
/// classes, scores and boxes are compared, not only a count of 0.
pub const SCORE_THRESHOLD: &str = "score_threshold";
/// Tolerance entry: the largest accepted absolute difference of a score.
pub const MAX_SCORE_DIFF: &str = "max_score_diff";
/// Tolerance entry: the smallest accepted IoU of a box with the expected one.
pub const MIN_IOU: &str = "min_iou";
/// The tolerances the recipe writes: scores within 1e-3, IoU at least 0.9 (the golden
/// test's bar, the acceptance rule).
pub const TOLERANCES: (f32, f32) = (1e-3, 0.9);

fn bad(what: impl Into<String>) -> DetectError {
    DetectError::SelfTest(SelfTestError::Malformed(what.into()))
}

/// A payload: `image`, the detections `expected` for it, the tolerances ([`TOLERANCES`])
/// and where the expected values come from.
pub fn payload(
    image: &ImageView<'_>,
    expected: &[Detection],
    source: String,
    score_threshold: Option<f32>,
) -> SelfTest {
    let (w, h, f) = (image.width(), image.height(), image.format());
    let pixels: Vec<u8> = (0..h as usize)
        .flat_map(|y| image.row(y).iter().copied())
        .collect();
    let n = expected.len() as u32;
    let mut test = SelfTest::new(source)
        .with(
            Role::Input,
            IMAGE,
            &[h, w, f.channels() as u32],
            Values::U8(pixels),
        )
        .with(
            Role::Input,
            PIXEL_FORMAT,
            &[],
            Values::Text(f.as_str().into()),
        )
        .with(
            Role::Expected,
            CLASS_IDS,
            &[n],
            Values::U32(expected.iter().map(|d| u32::from(d.class_id)).collect()),
        )
        .with(
            Role::Expected,
            SCORES,
            &[n],
            Values::F32(expected.iter().map(|d| d.score).collect()),
        )
        .with(
            Role::Expected,
            BOXES,
            &[n, 4],
            Values::F32(
                expected
                    .iter()
                    .flat_map(|d| [d.bbox.x1, d.bbox.y1, d.bbox.x2, d.bbox.y2])
                    .collect(),
            ),
        )
        .with(
            Role::Tolerance,
            MAX_SCORE_DIFF,
            &[],
            Values::F32(vec![TOLERANCES.0]),
        )
        .with(
            Role::Tolerance,
            MIN_IOU,
            &[],
            Values::F32(vec![TOLERANCES.1]),
        );
    if let Some(t) = score_threshold {
        test.set(Role::Input, SCORE_THRESHOLD, &[], Values::F32(vec![t]));
    }
    test
}

/// The test's own score threshold ([`SCORE_THRESHOLD`]), `None` when it runs at the
/// bundle's.
///
/// # Errors
/// [`DetectError::SelfTest`] for an entry that is not one f32 in `(0, 1)`.
pub fn score_threshold(test: &SelfTest) -> Result<Option<f32>, DetectError> {
    if !test.has(Role::Input, SCORE_THRESHOLD) {
        return Ok(None);
    }
    let t = test.f32_scalar(Role::Input, SCORE_THRESHOLD)?;
    if t > 0.0 && t < 1.0 {
        Ok(Some(t))
    } else {
        Err(bad(format!(
            "{SCORE_THRESHOLD} {t} (expected a value in (0, 1))"
        )))
    }
}

/// Most detections a lowered self-test threshold keeps ([`threshold_for`]).
pub const LOWERED_KEEP: usize = 10;

/// The score threshold that keeps the best detections of `candidates` (best first, found at a
/// threshold below all of them) with a margin: halfway between the last score kept and the
/// next, at most [`LOWERED_KEEP`] kept, and the gap at least 10 times the score tolerance on
/// each side so that a device within tolerance keeps the same ones. `None` when no such gap
/// exists. Below `floor` (the threshold the candidates were found at) nothing is known, so
/// the last candidate's gap is to `floor`.
pub fn threshold_for(candidates: &[Detection], floor: f32) -> Option<f32> {
    let margin = 10.0 * TOLERANCES.0;
    (1..=candidates.len().min(LOWERED_KEEP))
        .rev()
        .find_map(|k| {
            let last = candidates[k - 1].score;
            let next = candidates.get(k).map_or(floor, |d| d.score);
            let t = 0.5 * (last + next);
            (last - t >= margin && t - next >= margin && t < 1.0).then_some(t)
        })
}

/// The test's image, checked against its pixel format.
///
/// # Errors
/// [`DetectError::SelfTest`] naming the entry and what is wrong.
pub fn input(test: &SelfTest) -> Result<ImageView<'_>, DetectError> {
    let (pixels, shape) = test.u8s(Role::Input, IMAGE)?;
    let name = test.text(Role::Input, PIXEL_FORMAT)?;
    let format =
        PixelFormat::from_name(name).ok_or_else(|| bad(format!("pixel format `{name}`")))?;
    match *shape {
        [h, w, c] if c as usize == format.channels() => {
            ImageView::new(pixels, w, h, format).map_err(|e| bad(format!("image: {e}")))
        }
        _ => Err(bad(format!(
            "image of shape {shape:?} for {name} (expected [height, width, {}])",
            format.channels()
        ))),
    }
}

/// Intersection over union of two `[x1, y1, x2, y2]` boxes (0 when both are empty).
fn iou(a: [f32; 4], b: [f32; 4]) -> f32 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let area = |r: [f32; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let union = area(a) + area(b) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

/// Compare the detections `got` (computed on `engine`) with the expected ones.
///
/// # Errors
/// [`DetectError::SelfTest`] when the test lacks an entry or its lists differ in length.
pub fn compare(test: &SelfTest, got: &[Detection], engine: &str) -> Result<Report, DetectError> {
    let classes = test.u32s(Role::Expected, CLASS_IDS)?;
    let scores = test.f32s(Role::Expected, SCORES)?;
    let boxes = test.f32s(Role::Expected, BOXES)?;
    if scores.len() != classes.len() || boxes.len() != 4 * classes.len() {
        return Err(bad(format!(
            "{} classes, {} scores and {} box values",
            classes.len(),
            scores.len(),
            boxes.len()
        )));
    }
    let max_score_diff = test.tolerance(MAX_SCORE_DIFF)?;
    let min_iou = test.tolerance(MIN_IOU)?;
    let same_classes = got.len() == classes.len()
        && got
            .iter()
            .zip(classes)
            .all(|(d, &c)| u32::from(d.class_id) == c);
    let (mut worst_score, mut worst_score_at) = (0f32, 0);
    let (mut lowest_iou, mut lowest_iou_at) = (1f32, 0);
    for (i, d) in got.iter().enumerate().take(classes.len()) {
        let ds = (d.score - scores[i]).abs();
        let ds = if ds.is_nan() { f32::INFINITY } else { ds };
        if ds > worst_score {
            (worst_score, worst_score_at) = (ds, i);
        }
        let b = [
            boxes[4 * i],
            boxes[4 * i + 1],
            boxes[4 * i + 2],
            boxes[4 * i + 3],
        ];
        let o = iou([d.bbox.x1, d.bbox.y1, d.bbox.x2, d.bbox.y2], b);
        let o = if o.is_nan() { 0.0 } else { o };
        if o < lowest_iou {
            (lowest_iou, lowest_iou_at) = (o, i);
        }
    }
    let summary = format!(
        "{} detection{} on {engine} (expected {}{}), worst |score diff| {worst_score:.2e} (tolerance {max_score_diff:.0e}), lowest IoU {lowest_iou:.4} (minimum {min_iou})",
        got.len(),
        if got.len() == 1 { "" } else { "s" },
        classes.len(),
        if same_classes || got.len() != classes.len() {
            ""
        } else {
            ", classes differ"
        }
    );
    // With no expected detection only the count is compared: say so, and point no check at a
    // detection that does not exist.
    let compared = got.len().min(classes.len());
    let summary = if classes.is_empty() {
        format!("{summary}; no detection expected on this image, so only the count is compared")
    } else if let Some(t) = score_threshold(test)? {
        format!("{summary}, at score threshold {t} (the bundle's keeps nothing on this image)")
    } else {
        summary
    };
    let at = |c: Check, i: usize| if compared > 0 { c.at(i) } else { c };
    Ok(Report::new(
        FAMILY,
        test,
        same_classes,
        vec![
            at(
                Check::at_most(
                    "|score diff|",
                    f64::from(worst_score),
                    f64::from(max_score_diff),
                ),
                worst_score_at,
            ),
            at(
                Check::at_least("IoU", f64::from(lowest_iou), f64::from(min_iou)),
                lowest_iou_at,
            ),
        ],
        summary,
    ))
}

/// What the recipe embeds: the committed golden (see the module documentation) and when it
/// applies.
#[cfg(feature = "build")]
pub mod reference {
    use tether_family::recipe::sha256_hex;
    use tether_family::selftest::SelfTest;

    use crate::{BoundingBox, DetectConfig, DetectError, Detection};

    use super::bad;

    /// scikit-image 0.26.0's `skimage/data/page.png`, as `tests/fetch-assets` fetches it.
    pub const PAGE_PNG: &[u8] = include_bytes!("../golden/page.png");
    /// The onnxruntime reference pipeline's output for it with YOLOv8n-DocLayNet at 1024.
    pub const GOLDEN_JSON: &str = include_str!("../golden/doclaynet_page.json");

    /// The reference image, decoded (8-bit gray, 384x191).
    ///
    /// # Errors
    /// [`DetectError::SelfTest`] when the committed PNG does not decode (a build defect).
    pub fn page() -> Result<image::GrayImage, DetectError> {
        Ok(image::load_from_memory(PAGE_PNG)
            .map_err(|e| bad(format!("golden/page.png: {e}")))?
            .to_luma8())
    }

    /// scikit-image 0.26.0's `skimage/data/astronaut.png` (NASA, public domain), reduced to
    /// 256x256 RGB by FFmpeg 5.1 (`scale=256:256:flags=area`): the self-test's image for a
    /// model that keeps nothing on the page (people, faces and objects: the common domains).
    pub const PHOTO_PNG: &[u8] = include_bytes!("../golden/astronaut_256.png");

    /// The photo, decoded (8-bit RGB, 256x256).
    ///
    /// # Errors
    /// [`DetectError::SelfTest`] when the committed PNG does not decode (a build defect).
    pub fn photo() -> Result<image::RgbImage, DetectError> {
        Ok(image::load_from_memory(PHOTO_PNG)
            .map_err(|e| bad(format!("golden/astronaut_256.png: {e}")))?
            .to_rgb8())
    }

    /// The golden detections and their source, when the bundle's model (its ONNX file's
    /// SHA-256 `model_sha256`) and `config` are the golden's: the same file, input size,
    /// thresholds and detection limit; `None` otherwise.
    ///
    /// # Errors
    /// [`DetectError::SelfTest`] when the committed golden is malformed (a build defect).
    pub fn golden_for(
        model_sha256: &str,
        config: &DetectConfig,
    ) -> Result<Option<(Vec<Detection>, String)>, DetectError> {
        let g: serde_json::Value =
            serde_json::from_str(GOLDEN_JSON).map_err(|e| bad(format!("golden JSON: {e}")))?;
        let num = |v: &serde_json::Value, what: &str| {
            v.as_f64()
                .ok_or_else(|| bad(format!("golden JSON: `{what}` is not a number")))
        };
        if g["image_sha256"].as_str() != Some(sha256_hex(PAGE_PNG).as_str()) {
            return Err(bad(
                "golden/page.png is not the image the golden was made from",
            ));
        }
        let same = g["model_sha256"].as_str() == Some(model_sha256)
            && num(&g["input_size"][0], "input_size")? == f64::from(config.input_height)
            && num(&g["input_size"][1], "input_size")? == f64::from(config.input_width)
            && num(&g["score_threshold"], "score_threshold")? as f32 == config.score_threshold
            && num(&g["iou_threshold"], "iou_threshold")? as f32 == config.iou_threshold
            && num(&g["max_detections"], "max_detections")? == f64::from(config.max_detections);
        if !same {
            return Ok(None);
        }
        let list = g["detections"]
            .as_array()
            .ok_or_else(|| bad("golden JSON has no `detections`"))?;
        let mut dets = Vec::with_capacity(list.len());
        for d in list {
            let b = |i: usize| num(&d["box"][i], "box").map(|v| v as f32);
            dets.push(Detection {
                class_id: num(&d["class_id"], "class_id")? as u16,
                score: num(&d["score"], "score")? as f32,
                bbox: BoundingBox {
                    x1: b(0)?,
                    y1: b(1)?,
                    x2: b(2)?,
                    y2: b(3)?,
                },
            });
        }
        let source = format!(
            "the onnxruntime {} reference pipeline (families/detect/golden/reference.py) on the pinned YOLOv8n-DocLayNet (families/detect/golden/doclaynet_page.json)",
            g["onnxruntime_version"].as_str().unwrap_or("?")
        );
        Ok(Some((dets, source)))
    }

    /// Whether `test` is the golden one (for the build log).
    pub fn is_golden(test: &SelfTest) -> bool {
        test.source.contains("doclaynet_page.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoundingBox;

    fn det(class_id: u16, score: f32, x: f32) -> Detection {
        Detection {
            class_id,
            score,
            bbox: BoundingBox {
                x1: x,
                y1: 0.0,
                x2: x + 10.0,
                y2: 10.0,
            },
        }
    }

    #[test]
    fn a_lowered_threshold_keeps_the_best_with_a_margin_and_round_trips() {
        // Found at 0.09: gaps of 0.2, 0.005 and 0.005 to the floor (under 10 x 1e-3): the
        // cut goes in the wide gap only.
        let c = [det(1, 0.30, 0.0), det(2, 0.10, 20.0), det(2, 0.095, 40.0)];
        let t = threshold_for(&c, 0.09).unwrap();
        assert!((t - 0.2).abs() < 1e-6, "{t}");
        // The last candidate's gap is to the floor it was found at.
        let t = threshold_for(&c[..1], 1e-3).unwrap();
        assert!((t - 0.1505).abs() < 1e-6, "{t}");
        // No gap wide enough: no lowered test.
        assert_eq!(threshold_for(&[det(1, 0.005, 0.0)], 1e-3), None);
        assert_eq!(threshold_for(&[], 1e-3), None);
        // At most LOWERED_KEEP kept, even when every gap is wide.
        let many: Vec<_> = (0..20)
            .map(|i| det(0, 0.9 - 0.04 * i as f32, 0.0))
            .collect();
        let t = threshold_for(&many, 1e-3).unwrap();
        assert_eq!(many.iter().filter(|d| d.score > t).count(), LOWERED_KEEP);
        // Recorded and read back; absent means the bundle's; out of (0, 1) is refused.
        let px = vec![7u8; 4 * 3];
        let image = ImageView::new(&px, 4, 3, PixelFormat::Gray8).unwrap();
        let p = payload(&image, &c[..1], "test".into(), Some(0.2));
        let back = SelfTest::from_section(&p.to_section()).unwrap();
        assert_eq!(score_threshold(&back).unwrap(), Some(0.2));
        let r = compare(&back, &c[..1], "cpu").unwrap();
        assert!(
            r.passed && r.summary.contains("at score threshold 0.2"),
            "{r}"
        );
        let p = payload(&image, &c[..1], "test".into(), None);
        assert_eq!(score_threshold(&p).unwrap(), None);
        let p = payload(&image, &c[..1], "test".into(), Some(1.5));
        assert!(score_threshold(&p).is_err());
    }

    #[test]
    fn a_payload_round_trips_and_compares() {
        let px = vec![7u8; 4 * 3];
        let image = ImageView::new(&px, 4, 3, PixelFormat::Gray8).unwrap();
        let want = [det(3, 0.9, 0.0), det(1, 0.5, 20.0)];
        let t = payload(&image, &want, "test".into(), None);
        let back = SelfTest::from_section(&t.to_section()).unwrap();
        assert_eq!(back, t);
        let v = input(&back).unwrap();
        assert_eq!(
            (v.width(), v.height(), v.format()),
            (4, 3, PixelFormat::Gray8)
        );
        assert!(compare(&t, &want, "cpu").unwrap().passed);
        // A score off by more than 1e-3 fails and is located.
        let mut got = want;
        got[1].score += 2e-3;
        let r = compare(&t, &got, "cpu").unwrap();
        assert!(!r.passed && r.checks[0].at == Some(1), "{r}");
        // A box moved by half its width: IoU 1/3.
        let mut got = want;
        got[0].bbox.x1 += 5.0;
        got[0].bbox.x2 += 5.0;
        let r = compare(&t, &got, "cpu").unwrap();
        assert!(
            !r.passed && (r.checks[1].value - 1.0 / 3.0).abs() < 1e-6,
            "{r}"
        );
        // Another class, or a detection missing, fails.
        let mut got = want;
        got[0].class_id = 4;
        let r = compare(&t, &got, "cpu").unwrap();
        assert!(!r.passed && r.summary.contains("classes differ"), "{r}");
        assert!(!compare(&t, &want[..1], "cpu").unwrap().passed);
        // NaN scores fail.
        let mut got = want;
        got[0].score = f32::NAN;
        assert!(!compare(&t, &got, "cpu").unwrap().passed);
    }

    #[test]
    fn a_bad_image_entry_is_named() {
        let t = SelfTest::new("x")
            .with(Role::Input, IMAGE, &[2, 2, 3], Values::U8(vec![0; 12]))
            .with(Role::Input, PIXEL_FORMAT, &[], Values::Text("gray8".into()));
        let e = input(&t).unwrap_err();
        assert!(e.to_string().contains("[2, 2, 3] for gray8"), "{e}");
    }

    #[cfg(feature = "build")]
    #[test]
    fn the_golden_applies_to_the_pinned_model_and_settings_only() {
        let page = reference::page().unwrap();
        assert_eq!(page.dimensions(), (384, 191));
        let config = crate::DetectConfig::ultralytics(1024, 1024, 11, 21504);
        let pinned = "7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957";
        let (dets, source) = reference::golden_for(pinned, &config).unwrap().unwrap();
        assert_eq!(dets.len(), 2);
        assert!(source.contains("onnxruntime 1.32.0"), "{source}");
        assert!(reference::golden_for("00", &config).unwrap().is_none());
        let mut other = config;
        other.score_threshold = 0.5;
        assert!(reference::golden_for(pinned, &other).unwrap().is_none());
        let at_640 = crate::DetectConfig::ultralytics(640, 640, 11, 8400);
        assert!(reference::golden_for(pinned, &at_640).unwrap().is_none());
    }
}
