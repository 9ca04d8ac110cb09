//! Tensor element types of the checkpoints tether reads, and their block geometry.
//!
//! Source of the block layouts: ggml's `ggml-common.h` (`block_q4_0`, `block_q4_1`,
//! `block_q8_0`, `block_q4_K`, `block_q6_K`) and the GGUF specification
//! (`docs/gguf.md` in ggml / llama.cpp: the `ggml_type` numbering).

/// The element type of one stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// 32 weights per block: one f16 scale `d`, 32 signed 8-bit values; `w = d * q`.
    Q8_0,
    /// 32 weights per block: one f16 scale `d`, 32 4-bit values; `w = d * (q - 8)`.
    Q4_0,
    /// 32 weights per block: f16 scale `d` and minimum `m`, 32 4-bit values; `w = d * q + m`.
    Q4_1,
    /// 256 weights per super-block: 8 sub-blocks of 32 with 6-bit scales and minimums.
    Q4K,
    /// 256 weights per super-block: 16 sub-blocks of 16 with 8-bit scales, 6-bit values.
    Q6K,
}

impl TensorType {
    /// Every type, in ggml's numbering order.
    pub const ALL: [TensorType; 8] = [
        TensorType::F32,
        TensorType::F16,
        TensorType::Q4_0,
        TensorType::Q4_1,
        TensorType::Q8_0,
        TensorType::Q4K,
        TensorType::Q6K,
        TensorType::Bf16,
    ];

    /// The `ggml_type` value a GGUF file stores for this type.
    pub const fn ggml_id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q8_0 => 8,
            TensorType::Q4K => 12,
            TensorType::Q6K => 14,
            TensorType::Bf16 => 30,
        }
    }

    /// The type a GGUF `ggml_type` value names, if tether reads it.
    pub fn from_ggml_id(id: u32) -> Option<TensorType> {
        Self::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// ggml's name for the type (`q4_1`, `f16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            TensorType::F32 => "f32",
            TensorType::F16 => "f16",
            TensorType::Bf16 => "bf16",
            TensorType::Q8_0 => "q8_0",
            TensorType::Q4_0 => "q4_0",
            TensorType::Q4_1 => "q4_1",
            TensorType::Q4K => "q4_K",
            TensorType::Q6K => "q6_K",
        }
    }

    /// Elements per block (1 for the plain float types).
    pub const fn block_elems(self) -> usize {
        match self {
            TensorType::F32 | TensorType::F16 | TensorType::Bf16 => 1,
            TensorType::Q8_0 | TensorType::Q4_0 | TensorType::Q4_1 => 32,
            TensorType::Q4K | TensorType::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            TensorType::F32 => 4,
            TensorType::F16 | TensorType::Bf16 => 2,
            TensorType::Q8_0 => 2 + 32,
            TensorType::Q4_0 => 2 + 16,
            TensorType::Q4_1 => 2 + 2 + 16,
            TensorType::Q4K => 2 + 2 + 12 + 128,
            TensorType::Q6K => 128 + 64 + 16 + 2,
        }
    }

    /// Bytes of a row of `elems` elements, or `None` when `elems` is not a whole number of
    /// blocks.
    pub const fn row_bytes(self, elems: usize) -> Option<usize> {
        let b = self.block_elems();
        if !elems.is_multiple_of(b) {
            return None;
        }
        Some(elems / b * self.block_bytes())
    }
}

/// Weights per block of the 32-element formats (`QK4_0`, `QK4_1`, `QK8_0` in ggml).
pub const QK: usize = 32;
/// Weights per super-block of the k-quants (`QK_K` in ggml).
pub const QK_K: usize = 256;

/// A row of stored weights whose length does not fit its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The element count is not a whole number of blocks.
    #[error("{ty:?} row of {elems} elements is not a whole number of {block}-element blocks")]
    PartialBlock {
        /// The element type.
        ty: TensorType,
        /// Elements asked for.
        elems: usize,
        /// Elements per block of the type.
        block: usize,
    },
    /// The byte slice does not hold exactly the row.
    #[error("{ty:?} row of {elems} elements needs {expected} bytes, got {seen}")]
    ByteLength {
        /// The element type.
        ty: TensorType,
        /// Elements asked for.
        elems: usize,
        /// Bytes the row needs.
        expected: usize,
        /// Bytes given.
        seen: usize,
    },
}

/// Checks that `bytes` holds exactly one row of `elems` elements of `ty`.
///
/// # Errors
/// [`QuantError::PartialBlock`] or [`QuantError::ByteLength`].
pub fn check_row(ty: TensorType, bytes: &[u8], elems: usize) -> Result<(), QuantError> {
    let expected = ty.row_bytes(elems).ok_or(QuantError::PartialBlock {
        ty,
        elems,
        block: ty.block_elems(),
    })?;
    if bytes.len() != expected {
        return Err(QuantError::ByteLength {
            ty,
            elems,
            expected,
            seen: bytes.len(),
        });
    }
    Ok(())
}

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline(always)]
fn bf16_at(b: &[u8], at: usize) -> f32 {
    half::bf16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) of a Q4_K super-block, from its 12
/// packed bytes: sub-blocks 0-3 keep the low 6 bits of bytes `j` (scale) and `j + 4`
/// (minimum); sub-blocks 4-7 take their low 4 bits from byte `j + 4` and their high 2 bits
/// from the top bits of bytes `j - 4` (scale) and `j` (minimum). ggml `get_scale_min_k4`.
#[inline(always)]
pub(crate) fn q4k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Dequantises one row of `dst.len()` elements stored as `ty` in `src`: the scalar reference
/// every SIMD path is tested against.
///
/// Layouts (ggml `ggml-common.h`), all little-endian:
/// - Q8_0 (34 bytes / 32): `d: f16, q: [i8; 32]`; `w[i] = d * q[i]`.
/// - Q4_0 (18 / 32): `d: f16, qs: [u8; 16]`; `w[i] = d * (lo(qs[i]) - 8)`,
///   `w[i + 16] = d * (hi(qs[i]) - 8)` for `i < 16`.
/// - Q4_1 (20 / 32): `d: f16, m: f16, qs: [u8; 16]`; nibbles as Q4_0, `w = d * q + m`.
/// - Q4_K (144 / 256): `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]`; 8 sub-blocks of
///   32 with 6-bit scale `sc` and minimum `mn` (`q4k_scale_min`); each 32 bytes of `qs` hold
///   two sub-blocks (low nibbles, then high nibbles); `w = d * sc * q - dmin * mn`.
/// - Q6_K (210 / 256): `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`; 6-bit values
///   (low 4 bits from `ql`, high 2 from `qh`) minus 32, 16 sub-blocks of 16 with 8-bit signed
///   scales; `w = d * scale * (q - 32)`.
///
/// # Errors
/// [`QuantError`] when `src` is not exactly one row of `dst.len()` elements.
pub fn dequantize_row(ty: TensorType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_row(ty, src, dst.len())?;
    match ty {
        TensorType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        TensorType::F16 => {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = f16_at(src, 2 * i);
            }
        }
        TensorType::Bf16 => {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = bf16_at(src, 2 * i);
            }
        }
        TensorType::Q8_0 => {
            for (b, y) in src.chunks_exact(34).zip(dst.chunks_exact_mut(QK)) {
                let d = f16_at(b, 0);
                for (y, &q) in y.iter_mut().zip(&b[2..]) {
                    *y = d * f32::from(q as i8);
                }
            }
        }
        TensorType::Q4_0 => {
            for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
                let d = f16_at(b, 0);
                for (i, &q) in b[2..].iter().enumerate() {
                    y[i] = d * (f32::from(q & 0x0F) - 8.0);
                    y[i + 16] = d * (f32::from(q >> 4) - 8.0);
                }
            }
        }
        TensorType::Q4_1 => {
            for (b, y) in src.chunks_exact(20).zip(dst.chunks_exact_mut(QK)) {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                for (i, &q) in b[4..].iter().enumerate() {
                    y[i] = d * f32::from(q & 0x0F) + m;
                    y[i + 16] = d * f32::from(q >> 4) + m;
                }
            }
        }
        TensorType::Q4K => {
            for (b, y) in src.chunks_exact(144).zip(dst.chunks_exact_mut(QK_K)) {
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                let scales = &b[4..16];
                for (chunk, (qs, y)) in b[16..]
                    .chunks_exact(32)
                    .zip(y.chunks_exact_mut(64))
                    .enumerate()
                {
                    let (sc0, m0) = q4k_scale_min(scales, 2 * chunk);
                    let (sc1, m1) = q4k_scale_min(scales, 2 * chunk + 1);
                    let (d0, mn0) = (d * f32::from(sc0), dmin * f32::from(m0));
                    let (d1, mn1) = (d * f32::from(sc1), dmin * f32::from(m1));
                    for (l, &q) in qs.iter().enumerate() {
                        y[l] = d0 * f32::from(q & 0x0F) - mn0;
                        y[l + 32] = d1 * f32::from(q >> 4) - mn1;
                    }
                }
            }
        }
        TensorType::Q6K => {
            for (b, y) in src.chunks_exact(210).zip(dst.chunks_exact_mut(QK_K)) {
                let d = f16_at(b, 208);
                for half in 0..2 {
                    let ql = &b[64 * half..64 * half + 64];
                    let qh = &b[128 + 32 * half..128 + 32 * half + 32];
                    let sc = &b[192 + 8 * half..192 + 8 * half + 8];
                    let y = &mut y[128 * half..128 * half + 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q = q6k_quad(ql, qh, l);
                        for (k, &q) in q.iter().enumerate() {
                            y[l + 32 * k] = d * f32::from(sc[is + 2 * k] as i8) * f32::from(q);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The four signed 6-bit values (minus 32) that byte `l` (0..32) of a 128-weight half of a
/// Q6_K super-block contributes at `l`, `l + 32`, `l + 64` and `l + 96`.
#[inline(always)]
pub(crate) fn q6k_quad(ql: &[u8], qh: &[u8], l: usize) -> [i8; 4] {
    let h = qh[l];
    [
        ((ql[l] & 0x0F) | ((h & 3) << 4)) as i8 - 32,
        ((ql[l + 32] & 0x0F) | (((h >> 2) & 3) << 4)) as i8 - 32,
        ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32,
        ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32,
    ]
}

/// An activation block of 32 values quantised to 8 bits for the integer dot products with
/// Q8_0, Q4_0 and Q4_1 weights (ggml's `block_q8_0` / `block_q8_1`, kept unpacked in f32).
///
/// `x[i] ~= d * qs[i]`; `d = f16(max|x| / 127)` (ggml stores `d` as f16: the rounding is
/// kept so the products equal llama.cpp's), `s = f16(d * sum(qs))` (ggml `block_q8_1.s`,
/// the term a Q4_1 weight's minimum multiplies).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8 {
    /// Scale.
    pub d: f32,
    /// `d * sum(qs)`, rounded through f16.
    pub s: f32,
    /// Quantised values in -127..=127.
    pub qs: [i8; QK],
}

/// An activation super-block of 256 values quantised to 8 bits for the k-quant dot
/// products (ggml's `block_q8_K`): `x[i] ~= d * qs[i]`, `d` in f32, and the sums of each
/// 16 consecutive `qs` (`bsums`), which the Q4_K minimums and Q6_K's offset of 32 multiply.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Quantised values in -127..=127.
    pub qs: [i8; QK_K],
    /// Sums of `qs[16 j .. 16 j + 16]`.
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

/// How the activations a weight type multiplies are prepared: once per matrix product, then
/// shared by every row of it (llama.cpp's `vec_dot_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActFormat {
    /// Kept in f32 (float weights: the products run in f32).
    F32,
    /// [`BlockQ8`] per 32 values (Q8_0, Q4_0, Q4_1 weights).
    Q8,
    /// [`BlockQ8K`] per 256 values (Q4_K, Q6_K weights).
    Q8K,
}

impl TensorType {
    /// The activation format the dot products of this weight type read.
    pub const fn act_format(self) -> ActFormat {
        match self {
            TensorType::F32 | TensorType::F16 | TensorType::Bf16 => ActFormat::F32,
            TensorType::Q8_0 | TensorType::Q4_0 | TensorType::Q4_1 => ActFormat::Q8,
            TensorType::Q4K | TensorType::Q6K => ActFormat::Q8K,
        }
    }
}

/// Rounds through f16 (the precision ggml stores `block_q8_*.d` in).
#[inline(always)]
pub(crate) fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Quantises one 32-value block to [`BlockQ8`] (scalar reference). Each value is multiplied
/// by `127 / max|x|` and rounded to nearest, ties to even, as llama.cpp's AVX2
/// `quantize_row_q8_1` does; every SIMD path here uses the same two operations, so all
/// paths give identical blocks.
pub fn quantize_block_q8(x: &[f32; QK]) -> BlockQ8 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut out = BlockQ8::default();
    let mut sum = 0i32;
    for (q, &v) in out.qs.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        *q = r as i8;
        sum += r;
    }
    out.d = round_f16(d);
    out.s = round_f16(d * sum as f32);
    out
}

/// Quantises a row (a whole number of 32-value blocks) to [`BlockQ8`] (scalar reference).
pub fn quantize_row_q8_ref(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    for (b, x) in out.iter_mut().zip(x.chunks_exact(QK)) {
        *b = quantize_block_q8(x.try_into().expect("chunks of QK"));
    }
}

/// Quantises one 256-value super-block to [`BlockQ8K`] (scalar reference, ggml
/// `quantize_row_q8_K_ref`): the value of largest magnitude maps to -127 (`iscale = -127 /
/// max`, keeping its sign), so every value lands in -127..=127.
pub fn quantize_block_q8k(x: &[f32; QK_K], out: &mut BlockQ8K) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        *out = BlockQ8K::default();
        return;
    }
    let iscale = -127.0 / max;
    for (q, &v) in out.qs.iter_mut().zip(x) {
        *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
    }
    for (s, q) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
        *s = q.iter().map(|&q| i16::from(q)).sum();
    }
    out.d = 1.0 / iscale;
}

/// Quantises a row (a whole number of 256-value super-blocks) to [`BlockQ8K`] (scalar
/// reference).
pub fn quantize_row_q8k_ref(x: &[f32], out: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (b, x) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
        quantize_block_q8k(x.try_into().expect("chunks of QK_K"), b);
    }
}

/// One row of activations in the format a weight type's dot product reads.
#[derive(Clone, Copy, Debug)]
pub enum ActRow<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// 32-value blocks.
    Q8(&'a [BlockQ8]),
    /// 256-value super-blocks.
    Q8K(&'a [BlockQ8K]),
}

/// The dot product of one stored weight row with one activation row: the scalar reference
/// of the kernels (integer sums per block, one f32 multiply-add per block, as ggml's
/// `ggml_vec_dot_*`).
///
/// # Panics
/// When the activation format is not `ty.act_format()` or the lengths disagree (callers
/// check shapes at load).
pub fn dot_ref(ty: TensorType, w: &[u8], act: ActRow<'_>) -> f32 {
    match (ty, act) {
        (TensorType::F32 | TensorType::F16 | TensorType::Bf16, ActRow::F32(x)) => {
            assert_eq!(w.len(), ty.row_bytes(x.len()).expect("float row"));
            let mut acc = 0.0f32;
            for (i, &xv) in x.iter().enumerate() {
                let wv = match ty {
                    TensorType::F32 => {
                        f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]])
                    }
                    TensorType::F16 => f16_at(w, 2 * i),
                    _ => bf16_at(w, 2 * i),
                };
                acc += wv * xv;
            }
            acc
        }
        (TensorType::Q8_0, ActRow::Q8(a)) => {
            assert_eq!(w.len(), a.len() * 34);
            let mut acc = 0.0f32;
            for (b, a) in w.chunks_exact(34).zip(a) {
                let sumi: i32 = b[2..]
                    .iter()
                    .zip(&a.qs)
                    .map(|(&q, &y)| i32::from(q as i8) * i32::from(y))
                    .sum();
                acc += f16_at(b, 0) * a.d * sumi as f32;
            }
            acc
        }
        (TensorType::Q4_0, ActRow::Q8(a)) => {
            assert_eq!(w.len(), a.len() * 18);
            let mut acc = 0.0f32;
            for (b, a) in w.chunks_exact(18).zip(a) {
                let mut sumi = 0i32;
                for (i, &q) in b[2..].iter().enumerate() {
                    sumi += (i32::from(q & 0x0F) - 8) * i32::from(a.qs[i]);
                    sumi += (i32::from(q >> 4) - 8) * i32::from(a.qs[i + 16]);
                }
                acc += f16_at(b, 0) * a.d * sumi as f32;
            }
            acc
        }
        (TensorType::Q4_1, ActRow::Q8(a)) => {
            assert_eq!(w.len(), a.len() * 20);
            let mut acc = 0.0f32;
            for (b, a) in w.chunks_exact(20).zip(a) {
                let mut sumi = 0i32;
                for (i, &q) in b[4..].iter().enumerate() {
                    sumi += i32::from(q & 0x0F) * i32::from(a.qs[i]);
                    sumi += i32::from(q >> 4) * i32::from(a.qs[i + 16]);
                }
                acc += f16_at(b, 0) * a.d * sumi as f32 + f16_at(b, 2) * a.s;
            }
            acc
        }
        (TensorType::Q4K, ActRow::Q8K(a)) => {
            assert_eq!(w.len(), a.len() * 144);
            let mut acc = 0.0f32;
            for (b, a) in w.chunks_exact(144).zip(a) {
                let scales = &b[4..16];
                let (mut sumi, mut summ) = (0i32, 0i32);
                for j in 0..8 {
                    let (sc, mn) = q4k_scale_min(scales, j);
                    let qs = &b[16 + 32 * (j / 2)..16 + 32 * (j / 2) + 32];
                    let y = &a.qs[32 * j..32 * j + 32];
                    let shift = 4 * (j % 2);
                    let s: i32 = qs
                        .iter()
                        .zip(y)
                        .map(|(&q, &y)| i32::from((q >> shift) & 0x0F) * i32::from(y))
                        .sum();
                    sumi += i32::from(sc) * s;
                    summ +=
                        i32::from(mn) * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1]));
                }
                acc += a.d * f16_at(b, 0) * sumi as f32 - a.d * f16_at(b, 2) * summ as f32;
            }
            acc
        }
        (TensorType::Q6K, ActRow::Q8K(a)) => {
            assert_eq!(w.len(), a.len() * 210);
            let mut acc = 0.0f32;
            for (b, a) in w.chunks_exact(210).zip(a) {
                let mut sums = [0i32; 16];
                for half in 0..2 {
                    let ql = &b[64 * half..64 * half + 64];
                    let qh = &b[128 + 32 * half..128 + 32 * half + 32];
                    for l in 0..32 {
                        for (k, &q) in q6k_quad(ql, qh, l).iter().enumerate() {
                            let idx = 128 * half + l + 32 * k;
                            sums[idx / 16] += i32::from(q) * i32::from(a.qs[idx]);
                        }
                    }
                }
                let sumi: i32 = sums
                    .iter()
                    .enumerate()
                    .map(|(j, &s)| i32::from(b[192 + j] as i8) * s)
                    .sum();
                acc += a.d * f16_at(b, 208) * sumi as f32;
            }
            acc
        }
        (ty, _) => panic!("activation format for {ty:?} must be {:?}", ty.act_format()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_ids_round_trip_and_sizes_match_ggml() {
        for t in TensorType::ALL {
            assert_eq!(TensorType::from_ggml_id(t.ggml_id()), Some(t));
        }
        assert_eq!(TensorType::from_ggml_id(6), None); // q5_0: not read
        // ggml-common.h static_asserts: sizeof(block_q4_K) == 144, sizeof(block_q6_K) == 210.
        assert_eq!(TensorType::Q4K.block_bytes(), 144);
        assert_eq!(TensorType::Q6K.block_bytes(), 210);
        assert_eq!(TensorType::Q4_1.row_bytes(576), Some(18 * 20));
        assert_eq!(TensorType::Q4K.row_bytes(576), None);
    }

    #[test]
    fn integer_dot_products_approximate_the_float_dot_within_the_activation_rounding() {
        use crate::kernels::tests::{ActBuf, Rng, random_row};
        let mut rng = Rng(3);
        for ty in TensorType::ALL {
            let cols = 512;
            for _ in 0..20 {
                let w = random_row(&mut rng, ty, cols);
                let x: Vec<f32> = (0..cols).map(|_| rng.uniform() * 2.0).collect();
                let mut wf = vec![0.0f32; cols];
                dequantize_row(ty, &w, &mut wf).expect("row");
                let exact: f64 = wf
                    .iter()
                    .zip(&x)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                let a = ActBuf::new(x.clone(), cols);
                let (got, bound) = match ty.act_format() {
                    ActFormat::F32 => (dot_ref(ty, &w, ActRow::F32(&x)), 1e-4),
                    ActFormat::Q8 => {
                        // |x - f16(d) q| <= d / 2 + 127 d 2^-11 per value; Q4_1's s is rounded
                        // through f16 too.
                        let mut bound = 1e-4;
                        for (i, b) in a.q8.iter().enumerate() {
                            let wsum: f64 = wf[i * QK..(i + 1) * QK]
                                .iter()
                                .map(|v| f64::from(v.abs()))
                                .sum();
                            bound += wsum * f64::from(b.d) * 0.57 + f64::from(b.s.abs()) * 1e-3;
                        }
                        (dot_ref(ty, &w, ActRow::Q8(&a.q8)), bound)
                    }
                    ActFormat::Q8K => {
                        let mut bound = 1e-4;
                        for (i, b) in a.q8k.iter().enumerate() {
                            let wsum: f64 = wf[i * QK_K..(i + 1) * QK_K]
                                .iter()
                                .map(|v| f64::from(v.abs()))
                                .sum();
                            bound += wsum * f64::from(b.d.abs()) * 0.5 * 1.001;
                        }
                        (dot_ref(ty, &w, ActRow::Q8K(&a.q8k)), bound)
                    }
                };
                assert!(
                    (f64::from(got) - exact).abs() <= bound,
                    "{ty:?}: integer scheme {got} vs float {exact} (bound {bound})"
                );
            }
        }
    }
}
