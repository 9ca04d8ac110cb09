//! Sentence embedding from token embeddings: attention-masked mean pooling
//! and L2 normalisation (host code).
//!
//! sentence-transformers' `Pooling` with `pooling_mode_mean_tokens`
//! (`1_Pooling/config.json`) computes `sum(h_t * m_t) / max(sum(m_t), 1e-9)`
//! over the tokens `t` with attention mask `m`, and `Normalize` divides by
//! `max(||x||_2, 1e-12)` (`torch.nn.functional.normalize`). Texts are padded on
//! the right here, so the mask of a row is `len` ones then zeros and the
//! masked mean is the plain mean of the first `len` rows. Sums are in float64
//! (the reference sums in float32; the difference is ~1e-7).

use crate::EMBEDDING_DIM;

/// Mean of the first `len` rows of `hidden` (`[seq, 384]`, row-major, `seq >=
/// len`), L2-normalised, into `out`.
///
/// `len == 0` (no token attended) gives the zero vector, as the reference's
/// clamps do. Rows past `len` are ignored (padding).
///
/// # Panics
/// Never for `hidden.len() >= len * 384`; shorter slices are clamped to the
/// rows present.
pub fn mean_pool_normalize(hidden: &[f32], len: usize, out: &mut [f32; EMBEDDING_DIM]) {
    let rows = len.min(hidden.len() / EMBEDDING_DIM);
    let mut acc = [0f64; EMBEDDING_DIM];
    for row in hidden.chunks_exact(EMBEDDING_DIM).take(rows) {
        for (a, &h) in acc.iter_mut().zip(row) {
            *a += f64::from(h);
        }
    }
    let count = (rows as f64).max(1e-9);
    let mut norm = 0f64;
    for a in &mut acc {
        *a /= count;
        norm += *a * *a;
    }
    let norm = norm.sqrt().max(1e-12);
    for (o, a) in out.iter_mut().zip(acc) {
        *o = (a / norm) as f32;
    }
}

/// Cosine similarity of two vectors (float64 sums); 0 when either is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    (ab / (aa.sqrt() * bb.sqrt())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_only_the_attended_rows_and_normalises() {
        let mut hidden = vec![0f32; 4 * EMBEDDING_DIM];
        hidden[0] = 1.0; // row 0
        hidden[EMBEDDING_DIM] = 3.0; // row 1
        hidden[EMBEDDING_DIM + 1] = 4.0;
        hidden[2 * EMBEDDING_DIM + 5] = 1000.0; // row 2: padding
        let mut out = [0f32; EMBEDDING_DIM];
        mean_pool_normalize(&hidden, 2, &mut out);
        // mean = (2, 2, 0, ...) -> (1/sqrt 2, 1/sqrt 2).
        assert!((out[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        assert!((out[1] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        assert_eq!(out[5], 0.0);
        mean_pool_normalize(&hidden, 0, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }
}
