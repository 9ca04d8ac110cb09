//! Every instruction set against the scalar reference: equal bits to the scalar lane form
//! (the order every instruction set follows), and within a tolerance of an f64 evaluation.
//!
//! Tolerance: the integer sums per block are exact on every path and the per-block f32
//! products are the same operations, so paths differ only in the order of the f32
//! accumulation over blocks (and over 8 lanes). Each result must be within
//! `1e-5 * sum(|term|)` of an f64 evaluation of the same block terms (f32 rounding of a sum
//! of a few hundred terms is far below that: about `n * 2^-24` relative).

use super::*;
use crate::quant::{ActRow, dot_ref, quantize_row_q8_ref, quantize_row_q8k_ref};

/// splitmix64: a deterministic test stream.
pub(crate) struct Rng(pub u64);
impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub(crate) fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub(crate) fn bytes(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next_u64() as u8;
        }
    }
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
}

/// A random row of `cols` elements of `ty`: random quant bytes with finite, moderate scales.
pub(crate) fn random_row(rng: &mut Rng, ty: TensorType, cols: usize) -> Vec<u8> {
    let mut row = vec![0u8; ty.row_bytes(cols).expect("whole blocks")];
    match ty {
        TensorType::F32 => {
            for c in row.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.uniform().to_le_bytes());
            }
        }
        TensorType::F16 => {
            for c in row.chunks_exact_mut(2) {
                c.copy_from_slice(&half::f16::from_f32(rng.uniform()).to_le_bytes());
            }
        }
        TensorType::Bf16 => {
            for c in row.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(rng.uniform()).to_le_bytes());
            }
        }
        _ => {
            rng.bytes(&mut row);
            for b in row.chunks_exact_mut(ty.block_bytes()) {
                let scale = 0.01 + 0.04 * rng.uniform().abs();
                match ty {
                    TensorType::Q8_0 | TensorType::Q4_0 => put_f16(b, 0, scale),
                    TensorType::Q4_1 => {
                        put_f16(b, 0, scale);
                        put_f16(b, 2, 0.2 * rng.uniform());
                    }
                    TensorType::Q4K => {
                        put_f16(b, 0, scale * 0.1);
                        put_f16(b, 2, scale * 0.1);
                    }
                    TensorType::Q6K => put_f16(b, 208, scale * 0.1),
                    _ => unreachable!(),
                }
            }
        }
    }
    row
}

/// Activations for `ty`, `tokens` rows of `cols` values.
pub(crate) struct ActBuf {
    pub(crate) f32: Vec<f32>,
    pub(crate) q8: Vec<BlockQ8>,
    pub(crate) q8k: Vec<BlockQ8K>,
    pub(crate) cols: usize,
}

impl ActBuf {
    pub(crate) fn new(x: Vec<f32>, cols: usize) -> ActBuf {
        let tokens = x.len() / cols;
        let mut q8 = vec![BlockQ8::default(); tokens * cols / QK];
        quantize_row_q8_ref(&x, &mut q8);
        let mut q8k = vec![
            BlockQ8K::default();
            if cols.is_multiple_of(QK_K) {
                tokens * cols / QK_K
            } else {
                0
            }
        ];
        if !q8k.is_empty() {
            quantize_row_q8k_ref(&x, &mut q8k);
        }
        ActBuf {
            f32: x,
            q8,
            q8k,
            cols,
        }
    }
    pub(crate) fn acts(&self, ty: TensorType) -> Acts<'_> {
        match ty.act_format() {
            ActFormat::F32 => Acts::F32 {
                data: &self.f32,
                per_row: self.cols,
            },
            ActFormat::Q8 => Acts::Q8 {
                data: &self.q8,
                per_row: self.cols / QK,
            },
            ActFormat::Q8K => Acts::Q8K {
                data: &self.q8k,
                per_row: self.cols / QK_K,
            },
        }
    }
    fn row(&self, ty: TensorType, t: usize) -> ActRow<'_> {
        match ty.act_format() {
            ActFormat::F32 => ActRow::F32(&self.f32[t * self.cols..(t + 1) * self.cols]),
            ActFormat::Q8 => {
                let n = self.cols / QK;
                ActRow::Q8(&self.q8[t * n..(t + 1) * n])
            }
            ActFormat::Q8K => {
                let n = self.cols / QK_K;
                ActRow::Q8K(&self.q8k[t * n..(t + 1) * n])
            }
        }
    }
}

/// |terms| summed: the scale of the rounding differences of one dot product, from the
/// dequantised weights times the dequantised activations.
fn abs_scale(ty: TensorType, w: &[u8], act: ActRow<'_>, cols: usize) -> f64 {
    let mut wf = vec![0.0f32; cols];
    crate::quant::dequantize_row(ty, w, &mut wf).expect("row");
    let xf: Vec<f32> = match act {
        ActRow::F32(x) => x.to_vec(),
        ActRow::Q8(b) => b
            .iter()
            .flat_map(|b| b.qs.map(|q| b.d * f32::from(q)))
            .collect(),
        ActRow::Q8K(b) => b
            .iter()
            .flat_map(|b| b.qs.map(|q| b.d * f32::from(q)))
            .collect(),
    };
    wf.iter()
        .zip(&xf)
        .map(|(&w, &x)| f64::from((w * x).abs()))
        .sum::<f64>()
        + 1e-30
}

#[test]
fn every_isa_matches_the_scalar_reference() {
    let mut rng = Rng(25);
    let isas = Isa::available();
    eprintln!("instruction sets here: {isas:?}");
    for ty in TensorType::ALL {
        let cols = if ty.block_elems() == QK_K { 512 } else { 576 };
        let (rows, tokens) = (70, 7);
        let mut data = Vec::new();
        for _ in 0..rows {
            data.extend(random_row(&mut rng, ty, cols));
        }
        let w = Matrix {
            ty,
            rows,
            cols,
            data: &data,
        };
        let x: Vec<f32> = (0..tokens * cols).map(|_| rng.uniform() * 3.0).collect();
        let a = ActBuf::new(x, cols);
        let mut lane_form = vec![f32::NAN; tokens * rows];
        let om = OutMatrix::new(&mut lane_form, tokens, rows, rows);
        matmul(Isa::Scalar, &w, 0..rows, &a.acts(ty), 0..tokens, &om);
        for &isa in &isas {
            let mut out = vec![f32::NAN; tokens * rows];
            let om = OutMatrix::new(&mut out, tokens, rows, rows);
            // Two "threads": rows split in two ranges.
            matmul(isa, &w, 0..33, &a.acts(ty), 0..tokens, &om);
            matmul(isa, &w, 33..rows, &a.acts(ty), 0..tokens, &om);
            // The lane form is the arithmetic of every instruction set: equal bits.
            let differ = out
                .iter()
                .zip(&lane_form)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ, 0,
                "{isa:?} {ty:?}: {differ} results differ from the lane form's bits"
            );
            let mut worst = 0.0f64;
            for t in 0..tokens {
                for r in 0..rows {
                    let want = dot_ref(ty, w.row(r), a.row(ty, t));
                    let got = out[t * rows + r];
                    let scale = abs_scale(ty, w.row(r), a.row(ty, t), cols);
                    let rel = f64::from((got - want).abs()) / scale;
                    assert!(
                        rel <= 1e-5,
                        "{isa:?} {ty:?} t {t} r {r}: {got} vs scalar {want} (|terms| {scale})"
                    );
                    worst = worst.max(rel);
                }
            }
            eprintln!(
                "{:>8} {:5}: worst |diff| / sum|terms| = {worst:.2e}",
                isa.name(),
                ty.name()
            );
        }
    }
}

#[test]
fn activation_quantisation_is_identical_on_every_isa() {
    let mut rng = Rng(7);
    let cols = 1536;
    let mut x: Vec<f32> = (0..3 * cols).map(|_| rng.uniform() * 10.0).collect();
    x[..32].fill(0.0); // an all-zero block
    x[40] = 0.5 * 127.0 / 126.5; // values near rounding ties
    let mut want = vec![BlockQ8::default(); 3 * cols / QK];
    quantize_row_q8_ref(&x, &mut want);
    for isa in Isa::available() {
        let mut got = vec![BlockQ8::default(); 3 * cols / QK];
        quantize_q8(isa, &x, cols, 0..3, cols, &mut got);
        assert_eq!(got, want, "{isa:?}");
    }
}

/// The attention and activation kernels of every instruction set give the scalar lane
/// form's bits (the order each one documents), for lengths with and without tails.
#[test]
fn attention_kernels_are_bit_identical_on_every_isa() {
    let mut rng = Rng(9);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for hd in [64, 80, 100, 128] {
        for len in [1, 3, 8, 31, 32, 33, 70, 300] {
            let mut q: Vec<f32> = (0..hd).map(|_| rng.uniform() * 4.0 - 2.0).collect();
            round_to_f16(&mut q);
            let kf: Vec<f32> = (0..len * hd).map(|_| rng.uniform() * 4.0 - 2.0).collect();
            let mut kv = vec![0u16; len * hd];
            to_f16(&kf, &mut kv);
            let mut p: Vec<f32> = (0..len).map(|_| rng.uniform()).collect();
            round_to_f16(&mut p);
            let scores: Vec<f32> = (0..len).map(|_| rng.uniform() * 30.0 - 20.0).collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut acc = vec![0.0f32; weighted_sum_scratch(hd)];
            for order in [F16Order::Gemm, F16Order::Gemv] {
                let dots = |isa| {
                    kv.chunks_exact(hd)
                        .map(|k| dot_f16(isa, order, &q, k).to_bits())
                        .collect::<Vec<_>>()
                };
                let mut want_sum = vec![0.0f32; hd];
                weighted_sum_f16(Isa::Scalar, order, &p, &kv, &mut acc, &mut want_sum);
                let want_dots = dots(Isa::Scalar);
                for isa in Isa::available() {
                    assert_eq!(dots(isa), want_dots, "{isa:?} {order:?} dot hd {hd}");
                    let mut got = vec![0.0f32; hd];
                    weighted_sum_f16(isa, order, &p, &kv, &mut acc, &mut got);
                    assert_eq!(
                        bits(&got),
                        bits(&want_sum),
                        "{isa:?} {order:?} sum hd {hd} len {len}"
                    );
                }
            }
            let mut want = scores.clone();
            let want_total = scalar::softmax_exp(&mut want, max);
            for isa in Isa::available() {
                let mut got = scores.clone();
                let total = softmax_exp(isa, &mut got, max);
                assert_eq!(bits(&got), bits(&want), "{isa:?} softmax len {len}");
                assert_eq!(total.to_bits(), want_total.to_bits(), "{isa:?} softmax sum");
            }
        }
    }
    // RoPE's fused rotation.
    let x: Vec<f32> = (0..128).map(|_| rng.uniform() * 8.0 - 4.0).collect();
    let angles: Vec<f32> = (0..128).map(|_| rng.uniform() * 2.0 - 1.0).collect();
    let mut want = x.clone();
    scalar::rope_fused(&mut want, &angles);
    for isa in Isa::available() {
        let mut got = x.clone();
        rope_fused(isa, &mut got, &angles);
        assert_eq!(bits(&got), bits(&want), "{isa:?} rope");
    }
    // SiLU over the exponent's whole range: normal, scaled (|n| > 126) and flushed results.
    let g: Vec<f32> = (0..1000)
        .map(|i| (i as f32 - 500.0) * 0.25 + rng.uniform())
        .chain([-200.0, -104.0, -90.0, 0.0, -0.0, 88.0, 89.0, 150.0])
        .collect();
    let u: Vec<f32> = (0..g.len()).map(|_| rng.uniform() * 2.0).collect();
    let mut want = g.clone();
    scalar::silu_mul(&mut want, &u);
    for isa in Isa::available() {
        let mut got = g.clone();
        silu_mul(isa, &mut got, &u);
        assert_eq!(bits(&got), bits(&want), "{isa:?} silu");
    }
}

/// `exp` against f64's within its stated error (ggml's `ggml_v_expf`: 1.45 ulp + 0.5), and
/// its range ends.
#[test]
fn exp_is_within_two_ulp() {
    let mut x = -103.0f32;
    while x < 88.3 {
        let got = exp(x);
        let want = f64::from(x).exp();
        let ulp = f64::from(f32::from_bits(got.to_bits() + 1) - got);
        assert!(
            (f64::from(got) - want).abs() <= 2.0 * ulp,
            "exp({x}) = {got}, f64 {want}"
        );
        x += 0.013;
    }
    assert_eq!(exp(0.0), 1.0);
    assert_eq!(exp(-200.0), 0.0);
    assert_eq!(exp(200.0), f32::INFINITY);
}
