//! Tensors: I/O tensor descriptors and typed host views.

use std::fmt;

pub use tether_bundle::{DType, IoMode};

/// Largest tensor rank an engine reports; equal to the bundle format's limit
/// ([`tether_bundle::MAX_RANK`]).
pub const MAX_RANK: usize = tether_bundle::MAX_RANK;

/// A concrete (fully resolved) I/O tensor of a prepared engine.
///
/// Shapes are in elements, row-major (C order), outermost dimension first:
/// a YOLOv8 input is `[1, 3, H, W]` (NCHW). Dynamic dimensions of the model
/// are already fixed to the values chosen at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name in the network (ONNX value name, TensorRT I/O tensor name).
    pub name: String,
    /// Input or output.
    pub mode: IoMode,
    /// Element type.
    pub dtype: DType,
    /// Concrete shape, at most [`MAX_RANK`] dimensions.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Number of elements (product of the shape; 1 for a scalar), or `None`
    /// when the product overflows `usize`.
    pub fn element_count(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// Size of the tensor in bytes, or `None` for a dtype of unknown size or
    /// an element count that overflows `usize`.
    pub fn byte_len(&self) -> Option<usize> {
        self.element_count()?.checked_mul(self.dtype.size_bytes()?)
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}{:?}", self.name, self.dtype, self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_len_multiplies_shape_and_dtype() {
        let t = TensorSpec {
            name: "images".into(),
            mode: IoMode::Input,
            dtype: DType::F32,
            shape: vec![1, 3, 640, 640],
        };
        assert_eq!(t.element_count(), Some(1_228_800));
        assert_eq!(t.byte_len(), Some(4_915_200));
        assert_eq!(t.to_string(), "images f32[1, 3, 640, 640]");
    }

    #[test]
    fn byte_len_reports_overflow() {
        let t = TensorSpec {
            name: "x".into(),
            mode: IoMode::Input,
            dtype: DType::F32,
            shape: vec![usize::MAX / 2, 3],
        };
        assert_eq!(t.byte_len(), None);
    }
}
