//! The engine's values: element types, buffers and the tensors that view them; with the
//! element-wise programs ([`program`]) and the front end's errors ([`error`]). The first stage
//! of the engine: it knows nothing about tract, CUDA or any operator.
//!
//! # Tensors, views, buffers
//! A [`Buffer`] is a span of memory of one element type: an activation (placed in the
//! session workspace by the memory plan), a network input or output (a region the session
//! binds), or a weight (uploaded once with the plan). A [`Tensor`] is a *view* of a buffer: a
//! shape, an offset and a stride per dimension, all in elements. Reshape, squeeze, unsqueeze,
//! transpose, slice and broadcast create new views of the same buffer (no copy); a step that
//! needs a packed operand (cuDNN, cuBLAS) gets a copy into a fresh buffer when its view is not
//! packed. A buffer may be *placed* inside another one (copy elision): its elements then live
//! at an element offset of the other buffer, which is how a concatenation disappears when its
//! producers write straight into the slices of its output.
//!
//! Shapes are row-major, outermost first, at most [`MAX_RANK`] dimensions. The steps over
//! these tensors are the operators ([`crate::native::ops`]); the network is a
//! [`crate::native::graph::Graph`] of them.

use std::fmt;

pub mod error;
pub mod program;

/// Largest tensor rank the IR represents (ONNX models in scope use at most 6).
pub const MAX_RANK: usize = 8;

/// Element type of a buffer. The discriminants are shared with the kernels
/// (`runtime/kernels/native.cu`, `enum dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ElemType {
    /// IEEE binary32.
    F32 = 0,
    /// IEEE binary16.
    F16 = 1,
    /// 32-bit signed integer.
    I32 = 2,
    /// 64-bit signed integer.
    I64 = 3,
    /// 8-bit unsigned integer.
    U8 = 4,
    /// 8-bit signed integer.
    I8 = 5,
    /// Boolean, one byte (0 or 1).
    Bool = 6,
}

impl ElemType {
    /// The type with discriminant `code` (the kernels' `dtype` field).
    pub fn from_code(code: u32) -> Option<ElemType> {
        use ElemType::*;
        [F32, F16, I32, I64, U8, I8, Bool]
            .into_iter()
            .find(|t| *t as u32 == code)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F16 => 2,
            ElemType::I64 => 8,
            ElemType::U8 | ElemType::I8 | ElemType::Bool => 1,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, ElemType::F32 | ElemType::F16)
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
            ElemType::U8 => "u8",
            ElemType::I8 => "i8",
            ElemType::Bool => "bool",
        };
        f.write_str(s)
    }
}

/// Index of a tensor in [`crate::native::graph::Graph::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// Index of a buffer in [`crate::native::graph::Graph::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub usize);

/// What a buffer is.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// An intermediate tensor: placed in the workspace by the memory planner.
    Activation,
    /// Network input `i` (a region the session binds; read-only for the engine).
    Input(usize),
    /// Network output `i` (a region the session binds; written on every run).
    Output(usize),
    /// A weight: its bytes (native endianness, in the buffer's element type), uploaded once.
    Weight(Vec<u8>),
}

/// A span of memory of one element type.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// For messages and plan dumps.
    pub name: String,
    /// Element type.
    pub dtype: ElemType,
    /// Length in elements.
    pub len: usize,
    /// What it is.
    pub kind: BufferKind,
    /// Copy elision: this buffer's elements live in another buffer, starting at the given
    /// element offset. Only activations are placed, only into activations or outputs.
    pub placed_in: Option<(BufferId, usize)>,
}

/// A view of a buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// For messages: the ONNX value name, or what the view is.
    pub name: String,
    /// The buffer viewed.
    pub buffer: BufferId,
    /// Element type (always the buffer's).
    pub dtype: ElemType,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Offset of element `[0, 0, ...]` from the buffer's first element, in elements.
    pub offset: usize,
    /// Stride of each dimension in elements; 0 for a broadcast dimension.
    pub strides: Vec<isize>,
}

/// Packed channels-last strides of a logical `[N, C, H, W]` (or `[O, C, kH, kW]`) shape:
/// NHWC (OHWI) memory order.
pub fn nhwc_strides(shape: &[usize; 4]) -> [isize; 4] {
    let [_, c, h, w] = shape.map(|v| v.max(1) as isize);
    [h * w * c, 1, w * c, c]
}

/// Packed row-major strides of `shape`.
pub fn packed_strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i].max(1) as isize;
    }
    s
}

/// A view of a buffer seen through other strides: the view (`shape`, `strides`, and `offset`,
/// in elements of a packed row-major buffer of dims `d`) re-expressed over the same elements
/// laid out with strides `q` (one per dimension of `d`), as its strides and offset there, or
/// `None` when it does not map. Each view dimension must step along one buffer dimension
/// without carrying into the next (slices, strided slices, splits, broadcasts), or span whole
/// buffer dimensions that are adjacent under `q` too (`[N, C, H * W]` of an `[N, C, H, W]`
/// buffer whose H and W stay adjacent). Dimensions of size 1 get stride 0.
///
/// Used by the channels-last layout (`q`: NHWC strides of an NCHW buffer) and by copy
/// write-through (`q`: a copy's strided destination).
pub fn map_view(
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    d: &[usize],
    q: &[isize],
) -> Option<(Vec<isize>, isize)> {
    let rank = d.len();
    if q.len() != rank || strides.len() != shape.len() {
        return None;
    }
    let p = packed_strides(d);
    let len: usize = d.iter().product();
    if offset >= len {
        return None;
    }
    // The offset's coordinates.
    let mut coord = vec![0usize; rank];
    let mut rem = offset;
    for j in 0..rank {
        coord[j] = rem / p[j] as usize;
        rem %= p[j] as usize;
    }
    let mut reach = coord.clone();
    let mut whole = vec![false; rank];
    let mut out = vec![0isize; shape.len()];
    for k in 0..shape.len() {
        let (n, s) = (shape[k], strides[k]);
        if n <= 1 || s == 0 {
            continue;
        }
        let s = usize::try_from(s).ok()?;
        // One buffer dimension: the outermost one whose stride divides `s` (an inner one
        // would carry on the first step).
        let j = (0..rank).find(|&j| d[j] > 1 && s % p[j] as usize == 0)?;
        let m = s / p[j] as usize;
        if !whole[j] && reach[j] + m * (n - 1) < d[j] {
            reach[j] += m * (n - 1);
            out[k] = (m as isize) * q[j];
            continue;
        }
        // Whole buffer dimensions `j0..=j` merged (step 1, starting at coordinate 0), adjacent
        // under `q` as well.
        if m != 1 {
            return None;
        }
        let mut span = 1usize;
        let mut j0 = j + 1;
        while span < n && j0 > 0 {
            j0 -= 1;
            span *= d[j0];
        }
        if span != n {
            return None;
        }
        let run: Vec<usize> = (j0..=j).filter(|&i| d[i] > 1).collect();
        let adjacent = run
            .windows(2)
            .all(|w| q[w[0]] == q[w[1]] * d[w[1]] as isize);
        if !adjacent
            || run
                .iter()
                .any(|&i| coord[i] != 0 || whole[i] || reach[i] != 0)
        {
            return None;
        }
        for &i in &run {
            whole[i] = true;
            reach[i] = d[i] - 1;
        }
        out[k] = q[j];
    }
    let off = (0..rank).map(|j| coord[j] as isize * q[j]).sum();
    Some((out, off))
}

impl Tensor {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the view is packed row-major (dimensions of size 1 may have any stride).
    pub fn is_packed(&self) -> bool {
        self.packed_from(0).is_some()
    }

    /// The element count of the axes from `axis` on, when they are packed row-major among
    /// themselves (dimensions of size 1 may have any stride); `None` otherwise.
    pub fn packed_from(&self, axis: usize) -> Option<usize> {
        let mut acc = 1isize;
        for i in (axis..self.shape.len()).rev() {
            if self.shape[i] != 1 {
                if self.strides[i] != acc {
                    return None;
                }
                acc *= self.shape[i] as isize;
            }
        }
        usize::try_from(acc).ok()
    }

    /// True when the view is 4-D and packed channels-last ([`nhwc_strides`]; dimensions of
    /// size 1 may have any stride).
    pub fn is_packed_nhwc(&self) -> bool {
        let Ok(shape) = <[usize; 4]>::try_from(self.shape.as_slice()) else {
            return false;
        };
        let want = nhwc_strides(&shape);
        (0..4).all(|d| shape[d] == 1 || self.strides[d] == want[d])
    }

    /// The pixel pitch `p` of a 4-D channels-last view with pitched pixels: strides
    /// `[H * W * p, 1, W * p, p]` (elements; dimensions of size 1 may have any stride) with
    /// `p >= C`. A packed NHWC view has `p = C`; a slice of channels of a packed NHWC buffer
    /// (one input of a channel concatenation, one output of a channel split) has the
    /// buffer's channel count. `None` for any other view.
    pub fn nhwc_pitch(&self) -> Option<usize> {
        let [n, c, h, w] = <[usize; 4]>::try_from(self.shape.as_slice()).ok()?;
        let s = &self.strides;
        let p = if w > 1 {
            usize::try_from(s[3]).ok()?
        } else if h > 1 {
            usize::try_from(s[2]).ok()?
        } else if n > 1 {
            // H = W = 1: the batch stride is the pitch.
            usize::try_from(s[0]).ok()?
        } else {
            c
        };
        let want = [h * w * p, 1, w * p, p];
        (p >= c && (0..4).all(|d| self.shape[d] == 1 || s[d] == want[d] as isize)).then_some(p)
    }

    /// The range of buffer elements the view touches, `[first, last + 1)`, or `None` for an
    /// empty tensor.
    pub fn extent(&self) -> Option<(usize, usize)> {
        if self.numel() == 0 {
            return None;
        }
        let mut lo = self.offset as isize;
        let mut hi = self.offset as isize;
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            let span = (d as isize - 1) * s;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        Some((lo as usize, hi as usize + 1))
    }

    /// The same element mapping as `other` (shape, offset and the strides of every
    /// dimension larger than 1), buffers aside.
    pub fn same_mapping(&self, other: &Tensor, self_shift: isize) -> bool {
        self.shape == other.shape
            && self.offset as isize + self_shift == other.offset as isize
            && self
                .shape
                .iter()
                .zip(self.strides.iter().zip(&other.strides))
                .all(|(&d, (a, b))| d == 1 || a == b)
    }
}

/// Visit every element of a view in row-major order of its shape: `f(linear index, element
/// offset from the tensor's element 0)`.
pub fn for_each_offset(shape: &[usize], strides: &[isize], mut f: impl FnMut(usize, isize)) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut off = 0isize;
    for lin in 0..n {
        f(lin, off);
        for d in (0..rank).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d] as isize;
            idx[d] = 0;
        }
    }
}

/// Read access to the tensors and buffers of a network (what an operator sees of the
/// [`crate::native::graph::Graph`] it belongs to).
pub trait Views {
    /// A tensor.
    fn tensor(&self, t: TensorId) -> &Tensor;

    /// A buffer.
    fn buffer(&self, b: BufferId) -> &Buffer;

    /// The buffer a buffer finally lives in and the element offset there (following
    /// placements).
    fn root(&self, b: BufferId) -> (BufferId, usize) {
        let (mut b, mut off) = (b, 0);
        while let Some((into, at)) = self.buffer(b).placed_in {
            off += at;
            b = into;
        }
        (b, off)
    }

    /// A tensor's root buffer and its offset there (elements).
    fn tensor_root(&self, t: TensorId) -> (BufferId, usize) {
        let tensor = self.tensor(t);
        let (b, off) = self.root(tensor.buffer);
        (b, off + tensor.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_walk_a_transposed_view() {
        let mut seen = Vec::new();
        for_each_offset(&[2, 3], &[1, 2], |i, off| seen.push((i, off)));
        assert_eq!(seen, vec![(0, 0), (1, 2), (2, 4), (3, 1), (4, 3), (5, 5)]);
    }

    #[test]
    fn packed_strides_and_extent() {
        assert_eq!(packed_strides(&[2, 3, 4]), vec![12, 4, 1]);
        let t = Tensor {
            name: "t".into(),
            buffer: BufferId(0),
            dtype: ElemType::F32,
            shape: vec![2, 3],
            offset: 5,
            strides: vec![1, 2],
        };
        assert!(!t.is_packed());
        assert_eq!(t.extent(), Some((5, 11)));
        let p = Tensor {
            shape: vec![1, 3, 1],
            strides: vec![99, 1, 7],
            ..t.clone()
        };
        assert!(p.is_packed());
    }

    #[test]
    fn nhwc_pitch_of_packed_sliced_and_other_views() {
        let view = |shape: &[usize], strides: &[isize]| Tensor {
            name: "t".into(),
            buffer: BufferId(0),
            dtype: ElemType::F16,
            shape: shape.to_vec(),
            offset: 0,
            strides: strides.to_vec(),
        };
        // Packed NHWC [1, 16, 4, 5]: pitch 16.
        let packed = view(&[1, 16, 4, 5], &nhwc_strides(&[1, 16, 4, 5]));
        assert_eq!(packed.nhwc_pitch(), Some(16));
        assert!(packed.is_packed_nhwc());
        // Channels 16..32 of an NHWC [2, 48, 4, 5] buffer: pitch 48.
        let slice = view(&[2, 16, 4, 5], &[4 * 5 * 48, 1, 5 * 48, 48]);
        assert_eq!(slice.nhwc_pitch(), Some(48));
        assert!(!slice.is_packed_nhwc());
        // W = 1: the pitch is read off H's stride; H = W = 1: off N's.
        assert_eq!(view(&[1, 8, 3, 1], &[0, 1, 24, 0]).nhwc_pitch(), Some(24));
        assert_eq!(view(&[2, 8, 1, 1], &[24, 1, 0, 0]).nhwc_pitch(), Some(24));
        // Not channels-last with a pitch: NCHW, a pitch below the channels, a row stride
        // that is not W pitches, a batch stride that is not H * W pitches, not 4-D.
        assert_eq!(
            view(&[1, 16, 4, 5], &packed_strides(&[1, 16, 4, 5])).nhwc_pitch(),
            None
        );
        assert_eq!(view(&[1, 16, 4, 5], &[0, 1, 40, 8]).nhwc_pitch(), None);
        assert_eq!(view(&[1, 16, 4, 5], &[0, 1, 250, 48]).nhwc_pitch(), None);
        assert_eq!(view(&[2, 16, 4, 5], &[999, 1, 240, 48]).nhwc_pitch(), None);
        assert_eq!(view(&[16, 20], &[1, 16]).nhwc_pitch(), None);
    }

    #[test]
    fn map_view_onto_a_strided_destination() {
        // Channels 2..5 of a packed [1, 5, 2, 2] buffer (seen as [1, 5, 4]) laid out with the
        // strides of columns 1..5 of a [1, 5, 6] buffer.
        let d = [1, 5, 4];
        let q = [30, 6, 1];
        assert_eq!(
            map_view(&[1, 3, 2, 2], &[20, 4, 2, 1], 8, &d, &q),
            Some((vec![0, 6, 2, 1], 12))
        );
        // The whole buffer as [1, 20]: rows and columns do not stay adjacent.
        assert_eq!(map_view(&[1, 20], &[20, 1], 0, &d, &q), None);
        // A step that carries from one column into the next row.
        assert_eq!(map_view(&[1, 3], &[0, 3], 0, &d, &q), None);
        // A transposed view maps element by element.
        assert_eq!(
            map_view(&[1, 4, 5], &[20, 1, 4], 0, &d, &q),
            Some((vec![0, 1, 6], 0))
        );
    }
}
