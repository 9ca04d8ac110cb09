//! Cutting a text line out of the image: the reference's
//! `get_rotate_crop_image` (`rapidocr_onnxruntime/main.py`), i.e.
//! `cv2.getPerspectiveTransform` + `cv2.warpPerspective(INTER_CUBIC,
//! BORDER_REPLICATE)`, then `np.rot90` for tall crops; and the 180-degree turn
//! (`cv2.rotate(img, ROTATE_180)`) of lines the classifier flips.
//!
//! - The homography solves OpenCV's 8x8 system (`getPerspectiveTransform`,
//!   `modules/imgproc/src/imgwarp.cpp`) by Gaussian elimination with partial
//!   pivoting in f64 (OpenCV's `DECOMP_LU`), and is inverted with the 3x3
//!   adjugate (OpenCV `invert` for 3x3, `DECOMP_LU`).
//! - Sampling is cubic convolution (Keys 1981, `a = -0.75`, OpenCV's
//!   `interpolateCubic`) at the exact mapped position, weights and sum in f64,
//!   rounded half to even, edge pixels replicated. This is what opencv-python's
//!   x86 builds compute (their Intel IPP path): checked on the vectors in
//!   `golden/geometry.json`, at most 1 level apart on a few pixels. OpenCV's
//!   portable path (e.g. aarch64 builds) quantises positions to 1/32 pixel and
//!   uses 15-bit fixed-point weights instead, which differs by a few levels.

use crate::image::BgrImage;

/// `getPerspectiveTransform(src, dst)`: the row-major 3x3 homography mapping
/// each `src[i]` to `dst[i]`, or `None` when the points are degenerate.
pub fn perspective_transform(src: &[[f32; 2]; 4], dst: &[[f32; 2]; 4]) -> Option<[f64; 9]> {
    let mut a = [[0.0f64; 9]; 8];
    for i in 0..4 {
        let (sx, sy) = (src[i][0], src[i][1]);
        let (dx, dy) = (dst[i][0], dst[i][1]);
        // Products in f32 as OpenCV's Point2f arithmetic, then widened.
        a[i] = [
            f64::from(sx),
            f64::from(sy),
            1.0,
            0.0,
            0.0,
            0.0,
            f64::from(-sx * dx),
            f64::from(-sy * dx),
            f64::from(dx),
        ];
        a[i + 4] = [
            0.0,
            0.0,
            0.0,
            f64::from(sx),
            f64::from(sy),
            1.0,
            f64::from(-sx * dy),
            f64::from(-sy * dy),
            f64::from(dy),
        ];
    }
    // Gaussian elimination with partial pivoting on the augmented matrix.
    for col in 0..8 {
        let pivot = (col..8).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() < f64::EPSILON {
            return None;
        }
        a.swap(col, pivot);
        let top = a[col];
        for row in a.iter_mut().skip(col + 1) {
            let f = -row[col] / top[col];
            for (v, t) in row.iter_mut().zip(top).skip(col + 1) {
                *v += t * f;
            }
            row[col] = 0.0;
        }
    }
    let mut x = [0.0f64; 8];
    for i in (0..8).rev() {
        let mut s = a[i][8];
        for k in i + 1..8 {
            s -= a[i][k] * x[k];
        }
        x[i] = s / a[i][i];
    }
    Some([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 1.0])
}

/// Inverse of a row-major 3x3 matrix (adjugate over determinant), or `None`
/// when it is singular.
pub fn invert3(m: &[f64; 9]) -> Option<[f64; 9]> {
    let det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6])
        + m[2] * (m[3] * m[7] - m[4] * m[6]);
    if det == 0.0 || !det.is_finite() {
        return None;
    }
    let d = 1.0 / det;
    Some([
        (m[4] * m[8] - m[5] * m[7]) * d,
        (m[2] * m[7] - m[1] * m[8]) * d,
        (m[1] * m[5] - m[2] * m[4]) * d,
        (m[5] * m[6] - m[3] * m[8]) * d,
        (m[0] * m[8] - m[2] * m[6]) * d,
        (m[2] * m[3] - m[0] * m[5]) * d,
        (m[3] * m[7] - m[4] * m[6]) * d,
        (m[1] * m[6] - m[0] * m[7]) * d,
        (m[0] * m[4] - m[1] * m[3]) * d,
    ])
}

/// Cubic convolution kernel, `a = -0.75` (OpenCV `interpolateCubic`).
fn cubic(t: f64) -> f64 {
    const A: f64 = -0.75;
    let t = t.abs();
    if t <= 1.0 {
        ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0
    } else if t < 2.0 {
        ((A * t - 5.0 * A) * t + 8.0 * A) * t - 4.0 * A
    } else {
        0.0
    }
}

/// `cv2.warpPerspective(src, m, (dw, dh), flags=INTER_CUBIC,
/// borderMode=BORDER_REPLICATE)` where `m` maps source to destination
/// pixels; writes `dst` as a `dw x dh` BGR image. Destination pixels whose
/// mapping is undefined (projective denominator 0) are black.
pub fn warp_perspective_cubic(
    src: &BgrImage,
    m: &[f64; 9],
    dw: usize,
    dh: usize,
    dst: &mut BgrImage,
) {
    dst.resize(dw, dh);
    let Some(inv) = invert3(m) else {
        dst.pixels_mut().fill(0);
        return;
    };
    let (sw, sh) = (src.width as i64, src.height as i64);
    let s = src.pixels();
    let out = &mut dst.data[..dw * dh * 3];
    for y in 0..dh {
        let yf = y as f64;
        for x in 0..dw {
            let xf = x as f64;
            let w = inv[6] * xf + inv[7] * yf + inv[8];
            let o = &mut out[(y * dw + x) * 3..(y * dw + x) * 3 + 3];
            if w == 0.0 {
                o.fill(0);
                continue;
            }
            let sx = (inv[0] * xf + inv[1] * yf + inv[2]) / w;
            let sy = (inv[3] * xf + inv[4] * yf + inv[5]) / w;
            if !sx.is_finite() || !sy.is_finite() {
                o.fill(0);
                continue;
            }
            let (ix, iy) = (sx.floor(), sy.floor());
            let (fx, fy) = (sx - ix, sy - iy);
            let wx = [cubic(fx + 1.0), cubic(fx), cubic(1.0 - fx), cubic(2.0 - fx)];
            let wy = [cubic(fy + 1.0), cubic(fy), cubic(1.0 - fy), cubic(2.0 - fy)];
            // Far outside the image every tap replicates the same edge pixel.
            let ix = (ix as i64).clamp(-4, sw + 4);
            let iy = (iy as i64).clamp(-4, sh + 4);
            let mut acc = [0.0f64; 3];
            for (j, wyj) in wy.iter().enumerate() {
                let yy = (iy - 1 + j as i64).clamp(0, sh - 1) as usize;
                for (i, wxi) in wx.iter().enumerate() {
                    let xx = (ix - 1 + i as i64).clamp(0, sw - 1) as usize;
                    let p = &s[(yy * src.width + xx) * 3..(yy * src.width + xx) * 3 + 3];
                    let wgt = wyj * wxi;
                    acc[0] += f64::from(p[0]) * wgt;
                    acc[1] += f64::from(p[1]) * wgt;
                    acc[2] += f64::from(p[2]) * wgt;
                }
            }
            for (d, v) in o.iter_mut().zip(acc) {
                *d = v.round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

/// `np.rot90(img)`: rotate 90 degrees counter-clockwise (`src` W x H becomes
/// H x W).
pub fn rotate90_ccw(src: &BgrImage, dst: &mut BgrImage) {
    let (w, h) = (src.width, src.height);
    dst.resize(h, w);
    let s = src.pixels();
    let d = &mut dst.data[..w * h * 3];
    for ny in 0..w {
        for nx in 0..h {
            // new[ny][nx] = old[nx][w - 1 - ny]
            let si = (nx * w + (w - 1 - ny)) * 3;
            let di = (ny * h + nx) * 3;
            d[di..di + 3].copy_from_slice(&s[si..si + 3]);
        }
    }
}

/// `cv2.rotate(img, cv2.ROTATE_180)`, in place.
pub fn rotate180(img: &mut BgrImage) {
    let px = img.pixels_mut();
    let n = px.len() / 3;
    for i in 0..n / 2 {
        let j = n - 1 - i;
        for c in 0..3 {
            px.swap(i * 3 + c, j * 3 + c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homography_maps_the_points() {
        let src = [[3.0, 23.0], [121.0, 58.0], [104.0, 114.0], [0.0, 79.0]];
        let dst = [[0.0, 0.0], [123.0, 0.0], [123.0, 58.0], [0.0, 58.0]];
        let m = perspective_transform(&src, &dst).expect("regular");
        for (s, d) in src.iter().zip(&dst) {
            let (x, y) = (f64::from(s[0]), f64::from(s[1]));
            let w = m[6] * x + m[7] * y + m[8];
            let u = (m[0] * x + m[1] * y + m[2]) / w;
            let v = (m[3] * x + m[4] * y + m[5]) / w;
            assert!((u - f64::from(d[0])).abs() < 1e-9 && (v - f64::from(d[1])).abs() < 1e-9);
        }
        let inv = invert3(&m).expect("regular");
        let id = [
            m[0] * inv[0] + m[1] * inv[3] + m[2] * inv[6],
            m[0] * inv[1] + m[1] * inv[4] + m[2] * inv[7],
            m[3] * inv[0] + m[4] * inv[3] + m[5] * inv[6],
        ];
        assert!((id[0] - 1.0).abs() < 1e-12 && id[1].abs() < 1e-12 && id[2].abs() < 1e-12);
        assert!(perspective_transform(&[[0.0, 0.0]; 4], &dst).is_none());
    }

    #[test]
    fn rotations() {
        let mut img = BgrImage::default();
        img.resize(3, 2);
        for (i, v) in img.pixels_mut().iter_mut().enumerate() {
            *v = (i / 3) as u8;
        }
        // pixels: row0 = 0 1 2, row1 = 3 4 5
        let mut r = BgrImage::default();
        rotate90_ccw(&img, &mut r);
        assert_eq!((r.width, r.height), (2, 3));
        let px: Vec<u8> = r.pixels().chunks(3).map(|p| p[0]).collect();
        assert_eq!(px, [2, 5, 1, 4, 0, 3]);
        rotate180(&mut img);
        let px: Vec<u8> = img.pixels().chunks(3).map(|p| p[0]).collect();
        assert_eq!(px, [5, 4, 3, 2, 1, 0]);
    }

    #[test]
    fn identity_warp_copies() {
        let mut img = BgrImage::default();
        img.resize(5, 4);
        for (i, v) in img.pixels_mut().iter_mut().enumerate() {
            *v = (i * 13 % 251) as u8;
        }
        let id = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let mut out = BgrImage::default();
        warp_perspective_cubic(&img, &id, 5, 4, &mut out);
        assert_eq!(out.pixels(), img.pixels());
    }
}
