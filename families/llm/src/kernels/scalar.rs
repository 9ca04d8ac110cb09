//! Portable kernels in **lane form**: the canonical arithmetic every instruction set
//! reproduces bit for bit, and the fallback on CPUs without SIMD.
//!
//! A dot product keeps 8 f32 lanes, as the AVX2 kernels (and llama.cpp's, whose results
//! these equal) do: per block, lane `l` receives the exact integer sum of the products of
//! elements `4l .. 4l + 4` of the block (as `vpmaddubsw` + `vpmaddwd` leave them), converted
//! to f32 and accumulated with one fused multiply-add by the product of the scales. At the
//! end the lanes are summed in the fixed order [`hsum8`]. Every step is one IEEE operation
//! (`mul_add` is fused), so the NEON and AVX2 paths, which perform the same operations on the
//! same lanes, give identical results.

#![allow(clippy::needless_range_loop)] // lanes and block elements are indexed as in the SIMD kernels

use std::ops::Range;

use super::{Acts, Matrix, OutMatrix, RowKernel, tiled};
use crate::quant::{BlockQ8, BlockQ8K, TensorType, f16_at, q4k_scale_min};

/// The fixed sum of 8 lanes: `t_i = l_i + l_{i+4}`, then `(t_0 + t_2) + (t_1 + t_3)` (the
/// order of an AVX2 `extract/add`, `movehl/add`, `movehdup/add_ss` reduction).
#[inline(always)]
pub(crate) fn hsum8(l: &[f32; 8]) -> f32 {
    let t = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// The 32 weight values of a Q4_0/Q4_1 block's nibbles, in element order.
#[inline(always)]
fn nibbles(qs: &[u8]) -> [i32; 32] {
    let mut w = [0i32; 32];
    for i in 0..16 {
        w[i] = i32::from(qs[i] & 0x0F);
        w[i + 16] = i32::from(qs[i] >> 4);
    }
    w
}

/// Lane sums of a 32-element block: lane `l` = `sum(w[4l..4l+4] * y[4l..4l+4])`.
#[inline(always)]
fn lanes32(w: &[i32; 32], y: &[i8; 32]) -> [i32; 8] {
    let mut s = [0i32; 8];
    for (l, s) in s.iter_mut().enumerate() {
        for e in 4 * l..4 * l + 4 {
            *s += w[e] * i32::from(y[e]);
        }
    }
    s
}

#[inline(always)]
fn fma_lanes(acc: &mut [f32; 8], d: f32, s: &[i32; 8]) {
    for (a, &s) in acc.iter_mut().zip(s) {
        *a = d.mul_add(s as f32, *a);
    }
}

pub(crate) struct Q4_0K;
impl RowKernel for Q4_0K {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        let mut acc = [[0.0f32; 8]; N];
        for (b, blk) in w.chunks_exact(18).enumerate() {
            let d = f16_at(blk, 0);
            let mut q = nibbles(&blk[2..]);
            q.iter_mut().for_each(|v| *v -= 8);
            for i in 0..N {
                let a = &acts[i][b];
                fma_lanes(&mut acc[i], d * a.d, &lanes32(&q, &a.qs));
            }
        }
        acc.map(|a| hsum8(&a))
    }
}

pub(crate) struct Q4_1K;
impl RowKernel for Q4_1K {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        let mut acc = [[0.0f32; 8]; N];
        let mut summ = [0.0f32; N];
        for (b, blk) in w.chunks_exact(20).enumerate() {
            let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
            let q = nibbles(&blk[4..]);
            for i in 0..N {
                let a = &acts[i][b];
                fma_lanes(&mut acc[i], d * a.d, &lanes32(&q, &a.qs));
                summ[i] = m.mul_add(a.s, summ[i]);
            }
        }
        let mut out = [0.0f32; N];
        for i in 0..N {
            out[i] = hsum8(&acc[i]) + summ[i];
        }
        out
    }
}

pub(crate) struct Q8_0K;
impl RowKernel for Q8_0K {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        let mut acc = [[0.0f32; 8]; N];
        for (b, blk) in w.chunks_exact(34).enumerate() {
            let d = f16_at(blk, 0);
            let mut q = [0i32; 32];
            for (q, &v) in q.iter_mut().zip(&blk[2..]) {
                *q = i32::from(v as i8);
            }
            for i in 0..N {
                let a = &acts[i][b];
                fma_lanes(&mut acc[i], d * a.d, &lanes32(&q, &a.qs));
            }
        }
        acc.map(|a| hsum8(&a))
    }
}

pub(crate) struct Q4KK;
impl RowKernel for Q4KK {
    type Act = BlockQ8K;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8K]; N]) -> [f32; N] {
        let mut acc = [[0.0f32; 8]; N];
        let mut accm = [0.0f32; N];
        for (b, blk) in w.chunks_exact(144).enumerate() {
            let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
            let sm: [(u8, u8); 8] = std::array::from_fn(|j| q4k_scale_min(&blk[4..16], j));
            for i in 0..N {
                let a = &acts[i][b];
                let mut sumi = [0i32; 8];
                for j in 0..4 {
                    let qs = &blk[16 + 32 * j..16 + 32 * j + 32];
                    for l in 0..8 {
                        let (mut lo, mut hi) = (0i32, 0i32);
                        for e in 4 * l..4 * l + 4 {
                            lo += i32::from(qs[e] & 0x0F) * i32::from(a.qs[64 * j + e]);
                            hi += i32::from(qs[e] >> 4) * i32::from(a.qs[64 * j + 32 + e]);
                        }
                        sumi[l] += lo * i32::from(sm[2 * j].0) + hi * i32::from(sm[2 * j + 1].0);
                    }
                }
                fma_lanes(&mut acc[i], a.d * d, &sumi);
                let summ: i32 = (0..8)
                    .map(|j| {
                        i32::from(sm[j].1)
                            * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1]))
                    })
                    .sum();
                accm[i] += a.d * dmin * summ as f32;
            }
        }
        let mut out = [0.0f32; N];
        for i in 0..N {
            out[i] = hsum8(&acc[i]) - accm[i];
        }
        out
    }
}

pub(crate) struct Q6KK;
impl RowKernel for Q6KK {
    type Act = BlockQ8K;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8K]; N]) -> [f32; N] {
        let mut acc = [[0.0f32; 8]; N];
        let mut acc_off = [0.0f32; N];
        for (b, blk) in w.chunks_exact(210).enumerate() {
            let d = f16_at(blk, 208);
            let sc = |j: usize| i32::from(blk[192 + j] as i8);
            // Unsigned 6-bit values (0..=63) in element order; the offset of 32 is applied
            // through the activation block sums, as the SIMD kernels do.
            let mut q = [0i32; 256];
            for h in 0..2 {
                let (ql, qh) = (
                    &blk[64 * h..64 * h + 64],
                    &blk[128 + 32 * h..128 + 32 * h + 32],
                );
                for l in 0..32 {
                    let hb = qh[l];
                    q[128 * h + l] = i32::from((ql[l] & 0x0F) | ((hb & 3) << 4));
                    q[128 * h + l + 32] = i32::from((ql[l + 32] & 0x0F) | (((hb >> 2) & 3) << 4));
                    q[128 * h + l + 64] = i32::from((ql[l] >> 4) | (((hb >> 4) & 3) << 4));
                    q[128 * h + l + 96] = i32::from((ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4));
                }
            }
            for i in 0..N {
                let a = &acts[i][b];
                let mut sumi = [0i32; 8];
                for g in 0..8 {
                    // 32-element group g: lanes 0-3 take sub-block 2g, lanes 4-7 sub-block 2g + 1.
                    for l in 0..8 {
                        let mut s = 0i32;
                        for e in 32 * g + 4 * l..32 * g + 4 * l + 4 {
                            s += q[e] * i32::from(a.qs[e]);
                        }
                        sumi[l] += s * sc(2 * g + l / 4);
                    }
                }
                fma_lanes(&mut acc[i], a.d * d, &sumi);
                let off: i32 = (0..16).map(|j| sc(j) * i32::from(a.bsums[j])).sum();
                acc_off[i] += a.d * d * (32 * off) as f32;
            }
        }
        let mut out = [0.0f32; N];
        for i in 0..N {
            out[i] = hsum8(&acc[i]) - acc_off[i];
        }
        out
    }
}

/// Float weights against f32 activations: 8 lanes over 8-column chunks (lane = column mod
/// 8), then the remaining columns added one by one (not fused).
macro_rules! float_kernel {
    ($name:ident, $get:expr) => {
        pub(crate) struct $name;
        impl RowKernel for $name {
            type Act = f32;
            #[inline(always)]
            unsafe fn dot<const N: usize>(w: &[u8], acts: [&[f32]; N]) -> [f32; N] {
                let cols = acts[0].len();
                let full = cols / 8 * 8;
                let mut acc = [[0.0f32; 8]; N];
                for c in (0..full).step_by(8) {
                    for l in 0..8 {
                        let wv: f32 = $get(w, c + l);
                        for i in 0..N {
                            acc[i][l] = wv.mul_add(acts[i][c + l], acc[i][l]);
                        }
                    }
                }
                let mut out = acc.map(|a| hsum8(&a));
                for c in full..cols {
                    let wv: f32 = $get(w, c);
                    for i in 0..N {
                        out[i] += wv * acts[i][c];
                    }
                }
                out
            }
        }
    };
}

float_kernel!(F32K, |w: &[u8], c: usize| f32::from_le_bytes([
    w[4 * c],
    w[4 * c + 1],
    w[4 * c + 2],
    w[4 * c + 3]
]));
float_kernel!(F16K, |w: &[u8], c: usize| f16_at(w, 2 * c));
float_kernel!(Bf16K, |w: &[u8], c: usize| f32::from_bits(
    u32::from(u16::from_le_bytes([w[2 * c], w[2 * c + 1]])) << 16
));

/// The scalar matrix product (see [`super::matmul`]).
pub(crate) fn matmul(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY (every call below): portable code; shapes checked by `super::matmul`.
    unsafe {
        match (w.ty, *acts) {
            (TensorType::F32, Acts::F32 { data, per_row }) => {
                tiled::<F32K>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::F16, Acts::F32 { data, per_row }) => {
                tiled::<F16K>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Bf16, Acts::F32 { data, per_row }) => {
                tiled::<Bf16K>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q8_0, Acts::Q8 { data, per_row }) => {
                tiled::<Q8_0K>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4_0, Acts::Q8 { data, per_row }) => {
                tiled::<Q4_0K>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4_1, Acts::Q8 { data, per_row }) => {
                tiled::<Q4_1K>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4K, Acts::Q8K { data, per_row }) => {
                tiled::<Q4KK>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q6K, Acts::Q8K { data, per_row }) => {
                tiled::<Q6KK>(w, rows, data, per_row, tokens, out)
            }
            (ty, a) => unreachable!(
                "{ty:?} with {:?} activations (checked by matmul)",
                a.format()
            ),
        }
    }
}

/// `exp(x)` by the algorithm of Arm's Optimized Routines `v_expf` (Szabolcs Nagy, 2019:
/// `2^n * (1 + poly(r))` with `n = round(x / ln 2)`, `r = x - n ln 2` in two parts, a
/// degree-5 polynomial), in the form of ggml's `ggml_v_expf` for AVX2 and NEON
/// (`ggml-cpu/vec.h`): the result `k + k * j` with `k = 2^n`, and the scaled special cases
/// for `|n| > 126`. Maximum error 1.45 ulp + 0.5. Every step is one IEEE operation
/// (`mul_add` is fused), so the SIMD versions give the same bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const SHIFT: f32 = f32::from_bits(0x4b40_0000); // 0x1.8p23
    const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b); // 0x1.715476p+0
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0x1.62e4p-1
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 0x1.7f7d1cp-20
    const C1: f32 = f32::from_bits(0x3f7f_fff6); // 0x1.ffffecp-1
    const C2: f32 = f32::from_bits(0x3eff_fedb); // 0x1.fffdb6p-2
    const C3: f32 = f32::from_bits(0x3e2a_af33); // 0x1.555e66p-3
    const C4: f32 = f32::from_bits(0x3d2b_9f17); // 0x1.573e2ep-5
    const C5: f32 = f32::from_bits(0x3c07_2010); // 0x1.0e4020p-7
    let z = x.mul_add(INV_LN2, SHIFT);
    let n = z - SHIFT;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let u = b * b;
    let j = C5
        .mul_add(b, C4)
        .mul_add(u, C3.mul_add(b, C2))
        .mul_add(u, C1 * b);
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// The softmax numerators in place, `s[i] = exp(s[i] - max)` ([`exp`]), and their sum as
/// ggml's `ggml_vec_soft_max_f32` (AVX2) forms it: per chunk of 8 the [`hsum8`] in f32,
/// chunks added in f64 (a last partial chunk as if padded with zeros, which is what the
/// reference's masked, padded key positions contribute).
pub(crate) fn softmax_exp(s: &mut [f32], max: f32) -> f64 {
    let mut sum = 0.0f64;
    for c in s.chunks_mut(8) {
        let mut l = [0.0f32; 8];
        for (v, l) in c.iter_mut().zip(&mut l) {
            *v = exp(*v - max);
            *l = *v;
        }
        sum += f64::from(hsum8(&l));
    }
    sum
}

/// `g = silu(g) * u`, `silu(x) = x / (1 + exp(-x))` with [`exp`] (ggml's `ggml_v_silu` in
/// `ggml_vec_swiglu_f32`).
pub(crate) fn silu_mul(g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// The dot product of `q` (f32) with `k` (f16 bits) in the matrix-matrix order
/// ([`super::F16Order::Gemm`]): lane `l` of 8 accumulates the products of columns
/// `c = l (mod 8)` in column order with fused multiply-adds, then [`hsum8`]. `len % 8 == 0`.
pub(crate) fn dot_f16_gemm(q: &[f32], k: &[u16]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (q, k) in q.chunks_exact(8).zip(k.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] = f16_bits(k[l]).mul_add(q[l], acc[l]);
        }
    }
    hsum8(&acc)
}

/// The sum of [`GEMV_SLOTS`] accumulators as ggml's `GGML_F16_VEC_REDUCE` (AVX2) adds
/// them: slot `s = 8a + l` (accumulator `a`, lane `l`); `r_l = (s_l + s_{16+l}) + (s_{8+l} +
/// s_{24+l})`, `t_i = r_i + r_{i+4}`, `(t_0 + t_1) + (t_2 + t_3)`.
#[inline(always)]
pub(crate) fn reduce_gemv(s: &[f32; GEMV_SLOTS]) -> f32 {
    let r: [f32; 8] = std::array::from_fn(|l| (s[l] + s[16 + l]) + (s[8 + l] + s[24 + l]));
    let t = [r[0] + r[4], r[1] + r[5], r[2] + r[6], r[3] + r[7]];
    (t[0] + t[1]) + (t[2] + t[3])
}

/// Accumulators of the matrix-vector order (4 vectors of 8 lanes).
pub(crate) const GEMV_SLOTS: usize = 32;

/// The dot product of `q` (f32) with `k` (f16 bits) in the matrix-vector order
/// ([`super::F16Order::Gemv`], ggml's `ggml_vec_dot_f16` on AVX2): slot `c mod 32` accumulates
/// column `c` of every whole 32-column step with a fused multiply-add, [`reduce_gemv`],
/// then the remaining columns' products added in f64.
pub(crate) fn dot_f16_gemv(q: &[f32], k: &[u16]) -> f32 {
    let whole = q.len() / GEMV_SLOTS * GEMV_SLOTS;
    let mut s = [0.0f32; GEMV_SLOTS];
    for (q, k) in q[..whole]
        .chunks_exact(GEMV_SLOTS)
        .zip(k[..whole].chunks_exact(GEMV_SLOTS))
    {
        for i in 0..GEMV_SLOTS {
            s[i] = q[i].mul_add(f16_bits(k[i]), s[i]);
        }
    }
    let mut sum = f64::from(reduce_gemv(&s));
    for c in whole..q.len() {
        sum += f64::from(q[c] * f16_bits(k[c]));
    }
    sum as f32
}

/// `out[d] = sum_j p[j] * values[j][d]` (`values` rows of `out.len()` f16) in the
/// matrix-matrix order: row `j` goes to lane `j mod 8` (fused multiply-adds in row order),
/// lanes summed by [`hsum8`]. `acc` holds `8 * out.len()` values.
pub(crate) fn weighted_sum_gemm(p: &[f32], values: &[u16], acc: &mut [f32], out: &mut [f32]) {
    let hd = out.len();
    acc[..8 * hd].fill(0.0);
    for (j, (&p, v)) in p.iter().zip(values.chunks_exact(hd)).enumerate() {
        let a = &mut acc[(j % 8) * hd..(j % 8 + 1) * hd];
        for (a, &v) in a.iter_mut().zip(v) {
            *a = f16_bits(v).mul_add(p, *a);
        }
    }
    for (d, o) in out.iter_mut().enumerate() {
        *o = hsum8(&std::array::from_fn(|l| acc[l * hd + d]));
    }
}

/// As [`weighted_sum_gemm`] in the matrix-vector order: row `j` to slot `j mod 32`,
/// [`reduce_gemv`] (rows past the end count as zeros, as the reference's padded cache).
/// `acc` holds `32 * out.len()` values.
pub(crate) fn weighted_sum_gemv(p: &[f32], values: &[u16], acc: &mut [f32], out: &mut [f32]) {
    let hd = out.len();
    acc[..GEMV_SLOTS * hd].fill(0.0);
    for (j, (&p, v)) in p.iter().zip(values.chunks_exact(hd)).enumerate() {
        let a = &mut acc[(j % GEMV_SLOTS) * hd..(j % GEMV_SLOTS + 1) * hd];
        for (a, &v) in a.iter_mut().zip(v) {
            *a = f16_bits(v).mul_add(p, *a);
        }
    }
    for (d, o) in out.iter_mut().enumerate() {
        *o = reduce_gemv(&std::array::from_fn(|s| acc[s * hd + d]));
    }
}

/// llama.cpp's RoPE rotation of one head in rotate-half lanes (`x[i]`, `x[i + half]` with
/// `cos[i]`, `sin[i]` from `angles = [cos; half] ++ [sin; half]`): ggml's `rotate_pairs` as
/// GCC compiles it with FMA, `fma(x0, cos, -(x1 sin))` and `fma(x0, sin, x1 cos)`
/// (see [`super::rope_fused`]).
#[inline(always)]
pub(crate) fn rope_fused(x: &mut [f32], angles: &[f32]) {
    let half = x.len() / 2;
    let (x0, x1) = x.split_at_mut(half);
    let (cos, sin) = angles.split_at(half);
    for ((a, b), (&c, &s)) in x0.iter_mut().zip(x1.iter_mut()).zip(cos.iter().zip(sin)) {
        let (u, v) = (*a, *b);
        *a = u.mul_add(c, -(v * s));
        *b = u.mul_add(s, v * c);
    }
}

#[inline(always)]
fn f16_bits(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}
