//! YOLOv8 output decoding and class-wise non-maximum suppression.
//!
//! Input: the Ultralytics YOLOv8 head output `[1, 4 + C, N]` (f32, row-major):
//! rows 0..4 are the box centre and size `(cx, cy, w, h)` in network-input
//! pixels, rows `4..4 + C` the per-class scores (already sigmoid).
//!
//! Algorithm (ultralytics/utils/nms.py `non_max_suppression`, with the
//! order made fully deterministic; the onnxruntime reference and the CUDA
//! kernels implement the same):
//!
//! 1. an anchor with any non-finite value (NaN, ±Inf) among its 4 box values and C scores
//!    is never a candidate, and is counted ([`PostStats::nonfinite`]); otherwise class =
//!    first argmax of the scores, score = its value, and the anchor is a candidate when
//!    `score > score_threshold` (strict);
//! 2. sort the kept anchors by score, descending, ties by lower anchor index;
//! 3. greedy NMS per class: a candidate is suppressed when its IoU with an
//!    already kept box of the same class is `> iou_threshold` (strict), IoU
//!    `= inter / (area_a + area_b - inter)` and 0 when that denominator is `<= 0`;
//! 4. stop after `max_detections` boxes;
//! 5. map corners back to source pixels ([`Letterbox::to_source`]).

use heapless::Vec as FixedVec;

use crate::letterbox::Letterbox;
pub use crate::output::PostStats;
use crate::output::{DetectOutput, GpuDetection, OUTPUT_MAGIC};
use crate::{DetectError, MAX_DETECTIONS};

/// Axis-aligned box in pixels: `(x1, y1)` top-left, `(x2, y2)` bottom-right.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BoundingBox {
    /// Left edge.
    pub x1: f32,
    /// Top edge.
    pub y1: f32,
    /// Right edge.
    pub x2: f32,
    /// Bottom edge.
    pub y2: f32,
}

impl BoundingBox {
    /// Area in square pixels (0 for an inverted box).
    pub fn area(&self) -> f32 {
        (self.x2 - self.x1).max(0.0) * (self.y2 - self.y1).max(0.0)
    }

    /// Intersection over union; 0 when the union is empty.
    pub fn iou(&self, other: &BoundingBox) -> f32 {
        let iw = (self.x2.min(other.x2) - self.x1.max(other.x1)).max(0.0);
        let ih = (self.y2.min(other.y2) - self.y1.max(other.y1)).max(0.0);
        let inter = iw * ih;
        let denom = self.area() + other.area() - inter;
        if denom > 0.0 { inter / denom } else { 0.0 }
    }
}

/// One detected object.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Detection {
    /// Class index into the bundle's labels.
    pub class_id: u16,
    /// Class score in [0, 1].
    pub score: f32,
    /// Box in source-image pixels.
    pub bbox: BoundingBox,
}

/// Detections of one image, best first, in a fixed-capacity vector
/// (no heap allocation).
pub type Detections = FixedVec<Detection, MAX_DETECTIONS>;

#[derive(Clone, Copy, Debug)]
struct Candidate {
    anchor: u32,
    class_id: u16,
    score: f32,
    bbox: BoundingBox,
}

/// Decode and NMS with a candidate buffer sized once for `N` anchors.
#[derive(Clone, Debug)]
pub struct Postprocessor {
    num_classes: usize,
    num_anchors: usize,
    candidates: Vec<Candidate>,
}

impl Postprocessor {
    /// A postprocessor for an output `[1, 4 + num_classes, num_anchors]`.
    /// Allocates the candidate buffer (`num_anchors` entries) here, once.
    pub fn new(num_classes: usize, num_anchors: usize) -> Self {
        Self {
            num_classes,
            num_anchors,
            candidates: Vec::with_capacity(num_anchors),
        }
    }

    /// Decode `output`, suppress, and write the result into `out` (cleared first).
    ///
    /// # Errors
    /// [`DetectError::OutputShape`] when `output.len() != (4 + C) * N`.
    pub fn run(
        &mut self,
        output: &[f32],
        letterbox: &Letterbox,
        score_threshold: f32,
        iou_threshold: f32,
        max_detections: usize,
        out: &mut Detections,
    ) -> Result<PostStats, DetectError> {
        let (c, n) = (self.num_classes, self.num_anchors);
        let expected = (4 + c) * n;
        if output.len() != expected {
            return Err(DetectError::OutputShape {
                expected,
                actual: output.len(),
            });
        }
        out.clear();
        self.candidates.clear();
        let (cx, rest) = output.split_at(n);
        let (cy, rest) = rest.split_at(n);
        let (w, rest) = rest.split_at(n);
        let (h, scores) = rest.split_at(n);
        let mut nonfinite = 0usize;
        for a in 0..n {
            let mut best = scores[a];
            let mut best_c = 0usize;
            let mut finite = cx[a].is_finite()
                && cy[a].is_finite()
                && w[a].is_finite()
                && h[a].is_finite()
                && best.is_finite();
            for k in 1..c {
                let s = scores[k * n + a];
                finite &= s.is_finite();
                if s > best {
                    best = s;
                    best_c = k;
                }
            }
            if !finite {
                nonfinite += 1;
                continue;
            }
            if best > score_threshold {
                let (hw, hh) = (w[a] / 2.0, h[a] / 2.0);
                // Capacity is N and at most N candidates exist: push cannot reallocate.
                self.candidates.push(Candidate {
                    anchor: a as u32,
                    // C <= u16::MAX is checked by DetectConfig::validate.
                    class_id: best_c as u16,
                    score: best,
                    bbox: BoundingBox {
                        x1: cx[a] - hw,
                        y1: cy[a] - hh,
                        x2: cx[a] + hw,
                        y2: cy[a] + hh,
                    },
                });
            }
        }
        // Total order: score descending, then anchor ascending (== a stable sort by score).
        self.candidates
            .sort_unstable_by(|p, q| q.score.total_cmp(&p.score).then(p.anchor.cmp(&q.anchor)));
        let limit = max_detections.min(MAX_DETECTIONS);
        // NMS runs in network-input pixels; boxes are mapped back afterwards.
        let mut kept_net: FixedVec<BoundingBox, MAX_DETECTIONS> = FixedVec::new();
        for cand in &self.candidates {
            if out.len() >= limit {
                break;
            }
            let suppressed = out
                .iter()
                .zip(kept_net.iter())
                .any(|(d, b)| d.class_id == cand.class_id && b.iou(&cand.bbox) > iou_threshold);
            if suppressed {
                continue;
            }
            let (x1, y1) = letterbox.to_source(cand.bbox.x1, cand.bbox.y1);
            let (x2, y2) = letterbox.to_source(cand.bbox.x2, cand.bbox.y2);
            // Both vectors hold fewer than `limit <= MAX_DETECTIONS` entries here.
            let _ = kept_net.push(cand.bbox);
            let _ = out.push(Detection {
                class_id: cand.class_id,
                score: cand.score,
                bbox: BoundingBox { x1, y1, x2, y2 },
            });
        }
        Ok(PostStats {
            candidates: self.candidates.len(),
            nonfinite,
            kept: out.len(),
        })
    }

    /// As [`Postprocessor::run`], writing the result record the GPU kernels write
    /// ([`DetectOutput`]): the host flavour of the post-processing stage.
    ///
    /// # Errors
    /// As [`Postprocessor::run`].
    #[allow(clippy::too_many_arguments)]
    pub fn run_into_record(
        &mut self,
        output: &[f32],
        letterbox: &Letterbox,
        score_threshold: f32,
        iou_threshold: f32,
        max_detections: usize,
        scratch: &mut Detections,
        record: &mut DetectOutput,
    ) -> Result<PostStats, DetectError> {
        let stats = self.run(
            output,
            letterbox,
            score_threshold,
            iou_threshold,
            max_detections,
            scratch,
        )?;
        record.count = scratch.len() as u32;
        record.candidates = u32::try_from(stats.candidates).unwrap_or(u32::MAX);
        record.nonfinite = u32::try_from(stats.nonfinite).unwrap_or(u32::MAX);
        record.magic = OUTPUT_MAGIC;
        for (slot, d) in record.det.iter_mut().zip(scratch.iter()) {
            *slot = GpuDetection {
                x1: d.bbox.x1,
                y1: d.bbox.y1,
                x2: d.bbox.x2,
                y2: d.bbox.y2,
                score: d.score,
                class_id: u32::from(d.class_id),
            };
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a `[1, 4 + C, N]` output from (cx, cy, w, h, scores) per anchor.
    fn output(anchors: &[(f32, f32, f32, f32, &[f32])], c: usize) -> Vec<f32> {
        let n = anchors.len();
        let mut v = vec![0f32; (4 + c) * n];
        for (a, (cx, cy, w, h, s)) in anchors.iter().enumerate() {
            v[a] = *cx;
            v[n + a] = *cy;
            v[2 * n + a] = *w;
            v[3 * n + a] = *h;
            for k in 0..c {
                v[(4 + k) * n + a] = s[k];
            }
        }
        v
    }

    fn identity() -> Letterbox {
        Letterbox::new(100, 100, 100, 100)
    }

    #[test]
    fn iou_of_known_boxes() {
        let a = BoundingBox {
            x1: 0.0,
            y1: 0.0,
            x2: 10.0,
            y2: 10.0,
        };
        let b = BoundingBox {
            x1: 5.0,
            y1: 0.0,
            x2: 15.0,
            y2: 10.0,
        };
        assert!((a.iou(&b) - 50.0 / 150.0).abs() < 1e-6);
        let empty = BoundingBox::default();
        assert_eq!(empty.iou(&empty), 0.0);
    }

    #[test]
    fn nms_is_class_wise_and_ordered() {
        let out = output(
            &[
                (50.0, 50.0, 20.0, 20.0, &[0.9, 0.0]),
                (51.0, 50.0, 20.0, 20.0, &[0.8, 0.0]), // overlaps #0, same class: suppressed
                (51.0, 50.0, 20.0, 20.0, &[0.0, 0.85]), // same place, other class: kept
                (10.0, 10.0, 4.0, 4.0, &[0.3, 0.1]),
                (80.0, 80.0, 4.0, 4.0, &[0.25, 0.0]), // == threshold: dropped (strict)
            ],
            2,
        );
        let mut p = Postprocessor::new(2, 5);
        let mut dets = Detections::new();
        let stats = p.run(&out, &identity(), 0.25, 0.7, 300, &mut dets).unwrap();
        assert_eq!(
            stats,
            PostStats {
                candidates: 4,
                nonfinite: 0,
                kept: 3
            }
        );
        let got: Vec<(u16, f32)> = dets.iter().map(|d| (d.class_id, d.score)).collect();
        assert_eq!(got, vec![(0, 0.9), (1, 0.85), (0, 0.3)]);
        assert_eq!(
            dets[0].bbox,
            BoundingBox {
                x1: 40.0,
                y1: 40.0,
                x2: 60.0,
                y2: 60.0
            }
        );
    }

    #[test]
    fn ties_keep_the_lower_anchor_and_max_detections_caps() {
        let out = output(
            &[
                (10.0, 10.0, 2.0, 2.0, &[0.5]),
                (30.0, 30.0, 2.0, 2.0, &[0.5]),
                (50.0, 50.0, 2.0, 2.0, &[0.5]),
            ],
            1,
        );
        let mut p = Postprocessor::new(1, 3);
        let mut dets = Detections::new();
        p.run(&out, &identity(), 0.25, 0.7, 2, &mut dets).unwrap();
        let xs: Vec<f32> = dets.iter().map(|d| d.bbox.x1).collect();
        assert_eq!(xs, vec![9.0, 29.0]);
    }

    #[test]
    fn boxes_map_back_through_the_letterbox_and_clamp() {
        // 200x100 source into 100x100: r = 0.5, top = 25.
        let lb = Letterbox::new(200, 100, 100, 100);
        let out = output(
            &[
                (50.0, 50.0, 20.0, 10.0, &[0.9]),
                (2.0, 26.0, 8.0, 4.0, &[0.8]),
            ],
            1,
        );
        let mut p = Postprocessor::new(1, 2);
        let mut dets = Detections::new();
        p.run(&out, &lb, 0.25, 0.7, 300, &mut dets).unwrap();
        assert_eq!(
            dets[0].bbox,
            BoundingBox {
                x1: 80.0,
                y1: 40.0,
                x2: 120.0,
                y2: 60.0
            }
        );
        // x1 = -2 -> clamped to 0; y1 = 24 -> (24-25)/0.5 = -2 -> 0.
        assert_eq!(dets[1].bbox.x1, 0.0);
        assert_eq!(dets[1].bbox.y1, 0.0);
    }

    #[test]
    fn non_finite_anchors_are_counted_never_detected() {
        // A NaN box with a perfect score, an infinite score, a NaN in the losing class, and
        // one clean anchor: only the clean one is a detection, three are counted.
        let out = output(
            &[
                (f32::NAN, 10.0, 2.0, 2.0, &[0.99, 0.0]),
                (30.0, 30.0, 2.0, 2.0, &[f32::INFINITY, 0.0]),
                (50.0, 50.0, 2.0, 2.0, &[0.9, f32::NAN]),
                (70.0, 70.0, 2.0, 2.0, &[0.8, 0.1]),
            ],
            2,
        );
        let mut p = Postprocessor::new(2, 4);
        let mut dets = Detections::new();
        let s = p.run(&out, &identity(), 0.25, 0.7, 300, &mut dets).unwrap();
        assert_eq!(
            s,
            PostStats {
                candidates: 1,
                nonfinite: 3,
                kept: 1
            }
        );
        assert_eq!(dets[0].bbox.x1, 69.0);
        assert!(
            dets.iter()
                .all(|d| d.score.is_finite() && d.bbox.x1.is_finite())
        );
    }

    #[test]
    fn nan_scores_never_pass_and_bad_lengths_are_errors() {
        let out = output(&[(10.0, 10.0, 2.0, 2.0, &[f32::NAN])], 1);
        let mut p = Postprocessor::new(1, 1);
        let mut dets = Detections::new();
        let s = p.run(&out, &identity(), 0.25, 0.7, 300, &mut dets).unwrap();
        assert_eq!(s.candidates, 0);
        assert_eq!(s.nonfinite, 1);
        let e = p
            .run(&out[..4], &identity(), 0.25, 0.7, 300, &mut dets)
            .unwrap_err();
        assert!(matches!(
            e,
            DetectError::OutputShape {
                expected: 5,
                actual: 4
            }
        ));
    }
}
