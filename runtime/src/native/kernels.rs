//! The engine's kernel library (`runtime/kernels/native.cu`): the embedded images, the
//! kernels' parameter structs (one `#[repr(C)]` struct per kernel, mirrored field for field by
//! the CUDA source, sizes checked on both sides), and their construction from IR steps.

use crate::cuda::{CudaError, Function, KernelImage, KernelModule};

use super::ir::{ElemType, Graph, Tensor, TensorId};
use super::program::{Expr, MAX_INPUTS, MAX_NODES, Program};

/// Rank of the kernels' index space (after collapsing).
pub const MAX_RANK: usize = 8;

/// The embedded kernel images (rebuilt by `runtime/kernels/build-kernels.sh`, digests in
/// `runtime/kernels/bin/SHA256SUMS`, architectures checked by `list-archs.sh` in CI).
pub static KERNEL_IMAGES: &[KernelImage] = &[
    KernelImage {
        name: "native.cu13.fatbin",
        cuda_major: 13,
        sm: None,
        bytes: include_bytes!("../../kernels/bin/native.cu13.fatbin"),
    },
    KernelImage {
        name: "native.cu12.sm_87.cubin",
        cuda_major: 12,
        sm: Some(87),
        bytes: include_bytes!("../../kernels/bin/native.cu12.sm_87.cubin"),
    },
    KernelImage {
        name: "native.cu12.sm_90.cubin",
        cuda_major: 12,
        sm: Some(90),
        bytes: include_bytes!("../../kernels/bin/native.cu12.sm_90.cubin"),
    },
    KernelImage {
        name: "native.cu12.sm_100.cubin",
        cuda_major: 12,
        sm: Some(100),
        bytes: include_bytes!("../../kernels/bin/native.cu12.sm_100.cubin"),
    },
];

/// The kernels' CUDA C source (for the opt-in NVRTC fallback).
pub const KERNEL_SOURCE: &str = include_str!("../../kernels/native.cu");

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

/// Parameters of `bias_act` (`struct bias_act_params`): `y = act(x + b[c])` over a packed
/// `[outer, C, inner]` tensor, one bias value per channel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BiasActParams {
    /// Element 0 of `x`.
    pub x: u64,
    /// Element 0 of the per-channel bias (`C` elements).
    pub b: u64,
    /// Element 0 of `y`.
    pub y: u64,
    /// Elements of `x` and `y`.
    pub n: u32,
    /// Elements per channel plane (product of the axes after the channel axis).
    pub inner: u32,
    /// Channels.
    pub channels: u32,
    /// 0: none, 1: SiLU, 2: sigmoid.
    pub act: u32,
    /// Element type codes of `x`, `b`, `y` ([`dtype_code`]).
    pub x_dtype: u32,
    /// See `x_dtype`.
    pub b_dtype: u32,
    /// See `x_dtype`.
    pub y_dtype: u32,
    /// Padding.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<BiasActParams>() == 56);

/// The `bias_act` form of an element-wise step, when it is exactly `act(x + b)` (act: none,
/// SiLU, sigmoid) with `x` and the output packed and of the same shape, `b` broadcast along
/// every axis but axis 1 (the channel axis of NC... layouts), all of them f32 or f16: a
/// convolution's bias and activation. `None` for anything else (the generic `ew_program`
/// runs it). Same formulas as [`super::program::apply`], so the same results.
pub fn bias_act_params(
    g: &Graph,
    inputs: &[TensorId],
    output: TensorId,
    program: &Program,
    addr: &dyn Fn(TensorId) -> u64,
) -> Option<BiasActParams> {
    use super::program::EwOp;
    let nodes = &program.nodes;
    if inputs.len() != 2 || !(3..=4).contains(&nodes.len()) {
        return None;
    }
    let (Expr::Input(p), Expr::Input(q)) = (&nodes[0], &nodes[1]) else {
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
    if !matches!((a0, a1), (0, 1) | (1, 0)) || *p == *q || *p > 1 || *q > 1 {
        return None;
    }
    let act = match nodes.get(3) {
        None => 0,
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
        Some(_) => return None,
    };
    let out = g.tensor(output);
    let float = |dt: ElemType| matches!(dt, ElemType::F32 | ElemType::F16);
    if out.shape.len() < 2 || !out.is_packed() || !float(out.dtype) {
        return None;
    }
    let n = u32::try_from(out.numel()).ok().filter(|&n| n > 0)?;
    let channels = u32::try_from(out.shape[1]).ok()?;
    let inner = u32::try_from(out.shape[2..].iter().product::<usize>()).ok()?;
    for (xi, bi) in [(*p, *q), (*q, *p)] {
        let (xid, bid) = (inputs[xi], inputs[bi]);
        let (x, b) = (g.tensor(xid), g.tensor(bid));
        let per_channel = b.shape == out.shape
            && b.strides
                .iter()
                .enumerate()
                .all(|(d, &s)| out.shape[d] == 1 || if d == 1 { s == 1 } else { s == 0 });
        if x.shape == out.shape && x.is_packed() && float(x.dtype) && float(b.dtype) && per_channel
        {
            return Some(BiasActParams {
                x: addr(xid),
                b: addr(bid),
                y: addr(output),
                n,
                inner,
                channels,
                act,
                x_dtype: dtype_code(x.dtype),
                b_dtype: dtype_code(b.dtype),
                y_dtype: dtype_code(out.dtype),
                pad: 0,
            });
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
            softmax_rows: module.function("softmax_rows")?,
            softmax_cols: module.function("softmax_cols")?,
            reduce_rows: module.function("reduce_rows")?,
            reduce_cols: module.function("reduce_cols")?,
            gather: module.function("gather")?,
            resize: module.function("resize2d")?,
        })
    }
}

/// Collapse an index space: drop dimensions of size 1 and merge adjacent dimensions that
/// every operand walks contiguously (`stride[i] == stride[i + 1] * shape[i + 1]`). Returns
/// the collapsed shape (at least one dimension) and each operand's strides.
pub fn collapse(shape: &[usize], operands: &[&[isize]]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let keep: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
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
    let (shape, strides) = collapse(&d.shape, &[&s.strides, &d.strides]);
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
        p.src_strides[k] = to_i32(strides[0][k], step)?;
        p.dst_strides[k] = to_i32(strides[1][k], step)?;
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
    }

    /// A convolution's epilogue `silu(x + b)` over `[1, 16, 8, 8]` with `b` one value per
    /// channel takes the `bias_act` kernel (either operand order); a bias broadcast along
    /// another axis, a third operator or a strided output keep the generic kernel.
    #[test]
    fn bias_act_takes_exactly_a_per_channel_bias_and_activation() {
        use super::super::ir::{BufferKind, packed_strides};
        use super::super::program::EwOp;
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
    }
}
