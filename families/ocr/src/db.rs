//! Text detection around the DB network: input sizing and the Differentiable
//! Binarization post-processing (Liao et al., "Real-time Scene Text Detection
//! with Differentiable Binarization", AAAI 2020), step for step as the
//! reference's `DetPreProcess`, `DBPostProcess` and `TextDetector`
//! (`rapidocr_onnxruntime/ch_ppocr_det/`), and `RapidOCR.sorted_boxes`.

use crate::OcrError;
use crate::config::OcrConfig;
use crate::contours::{Contours, dilate2x2};
use crate::geometry::{
    HullScratch, ScoreScratch, box_score, decimal_f64, min_area_rect, mini_box, unclip,
};

/// A detected text box: corners top-left, top-right, bottom-right,
/// bottom-left in pixels of the image given to the detector.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DetBox {
    /// Corners (integer values, as the reference's int32 boxes).
    pub points: [[f32; 2]; 4],
    /// Box score: mean probability inside the box before unclipping.
    pub score: f64,
}

/// Python's `round()` on f64 (half to even) as an integer.
fn py_round(v: f64) -> i64 {
    v.round_ties_even() as i64
}

/// The resize rule the reference applies before detection and for the
/// global side limits (`DetPreProcess.resize`, `reduce_max_side`,
/// `increase_min_side`): scale by `ratio`, truncate, then round each side to
/// a multiple of 32 (half to even). `None` when a side rounds to 0.
pub fn resize_to_multiple_of_32(w: usize, h: usize, ratio: f64) -> Option<(usize, usize)> {
    let rh = (h as f64 * ratio) as i64;
    let rw = (w as f64 * ratio) as i64;
    let rh = py_round(rh as f64 / 32.0) * 32;
    let rw = py_round(rw as f64 / 32.0) * 32;
    (rw > 0 && rh > 0).then_some((rw as usize, rh as usize))
}

/// The detector input size `(width, height)` for an image of `w x h`
/// (`DetPreProcess.resize` with `limit_side_len` / `limit_type`), or `None`
/// when the image is too small to give a non-empty input.
pub fn det_input_size(w: usize, h: usize, config: &OcrConfig) -> Option<(usize, usize)> {
    let limit = f64::from(config.det_limit_side_len);
    let ratio = if config.det_limit_max {
        if w.max(h) as f64 > limit {
            if h > w {
                limit / h as f64
            } else {
                limit / w as f64
            }
        } else {
            1.0
        }
    } else if (w.min(h) as f64) < limit {
        if h < w {
            limit / h as f64
        } else {
            limit / w as f64
        }
    } else {
        1.0
    };
    resize_to_multiple_of_32(w, h, ratio)
}

/// DB post-processing with its buffers, reused from image to image.
#[derive(Clone, Debug, Default)]
pub struct DbPostprocessor {
    bitmap: Vec<u8>,
    mask: Vec<u8>,
    contours: Contours,
    hull: HullScratch,
    score: ScoreScratch,
    offset: Vec<[i32; 2]>,
    poly: Vec<[f32; 2]>,
    raw: Vec<DetBox>,
}

/// Counts from the last [`DbPostprocessor::run`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DbStats {
    /// Contours found in the binary map.
    pub contours: usize,
    /// Boxes after every filter.
    pub boxes: usize,
}

impl DbPostprocessor {
    /// Buffers sized for probability maps of up to `pixels` pixels.
    pub fn with_capacity(pixels: usize, max_boxes: usize) -> Self {
        Self {
            bitmap: Vec::with_capacity(pixels),
            mask: Vec::with_capacity(pixels),
            contours: Contours::with_capacity((pixels.isqrt() + 2).pow(2), 4096),
            raw: Vec::with_capacity(max_boxes),
            ..Self::default()
        }
    }

    /// Boxes of the probability map `prob` (`w x h`, the det output
    /// `[1, 1, h, w]`) in pixels of the `dest_w x dest_h` image that was fed
    /// to the detector, in reading order (`sorted_boxes`), into `out`.
    ///
    /// # Errors
    /// [`OcrError::OutputShape`] when `prob` does not hold `w * h` values.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        prob: &[f32],
        w: usize,
        h: usize,
        dest_w: usize,
        dest_h: usize,
        config: &OcrConfig,
        out: &mut Vec<DetBox>,
    ) -> Result<DbStats, OcrError> {
        if prob.len() != w * h {
            return Err(OcrError::OutputShape {
                network: "det",
                expected: w * h,
                actual: prob.len(),
            });
        }
        out.clear();
        self.raw.clear();
        // `pred > thresh` (the threshold is f32 in numpy's comparison).
        self.bitmap.clear();
        self.bitmap
            .extend(prob.iter().map(|&p| u8::from(p > config.det_thresh)));
        let mask = if config.det_dilation {
            dilate2x2(&self.bitmap, w, h, &mut self.mask);
            &self.mask
        } else {
            &self.bitmap
        };
        self.contours.find(mask, w, h);
        let count = self.contours.len().min(config.det_max_candidates as usize);
        let min_size = config.det_min_size as f32;
        let box_thresh = decimal_f64(config.det_box_thresh);
        let ratio = decimal_f64(config.det_unclip_ratio);
        let (sx, sy) = (dest_w as f32, dest_h as f32);
        for i in 0..count {
            let contour = self.contours.get(i);
            let rect = min_area_rect(contour, &mut self.hull);
            let (pts, side) = mini_box(&rect);
            if side < min_size {
                continue;
            }
            let score = if config.det_score_slow {
                self.poly.clear();
                self.poly
                    .extend(contour.iter().map(|p| [p[0] as f32, p[1] as f32]));
                box_score(prob, w, h, &self.poly, &mut self.score)
            } else {
                box_score(prob, w, h, &pts, &mut self.score)
            };
            if box_thresh > score {
                continue;
            }
            unclip(&pts, ratio, &mut self.offset);
            let rect = min_area_rect(&self.offset, &mut self.hull);
            let (b, side) = mini_box(&rect);
            if side < min_size + 2.0 {
                continue;
            }
            let scale = |v: f32, n: usize, dest: f32| {
                (v / n as f32 * dest).round_ties_even().clamp(0.0, dest)
            };
            let points = b.map(|p| [scale(p[0], w, sx), scale(p[1], h, sy)]);
            self.raw.push(DetBox { points, score });
        }
        // TextDetector.filter_tag_det_res.
        for b in &self.raw {
            let mut p = order_points_clockwise(&b.points);
            for q in &mut p {
                q[0] = q[0].max(0.0).min((dest_w - 1) as f32).trunc();
                q[1] = q[1].max(0.0).min((dest_h - 1) as f32).trunc();
            }
            let rect_w = norm(p[0], p[1]) as i64;
            let rect_h = norm(p[0], p[3]) as i64;
            if rect_w <= 3 || rect_h <= 3 {
                continue;
            }
            out.push(DetBox {
                points: p,
                score: b.score,
            });
        }
        sort_reading_order(out);
        Ok(DbStats {
            contours: self.contours.len(),
            boxes: out.len(),
        })
    }
}

/// Stable insertion sort (Python's `sorted` order for equal keys) that
/// never allocates; `less(a, b)` is `a < b`. Quadratic, for the at most
/// [`crate::MAX_LINES`] boxes of an image.
pub fn stable_sort_by<T: Copy>(v: &mut [T], less: impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && less(&x, &v[j - 1]) {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// `np.linalg.norm(a - b)` in f32.
pub fn norm(a: [f32; 2], b: [f32; 2]) -> f32 {
    let (dx, dy) = (a[0] - b[0], a[1] - b[1]);
    (dx * dx + dy * dy).sqrt()
}

/// `TextDetector.order_points_clockwise` (after imutils): the two left-most
/// points (stable order by x) split by y into top-left / bottom-left, the
/// other two into top-right / bottom-right; returns `[tl, tr, br, bl]`.
pub fn order_points_clockwise(pts: &[[f32; 2]; 4]) -> [[f32; 2]; 4] {
    let mut xs = *pts;
    xs.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (mut left, mut right) = ([xs[0], xs[1]], [xs[2], xs[3]]);
    left.sort_by(|a, b| a[1].total_cmp(&b[1]));
    right.sort_by(|a, b| a[1].total_cmp(&b[1]));
    [left[0], right[0], right[1], left[1]]
}

/// `RapidOCR.sorted_boxes`: sort by the top-left corner's (y, x), then move
/// a box before its predecessors while it is on the same line (top-left y
/// within 10 pixels) and further left.
pub fn sort_reading_order(boxes: &mut [DetBox]) {
    stable_sort_by(boxes, |a, b| {
        a.points[0][1]
            .total_cmp(&b.points[0][1])
            .then(a.points[0][0].total_cmp(&b.points[0][0]))
            .is_lt()
    });
    let n = boxes.len();
    for i in 0..n.saturating_sub(1) {
        for j in (0..=i).rev() {
            let (a, b) = (boxes[j].points[0], boxes[j + 1].points[0]);
            if (b[1] - a[1]).abs() < 10.0 && b[0] < a[0] {
                boxes.swap(j, j + 1);
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn det_sizes_follow_the_reference() {
        let c = OcrConfig::rapidocr(6625);
        // page.png (384x191) and text.png (448x172) as the goldens record.
        assert_eq!(det_input_size(384, 191, &c), Some((1472, 736)));
        assert_eq!(det_input_size(448, 172, &c), Some((1920, 736)));
        assert_eq!(det_input_size(1000, 800, &c), Some((992, 800)));
        assert_eq!(resize_to_multiple_of_32(10, 10, 1.0), None);
    }

    #[test]
    fn reading_order() {
        let mk = |x: f32, y: f32| DetBox {
            points: [[x, y], [x + 5.0, y], [x + 5.0, y + 5.0], [x, y + 5.0]],
            score: 1.0,
        };
        let mut b = vec![
            mk(50.0, 12.0),
            mk(10.0, 40.0),
            mk(5.0, 15.0),
            mk(90.0, 10.0),
        ];
        sort_reading_order(&mut b);
        let order: Vec<[f32; 2]> = b.iter().map(|d| d.points[0]).collect();
        assert_eq!(
            order,
            vec![[5.0, 15.0], [50.0, 12.0], [90.0, 10.0], [10.0, 40.0]]
        );
    }

    #[test]
    fn clockwise_order() {
        let p = [[10.0, 5.0], [0.0, 0.0], [0.0, 4.0], [10.0, 0.0]];
        assert_eq!(
            order_points_clockwise(&p),
            [[0.0, 0.0], [10.0, 0.0], [10.0, 5.0], [0.0, 4.0]]
        );
    }
}
