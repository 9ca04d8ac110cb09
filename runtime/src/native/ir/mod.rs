//! The engine's intermediate representation: a list of steps over tensors that are views of
//! buffers.
//!
//! The IR knows nothing about tract or CUDA. A [`Graph`] is built by the front end
//! ([`crate::native::front`]), rewritten by the passes ([`crate::native::passes::rewrite`]: element-wise fusion, copy
//! elision, precision), laid out by the memory planner ([`crate::native::plan::memory`]) and executed by the
//! host reference executor ([`crate::native::exec::reference`]) or the GPU executor.
//!
//! # Tensors, views, buffers
//! A [`Buffer`] is a span of memory of one element type: an activation (placed in the
//! session workspace by the planner), a network input or output (a region the session binds),
//! or a weight (uploaded once into the plan). A [`Tensor`] is a *view* of a buffer: a shape,
//! an offset and a stride per dimension, all in elements. Reshape, squeeze, unsqueeze,
//! transpose, slice and broadcast create new views of the same buffer (no copy); a step that
//! needs a packed operand (cuDNN, cuBLAS) gets a [`StepKind::Copy`] into a fresh buffer when
//! its view is not packed. A buffer may be *placed* inside another one (copy elision): its
//! elements then live at an element offset of the other buffer, which is how a concatenation
//! disappears when its producers write straight into the slices of its output.
//!
//! Shapes are row-major, outermost first, at most [`MAX_RANK`] dimensions after the IR's own
//! collapsing (the network's tensors may have up to 8).

use std::fmt;

pub mod program;

use program::Program;

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

/// Index of a tensor in [`Graph::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// Index of a buffer in [`Graph::buffers`].
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

/// A convolution (cross-correlation, ONNX `Conv` semantics) over packed NCHW `x` with packed
/// OIHW weights `w`, writing packed NCHW `y`, or, with `channels_last`, over NHWC `x` and `y`
/// (packed, or with a pixel pitch: [`Tensor::nhwc_pitch`]) with packed OHWI (cuDNN's KRSC)
/// weights; bias and activation are separate
/// element-wise steps (fused with each other, not with the convolution). Shapes are logical
/// (`[N, C, H, W]`, `[O, C / group, kH, kW]`) in both layouts: only the strides differ.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// Input `[N, C, H, W]` (or `[N, C, L]` for 1-D).
    pub x: TensorId,
    /// Weights `[O, C / group, kH, kW]`.
    pub w: TensorId,
    /// Output `[N, O, oH, oW]`.
    pub y: TensorId,
    /// Padding before (and after: symmetric) each spatial axis.
    pub pads: Vec<usize>,
    /// Stride of each spatial axis.
    pub strides: Vec<usize>,
    /// Dilation of each spatial axis.
    pub dilations: Vec<usize>,
    /// Group count (`C` for depthwise).
    pub group: usize,
    /// `x` and `y` NHWC (packed or pitched, [`Tensor::nhwc_pitch`]), `w` packed OHWI (2-D
    /// forward convolutions only; set by [`crate::native::passes::layout`]).
    pub channels_last: bool,
}

/// Pooling kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Maximum over the window (padding never wins).
    Max,
    /// Mean over the window, counting padded positions (`count_include_pad = 1`).
    AvgIncludePad,
    /// Mean over the window's positions inside the input.
    AvgExcludePad,
}

/// A 2-D (or 1-D) pooling over packed NCHW, or NHWC with `channels_last` (2-D only; packed or
/// pitched, [`Tensor::nhwc_pitch`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Input `[N, C, H, W]`.
    pub x: TensorId,
    /// Output `[N, C, oH, oW]`.
    pub y: TensorId,
    /// Kind.
    pub kind: PoolKind,
    /// Window per spatial axis.
    pub kernel: Vec<usize>,
    /// Symmetric padding per spatial axis.
    pub pads: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// `x` and `y` NHWC, packed or pitched (set by [`crate::native::passes::layout`]).
    pub channels_last: bool,
}

/// A batched matrix product `c[b, m, n] = sum_k a[b, m, k] * b[b, k, n]`, every operand
/// addressed through its own strides (in elements, from its tensor's offset). A batch stride
/// of 0 broadcasts an operand over the batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    /// Left operand.
    pub a: TensorId,
    /// Right operand.
    pub b: TensorId,
    /// Result.
    pub c: TensorId,
    /// Batch count.
    pub batch: usize,
    /// Rows of `c`.
    pub m: usize,
    /// Columns of `c`.
    pub n: usize,
    /// Contracted length.
    pub k: usize,
    /// `a` strides: batch, m, k.
    pub sa: [isize; 3],
    /// `b` strides: batch, k, n.
    pub sb: [isize; 3],
    /// `c` strides: batch, m, n.
    pub sc: [isize; 3],
}

/// Softmax (or log-softmax) over the middle axis of a packed `[outer, n, inner]` view.
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed, same shape).
    pub y: TensorId,
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// Length of the axis.
    pub n: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
    /// Log-softmax.
    pub log: bool,
}

/// Reduction kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ReduceKind {
    /// Sum.
    Sum = 0,
    /// Mean of the squares (sum of `x * x`, divided by n).
    MeanOfSquares = 1,
    /// Maximum.
    Max = 2,
    /// Minimum.
    Min = 3,
    /// Product.
    Prod = 4,
}

/// A reduction over the middle axis of a packed `[outer, n, inner]` view, writing packed
/// `[outer, inner]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Product of the dimensions before the reduced axes.
    pub outer: usize,
    /// Product of the reduced dimensions.
    pub n: usize,
    /// Product of the dimensions after the reduced axes.
    pub inner: usize,
    /// Kind.
    pub kind: ReduceKind,
}

/// `y = data.take(indices, axis)` over packed `data` `[outer, n, inner]` and packed `i64`
/// indices (`[count]`, negative counted from the end), writing packed `[outer, count, inner]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    /// Data (packed).
    pub data: TensorId,
    /// Indices (packed, i64 or i32).
    pub indices: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// Length of the axis.
    pub n: usize,
    /// Product of the dimensions after the axis.
    pub inner: usize,
    /// Number of indices.
    pub count: usize,
}

/// Separable resampling of the last two axes of packed `x` `[outer, h_in, w_in]` into packed
/// `y` `[outer, h_out, w_out]` (ONNX `Resize`, nearest/linear/cubic): output row `r` reads
/// input rows `iy[r * win_h + a]` with weights `wy[r * win_h + a]`, output column `c` input
/// columns `ix[c * win_w + b]` with weights `wx[..]`; the tables are tract's own resampling
/// plans, computed at load. `y[o, r, c] = sum_b wx_b * (sum_a wy_a * x[o, iy_a, ix_b])`,
/// zero-weight taps skipped (tract's order: rows first, then columns).
#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    /// Input (packed).
    pub x: TensorId,
    /// Output (packed).
    pub y: TensorId,
    /// Row table: i32 `[h_out * win_h]`.
    pub iy: TensorId,
    /// Row weights: f32 `[h_out * win_h]`.
    pub wy: TensorId,
    /// Column table: i32 `[w_out * win_w]`.
    pub ix: TensorId,
    /// Column weights: f32 `[w_out * win_w]`.
    pub wx: TensorId,
    /// Product of the leading dimensions.
    pub outer: usize,
    /// Input rows and columns.
    pub h_in: usize,
    /// See `h_in`.
    pub w_in: usize,
    /// Output rows and columns.
    pub h_out: usize,
    /// See `h_out`.
    pub w_out: usize,
    /// Taps per output row.
    pub win_h: usize,
    /// Taps per output column.
    pub win_w: usize,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// `output[i] = program(inputs[0][i], inputs[1][i], ...)` over the output's shape; every
    /// input is a view with the output's shape (broadcasts are stride-0 views).
    Elementwise {
        /// Input views.
        inputs: Vec<TensorId>,
        /// Output view.
        output: TensorId,
        /// The per-element program.
        program: Program,
    },
    /// `dst[i] = src[i]`, same shape and element type (transposes, slices, concatenation
    /// pieces, network outputs, packing a view for a library call).
    Copy {
        /// Source view.
        src: TensorId,
        /// Destination view.
        dst: TensorId,
    },
    /// cuDNN convolution.
    Conv(Conv),
    /// cuDNN transposed convolution (`cudnnConvolutionBackwardData`): ONNX `ConvTranspose`.
    /// `w` is the *forward* filter `[C_in, C_out / group, kH, kW]` (ONNX's own layout), `x` is
    /// `[N, C_in, H, W]`, `y` is `[N, C_out, oH, oW]`; `pads`/`strides`/`dilations` are those
    /// of the forward convolution that maps `y`-shaped tensors to `x`-shaped ones.
    Deconv(Conv),
    /// cuDNN pooling.
    Pool(Pool),
    /// cuBLAS matrix product.
    Gemm(Gemm),
    /// Softmax over one axis.
    Softmax(Softmax),
    /// Reduction over contiguous axes.
    Reduce(Reduce),
    /// Gather along one axis.
    Gather(Gather),
    /// Resampling of the last two axes.
    Resize(Resize),
}

/// One step, named after the network node it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The node's name (several steps may share one).
    pub node: String,
    /// What it does.
    pub kind: StepKind,
}

impl Step {
    /// Tensors the step reads.
    pub fn reads(&self) -> Vec<TensorId> {
        match &self.kind {
            StepKind::Elementwise { inputs, .. } => inputs.clone(),
            StepKind::Copy { src, .. } => vec![*src],
            StepKind::Conv(c) | StepKind::Deconv(c) => vec![c.x, c.w],
            StepKind::Pool(p) => vec![p.x],
            StepKind::Gemm(g) => vec![g.a, g.b],
            StepKind::Softmax(s) => vec![s.x],
            StepKind::Reduce(r) => vec![r.x],
            StepKind::Gather(g) => vec![g.data, g.indices],
            StepKind::Resize(r) => vec![r.x, r.iy, r.wy, r.ix, r.wx],
        }
    }

    /// The tensor the step writes.
    pub fn writes(&self) -> TensorId {
        match &self.kind {
            StepKind::Elementwise { output, .. } => *output,
            StepKind::Copy { dst, .. } => *dst,
            StepKind::Conv(c) | StepKind::Deconv(c) => c.y,
            StepKind::Pool(p) => p.y,
            StepKind::Gemm(g) => g.c,
            StepKind::Softmax(s) => s.y,
            StepKind::Reduce(r) => r.y,
            StepKind::Gather(g) => g.y,
            StepKind::Resize(r) => r.y,
        }
    }

    /// Short name of the step kind, for plan dumps.
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            StepKind::Elementwise { .. } => "elementwise",
            StepKind::Copy { .. } => "copy",
            StepKind::Conv(_) => "conv",
            StepKind::Deconv(_) => "deconv",
            StepKind::Pool(_) => "pool",
            StepKind::Gemm(_) => "gemm",
            StepKind::Softmax(_) => "softmax",
            StepKind::Reduce(_) => "reduce",
            StepKind::Gather(_) => "gather",
            StepKind::Resize(_) => "resize",
        }
    }
}

/// A network input or output as the engine binds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Io {
    /// The ONNX name.
    pub name: String,
    /// The tensor (a packed view of an [`BufferKind::Input`] / [`BufferKind::Output`] buffer).
    pub tensor: TensorId,
}

/// A lowered network.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Every tensor (view).
    pub tensors: Vec<Tensor>,
    /// Every buffer.
    pub buffers: Vec<Buffer>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// Network inputs, in the network's order.
    pub inputs: Vec<Io>,
    /// Network outputs, in the network's order.
    pub outputs: Vec<Io>,
}

impl Graph {
    /// A tensor.
    pub fn tensor(&self, t: TensorId) -> &Tensor {
        &self.tensors[t.0]
    }

    /// A buffer.
    pub fn buffer(&self, b: BufferId) -> &Buffer {
        &self.buffers[b.0]
    }

    /// Add a buffer.
    pub fn add_buffer(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        len: usize,
        kind: BufferKind,
    ) -> BufferId {
        self.buffers.push(Buffer {
            name: name.into(),
            dtype,
            len,
            kind,
            placed_in: None,
        });
        BufferId(self.buffers.len() - 1)
    }

    /// Add a packed tensor over a new buffer of its size.
    pub fn add_packed(
        &mut self,
        name: impl Into<String>,
        dtype: ElemType,
        shape: &[usize],
        kind: BufferKind,
    ) -> TensorId {
        let name = name.into();
        let len = shape.iter().product();
        let buffer = self.add_buffer(name.clone(), dtype, len, kind);
        self.add_view(Tensor {
            name,
            buffer,
            dtype,
            shape: shape.to_vec(),
            offset: 0,
            strides: packed_strides(shape),
        })
    }

    /// Add a view.
    pub fn add_view(&mut self, t: Tensor) -> TensorId {
        self.tensors.push(t);
        TensorId(self.tensors.len() - 1)
    }

    /// The buffer a buffer finally lives in and the element offset there (following
    /// placements).
    pub fn root(&self, mut b: BufferId) -> (BufferId, usize) {
        let mut off = 0;
        while let Some((into, at)) = self.buffers[b.0].placed_in {
            off += at;
            b = into;
        }
        (b, off)
    }

    /// A tensor's root buffer and its offset there (elements).
    pub fn tensor_root(&self, t: TensorId) -> (BufferId, usize) {
        let tensor = &self.tensors[t.0];
        let (b, off) = self.root(tensor.buffer);
        (b, off + tensor.offset)
    }

    /// Every tensor that views buffer `b` (directly, not through placement).
    pub fn views_of(&self, b: BufferId) -> Vec<TensorId> {
        (0..self.tensors.len())
            .filter(|&i| self.tensors[i].buffer == b)
            .map(TensorId)
            .collect()
    }

    /// Check the graph's invariants: every view stays inside its buffer, has its buffer's
    /// element type and a stride per dimension; steps read and write tensors that exist;
    /// element-wise inputs have the output's shape; no step writes an input or a weight.
    ///
    /// # Errors
    /// A description of the first violation (a bug in the front end or a pass).
    pub fn validate(&self) -> Result<(), String> {
        for (i, t) in self.tensors.iter().enumerate() {
            let b = self
                .buffers
                .get(t.buffer.0)
                .ok_or_else(|| format!("tensor {i} `{}`: no buffer {}", t.name, t.buffer.0))?;
            if t.dtype != b.dtype {
                return Err(format!(
                    "tensor {i} `{}` is {} but its buffer `{}` is {}",
                    t.name, t.dtype, b.name, b.dtype
                ));
            }
            if t.shape.len() != t.strides.len() || t.shape.len() > MAX_RANK {
                return Err(format!(
                    "tensor {i} `{}`: shape {:?} strides {:?}",
                    t.name, t.shape, t.strides
                ));
            }
            if let Some((lo, hi)) = t.extent()
                && (hi > b.len || (lo as isize) < 0)
            {
                return Err(format!(
                    "tensor {i} `{}` spans elements {lo}..{hi} of buffer `{}` ({} elements)",
                    t.name, b.name, b.len
                ));
            }
        }
        for (i, b) in self.buffers.iter().enumerate() {
            if let Some((into, at)) = b.placed_in {
                let host = &self.buffers[into.0];
                if host.dtype != b.dtype || at + b.len > host.len {
                    return Err(format!(
                        "buffer {i} `{}` ({} x {}) placed at {at} of `{}` ({} x {})",
                        b.name, b.len, b.dtype, host.name, host.len, host.dtype
                    ));
                }
            }
        }
        for (si, s) in self.steps.iter().enumerate() {
            for t in s.reads().into_iter().chain(std::iter::once(s.writes())) {
                if t.0 >= self.tensors.len() {
                    return Err(format!("step {si} ({}) uses tensor {}", s.node, t.0));
                }
            }
            let w = self.tensor(s.writes());
            let (root, _) = self.root(w.buffer);
            if matches!(
                self.buffers[root.0].kind,
                BufferKind::Input(_) | BufferKind::Weight(_)
            ) {
                return Err(format!(
                    "step {si} ({}) writes `{}`, an input or weight",
                    s.node, w.name
                ));
            }
            match &s.kind {
                StepKind::Elementwise {
                    inputs,
                    output,
                    program,
                } => {
                    let out = self.tensor(*output);
                    for &t in inputs {
                        if self.tensor(t).shape != out.shape {
                            return Err(format!(
                                "step {si} ({}): input `{}` {:?} vs output {:?}",
                                s.node,
                                self.tensor(t).name,
                                self.tensor(t).shape,
                                out.shape
                            ));
                        }
                    }
                    program
                        .validate(inputs.len())
                        .map_err(|e| format!("step {si} ({}): {e}", s.node))?;
                }
                StepKind::Copy { src, dst } => {
                    let (a, b) = (self.tensor(*src), self.tensor(*dst));
                    if a.shape != b.shape || a.dtype != b.dtype {
                        return Err(format!(
                            "step {si} ({}): copy {} {:?} -> {} {:?}",
                            s.node, a.dtype, a.shape, b.dtype, b.shape
                        ));
                    }
                }
                StepKind::Gather(gt) => {
                    let (d, y, i) = (
                        self.tensor(gt.data).dtype,
                        self.tensor(gt.y).dtype,
                        self.tensor(gt.indices).dtype,
                    );
                    if d != y || !matches!(i, ElemType::I32 | ElemType::I64) {
                        return Err(format!(
                            "step {si} ({}): gather of {d} into {y} with {i} indices",
                            s.node
                        ));
                    }
                }
                StepKind::Resize(r) => {
                    let ok = self.tensor(r.x).dtype.is_float()
                        && self.tensor(r.y).dtype.is_float()
                        && self.tensor(r.iy).dtype == ElemType::I32
                        && self.tensor(r.ix).dtype == ElemType::I32
                        && self.tensor(r.wy).dtype == ElemType::F32
                        && self.tensor(r.wx).dtype == ElemType::F32;
                    if !ok {
                        return Err(format!("step {si} ({}): resize tables", s.node));
                    }
                }
                // Library steps read and write one floating-point type.
                _ => {
                    let mut types = s.reads().into_iter().chain(std::iter::once(s.writes()));
                    let first = self.tensor(types.next().expect("a step reads")).dtype;
                    if !first.is_float() || types.any(|t| self.tensor(t).dtype != first) {
                        return Err(format!(
                            "step {si} ({}): {} over mixed or non-float types",
                            s.node,
                            s.kind_name()
                        ));
                    }
                    // cuDNN is told exactly one layout per convolution or pooling: packed
                    // NCHW (KCRS filter), or with `channels_last` NHWC activations, packed or
                    // with a pixel pitch, and a packed KRSC filter.
                    let (activations, filter, channels_last) = match &s.kind {
                        StepKind::Conv(c) => (vec![c.x, c.y], Some(c.w), c.channels_last),
                        StepKind::Pool(p) => (vec![p.x, p.y], None, p.channels_last),
                        StepKind::Deconv(c) if c.channels_last => {
                            return Err(format!("step {si} ({}): channels-last deconv", s.node));
                        }
                        StepKind::Deconv(c) => (vec![c.x, c.y], Some(c.w), false),
                        _ => (vec![], None, false),
                    };
                    let operands = activations
                        .into_iter()
                        .map(|t| (t, true))
                        .chain(filter.map(|t| (t, false)));
                    let fits = |(t, activation): (TensorId, bool)| {
                        let t = self.tensor(t);
                        match (channels_last, activation) {
                            (true, true) => t.nhwc_pitch().is_some(),
                            (true, false) => t.is_packed_nhwc(),
                            (false, _) => t.is_packed(),
                        }
                    };
                    if let Some((t, _)) = operands.into_iter().find(|&o| !fits(o)) {
                        let t = self.tensor(t);
                        return Err(format!(
                            "step {si} ({}): {} operand `{}` {:?} has strides {:?}",
                            s.node,
                            if channels_last {
                                "channels-last"
                            } else {
                                "NCHW"
                            },
                            t.name,
                            t.shape,
                            t.strides
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A one-line-per-step description (for `-vv` load logs and test failures).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, step) in self.steps.iter().enumerate() {
            let w = self.tensor(step.writes());
            let reads: Vec<String> = step
                .reads()
                .iter()
                .map(|&t| {
                    let t = self.tensor(t);
                    format!("{}{:?}", t.name, t.shape)
                })
                .collect();
            s.push_str(&format!(
                "{i:4} {:<11} {} <- [{}]  ({})\n",
                step.kind_name(),
                format_args!("{}{:?}", w.name, w.shape),
                reads.join(", "),
                step.node
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
