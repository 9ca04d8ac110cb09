//! Polygon geometry of the DB post-processor, each piece reproducing the
//! library call the reference makes, arithmetic included:
//!
//! - `cv2.convexHull(points, clockwise=True)` is [`convex_hull`], Sklansky's
//!   scan as OpenCV implements it (`modules/imgproc/src/convhull.cpp`);
//! - `cv2.minAreaRect` is [`min_area_rect`], rotating calipers over that hull
//!   (Toussaint, "Solving geometric problems with the rotating calipers",
//!   1983; OpenCV `modules/imgproc/src/rotcalipers.cpp`), in f32;
//! - `cv2.boxPoints` is [`RotatedRect::points`];
//! - `DBPostProcess.get_mini_boxes` is [`mini_box`] (corner order
//!   top-left, top-right, bottom-right, bottom-left);
//! - `cv2.fillPoly` is [`fill_polygon`] (edge lines, 8-connected Bresenham as
//!   OpenCV's `LineIterator` after `clipLine`, plus scanline spans as
//!   `FillEdgeCollection`, `modules/imgproc/src/drawing.cpp`), and
//!   `box_score_fast` / `box_score_slow` is [`box_score`], the mean of the
//!   probability map inside it;
//! - `DBPostProcess.unclip` is [`unclip`]: `shapely` area / perimeter and a
//!   `pyclipper` offset with round joins (Clipper 6.4.2 `ClipperOffset`, Angus
//!   Johnson, Boost licence: normals, arc steps from `ArcTolerance = 0.25`,
//!   `Round` half away from zero).
//!
//! Checked against OpenCV 5.0 / pyclipper 1.4.0 / shapely 2.2 on the vectors
//! in `golden/geometry.json` (`tests/geometry.rs`).

/// `cv2.RotatedRect`: centre, size and angle (degrees) as `minAreaRect` returns them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RotatedRect {
    /// Centre `(x, y)`.
    pub center: [f32; 2],
    /// `(width, height)`.
    pub size: [f32; 2],
    /// Degrees.
    pub angle: f32,
}

impl RotatedRect {
    /// `cv2.boxPoints(rect)`: the four corners (OpenCV `RotatedRect::points`).
    pub fn points(&self) -> [[f32; 2]; 4] {
        let angle = f64::from(self.angle) * std::f64::consts::PI / 180.0;
        let b = angle.cos() as f32 * 0.5;
        let a = angle.sin() as f32 * 0.5;
        let [cx, cy] = self.center;
        let [w, h] = self.size;
        let p0 = [cx - a * h - b * w, cy + b * h - a * w];
        let p1 = [cx + a * h - b * w, cy - b * h - a * w];
        [
            p0,
            p1,
            [2.0 * cx - p0[0], 2.0 * cy - p0[1]],
            [2.0 * cx - p1[0], 2.0 * cy - p1[1]],
        ]
    }
}

/// Scratch buffers of the hull, reused across calls.
#[derive(Clone, Debug, Default)]
pub struct HullScratch {
    sorted: Vec<[i32; 2]>,
    hull_int: Vec<[i32; 2]>,
    stack_a: Vec<isize>,
    stack_b: Vec<isize>,
    hull: Vec<[f32; 2]>,
    vect: Vec<[f32; 2]>,
    inv_len: Vec<f32>,
}

fn sign(v: i64) -> i32 {
    i32::from(v > 0) - i32::from(v < 0)
}

/// OpenCV's `Sklansky_`: one monotone chain of the hull from `start` to
/// `end` over the x-sorted points; returns the chain length in `stack`.
fn sklansky(
    p: &[[i32; 2]],
    start: isize,
    end: isize,
    stack: &mut Vec<isize>,
    nsign: i32,
    sign2: i32,
) -> usize {
    let incr: isize = if end > start { 1 } else { -1 };
    let at = |i: isize| p[i as usize];
    stack.clear();
    stack.resize(p.len() + 3, 0);
    if start == end || at(start) == at(end) {
        stack[0] = start;
        return 1;
    }
    let (mut pprev, mut pcur) = (start, start + incr);
    let mut pnext = pcur + incr;
    let mut size = 3usize;
    stack[0] = pprev;
    stack[1] = pcur;
    stack[2] = pnext;
    let end = end + incr;
    while pnext != end {
        let cury = i64::from(at(pcur)[1]);
        let nexty = i64::from(at(pnext)[1]);
        let by = nexty - cury;
        if sign(by) != nsign {
            let ax = i64::from(at(pcur)[0]) - i64::from(at(pprev)[0]);
            let bx = i64::from(at(pnext)[0]) - i64::from(at(pcur)[0]);
            let ay = cury - i64::from(at(pprev)[1]);
            let convexity = ay * bx - ax * by;
            if sign(convexity) == sign2 && (ax != 0 || ay != 0) {
                pprev = pcur;
                pcur = pnext;
                pnext += incr;
                stack[size] = pnext;
                size += 1;
            } else if pprev == start {
                pcur = pnext;
                stack[1] = pcur;
                pnext += incr;
                stack[2] = pnext;
            } else {
                stack[size - 2] = pnext;
                pcur = pprev;
                pprev = stack[size - 4];
                size -= 1;
            }
        } else {
            pnext += incr;
            stack[size - 1] = pnext;
        }
    }
    size - 1
}

/// `cv2.convexHull(points, clockwise)` into `out` (integer points).
pub fn convex_hull(
    points: &[[i32; 2]],
    clockwise: bool,
    scratch: &mut HullScratch,
    out: &mut Vec<[i32; 2]>,
) {
    out.clear();
    let total = points.len();
    if total == 0 {
        return;
    }
    let p = &mut scratch.sorted;
    p.clear();
    p.extend_from_slice(points);
    p.sort_unstable_by(|a, b| a[0].cmp(&b[0]).then(a[1].cmp(&b[1])));
    let (mut miny, mut maxy) = (0usize, 0usize);
    for i in 1..total {
        let y = p[i][1];
        if p[miny][1] > y {
            miny = i;
        }
        if p[maxy][1] < y {
            maxy = i;
        }
    }
    if p[0] == p[total - 1] {
        out.push(p[0]);
        return;
    }
    let last = total as isize - 1;
    let (sa, sb) = (&mut scratch.stack_a, &mut scratch.stack_b);
    // Upper half.
    let tl0 = sklansky(p, 0, maxy as isize, sa, -1, 1);
    let tr0 = sklansky(p, last, maxy as isize, sb, -1, -1);
    let (tl_stack, tl, tr_stack, tr) = if clockwise {
        (&*sa, tl0, &*sb, tr0)
    } else {
        (&*sb, tr0, &*sa, tl0)
    };
    for &i in &tl_stack[..tl - 1] {
        out.push(p[i as usize]);
    }
    for k in (1..tr).rev() {
        out.push(p[tr_stack[k] as usize]);
    }
    let stop = if tr > 2 {
        tr_stack[1]
    } else if tl > 2 {
        tl_stack[tl - 2]
    } else {
        -1
    };
    // Lower half; clockwise order takes the right chain first.
    let bl0 = sklansky(p, 0, miny as isize, sa, 1, -1);
    let br0 = sklansky(p, last, miny as isize, sb, 1, 1);
    let (bl_stack, mut bl, br_stack, mut br) = if clockwise {
        (&*sb, br0, &*sa, bl0)
    } else {
        (&*sa, bl0, &*sb, br0)
    };
    if stop >= 0 {
        let check = if bl > 2 {
            bl_stack[1]
        } else if bl + br > 2 {
            br_stack[2 - bl]
        } else {
            -1
        };
        if check == stop || (check >= 0 && p[check as usize] == p[stop as usize]) {
            // All points on one line: the lower chain mirrors the upper one.
            bl = bl.min(2);
            br = br.min(2);
        }
    }
    for &i in &bl_stack[..bl - 1] {
        out.push(p[i as usize]);
    }
    for k in (1..br).rev() {
        out.push(p[br_stack[k] as usize]);
    }
}

/// `cv2.minAreaRect(points)` for integer points.
pub fn min_area_rect(points: &[[i32; 2]], scratch: &mut HullScratch) -> RotatedRect {
    let mut hull_i = std::mem::take(&mut scratch.hull_int);
    convex_hull(points, true, scratch, &mut hull_i);
    scratch.hull.clear();
    scratch
        .hull
        .extend(hull_i.iter().map(|p| [p[0] as f32, p[1] as f32]));
    scratch.hull_int = hull_i;
    let n = scratch.hull.len();
    let h = &scratch.hull;
    let mut rect = RotatedRect::default();
    if n > 2 {
        let out = rotating_calipers(h, &mut scratch.vect, &mut scratch.inv_len);
        rect.center = [
            out[0][0] + (out[1][0] + out[2][0]) * 0.5,
            out[0][1] + (out[1][1] + out[2][1]) * 0.5,
        ];
        rect.size = [
            (f64::from(out[1][0]) * f64::from(out[1][0])
                + f64::from(out[1][1]) * f64::from(out[1][1]))
            .sqrt() as f32,
            (f64::from(out[2][0]) * f64::from(out[2][0])
                + f64::from(out[2][1]) * f64::from(out[2][1]))
            .sqrt() as f32,
        ];
        rect.angle = f64::from(out[1][1]).atan2(f64::from(out[1][0])) as f32;
    } else if n == 2 {
        rect.center = [(h[0][0] + h[1][0]) * 0.5, (h[0][1] + h[1][1]) * 0.5];
        let dx = f64::from(h[1][0] - h[0][0]);
        let dy = f64::from(h[1][1] - h[0][1]);
        rect.size = [(dx * dx + dy * dy).sqrt() as f32, 0.0];
        rect.angle = dy.atan2(dx) as f32;
    } else if n == 1 {
        rect.center = h[0];
    }
    rect.angle = (f64::from(rect.angle * 180.0) / std::f64::consts::PI) as f32;
    rect
}

/// OpenCV's `rotatingCalipers(..., CALIPERS_MINAREARECT)`: corner, side
/// vector 1 and side vector 2 of the minimum-area rectangle of a convex
/// polygon given in either orientation.
fn rotating_calipers(
    p: &[[f32; 2]],
    vect: &mut Vec<[f32; 2]>,
    inv_len: &mut Vec<f32>,
) -> [[f32; 2]; 3] {
    let n = p.len();
    vect.clear();
    inv_len.clear();
    let (mut left, mut bottom, mut right, mut top) = (0usize, 0usize, 0usize, 0usize);
    let mut pt0 = p[0];
    let (mut left_x, mut right_x, mut top_y, mut bottom_y) = (pt0[0], pt0[0], pt0[1], pt0[1]);
    for i in 0..n {
        if pt0[0] < left_x {
            left_x = pt0[0];
            left = i;
        }
        if pt0[0] > right_x {
            right_x = pt0[0];
            right = i;
        }
        if pt0[1] > top_y {
            top_y = pt0[1];
            top = i;
        }
        if pt0[1] < bottom_y {
            bottom_y = pt0[1];
            bottom = i;
        }
        let pt = p[if i + 1 < n { i + 1 } else { 0 }];
        let dx = f64::from(pt[0] - pt0[0]);
        let dy = f64::from(pt[1] - pt0[1]);
        vect.push([dx as f32, dy as f32]);
        inv_len.push((1.0 / (dx * dx + dy * dy).sqrt()) as f32);
        pt0 = pt;
    }
    // Orientation of the hull.
    let mut orientation = 0.0f32;
    {
        let (mut ax, mut ay) = (f64::from(vect[n - 1][0]), f64::from(vect[n - 1][1]));
        for v in vect.iter() {
            let (bx, by) = (f64::from(v[0]), f64::from(v[1]));
            let convexity = ax * by - ay * bx;
            if convexity != 0.0 {
                orientation = if convexity > 0.0 { 1.0 } else { -1.0 };
                break;
            }
            ax = bx;
            ay = by;
        }
    }
    let mut base_a = orientation;
    let mut base_b = 0.0f32;
    let mut seq = [bottom, right, top, left];
    let mut minarea = f32::MAX;
    let mut best = (0usize, 0.0f32, 0.0f32, 0.0f32, 0.0f32, 0usize);
    for _ in 0..n {
        let dp0 = base_a * vect[seq[0]][0] + base_b * vect[seq[0]][1];
        let dp1 = -base_b * vect[seq[1]][0] + base_a * vect[seq[1]][1];
        let dp2 = -base_a * vect[seq[2]][0] - base_b * vect[seq[2]][1];
        let dp3 = base_b * vect[seq[3]][0] - base_a * vect[seq[3]][1];
        let mut maxcos = dp0 * inv_len[seq[0]];
        let mut main = 0usize;
        for (k, dp) in [(1usize, dp1), (2, dp2), (3, dp3)] {
            let c = dp * inv_len[seq[k]];
            if c > maxcos {
                maxcos = c;
                main = k;
            }
        }
        let pi = seq[main];
        let lead_x = vect[pi][0] * inv_len[pi];
        let lead_y = vect[pi][1] * inv_len[pi];
        (base_a, base_b) = match main {
            0 => (lead_x, lead_y),
            1 => (lead_y, -lead_x),
            2 => (-lead_x, -lead_y),
            _ => (-lead_y, lead_x),
        };
        seq[main] += 1;
        if seq[main] == n {
            seq[main] = 0;
        }
        let dx = p[seq[1]][0] - p[seq[3]][0];
        let dy = p[seq[1]][1] - p[seq[3]][1];
        let width = dx * base_a + dy * base_b;
        let dx = p[seq[2]][0] - p[seq[0]][0];
        let dy = p[seq[2]][1] - p[seq[0]][1];
        let height = -dx * base_b + dy * base_a;
        let area = width * height;
        if area <= minarea {
            minarea = area;
            best = (seq[3], base_a, width, base_b, height, seq[0]);
        }
    }
    let (i_left, a1, width, b1, height, i_bottom) = best;
    let (a2, b2) = (-b1, a1);
    let c1 = a1 * p[i_left][0] + p[i_left][1] * b1;
    let c2 = a2 * p[i_bottom][0] + p[i_bottom][1] * b2;
    let idet = 1.0 / (a1 * b2 - a2 * b1);
    let px = (c1 * b2 - c2 * b1) * idet;
    let py = (a1 * c2 - a2 * c1) * idet;
    [
        [px, py],
        [a1 * width, b1 * width],
        [a2 * height, b2 * height],
    ]
}

/// `DBPostProcess.get_mini_boxes`: the corners of `rect` ordered top-left,
/// top-right, bottom-right, bottom-left (`boxPoints` sorted by x, stable,
/// then each side's pair by y), and the rectangle's short side.
pub fn mini_box(rect: &RotatedRect) -> ([[f32; 2]; 4], f32) {
    let mut pts = rect.points();
    // Python's `sorted` is stable; so is `sort_by`.
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (i1, i4) = if pts[1][1] > pts[0][1] {
        (0, 1)
    } else {
        (1, 0)
    };
    let (i2, i3) = if pts[3][1] > pts[2][1] {
        (2, 3)
    } else {
        (3, 2)
    };
    (
        [pts[i1], pts[i2], pts[i3], pts[i4]],
        rect.size[0].min(rect.size[1]),
    )
}

/// Fixed-point fraction bits of OpenCV's polygon filler (`XY_SHIFT`).
const XY_SHIFT: u32 = 16;

/// `cv2.fillPoly(mask, [pts], 1)` with `LINE_8`: set to 1 every pixel of the
/// `w x h` mask covered by the polygon's edges (8-connected lines) or its
/// interior scanline spans. Exact for polygons inside the mask (checked on
/// random quadrilaterals); for polygons partly outside, OpenCV 5.0 builds
/// edges from the clipped ends as done here, and still differs on a few
/// pixels along the border (13 of 400 random heavily clipped quadrilaterals).
pub fn fill_polygon(
    pts: &[[i32; 2]],
    mask: &mut [u8],
    w: usize,
    h: usize,
    scratch: &mut FillScratch,
) {
    let n = pts.len();
    if n == 0 {
        return;
    }
    let FillScratch { edges, xs } = scratch;
    edges.clear();
    let (wi, hi) = (w as i64, h as i64);
    let outside = |p: [i64; 2]| p[0] < 0 || p[1] < 0 || p[0] >= wi || p[1] >= hi;
    let mut p0 = pts[n - 1];
    for &p1 in pts {
        draw_line(p0, p1, mask, w, h);
        if p0[1] != p1[1] {
            // The edge runs from the clipped ends when an end is outside
            // (OpenCV's "more accurate PolyEdge" for clipped lines), over
            // the unclipped rows.
            let (a, b) = (
                [i64::from(p0[0]), i64::from(p0[1])],
                [i64::from(p1[0]), i64::from(p1[1])],
            );
            let (mut c0, mut c1) = ([a[0] << XY_SHIFT, a[1]], [b[0] << XY_SHIFT, b[1]]);
            if outside(a) || outside(b) {
                let (mut t0, mut t1) = (a, b);
                clip_line(wi, hi, &mut t0, &mut t1);
                if t0[1] != t1[1] {
                    c0 = [t0[0] << XY_SHIFT, t0[1]];
                    c1 = [t1[0] << XY_SHIFT, t1[1]];
                }
            }
            let dx = (c1[0] - c0[0]) / (c1[1] - c0[1]);
            edges.push(if a[1] < b[1] {
                PolyEdge {
                    y0: p0[1],
                    y1: p1[1],
                    x: c0[0] + (a[1] - c0[1]) * dx,
                    dx,
                }
            } else {
                PolyEdge {
                    y0: p1[1],
                    y1: p0[1],
                    x: c1[0] + (b[1] - c1[1]) * dx,
                    dx,
                }
            });
        }
        p0 = p1;
    }
    if edges.len() < 2 {
        return;
    }
    let y_start = edges.iter().map(|e| e.y0).min().unwrap_or(0).max(0);
    let y_end = edges.iter().map(|e| e.y1).max().unwrap_or(0).min(h as i32);
    for y in y_start..y_end {
        // Active edges: y0 <= y < y1, at their x for this row, left to right.
        xs.clear();
        xs.extend(
            edges
                .iter()
                .filter(|e| e.y0 <= y && y < e.y1)
                .map(|e| e.x + i64::from(y - e.y0) * e.dx),
        );
        xs.sort_unstable();
        for pair in xs.chunks_exact(2) {
            let x1 = ((pair[0] + (1 << XY_SHIFT) - 1) >> XY_SHIFT).max(0);
            let x2 = (pair[1] >> XY_SHIFT).min(w as i64 - 1);
            if x1 <= x2 {
                let row = &mut mask[y as usize * w..(y as usize + 1) * w];
                row[x1 as usize..=x2 as usize].fill(1);
            }
        }
    }
}

/// Scratch of [`fill_polygon`].
#[derive(Clone, Debug, Default)]
pub struct FillScratch {
    edges: Vec<PolyEdge>,
    xs: Vec<i64>,
}

/// One non-horizontal polygon edge in OpenCV's filler: rows `[y0, y1)`,
/// x at `y0` and per row in 16.16 fixed point.
#[derive(Clone, Copy, Debug)]
struct PolyEdge {
    y0: i32,
    y1: i32,
    x: i64,
    dx: i64,
}

/// OpenCV's `clipLine`: clip the segment to `[0, w) x [0, h)` with its
/// integer arithmetic; `false` when nothing is left.
fn clip_line(w: i64, h: i64, p1: &mut [i64; 2], p2: &mut [i64; 2]) -> bool {
    let (right, bottom) = (w - 1, h - 1);
    if w <= 0 || h <= 0 {
        return false;
    }
    let code = |p: [i64; 2]| {
        i32::from(p[0] < 0)
            + i32::from(p[0] > right) * 2
            + i32::from(p[1] < 0) * 4
            + i32::from(p[1] > bottom) * 8
    };
    let (mut c1, mut c2) = (code(*p1), code(*p2));
    // `(int64)((double)a * b / c)`: f64 product and quotient, truncated.
    let step = |a: i64, b: i64, c: i64| ((a as f64) * (b as f64) / (c as f64)) as i64;
    if c1 & c2 == 0 && c1 | c2 != 0 {
        if c1 & 12 != 0 {
            let a = if c1 < 8 { 0 } else { bottom };
            p1[0] += step(a - p1[1], p2[0] - p1[0], p2[1] - p1[1]);
            p1[1] = a;
            c1 = i32::from(p1[0] < 0) + i32::from(p1[0] > right) * 2;
        }
        if c2 & 12 != 0 {
            let a = if c2 < 8 { 0 } else { bottom };
            p2[0] += step(a - p2[1], p2[0] - p1[0], p2[1] - p1[1]);
            p2[1] = a;
            c2 = i32::from(p2[0] < 0) + i32::from(p2[0] > right) * 2;
        }
        if c1 & c2 == 0 && c1 | c2 != 0 {
            if c1 != 0 {
                let a = if c1 == 1 { 0 } else { right };
                p1[1] += step(a - p1[0], p2[1] - p1[1], p2[0] - p1[0]);
                p1[0] = a;
                c1 = 0;
            }
            if c2 != 0 {
                let a = if c2 == 1 { 0 } else { right };
                p2[1] += step(a - p2[0], p2[1] - p1[1], p2[0] - p1[0]);
                p2[0] = a;
                c2 = 0;
            }
        }
    }
    c1 | c2 == 0
}

/// OpenCV's `Line` with an 8-connected `LineIterator` (left to right, the
/// segment first clipped to the mask by [`clip_line`] when an end is
/// outside), setting the pixels it visits.
fn draw_line(a: [i32; 2], b: [i32; 2], mask: &mut [u8], w: usize, h: usize) {
    let (mut p1, mut p2) = (
        [i64::from(a[0]), i64::from(a[1])],
        [i64::from(b[0]), i64::from(b[1])],
    );
    let (wi, hi) = (w as i64, h as i64);
    let outside = |p: [i64; 2]| p[0] < 0 || p[1] < 0 || p[0] >= wi || p[1] >= hi;
    if (outside(p1) || outside(p2)) && !clip_line(wi, hi, &mut p1, &mut p2) {
        return;
    }
    let (mut p, q) = if p2[0] < p1[0] { (p2, p1) } else { (p1, p2) };
    let dx = q[0] - p[0];
    let dy_signed = q[1] - p[1];
    let sy = if dy_signed < 0 { -1 } else { 1 };
    let dy = dy_signed.abs();
    // Major axis x when dx >= dy.
    let (major, minor, dmaj, dmin) = if dy > dx {
        ([0, sy], [1, 0], dy, dx)
    } else {
        ([1, 0], [0, sy], dx, dy)
    };
    let mut err = dmaj - 2 * dmin;
    for _ in 0..=dmaj {
        if !outside(p) {
            mask[p[1] as usize * w + p[0] as usize] = 1;
        }
        let step_minor = err < 0;
        err += -2 * dmin + if step_minor { 2 * dmaj } else { 0 };
        p[0] += major[0] + if step_minor { minor[0] } else { 0 };
        p[1] += major[1] + if step_minor { minor[1] } else { 0 };
    }
}

/// Scratch of [`box_score`].
#[derive(Clone, Debug, Default)]
pub struct ScoreScratch {
    mask: Vec<u8>,
    fill: FillScratch,
    pts: Vec<[i32; 2]>,
}

/// The DB box score: the mean of `map` (`w x h`, row-major) over the polygon
/// `poly` filled as `cv2.fillPoly` does, inside the polygon's bounding box
/// clipped to the map (`box_score_fast` with the box's corners,
/// `box_score_slow` with the contour). 0 when no pixel is covered.
pub fn box_score(map: &[f32], w: usize, h: usize, poly: &[[f32; 2]], s: &mut ScoreScratch) -> f64 {
    if poly.is_empty() || w == 0 || h == 0 {
        return 0.0;
    }
    let (mut lo_x, mut hi_x, mut lo_y, mut hi_y) = (f32::MAX, f32::MIN, f32::MAX, f32::MIN);
    for p in poly {
        lo_x = lo_x.min(p[0]);
        hi_x = hi_x.max(p[0]);
        lo_y = lo_y.min(p[1]);
        hi_y = hi_y.max(p[1]);
    }
    let clampi = |v: f32, hi: usize| (v as i64).clamp(0, hi as i64 - 1);
    let xmin = clampi(lo_x.floor(), w);
    let xmax = clampi(hi_x.ceil(), w);
    let ymin = clampi(lo_y.floor(), h);
    let ymax = clampi(hi_y.ceil(), h);
    let (mw, mh) = ((xmax - xmin + 1) as usize, (ymax - ymin + 1) as usize);
    s.mask.clear();
    s.mask.resize(mw * mh, 0);
    s.pts.clear();
    // `(box - xmin).astype(np.int32)`: f64 difference, truncated toward zero.
    s.pts.extend(poly.iter().map(|p| {
        [
            (f64::from(p[0]) - xmin as f64).trunc() as i32,
            (f64::from(p[1]) - ymin as f64).trunc() as i32,
        ]
    }));
    fill_polygon(&s.pts, &mut s.mask, mw, mh, &mut s.fill);
    let (mut sum, mut count) = (0.0f64, 0usize);
    for y in 0..mh {
        let row = &map[(ymin as usize + y) * w + xmin as usize..][..mw];
        for (v, &m) in row.iter().zip(&s.mask[y * mw..(y + 1) * mw]) {
            if m != 0 {
                sum += f64::from(*v);
                count += 1;
            }
        }
    }
    if count == 0 { 0.0 } else { sum / count as f64 }
}

/// The value of an f32 configuration number as the decimal the reference's
/// YAML holds (e.g. `1.6f32` -> `1.6f64`, not `1.600000023841858`).
pub fn decimal_f64(v: f32) -> f64 {
    (f64::from(v) * 1e6).round() / 1e6
}

/// `DBPostProcess.unclip`: offset the box outward by `area * ratio /
/// perimeter` (shapely) with Clipper's round joins (pyclipper truncates the
/// corner coordinates to integers first), writing the offset polygon's
/// integer vertices to `out`. `out` is empty for a degenerate box.
///
/// Clipper's final union (which only cleans self-intersections of the raw
/// offset) is not reproduced: for the convex boxes given here the raw offset
/// is already simple, and the union's removal of collinear or repeated
/// vertices does not change the minimum-area rectangle taken next.
pub fn unclip(quad: &[[f32; 2]; 4], ratio: f64, out: &mut Vec<[i32; 2]>) {
    out.clear();
    // shapely: area (shoelace) and length (perimeter) in f64.
    let mut area2 = 0.0f64;
    let mut length = 0.0f64;
    for i in 0..4 {
        let (a, b) = (quad[i], quad[(i + 1) % 4]);
        let (ax, ay, bx, by) = (
            f64::from(a[0]),
            f64::from(a[1]),
            f64::from(b[0]),
            f64::from(b[1]),
        );
        area2 += ax * by - bx * ay;
        length += ((bx - ax) * (bx - ax) + (by - ay) * (by - ay)).sqrt();
    }
    if length == 0.0 {
        return;
    }
    let delta = (area2 * 0.5).abs() * ratio / length;
    // pyclipper: coordinates to integers by truncation; AddPath drops
    // repeated points and needs three distinct ones.
    let mut poly: [[i64; 2]; 4] = [[0; 2]; 4];
    let mut n = 0usize;
    for p in quad {
        let q = [p[0] as i64, p[1] as i64];
        if n == 0 || poly[n - 1] != q {
            poly[n] = q;
            n += 1;
        }
    }
    while n > 1 && poly[0] == poly[n - 1] {
        n -= 1;
    }
    if n < 3 {
        return;
    }
    let poly = &mut poly[..n];
    // Clipper `Orientation` is `Area >= 0` with its own sign convention.
    let mut a = 0.0f64;
    let mut j = n - 1;
    for i in 0..n {
        a += (poly[j][0] as f64 + poly[i][0] as f64) * (poly[j][1] as f64 - poly[i][1] as f64);
        j = i;
    }
    if -a * 0.5 < 0.0 {
        poly.reverse();
    }
    clipper_round_offset(poly, delta, out);
}

/// Clipper 6.4.2 `ClipperOffset::DoOffset` for one closed polygon with
/// `jtRound` joins (`ArcTolerance` 0.25, `MiterLimit` 2) and `delta > 0`.
fn clipper_round_offset(poly: &[[i64; 2]], delta: f64, out: &mut Vec<[i32; 2]>) {
    const ARC_TOLERANCE: f64 = 0.25;
    let round = |v: f64| -> i64 {
        if v < 0.0 {
            (v - 0.5) as i64
        } else {
            (v + 0.5) as i64
        }
    };
    let push = |out: &mut Vec<[i32; 2]>, x: f64, y: f64| {
        out.push([round(x) as i32, round(y) as i32]);
    };
    if delta.abs() < 1e-20 {
        out.extend(poly.iter().map(|p| [p[0] as i32, p[1] as i32]));
        return;
    }
    let y = if ARC_TOLERANCE > delta.abs() * ARC_TOLERANCE {
        delta.abs() * ARC_TOLERANCE
    } else {
        ARC_TOLERANCE
    };
    let mut steps = std::f64::consts::PI / (1.0 - y / delta.abs()).acos();
    if steps > delta.abs() * std::f64::consts::PI {
        steps = delta.abs() * std::f64::consts::PI;
    }
    let two_pi = 2.0 * std::f64::consts::PI;
    let (m_sin, m_cos) = ((two_pi / steps).sin(), (two_pi / steps).cos());
    let steps_per_rad = steps / two_pi;
    let n = poly.len();
    let normal = |a: [i64; 2], b: [i64; 2]| -> [f64; 2] {
        if a == b {
            return [0.0, 0.0];
        }
        let dx = (b[0] - a[0]) as f64;
        let dy = (b[1] - a[1]) as f64;
        let f = 1.0 / (dx * dx + dy * dy).sqrt();
        [dy * f, -(dx * f)]
    };
    let mut normals = [[0.0f64; 2]; 4];
    for j in 0..n {
        normals[j] = normal(poly[j], poly[(j + 1) % n]);
    }
    let mut k = n - 1;
    for j in 0..n {
        let (nj, nk) = (normals[j], normals[k]);
        let (px, py) = (poly[j][0] as f64, poly[j][1] as f64);
        let mut sin_a = nk[0] * nj[1] - nj[0] * nk[1];
        if (sin_a * delta).abs() < 1.0 {
            let cos_a = nk[0] * nj[0] + nj[1] * nk[1];
            if cos_a > 0.0 {
                push(out, px + nk[0] * delta, py + nk[1] * delta);
                k = j;
                continue;
            }
        } else {
            sin_a = sin_a.clamp(-1.0, 1.0);
        }
        if sin_a * delta < 0.0 {
            push(out, px + nk[0] * delta, py + nk[1] * delta);
            out.push([poly[j][0] as i32, poly[j][1] as i32]);
            push(out, px + nj[0] * delta, py + nj[1] * delta);
        } else {
            // DoRound.
            let a = sin_a.atan2(nk[0] * nj[0] + nk[1] * nj[1]);
            let steps = (round(steps_per_rad * a.abs()) as i32).max(1);
            let (mut x, mut y) = (nk[0], nk[1]);
            for _ in 0..steps {
                push(out, px + x * delta, py + y * delta);
                let x2 = x;
                x = x * m_cos - m_sin * y;
                y = x2 * m_sin + y * m_cos;
            }
            push(out, px + nj[0] * delta, py + nj[1] * delta);
        }
        k = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hull_of_a_square_with_inner_points() {
        let pts = [[0, 0], [4, 0], [4, 4], [0, 4], [2, 2], [1, 3], [2, 0]];
        let mut s = HullScratch::default();
        let mut out = Vec::new();
        convex_hull(&pts, true, &mut s, &mut out);
        assert_eq!(out.len(), 4, "{out:?}");
        for c in [[0, 0], [4, 0], [4, 4], [0, 4]] {
            assert!(out.contains(&c), "{out:?}");
        }
    }

    #[test]
    fn min_area_rect_of_a_rotated_bar() {
        let pts = [[0, 0], [10, 10], [11, 9], [1, -1]];
        let mut s = HullScratch::default();
        let r = min_area_rect(&pts, &mut s);
        let (short, long) = (r.size[0].min(r.size[1]), r.size[0].max(r.size[1]));
        assert!(
            (short - 2f32.sqrt()).abs() < 1e-4 && (long - 200f32.sqrt()).abs() < 1e-4,
            "{r:?}"
        );
        let (b, side) = mini_box(&r);
        assert!((side - short).abs() < 1e-6);
        // top-left is the left-most corner pair's upper one.
        assert!(b[0][0] <= b[1][0] && b[3][0] <= b[2][0], "{b:?}");
    }

    #[test]
    fn filled_rectangle_covers_its_boundary() {
        let mut m = vec![0u8; 8 * 6];
        let mut e = FillScratch::default();
        fill_polygon(&[[1, 1], [5, 1], [5, 3], [1, 3]], &mut m, 8, 6, &mut e);
        let filled: usize = m.iter().map(|&v| usize::from(v)).sum();
        assert_eq!(filled, 5 * 3);
    }

    #[test]
    fn unclip_expands_a_box() {
        let mut out = Vec::new();
        unclip(
            &[[32.0, 19.0], [102.0, 19.0], [102.0, 34.0], [32.0, 34.0]],
            1.6,
            &mut out,
        );
        // pyclipper's answer (golden/geometry.json, unclip[0]) has the same
        // bounding box: x 22..112, y 9..44.
        let xs = out.iter().map(|p| p[0]);
        let ys = out.iter().map(|p| p[1]);
        assert_eq!((xs.clone().min(), xs.max()), (Some(22), Some(112)));
        assert_eq!((ys.clone().min(), ys.max()), (Some(9), Some(44)));
        assert_eq!(decimal_f64(1.6), 1.6);
    }
}
