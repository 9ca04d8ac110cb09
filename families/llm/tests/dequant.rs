//! Scalar dequantisation against the `gguf` PyPI package's numpy dequantisation
//! (`tests/fixtures/make_dequant.py`): pseudo-random blocks of every type tether reads, and
//! real Q4_1, Q8_0 and F32 rows of SmolLM2-135M-Instruct's GGUF.

use tether_llm::quant::{TensorType, dequantize_row};

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize
}

#[test]
fn dequantisation_equals_gguf_py() {
    let file = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/dequant.bin"
    ))
    .expect("fixture");
    let mut at = 0;
    let mut seen = std::collections::HashSet::new();
    let mut records = 0;
    while at < file.len() {
        let ty = TensorType::from_ggml_id(u32_at(&file, at) as u32).expect("a type tether reads");
        let (n_bytes, n_elems) = (u32_at(&file, at + 8), u32_at(&file, at + 12));
        at += 16;
        let raw = &file[at..at + n_bytes];
        at += n_bytes;
        let want: Vec<f32> = file[at..at + 4 * n_elems]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        at += 4 * n_elems;
        let mut got = vec![0.0f32; n_elems];
        dequantize_row(ty, raw, &mut got).expect("whole blocks");
        let mut worst = 0.0f32;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Same f32 operations as numpy's (scale * q [+ min]): equal up to one rounding.
            let tol = 1e-6 * w.abs().max(1e-3);
            assert!(
                (g - w).abs() <= tol,
                "{ty:?} element {i}: {g} vs gguf-py {w}"
            );
            worst = worst.max((g - w).abs());
        }
        eprintln!("{:5} {n_elems:5} values: max |diff| {worst:e}", ty.name());
        seen.insert(ty);
        records += 1;
    }
    assert_eq!(records, 11);
    assert_eq!(seen.len(), TensorType::ALL.len(), "every type covered");
}

#[test]
fn a_short_or_partial_row_is_an_error() {
    let mut out = vec![0.0f32; 32];
    let e = dequantize_row(TensorType::Q4_1, &[0u8; 19], &mut out).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Q4_1 row of 32 elements needs 20 bytes, got 19"
    );
    let mut out = vec![0.0f32; 100];
    let e = dequantize_row(TensorType::Q4K, &[0u8; 144], &mut out).unwrap_err();
    assert!(
        e.to_string()
            .contains("not a whole number of 256-element blocks"),
        "{e}"
    );
}
