//! `cv2.resize(img, (w, h))` (`INTER_LINEAR`) on 8-bit images, bit-exact.
//!
//! OpenCV's fixed-point bilinear resize (`modules/imgproc/src/resize.cpp`,
//! `resizeGeneric_` with `HResizeLinear` / `VResizeLinear` and its SIMD row
//! kernel `VResizeLinearVec_32s8u`), which the reference uses for every resize:
//!
//! - `scale = 1 / (dst / src)` (f64); for each destination column
//!   `fx = (float)((dx + 0.5) * scale - 0.5)`, `sx = floor(fx)`, `fx -= sx`;
//!   columns left of the image use `sx = 0, fx = 0`, right of it
//!   `sx = src - 1, fx = 0`. Rows use the same formula **without** that clamp:
//!   the row indices `sy`, `sy + 1` are clamped instead.
//! - Weights are `round_half_even((1 - f) * 2048)` and `round_half_even(f * 2048)`.
//! - Horizontal pass: `H = p[sx] * a0 + p[sx + 1] * a1` (i32, 11 fraction bits).
//! - Vertical pass: `((H0 >> 4) * b0 >> 16) + ((H1 >> 4) * b1 >> 16)`, then
//!   `(v + 2) >> 2`, saturated to u8 (the SIMD kernel's arithmetic, which
//!   x86 and ARM builds use for whole rows).
//!
//! Checked against `cv2.resize` (opencv-python 5.0.0.93) on the vectors in
//! `golden/geometry.json` (`tests/geometry.rs`), zero differences.

/// Column/row tables and the two horizontal row buffers, reused across calls.
#[derive(Clone, Debug, Default)]
pub struct ResizeScratch {
    xofs: Vec<usize>,
    xa: Vec<[i32; 2]>,
    rows: [Vec<i32>; 2],
}

fn weights(f: f32) -> [i32; 2] {
    [
        ((1.0 - f) * 2048.0).round_ties_even() as i32,
        (f * 2048.0).round_ties_even() as i32,
    ]
}

/// Source index and fraction of destination index `d`: `(floor(f), f - floor(f))`.
fn source_coord(d: usize, scale: f64) -> (i64, f32) {
    let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
    let s = f.floor();
    (s as i64, f - s)
}

/// Resize `src` (`sw x sh` pixels, `cn` interleaved u8 channels, rows
/// `src_stride` bytes apart) into `dst` (`dw x dh`, tightly packed).
///
/// # Panics
/// Never for consistent sizes; callers pass buffers of at least
/// `src_stride * (sh - 1) + sw * cn` and `dw * dh * cn` bytes (checked with
/// debug assertions) and non-zero sides.
#[allow(clippy::too_many_arguments)]
pub fn resize_linear(
    src: &[u8],
    sw: usize,
    sh: usize,
    src_stride: usize,
    cn: usize,
    dst: &mut [u8],
    dw: usize,
    dh: usize,
    scratch: &mut ResizeScratch,
) {
    debug_assert!(sw > 0 && sh > 0 && dw > 0 && dh > 0);
    debug_assert!(src.len() >= src_stride * (sh - 1) + sw * cn);
    debug_assert!(dst.len() >= dw * dh * cn);
    let scale_x = 1.0 / (dw as f64 / sw as f64);
    let scale_y = 1.0 / (dh as f64 / sh as f64);
    scratch.xofs.clear();
    scratch.xa.clear();
    for dx in 0..dw {
        let (mut sx, mut fx) = source_coord(dx, scale_x);
        if sx < 0 {
            sx = 0;
            fx = 0.0;
        }
        if sx >= sw as i64 - 1 {
            sx = sw as i64 - 1;
            fx = 0.0;
        }
        scratch.xofs.push(sx as usize);
        scratch.xa.push(weights(fx));
    }
    let row_len = dw * cn;
    for r in &mut scratch.rows {
        r.clear();
        r.resize(row_len, 0);
    }
    // Which source rows the two buffers hold (usize::MAX: none yet).
    let mut held = [usize::MAX; 2];
    for dy in 0..dh {
        let (sy, fy) = source_coord(dy, scale_y);
        let b = weights(fy);
        let want = [
            sy.clamp(0, sh as i64 - 1) as usize,
            (sy + 1).clamp(0, sh as i64 - 1) as usize,
        ];
        if held[0] != want[0] {
            if held[1] == want[0] {
                // Moving down one source row: the old second row is the new first.
                scratch.rows.swap(0, 1);
                held.swap(0, 1);
            } else {
                horizontal(&src[want[0] * src_stride..], sw, cn, scratch, 0);
                held[0] = want[0];
            }
        }
        if held[1] != want[1] {
            if held[0] == want[1] {
                let [a, b] = &mut scratch.rows;
                b.copy_from_slice(a);
            } else {
                horizontal(&src[want[1] * src_stride..], sw, cn, scratch, 1);
            }
            held[1] = want[1];
        }
        let (r0, r1) = (&scratch.rows[0], &scratch.rows[1]);
        let out = &mut dst[dy * row_len..(dy + 1) * row_len];
        for ((o, &h0), &h1) in out.iter_mut().zip(r0).zip(r1) {
            let v = (((h0 >> 4) * b[0]) >> 16) + (((h1 >> 4) * b[1]) >> 16);
            *o = ((v + 2) >> 2).clamp(0, 255) as u8;
        }
    }
}

/// The horizontal pass of one source row into row buffer `slot`.
fn horizontal(line: &[u8], sw: usize, cn: usize, scratch: &mut ResizeScratch, slot: usize) {
    let line = &line[..sw * cn];
    let out = &mut scratch.rows[slot];
    for (dx, (&x0, &[a0, a1])) in scratch.xofs.iter().zip(&scratch.xa).enumerate() {
        let x1 = (x0 + 1).min(sw - 1);
        for c in 0..cn {
            out[dx * cn + c] =
                i32::from(line[x0 * cn + c]) * a0 + i32::from(line[x1 * cn + c]) * a1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_constant_images_are_preserved() {
        let src: Vec<u8> = (0..5 * 4 * 3).map(|v| (v * 7 % 256) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let mut s = ResizeScratch::default();
        resize_linear(&src, 5, 4, 15, 3, &mut dst, 5, 4, &mut s);
        assert_eq!(dst, src);
        let src = vec![77u8; 7 * 3];
        let mut dst = vec![0u8; 20 * 9];
        resize_linear(&src, 7, 3, 7, 1, &mut dst, 20, 9, &mut s);
        assert!(dst.iter().all(|&v| v == 77));
    }
}
