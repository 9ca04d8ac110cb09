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
        if elems % b != 0 {
            return None;
        }
        Some(elems / b * self.block_bytes())
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
}
