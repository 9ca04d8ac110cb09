//! Binary-map contours as `cv2.findContours(mask, RETR_LIST,
//! CHAIN_APPROX_SIMPLE)` returns them, and the 2x2 dilation before it.
//!
//! Border following is Suzuki and Abe's algorithm 1 ("Topological Structural
//! Analysis of Digitized Binary Images by Border Following", CVGIP 30, 1985),
//! in the form OpenCV implements it (`modules/imgproc/src/contours.cpp`,
//! `icvFetchContour`): 8-connected foreground, the image framed by zeros,
//! outer borders start at a `0 -> 1` step of the raster scan, hole borders at
//! a `>= 1 -> 0` step; neighbours are searched clockwise for the first step
//! and counter-clockwise while following; a pixel whose right neighbour was
//! examined and is zero is marked negative, so no new border starts there.
//! `CHAIN_APPROX_SIMPLE` keeps a point wherever the chain direction changes.
//! Contours come out in the reverse of the order the scan finds them, as
//! OpenCV's `RETR_LIST` lists them.
//!
//! Checked against OpenCV 5.0 on the maps in `golden/geometry.json`.

/// One contour: a range of [`Contours::points`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContourSpan {
    /// First point.
    pub start: usize,
    /// One past the last point.
    pub end: usize,
}

/// Contours of one binary map, with the buffers reused from map to map.
#[derive(Clone, Debug, Default)]
pub struct Contours {
    /// Border labels of the zero-framed map (`(w + 2) x (h + 2)`).
    labels: Vec<i8>,
    /// Every contour's points `(x, y)`, contour after contour.
    pub points: Vec<[i32; 2]>,
    /// The contours in scan order.
    spans: Vec<ContourSpan>,
}

/// Neighbour offsets `(dx, dy)` by chain code: 0 = east, then
/// counter-clockwise on screen (1 = north-east, 2 = north, ..., 7 = south-east).
const DIRS: [(isize, isize); 8] = [
    (1, 0),
    (1, -1),
    (0, -1),
    (-1, -1),
    (-1, 0),
    (-1, 1),
    (0, 1),
    (1, 1),
];

/// Label of a followed pixel (Suzuki's `NBD`, which `RETR_LIST` never needs
/// to tell apart).
const VISITED: i8 = 2;
/// Label of a followed pixel whose right neighbour is background (`-NBD`).
const VISITED_RIGHT_EDGE: i8 = -2;

impl Contours {
    /// Buffers for maps of up to `pixels` pixels and `points` contour points.
    pub fn with_capacity(pixels: usize, points: usize) -> Self {
        Self {
            labels: Vec::with_capacity(pixels),
            points: Vec::with_capacity(points),
            spans: Vec::with_capacity(1024),
        }
    }

    /// Number of contours found by the last [`Contours::find`].
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// `true` when the last map had no foreground.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Contour `i` in `cv2.findContours` order (the reverse of scan order).
    pub fn get(&self, i: usize) -> &[[i32; 2]] {
        let s = self.spans[self.spans.len() - 1 - i];
        &self.points[s.start..s.end]
    }

    /// Trace every border of `mask` (`w x h`, row-major, non-zero =
    /// foreground).
    pub fn find(&mut self, mask: &[u8], w: usize, h: usize) {
        debug_assert!(mask.len() >= w * h);
        let pw = w + 2;
        self.labels.clear();
        self.labels.resize(pw * (h + 2), 0);
        for y in 0..h {
            for x in 0..w {
                if mask[y * w + x] != 0 {
                    self.labels[(y + 1) * pw + x + 1] = 1;
                }
            }
        }
        self.points.clear();
        self.spans.clear();
        for y in 1..=h {
            let mut prev = 0i8;
            for x in 1..=w {
                let i = y * pw + x;
                let p = self.labels[i];
                if p != prev {
                    if prev == 0 && p == 1 {
                        self.follow(i, x, y, false, pw);
                    } else if p == 0 && prev >= 1 {
                        self.follow(i - 1, x - 1, y, true, pw);
                    }
                }
                prev = self.labels[i];
            }
        }
    }

    /// Follow the border starting at label index `origin` (pixel `(x, y)` in
    /// framed coordinates); `hole`: the background is to its right.
    fn follow(&mut self, origin: usize, x: usize, y: usize, hole: bool, pw: usize) {
        let step = |i: usize, s: usize| -> usize {
            let (dx, dy) = DIRS[s & 7];
            (i as isize + dy * pw as isize + dx) as usize
        };
        let start = self.points.len();
        let mut pt = [x as i32 - 1, y as i32 - 1];
        // 3.1: the first non-zero neighbour clockwise from the background side.
        let s_end = if hole { 0 } else { 4 };
        let mut s = s_end;
        let mut i1;
        loop {
            s = (s + 7) & 7;
            i1 = step(origin, s);
            if self.labels[i1] != 0 || s == s_end {
                break;
            }
        }
        if self.labels[i1] == 0 {
            // A single isolated pixel.
            self.labels[origin] = VISITED_RIGHT_EDGE;
            self.points.push(pt);
        } else {
            let mut i3 = origin;
            let mut prev_s = s ^ 4;
            loop {
                // 3.3: counter-clockwise from the pixel we came from.
                let s_from = s;
                let mut k = s_from;
                let mut i4;
                loop {
                    k += 1;
                    i4 = step(i3, k);
                    if self.labels[i4] != 0 {
                        break;
                    }
                }
                let s_next = k & 7;
                // 3.4: the east neighbour was examined and is background
                // exactly when the search wrapped past east (k > 8).
                if s_next.wrapping_sub(1) < s_from {
                    self.labels[i3] = VISITED_RIGHT_EDGE;
                } else if self.labels[i3] == 1 {
                    self.labels[i3] = VISITED;
                }
                if s_next != prev_s {
                    self.points.push(pt);
                    prev_s = s_next;
                }
                pt[0] += DIRS[s_next].0 as i32;
                pt[1] += DIRS[s_next].1 as i32;
                // 3.5: back at the start, about to repeat the first step.
                if i4 == origin && i3 == i1 {
                    break;
                }
                i3 = i4;
                s = (s_next + 4) & 7;
            }
        }
        self.spans.push(ContourSpan {
            start,
            end: self.points.len(),
        });
    }
}

/// `cv2.dilate(mask, np.ones((2, 2)))`: with the default anchor (1, 1) each
/// output pixel is the maximum of itself and its left, upper and upper-left
/// neighbours (pixels outside the map do not count).
pub fn dilate2x2(src: &[u8], w: usize, h: usize, dst: &mut Vec<u8>) {
    dst.clear();
    dst.resize(w * h, 0);
    for y in 0..h {
        for x in 0..w {
            let mut v = src[y * w + x];
            if x > 0 {
                v = v.max(src[y * w + x - 1]);
            }
            if y > 0 {
                v = v.max(src[(y - 1) * w + x]);
                if x > 0 {
                    v = v.max(src[(y - 1) * w + x - 1]);
                }
            }
            dst[y * w + x] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rows: &[&str]) -> (Vec<u8>, usize, usize) {
        let h = rows.len();
        let w = rows[0].len();
        let m = rows
            .iter()
            .flat_map(|r| r.bytes().map(|b| u8::from(b == b'#')))
            .collect();
        (m, w, h)
    }

    #[test]
    fn finds_outer_and_hole_borders_in_opencv_order() {
        // The layout OpenCV answered with (checked in Python, opencv 5.0):
        // [[2,7],[2,9],[11,9],[11,7]], hole [[2,2],[3,1],[4,2],[4,3],[3,4],[2,3]],
        // [[9,1],[9,2],[11,2],[11,1]], [[1,1],[1,4],[5,4],[5,1]], [[13,0]].
        let (m, w, h) = map(&[
            ".............#",
            ".#####...###..",
            ".##.##...###..",
            ".##.##........",
            ".#####........",
            "..............",
            "..............",
            "..##########..",
            "..##########..",
            "..##########..",
            "..............",
            "..............",
        ]);
        let mut c = Contours::default();
        c.find(&m, w, h);
        let got: Vec<Vec<[i32; 2]>> = (0..c.len()).map(|i| c.get(i).to_vec()).collect();
        assert_eq!(
            got,
            vec![
                vec![[2, 7], [2, 9], [11, 9], [11, 7]],
                vec![[2, 2], [3, 1], [4, 2], [4, 3], [3, 4], [2, 3]],
                vec![[9, 1], [9, 2], [11, 2], [11, 1]],
                vec![[1, 1], [1, 4], [5, 4], [5, 1]],
                vec![[13, 0]],
            ]
        );
    }

    #[test]
    fn dilation_reaches_right_and_down() {
        let src = [0, 0, 0, 0, 1, 0, 0, 0, 0];
        let mut d = Vec::new();
        dilate2x2(&src, 3, 3, &mut d);
        assert_eq!(d, [0, 0, 0, 0, 1, 1, 0, 1, 1]);
    }
}
