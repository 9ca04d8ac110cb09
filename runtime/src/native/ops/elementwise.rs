//! Element-wise steps: `output[i] = program(inputs[0][i], inputs[1][i], ...)`, one fused
//! program ([`Program`], the operator table of `crate::native::ir::program`) per step.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::Cast;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::logic::Iff;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::native::ir::error::LowerError;
use crate::native::ir::program::{EwOp, Expr, MAX_INPUTS, MAX_NODES, Program, apply};
use crate::native::ir::{BufferKind, ElemType, Tensor, TensorId, Views};
use crate::native::ops::op::{
    Call, DeviceMemory, HostMemory, KERNEL_RANK, Kernel, KernelCall, Lower, Op, ParamError, Uses,
    collapse, dtype_code, elem_type, grid_for, params, to_i32, to_u32, unsupported,
};

/// `output[i] = program(inputs[0][i], inputs[1][i], ...)` over the output's shape; every
/// input is a view with the output's shape (broadcasts are stride-0 views).
#[derive(Clone, Debug, PartialEq)]
pub struct Elementwise {
    /// Input views.
    pub inputs: Vec<TensorId>,
    /// Output view.
    pub output: TensorId,
    /// The per-element program.
    pub program: Program,
}

impl Op for Elementwise {
    const NAME: &'static str = "elementwise";

    fn reads(&self) -> Vec<TensorId> {
        self.inputs.clone()
    }

    fn writes(&self) -> TensorId {
        self.output
    }

    fn operands_mut(&mut self, f: &mut dyn FnMut(&mut TensorId, bool)) {
        for t in &mut self.inputs {
            f(t, false);
        }
        f(&mut self.output, true);
    }

    fn check(&self, g: &dyn Views) -> Result<(), String> {
        let out = g.tensor(self.output);
        for &t in &self.inputs {
            if g.tensor(t).shape != out.shape {
                return Err(format!(
                    "input `{}` {:?} vs output {:?}",
                    g.tensor(t).name,
                    g.tensor(t).shape,
                    out.shape
                ));
            }
        }
        self.program.validate(self.inputs.len())
    }

    const USES: Uses = Uses::Kernels;

    const KERNELS: &'static [Kernel] = &[
        Kernel {
            name: "ew_program",
            emulate: emulate_ew,
        },
        Kernel {
            name: "bias_act",
            emulate: emulate_bias_act,
        },
    ];

    fn reference(&self, mem: &mut dyn HostMemory) -> Result<(), String> {
        let vals: Vec<Vec<f32>> = self.inputs.iter().map(|&t| mem.read(t)).collect();
        let n = mem.views().tensor(self.output).numel();
        let mut out = vec![0f32; n];
        let mut args = vec![0f32; vals.len()];
        for (e, o) in out.iter_mut().enumerate() {
            for (a, v) in args.iter_mut().zip(&vals) {
                *a = v[e];
            }
            *o = self.program.eval(&args);
        }
        mem.write(self.output, &out);
        Ok(())
    }

    /// The `bias_act` kernel when the program is one of its forms ([`bias_act_params`]),
    /// else the generic `ew_program`.
    fn call(
        &self,
        g: &dyn Views,
        node: &str,
        addr: &dyn Fn(TensorId) -> u64,
    ) -> Result<Call, ParamError> {
        if let Some(call) = bias_act(g, self, addr) {
            return Ok(Call::Kernel(call));
        }
        let params = ew_params(g, node, &self.inputs, self.output, &self.program, addr)?;
        Ok(Call::Kernel(KernelCall::linear(
            "ew_program",
            grid_for(params.n),
            &params,
        )))
    }
}

/// The `bias_act` launch of `e` with its tensors at `addr`, when its program is one of the
/// kernel's forms ([`bias_act_params`]).
pub fn bias_act(g: &dyn Views, e: &Elementwise, addr: &dyn Fn(TensorId) -> u64) -> Option<KernelCall> {
    let params = bias_act_params(g, &e.inputs, e.output, &e.program, addr)?;
    Some(KernelCall::linear(
        "bias_act",
        grid_for(params.threads()),
        &params,
    ))
}

/// One operand of [`EwParams`] (`struct ew_operand`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
pub struct EwOperand {
    /// Device address of element `[0, 0, ...]`.
    pub ptr: u64,
    /// Stride per dimension of the collapsed shape, elements.
    pub strides: [i32; KERNEL_RANK],
    /// [`ElemType`] discriminant.
    pub dtype: u32,
    /// Padding.
    pub pad: u32,
}

/// One node of an element-wise program (`struct ew_node`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
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
#[derive(Clone, Copy, Debug, PartialEq, IntoBytes, FromBytes, Immutable)]
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
    pub shape: [u32; KERNEL_RANK],
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
#[derive(Clone, Copy, Debug, Default, PartialEq, IntoBytes, FromBytes, Immutable)]
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

// The CUDA source states the same sizes (static_assert there).
const _: () = assert!(std::mem::size_of::<EwOperand>() == 48);
const _: () = assert!(std::mem::size_of::<EwNode>() == 8);
const _: () = assert!(std::mem::size_of::<EwParams>() == 752);

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
    g: &dyn Views,
    inputs: &[TensorId],
    output: TensorId,
    program: &Program,
    addr: &dyn Fn(TensorId) -> u64,
) -> Option<BiasActParams> {
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

/// Parameters of an element-wise step; `addr` gives each tensor's device address.
///
/// # Errors
/// [`ParamError`] when the index space exceeds 32 bits or the rank limit.
pub fn ew_params(
    g: &dyn Views,
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
    if shape.len() > KERNEL_RANK {
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
        shape: [1; KERNEL_RANK],
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

/// `bias_act`, transcribed: `y = act(x [+ b[c]]) [+ r]` over `[outer, C, inner]` views; with
/// flag 4, four consecutive elements per thread through aligned vector accesses.
fn emulate_bias_act(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<BiasActParams>(call)?;
    let at = |o: u32, c: u32, j: u32, cs: u32, os: u32| {
        i64::from(o) * i64::from(os) + i64::from(c) * i64::from(cs) + i64::from(j)
    };
    let one = |a: f32, c: u32| -> Result<f32, String> {
        let mut a = a;
        if p.flags & 1 != 0 {
            a += r.load(p.b, i64::from(c), p.b_dtype)?;
        }
        Ok(match p.act {
            1 => apply(EwOp::Silu, a, 0.0, 0.0, 0.0),
            2 => apply(EwOp::Sigmoid, a, 0.0, 0.0, 0.0),
            _ => a,
        })
    };
    if p.flags & 4 != 0 {
        // A vector access faults on the GPU unless aligned to its size.
        let aligned = |base: u64, index: i64, dtype: u32| {
            let es = if dtype == 1 { 2 } else { 4 };
            let a = base as i64 + index * es;
            if a % (4 * es) == 0 {
                Ok(())
            } else {
                Err(format!("misaligned 4-element access at {a:#x}"))
            }
        };
        for q in 0..p.n / 4 {
            let i = q * 4;
            let (j, t) = (i % p.inner, i / p.inner);
            let (c, o) = (t % p.channels, t / p.channels);
            let xi = at(o, c, j, p.x_cs, p.x_os);
            aligned(p.x, xi, p.x_dtype)?;
            let mut a = [0f32; 4];
            for (k, v) in a.iter_mut().enumerate() {
                let x = r.load(p.x, xi + k as i64, p.x_dtype)?;
                *v = one(x, if p.inner == 1 { c + k as u32 } else { c })?;
            }
            if p.flags & 2 != 0 {
                let ri = at(o, c, j, p.r_cs, p.r_os);
                aligned(p.r, ri, p.r_dtype)?;
                for (k, v) in a.iter_mut().enumerate() {
                    *v += r.load(p.r, ri + k as i64, p.r_dtype)?;
                }
            }
            let yi = at(o, c, j, p.y_cs, p.y_os);
            aligned(p.y, yi, p.y_dtype)?;
            for (k, &v) in a.iter().enumerate() {
                r.store(p.y, yi + k as i64, p.y_dtype, v)?;
            }
        }
        return Ok(());
    }
    for i in 0..p.n {
        let (j, t) = (i % p.inner, i / p.inner);
        let (c, o) = (t % p.channels, t / p.channels);
        let mut a = one(r.load(p.x, at(o, c, j, p.x_cs, p.x_os), p.x_dtype)?, c)?;
        if p.flags & 2 != 0 {
            // r + a as the kernel writes it (fp32 addition commutes: the same value).
            a += r.load(p.r, at(o, c, j, p.r_cs, p.r_os), p.r_dtype)?;
        }
        r.store(p.y, at(o, c, j, p.y_cs, p.y_os), p.y_dtype, a)?;
    }
    Ok(())
}

/// `ew_program`, transcribed: the program interpreted per element.
fn emulate_ew(call: &KernelCall, r: &dyn DeviceMemory) -> Result<(), String> {
    let p = &params::<EwParams>(call)?;
    for i in 0..p.n {
        let mut off_out = i as i64;
        let mut off_in = [i as i64; 8];
        if p.packed == 0 {
            off_out = 0;
            off_in = [0; 8];
            let mut rem = i;
            for d in (0..p.rank as usize).rev() {
                let dim = p.shape[d];
                let q = rem / dim;
                let c = (rem - q * dim) as i64;
                rem = q;
                off_out += c * p.out.strides[d] as i64;
                for (o, input) in off_in.iter_mut().zip(&p.inputs[..p.n_inputs as usize]) {
                    *o += c * input.strides[d] as i64;
                }
            }
        }
        let mut regs = [0f32; 32];
        for j in 0..p.n_nodes as usize {
            let nd = p.nodes[j];
            regs[j] = match nd.op {
                0 => {
                    let a = nd.a as usize;
                    r.load(p.inputs[a].ptr, off_in[a], p.inputs[a].dtype)?
                }
                254 => nd.imm,
                code => {
                    let op = EwOp::from_code(code).ok_or_else(|| format!("op code {code}"))?;
                    apply(
                        op,
                        regs[nd.a as usize],
                        regs[nd.b as usize],
                        regs[nd.c as usize],
                        nd.imm,
                    )
                }
            };
        }
        r.store(p.out.ptr,
            off_out,
            p.out.dtype,
            regs[p.n_nodes as usize - 1],
        )?;
    }
    Ok(())
}

/// Lower `node` when it is an element-wise tract operator: a binary operator (`Add`, `Mul`,
/// comparisons, logic, ...), a unary one (`Sigmoid`, `Exp`, GELU, ...), a `Cast` or an `Iff`
/// (ONNX `Where`); `None` for anything else.
pub fn lower<L: Lower>(l: &mut L, node: &TypedNode) -> Option<Result<(), LowerError>>
where
    L::Step: From<Elementwise>,
{
    if let Some(op) = node.op_as::<TypedBinOp>() {
        return Some(binary(l, node, op));
    }
    if let Some(op) = node.op_as::<ElementWiseOp>() {
        return Some(unary(l, node, op));
    }
    if let Some(op) = node.op_as::<Cast>() {
        return Some(cast(l, node, op));
    }
    if node.op_as::<Iff>().is_some() {
        return Some(select(l, node));
    }
    None
}

fn binary<L: Lower>(
    l: &mut L, node: &TypedNode, op: &TypedBinOp) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    if op.1.is_some() {
        return Err(unsupported(node, "quantised output type"));
    }
    let (ew, swap, logic) = match op.0.name() {
        "Add" => (EwOp::Add, false, false),
        "Sub" => (EwOp::Sub, false, false),
        "SubF" => (EwOp::Sub, true, false),
        "Mul" => (EwOp::Mul, false, false),
        "Div" => (EwOp::Div, false, false),
        "Min" => (EwOp::Min, false, false),
        "Max" => (EwOp::Max, false, false),
        "Pow" => (EwOp::Pow, false, false),
        "Eq" => (EwOp::Eq, false, false),
        "NE" => (EwOp::Ne, false, false),
        "LT" => (EwOp::Lt, false, false),
        "GT" => (EwOp::Gt, false, false),
        "LTE" => (EwOp::Le, false, false),
        "GTE" => (EwOp::Ge, false, false),
        "And" => (EwOp::And, false, true),
        "Or" => (EwOp::Or, false, true),
        "Xor" => (EwOp::Xor, false, true),
        other => return Err(unsupported(node, format!("binary operator {other}"))),
    };
    let (out_shape, out_dt) = l.output_fact(node, 0)?;
    let (ia, ib) = if swap { (1, 0) } else { (0, 1) };
    let mut operands = Vec::new();
    let mut imms = Vec::new();
    for slot in [ia, ib] {
        let outlet = node.inputs[slot];
        if let Some(v) = l.scalar_const(outlet) {
            imms.push(Some(v));
            continue;
        }
        imms.push(None);
        let t = l.outlet(outlet)?;
        let dt = l.tensor(t).dtype;
        let ok = if logic {
            dt == ElemType::Bool
        } else {
            dt.is_float()
        };
        if !ok {
            return Err(unsupported(
                node,
                format!(
                    "{} on {dt} operands (the engine computes in fp32)",
                    op.0.name()
                ),
            ));
        }
        operands.push(l.broadcast_to(t, &out_shape, node)?);
    }
    let program = match (imms[0], imms[1]) {
        (None, None) => Program::binary(ew),
        (None, Some(v)) => Program::binary_imm(ew, v, false),
        (Some(v), None) => Program::binary_imm(ew, v, true),
        (Some(_), Some(_)) => {
            return Err(unsupported(node, "binary operator over two constants"));
        }
    };
    let y = l.add_packed(&node.name, out_dt, &out_shape, BufferKind::Activation);
    l.set_output(node, 0, y);
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: operands,
            output: y,
            program,
        }),
    );
    Ok(())
}

fn unary<L: Lower>(
    l: &mut L, node: &TypedNode, op: &ElementWiseOp) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    use tract_onnx::tract_core::ops::nn::LeakyRelu;
    if op.1.is_some() {
        return Err(unsupported(node, "quantised output type"));
    }
    let name = op.0.name();
    let mut imm = 0.0f32;
    let ew = match name.as_str() {
        "Neg" => EwOp::Neg,
        "Abs" => EwOp::Abs,
        "Exp" => EwOp::Exp,
        "Ln" => EwOp::Ln,
        "Sqrt" => EwOp::Sqrt,
        "Rsqrt" => EwOp::Rsqrt,
        "Recip" => EwOp::Recip,
        "Sigmoid" => EwOp::Sigmoid,
        "Tanh" => EwOp::Tanh,
        "Erf" => EwOp::Erf,
        "Silu" => EwOp::Silu,
        "Floor" => EwOp::Floor,
        "Ceil" => EwOp::Ceil,
        "Round" => EwOp::Round,
        "RoundHalfToEven" => EwOp::RoundEven,
        "Sin" => EwOp::Sin,
        "Cos" => EwOp::Cos,
        "Square" => EwOp::Square,
        "Sign" => EwOp::Sign,
        "HardSwish" => EwOp::HardSwish,
        "GeluExact" => EwOp::GeluExact,
        "IsNan" => EwOp::IsNan,
        "IsInf" => {
            use tract_onnx::tract_core::ops::math::IsInf;
            let f =
                op.0.downcast_ref::<IsInf>()
                    .ok_or_else(|| unsupported(node, "IsInf of an unknown type"))?;
            imm = (f.detect_positive as u8 | (f.detect_negative as u8) << 1) as f32;
            EwOp::IsInf
        }
        "GeluApproximate" => {
            use tract_onnx::tract_core::ops::nn::gelu_approximate::GeluApproximate;
            let g =
                op.0.downcast_ref::<GeluApproximate>()
                    .ok_or_else(|| unsupported(node, "GeluApproximate of an unknown type"))?;
            imm = if g.fast_impl { 2.0 } else { 3.0 };
            EwOp::GeluTanh
        }
        "Not" => EwOp::Not,
        "LeakyRelu" => {
            let l =
                op.0.downcast_ref::<LeakyRelu>()
                    .ok_or_else(|| unsupported(node, "LeakyRelu of an unknown type"))?;
            imm = l.alpha;
            EwOp::LeakyRelu
        }
        other => return Err(unsupported(node, format!("element-wise operator {other}"))),
    };
    let x = l.outlet(node.inputs[0])?;
    let dt = l.tensor(x).dtype;
    let ok = if ew == EwOp::Not {
        dt == ElemType::Bool
    } else {
        dt.is_float()
    };
    if !ok {
        return Err(unsupported(node, format!("{name} on {dt}")));
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: vec![x],
            output: y,
            program: Program::unary(ew, imm),
        }),
    );
    Ok(())
}

fn cast<L: Lower>(
    l: &mut L, node: &TypedNode, op: &Cast) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    let x = l.outlet(node.inputs[0])?;
    let from = l.tensor(x).dtype;
    let to =
        elem_type(op.to).ok_or_else(|| unsupported(node, format!("cast to {:?}", op.to)))?;
    if from == to {
        l.set_output(node, 0, x);
        return Ok(());
    }
    // fp32 carries every value of these conversions exactly (or rounds it the way
    // Rust's `as` does); integer-to-integer casts wrap in tract and would saturate here.
    let exact =
        to.is_float() || from.is_float() || from == ElemType::Bool || to == ElemType::Bool;
    if !exact {
        return Err(unsupported(node, format!("cast {from} -> {to}")));
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: vec![x],
            output: y,
            program: Program::identity(),
        }),
    );
    Ok(())
}

fn select<L: Lower>(
    l: &mut L, node: &TypedNode) -> Result<(), LowerError>
where
    L::Step: From<Elementwise>,
{
    let (shape, _) = l.output_fact(node, 0)?;
    let mut ins = Vec::new();
    for slot in 0..3 {
        let t = l.outlet(node.inputs[slot])?;
        let dt = l.tensor(t).dtype;
        if slot > 0 && !dt.is_float() {
            return Err(unsupported(node, format!("select over {dt} values")));
        }
        ins.push(l.broadcast_to(t, &shape, node)?);
    }
    let y = l.new_output(node, 0)?;
    l.push(
        node,
        L::Step::from(Elementwise {
            inputs: ins,
            output: y,
            program: Program::select(),
        }),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A convolution's epilogue `silu(x + b)` over `[1, 16, 8, 8]` with `b` one value per
    /// channel takes the `bias_act` kernel (either operand order), and so do the residual
    /// block `silu(x + b) + r`, an output in a slot of a concatenation and a cast; a bias
    /// broadcast along another axis, another operator, a strided last axis or overlapping
    /// output planes keep the generic kernel.
    #[test]
    fn bias_act_takes_exactly_a_per_channel_bias_and_activation() {
        use crate::native::graph::Graph;
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
