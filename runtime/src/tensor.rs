//! Tensors: I/O tensor descriptors, typed views of host bytes, and aligned host buffers.
//!
//! Every buffer the runtime hands out is bytes (native endianness, row-major); typed access
//! goes through [`Element`]: `f32`, [`half::f16`], `i64`, `i32`, `i8`, `u8` (also for `bool`
//! tensors, one byte per element, 0 = false, 1 = true). A view checks the tensor's dtype and
//! the buffer's length and alignment and never copies.

use std::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub use half::f16;
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

/// An element type a tensor can be viewed as.
pub trait Element: FromBytes + IntoBytes + Immutable + KnownLayout + Copy + 'static {
    /// The dtype this element type stands for.
    const DTYPE: DType;
    /// Whether a tensor of `dtype` may be viewed as this type (`u8` also views `bool`).
    fn accepts(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for i8 {
    const DTYPE: DType = DType::I8;
}
impl Element for u8 {
    const DTYPE: DType = DType::U8;
    fn accepts(dtype: DType) -> bool {
        matches!(dtype, DType::U8 | DType::Bool)
    }
}

/// Why bytes cannot be viewed as a tensor of some element type. `Copy`: returned on the hot
/// path without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// The tensor's dtype is not the one asked for.
    #[error("tensor is {actual}, not {requested}")]
    DType {
        /// The tensor's dtype.
        actual: DType,
        /// The dtype asked for.
        requested: DType,
    },
    /// The bytes are misaligned for the element type or not a whole number of elements.
    #[error("{len} bytes are misaligned or not a whole number of {requested} elements")]
    Layout {
        /// Length of the buffer in bytes.
        len: usize,
        /// The dtype asked for.
        requested: DType,
    },
}

/// View `bytes` holding a tensor of `dtype` as `&[T]`.
///
/// # Errors
/// [`ViewError::DType`] when `T` does not stand for `dtype`; [`ViewError::Layout`] on a
/// misaligned or ragged buffer.
pub fn view<T: Element>(dtype: DType, bytes: &[u8]) -> Result<&[T], ViewError> {
    if !T::accepts(dtype) {
        return Err(ViewError::DType {
            actual: dtype,
            requested: T::DTYPE,
        });
    }
    <[T]>::ref_from_bytes(bytes).map_err(|_| ViewError::Layout {
        len: bytes.len(),
        requested: T::DTYPE,
    })
}

/// Mutable counterpart of [`view`].
///
/// # Errors
/// As [`view`].
pub fn view_mut<T: Element>(dtype: DType, bytes: &mut [u8]) -> Result<&mut [T], ViewError> {
    if !T::accepts(dtype) {
        return Err(ViewError::DType {
            actual: dtype,
            requested: T::DTYPE,
        });
    }
    let len = bytes.len();
    <[T]>::mut_from_bytes(bytes).map_err(|_| ViewError::Layout {
        len,
        requested: T::DTYPE,
    })
}

/// Alignment of [`HostBuffer`] storage in bytes: a cache line, enough for every element type
/// and for SIMD loads.
pub const HOST_ALIGN: usize = 64;

#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(64))]
struct Line([u8; HOST_ALIGN]);

/// A zero-initialised, [`HOST_ALIGN`]-aligned host buffer of a fixed length, allocated once.
#[derive(Clone)]
pub struct HostBuffer {
    lines: Vec<Line>,
    len: usize,
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({} bytes)", self.len)
    }
}

impl HostBuffer {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        HostBuffer {
            lines: vec![Line([0; HOST_ALIGN]); len.div_ceil(HOST_ALIGN)],
            len,
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.lines.as_bytes()[..self.len]
    }
    /// The bytes, mutable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.lines.as_mut_bytes()[..self.len]
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

    #[test]
    fn views_check_dtype_and_layout() {
        let mut b = HostBuffer::zeroed(16);
        assert_eq!(b.as_bytes().as_ptr() as usize % HOST_ALIGN, 0);
        view_mut::<f32>(DType::F32, b.as_bytes_mut()).unwrap()[1] = 2.5;
        assert_eq!(
            view::<f32>(DType::F32, b.as_bytes()).unwrap(),
            [0.0, 2.5, 0.0, 0.0]
        );
        assert_eq!(
            view::<i64>(DType::F32, b.as_bytes()),
            Err(ViewError::DType {
                actual: DType::F32,
                requested: DType::I64
            })
        );
        assert_eq!(
            view::<u8>(DType::Bool, b.as_bytes()).map(|v| v.len()),
            Ok(16)
        );
        assert_eq!(
            view::<f32>(DType::F32, &b.as_bytes()[1..9]),
            Err(ViewError::Layout {
                len: 8,
                requested: DType::F32
            })
        );
        assert_eq!(
            view::<f16>(DType::F16, b.as_bytes()).map(|v| v.len()),
            Ok(8)
        );
    }
}
