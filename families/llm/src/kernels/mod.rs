//! CPU kernels of the forward pass: activation quantisation, matrix products over the
//! stored (quantised) weight blocks, the f16 key/value helpers of attention, and the thread
//! pool that runs them.
//!
//! The scheme is llama.cpp's (ggml-cpu): before a matrix product the activations are
//! quantised once to 8-bit blocks ([`crate::quant::BlockQ8`] for Q8_0/Q4_0/Q4_1 weights,
//! [`crate::quant::BlockQ8K`] for Q4_K/Q6_K), then every output is a sum over blocks of an
//! integer dot product times the two scales (plus the weight minimum times the activation
//! sum for Q4_1, the sub-block minimums times the activation block sums for Q4_K, the
//! offset of 32 times them for Q6_K). Float weights (F32, F16, BF16) multiply f32
//! activations.
//!
//! Three instruction sets compute the same products: [`Isa::Scalar`] (portable Rust, the
//! reference the others are tested against), [`Isa::Avx2`] (x86-64 with AVX2, FMA and F16C,
//! detected at run time; [`Isa::AvxVnni`] adds AVX-VNNI's byte dot product) and
//! [`Isa::Neon`] / [`Isa::NeonDot`] (aarch64; `NeonDot` adds the ARMv8.2 `sdot`
//! instruction, detected at run time). Every instruction set performs the same IEEE
//! operations in the same order, the scalar **lane form** ([`scalar`]): 8 f32 lanes, lane
//! `l` taking the exact integer sum of elements `4l .. 4l + 4` of each block and one fused
//! multiply-add per block, the lanes summed in one fixed tree; so results are equal bit for
//! bit on x86-64 and aarch64 ([`tests`](self) check it). That order is llama.cpp's on AVX2,
//! and so are the attention's f16 products ([`F16Order`]), its softmax and SiLU
//! ([`exp`]), which makes the CPU engine's logits equal to llama.cpp's (issue 25).
//!
//! Matrix products are tiled: a thread takes a contiguous range of output rows (weight
//! rows), walks it in chunks small enough to stay in the L1/L2 cache, and for each chunk
//! multiplies up to [`TILE_TOKENS`] activation rows per weight-block read, so prompt
//! processing reads each weight once per group of tokens, not once per token.

pub mod pool;
pub(crate) mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

use std::ops::Range;

use crate::quant::{ActFormat, BlockQ8, BlockQ8K, QK, QK_K, TensorType};

/// Activation rows multiplied per weight-block read in the prompt's matrix products.
pub const TILE_TOKENS: usize = 4;

/// Weight rows per cache chunk of a matrix product (a Q4_1 chunk of a 576-wide matrix is
/// 64 x 360 bytes = 23 KiB: it stays in L1/L2 while every token group of the prompt passes
/// over it).
const CHUNK_ROWS: usize = 64;

/// The instruction set a kernel runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust: the reference.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// [`Isa::Avx2`] plus AVX-VNNI (`vpdpbusd`: Alder Lake, Sapphire Rapids, Zen 5 and
    /// later) in the Q8_0/Q4_0/Q4_1 products; the same results as `Avx2`.
    AvxVnni,
    /// aarch64 Advanced SIMD (ARMv8.0).
    Neon,
    /// aarch64 Advanced SIMD with the ARMv8.2 dot-product instructions (`sdot`).
    NeonDot,
}

impl Isa {
    /// Every instruction set tether's kernels have, in [`Isa::name`] order of the docs.
    pub const ALL: [Isa; 5] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Neon,
        Isa::NeonDot,
    ];

    /// The fastest instruction set this CPU runs, detected at run time. `TETHER_LLM_ISA=scalar`
    /// (or `avx2` on a CPU with AVX-VNNI, `neon` on one with `sdot`) forces a slower one, for
    /// tests and comparisons; a value that names no set this CPU runs is warned about (once
    /// per process, through `log`) and the fastest is used. The same choice as
    /// [`Isa::choice`].
    pub fn detect() -> Isa {
        let choice = Self::choice();
        if let IsaReason::Ignored { why, .. } = &choice.reason {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| log::warn!("{why}; using {}", choice.isa.name()));
        }
        choice.isa
    }

    /// The set [`Isa::detect`] uses, every set this CPU runs and why that one: the
    /// environment variable `TETHER_LLM_ISA` is read once, so the three agree.
    pub fn choice() -> IsaChoice {
        let available = Self::available();
        let best = available.last().copied().unwrap_or(Isa::Scalar);
        let value = std::env::var_os("TETHER_LLM_ISA").map(|v| v.to_string_lossy().into_owned());
        let (isa, reason) = match value.as_deref() {
            None | Some("") => (best, IsaReason::Fastest),
            Some(name) => match available.iter().copied().find(|i| i.name() == name) {
                Some(isa) => (isa, IsaReason::Forced),
                None => {
                    let names: Vec<&str> = available.iter().map(|i| i.name()).collect();
                    let why = if Isa::ALL.iter().any(|i| i.name() == name) {
                        format!(
                            "TETHER_LLM_ISA={name}: not an instruction set this CPU runs ({})",
                            names.join(", ")
                        )
                    } else {
                        let all: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
                        format!(
                            "TETHER_LLM_ISA={name}: no such instruction set (accepted {}; this CPU runs {})",
                            all.join(", "),
                            names.join(", ")
                        )
                    };
                    (
                        best,
                        IsaReason::Ignored {
                            value: name.to_string(),
                            why,
                        },
                    )
                }
            },
        };
        IsaChoice {
            isa,
            available,
            reason,
        }
    }

    /// Every instruction set this CPU runs, slowest first (always starts with `Scalar`).
    pub fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            v.push(Isa::Avx2);
            if is_x86_feature_detected!("avxvnni") {
                v.push(Isa::AvxVnni);
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("neon") {
                v.push(Isa::Neon);
                if std::arch::is_aarch64_feature_detected!("dotprod") {
                    v.push(Isa::NeonDot);
                }
            }
        }
        v
    }

    /// Short name (`scalar`, `avx2`, `avx-vnni`, `neon`, `neon-dot`).
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avx-vnni",
            Isa::Neon => "neon",
            Isa::NeonDot => "neon-dot",
        }
    }
}

/// What [`Isa::choice`] found: the set the kernels use, every set this CPU runs (slowest
/// first) and why that one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsaChoice {
    /// The set the kernels use.
    pub isa: Isa,
    /// Every set this CPU runs, slowest first ([`Isa::available`]).
    pub available: Vec<Isa>,
    /// Why `isa`.
    pub reason: IsaReason,
}

/// Why [`IsaChoice::isa`] is the set it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsaReason {
    /// `TETHER_LLM_ISA` is not set (or empty): the fastest set this CPU runs.
    Fastest,
    /// `TETHER_LLM_ISA` names it.
    Forced,
    /// `TETHER_LLM_ISA` names no set this CPU runs: the fastest is used.
    Ignored {
        /// The variable's value (lossily decoded when it is not UTF-8).
        value: String,
        /// The sentence [`Isa::detect`] warns with: the value and the sets this CPU runs.
        why: String,
    },
}

/// A weight matrix `[rows, cols]`, row-major, each row `cols` elements of `ty` (GGUF's
/// `ne0 = cols`, `ne1 = rows`).
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Element type.
    pub ty: TensorType,
    /// Output features.
    pub rows: usize,
    /// Input features (a whole number of `ty` blocks).
    pub cols: usize,
    /// `rows * ty.row_bytes(cols)` bytes.
    pub data: &'a [u8],
}

impl<'a> Matrix<'a> {
    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.ty
            .row_bytes(self.cols)
            .expect("whole blocks (checked at load)")
    }

    /// The bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }
}

/// Activation rows prepared for one weight type (see [`ActFormat`]): row `t` of a matrix
/// product's input.
#[derive(Clone, Copy, Debug)]
pub enum Acts<'a> {
    /// Rows of `per_row` f32 values.
    F32 {
        /// Values.
        data: &'a [f32],
        /// Values per row (the matrix's `cols`).
        per_row: usize,
    },
    /// Rows of `per_row` [`BlockQ8`].
    Q8 {
        /// Blocks.
        data: &'a [BlockQ8],
        /// Blocks per row.
        per_row: usize,
    },
    /// Rows of `per_row` [`BlockQ8K`].
    Q8K {
        /// Super-blocks.
        data: &'a [BlockQ8K],
        /// Super-blocks per row.
        per_row: usize,
    },
}

impl Acts<'_> {
    /// The activation format.
    pub fn format(&self) -> ActFormat {
        match self {
            Acts::F32 { .. } => ActFormat::F32,
            Acts::Q8 { .. } => ActFormat::Q8,
            Acts::Q8K { .. } => ActFormat::Q8K,
        }
    }
}

/// Where a matrix product writes: element `(t, r)` at `ptr + t * stride + r`, plus an
/// optional bias `bias[r]`, stored or added to what is there (`accumulate`: a residual
/// connection). Several threads write disjoint row ranges of the same output, so it is a
/// raw pointer.
#[derive(Clone, Copy, Debug)]
pub struct OutMatrix {
    ptr: *mut f32,
    stride: usize,
    tokens: usize,
    rows: usize,
    bias: *const f32,
    accumulate: bool,
}

// SAFETY: an `OutMatrix` is only a description of memory that the forward pass owns for the
// whole parallel region; threads write disjoint `(t, r)` elements (disjoint row ranges).
unsafe impl Send for OutMatrix {}
// SAFETY: as for `Send`.
unsafe impl Sync for OutMatrix {}

impl OutMatrix {
    /// Describes `tokens` rows of `stride` f32 values in `out`, of which the first `rows`
    /// receive products.
    ///
    /// # Panics
    /// When `out` is shorter than `(tokens - 1) * stride + rows` or `rows > stride`.
    pub fn new(out: &mut [f32], tokens: usize, rows: usize, stride: usize) -> OutMatrix {
        assert!(rows <= stride && (tokens == 0 || (tokens - 1) * stride + rows <= out.len()));
        OutMatrix {
            ptr: out.as_mut_ptr(),
            stride,
            tokens,
            rows,
            bias: std::ptr::null(),
            accumulate: false,
        }
    }

    /// As [`new`](Self::new), from a raw pointer, for threads that each write their own rows
    /// of one output (no thread may hold a reference to the whole of it).
    ///
    /// # Safety
    /// `ptr` is valid for writes of `(tokens - 1) * stride + rows` values for as long as the
    /// `OutMatrix` is used, and no reference to those values is live meanwhile.
    pub(crate) unsafe fn from_raw(
        ptr: *mut f32,
        tokens: usize,
        rows: usize,
        stride: usize,
    ) -> OutMatrix {
        assert!(rows <= stride);
        OutMatrix {
            ptr,
            stride,
            tokens,
            rows,
            bias: std::ptr::null(),
            accumulate: false,
        }
    }

    /// Adds `bias[r]` to every product of row `r`, and adds the result into the output
    /// instead of storing it when `accumulate`.
    ///
    /// # Panics
    /// When `bias` is shorter than the rows.
    pub fn with_epilogue(mut self, bias: Option<&[f32]>, accumulate: bool) -> OutMatrix {
        if let Some(b) = bias {
            assert!(b.len() >= self.rows);
            self.bias = b.as_ptr();
        }
        self.accumulate = accumulate;
        self
    }

    /// # Safety
    /// `t < tokens`, `r < rows`, and no other thread writes `(t, r)` concurrently.
    #[inline(always)]
    unsafe fn write(&self, t: usize, r: usize, mut v: f32) {
        debug_assert!(t < self.tokens && r < self.rows);
        // SAFETY: in bounds by the constructors' checks and the caller's contract; the bias
        // holds `rows` values.
        unsafe {
            if !self.bias.is_null() {
                v += *self.bias.add(r);
            }
            let p = self.ptr.add(t * self.stride + r);
            if self.accumulate {
                *p += v;
            } else {
                *p = v;
            }
        }
    }
}

/// Quantises `rows` activation rows of `cols` values (`x[t * stride ..]`) into `out`
/// (`rows * cols / 32` blocks, row after row).
///
/// # Panics
/// When `cols` is not a multiple of 32 or a slice is too short.
pub fn quantize_q8(
    isa: Isa,
    x: &[f32],
    stride: usize,
    rows: Range<usize>,
    cols: usize,
    out: &mut [BlockQ8],
) {
    assert_eq!(cols % QK, 0);
    let per_row = cols / QK;
    for t in rows {
        let src = &x[t * stride..t * stride + cols];
        let dst = &mut out[t * per_row..(t + 1) * per_row];
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2`/`AvxVnni` are only returned by `available()` when the CPU
            // has AVX2.
            Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::quantize_row_q8(src, dst) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `Isa::Neon*` is only returned by `available()` when the CPU has NEON.
            Isa::Neon | Isa::NeonDot => unsafe { neon::quantize_row_q8(src, dst) },
            _ => crate::quant::quantize_row_q8_ref(src, dst),
        }
    }
}

/// Quantises `rows` activation rows of `cols` values into [`BlockQ8K`] super-blocks
/// (`cols / 256` per row). Scalar on every instruction set: it is a small part of a
/// k-quant product.
///
/// # Panics
/// When `cols` is not a multiple of 256 or a slice is too short.
pub fn quantize_q8k(
    x: &[f32],
    stride: usize,
    rows: Range<usize>,
    cols: usize,
    out: &mut [BlockQ8K],
) {
    assert_eq!(cols % QK_K, 0);
    let per_row = cols / QK_K;
    for t in rows {
        crate::quant::quantize_row_q8k_ref(
            &x[t * stride..t * stride + cols],
            &mut out[t * per_row..(t + 1) * per_row],
        );
    }
}

/// Computes `out[t][r] = dot(w.row(r), acts row t)` for `r` in `rows` and `t` in `tokens`:
/// one thread's share of a matrix product (threads split by output rows).
///
/// # Panics
/// When the activation format is not `w.ty.act_format()`, or the ranges exceed the output
/// or the activations.
pub fn matmul(
    isa: Isa,
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &Acts<'_>,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    assert_eq!(
        acts.format(),
        w.ty.act_format(),
        "{:?} weights need {:?} activations",
        w.ty,
        w.ty.act_format()
    );
    assert!(rows.end <= w.rows && rows.end <= out.rows && tokens.end <= out.tokens);
    match acts {
        Acts::F32 { data, per_row } => {
            assert!(*per_row == w.cols && tokens.end * per_row <= data.len())
        }
        Acts::Q8 { data, per_row } => {
            assert!(*per_row == w.cols / QK && tokens.end * per_row <= data.len())
        }
        Acts::Q8K { data, per_row } => {
            assert!(*per_row == w.cols / QK_K && tokens.end * per_row <= data.len())
        }
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only returned by `available()` when the CPU has AVX2, FMA
        // and F16C; the shapes were checked above.
        Isa::Avx2 => unsafe { avx2::matmul(w, rows, acts, tokens, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::AvxVnni` is only returned by `available()` when the CPU has AVX2, FMA,
        // F16C and AVX-VNNI; the shapes were checked above.
        Isa::AvxVnni => unsafe { avx2::matmul_vnni(w, rows, acts, tokens, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON checked by `available()`; shapes above.
        Isa::Neon => unsafe { neon::matmul(w, rows, acts, tokens, out, false) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON and dotprod checked by `available()`; shapes above.
        Isa::NeonDot => unsafe { neon::matmul(w, rows, acts, tokens, out, true) },
        _ => scalar::matmul(w, rows, acts, tokens, out),
    }
}

/// One instruction set's dot product of a weight row with up to [`TILE_TOKENS`] activation
/// rows: the micro-kernel the tiled loop ([`tiled`]) calls.
pub(crate) trait RowKernel {
    /// Activation element (f32 or a quantised block).
    type Act;
    /// `out[i] = dot(w, acts[i])` for `i < N`, `w` one stored row, each `acts[i]` one row.
    ///
    /// # Safety
    /// The instruction set of the implementation is available; `w` and `acts[i]` hold the
    /// same number of elements.
    unsafe fn dot<const N: usize>(w: &[u8], acts: [&[Self::Act]; N]) -> [f32; N];
}

/// The tiled loop shared by every instruction set: for each chunk of [`CHUNK_ROWS`] weight
/// rows, for each group of [`TILE_TOKENS`] tokens, every row of the chunk.
///
/// # Safety
/// `K`'s instruction set is available; shapes checked by [`matmul`].
#[inline(always)]
pub(crate) unsafe fn tiled<K: RowKernel>(
    w: &Matrix<'_>,
    rows: Range<usize>,
    acts: &[K::Act],
    per_row: usize,
    tokens: Range<usize>,
    out: &OutMatrix,
) {
    let act = |t: usize| &acts[t * per_row..t * per_row + per_row];
    let mut chunk = rows.start;
    while chunk < rows.end {
        let chunk_end = (chunk + CHUNK_ROWS).min(rows.end);
        let mut t = tokens.start;
        while t + TILE_TOKENS <= tokens.end {
            let a = [act(t), act(t + 1), act(t + 2), act(t + 3)];
            for r in chunk..chunk_end {
                // SAFETY: caller's contract.
                let v = unsafe { K::dot::<TILE_TOKENS>(w.row(r), a) };
                for (i, v) in v.into_iter().enumerate() {
                    // SAFETY: `t + i < tokens.end <= out.tokens`, `r < rows.end <= out.rows`;
                    // this thread owns rows `rows`.
                    unsafe { out.write(t + i, r, v) };
                }
            }
            t += TILE_TOKENS;
        }
        while t < tokens.end {
            let a = [act(t)];
            for r in chunk..chunk_end {
                // SAFETY: as above.
                let [v] = unsafe { K::dot::<1>(w.row(r), a) };
                // SAFETY: as above.
                unsafe { out.write(t, r, v) };
            }
            t += 1;
        }
        chunk = chunk_end;
    }
}

/// Which of llama.cpp's two accumulation orders an attention product follows. ggml-cpu
/// (without flash attention) multiplies the f16 key cache by the f16-rounded queries, and
/// the transposed f16 value cache by the f16-rounded probabilities, with `ggml_mul_mat`:
/// for two or more tokens in the batch that is llamafile's `tinyBLAS` (`llamafile_sgemm`,
/// `ggml-cpu/llamafile/sgemm.cpp`: one 8-lane vector accumulator per output on AVX2), for
/// one token `ggml_vec_dot_f16` (`ggml-cpu/vec.cpp`: four 8-lane accumulators over 32-column
/// steps). The orders round differently, so a forward chunk of one token uses
/// [`F16Order::Gemv`] and a longer one [`F16Order::Gemm`], as the reference does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F16Order {
    /// Matrix-matrix (`tinyBLAS`): lane `c mod 8` of one vector accumulator, then the
    /// fixed 8-lane sum. Products whose length is not a multiple of 8 (of the key) or of 4
    /// (of the value rows) fall back to [`F16Order::Gemv`], as `llamafile_sgemm` does.
    Gemm,
    /// Matrix-vector (`ggml_vec_dot_f16`): slot `c mod 32` of four vector accumulators,
    /// their fixed sum, the columns past the last whole 32 added in f64.
    Gemv,
}

/// The attention score `q . k` with `q` f32 (already rounded to f16 values) and `k` a key
/// cache row (f16 bits), in `order` ([`F16Order`]).
///
/// # Panics
/// When the lengths differ.
#[inline]
pub fn dot_f16(isa: Isa, order: F16Order, q: &[f32], k: &[u16]) -> f32 {
    assert_eq!(q.len(), k.len());
    let gemm = order == F16Order::Gemm && q.len().is_multiple_of(8);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA/F16C checked by `available()`; lengths equal (multiple of 8 for
        // the matrix-matrix order).
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            if gemm {
                avx2::dot_f16_gemm(q, k)
            } else {
                avx2::dot_f16_gemv(q, k)
            }
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON checked by `available()`; lengths as above.
        Isa::Neon | Isa::NeonDot => unsafe {
            if gemm {
                neon::dot_f16_gemm(q, k)
            } else {
                neon::dot_f16_gemv(q, k)
            }
        },
        _ if gemm => scalar::dot_f16_gemm(q, k),
        _ => scalar::dot_f16_gemv(q, k),
    }
}

/// Accumulator space [`weighted_sum_f16`] needs for rows of `head_dim` values.
pub const fn weighted_sum_scratch(head_dim: usize) -> usize {
    scalar::GEMV_SLOTS * head_dim
}

/// `out[d] = sum_j p[j] * values[j][d]`: the attention output from the probabilities `p`
/// (already rounded to f16 values) and `p.len()` value cache rows of `out.len()` f16 (bits),
/// in `order` ([`F16Order`]); `acc` is scratch of [`weighted_sum_scratch`] values.
///
/// # Panics
/// When `values` or `acc` is too short.
pub fn weighted_sum_f16(
    isa: Isa,
    order: F16Order,
    p: &[f32],
    values: &[u16],
    acc: &mut [f32],
    out: &mut [f32],
) {
    let hd = out.len();
    assert!(values.len() >= p.len() * hd && acc.len() >= weighted_sum_scratch(hd));
    let gemm = order == F16Order::Gemm && hd.is_multiple_of(4);
    let values = &values[..p.len() * hd];
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA/F16C checked by `available()`; lengths checked above.
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            if gemm {
                avx2::weighted_sum_gemm(p, values, acc, out)
            } else {
                avx2::weighted_sum_gemv(p, values, acc, out)
            }
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON checked by `available()`; lengths checked above.
        Isa::Neon | Isa::NeonDot => unsafe {
            if gemm {
                neon::weighted_sum_gemm(p, values, acc, out)
            } else {
                neon::weighted_sum_gemv(p, values, acc, out)
            }
        },
        _ if gemm => scalar::weighted_sum_gemm(p, values, acc, out),
        _ => scalar::weighted_sum_gemv(p, values, acc, out),
    }
}

/// The softmax numerators in place, `s[i] = exp(s[i] - max)`, and their sum (f64), as
/// ggml's `ggml_vec_soft_max_f32` (AVX2) computes them: `exp` by the algorithm of Arm's
/// Optimized Routines `v_expf` in ggml's `ggml_v_expf` form ([`exp`]), the sum of each
/// 8-value chunk in f32 by the fixed 8-lane order, the chunk sums in f64.
pub fn softmax_exp(isa: Isa, s: &mut [f32], max: f32) -> f64 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA checked by `available()`.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::softmax_exp(s, max) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON checked by `available()`.
        Isa::Neon | Isa::NeonDot => unsafe { neon::softmax_exp(s, max) },
        _ => scalar::softmax_exp(s, max),
    }
}

/// `g = silu(g) * up` with `silu(x) = x / (1 + exp(-x))` and [`exp`] (ggml's
/// `ggml_vec_swiglu_f32`).
///
/// # Panics
/// When `up` is shorter than `g`.
pub fn silu_mul(isa: Isa, g: &mut [f32], up: &[f32]) {
    assert!(up.len() >= g.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA checked by `available()`; lengths checked above.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::silu_mul(g, up) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON checked by `available()`; lengths checked above.
        Isa::Neon | Isa::NeonDot => unsafe { neon::silu_mul(g, up) },
        _ => scalar::silu_mul(g, up),
    }
}

/// `e^x` in f32 by the algorithm of Arm's Optimized Routines `v_expf` (Szabolcs Nagy,
/// `math/v_expf.c`: `2^n (1 + poly(r))`, `n = round(x / ln 2)`, a degree-5 polynomial) in
/// the form ggml uses on AVX2 and NEON (`ggml_v_expf`, `ggml-cpu/vec.h`); maximum error
/// about 1.95 ulp, inputs below about -103.97 give 0, above about 88.38 infinity. The same
/// bits on every instruction set.
pub fn exp(x: f32) -> f32 {
    scalar::exp(x)
}

/// llama.cpp's rotation of one head by RoPE, in rotate-half lanes (lane `i` with lane
/// `i + half`; `angles` = `[cos; half] ++ [sin; half]`): ggml's `rotate_pairs`
/// (`ggml-cpu/ops.cpp`: `x0 cos - x1 sin`, `x0 sin + x1 cos`) as GCC compiles it with FMA
/// (its default `-ffp-contract=fast`; the vectorised loop is `vmulps` then
/// `vfmaddsub231ps`): `fma(x0, cos, -(x1 sin))`, `fma(x0, sin, x1 cos)`. Same bits on every
/// instruction set (`mul_add` is fused everywhere; with hardware FMA where there is one).
///
/// # Panics
/// When `angles` is shorter than `x`.
pub fn rope_fused(isa: Isa, x: &mut [f32], angles: &[f32]) {
    assert!(angles.len() >= x.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: FMA checked by `available()`.
        Isa::Avx2 | Isa::AvxVnni => unsafe { avx2::rope_fused(x, angles) },
        _ => scalar::rope_fused(x, angles),
    }
}

/// Rounds every value to the nearest f16 value (ties to even) and back to f32: the
/// conversion ggml applies to the queries and probabilities before its f16 products.
pub fn round_to_f16(x: &mut [f32]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    let mut bits = [0u16; 64];
    for c in x.chunks_mut(64) {
        let b = &mut bits[..c.len()];
        b.reinterpret_cast_mut::<half::f16>()
            .convert_from_f32_slice(c);
        b.reinterpret_cast::<half::f16>().convert_to_f32_slice(c);
    }
}

/// Rounds f32 values to f16 (raw bits), nearest-even: the key/value cache's storage.
///
/// # Panics
/// When the lengths differ.
pub fn to_f16(src: &[f32], dst: &mut [u16]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    assert_eq!(src.len(), dst.len());
    dst.reinterpret_cast_mut::<half::f16>()
        .convert_from_f32_slice(src);
}

#[cfg(test)]
pub(crate) mod tests;
