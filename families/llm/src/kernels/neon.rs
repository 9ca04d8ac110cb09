//! aarch64 kernels (Jetson, DRIVE): Advanced SIMD integer dot products over the ggml blocks,
//! with the ARMv8.2 `sdot` instruction where the CPU has it ([`super::Isa::NeonDot`]: Orin's
//! Cortex-A78AE, Xavier's Carmel) and `smull` + `sadalp` pairs where it does not
//! ([`super::Isa::Neon`]: Cortex-A57 Nano/TX2). `sdot` and the f16 conversions (`fcvtl`,
//! base ARMv8) are written as inline assembly: their Rust intrinsics are not stable.

use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

use super::{Acts, Matrix, OutMatrix, RowKernel, tiled};
use crate::quant::{BlockQ8, BlockQ8K, QK, TensorType, q4k_scale_min, round_f16};

/// Sums of products of signed bytes in 4 lanes, lane `i` = the sum over bytes `4i .. 4i + 4`
/// (the lane layout of `sdot`, and of AVX2's `vpmaddubsw` + `vpmaddwd`).
pub(crate) trait I8Dot {
    /// `acc + dot4(a, b)` lane by lane.
    ///
    /// # Safety
    /// The implementation's instructions are available.
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// With `sdot` (ARMv8.2 dotprod).
pub(crate) struct Sdot;
/// With `smull` and pairwise adds (ARMv8.0).
pub(crate) struct Smull;

/// `sdot acc.4s, a.16b, b.16b`.
///
/// # Safety
/// The CPU has the dotprod extension.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: dotprod enabled on this function (the caller checked the CPU); register-only.
    unsafe {
        asm!("sdot {0:v}.4s, {1:v}.16b, {2:v}.16b", inout(vreg) acc, in(vreg) a, in(vreg) b,
             options(pure, nomem, nostack, preserves_flags));
    }
    acc
}

impl I8Dot for Sdot {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: the caller's contract (dotprod available).
        unsafe { sdot(acc, a, b) }
    }
}

impl I8Dot for Smull {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: base NEON. Products fit i16; pair sums fit i16 (|a| <= 128, |b| <= 127).
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            let pairs = vpaddq_s16(lo, hi);
            vaddq_s32(acc, vpaddlq_s16(pairs))
        }
    }
}

/// 4 f16 (raw bits) to f32 (`fcvtl`, base ARMv8).
#[inline(always)]
unsafe fn cvt_f16x4(h: uint16x4_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: register-only base ARMv8 instruction.
    unsafe {
        asm!("fcvtl {0:v}.4s, {1:v}.4h", out(vreg) r, in(vreg) h, options(pure, nomem, nostack, preserves_flags));
    }
    r
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    crate::quant::f16_at(b, at)
}

/// Eight f32 lanes as two registers: lanes 0-3 and 4-7.
#[derive(Clone, Copy)]
struct Lanes8 {
    lo: float32x4_t,
    hi: float32x4_t,
}

impl Lanes8 {
    #[inline(always)]
    unsafe fn zero() -> Lanes8 {
        // SAFETY: base NEON.
        unsafe {
            Lanes8 {
                lo: vdupq_n_f32(0.0),
                hi: vdupq_n_f32(0.0),
            }
        }
    }

    /// `self = d * float(s) + self`, fused, lane by lane.
    #[inline(always)]
    unsafe fn fma_i32(&mut self, d: f32, s_lo: int32x4_t, s_hi: int32x4_t) {
        // SAFETY: base NEON.
        unsafe {
            self.lo = vfmaq_n_f32(self.lo, vcvtq_f32_s32(s_lo), d);
            self.hi = vfmaq_n_f32(self.hi, vcvtq_f32_s32(s_hi), d);
        }
    }

    /// The fixed lane sum of [`super::scalar::hsum8`].
    #[inline(always)]
    unsafe fn hsum(self) -> f32 {
        // SAFETY: base NEON.
        unsafe {
            let t = vaddq_f32(self.lo, self.hi);
            (vgetq_lane_f32::<0>(t) + vgetq_lane_f32::<2>(t))
                + (vgetq_lane_f32::<1>(t) + vgetq_lane_f32::<3>(t))
        }
    }
}

pub(crate) struct Q4_0K<D>(std::marker::PhantomData<D>);
impl<D: I8Dot> RowKernel for Q4_0K<D> {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        // SAFETY: NEON (+ D's extension) by contract; `w` holds the blocks `acts` do.
        unsafe {
            let mut acc = [Lanes8::zero(); N];
            let m4 = vdupq_n_u8(0x0F);
            let eight = vdupq_n_s8(8);
            for b in 0..acts[0].len() {
                let blk = &w[18 * b..18 * b + 18];
                let d = f16_at(blk, 0);
                let q = vld1q_u8(blk.as_ptr().add(2));
                let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), eight);
                let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight);
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let y = a.qs.as_ptr();
                    let z = vdupq_n_s32(0);
                    acc[i].fma_i32(
                        d * a.d,
                        D::dot(z, lo, vld1q_s8(y)),
                        D::dot(z, hi, vld1q_s8(y.add(16))),
                    );
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = acc[i].hsum();
            }
            out
        }
    }
}

pub(crate) struct Q4_1K<D>(std::marker::PhantomData<D>);
impl<D: I8Dot> RowKernel for Q4_1K<D> {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        // SAFETY: as `Q4_0K`.
        unsafe {
            let mut acc = [Lanes8::zero(); N];
            let mut summ = [0.0f32; N];
            let m4 = vdupq_n_u8(0x0F);
            for b in 0..acts[0].len() {
                let blk = &w[20 * b..20 * b + 20];
                let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
                let q = vld1q_u8(blk.as_ptr().add(4));
                let lo = vreinterpretq_s8_u8(vandq_u8(q, m4));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q));
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let y = a.qs.as_ptr();
                    let z = vdupq_n_s32(0);
                    acc[i].fma_i32(
                        d * a.d,
                        D::dot(z, lo, vld1q_s8(y)),
                        D::dot(z, hi, vld1q_s8(y.add(16))),
                    );
                    summ[i] = m.mul_add(a.s, summ[i]);
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = acc[i].hsum() + summ[i];
            }
            out
        }
    }
}

pub(crate) struct Q8_0K<D>(std::marker::PhantomData<D>);
impl<D: I8Dot> RowKernel for Q8_0K<D> {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        // SAFETY: as `Q4_0K`.
        unsafe {
            let mut acc = [Lanes8::zero(); N];
            for b in 0..acts[0].len() {
                let blk = &w[34 * b..34 * b + 34];
                let d = f16_at(blk, 0);
                let x0 = vld1q_s8(blk.as_ptr().add(2).cast());
                let x1 = vld1q_s8(blk.as_ptr().add(18).cast());
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let y = a.qs.as_ptr();
                    let z = vdupq_n_s32(0);
                    acc[i].fma_i32(
                        d * a.d,
                        D::dot(z, x0, vld1q_s8(y)),
                        D::dot(z, x1, vld1q_s8(y.add(16))),
                    );
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = acc[i].hsum();
            }
            out
        }
    }
}

pub(crate) struct Q4KK<D>(std::marker::PhantomData<D>);
impl<D: I8Dot> RowKernel for Q4KK<D> {
    type Act = BlockQ8K;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: as `Q4_0K`; `w` holds 144-byte super-blocks.
        unsafe {
            let mut acc = [Lanes8::zero(); N];
            let mut accm = [0.0f32; N];
            let m4 = vdupq_n_u8(0x0F);
            for b in 0..acts[0].len() {
                let blk = &w[144 * b..144 * b + 144];
                let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
                let mut sm = [(0u8, 0u8); 8];
                for (j, s) in sm.iter_mut().enumerate() {
                    *s = q4k_scale_min(&blk[4..16], j);
                }
                let mut sumi = [(vdupq_n_s32(0), vdupq_n_s32(0)); N];
                for j in 0..4 {
                    let qp = blk.as_ptr().add(16 + 32 * j);
                    let (q0, q1) = (vld1q_u8(qp), vld1q_u8(qp.add(16)));
                    let lo0 = vreinterpretq_s8_u8(vandq_u8(q0, m4));
                    let lo1 = vreinterpretq_s8_u8(vandq_u8(q1, m4));
                    let hi0 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0));
                    let hi1 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1));
                    let (s0, s1) = (i32::from(sm[2 * j].0), i32::from(sm[2 * j + 1].0));
                    for i in 0..N {
                        let y = acts[i].get_unchecked(b).qs.as_ptr().add(64 * j);
                        let z = vdupq_n_s32(0);
                        let l0 = vmulq_n_s32(D::dot(z, lo0, vld1q_s8(y)), s0);
                        let l1 = vmulq_n_s32(D::dot(z, lo1, vld1q_s8(y.add(16))), s0);
                        let h0 = vmulq_n_s32(D::dot(z, hi0, vld1q_s8(y.add(32))), s1);
                        let h1 = vmulq_n_s32(D::dot(z, hi1, vld1q_s8(y.add(48))), s1);
                        sumi[i].0 = vaddq_s32(sumi[i].0, vaddq_s32(l0, h0));
                        sumi[i].1 = vaddq_s32(sumi[i].1, vaddq_s32(l1, h1));
                    }
                }
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    acc[i].fma_i32(a.d * d, sumi[i].0, sumi[i].1);
                    let mut summ = 0i32;
                    for (j, &(_, mn)) in sm.iter().enumerate() {
                        summ += i32::from(mn)
                            * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1]));
                    }
                    accm[i] += a.d * dmin * summ as f32;
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = acc[i].hsum() - accm[i];
            }
            out
        }
    }
}

pub(crate) struct Q6KK<D>(std::marker::PhantomData<D>);
impl<D: I8Dot> RowKernel for Q6KK<D> {
    type Act = BlockQ8K;
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // q[j][half16]: the block layout, indexed as in the other kernels
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: as `Q4_0K`; `w` holds 210-byte super-blocks.
        unsafe {
            let mut acc = [Lanes8::zero(); N];
            let mut acc_off = [0.0f32; N];
            let m4 = vdupq_n_u8(0x0F);
            let m3 = vdupq_n_u8(3);
            for b in 0..acts[0].len() {
                let blk = &w[210 * b..210 * b + 210];
                let d = f16_at(blk, 208);
                let sc = |j: usize| i32::from(blk[192 + j] as i8);
                let mut sumi = [(vdupq_n_s32(0), vdupq_n_s32(0)); N];
                for h in 0..2 {
                    let ql = blk.as_ptr().add(64 * h);
                    let qh = blk.as_ptr().add(128 + 32 * h);
                    // Unsigned 6-bit values (the offset of 32 goes through the block sums).
                    let mut q = [[vdupq_n_s8(0); 2]; 4];
                    for half16 in 0..2 {
                        let l0 = vld1q_u8(ql.add(16 * half16));
                        let l1 = vld1q_u8(ql.add(32 + 16 * half16));
                        let hb = vld1q_u8(qh.add(16 * half16));
                        q[0][half16] = vreinterpretq_s8_u8(vorrq_u8(
                            vandq_u8(l0, m4),
                            vshlq_n_u8::<4>(vandq_u8(hb, m3)),
                        ));
                        q[1][half16] = vreinterpretq_s8_u8(vorrq_u8(
                            vandq_u8(l1, m4),
                            vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(hb), m3)),
                        ));
                        q[2][half16] = vreinterpretq_s8_u8(vorrq_u8(
                            vshrq_n_u8::<4>(l0),
                            vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(hb), m3)),
                        ));
                        q[3][half16] = vreinterpretq_s8_u8(vorrq_u8(
                            vshrq_n_u8::<4>(l1),
                            vshlq_n_u8::<4>(vshrq_n_u8::<6>(hb)),
                        ));
                    }
                    for (k, qk) in q.iter().enumerate() {
                        let j = 8 * h + 2 * k;
                        let (s_lo, s_hi) = (sc(j), sc(j + 1));
                        for i in 0..N {
                            let y = acts[i].get_unchecked(b).qs.as_ptr().add(128 * h + 32 * k);
                            let z = vdupq_n_s32(0);
                            let lo = vmulq_n_s32(D::dot(z, qk[0], vld1q_s8(y)), s_lo);
                            let hi = vmulq_n_s32(D::dot(z, qk[1], vld1q_s8(y.add(16))), s_hi);
                            sumi[i].0 = vaddq_s32(sumi[i].0, lo);
                            sumi[i].1 = vaddq_s32(sumi[i].1, hi);
                        }
                    }
                }
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    acc[i].fma_i32(a.d * d, sumi[i].0, sumi[i].1);
                    let off: i32 = (0..16).map(|j| sc(j) * i32::from(a.bsums[j])).sum();
                    acc_off[i] += a.d * d * (32 * off) as f32;
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = acc[i].hsum() - acc_off[i];
            }
            out
        }
    }
}

/// Float weights against f32 activations: 8 lanes (two registers) over 8-column chunks, then
/// the remaining columns one by one (the order of the scalar and AVX2 kernels).
macro_rules! float_kernel {
    ($name:ident, $bytes:expr, $load:ident, $scalar:ident) => {
        pub(crate) struct $name;
        impl RowKernel for $name {
            type Act = f32;
            #[inline(always)]
            unsafe fn dot<const N: usize>(w: &[u8], acts: [&[f32]; N]) -> [f32; N] {
                let cols = acts[0].len();
                // SAFETY: NEON; `w` holds `cols` elements of `$bytes` bytes.
                unsafe {
                    let mut acc = [Lanes8::zero(); N];
                    let mut c = 0;
                    while c + 8 <= cols {
                        let w0 = $load(w.as_ptr().add($bytes * c));
                        let w1 = $load(w.as_ptr().add($bytes * (c + 4)));
                        for i in 0..N {
                            acc[i].lo =
                                vfmaq_f32(acc[i].lo, w0, vld1q_f32(acts[i].as_ptr().add(c)));
                            acc[i].hi =
                                vfmaq_f32(acc[i].hi, w1, vld1q_f32(acts[i].as_ptr().add(c + 4)));
                        }
                        c += 8;
                    }
                    let mut out = [0.0f32; N];
                    for i in 0..N {
                        out[i] = acc[i].hsum();
                    }
                    for c in c..cols {
                        let wv = $scalar(w, c);
                        for i in 0..N {
                            out[i] += wv * acts[i][c];
                        }
                    }
                    out
                }
            }
        }
    };
}

#[inline(always)]
unsafe fn load_f32(p: *const u8) -> float32x4_t {
    // SAFETY: 16 readable bytes (caller).
    unsafe { vld1q_f32(p.cast()) }
}
#[inline(always)]
unsafe fn load_f16(p: *const u8) -> float32x4_t {
    // SAFETY: 8 readable bytes (caller).
    unsafe { cvt_f16x4(vld1_u16(p.cast())) }
}
#[inline(always)]
unsafe fn load_bf16(p: *const u8) -> float32x4_t {
    // SAFETY: 8 readable bytes (caller); bf16 is the top half of an f32.
    unsafe { vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p.cast()))) }
}
fn scalar_f32(w: &[u8], c: usize) -> f32 {
    f32::from_le_bytes([w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]])
}
fn scalar_f16(w: &[u8], c: usize) -> f32 {
    crate::quant::f16_at(w, 2 * c)
}
fn scalar_bf16(w: &[u8], c: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([w[2 * c], w[2 * c + 1]])) << 16)
}

float_kernel!(F32K, 4, load_f32, scalar_f32);
float_kernel!(F16K, 2, load_f16, scalar_f16);
float_kernel!(Bf16K, 2, load_bf16, scalar_bf16);

/// # Safety
/// `D`'s instructions are available; shapes checked by `super::matmul`.
#[inline(always)]
unsafe fn matmul_with<D: I8Dot>(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY (every call): the caller's contract.
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
                tiled::<Q8_0K<D>>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4_0, Acts::Q8 { data, per_row }) => {
                tiled::<Q4_0K<D>>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4_1, Acts::Q8 { data, per_row }) => {
                tiled::<Q4_1K<D>>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4K, Acts::Q8K { data, per_row }) => {
                tiled::<Q4KK<D>>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q6K, Acts::Q8K { data, per_row }) => {
                tiled::<Q6KK<D>>(w, rows, data, per_row, tokens, out)
            }
            (ty, a) => unreachable!(
                "{ty:?} with {:?} activations (checked by matmul)",
                a.format()
            ),
        }
    }
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn matmul_dot(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY: dotprod enabled here (checked by the caller).
    unsafe { matmul_with::<Sdot>(w, rows, acts, tokens, out) }
}

#[target_feature(enable = "neon")]
unsafe fn matmul_plain(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY: base NEON.
    unsafe { matmul_with::<Smull>(w, rows, acts, tokens, out) }
}

/// The NEON matrix product (see [`super::matmul`]); `dot` selects `sdot`.
///
/// # Safety
/// NEON available, and dotprod when `dot`; shapes checked by `super::matmul`.
pub(crate) unsafe fn matmul(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
    dot: bool,
) {
    // SAFETY: the caller's contract.
    unsafe {
        if dot {
            matmul_dot(w, rows, acts, tokens, out)
        } else {
            matmul_plain(w, rows, acts, tokens, out)
        }
    }
}

/// Quantises one row to [`BlockQ8`], bit-identical to [`crate::quant::quantize_block_q8`]
/// (`fcvtns`: round to nearest, ties to even).
///
/// # Safety
/// NEON available; `x.len() == out.len() * 32`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn quantize_row_q8(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    // SAFETY: NEON; 32 floats per block in bounds.
    unsafe {
        for (b, blk) in out.iter_mut().enumerate() {
            let p = x.as_ptr().add(QK * b);
            let mut v = [vdupq_n_f32(0.0); 8];
            for (i, v) in v.iter_mut().enumerate() {
                *v = vld1q_f32(p.add(4 * i));
            }
            let mut m = vabsq_f32(v[0]);
            for v in &v[1..] {
                m = vmaxq_f32(m, vabsq_f32(*v));
            }
            let amax = vmaxvq_f32(m);
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mut sum = vdupq_n_s32(0);
            let mut r = [vdupq_n_s32(0); 8];
            for (r, v) in r.iter_mut().zip(v) {
                *r = vcvtnq_s32_f32(vmulq_n_f32(v, id));
                sum = vaddq_s32(sum, *r);
            }
            for i in 0..4 {
                let h = vcombine_s16(vqmovn_s32(r[2 * i]), vqmovn_s32(r[2 * i + 1]));
                vst1_s8(blk.qs.as_mut_ptr().add(8 * i), vqmovn_s16(h));
            }
            blk.d = round_f16(d);
            blk.s = round_f16(d * vaddvq_s32(sum) as f32);
        }
    }
}

/// [`super::scalar::exp`] on 4 lanes (the same operations).
#[inline(always)]
unsafe fn exp4(x: float32x4_t) -> float32x4_t {
    // SAFETY: base NEON; register-only.
    unsafe {
        let f = |b: u32| vdupq_n_f32(f32::from_bits(b));
        let shift = f(0x4b40_0000);
        let z = vfmaq_f32(shift, x, f(0x3fb8_aa3b));
        let n = vsubq_f32(z, shift);
        let b = vfmsq_f32(vfmsq_f32(x, n, f(0x3f31_7200)), n, f(0x35bf_be8e));
        let e = vshlq_n_u32::<23>(vreinterpretq_u32_f32(z));
        let k = vreinterpretq_f32_u32(vaddq_u32(e, vdupq_n_u32(0x3f80_0000)));
        let abs_n = vabsq_f32(n);
        let c = vcgtq_f32(abs_n, vdupq_n_f32(126.0));
        let u = vmulq_f32(b, b);
        let j = vfmaq_f32(
            vmulq_f32(f(0x3f7f_fff6), b),
            vfmaq_f32(
                vfmaq_f32(f(0x3eff_fedb), f(0x3e2a_af33), b),
                vfmaq_f32(f(0x3d2b_9f17), f(0x3c07_2010), b),
                u,
            ),
            u,
        );
        let normal = vfmaq_f32(k, j, k);
        if vmaxvq_u32(c) == 0 {
            return normal;
        }
        let g = vandq_u32(vcleq_f32(n, vdupq_n_f32(0.0)), vdupq_n_u32(0x8200_0000));
        let s1 = vreinterpretq_f32_u32(vaddq_u32(g, vdupq_n_u32(0x7f00_0000)));
        let s2 = vreinterpretq_f32_u32(vsubq_u32(e, g));
        let d = vcgtq_f32(abs_n, vdupq_n_f32(192.0));
        let scaled = vmulq_f32(vfmaq_f32(s2, s2, j), s1);
        vbslq_f32(d, vmulq_f32(s1, s1), vbslq_f32(c, scaled, normal))
    }
}

/// [`super::scalar::softmax_exp`].
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn softmax_exp(s: &mut [f32], max: f32) -> f64 {
    let n = s.len();
    let mut sum = 0.0f64;
    // SAFETY: NEON; indices below `n`.
    unsafe {
        let m = vdupq_n_f32(max);
        let mut c = 0;
        while c + 8 <= n {
            let p = s.as_mut_ptr().add(c);
            let lo = exp4(vsubq_f32(vld1q_f32(p), m));
            let hi = exp4(vsubq_f32(vld1q_f32(p.add(4)), m));
            vst1q_f32(p, lo);
            vst1q_f32(p.add(4), hi);
            sum += f64::from(Lanes8 { lo, hi }.hsum());
            c += 8;
        }
        if c < n {
            sum += super::scalar::softmax_exp(&mut s[c..], max);
        }
    }
    sum
}

/// [`super::scalar::silu_mul`].
///
/// # Safety
/// NEON; `u` at least as long as `g`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn silu_mul(g: &mut [f32], u: &[f32]) {
    let n = g.len();
    // SAFETY: NEON; indices below `n` for both slices.
    unsafe {
        let one = vdupq_n_f32(1.0);
        let mut c = 0;
        while c + 4 <= n {
            let p = g.as_mut_ptr().add(c);
            let x = vld1q_f32(p);
            let e = exp4(vsubq_f32(vdupq_n_f32(0.0), x));
            let y = vdivq_f32(x, vaddq_f32(one, e));
            vst1q_f32(p, vmulq_f32(y, vld1q_f32(u.as_ptr().add(c))));
            c += 4;
        }
        super::scalar::silu_mul(&mut g[c..], &u[c..n]);
    }
}

#[inline(always)]
unsafe fn load_f16x8(p: *const u16) -> Lanes8 {
    // SAFETY: 8 readable values at `p` (caller); base NEON.
    unsafe {
        Lanes8 {
            lo: cvt_f16x4(vld1_u16(p)),
            hi: cvt_f16x4(vld1_u16(p.add(4))),
        }
    }
}

#[inline(always)]
unsafe fn load_f32x8(p: *const f32) -> Lanes8 {
    // SAFETY: 8 readable values at `p` (caller); base NEON.
    unsafe {
        Lanes8 {
            lo: vld1q_f32(p),
            hi: vld1q_f32(p.add(4)),
        }
    }
}

impl Lanes8 {
    /// `self + a * b`, fused, lane by lane.
    #[inline(always)]
    unsafe fn fma(self, a: Lanes8, b: Lanes8) -> Lanes8 {
        // SAFETY: base NEON.
        unsafe {
            Lanes8 {
                lo: vfmaq_f32(self.lo, a.lo, b.lo),
                hi: vfmaq_f32(self.hi, a.hi, b.hi),
            }
        }
    }

    #[inline(always)]
    unsafe fn add(self, o: Lanes8) -> Lanes8 {
        // SAFETY: base NEON.
        unsafe {
            Lanes8 {
                lo: vaddq_f32(self.lo, o.lo),
                hi: vaddq_f32(self.hi, o.hi),
            }
        }
    }
}

/// [`super::scalar::dot_f16_gemm`].
///
/// # Safety
/// NEON; equal lengths, a multiple of 8.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_f16_gemm(q: &[f32], k: &[u16]) -> f32 {
    // SAFETY: NEON; indices below the common length.
    unsafe {
        let mut acc = Lanes8::zero();
        for c in (0..q.len() / 8 * 8).step_by(8) {
            acc = acc.fma(load_f16x8(k.as_ptr().add(c)), load_f32x8(q.as_ptr().add(c)));
        }
        acc.hsum()
    }
}

/// [`super::scalar::reduce_gemv`] of 4 vectors of 8 lanes.
#[inline(always)]
unsafe fn reduce_gemv(s: [Lanes8; 4]) -> f32 {
    // SAFETY: base NEON.
    unsafe {
        let r = s[0].add(s[2]).add(s[1].add(s[3]));
        let t = vaddq_f32(r.lo, r.hi);
        (vgetq_lane_f32::<0>(t) + vgetq_lane_f32::<1>(t))
            + (vgetq_lane_f32::<2>(t) + vgetq_lane_f32::<3>(t))
    }
}

/// [`super::scalar::dot_f16_gemv`].
///
/// # Safety
/// NEON; equal lengths.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot_f16_gemv(q: &[f32], k: &[u16]) -> f32 {
    let n = q.len();
    let whole = n / 32 * 32;
    // SAFETY: NEON; indices below `n`.
    unsafe {
        let mut s = [Lanes8::zero(); 4];
        for c in (0..whole).step_by(32) {
            for (a, s) in s.iter_mut().enumerate() {
                *s = s.fma(
                    load_f32x8(q.as_ptr().add(c + 8 * a)),
                    load_f16x8(k.as_ptr().add(c + 8 * a)),
                );
            }
        }
        let mut sum = f64::from(reduce_gemv(s));
        for c in whole..n {
            sum += f64::from(q[c] * half::f16::from_bits(k[c]).to_f32());
        }
        sum as f32
    }
}

/// `acc += p * v` over one value row, fused.
#[inline(always)]
unsafe fn fma_row(acc: &mut [f32], p: f32, v: &[u16]) {
    let hd = v.len();
    // SAFETY: base NEON; `acc` holds `hd` values.
    unsafe {
        let mut d = 0;
        while d + 4 <= hd {
            let a = acc.as_mut_ptr().add(d);
            vst1q_f32(
                a,
                vfmaq_n_f32(vld1q_f32(a), cvt_f16x4(vld1_u16(v.as_ptr().add(d))), p),
            );
            d += 4;
        }
        for d in d..hd {
            acc[d] = half::f16::from_bits(v[d]).to_f32().mul_add(p, acc[d]);
        }
    }
}

/// [`super::scalar::weighted_sum_gemm`].
///
/// # Safety
/// NEON; `values` holds `p.len()` rows of `out.len()`, `acc` `8 * out.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn weighted_sum_gemm(
    p: &[f32],
    values: &[u16],
    acc: &mut [f32],
    out: &mut [f32],
) {
    let hd = out.len();
    let acc = &mut acc[..8 * hd];
    acc.fill(0.0);
    for (j, (&p, v)) in p.iter().zip(values.chunks_exact(hd)).enumerate() {
        // SAFETY: NEON; the slot row holds `hd` values.
        unsafe { fma_row(&mut acc[(j % 8) * hd..(j % 8 + 1) * hd], p, v) };
    }
    // SAFETY: NEON; 8 rows of `hd` in `acc`.
    unsafe {
        let mut d = 0;
        while d + 4 <= hd {
            let mut r = [vdupq_n_f32(0.0); 8];
            for (l, r) in r.iter_mut().enumerate() {
                *r = vld1q_f32(acc.as_ptr().add(l * hd + d));
            }
            let t = [
                vaddq_f32(r[0], r[4]),
                vaddq_f32(r[1], r[5]),
                vaddq_f32(r[2], r[6]),
                vaddq_f32(r[3], r[7]),
            ];
            let o = vaddq_f32(vaddq_f32(t[0], t[2]), vaddq_f32(t[1], t[3]));
            vst1q_f32(out.as_mut_ptr().add(d), o);
            d += 4;
        }
        for d in d..hd {
            let mut l = [0.0f32; 8];
            for (i, l) in l.iter_mut().enumerate() {
                *l = acc[i * hd + d];
            }
            out[d] = super::scalar::hsum8(&l);
        }
    }
}

/// [`super::scalar::weighted_sum_gemv`].
///
/// # Safety
/// NEON; `values` holds `p.len()` rows of `out.len()`, `acc` `32 * out.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn weighted_sum_gemv(
    p: &[f32],
    values: &[u16],
    acc: &mut [f32],
    out: &mut [f32],
) {
    use super::scalar::GEMV_SLOTS;
    let hd = out.len();
    let acc = &mut acc[..GEMV_SLOTS * hd];
    acc.fill(0.0);
    for (j, (&p, v)) in p.iter().zip(values.chunks_exact(hd)).enumerate() {
        let s = j % GEMV_SLOTS;
        // SAFETY: NEON; the slot row holds `hd` values.
        unsafe { fma_row(&mut acc[s * hd..(s + 1) * hd], p, v) };
    }
    // SAFETY: NEON; 32 rows of `hd` in `acc`.
    unsafe {
        let mut d = 0;
        while d + 4 <= hd {
            let mut r = [vdupq_n_f32(0.0); GEMV_SLOTS];
            for (s, r) in r.iter_mut().enumerate() {
                *r = vld1q_f32(acc.as_ptr().add(s * hd + d));
            }
            let mut rl = [vdupq_n_f32(0.0); 8];
            for (l, v) in rl.iter_mut().enumerate() {
                *v = vaddq_f32(vaddq_f32(r[l], r[16 + l]), vaddq_f32(r[8 + l], r[24 + l]));
            }
            let t = [
                vaddq_f32(rl[0], rl[4]),
                vaddq_f32(rl[1], rl[5]),
                vaddq_f32(rl[2], rl[6]),
                vaddq_f32(rl[3], rl[7]),
            ];
            let o = vaddq_f32(vaddq_f32(t[0], t[1]), vaddq_f32(t[2], t[3]));
            vst1q_f32(out.as_mut_ptr().add(d), o);
            d += 4;
        }
        for d in d..hd {
            let mut l = [0.0f32; GEMV_SLOTS];
            for (i, l) in l.iter_mut().enumerate() {
                *l = acc[i * hd + d];
            }
            out[d] = super::scalar::reduce_gemv(&l);
        }
    }
}
