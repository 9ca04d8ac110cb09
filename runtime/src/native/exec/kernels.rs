//! The engine's kernel library (`runtime/kernels/native.cu`): the embedded images, the
//! kernels' parameter structs (one `#[repr(C)]` struct per kernel, mirrored field for field by
//! the CUDA source, sizes checked on both sides), and their construction from IR steps.

use crate::cuda::{CudaError, Function, KernelImage, KernelModule};

use crate::native::graph::Graph;
use crate::native::ir::program::{Expr, MAX_INPUTS, MAX_NODES, Program};
use crate::native::ir::{ElemType, Tensor, TensorId};

/// Rank of the kernels' index space (after collapsing).
pub const MAX_RANK: usize = 8;

/// The embedded kernel images (rebuilt by `runtime/kernels/build-kernels.sh`, digests in
/// `runtime/kernels/bin/SHA256SUMS`, architectures checked by `list-archs.sh` in CI).
pub static KERNEL_IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "native.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../../../kernels/bin/native.cu13.fatbin"),
    },
    KernelImage {
        name: "native.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../../../kernels/bin/native.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "native.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../../../kernels/bin/native.cu12.sm_90.cubin"),
    },
    KernelImage {
        name: "native.cu12.sm_100.cubin",
        cuda_major: 12,
        sm: Some(100),
        bytes: include_bytes!("../../../kernels/bin/native.cu12.sm_100.cubin"),
    },
];

/// The kernels' CUDA C source (for the opt-in NVRTC fallback).
pub const KERNEL_SOURCE: &str = include_str!("../../../kernels/native.cu");

/// One operand of [`EwParams`] (`struct ew_operand`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EwOperand {
    /// Device address of element `[0, 0, ...]`.
    pub ptr: u64,
    /// Stride per dimension of the collapsed shape, elements.
    pub strides: [i32; MAX_RANK],
    /// [`ElemType`] discriminant.
    pub dtype: u32,
    /// Padding.
    pub pad: u32,
}

/// One node of an element-wise program (`struct ew_node`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EwNode {
    /// 0: load input `a`; 254: the constant `imm`; else an `EwOp` code.
    pub op: u8,
    /// Input slot (load) or first operand node.
    pub a: u8,
    /// Second operand node.
    pub b: u8,
    /// Third operand node.
    pub c: u8,
    /// Constant or operator parameter.
    pub imm: f32,
}

/// Parameters of `ew_program` (`struct ew_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EwParams {
    /// Elements.
    pub n: u32,
    /// Rank of the collapsed shape.
    pub rank: u32,
    /// Inputs.
    pub n_inputs: u32,
    /// Program nodes.
    pub n_nodes: u32,
    /// 1 when every operand is packed over the shape (element `i` at offset `i`).
    pub packed: u32,
    /// Padding.
    pub pad: [u32; 3],
    /// Collapsed shape.
    pub shape: [u32; MAX_RANK],
    /// Output.
    pub out: EwOperand,
    /// Inputs.
    pub inputs: [EwOperand; MAX_INPUTS],
    /// Program.
    pub nodes: [EwNode; MAX_NODES],
}

/// Parameters of `bias_act` (`struct bias_act_params`): `y = act(x [+ b[c]]) [+ r]` over
/// `[outer, C, inner]` views whose axes after the channel axis are packed; `x`, `r` and `y`
/// each carry their own channel and outer strides (a slice of channels, a slot of a
/// concatenation), `b` holds one value per channel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BiasActParams {
    /// Element 0 of `x`.
    pub x: u64,
    /// Element 0 of the per-channel bias (`C` elements); 0 without one.
    pub b: u64,
    /// Element 0 of the residual `r`; 0 without one.
    pub r: u64,
    /// Element 0 of `y`.
    pub y: u64,
    /// Elements: `outer * C * inner`.
    pub n: u32,
    /// Elements per channel plane (product of the axes after the channel axis).
    pub inner: u32,
    /// Channels.
    pub channels: u32,
    /// 0: none, 1: SiLU, 2: sigmoid.
    pub act: u32,
    /// Element type codes of `x`, `b`, `r`, `y` ([`dtype_code`]).
    pub x_dtype: u32,
    /// See `x_dtype`.
    pub b_dtype: u32,
    /// See `x_dtype`.
    pub r_dtype: u32,
    /// See `x_dtype`.
    pub y_dtype: u32,
    /// Channel stride of `x`, elements.
    pub x_cs: u32,
    /// Outer stride of `x`, elements.
    pub x_os: u32,
    /// Channel stride of `r`.
    pub r_cs: u32,
    /// Outer stride of `r`.
    pub r_os: u32,
    /// Channel stride of `y`.
    pub y_cs: u32,
    /// Outer stride of `y`.
    pub y_os: u32,
    /// 1: add `b`; 2: add `r`; 4: four consecutive elements per thread ([`VEC4_MIN_ELEMENTS`]).
    pub flags: u32,
    /// Padding.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<BiasActParams>() == 96);

/// Smallest `bias_act` for four elements per thread. Below it a quarter of the threads
/// leaves the GPU short of parallelism and the step is latency-bound: on the H200 YOLOv8n at
/// 320 (at most 409,600 elements a step) ran its fp16 network 5 % slower with four elements
/// per thread on every step, DocLayNet at 1024 (up to 4.2 M) in 8.5 % less time (0.887 ->
/// 0.812 ms)
/// (`docs/evidence/native-h200.md`, fifth run).
pub const VEC4_MIN_ELEMENTS: u32 = 1 << 20;

impl BiasActParams {
    /// Set flag 4 (four consecutive elements per thread, one 8- or 16-byte access per
    /// operand: fp16 activations move 2 bytes per thread otherwise, too few to keep HBM busy)
    /// on tensors of at least [`VEC4_MIN_ELEMENTS`] elements, when it computes the same
    /// thing: `n` a multiple of 4; the four elements of a thread
    /// consecutive in memory in every operand (along the packed inner axes, `inner % 4 == 0`,
    /// or along the channels, `inner == 1` with unit channel strides and `C % 4 == 0`); every
    /// index of a run's first element a multiple of 4 (strides) and every operand fp32 or fp16
    /// with its address aligned to 4 elements.
    fn try_vec4(&mut self, min_elements: u32) {
        let has_r = self.flags & 2 != 0;
        let mut ops = vec![(self.x, self.x_dtype, self.x_cs, self.x_os)];
        ops.push((self.y, self.y_dtype, self.y_cs, self.y_os));
        if has_r {
            ops.push((self.r, self.r_dtype, self.r_cs, self.r_os));
        }
        let along_inner = self.inner.is_multiple_of(4);
        let along_channels = self.inner == 1 && self.channels.is_multiple_of(4);
        let ok = self.n.is_multiple_of(4)
            && self.n >= min_elements
            && (along_inner || along_channels)
            && ops.iter().all(|&(addr, dt, cs, os)| {
                let es = match dt {
                    0 => 4,
                    1 => 2,
                    _ => return false,
                };
                let cs_ok = if along_inner {
                    cs.is_multiple_of(4)
                } else {
                    cs == 1
                };
                addr.is_multiple_of(4 * es) && cs_ok && os.is_multiple_of(4)
            });
        if ok {
            self.flags |= 4;
        }
    }

    /// Threads the launch needs: one per element, or one per four with flag 4.
    pub fn threads(&self) -> u32 {
        if self.flags & 4 != 0 {
            self.n / 4
        } else {
            self.n
        }
    }
}

/// The `[outer, C, inner]` form of a view (rank >= 2, channel axis 1):
/// `(outer, C, inner, channel stride, outer stride)`, strides in elements (0 along an axis of
/// size 1). Channels-first: the axes after the channel axis are packed (`inner` their
/// product), `outer` is axis 0. Channels-last (NHWC, [`crate::native::passes::layout`]): every axis but the
/// channel axis walks as one run of stride `os` (`outer` their product, `inner` 1), as in
/// `[N, H, W]` with strides `[H * W * os, W * os, os]`.
fn channel_form(t: &Tensor) -> Option<(u32, u32, u32, u32, u32)> {
    if t.shape.len() < 2 {
        return None;
    }
    let stride = |d: usize| if t.shape[d] == 1 { 0 } else { t.strides[d] };
    let (outer, inner, os) = match t.packed_from(2) {
        Some(inner) => (t.shape[0], inner, stride(0)),
        None => {
            // The non-channel axes, innermost first, must chain: stride = previous stride *
            // previous size.
            let mut outer = 1usize;
            let mut os: Option<isize> = None;
            let mut next = 0isize;
            for d in (0..t.shape.len())
                .rev()
                .filter(|&d| d != 1 && t.shape[d] != 1)
            {
                match os {
                    None => os = Some(t.strides[d]),
                    Some(_) if t.strides[d] != next => return None,
                    Some(_) => {}
                }
                next = t.strides[d] * t.shape[d] as isize;
                outer *= t.shape[d];
            }
            (outer, 1, os.unwrap_or(0))
        }
    };
    Some((
        u32::try_from(outer).ok()?,
        u32::try_from(t.shape[1]).ok()?,
        u32::try_from(inner).ok()?,
        u32::try_from(stride(1)).ok()?,
        u32::try_from(os).ok()?,
    ))
}

/// The `bias_act` form of an element-wise step, when it is exactly `act(x + b)`,
/// `act(x + b) + r` (act: none, SiLU or sigmoid; either operand order of each addition) or
/// `x` alone (a cast or copy between float types), with `b` one value per channel (axis 1),
/// `x`, `r` and `y` of the output's shape, float, with packed axes after the channel axis,
/// and `y`'s elements distinct. `None` for anything else (the generic kernel runs it).
pub fn bias_act_params(
    g: &Graph,
    inputs: &[TensorId],
    output: TensorId,
    program: &Program,
    addr: &dyn Fn(TensorId) -> u64,
) -> Option<BiasActParams> {
    use crate::native::ir::program::EwOp;
    let nodes = &program.nodes;
    let out = g.tensor(output);
    let float = |dt: ElemType| matches!(dt, ElemType::F32 | ElemType::F16);
    let (outer, channels, inner, y_cs, y_os) = channel_form(out)?;
    let n = u32::try_from(out.numel()).ok().filter(|&n| n > 0)?;
    // Every output element written once: channel planes and outer blocks do not overlap.
    let distinct = (channels == 1 || y_cs >= inner)
        && (outer == 1
            || u64::from(y_os) >= u64::from(channels - 1) * u64::from(y_cs) + u64::from(inner));
    if !float(out.dtype) || !distinct {
        return None;
    }
    // An operand of the output's shape in the same `[outer, C, inner]` form.
    let full = |id: TensorId| {
        let t = g.tensor(id);
        let (o, c, i, cs, os) = channel_form(t)?;
        (t.shape == out.shape && float(t.dtype) && (o, c, i) == (outer, channels, inner))
            .then_some((cs, os, dtype_code(t.dtype)))
    };
    let mut p = BiasActParams {
        y: addr(output),
        n,
        inner,
        channels,
        y_dtype: dtype_code(out.dtype),
        y_cs,
        y_os,
        ..BiasActParams::default()
    };
    // `x` alone: a cast or copy.
    if let ([Expr::Input(0)], [x]) = (nodes.as_slice(), inputs) {
        let (cs, os, dt) = full(*x)?;
        (p.x, p.x_cs, p.x_os, p.x_dtype) = (addr(*x), cs, os, dt);
        p.try_vec4(VEC4_MIN_ELEMENTS);
        return Some(p);
    }
    if !(2..=3).contains(&inputs.len()) || nodes.len() < 3 {
        return None;
    }
    let (Expr::Input(a), Expr::Input(b)) = (&nodes[0], &nodes[1]) else {
        return None;
    };
    let Expr::Op {
        op: EwOp::Add,
        args: [a0, a1, _],
        ..
    } = nodes[2]
    else {
        return None;
    };
    if !matches!((a0, a1), (0, 1) | (1, 0)) || *a == *b || *a > 1 || *b > 1 {
        return None;
    }
    p.act = match nodes.get(3) {
        Some(Expr::Op {
            op: EwOp::Silu,
            args: [2, _, _],
            ..
        }) => 1,
        Some(Expr::Op {
            op: EwOp::Sigmoid,
            args: [2, _, _],
            ..
        }) => 2,
        _ => 0,
    };
    // The node holding act(x + b) (or x + b).
    let last = if p.act != 0 { 3 } else { 2 };
    // The rest: nothing (two inputs), or `in2` then `in2 + last` in either order.
    match (&nodes[last + 1..], inputs.len()) {
        ([], 2) => {}
        (
            [
                Expr::Input(2),
                Expr::Op {
                    op: EwOp::Add,
                    args: [u, v, _],
                    ..
                },
            ],
            3,
        ) if (*u, *v) == (last + 1, last) || (*u, *v) == (last, last + 1) => {
            let (cs, os, dt) = full(inputs[2])?;
            (p.r, p.r_cs, p.r_os, p.r_dtype) = (addr(inputs[2]), cs, os, dt);
            p.flags |= 2;
        }
        _ => return None,
    }
    for (xi, bi) in [(*a, *b), (*b, *a)] {
        let (xid, bid) = (inputs[xi], inputs[bi]);
        let bt = g.tensor(bid);
        let per_channel = bt.shape == out.shape
            && float(bt.dtype)
            && bt
                .strides
                .iter()
                .enumerate()
                .all(|(d, &s)| out.shape[d] == 1 || if d == 1 { s == 1 } else { s == 0 });
        if let (Some((cs, os, dt)), true) = (full(xid), per_channel) {
            (p.x, p.x_cs, p.x_os, p.x_dtype) = (addr(xid), cs, os, dt);
            (p.b, p.b_dtype) = (addr(bid), dtype_code(bt.dtype));
            p.flags |= 1;
            p.try_vec4(VEC4_MIN_ELEMENTS);
            return Some(p);
        }
    }
    None
}

/// Parameters of `strided_copy` (`struct copy_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CopyParams {
    /// Elements.
    pub n: u32,
    /// Rank of the collapsed shape.
    pub rank: u32,
    /// Bytes per element (1, 2, 4, 8).
    pub elem_bytes: u32,
    /// Padding.
    pub pad: u32,
    /// Collapsed shape.
    pub shape: [u32; MAX_RANK],
    /// Source element 0.
    pub src: u64,
    /// Destination element 0.
    pub dst: u64,
    /// Source strides, elements.
    pub src_strides: [i32; MAX_RANK],
    /// Destination strides, elements.
    pub dst_strides: [i32; MAX_RANK],
}

/// Parameters of `tiled_transpose` (`struct transpose_params`): a copy whose source is
/// contiguous along dimension `a` (`rows` long) and whose destination is contiguous along
/// dimension `b` (`cols` long), the other dimensions walked one tile plane at a time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TransposeParams {
    /// Source element 0.
    pub src: u64,
    /// Destination element 0.
    pub dst: u64,
    /// Length of `a`.
    pub rows: u32,
    /// Length of `b`.
    pub cols: u32,
    /// Source stride along `b`, elements (along `a`: 1).
    pub src_b_stride: i32,
    /// Destination stride along `a`, elements (along `b`: 1).
    pub dst_a_stride: i32,
    /// Product of the other dimensions.
    pub outer: u32,
    /// Number of other dimensions.
    pub rank: u32,
    /// Bytes per element (1, 2, 4, 8).
    pub elem_bytes: u32,
    /// Padding.
    pub pad: u32,
    /// The other dimensions.
    pub shape: [u32; MAX_RANK],
    /// Their source strides, elements.
    pub src_strides: [i32; MAX_RANK],
    /// Their destination strides, elements.
    pub dst_strides: [i32; MAX_RANK],
}

const _: () = assert!(std::mem::size_of::<TransposeParams>() == 144);

/// The `tiled_transpose` form of a copy (its parameters and grid), when the source and the
/// destination are contiguous along different dimensions (a layout conversion, NCHW <->
/// NHWC) and the tiles fit the grid; `None` for anything else (`strided_copy` runs it).
pub fn transpose_params(p: &CopyParams) -> Option<(TransposeParams, [u32; 3])> {
    let rank = p.rank as usize;
    // The destination-ordered collapse puts the destination's unit stride last.
    let b = rank.checked_sub(1)?;
    if p.dst_strides[b] != 1 || p.src_strides[b] == 1 {
        return None;
    }
    let a = (0..b).find(|&d| p.src_strides[d] == 1)?;
    let (rows, cols) = (p.shape[a], p.shape[b]);
    // Both tiled dimensions long enough for a tile to pay (a short destination run went to
    // the source-ordered walk in `copy_params`).
    if rows < 8 || cols < 32 {
        return None;
    }
    let tiles = |n: u32| n.div_ceil(32);
    if tiles(rows) > 65_535 {
        return None;
    }
    let mut t = TransposeParams {
        src: p.src,
        dst: p.dst,
        rows,
        cols,
        src_b_stride: p.src_strides[b],
        dst_a_stride: p.dst_strides[a],
        outer: 1,
        elem_bytes: p.elem_bytes,
        ..TransposeParams::default()
    };
    for d in (0..b).filter(|&d| d != a) {
        let k = t.rank as usize;
        t.shape[k] = p.shape[d];
        t.src_strides[k] = p.src_strides[d];
        t.dst_strides[k] = p.dst_strides[d];
        t.rank += 1;
        t.outer = t.outer.checked_mul(p.shape[d])?;
    }
    Some((t, [tiles(cols), tiles(rows), t.outer.clamp(1, 65_535)]))
}

/// Parameters of `softmax_rows` / `softmax_cols` (`struct softmax_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SoftmaxParams {
    /// Input.
    pub x: u64,
    /// Output.
    pub y: u64,
    /// Rows before the axis.
    pub outer: u32,
    /// Axis length.
    pub n: u32,
    /// Elements after the axis.
    pub inner: u32,
    /// Element type of x and y.
    pub dtype: u32,
    /// 1 for log-softmax.
    pub log: u32,
    /// Padding.
    pub pad: u32,
}

/// Parameters of `reduce_rows` / `reduce_cols` (`struct reduce_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReduceParams {
    /// Input.
    pub x: u64,
    /// Output.
    pub y: u64,
    /// Rows before the axes.
    pub outer: u32,
    /// Reduced length.
    pub n: u32,
    /// Elements after the axes.
    pub inner: u32,
    /// `ReduceKind` discriminant.
    pub kind: u32,
    /// Element type of x and y.
    pub dtype: u32,
    /// Padding.
    pub pad: u32,
}

/// Parameters of `gather` (`struct gather_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatherParams {
    /// Data.
    pub data: u64,
    /// Indices.
    pub indices: u64,
    /// Output.
    pub y: u64,
    /// Rows before the axis.
    pub outer: u32,
    /// Axis length.
    pub n: u32,
    /// Elements after the axis.
    pub inner: u32,
    /// Number of indices.
    pub count: u32,
    /// Bytes per data element.
    pub elem_bytes: u32,
    /// Bytes per index (4 or 8).
    pub index_bytes: u32,
}

/// Parameters of `resize2d` (`struct resize_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResizeParams {
    /// Input.
    pub x: u64,
    /// Output.
    pub y: u64,
    /// Row table (i32).
    pub iy: u64,
    /// Row weights (f32).
    pub wy: u64,
    /// Column table (i32).
    pub ix: u64,
    /// Column weights (f32).
    pub wx: u64,
    /// Leading planes.
    pub outer: u32,
    /// Input rows.
    pub h_in: u32,
    /// Input columns.
    pub w_in: u32,
    /// Output rows.
    pub h_out: u32,
    /// Output columns.
    pub w_out: u32,
    /// Taps per row.
    pub win_h: u32,
    /// Taps per column.
    pub win_w: u32,
    /// Input element type.
    pub x_dtype: u32,
    /// Output element type.
    pub y_dtype: u32,
    /// Padding.
    pub pad: u32,
}

// The CUDA source states the same sizes (static_assert there).
const _: () = assert!(std::mem::size_of::<ResizeParams>() == 88);
const _: () = assert!(std::mem::size_of::<EwOperand>() == 48);
const _: () = assert!(std::mem::size_of::<EwNode>() == 8);
const _: () = assert!(std::mem::size_of::<EwParams>() == 752);
const _: () = assert!(std::mem::size_of::<CopyParams>() == 128);
const _: () = assert!(std::mem::size_of::<SoftmaxParams>() == 40);
const _: () = assert!(std::mem::size_of::<ReduceParams>() == 40);
const _: () = assert!(std::mem::size_of::<GatherParams>() == 48);

/// The kernels, looked up once per plan.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    /// `ew_program`.
    pub ew: Function,
    /// `bias_act`.
    pub bias_act: Function,
    /// `strided_copy`.
    pub copy: Function,
    /// `tiled_transpose`.
    pub transpose: Function,
    /// `softmax_rows`.
    pub softmax_rows: Function,
    /// `softmax_cols`.
    pub softmax_cols: Function,
    /// `reduce_rows`.
    pub reduce_rows: Function,
    /// `reduce_cols`.
    pub reduce_cols: Function,
    /// `gather`.
    pub gather: Function,
    /// `resize2d`.
    pub resize: Function,
}

impl Kernels {
    /// Look every kernel up in `module`.
    ///
    /// # Errors
    /// [`CudaError::MissingKernel`].
    pub fn new(module: &KernelModule) -> Result<Self, CudaError> {
        Ok(Kernels {
            ew: module.function("ew_program")?,
            bias_act: module.function("bias_act")?,
            copy: module.function("strided_copy")?,
            transpose: module.function("tiled_transpose")?,
            softmax_rows: module.function("softmax_rows")?,
            softmax_cols: module.function("softmax_cols")?,
            reduce_rows: module.function("reduce_rows")?,
            reduce_cols: module.function("reduce_cols")?,
            gather: module.function("gather")?,
            resize: module.function("resize2d")?,
        })
    }
}

/// Collapse an index space: drop dimensions of size 1, order the rest by the first
/// operand's strides (largest first, so that consecutive threads write consecutive elements
/// of the first operand, the one written: an NHWC output is walked channels-innermost
/// whatever the logical `[N, C, H, W]` order; a kernel over this space computes each element
/// independently, so the order is free), and merge adjacent dimensions that every operand
/// walks contiguously (`stride[i] == stride[i + 1] * shape[i + 1]`). Returns the collapsed
/// shape (at least one dimension) and each operand's strides.
pub fn collapse(shape: &[usize], operands: &[&[isize]]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut keep: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
    if let Some(first) = operands.first() {
        // Stable: equal strides (broadcast or aliasing) keep the logical order.
        keep.sort_by_key(|&i| std::cmp::Reverse(first[i].unsigned_abs()));
    }
    let mut dims: Vec<usize> = Vec::new();
    let mut strides: Vec<Vec<isize>> = vec![Vec::new(); operands.len()];
    for &i in &keep {
        let merge = !dims.is_empty()
            && operands.iter().enumerate().all(|(k, s)| {
                let prev = *strides[k].last().expect("non-empty");
                prev == s[i] * shape[i] as isize
            });
        if merge {
            let last = dims.len() - 1;
            dims[last] *= shape[i];
            for (k, s) in operands.iter().enumerate() {
                let l = strides[k].len() - 1;
                strides[k][l] = s[i];
            }
        } else {
            dims.push(shape[i]);
            for (k, s) in operands.iter().enumerate() {
                strides[k].push(s[i]);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        for s in &mut strides {
            s.push(0);
        }
    }
    (dims, strides)
}

/// Why a step cannot be expressed as kernel parameters (load time only).
#[derive(Debug, thiserror::Error)]
#[error("step `{step}`: {detail}")]
pub struct ParamError {
    /// The step's node.
    pub step: String,
    /// What does not fit (index ranges, rank, program size).
    pub detail: String,
}

fn to_u32(v: usize, what: &str, step: &str) -> Result<u32, ParamError> {
    u32::try_from(v).map_err(|_| ParamError {
        step: step.into(),
        detail: format!("{what} {v} exceeds the kernels' 32-bit index range"),
    })
}

fn to_i32(v: isize, step: &str) -> Result<i32, ParamError> {
    i32::try_from(v).map_err(|_| ParamError {
        step: step.into(),
        detail: format!("stride {v} exceeds the kernels' 32-bit range"),
    })
}

/// Parameters of an element-wise step; `addr` gives each tensor's device address.
///
/// # Errors
/// [`ParamError`] when the index space exceeds 32 bits or the rank limit.
pub fn ew_params(
    g: &Graph,
    step: &str,
    inputs: &[TensorId],
    output: TensorId,
    program: &Program,
    addr: &dyn Fn(TensorId) -> u64,
) -> Result<EwParams, ParamError> {
    let out = g.tensor(output);
    let mut operands: Vec<&[isize]> = vec![&out.strides];
    for &t in inputs {
        operands.push(&g.tensor(t).strides);
    }
    let (shape, strides) = collapse(&out.shape, &operands);
    if shape.len() > MAX_RANK {
        return Err(ParamError {
            step: step.into(),
            detail: format!("rank {} after collapsing", shape.len()),
        });
    }
    let n = to_u32(out.numel(), "element count", step)?;
    let packed = shape.len() == 1 && strides.iter().all(|s| s[0] == 1);
    let operand = |t: &Tensor, s: &[isize], ptr: u64| -> Result<EwOperand, ParamError> {
        let mut o = EwOperand {
            ptr,
            dtype: t.dtype as u32,
            ..Default::default()
        };
        for (d, &v) in s.iter().enumerate() {
            o.strides[d] = to_i32(v, step)?;
        }
        Ok(o)
    };
    let mut p = EwParams {
        n,
        rank: shape.len() as u32,
        n_inputs: inputs.len() as u32,
        n_nodes: program.nodes.len() as u32,
        packed: packed as u32,
        pad: [0; 3],
        shape: [1; MAX_RANK],
        out: operand(out, &strides[0], addr(output))?,
        inputs: [EwOperand::default(); MAX_INPUTS],
        nodes: [EwNode::default(); MAX_NODES],
    };
    for (d, &v) in shape.iter().enumerate() {
        p.shape[d] = to_u32(v, "dimension", step)?;
    }
    for (k, &t) in inputs.iter().enumerate() {
        p.inputs[k] = operand(g.tensor(t), &strides[k + 1], addr(t))?;
    }
    for (j, e) in program.nodes.iter().enumerate() {
        p.nodes[j] = match *e {
            Expr::Input(k) => EwNode {
                op: 0,
                a: k as u8,
                ..Default::default()
            },
            Expr::Imm(v) => EwNode {
                op: 254,
                imm: v,
                ..Default::default()
            },
            Expr::Op { op, args, imm } => EwNode {
                op: op as u8,
                a: args[0] as u8,
                b: args[1] as u8,
                c: args[2] as u8,
                imm,
            },
        };
    }
    Ok(p)
}

/// Parameters of a strided copy of `src` into `dst` (same shape and element type).
///
/// # Errors
/// [`ParamError`] as for [`ew_params`].
pub fn copy_params(
    g: &Graph,
    step: &str,
    src: TensorId,
    dst: TensorId,
    addr: &dyn Fn(TensorId) -> u64,
) -> Result<CopyParams, ParamError> {
    let (s, d) = (g.tensor(src), g.tensor(dst));
    // Destination first: the walk follows its memory order (`tiled_transpose` takes it from
    // there when the source is contiguous along another dimension)...
    let (mut shape, mut strides) = collapse(&d.shape, &[&d.strides, &s.strides]);
    // ... unless the destination's contiguous run is shorter than a warp while the source's
    // is not (NCHW into NHWC with 3 channels): then the source's order, so that each warp
    // reads one run and writes a few interleaved ones.
    let short = |shape: &[usize], st: &[isize]| {
        st.last() != Some(&1) || shape.last().is_some_and(|&n| n < 32)
    };
    if short(&shape, &strides[0]) {
        let (s_shape, s_strides) = collapse(&d.shape, &[&s.strides, &d.strides]);
        if !short(&s_shape, &s_strides[0]) {
            shape = s_shape;
            strides = vec![s_strides[1].clone(), s_strides[0].clone()];
        }
    }
    if shape.len() > MAX_RANK {
        return Err(ParamError {
            step: step.into(),
            detail: format!("rank {} after collapsing", shape.len()),
        });
    }
    let mut p = CopyParams {
        n: to_u32(d.numel(), "element count", step)?,
        rank: shape.len() as u32,
        elem_bytes: d.dtype.size() as u32,
        src: addr(src),
        dst: addr(dst),
        ..Default::default()
    };
    for (k, &v) in shape.iter().enumerate() {
        p.shape[k] = to_u32(v, "dimension", step)?;
        p.dst_strides[k] = to_i32(strides[0][k], step)?;
        p.src_strides[k] = to_i32(strides[1][k], step)?;
    }
    Ok(p)
}

/// Whether a copy is one contiguous block on both sides (then it is a `cuMemcpyDtoDAsync`).
pub fn is_block_copy(g: &Graph, src: TensorId, dst: TensorId) -> bool {
    let (s, d) = (g.tensor(src), g.tensor(dst));
    s.is_packed() && d.is_packed() && s.dtype == d.dtype
}

/// Grid size for a grid-stride kernel over `n` elements with 256-thread blocks.
pub fn grid_for(n: u32) -> u32 {
    n.div_ceil(256).clamp(1, 65_535)
}

/// The element type code the kernels use.
pub fn dtype_code(dt: ElemType) -> u32 {
    dt as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_merges_contiguous_runs_and_drops_unit_dims() {
        // Bias add over [1, 16, 80, 80]: output packed, bias [1, 16, 1, 1] broadcast.
        let (shape, s) = collapse(&[1, 16, 80, 80], &[&[102_400, 6400, 80, 1], &[0, 1, 0, 0]]);
        assert_eq!(shape, vec![16, 6400]);
        assert_eq!(s, vec![vec![6400, 1], vec![1, 0]]);
        // Fully packed operands collapse to one dimension.
        let (shape, s) = collapse(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!(shape, vec![24]);
        assert_eq!(s, vec![vec![1], vec![1]]);
        // A scalar.
        let (shape, _) = collapse(&[1, 1], &[&[1, 1]]);
        assert_eq!(shape, vec![1]);
        // NHWC output and input over logical [1, 16, 8, 8]: walked channels-innermost, one
        // packed run; the per-channel bias becomes the innermost, repeating dimension.
        let nhwc: &[isize] = &[1024, 1, 128, 16];
        let (shape, s) = collapse(&[1, 16, 8, 8], &[nhwc, nhwc, &[0, 1, 0, 0]]);
        assert_eq!(shape, vec![64, 16]);
        assert_eq!(s, vec![vec![16, 1], vec![16, 1], vec![0, 1]]);
        // NHWC into NCHW (the head's conversion): the NCHW destination is walked in order.
        let (shape, s) = collapse(&[1, 16, 8, 8], &[&[1024, 64, 8, 1], nhwc]);
        assert_eq!(shape, vec![16, 64]);
        assert_eq!(s, vec![vec![64, 1], vec![1, 16]]);
    }

    /// Layout conversions: NHWC into an NCHW slot takes the tiled transpose (channels along
    /// the source's unit stride, pixels along the destination's); NCHW into NHWC with 3
    /// channels walks the source in order instead (a 3-element destination run would leave a
    /// tile nearly empty); a plain slice stays a strided copy.
    #[test]
    fn layout_conversions_take_the_tiled_transpose_or_the_source_order() {
        use crate::native::ir::BufferKind;
        let mut g = Graph::default();
        let view = |g: &mut Graph, shape: &[usize], strides: &[isize], offset: usize| {
            let b = g.add_buffer("b", ElemType::F16, 1 << 20, BufferKind::Activation);
            g.add_view(Tensor {
                name: "t".into(),
                buffer: b,
                dtype: ElemType::F16,
                shape: shape.to_vec(),
                offset,
                strides: strides.to_vec(),
            })
        };
        let addr = |t: TensorId| 0x10000 * (t.0 as u64 + 1);
        // [1, 64, 40, 40] NHWC into channels 0..64 of an NCHW [1, 144, 2100] head buffer.
        let nhwc = view(&mut g, &[1, 64, 40, 40], &[0, 1, 2560, 64], 0);
        let slot = view(&mut g, &[1, 64, 40, 40], &[0, 2100, 40, 1], 0);
        let p = copy_params(&g, "s", nhwc, slot, &addr).unwrap();
        let (t, grid) = transpose_params(&p).expect("tiled");
        assert_eq!(
            (t.rows, t.cols, t.src_b_stride, t.dst_a_stride),
            (64, 1600, 64, 2100)
        );
        assert_eq!((t.outer, t.rank, grid), (1, 0, [50, 2, 1]));
        // The network input [1, 3, 320, 320] NCHW into NHWC: source order, no tile.
        let nchw = view(&mut g, &[1, 3, 320, 320], &[0, 102_400, 320, 1], 0);
        let hwc = view(&mut g, &[1, 3, 320, 320], &[0, 1, 960, 3], 0);
        let p = copy_params(&g, "s", nchw, hwc, &addr).unwrap();
        assert!(transpose_params(&p).is_none());
        assert_eq!(&p.shape[..p.rank as usize], &[3, 102_400]);
        assert_eq!((p.src_strides[1], p.dst_strides[1]), (1, 3));
        // Channels 16..48 of an NHWC buffer into a packed NHWC one: no transposition.
        let part = view(&mut g, &[1, 32, 40, 40], &[0, 1, 2560, 64], 16);
        let packed = view(&mut g, &[1, 32, 40, 40], &[0, 1, 1280, 32], 0);
        let p = copy_params(&g, "s", part, packed, &addr).unwrap();
        assert!(transpose_params(&p).is_none());
    }

    /// A convolution's epilogue `silu(x + b)` over `[1, 16, 8, 8]` with `b` one value per
    /// channel takes the `bias_act` kernel (either operand order), and so do the residual
    /// block `silu(x + b) + r`, an output in a slot of a concatenation and a cast; a bias
    /// broadcast along another axis, another operator, a strided last axis or overlapping
    /// output planes keep the generic kernel.
    #[test]
    fn bias_act_takes_exactly_a_per_channel_bias_and_activation() {
        use crate::native::ir::program::EwOp;
        use crate::native::ir::{BufferKind, packed_strides};
        let shape = [1usize, 16, 8, 8];
        let mut g = Graph::default();
        let x = g.add_packed("x", ElemType::F32, &shape, BufferKind::Activation);
        let y = g.add_packed("y", ElemType::F32, &shape, BufferKind::Activation);
        let bias_buf = g.add_buffer("b", ElemType::F32, 16, BufferKind::Weight(vec![0; 64]));
        let view = |g: &mut Graph, strides: Vec<isize>| {
            g.add_view(Tensor {
                name: "b".into(),
                buffer: bias_buf,
                dtype: ElemType::F32,
                shape: shape.to_vec(),
                offset: 0,
                strides,
            })
        };
        let per_channel = view(&mut g, vec![0, 1, 0, 0]);
        let per_column = view(&mut g, vec![0, 0, 0, 1]);
        let op = |op, a| Expr::Op {
            op,
            args: [a, 1, 0],
            imm: 0.0,
        };
        let silu = Program {
            nodes: vec![
                Expr::Input(0),
                Expr::Input(1),
                op(EwOp::Add, 0),
                op(EwOp::Silu, 2),
            ],
        };
        let addr = |t: TensorId| 0x1000 * (t.0 as u64 + 1);
        let p = bias_act_params(&g, &[x, per_channel], y, &silu, &addr).expect("bias + SiLU");
        assert_eq!((p.n, p.inner, p.channels, p.act), (1024, 64, 16, 1));
        assert_eq!((p.x, p.b, p.y), (addr(x), addr(per_channel), addr(y)));
        // 1,024 elements: one per thread. Were it large enough, four along the 64-element
        // planes (aligned addresses), but not with an operand misaligned by 2 elements.
        assert_eq!((p.flags, p.threads()), (1, 1024));
        let mut big = p;
        big.try_vec4(0);
        assert_eq!((big.flags, big.threads()), (1 | 4, 256));
        let odd = |t: TensorId| addr(t) + if t == y { 2 } else { 0 };
        let mut p = bias_act_params(&g, &[x, per_channel], y, &silu, &odd).expect("bias + SiLU");
        p.try_vec4(0);
        assert_eq!((p.flags, p.threads()), (1, 1024));
        // Bias first: the same kernel with the operands swapped.
        let p = bias_act_params(&g, &[per_channel, x], y, &silu, &addr).expect("b + x");
        assert_eq!((p.x, p.b), (addr(x), addr(per_channel)));
        // Plain bias, and sigmoid.
        let bias = Program {
            nodes: silu.nodes[..3].to_vec(),
        };
        assert_eq!(
            bias_act_params(&g, &[x, per_channel], y, &bias, &addr).map(|p| p.act),
            Some(0)
        );
        let mut sig = silu.clone();
        sig.nodes[3] = op(EwOp::Sigmoid, 2);
        assert_eq!(
            bias_act_params(&g, &[x, per_channel], y, &sig, &addr).map(|p| p.act),
            Some(2)
        );
        // Not this kernel's: a bias along the last axis, another operator, a product.
        assert!(bias_act_params(&g, &[x, per_column], y, &silu, &addr).is_none());
        let mut tanh = silu.clone();
        tanh.nodes[3] = op(EwOp::Tanh, 2);
        assert!(bias_act_params(&g, &[x, per_channel], y, &tanh, &addr).is_none());
        let mut mul = silu.clone();
        mul.nodes[2] = op(EwOp::Mul, 0);
        assert!(bias_act_params(&g, &[x, per_channel], y, &mul, &addr).is_none());
        // A strided output (every other column of a wider buffer).
        let wide = g.add_buffer("w", ElemType::F32, 2048, BufferKind::Activation);
        let mut strides = packed_strides(&shape);
        strides.iter_mut().for_each(|s| *s *= 2);
        let strided = g.add_view(Tensor {
            name: "ys".into(),
            buffer: wide,
            dtype: ElemType::F32,
            shape: shape.to_vec(),
            offset: 0,
            strides,
        });
        assert!(bias_act_params(&g, &[x, per_channel], strided, &silu, &addr).is_none());

        // The residual block: `silu(x + b) + r` (r first or last), r a slice of channels.
        let mut res = silu.clone();
        res.nodes.push(Expr::Input(2));
        res.nodes.push(Expr::Op {
            op: EwOp::Add,
            args: [4, 3, 0],
            imm: 0.0,
        });
        let both = g.add_packed(
            "both",
            ElemType::F32,
            &[1, 32, 8, 8],
            BufferKind::Activation,
        );
        let upper = g.add_view(Tensor {
            name: "upper".into(),
            buffer: g.tensor(both).buffer,
            dtype: ElemType::F32,
            shape: shape.to_vec(),
            offset: 16 * 64,
            strides: packed_strides(&[1, 32, 8, 8]),
        });
        let p = bias_act_params(&g, &[x, per_channel, upper], y, &res, &addr).expect("residual");
        assert_eq!((p.act, p.flags, p.r, p.r_cs), (1, 3, addr(upper), 64));
        let mut swapped = res.clone();
        swapped.nodes[5] = Expr::Op {
            op: EwOp::Add,
            args: [3, 4, 0],
            imm: 0.0,
        };
        assert!(bias_act_params(&g, &[x, per_channel, upper], y, &swapped, &addr).is_some());
        // A residual times the activation is not this kernel's; nor is a missing third input.
        let mut times = res.clone();
        times.nodes[5] = Expr::Op {
            op: EwOp::Mul,
            args: [4, 3, 0],
            imm: 0.0,
        };
        assert!(bias_act_params(&g, &[x, per_channel, upper], y, &times, &addr).is_none());
        assert!(bias_act_params(&g, &[x, per_channel], y, &res, &addr).is_none());

        // A slot of a concatenation: channel stride 100 > 64 elements per plane.
        let cat = g.add_buffer("cat", ElemType::F32, 100 * 40, BufferKind::Activation);
        let slot = g.add_view(Tensor {
            name: "slot".into(),
            buffer: cat,
            dtype: ElemType::F32,
            shape: shape.to_vec(),
            offset: 0,
            strides: vec![4000, 100, 8, 1],
        });
        let p = bias_act_params(&g, &[x, per_channel], slot, &bias, &addr).expect("slot");
        assert_eq!((p.y_cs, p.y_os, p.flags), (100, 0, 1));
        // Overlapping channel planes (stride 32 < 64) would write elements twice.
        let overlap = g.add_view(Tensor {
            name: "overlap".into(),
            buffer: cat,
            dtype: ElemType::F32,
            shape: shape.to_vec(),
            offset: 0,
            strides: vec![4000, 32, 8, 1],
        });
        assert!(bias_act_params(&g, &[x, per_channel], overlap, &bias, &addr).is_none());

        // A cast: the program `in0`, fp32 to fp16.
        let y16 = g.add_packed("y16", ElemType::F16, &shape, BufferKind::Activation);
        let cast = Program {
            nodes: vec![Expr::Input(0)],
        };
        let p = bias_act_params(&g, &[x], y16, &cast, &addr).expect("cast");
        assert_eq!(
            (p.flags, p.act, p.b, p.y_dtype),
            (0, 0, 0, dtype_code(ElemType::F16))
        );

        // Channels-last (NHWC) operands: one run of 64 pixels, channels innermost; the output
        // a slot of 16 channels of a 40-channel NHWC concatenation.
        let nhwc = |g: &mut Graph, name: &str, buffer, cs: isize| {
            g.add_view(Tensor {
                name: name.into(),
                buffer,
                dtype: ElemType::F32,
                shape: shape.to_vec(),
                offset: 0,
                strides: vec![0, 1, 8 * cs, cs],
            })
        };
        let xb = g.tensor(x).buffer;
        let xn = nhwc(&mut g, "xn", xb, 16);
        let yn = nhwc(&mut g, "yn", cat, 40);
        let p = bias_act_params(&g, &[xn, per_channel], yn, &silu, &addr).expect("NHWC");
        assert_eq!((p.n, p.inner, p.channels), (1024, 1, 16));
        assert_eq!((p.x_cs, p.x_os, p.y_cs, p.y_os), (1, 16, 1, 40));
        // Large enough, four channels per thread: unit channel strides, pixel strides 16 and
        // 40 (multiples of 4); not with pixels 18 channels apart.
        let mut big = p;
        big.try_vec4(0);
        assert_eq!(big.flags, 1 | 4);
        big.flags = 1;
        big.y_os = 18;
        big.try_vec4(0);
        assert_eq!(big.flags, 1);
        // NHWC in, NCHW out: the forms differ, the generic kernel transposes.
        assert!(bias_act_params(&g, &[xn, per_channel], y, &silu, &addr).is_none());
        // Channel slots that overlap (40-channel pixels 32 apart) are refused.
        let tight = nhwc(&mut g, "tight", cat, 8);
        assert!(bias_act_params(&g, &[xn, per_channel], tight, &silu, &addr).is_none());
    }
}
