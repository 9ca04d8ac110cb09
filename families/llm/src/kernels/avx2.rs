//! x86-64 kernels: AVX2 integer dot products over the ggml blocks (`vpmaddubsw` of an
//! unsigned and a signed byte vector, `vpmaddwd` to 32-bit sums, one FMA per block with the
//! product of the scales), F16C for f16 weights and the f16 key/value cache.
//!
//! Every function here needs AVX2, FMA and F16C; [`super::Isa::available`] checks them at run
//! time before [`super::Isa::Avx2`] is ever chosen. [`super::Isa::AvxVnni`] adds AVX-VNNI's
//! `vpdpbusd` (the byte dot product of `vpmaddubsw` + `vpmaddwd` in one instruction) to the
//! Q8_0, Q4_0 and Q4_1 kernels, as ggml does when built with it.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Acts, Matrix, OutMatrix, RowKernel, tiled};
use crate::quant::{BlockQ8, BlockQ8K, QK, TensorType, round_f16};

/// Horizontal sum of 8 f32 lanes.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: AVX is implied by the caller's AVX2 contract.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// Horizontal sum of 8 i32 lanes.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: AVX2 by the caller's contract.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// The f16 at `p` (little-endian bits) as f32, in all 8 lanes.
///
/// A vector on purpose: converting one f16 to a scalar f32 compiles to `vpinsrw` into
/// whatever register LLVM picks (the upper lanes are "don't care"), which makes every
/// conversion wait for the last writer of that register, in a dot-product loop the previous
/// block's scale: one 15-cycle chain per block that held the generation kernels at a third of
/// the memory bandwidth. `vpbroadcastw` from memory writes the whole register.
#[inline(always)]
unsafe fn f16_splat(p: *const u8) -> __m256 {
    // SAFETY: `p` points at 2 readable bytes (caller); AVX2 and F16C by contract.
    unsafe { _mm256_cvtph_ps(_mm_set1_epi16(p.cast::<i16>().read_unaligned())) }
}

/// The two f16 values at `p` (little-endian bits, e.g. a Q4_1 block's scale and minimum) as
/// f32 lanes `[a, b, a, b, ...]`: one broadcast load, one conversion.
#[inline(always)]
unsafe fn f16_pair_splat(p: *const u8) -> __m256 {
    // SAFETY: `p` points at 4 readable bytes (caller); AVX2 and F16C by contract.
    unsafe { _mm256_cvtph_ps(_mm_set1_epi32(p.cast::<i32>().read_unaligned())) }
}

/// How far ahead of the block being multiplied the weight stream is prefetched, in bytes.
/// Generation reads every weight once per token from memory; the hardware prefetcher stops
/// at each 4 KiB page, and without this the loads of the weights were the hottest
/// instructions of the Q4_1 and Q8_0 loops (SmolLM2 Q4_1, tg128 at 1 thread on the 2-core
/// development VM: 102-121 tokens/s without, 138-146 with).
const PREFETCH_BYTES: usize = 1024;

/// Prefetches the weights [`PREFETCH_BYTES`] after `p` into L1 (past the end of the matrix
/// it is a no-op: a prefetch never faults).
#[inline(always)]
unsafe fn prefetch_ahead(p: *const u8) {
    // SAFETY: a prefetch reads nothing architecturally; `wrapping_add` keeps the address
    // computation defined past the end of the allocation. SSE by the AVX2 contract.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_BYTES).cast()) }
}

/// The 32 nibbles of the 16 bytes at `p` as bytes 0..=15: lanes 0-15 the low nibbles, lanes
/// 16-31 the high nibbles (the order of weights in a Q4_0/Q4_1 block).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: `p` points at 16 readable bytes (caller); AVX2 by contract.
    unsafe {
        let q = _mm_loadu_si128(p.cast());
        let m = _mm_set1_epi8(0x0F);
        _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16::<4>(q), m),
            _mm_and_si128(q, m),
        )
    }
}

/// Sums of 4 adjacent products of unsigned bytes `u` and signed bytes `s`, as 8 x i32:
/// `vpdpbusd` (one instruction) with `VNNI`, else `vpmaddubsw` + `vpmaddwd`. The sums are
/// exact either way, so both give the same result.
#[inline(always)]
unsafe fn dot_u8_i8<const VNNI: bool>(u: __m256i, s: __m256i) -> __m256i {
    // SAFETY: AVX2 by contract, and AVX-VNNI with `VNNI` (only [`matmul_vnni`] instantiates
    // it). No 16-bit saturation in `vpmaddubsw`: callers keep |u * s| * 2 < 32768.
    unsafe {
        if VNNI {
            _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
        } else {
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
        }
    }
}

#[inline(always)]
unsafe fn load_qs(a: &BlockQ8) -> __m256i {
    // SAFETY: `qs` is 32 bytes.
    unsafe { _mm256_loadu_si256(a.qs.as_ptr().cast()) }
}

/// A [`BlockQ8`]'s scale and sum as lanes `[d, s, d, s, ...]` (one 8-byte broadcast).
#[inline(always)]
unsafe fn load_ds(a: &BlockQ8) -> __m256 {
    // SAFETY: `d` and `s` are the first 8 bytes of the `repr(C)` block; AVX by contract.
    unsafe { _mm256_castpd_ps(_mm256_broadcast_sd(&*(a as *const BlockQ8).cast::<f64>())) }
}

pub(crate) struct Q4_0K<const VNNI: bool>;
impl<const VNNI: bool> RowKernel for Q4_0K<VNNI> {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        // SAFETY: AVX2 by contract; `w` holds `acts[i].len()` blocks of 18 bytes.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            for b in 0..acts[0].len() {
                let p = w.as_ptr().add(18 * b);
                prefetch_ahead(p);
                let d = f16_splat(p);
                let x = _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8));
                let ax = _mm256_sign_epi8(x, x);
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let sumi = dot_u8_i8::<VNNI>(ax, _mm256_sign_epi8(load_qs(a), x));
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(a.d));
                    acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sumi), acc[i]);
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = hsum(acc[i]);
            }
            out
        }
    }
}

pub(crate) struct Q4_1K<const VNNI: bool>;
impl<const VNNI: bool> RowKernel for Q4_1K<VNNI> {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        // SAFETY: AVX2 by contract; `w` holds `acts[i].len()` blocks of 20 bytes.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            // Odd lanes: the sum of the block minimums times the activation sums.
            let mut summ = [_mm256_setzero_ps(); N];
            for b in 0..acts[0].len() {
                let p = w.as_ptr().add(20 * b);
                prefetch_ahead(p);
                // Lanes [d, m, d, m, ...]: the scale and minimum in one conversion.
                let dm = f16_pair_splat(p);
                let q = nibbles(p.add(4));
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let sumi = dot_u8_i8::<VNNI>(q, load_qs(a));
                    // [d * a.d, m * a.s, ...]
                    let ds = load_ds(a);
                    let scale = _mm256_moveldup_ps(_mm256_mul_ps(dm, ds));
                    acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sumi), acc[i]);
                    // Odd lanes: m * a.s + summ, fused (ggml's scalar `summs += m * s`,
                    // which GCC contracts to one `vfmadd231ss` with -mfma).
                    summ[i] = _mm256_fmadd_ps(dm, ds, summ[i]);
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                let odd = _mm_movehdup_ps(_mm256_castps256_ps128(summ[i]));
                out[i] = _mm_cvtss_f32(odd) + hsum(acc[i]);
            }
            out
        }
    }
}

pub(crate) struct Q8_0K<const VNNI: bool>;
impl<const VNNI: bool> RowKernel for Q8_0K<VNNI> {
    type Act = BlockQ8;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8]; N]) -> [f32; N] {
        // SAFETY: AVX2 by contract; `w` holds `acts[i].len()` blocks of 34 bytes.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            for b in 0..acts[0].len() {
                let p = w.as_ptr().add(34 * b);
                prefetch_ahead(p);
                let d = f16_splat(p);
                let x = _mm256_loadu_si256(p.add(2).cast());
                let ax = _mm256_sign_epi8(x, x);
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let sumi = dot_u8_i8::<VNNI>(ax, _mm256_sign_epi8(load_qs(a), x));
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(a.d));
                    acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sumi), acc[i]);
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = hsum(acc[i]);
            }
            out
        }
    }
}

pub(crate) struct Q4KK;
impl RowKernel for Q4KK {
    type Act = BlockQ8K;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2 by contract; `w` holds `acts[i].len()` super-blocks of 144 bytes.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            let mut accm = [0.0f32; N];
            let m4 = _mm256_set1_epi8(0x0F);
            for b in 0..acts[0].len() {
                let p = w.as_ptr().add(144 * b);
                let (d, dmin) = (f16_splat(p), f16_splat(p.add(2)));
                let scales = std::slice::from_raw_parts(p.add(4), 12);
                let sm: [(u8, u8); 8] =
                    std::array::from_fn(|j| crate::quant::q4k_scale_min(scales, j));
                let mut sumi = [_mm256_setzero_si256(); N];
                for j in 0..4 {
                    let q = _mm256_loadu_si256(p.add(16 + 32 * j).cast());
                    let lo = _mm256_and_si256(q, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                    let s0 = _mm256_set1_epi16(i16::from(sm[2 * j].0));
                    let s1 = _mm256_set1_epi16(i16::from(sm[2 * j + 1].0));
                    for i in 0..N {
                        let y = acts[i].get_unchecked(b).qs.as_ptr().add(64 * j);
                        let p0 = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(lo, _mm256_loadu_si256(y.cast())),
                            s0,
                        );
                        let p1 = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(hi, _mm256_loadu_si256(y.add(32).cast())),
                            s1,
                        );
                        sumi[i] = _mm256_add_epi32(sumi[i], _mm256_add_epi32(p0, p1));
                    }
                }
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let scale = _mm256_mul_ps(_mm256_set1_ps(a.d), d);
                    acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sumi[i]), acc[i]);
                    let summ: i32 = (0..8)
                        .map(|j| {
                            i32::from(sm[j].1)
                                * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1]))
                        })
                        .sum();
                    accm[i] +=
                        _mm256_cvtss_f32(_mm256_mul_ps(_mm256_set1_ps(a.d), dmin)) * summ as f32;
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = hsum(acc[i]) - accm[i];
            }
            out
        }
    }
}

/// Bits `SHIFT..SHIFT + 2` of each byte of `hb`, moved to bits 4..6 (the high part of a
/// Q6_K value).
#[inline(always)]
unsafe fn q6_high<const SHIFT: i32>(hb: __m256i, m3: __m256i) -> __m256i {
    // SAFETY: AVX2 by contract. The 16-bit shifts cannot carry across bytes: the masked
    // value is at most 3 before moving up by 4.
    unsafe { _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<SHIFT>(hb), m3)) }
}

pub(crate) struct Q6KK;
impl RowKernel for Q6KK {
    type Act = BlockQ8K;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2 by contract; `w` holds `acts[i].len()` super-blocks of 210 bytes.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            let mut acc_off = [0.0f32; N];
            let m4 = _mm256_set1_epi8(0x0F);
            let m3 = _mm256_set1_epi8(3);
            for b in 0..acts[0].len() {
                let p = w.as_ptr().add(210 * b);
                let d = f16_splat(p.add(208));
                let sc = std::slice::from_raw_parts(p.add(192).cast::<i8>(), 16);
                let mut sumi = [_mm256_setzero_si256(); N];
                for h in 0..2 {
                    let l0 = _mm256_loadu_si256(p.add(64 * h).cast());
                    let l1 = _mm256_loadu_si256(p.add(64 * h + 32).cast());
                    let hb = _mm256_loadu_si256(p.add(128 + 32 * h).cast());
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(l0, m4), q6_high::<0>(hb, m3)),
                        _mm256_or_si256(_mm256_and_si256(l1, m4), q6_high::<2>(hb, m3)),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4),
                            q6_high::<4>(hb, m3),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                            q6_high::<6>(hb, m3),
                        ),
                    ];
                    for (k, &q) in q.iter().enumerate() {
                        let j = 8 * h + 2 * k;
                        let s = _mm256_set_m128i(
                            _mm_set1_epi16(i16::from(sc[j + 1])),
                            _mm_set1_epi16(i16::from(sc[j])),
                        );
                        for i in 0..N {
                            let y = acts[i].get_unchecked(b).qs.as_ptr().add(128 * h + 32 * k);
                            let prod = _mm256_madd_epi16(
                                _mm256_maddubs_epi16(q, _mm256_loadu_si256(y.cast())),
                                s,
                            );
                            sumi[i] = _mm256_add_epi32(sumi[i], prod);
                        }
                    }
                }
                for i in 0..N {
                    let a = acts[i].get_unchecked(b);
                    let scale = _mm256_mul_ps(_mm256_set1_ps(a.d), d);
                    acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sumi[i]), acc[i]);
                    let off: i32 = (0..16)
                        .map(|j| i32::from(sc[j]) * i32::from(a.bsums[j]))
                        .sum();
                    acc_off[i] += _mm256_cvtss_f32(scale) * (32 * off) as f32;
                }
            }
            let mut out = [0.0f32; N];
            for i in 0..N {
                out[i] = hsum(acc[i]) - acc_off[i];
            }
            out
        }
    }
}

/// Float weights of 2 or 4 bytes against f32 activations, 8 columns at a time.
macro_rules! float_kernel {
    ($name:ident, $bytes:expr, $load:ident, $scalar:ident) => {
        pub(crate) struct $name;
        impl RowKernel for $name {
            type Act = f32;
            #[inline(always)]
            unsafe fn dot<const N: usize>(w: &[u8], acts: [&[f32]; N]) -> [f32; N] {
                let cols = acts[0].len();
                // SAFETY: AVX2/F16C by contract; `w` holds `cols` elements of `$bytes` bytes.
                unsafe {
                    let mut acc = [_mm256_setzero_ps(); N];
                    let mut c = 0;
                    while c + 8 <= cols {
                        let wv: __m256 = $load(w.as_ptr().add($bytes * c));
                        for i in 0..N {
                            acc[i] = _mm256_fmadd_ps(
                                wv,
                                _mm256_loadu_ps(acts[i].as_ptr().add(c)),
                                acc[i],
                            );
                        }
                        c += 8;
                    }
                    let mut out = [0.0f32; N];
                    for i in 0..N {
                        out[i] = hsum(acc[i]);
                    }
                    for c in c..cols {
                        let wv: f32 = $scalar(w, c);
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
unsafe fn load_f32(p: *const u8) -> __m256 {
    // SAFETY: 32 readable bytes at `p` (caller); AVX by contract.
    unsafe { _mm256_loadu_ps(p.cast()) }
}
#[inline(always)]
unsafe fn load_f16(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes at `p` (caller); F16C by contract.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}
#[inline(always)]
unsafe fn load_bf16(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes at `p` (caller); AVX2 by contract. bf16 is the top half of
    // an f32.
    unsafe {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
            _mm_loadu_si128(p.cast()),
        )))
    }
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

/// The AVX2 matrix product (see [`super::matmul`]).
///
/// # Safety
/// AVX2, FMA and F16C are available; shapes checked by `super::matmul`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn matmul(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY: this function's features; the caller's shape checks.
    unsafe { matmul_with::<false>(w, rows, acts, tokens, out) }
}

/// [`matmul`] with the AVX-VNNI byte dot product (`vpdpbusd`) in the Q8_0, Q4_0 and Q4_1
/// kernels; the same results.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI are available; shapes checked by `super::matmul`.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn matmul_vnni(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY: this function's features; the caller's shape checks.
    unsafe { matmul_with::<true>(w, rows, acts, tokens, out) }
}

/// # Safety
/// As [`matmul`], plus AVX-VNNI with `VNNI`; only called from the two functions above, into
/// which it is inlined with their features.
#[inline(always)]
unsafe fn matmul_with<const VNNI: bool>(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    // SAFETY (every call): the caller's features and shape checks.
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
                tiled::<Q8_0K<VNNI>>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4_0, Acts::Q8 { data, per_row }) => {
                tiled::<Q4_0K<VNNI>>(w, rows, data, per_row, tokens, out)
            }
            (TensorType::Q4_1, Acts::Q8 { data, per_row }) => {
                tiled::<Q4_1K<VNNI>>(w, rows, data, per_row, tokens, out)
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

/// Quantises one row to [`BlockQ8`], bit-identical to [`crate::quant::quantize_block_q8`]
/// (same `127 / max` multiplier, same round-to-nearest-even).
///
/// # Safety
/// AVX2 available; `x.len() == out.len() * 32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    // SAFETY: AVX2 by this function's features; 32 floats per block in bounds.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        for (b, blk) in out.iter_mut().enumerate() {
            let p = x.as_ptr().add(QK * b);
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let mut m = _mm256_andnot_ps(sign, v[0]);
            for v in &v[1..] {
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *v));
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            let mut r = [_mm256_setzero_si256(); 4];
            for (r, v) in r.iter_mut().zip(v) {
                let scaled = _mm256_mul_ps(v, id);
                *r = _mm256_cvtps_epi32(_mm256_round_ps::<
                    { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                >(scaled));
            }
            let sum = hsum_i32(_mm256_add_epi32(
                _mm256_add_epi32(r[0], r[1]),
                _mm256_add_epi32(r[2], r[3]),
            ));
            let p16a = _mm256_packs_epi32(r[0], r[1]);
            let p16b = _mm256_packs_epi32(r[2], r[3]);
            let p8 = _mm256_packs_epi16(p16a, p16b);
            let p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(blk.qs.as_mut_ptr().cast(), p8);
            blk.d = round_f16(d);
            blk.s = round_f16(d * sum as f32);
        }
    }
}

/// [`super::scalar::rope_fused`] compiled with FMA (one `vfmadd` per `mul_add`, not a call).
///
/// # Safety
/// FMA available.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rope_fused(x: &mut [f32], angles: &[f32]) {
    super::scalar::rope_fused(x, angles)
}

/// [`super::scalar::exp`] on 8 lanes (the same operations).
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    // SAFETY: AVX2 and FMA by the caller's contract; register-only.
    unsafe {
        let shift = _mm256_set1_ps(f32::from_bits(0x4b40_0000));
        let z = _mm256_fmadd_ps(x, _mm256_set1_ps(f32::from_bits(0x3fb8_aa3b)), shift);
        let n = _mm256_sub_ps(z, shift);
        let b = _mm256_fnmadd_ps(
            n,
            _mm256_set1_ps(f32::from_bits(0x35bf_be8e)),
            _mm256_fnmadd_ps(n, _mm256_set1_ps(f32::from_bits(0x3f31_7200)), x),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f80_0000)));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f32::from_bits(0x3c07_2010)),
                    b,
                    _mm256_set1_ps(f32::from_bits(0x3d2b_9f17)),
                ),
                u,
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f32::from_bits(0x3e2a_af33)),
                    b,
                    _mm256_set1_ps(f32::from_bits(0x3eff_fedb)),
                ),
            ),
            u,
            _mm256_mul_ps(_mm256_set1_ps(f32::from_bits(0x3f7f_fff6)), b),
        );
        let normal = _mm256_fmadd_ps(j, k, k);
        if _mm256_movemask_ps(c) == 0 {
            return normal;
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        let scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
        _mm256_blendv_ps(
            _mm256_blendv_ps(normal, scaled, c),
            _mm256_mul_ps(s1, s1),
            d,
        )
    }
}

/// [`super::scalar::softmax_exp`].
///
/// # Safety
/// AVX2/FMA available.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax_exp(s: &mut [f32], max: f32) -> f64 {
    let n = s.len();
    let mut sum = 0.0f64;
    // SAFETY: features of this function; indices below `n`.
    unsafe {
        let m = _mm256_set1_ps(max);
        let mut c = 0;
        while c + 8 <= n {
            let p = s.as_mut_ptr().add(c);
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p), m));
            _mm256_storeu_ps(p, e);
            sum += f64::from(hsum(e));
            c += 8;
        }
        if c < n {
            let mut l = [0.0f32; 8];
            l[..n - c].copy_from_slice(&s[c..]);
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(l.as_ptr()), m));
            // Lanes past the end hold exp(0 - max), not zeros: sum the present ones only.
            _mm256_storeu_ps(l.as_mut_ptr(), e);
            l[n - c..].fill(0.0);
            s[c..].copy_from_slice(&l[..n - c]);
            sum += f64::from(super::scalar::hsum8(&l));
        }
    }
    sum
}

/// [`super::scalar::silu_mul`].
///
/// # Safety
/// AVX2/FMA available; `u` at least as long as `g`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(g: &mut [f32], u: &[f32]) {
    let n = g.len();
    // SAFETY: features of this function; indices below `n` for both slices.
    unsafe {
        let one = _mm256_set1_ps(1.0);
        let mut c = 0;
        while c + 8 <= n {
            let p = g.as_mut_ptr().add(c);
            let x = _mm256_loadu_ps(p);
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
            let y = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(p, _mm256_mul_ps(y, _mm256_loadu_ps(u.as_ptr().add(c))));
            c += 8;
        }
        super::scalar::silu_mul(&mut g[c..], &u[c..n]);
    }
}

#[inline(always)]
unsafe fn load_f16x8(p: *const u16) -> __m256 {
    // SAFETY: 8 readable values at `p` (caller); F16C by contract.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

/// [`super::scalar::dot_f16_gemm`].
///
/// # Safety
/// AVX2/FMA/F16C available; equal lengths, a multiple of 8.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16_gemm(q: &[f32], k: &[u16]) -> f32 {
    // SAFETY: features of this function; indices below the common length.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for c in (0..q.len() / 8 * 8).step_by(8) {
            acc = _mm256_fmadd_ps(
                load_f16x8(k.as_ptr().add(c)),
                _mm256_loadu_ps(q.as_ptr().add(c)),
                acc,
            );
        }
        hsum(acc)
    }
}

/// [`super::scalar::reduce_gemv`] of 4 vectors.
#[inline(always)]
unsafe fn reduce_gemv(s: [__m256; 4]) -> f32 {
    // SAFETY: AVX by the caller's contract.
    unsafe {
        let r = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps::<1>(r));
        let h = _mm_hadd_ps(t, t);
        _mm_cvtss_f32(_mm_hadd_ps(h, h))
    }
}

/// [`super::scalar::dot_f16_gemv`].
///
/// # Safety
/// AVX2/FMA/F16C available; equal lengths.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16_gemv(q: &[f32], k: &[u16]) -> f32 {
    let n = q.len();
    let whole = n / 32 * 32;
    // SAFETY: features of this function; indices below `n`.
    unsafe {
        let mut s = [_mm256_setzero_ps(); 4];
        for c in (0..whole).step_by(32) {
            for (a, s) in s.iter_mut().enumerate() {
                *s = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.as_ptr().add(c + 8 * a)),
                    load_f16x8(k.as_ptr().add(c + 8 * a)),
                    *s,
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

/// `acc[slot] += p * v` for the 8-column steps of one value row (fused), then the tail.
#[inline(always)]
unsafe fn fma_row(acc: &mut [f32], p: f32, v: &[u16]) {
    let hd = v.len();
    // SAFETY: AVX2/FMA/F16C by the caller's contract; `acc` holds `hd` values.
    unsafe {
        let pv = _mm256_set1_ps(p);
        let mut d = 0;
        while d + 8 <= hd {
            let a = acc.as_mut_ptr().add(d);
            _mm256_storeu_ps(
                a,
                _mm256_fmadd_ps(load_f16x8(v.as_ptr().add(d)), pv, _mm256_loadu_ps(a)),
            );
            d += 8;
        }
        for d in d..hd {
            acc[d] = half::f16::from_bits(v[d]).to_f32().mul_add(p, acc[d]);
        }
    }
}

/// [`super::scalar::weighted_sum_gemm`].
///
/// # Safety
/// AVX2/FMA/F16C available; `values` holds `p.len()` rows of `out.len()`, `acc` `8 * out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
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
        // SAFETY: features of this function; the slot row holds `hd` values.
        unsafe { fma_row(&mut acc[(j % 8) * hd..(j % 8 + 1) * hd], p, v) };
    }
    // SAFETY: features of this function; 8 rows of `hd` in `acc`.
    unsafe {
        let mut d = 0;
        while d + 8 <= hd {
            let mut r = [_mm256_setzero_ps(); 8];
            for (l, r) in r.iter_mut().enumerate() {
                *r = _mm256_loadu_ps(acc.as_ptr().add(l * hd + d));
            }
            // hsum8 lane by lane: t_i = l_i + l_{i+4}, (t_0 + t_2) + (t_1 + t_3).
            let t = [
                _mm256_add_ps(r[0], r[4]),
                _mm256_add_ps(r[1], r[5]),
                _mm256_add_ps(r[2], r[6]),
                _mm256_add_ps(r[3], r[7]),
            ];
            let o = _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
            _mm256_storeu_ps(out.as_mut_ptr().add(d), o);
            d += 8;
        }
        for d in d..hd {
            out[d] = super::scalar::hsum8(&std::array::from_fn(|l| acc[l * hd + d]));
        }
    }
}

/// [`super::scalar::weighted_sum_gemv`].
///
/// # Safety
/// AVX2/FMA/F16C available; `values` holds `p.len()` rows of `out.len()`, `acc` `32 * out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
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
        // SAFETY: features of this function; the slot row holds `hd` values.
        unsafe { fma_row(&mut acc[s * hd..(s + 1) * hd], p, v) };
    }
    // SAFETY: features of this function; 32 rows of `hd` in `acc`.
    unsafe {
        let mut d = 0;
        while d + 8 <= hd {
            let mut r = [_mm256_setzero_ps(); GEMV_SLOTS];
            for (s, r) in r.iter_mut().enumerate() {
                *r = _mm256_loadu_ps(acc.as_ptr().add(s * hd + d));
            }
            // reduce_gemv lane by lane.
            let mut rl = [_mm256_setzero_ps(); 8];
            for (l, v) in rl.iter_mut().enumerate() {
                *v = _mm256_add_ps(
                    _mm256_add_ps(r[l], r[16 + l]),
                    _mm256_add_ps(r[8 + l], r[24 + l]),
                );
            }
            let t = [
                _mm256_add_ps(rl[0], rl[4]),
                _mm256_add_ps(rl[1], rl[5]),
                _mm256_add_ps(rl[2], rl[6]),
                _mm256_add_ps(rl[3], rl[7]),
            ];
            let o = _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]));
            _mm256_storeu_ps(out.as_mut_ptr().add(d), o);
            d += 8;
        }
        for d in d..hd {
            out[d] = super::scalar::reduce_gemv(&std::array::from_fn(|s| acc[s * hd + d]));
        }
    }
}
