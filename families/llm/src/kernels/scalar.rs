//! Portable kernels: the reference every SIMD path is tested against, and the fallback on
//! CPUs without one.

use std::ops::Range;

use super::{Acts, Matrix, OutMatrix, RowKernel, tiled};
use crate::quant::{ActRow, BlockQ8, BlockQ8K, TensorType, dot_ref};

macro_rules! scalar_kernel {
    ($name:ident, $ty:expr, $act:ty, $variant:ident) => {
        pub(crate) struct $name;
        impl RowKernel for $name {
            type Act = $act;
            #[inline(always)]
            unsafe fn dot<const N: usize>(w: &[u8], acts: [&[$act]; N]) -> [f32; N] {
                acts.map(|a| dot_ref($ty, w, ActRow::$variant(a)))
            }
        }
    };
}

scalar_kernel!(F32K, TensorType::F32, f32, F32);
scalar_kernel!(F16K, TensorType::F16, f32, F32);
scalar_kernel!(Bf16K, TensorType::Bf16, f32, F32);
scalar_kernel!(Q8_0K, TensorType::Q8_0, BlockQ8, Q8);
scalar_kernel!(Q4_0K, TensorType::Q4_0, BlockQ8, Q8);
scalar_kernel!(Q4_1K, TensorType::Q4_1, BlockQ8, Q8);
scalar_kernel!(Q4KK, TensorType::Q4K, BlockQ8K, Q8K);
scalar_kernel!(Q6KK, TensorType::Q6K, BlockQ8K, Q8K);

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

/// f32 · f16 dot product (see [`super::dot_f16`]).
pub(crate) fn dot_f16(q: &[f32], k: &[u16]) -> f32 {
    q.iter()
        .zip(k)
        .map(|(&q, &k)| q * half::f16::from_bits(k).to_f32())
        .sum()
}

/// `out += p * v` over f16 `v` (see [`super::axpy_f16`]).
pub(crate) fn axpy_f16(out: &mut [f32], p: f32, v: &[u16]) {
    for (o, &v) in out.iter_mut().zip(v) {
        *o += p * half::f16::from_bits(v).to_f32();
    }
}
